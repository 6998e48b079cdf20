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

from delay_relay import serve  # the same relay, run from this directory


class Leg(asyncio.Protocol):
    def __init__(self) -> None:
        self.peer: Leg | None = None
        self.transport: asyncio.Transport | None = None
        self.early: list[bytes] = []
        self.victim: str | None = None  # the first request's client id (client side)
        self.injected = False
        self.buf = b""  # response bytes of a victim connection, until half a frame is in
        self.is_upstream = False

    def linked(self) -> None:  # called on the broker-side leg once both legs exist
        self.is_upstream = True

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


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), int(sys.argv[2]), Leg))
