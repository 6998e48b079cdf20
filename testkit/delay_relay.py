"""A user-space TCP relay that delays every chunk by a fixed time in each direction: the
known network delay for ground-truth latency tests (no kernel netem on this machine).

    python delay_relay.py LISTEN_PORT TARGET_PORT DELAY_MS [HOLDS_JSON]

Runs until killed. Loopback only. Order is kept: equal delays fire in scheduling order.

A timer fires late (the event loop sleeps in whole milliseconds, and a busy machine adds its
own), so the relay adds a little more than DELAY_MS each way. With HOLDS_JSON it measures what
it really added: on SIGTERM (and on SIGUSR1, going on) it writes, per direction ("to_broker",
"to_client"), the number of chunks held and the p50/p90/max of their hold in ms. A ground truth built on the relay uses
these, not the nominal delay."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import sys
from collections.abc import Callable
from typing import Any

HOLDS_KEPT = 200_000  # per direction: bounded memory however long the relay runs
HOLDS: dict[str, list[float]] = {"to_broker": [], "to_client": []}  # seconds each chunk was held


class Leg(asyncio.Protocol):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.peer: Leg | None = None
        self.transport: asyncio.Transport | None = None
        self.early: list[bytes] = []
        self.direction = "to_broker"  # what this leg receives goes to the broker, until linked()

    def linked(self) -> None:  # called by serve() on the broker-facing leg
        self.direction = "to_client"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        if self.delay_s > 0:
            loop.call_later(self.delay_s, self._forward_held, data, loop.time())
        else:
            self._forward(data)

    def _forward_held(self, data: bytes, received: float) -> None:
        held = HOLDS[self.direction]
        if len(held) < HOLDS_KEPT:
            held.append(asyncio.get_running_loop().time() - received)
        self._forward(data)

    def _forward(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)
        else:
            self.early.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            asyncio.get_running_loop().call_later(self.delay_s, self.peer.transport.close)


async def serve(listen_port: int, target_port: int, make_leg: Callable[[], Any]) -> None:
    """Relay every connection to ``target_port`` with legs made by ``make_leg`` (attributes
    ``peer``, ``transport``, ``early``, and an optional ``linked()`` hook); prints "ready"."""
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    def factory() -> Any:
        client = make_leg()

        async def connect() -> None:
            try:
                _, upstream = await loop.create_connection(make_leg, "127.0.0.1", target_port)
            except OSError:
                if client.transport is not None:
                    client.transport.close()
                return
            client.peer, upstream.peer = upstream, client
            if hasattr(upstream, "linked"):
                upstream.linked()
            for chunk in client.early:
                upstream.transport.write(chunk)
            client.early.clear()

        task = loop.create_task(connect())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return client

    server = await loop.create_server(factory, "127.0.0.1", listen_port)
    print("ready", flush=True)
    await server.serve_forever()


def hold_summary() -> dict[str, dict[str, float]]:
    """Per direction: chunks held, and the p50/p90/max of their hold in ms."""
    out: dict[str, dict[str, float]] = {}
    for direction, held in HOLDS.items():
        ms = sorted(h * 1000 for h in held)
        out[direction] = {"chunks": len(ms), "p50_ms": statistics.median(ms) if ms else 0.0,
                          "p90_ms": ms[int(0.9 * (len(ms) - 1))] if ms else 0.0, "max_ms": ms[-1] if ms else 0.0}
    return out


def write_holds(holds_path: str) -> None:
    tmp = holds_path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(hold_summary(), fh)
    os.replace(tmp, holds_path)  # a reader never sees half a file


async def main(listen_port: int, target_port: int, delay_ms: float, holds_path: str | None) -> None:
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, lambda: stop.done() or stop.set_result(None))
    if holds_path:  # the holds so far, on demand, the relay going on
        loop.add_signal_handler(signal.SIGUSR1, write_holds, holds_path)
    relay = loop.create_task(serve(listen_port, target_port, lambda: Leg(delay_ms / 1000)))
    await asyncio.wait([relay, stop], return_when=asyncio.FIRST_COMPLETED)
    relay.cancel()
    if holds_path:
        write_holds(holds_path)


if __name__ == "__main__":
    holds_json = sys.argv[4] if len(sys.argv) > 4 else None
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), holds_json))
