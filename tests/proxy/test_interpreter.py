"""The proxy's threads hand the interpreter over every millisecond (``proxy/interpreter.py``)."""

from __future__ import annotations

import sys

from fetchlat.proxy import interpreter


def test_the_loop_waits_at_most_a_millisecond_for_another_thread() -> None:
    before = sys.getswitchinterval()
    try:
        assert interpreter.share_interpreter() == before
        assert sys.getswitchinterval() == interpreter.SWITCH_INTERVAL_S == 0.001
    finally:
        sys.setswitchinterval(before)
