"""proxy/heartbeat.py: one tick does its work in its order (the loop's lag, the relay's drain,
the rows' hold, the asks for topics, the core's timers, the timeouts), sets the next first, and
keeps ticking when one tick raises."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from fetchlat.proxy.heartbeat import TICK_S, Heartbeat


class Calls(list[str]):
    def __call__(self, name: str, result: Any = None) -> Any:
        def record(*_args: Any) -> Any:
            self.append(name)
            if isinstance(result, BaseException):
                raise result
            return result
        return record


def parts(calls: Calls, close: object = None, asks: bool = True, drain_raises: bool = False) -> dict[str, Any]:
    metrics = SimpleNamespace(loop_lag=SimpleNamespace(observe=calls("lag")),
                              loop_late_ticks=SimpleNamespace(labels=lambda *_: SimpleNamespace(inc=lambda *_: None)))
    observer = SimpleNamespace(set_clock=calls("clock"), date_awaiting=calls("date"))
    discovery = SimpleNamespace(asks_topics=calls("asks?", asks), kick=calls("kick"))
    relay = SimpleNamespace(drain=calls("drain", RuntimeError("a bug") if drain_raises else None),
                            tick=calls("timers"))
    sess = SimpleNamespace(conv=SimpleNamespace(expire=calls("expire", close)), apply=calls("apply"))
    return {"metrics": metrics, "observer": observer, "discovery": discovery, "sessions": [sess], "relay": relay}


def test_a_tick_does_its_work_in_order_and_sets_the_next() -> None:
    calls = Calls()

    async def run() -> Heartbeat:
        hb = Heartbeat(**parts(calls, close="a close"))
        hb.start(asyncio.get_running_loop())
        hb._tick()
        assert hb._handle is not None and not hb._handle.cancelled()
        hb.stop()
        return hb

    hb = asyncio.run(run())
    assert calls == ["lag", "date", "drain", "asks?", "kick", "clock", "timers", "expire", "apply"]
    assert hb.age_s() < 5.0


def test_a_tick_that_raises_does_not_stop_the_ticking() -> None:
    calls = Calls()

    async def run() -> None:
        hb = Heartbeat(**parts(calls, asks=False, drain_raises=True))
        hb.start(asyncio.get_running_loop())
        with pytest.raises(RuntimeError):
            hb._tick()
        assert hb._handle is not None and not hb._handle.cancelled()  # the next was set before the drain
        hb.stop()

    asyncio.run(run())
    assert calls == ["lag", "date", "drain"] and TICK_S == 1.0


def test_the_loop_probe_runs_beside_the_heartbeat_when_asked_for() -> None:
    async def run(probe: bool) -> Heartbeat:
        hb = Heartbeat(**parts(Calls()))
        hb.start(asyncio.get_running_loop(), probe=probe)
        if probe:
            assert hb.probe is not None and hb.probe._thread is not None and hb.probe._thread.is_alive()
            assert hb.probe.due_ns() == hb._due_ns  # it reads the tick this heartbeat set
        hb.stop()
        return hb

    assert asyncio.run(run(False)).probe is None
    hb = asyncio.run(run(True))
    assert hb.probe is not None and hb.probe._thread is not None and not hb.probe._thread.is_alive()
