"""Kernel receive stamping, switched on and seen on, for tests that count kernel stamps.

Linux stamps packets only while some socket asks for it, and the first socket to ask turns it on
through deferred work (``net_enable_timestamp``): on a busy machine, the packets of the next few
milliseconds can come without a stamp. The proxy holds a socket open for this from its start
(``proxy.stamps.keep_stamping_on``); a test that reads sockets by hand holds one the same way and
waits until the kernel is seen stamping, so its figures count stamps, not that race."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

from fetchlat.proxy.stamps import ANCILLARY_BYTES, SO_TIMESTAMPNS, keep_stamping_on


@contextmanager
def kernel_stamping(timeout_s: float = 10.0) -> Iterator[None]:
    """Hold the kernel's receive stamping on for the block, once a TCP packet has come stamped
    (a datagram would not tell: the socket layer stamps one at the read when the kernel did not)."""
    keeper = keep_stamping_on()
    assert keeper is not None, "kernel receive stamps cannot be switched on here"
    with keeper, socket.create_server(("127.0.0.1", 0)) as server:
        with socket.create_connection(server.getsockname()) as sender, server.accept()[0] as receiver:
            receiver.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            receiver.settimeout(1.0)
            deadline = time.monotonic() + timeout_s
            while True:
                sender.sendall(b"?")
                _, ancillary, _, _ = receiver.recvmsg(8, ANCILLARY_BYTES)
                if any(level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS for level, kind, _ in ancillary):
                    break
                assert time.monotonic() < deadline, f"the kernel did not stamp a packet within {timeout_s} s"
                time.sleep(0.001)
        yield
