"""Kernel receive stamps (proxy/stamps.py) on real loopback sockets under uvloop: a read is
stamped with its packet's arrival, not with when a busy event loop got to it."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
import uvloop
from fetchlat.proxy import clock
from fetchlat.proxy.stamps import CLOCK, KERNEL, StampCounts, StampedReader, kernel_stamps_possible, stamp_source

from testkit.stamping import kernel_stamping

pytestmark = pytest.mark.skipif(not kernel_stamps_possible(), reason="kernel receive stamps need Linux")


class Reading(asyncio.Protocol):
    """A protocol whose socket a StampedReader takes over; what the transport itself would
    deliver lands in ``direct`` (it should get nothing)."""

    def __init__(self, counts: StampCounts) -> None:
        self.counts = counts
        self.got: list[tuple[bytes, int]] = []
        self.direct: list[bytes] = []
        self.eofs = 0
        self.errors: list[OSError] = []
        self.lost = asyncio.get_running_loop().create_future()
        self.reader: StampedReader | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.reader = StampedReader.open(asyncio.get_running_loop(), transport, self.counts,
                                         lambda data, t: self.got.append((data, t)), self.eof, self.errors.append)

    def eof(self) -> None:
        self.eofs += 1
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.direct.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.reader is not None:
            self.reader.stop()
        self.lost.set_result(exc)


async def connected(counts: StampCounts) -> tuple[socket.socket, Reading, socket.socket]:
    """A listening socket, the peer accepted on it (blocking, for a thread to write on), and
    the protocol of the loop's side."""
    loop = asyncio.get_running_loop()
    server = socket.create_server(("127.0.0.1", 0))
    _, proto = await loop.create_connection(lambda: Reading(counts), *server.getsockname())
    peer, _ = server.accept()
    return server, proto, peer


async def settle(proto: Reading, n: int, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(proto.got) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


def test_a_busy_loop_does_not_delay_the_stamp() -> None:
    """The peer writes while the loop is blocked for 150 ms: the read comes 150 ms late, its
    stamp is the packet's arrival (within a few ms of the write)."""

    async def run() -> tuple[int, int, int, Reading]:
        counts = StampCounts()
        server, proto, peer = await connected(counts)
        sent: list[int] = []

        def write_later() -> None:
            time.sleep(0.02)
            sent.append(clock.now_ns())
            peer.sendall(b"response")

        threading.Thread(target=write_later).start()
        time.sleep(0.17)  # the loop is busy: nothing is read until this returns
        read_at = clock.now_ns()
        await settle(proto, 1)
        peer.close()
        server.close()
        await asyncio.wait_for(proto.lost, 5)
        return sent[0], read_at, counts.kernel, proto

    with kernel_stamping():
        sent_ns, read_ns, kernel, proto = uvloop.run(run())
    assert [d for d, _ in proto.got] == [b"response"] and proto.direct == []
    stamp_ns = proto.got[0][1]
    assert read_ns - sent_ns > 100_000_000  # the loop got to it late
    assert abs(stamp_ns - sent_ns) < 20_000_000, (stamp_ns - sent_ns) / 1e6  # the stamp did not
    assert stamp_ns <= read_ns
    assert kernel == 1
    assert proto.eofs == 1 and proto.errors == []


def test_pause_holds_bytes_in_the_socket_and_order_is_kept() -> None:
    async def run() -> tuple[list[bytes], int, Reading]:
        counts = StampCounts()
        server, proto, peer = await connected(counts)
        assert proto.reader is not None
        peer.sendall(b"a" * 1000)
        await settle(proto, 1)
        proto.reader.pause()
        peer.sendall(b"b" * 1000)
        await asyncio.sleep(0.1)
        held = len(proto.got)
        proto.reader.resume()
        await settle(proto, 2)
        peer.sendall(b"c" * 1000)
        await settle(proto, 3)
        peer.close()
        server.close()
        await asyncio.wait_for(proto.lost, 5)
        return [d for d, _ in proto.got], held, proto

    chunks, held, proto = uvloop.run(run())
    assert held == 1
    assert b"".join(chunks) == b"a" * 1000 + b"b" * 1000 + b"c" * 1000
    assert all(t1 <= t2 for (_, t1), (_, t2) in zip(proto.got, proto.got[1:], strict=False))
    assert proto.direct == []


def test_a_reset_is_reported_and_the_connection_ends() -> None:
    async def run() -> Reading:
        server, proto, peer = await connected(StampCounts())
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
        peer.close()
        server.close()
        deadline = time.monotonic() + 5
        while not proto.errors and not proto.eofs and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        if proto.errors:
            proto.transport.abort()
        await asyncio.wait_for(proto.lost, 5)
        return proto

    proto = uvloop.run(run())
    assert [type(e) for e in proto.errors] == [ConnectionResetError]
    assert proto.reader is not None and proto.reader.stopped


def test_the_source_follows_the_setting() -> None:
    assert stamp_source("kernel") == KERNEL
    assert stamp_source("clock") == CLOCK


def _add_reader_even_when_paused(self, fd, callback, *args):  # type: ignore[no-untyped-def]
    """CPython's ``_SelectorTransport._add_reader`` without the fix of gh-103607 (as in Debian
    12's Python 3.11.2): a transport paused in connection_made starts reading anyway."""
    if self._closing:
        return
    self._loop._add_reader(fd, callback, *args)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio", "asyncio-3.11.2"])
def test_the_transport_itself_never_reads_once_the_reader_took_over(loop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On every loop the proxy or the tests' relays run on, every byte reaches the reader, in
    order, and the transport reads none (two readers of one socket split its bytes between them:
    a broker's answers then reach the client out of order)."""
    if loop == "asyncio-3.11.2":
        from asyncio import selector_events

        monkeypatch.setattr(selector_events._SelectorTransport, "_add_reader", _add_reader_even_when_paused)
    sent = [bytes([65 + i % 26]) * (1000 + i) for i in range(40)]

    async def run() -> Reading:
        counts = StampCounts()
        server, proto, peer = await connected(counts)
        for chunk in sent:  # in bursts the loop reads as they come, across several iterations
            peer.sendall(chunk)
            await asyncio.sleep(0.002)
        deadline = time.monotonic() + 5
        while sum(len(d) for d, _ in proto.got) + sum(map(len, proto.direct)) < sum(map(len, sent)) \
                and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        peer.close()
        server.close()
        await asyncio.wait_for(proto.lost, 5)
        return proto

    proto = uvloop.run(run()) if loop == "uvloop" else asyncio.run(run())
    assert proto.direct == []
    assert b"".join(d for d, _ in proto.got) == b"".join(sent)
