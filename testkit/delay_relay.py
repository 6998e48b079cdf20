"""A user-space TCP relay that delays every chunk by a fixed time in each direction: the
known network delay for ground-truth latency tests (no kernel netem on this machine).

    python delay_relay.py LISTEN_PORT TARGET_PORT DELAY_MS

Runs until killed. Loopback only. Order is kept: equal delays fire in scheduling order."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any


class Leg(asyncio.Protocol):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.peer: Leg | None = None
        self.transport: asyncio.Transport | None = None
        self.early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        if self.delay_s > 0:
            loop.call_later(self.delay_s, self._forward, data)
        else:
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


async def main(listen_port: int, target_port: int, delay_ms: float) -> None:
    await serve(listen_port, target_port, lambda: Leg(delay_ms / 1000))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
