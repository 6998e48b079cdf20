"""A fault injector (not a broker): a TCP relay in front of a real broker. For connections
whose first request carries client id ``victim`` it forwards only the first half of the first
response frame and then closes both sides -- a broker dying mid-response, at a precise byte,
which killing the real broker cannot time. For client id ``unsolicited`` it appends a
response frame that answers no request (correlation id 999999). Every other connection is
relayed untouched.

    python cutting_relay.py LISTEN_PORT TARGET_PORT

Runs until killed. Loopback only."""

from __future__ import annotations

import asyncio
import struct
import sys


class Leg(asyncio.Protocol):
    def __init__(self) -> None:
        self.peer: Leg | None = None
        self.transport: asyncio.Transport | None = None
        self.early: list[bytes] = []
        self.victim: str | None = None  # the first request's client id (client side)
        self.injected = False
        self.buf = b""  # response bytes of a victim connection, until half a frame is in
        self.is_upstream = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.is_upstream and self.victim is None and len(data) >= 14:
            n = struct.unpack_from(">h", data, 12)[0]
            self.victim = data[14:14 + n].decode(errors="replace")
        if self.is_upstream and self.peer is not None and self.peer.victim == "unsolicited" and not self.injected:
            self.injected = True
            assert self.peer.transport is not None
            self.peer.transport.write(data + struct.pack(">ii", 4, 999999))
            return
        if self.is_upstream and self.peer is not None and self.peer.victim == "victim":
            self.buf += data
            if len(self.buf) >= 4:
                size = struct.unpack_from(">i", self.buf)[0]
                half = 4 + size // 2
                if len(self.buf) >= half:
                    assert self.peer.transport is not None and self.transport is not None
                    self.peer.transport.write(self.buf[:half])
                    self.peer.transport.close()
                    self.transport.close()
            return
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)
        else:
            self.early.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


async def main(listen_port: int, target_port: int) -> None:
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    def factory() -> Leg:
        client = Leg()

        async def connect() -> None:
            try:
                _, up = await loop.create_connection(Leg, "127.0.0.1", target_port)
            except OSError:
                if client.transport is not None:
                    client.transport.close()
                return
            up.is_upstream = True
            client.peer, up.peer = up, client
            for chunk in client.early:
                up.transport.write(chunk)  # type: ignore[union-attr]
            client.early.clear()

        task = loop.create_task(connect())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return client

    server = await loop.create_server(factory, "127.0.0.1", listen_port)
    print("ready", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
