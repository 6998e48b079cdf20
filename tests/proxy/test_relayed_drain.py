"""The drain of the core's queue (``proxy/relayed.py``, ``RelayRoad.drain``): an item that
raises on its way to its connection costs that connection alone. The rest of the batch, close
notices included, reaches the others; the failure is counted and the failing connection ended."""

from __future__ import annotations

import socket
import time

import pytest
from fetchlat import native
from fetchlat.metrics.prom import ProxyMetrics
from fetchlat.protocol.rewrite import ResponseRewriter
from fetchlat.proxy.relayed import RelayRoad

from testkit.wire_roads import loopback_pair

pytestmark = pytest.mark.skipif(native.core() is None, reason=f"native core not loaded: {native.reason()}")


class FakeClient:
    """What the drain calls on a connection; ``fail`` makes every call raise."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.closed: list[str] = []

    def relayed_closed(self, reason: str, counts: tuple[int, int]) -> None:
        if self.fail:
            raise RuntimeError("a bug in one connection's bookkeeping")
        self.closed.append(reason)

    def relayed_timers(self, *args: object) -> None:
        pass

    def relayed(self, *args: object) -> None:
        if self.fail:
            raise RuntimeError("a bug in one connection's bookkeeping")


def test_an_item_that_raises_costs_its_connection_alone_and_is_counted() -> None:
    core = native.core()
    metrics = ProxyMetrics()
    road = RelayRoad(core, 1 << 20, ResponseRewriter(None, cap_versions=False), metrics)
    ends: list[socket.socket] = []
    clients = [FakeClient(fail=True), FakeClient(fail=False), FakeClient(fail=False)]
    try:
        for c in clients:
            relay_client, client = loopback_pair()
            relay_broker, broker = loopback_pair()
            road.add(c, relay_client.detach(), relay_broker.detach())
            ends += [client, broker]
        for s in ends[1::2]:
            s.close()  # every broker goes: a batch of three close notices, the first one's raising
        deadline = time.monotonic() + 10
        while not all(c.closed for c in clients[1:]):
            assert time.monotonic() < deadline, "a close notice was lost"
            road.drain()
            time.sleep(0.01)
        assert [c.closed for c in clients[1:]] == [["broker closed the connection"]] * 2
        failed = metrics.registry.get_sample_value("fetchlat_connection_errors_total", {"reason": "relay_item_failed"})
        assert failed == 1
        assert road.conns == {}
    finally:
        road.close()
        for s in ends:
            s.close()
