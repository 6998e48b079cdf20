"""proxy/throttled_log.py: one line per key every few seconds at most, the next one saying how
many were suppressed; keys apart are apart."""

from __future__ import annotations

import logging

import pytest
from fetchlat.proxy import clock
from fetchlat.proxy.throttled_log import ThrottledLog


def test_one_line_per_key_then_the_count_suppressed(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    now = [1_000_000_000_000]
    monkeypatch.setattr(clock, "now_ns", lambda: now[0])
    log = ThrottledLog(logging.getLogger("fetchlat.test.throttled"))
    with caplog.at_level(logging.WARNING, logger="fetchlat.test.throttled"):
        for i in range(1000):  # a broker restart seen by 1000 clients
            log("upstream_lost", logging.WARNING, "client %d lost its broker", i)
        log("other", logging.WARNING, "another kind")
        now[0] += 6_000_000_000
        log("upstream_lost", logging.WARNING, "client %d lost its broker", 1000)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["client 0 lost its broker", "another kind",
                     "client 1000 lost its broker [999 similar suppressed in the last 6 s]"]
