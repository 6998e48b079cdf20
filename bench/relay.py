"""A zero-decode TCP relay in Python on uvloop: the floor for any proxy written the way
fetchlat is (asyncio protocols, one event loop). bench_proxy runs it beside haproxy and
fetchlat, so what fetchlat's decoding costs is told apart from what Python's I/O costs.

    python bench/relay.py --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT
"""

from __future__ import annotations

import argparse
import asyncio

import uvloop


class Side(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: Side | None = None
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.pending.append(data)

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class Client(Side):
    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__()
        self.upstream = upstream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, broker = await loop.create_connection(Side, *self.upstream)
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        broker.peer, self.peer = self, broker
        assert broker.transport is not None
        broker.transport.writelines(self.pending)
        self.pending.clear()


async def main(listen: tuple[str, int], upstream: tuple[str, int]) -> None:
    server = await asyncio.get_running_loop().create_server(lambda: Client(upstream), *listen)
    async with server:
        await server.serve_forever()


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", type=_addr, required=True)
    ap.add_argument("--upstream", type=_addr, required=True)
    a = ap.parse_args()
    uvloop.run(main(a.listen, a.upstream))
