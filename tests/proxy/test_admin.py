"""The admin endpoint's server: it answers /metrics and /health, sleeps while nobody asks (no
timer of its own), and stops at once."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest
from fetchlat.proxy.admin import AdminServer
from prometheus_client import CollectorRegistry, Counter

from testkit.procfs import voluntary_switches


def test_it_answers_sleeps_while_idle_and_stops_at_once() -> None:
    registry = CollectorRegistry()
    Counter("fetchlat_test_things", "things", registry=registry).inc()
    admin = AdminServer(("127.0.0.1", 0), registry, lambda: {"live": True, "ready": False})
    admin.start()
    base = f"http://127.0.0.1:{admin.port}"
    try:
        assert b"fetchlat_test_things_total 1.0" in urllib.request.urlopen(f"{base}/metrics", timeout=5).read()
        assert urllib.request.urlopen(f"{base}/health/live", timeout=5).status == 200
        with pytest.raises(urllib.error.HTTPError) as not_ready:
            urllib.request.urlopen(f"{base}/health/ready", timeout=5)
        assert not_ready.value.code == 503
        time.sleep(0.2)
        tid = admin.thread.native_id
        assert tid is not None
        before = voluntary_switches(tid)
        time.sleep(1.6)  # socketserver's serve_forever looked for a shutdown every 0.5 s
        assert voluntary_switches(tid) - before <= 1
    finally:
        t0 = time.monotonic()
        admin.stop()
        stopped_s = time.monotonic() - t0
    assert not admin.thread.is_alive()
    assert stopped_s < 1.0
