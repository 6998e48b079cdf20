"""Log lines throttled by key: one line per key every few seconds at most, saying how many were
suppressed, so a broker restart with 1000 clients connected is one event, not 1000 log lines."""

from __future__ import annotations

import logging

from . import clock


class ThrottledLog:
    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self._last: dict[str, tuple[float, int]] = {}  # key -> (last logged monotonic s, suppressed)

    def __call__(self, key: str, level: int, msg: str, *args: object, every_s: float = 5.0) -> None:
        """One line per ``key`` every ``every_s`` at most."""
        now = clock.now_ns() / 1e9
        last, suppressed = self._last.get(key, (-1e18, 0))
        if now - last < every_s:
            self._last[key] = (last, suppressed + 1)
            return
        if suppressed:
            msg += f" [{suppressed} similar suppressed in the last {now - last:.0f} s]"
        self._last[key] = (now, 0)
        self.log.log(level, msg, *args)
