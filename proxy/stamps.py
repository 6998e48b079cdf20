"""Receive stamps from the kernel: a response's bytes are stamped with the time the kernel took
their last packet in, not the time the event loop got round to reading them.

A busy event loop reads a socket late; a clock read at that moment makes every response late by
the loop's lag, and a sidecar whose core fills up at a traffic peak would measure worst exactly
when it matters. Linux records a receive time per packet when ``SO_TIMESTAMPNS`` is on, and
hands it over only as ancillary data of ``recvmsg``, which uvloop's transports do not use. So a
plain TCP connection to the broker is read here: the transport keeps writing and closing, its own
reading stays paused, and a duplicate of its descriptor is read with ``recvmsg_into`` into one
buffer the whole process reuses. The stamp of a read is the kernel's time for the last packet it returned (a
``CLOCK_REALTIME`` time, moved onto the monotonic clock the rest of fetchlat uses by an offset
read apart from the reads, ``clock.WallOffset``: a preemption between two clock reads of a busy
proxy cannot move a stamp).

Where no stamp can be had (not Linux, TLS towards the broker: its records are decrypted by the
transport, or the socket option refused) the clock read stays. ``StampCounts`` says how many
reads were stamped from each source (``fetchlat_stamps_total{source}``); the proxy logs at start
which source it uses and labels ``fetchlat_build_info{stamps}`` with it.

Where the native core is loaded (``native/``), each read is its ``StampedRecv.recv``: the same
``recvmsg`` into a buffer the core owns, the stamp parsed there, the bytes and the kernel's time
handed back as one pair (no tuples, ancillary list or struct unpack per read); the clock reads
and the move onto the monotonic clock stay here. ``tests/proxy/test_stamps_native.py`` holds
the two roads to the same bytes, stamps and errors.

Requests keep the clock: the proxy writes a request to the broker the moment it reads it, so the
clock read then is when the broker's part begins; the time the request sat in the proxy's socket
before that was the proxy's own, not the broker's.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import sys
from collections.abc import Callable
from typing import Any, Final

from .. import native
from . import clock

SO_TIMESTAMPNS: Final = 35  # Linux (SO_TIMESTAMPNS_OLD); Python's socket module does not name it
READ_BYTES: Final = 256 << 10  # the most one read returns (uvloop's read buffer is the same size)
ANCILLARY_BYTES: Final = 64  # room for one struct timespec in a control message
KERNEL: Final = "kernel"
CLOCK: Final = "clock"
_TIMESPEC: Final = struct.Struct("qq")
# One read buffer for every reader of the process: a read is copied out of it before it is handed
# on, and the event loop runs one reader at a time (a buffer per connection would cost 256 KiB of
# memory per broker connection)
_BUF: Final = bytearray(READ_BYTES)
_VIEW: Final = memoryview(_BUF)
_BUFS: Final = [_VIEW]
_CORE: Final = native.core()
# the native core's reader (it owns its own buffer, the same size), or None: the Python road
_NATIVE_RECV: Final = _CORE.StampedRecv() if _CORE is not None else None
_WALL: Final = clock.WallOffset()  # moves the kernel's CLOCK_REALTIME stamps onto the monotonic clock


def road() -> str:
    """Which road reads broker sockets: ``native`` or ``python``."""
    return "native" if _NATIVE_RECV is not None else "python"


def kernel_stamps_possible() -> bool:
    """True where the kernel gives a receive time per packet (Linux)."""
    return sys.platform.startswith("linux") and hasattr(socket.socket, "recvmsg_into")


def stamp_source(asked: str) -> str:
    """Where this proxy's response stamps come from: kernel when asked for and possible (a
    connection to a broker over TLS still uses the clock), else clock."""
    return KERNEL if asked == KERNEL and kernel_stamps_possible() else CLOCK


def keep_stamping_on() -> socket.socket | None:
    """A socket that holds the kernel's receive stamping on for as long as it is open. Linux
    stamps packets only while some socket asks for it, and turns that on lazily (deferred work)
    when the first one does: without this, the first reads of a proxy's first broker connection,
    or of one after a quiet spell with none open, can come without a stamp."""
    if not kernel_stamps_possible():
        return None
    try:
        keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        return None
    try:
        keeper.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        keeper.close()
        return None
    return keeper


class StampCounts:
    """Reads stamped by each source, counted by the readers, read at scrape time."""

    def __init__(self) -> None:
        self.kernel = 0
        self.clock = 0


def _pause_for_good(transport: Any) -> None:
    """Pause ``transport``'s own reading once more, after it started: uvloop starts it whatever
    connection_made did, and so does CPython's selector loop without the fix of gh-103607 (Debian
    12's Python 3.11.2: it adds its reader even when paused), where a second ``pause_reading`` is
    a no-op (the flag is already set): so the pause is unset and set again. Two readers of one
    socket would split its bytes between them, out of order."""
    if transport.is_closing():
        return
    transport.resume_reading()
    transport.pause_reading()


class StampedReader:
    """Reads one plain TCP connection with ``recvmsg_into`` and hands each read on with its stamp.

    ``deliver(data, t_ns)`` gets the bytes and the monotonic time their last packet arrived;
    ``eof()`` is called when the peer closed its side, ``failed(exc)`` when a read failed. The
    caller pauses and resumes it (backpressure) and stops it when the connection is lost.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, counts: StampCounts,
                 deliver: Callable[[bytes, int], None], eof: Callable[[], None],
                 failed: Callable[[OSError], None]) -> None:
        self.loop = loop
        self.sock = sock
        self.fd = sock.fileno()
        self.counts = counts
        self.deliver = deliver
        self.eof = eof
        self.failed = failed
        self.reading = False
        self.stopped = False

    @staticmethod
    def open(loop: asyncio.AbstractEventLoop, transport: asyncio.BaseTransport, counts: StampCounts,
             deliver: Callable[[bytes, int], None], eof: Callable[[], None],
             failed: Callable[[OSError], None]) -> StampedReader | None:
        """Take over reading ``transport``'s socket, or None (the transport reads on, clock-stamped)."""
        raw = transport.get_extra_info("socket")
        if raw is None:
            return None
        try:
            fd = os.dup(raw.fileno())
        except (OSError, AttributeError, ValueError):
            return None
        try:
            sock = socket.socket(raw.family, socket.SOCK_STREAM, 0, fd)  # type and protocol named: no getsockopt
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            sock.setblocking(False)
        except OSError:
            os.close(fd)
            return None
        reader = StampedReader(loop, sock, counts, deliver, eof, failed)
        # for good: this reader reads instead. A transport starts its reading just after
        # connection_made returns, so the pause is made again just after that (before any
        # request goes out: a broker speaks only when asked)
        pause: Callable[[], None] = transport.pause_reading  # type: ignore[attr-defined]
        pause()
        loop.call_soon(_pause_for_good, transport)
        reader.resume()
        return reader

    def pause(self) -> None:
        if self.reading:
            self.reading = False
            self.loop.remove_reader(self.fd)

    def resume(self) -> None:
        if not self.reading and not self.stopped:
            self.reading = True
            self.loop.add_reader(self.fd, self._readable)

    def stop(self) -> None:
        """No more reads; the duplicate descriptor is closed (the transport closes its own)."""
        if not self.stopped:
            self.pause()
            self.stopped = True
            self.sock.close()

    def _readable(self) -> None:
        if _NATIVE_RECV is not None:
            self._readable_native(_NATIVE_RECV)
        else:
            self._readable_python()

    def _readable_python(self) -> None:
        try:
            n, ancillary, _, _ = self.sock.recvmsg_into(_BUFS, ANCILLARY_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.stop()
            self.failed(exc)
            return
        if n == 0:
            self.stop()
            self.eof()
            return
        t_ns = now = clock.now_ns()
        stamped = False
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= 16:
                sec, nsec = _TIMESPEC.unpack_from(payload)
                t_ns = min(now, sec * 1_000_000_000 + nsec - _WALL.at(now))
                stamped = True
        if stamped:
            self.counts.kernel += 1
        else:
            self.counts.clock += 1
        self.deliver(bytes(_VIEW[:n]), t_ns)

    def _readable_native(self, recv: Any) -> None:
        """The same read through the native core: ``(bytes, wall_ns)`` (``wall_ns`` -1 without
        a kernel stamp), None for nothing there, empty bytes at the peer's close."""
        try:
            got = recv.recv(self.fd)
        except OSError as exc:
            self.stop()
            self.failed(exc)
            return
        if got is None:
            return
        data, wall_ns = got
        if not data:
            self.stop()
            self.eof()
            return
        t_ns = now = clock.now_ns()
        if wall_ns >= 0:
            t_ns = min(now, wall_ns - _WALL.at(now))
            self.counts.kernel += 1
        else:
            self.counts.clock += 1
        self.deliver(data, t_ns)
