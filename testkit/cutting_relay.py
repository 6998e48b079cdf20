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

import delay_relay  # the same relay, run from this directory
from delay_relay import serve


class Leg(delay_relay.Leg):
    """The delay relay's leg with no delay, plus the two faults."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.victim: str | None = None  # the first request's client id (client side)
        self.injected = False
        self.buf = b""  # response bytes of a victim connection, until half a frame is in
        self.is_upstream = False

    def linked(self) -> None:  # called on the broker-side leg once both legs exist
        self.is_upstream = True

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if not self.is_upstream and self.victim is None and len(data) >= 14:
            n = struct.unpack_from(">h", data, 12)[0]
            self.victim = data[14:14 + n].decode(errors="replace")
        victim = peer.victim if self.is_upstream and isinstance(peer, Leg) else None
        if victim == "unsolicited" and not self.injected:
            self.injected = True
            super().data_received(data + struct.pack(">ii", 4, 999999))
        elif victim == "victim":
            self.buf += data
            half = 4 + struct.unpack_from(">i", self.buf)[0] // 2 if len(self.buf) >= 4 else None
            if half is not None and len(self.buf) >= half:
                assert peer is not None and peer.transport is not None and self.transport is not None
                peer.transport.write(self.buf[:half])
                peer.transport.close()
                self.transport.close()
        else:
            super().data_received(data)


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), int(sys.argv[2]), Leg))
