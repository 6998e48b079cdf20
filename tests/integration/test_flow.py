"""Flow control through the real proxy process: pipelined requests, backpressure both ways
(a client that does not read stalls the broker instead of filling the proxy's memory), and a
close on either side propagated to the other. The broker here is a FAKE that streams large
responses on demand (Tansu cannot be told to)."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fetchlat.protocol import apis
from fetchlat.protocol.framing import request_frame
from fetchlat.protocol.primitives import encode_string

from testkit.procfs import rss_bytes

from .conftest import ProxyProc, start_proxy, stop_proxy

pytestmark = pytest.mark.integration

RESPONSE_BYTES = 1024 * 1024


@dataclass
class Firehose:
    """FAKE broker: answers each Fetch v11 request with a 1 MiB response (streamed by the
    proxy, never decoded), and a Metadata v1 request with itself as broker 0. ``eof_seen`` is
    set when a connection that asked for more than Metadata closes: a client's, relayed by the
    proxy (the proxy's own Metadata connections, its discovery's and its calibration's, open and
    close at their own pace)."""

    port: int = 0
    written: int = 0
    eof_seen: threading.Event = field(default_factory=threading.Event)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    def start(self) -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def serve() -> None:
            server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()

        def run() -> None:
            self.loop.run_until_complete(serve())
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.wait(10)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def close_all(self) -> None:
        def close() -> None:
            for w in self.writers:
                w.close()
        self.loop.call_soon_threadsafe(close)

    async def _conn(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.writers.append(w)
        clients = False
        try:
            while True:
                size = struct.unpack(">i", await r.readexactly(4))[0]
                frame = await r.readexactly(size)
                key, _, corr = struct.unpack(">hhi", frame[:8])
                if key == apis.METADATA:  # v1: brokers [0 -> us], controller, no topics
                    body = (struct.pack(">i", 1) + struct.pack(">i", 0) + encode_string("127.0.0.1", False)
                            + struct.pack(">i", self.port) + encode_string(None, False)
                            + struct.pack(">i", 0) + struct.pack(">i", 0))
                else:
                    clients = True
                    body = bytes(RESPONSE_BYTES)
                out = struct.pack(">i", corr) + body
                w.write(len(out).to_bytes(4, "big") + out)
                await w.drain()
                self.written += len(out) + 4
        except (asyncio.IncompleteReadError, ConnectionError):
            if clients:
                self.eof_seen.set()
            w.close()


@pytest.fixture
def firehose() -> Iterator[Firehose]:
    f = Firehose()
    f.start()
    yield f
    f.stop()


@pytest.fixture
def flow_proxy(firehose: Firehose, tmp_path: Path) -> Iterator[ProxyProc]:
    p = start_proxy(f"127.0.0.1:{firehose.port}", tmp_path)
    yield p
    stop_proxy(p)


def fetch_request(corr: int) -> bytes:
    return request_frame(apis.FETCH, 11, corr, "flow", bytes(40))


def test_pipelined_requests_answered_in_order(flow_proxy: ProxyProc) -> None:
    s = socket.create_connection(("127.0.0.1", flow_proxy.listen_port), timeout=10)
    s.sendall(b"".join(fetch_request(i) for i in range(1, 6)))
    corrs = []
    buf = b""
    while len(corrs) < 5:
        chunk = s.recv(1 << 20)
        assert chunk
        buf += chunk
        while len(buf) >= 8 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
            n = struct.unpack(">i", buf[:4])[0]
            corrs.append(struct.unpack(">i", buf[4:8])[0])
            buf = buf[4 + n:]
    assert corrs == [1, 2, 3, 4, 5]
    s.close()


def test_a_client_that_does_not_read_stalls_the_broker_not_the_proxy(firehose: Firehose,
                                                                      flow_proxy: ProxyProc) -> None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    s.connect(("127.0.0.1", flow_proxy.listen_port))
    requests = 300  # asks for 300 MiB of responses, then never reads
    s.sendall(b"".join(fetch_request(i) for i in range(1, requests + 1)))
    rss_before = rss_bytes(flow_proxy.proc.pid)
    time.sleep(3)
    written = firehose.written
    rss_after = rss_bytes(flow_proxy.proc.pid)
    assert written < 64 * RESPONSE_BYTES, f"broker wrote {written} bytes: the proxy kept reading"
    assert rss_after - rss_before < 64 * 1024 * 1024
    # once the client reads, everything flows
    s.settimeout(20)
    got = 0
    deadline = time.monotonic() + 60
    while got < requests * (RESPONSE_BYTES + 8) and time.monotonic() < deadline:
        chunk = s.recv(1 << 20)
        assert chunk
        got += len(chunk)
    assert got == requests * (RESPONSE_BYTES + 8)
    s.close()


def test_client_close_reaches_the_broker(firehose: Firehose, flow_proxy: ProxyProc) -> None:
    s = socket.create_connection(("127.0.0.1", flow_proxy.listen_port), timeout=10)
    s.sendall(fetch_request(1))
    s.recv(1)
    firehose.eof_seen.clear()
    s.close()
    assert firehose.eof_seen.wait(5)


def test_broker_close_reaches_the_client(firehose: Firehose, flow_proxy: ProxyProc) -> None:
    s = socket.create_connection(("127.0.0.1", flow_proxy.listen_port), timeout=10)
    s.sendall(fetch_request(1))
    got = 0
    while got < RESPONSE_BYTES + 8:
        got += len(s.recv(1 << 20))
    firehose.close_all()
    s.settimeout(5)
    assert s.recv(1) == b""  # EOF, after every byte already sent
    s.close()


def test_a_client_that_never_reads_is_closed_after_the_stall_timeout(firehose: Firehose, tmp_path: Path) -> None:
    cfg = tmp_path / "stall.yaml"
    cfg.write_text("stalled_client_timeout_s: 2\n")
    p = start_proxy(f"127.0.0.1:{firehose.port}", tmp_path, "--config", str(cfg))
    try:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        s.connect(("127.0.0.1", p.listen_port))
        s.sendall(b"".join(fetch_request(i) for i in range(1, 101)))  # 100 MiB asked for, never read
        firehose.eof_seen.clear()
        assert firehose.eof_seen.wait(15), "the proxy kept the stalled connection open"
        assert p.log().count("client not reading; closing this connection") == 1
        assert firehose.written < 64 * RESPONSE_BYTES
        s.close()
        assert p.health()["live"]
    finally:
        stop_proxy(p)
