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


def test_a_scrape_first_has_the_proxy_take_what_the_core_queued() -> None:
    """/metrics runs ``before_scrape`` first (the heartbeat's ``settle``): a scrape right after a
    client finished counts its relayed fetches, not a tick later."""
    import asyncio
    import threading
    from types import SimpleNamespace

    from fetchlat.proxy.heartbeat import Heartbeat

    registry = CollectorRegistry()
    things = Counter("fetchlat_test_things", "things", registry=registry)
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    drained: list[str] = []

    def drain() -> None:  # on the loop's thread, as the relay road's drain runs
        drained.append(threading.current_thread().name)
        things.inc()

    heartbeat = SimpleNamespace(loop=loop, relay=SimpleNamespace(drain=drain))
    admin = AdminServer(("127.0.0.1", 0), registry, lambda: {"live": True, "ready": True},
                        lambda: Heartbeat.settle(heartbeat))  # type: ignore[arg-type]
    admin.start()
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{admin.port}/metrics", timeout=5).read()
        assert b"fetchlat_test_things_total 1.0" in body and drained == [runner.name]
        urllib.request.urlopen(f"http://127.0.0.1:{admin.port}/health", timeout=5).read()
        assert len(drained) == 1  # health asks nothing of the loop
        # a loop that does not answer: the scrape waits at most the timeout, then answers
        blocked = threading.Event()
        loop.call_soon_threadsafe(blocked.wait, 5.0)
        t0 = time.monotonic()
        Heartbeat.settle(heartbeat, timeout_s=0.2)  # type: ignore[arg-type]
        assert 0.15 <= time.monotonic() - t0 < 2.0
        blocked.set()
    finally:
        admin.stop()
        loop.call_soon_threadsafe(loop.stop)
        runner.join(5)
        loop.close()
    Heartbeat.settle(heartbeat)  # type: ignore[arg-type]  # a closed loop: nothing to wait for
