"""One connection's byte streams through the two roads that frame them: the Python road
(``protocol/connection.py``'s ``KafkaConnection``: requests seen, responses matched) and the native
core's ``Wire`` (``native/src/wire/``: the same as records). What the differential test
(``tests/protocol/test_wire_native.py``) and the fuzz harness (``tests/fuzz/harness.py``) compare.

The routed road (``protocol/routed.py``) is held to the Python road whole: the same bytes forwarded
to the client, and the Python road's events of the exchanges routed to it the same as a Python
road reading every frame gives for them (``routed_disagreement``).

A road's output is one entry per chunk fed: the requests seen and the responses matched in that
chunk, as tuples of the same fields; a framing error ends it (that chunk's entry is the error's
words). From the chunk where a SaslHandshake v0 goes by, only the Python road goes on (its answer
may turn the connection to raw tokens), so outputs are compared up to that chunk.
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fetchlat import native
from fetchlat.protocol import apis, fetch, produce, share
from fetchlat.protocol.connection import KafkaConnection
from fetchlat.protocol.errors import FramingError
from fetchlat.protocol.events import DecodeFailed, Event, RequestSeen, ResponseSeen
from fetchlat.protocol.requests import UNREADABLE_HEADER as UNREADABLE
from fetchlat.protocol.rewrite import ResponseRewriter
from fetchlat.protocol.routed import RoutedConnection, flexible_ranges, route_ranges

from testkit.captures import Frame

CORE = native.core()
MAX_FRAME = 1 << 20

Chunk = tuple[bool, bytes]  # (from the client, bytes)
Step = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]] | str  # (requests, responses) or an error


def cut_frames(frames: list[Frame], at: int) -> Iterator[Chunk]:
    """Each frame of a conversation in two reads, cut ``at`` bytes in (whole when shorter)."""
    for f in frames:
        w = f.wire
        if 0 < at < len(w):
            yield f.direction == "req", w[:at]
            yield f.direction == "req", w[at:]
        else:
            yield f.direction == "req", w


def frame_pieces(frames: list[Frame], step: int) -> Iterator[Chunk]:
    """Each frame in reads of ``step`` bytes."""
    for f in frames:
        w = f.wire
        for i in range(0, len(w), step):
            yield f.direction == "req", w[i:i + step]


def pipelined(frames: list[Frame]) -> Iterator[Chunk]:
    """Each side's consecutive frames in one read."""
    side, run = True, b""
    for f in frames:
        if (f.direction == "req") != side and run:
            yield side, run
            run = b""
        side, run = f.direction == "req", run + f.wire
    if run:
        yield side, run


def wire(max_frame_bytes: int = MAX_FRAME) -> Any:
    """A native ``Wire`` with the tables the Python road uses (flexible request versions from the
    specs; the versions ``inflight.observed`` decodes)."""
    assert CORE is not None
    flexible = flexible_ranges()
    seen = [(apis.FETCH, fetch.MIN_VERSION, fetch.MAX_VERSION),
            (apis.PRODUCE, produce.MIN_VERSION, produce.MAX_VERSION),
            (apis.SHARE_FETCH, share.MIN_VERSION, share.MAX_VERSION)]
    return CORE.Wire(max_frame_bytes, flexible, seen)


def python_road(chunks: Iterable[Chunk]) -> list[Step]:
    conn = KafkaConnection(max_frame_bytes=MAX_FRAME)
    out: list[Step] = []
    for t, (from_client, data) in enumerate(chunks):
        try:
            events = conn.receive_from_client(data, t) if from_client else conn.receive_from_broker(data, t)[1]
        except FramingError as exc:
            out.append(str(exc))
            return out
        unreadable = {(e.api_key, e.api_version) for e in events
                      if isinstance(e, DecodeFailed) and e.reason == UNREADABLE}
        requests, responses = [], []
        for e in events:
            if isinstance(e, RequestSeen):
                requests.append((e.correlation_id, e.api_key, e.api_version, e.client_id, e.size_bytes,
                                 e.expects_response, e.t_ns, (e.api_key, e.api_version) in unreadable))
            elif isinstance(e, ResponseSeen):
                responses.append((e.correlation_id, e.api_key, e.api_version, e.client_id, e.size_bytes,
                                  e.t_request_ns, e.t_first_ns, e.t_last_ns))
        out.append((requests, responses))
    return out


def native_road(chunks: Iterable[Chunk], on: bool = False) -> tuple[list[Step], int | None]:
    """The native road's steps, and the index of the chunk after which only Python goes on (the
    one where a SaslHandshake v0 goes by). With ``on``, the steps go on past it: the core still
    frames the broker's answers owed to the requests before the handshake's, as the relay does."""
    assert CORE is not None
    expects, _, unreadable, _, _ = CORE.WIRE_FLAGS
    w = wire()
    out: list[Step] = []
    stop: int | None = None
    for t, (from_client, data) in enumerate(chunks):
        try:
            (w.from_client if from_client else w.from_broker)(data, t)
        except ValueError as exc:
            out.append(str(exc))
            return out, stop
        raw, ids = w.drain()
        names = ids
        requests, responses = [], []
        for kind, corr, key, ver, cid, size, flags, t_req, t_first, t_last in struct.iter_unpack(
                f"={CORE.WIRE_RECORD_WIDTH}q", raw):
            client = names[cid] if cid >= 0 else None
            if kind == 1:
                requests.append((corr, key, ver, client, size, bool(flags & expects), t_req, bool(flags & unreadable)))
            else:
                responses.append((corr, key, ver, client, size, t_req, t_first, t_last))
        out.append((requests, responses))
        if w.needs_python and stop is None:
            stop = t
            if not on:
                return out, t
    return out, stop


def disagreement(chunks: list[Chunk]) -> str | None:
    """None when both roads frame ``chunks`` alike; otherwise the first chunk where they differ."""
    chunks = list(chunks)
    nat, stop = native_road(chunks)
    py = python_road(chunks)
    if stop is not None:
        py = py[:stop + 1]
        # the core reads nothing of the client's after the SaslHandshake v0 (``Routed.rest``):
        # the Python road's requests of that chunk are compared up to it, and an error of the
        # Python road's in what follows it in the chunk is not the core's to see
        got, last = nat[stop], py[stop]
        assert isinstance(got, tuple) and got[0] and got[0][-1][1:3] == (apis.SASL_HANDSHAKE, 0)
        py[stop] = (last[0][:len(got[0])], last[1]) if isinstance(last, tuple) else got
    for i, (a, b) in enumerate(zip(py, nat, strict=False)):
        if a != b:
            return f"chunk {i} ({'request' if chunks[i][0] else 'response'} bytes {chunks[i][1][:64]!r}): " \
                   f"Python {a!r}, native {b!r}"
    if len(py) != len(nat):
        return f"Python read {len(py)} chunks, native {len(nat)}"
    return None


class _Expected:
    """Which of the Python road's events the routed road's Python road must give too: those of
    exchanges routed there (an event naming no api key comes of a body parsed, so of one of them;
    one naming a key alone, of a rewrite, so of one too), and, from a SaslHandshake v0 on (its
    request on the client's side, its answer on the broker's), every one. A SaslHandshake v0
    whose header cannot be read names no mechanism: neither road hands the connection over for
    it (the Python road frames on, as the core does), so it counts as any routed exchange."""

    def __init__(self, ranges: list[tuple[int, int, int]]) -> None:
        self.ranges = ranges
        self.handed = {True: False, False: False}  # by side: from the client
        self.handshakes: list[bool] = []  # each SaslHandshake v0 asked, in order: whether it hands over

    def routed(self, e: Event) -> bool:
        if not hasattr(e, "api_key"):
            return True
        version = getattr(e, "api_version", 0)
        return (e.api_key, version) == (apis.SASL_HANDSHAKE, 0) or any(
            k == e.api_key and lo <= version <= hi for k, lo, hi in self.ranges)

    def events(self, events: list[Event], from_client: bool) -> list[Event]:
        out = []
        unreadable = False  # the request seen next is a SaslHandshake v0 whose header was unreadable
        for e in events:
            handshake = (getattr(e, "api_key", None), getattr(e, "api_version", None)) == (apis.SASL_HANDSHAKE, 0)
            if from_client and isinstance(e, DecodeFailed):
                unreadable = handshake and e.reason == UNREADABLE
            if handshake and isinstance(e, RequestSeen if from_client else ResponseSeen):
                if from_client:
                    hands_over = not unreadable
                    self.handshakes.append(hands_over)
                else:  # the answer of the oldest handshake not answered yet
                    hands_over = bool(self.handshakes) and self.handshakes.pop(0)
                self.handed[from_client] = self.handed[from_client] or hands_over
                out.append(e)
            elif self.handed[from_client] or self.routed(e):
                out.append(e)
        return out


def routed_disagreement(chunks: list[Chunk], rewriter: ResponseRewriter | None = None) -> str | None:
    """None when the routed road forwards the same bytes as the Python road alone, read by read,
    and its Python road gives the same events for the exchanges routed there, and both refuse
    the same chunk in the same words; otherwise the first chunk where they differ."""
    whole = KafkaConnection(rewriter=rewriter, max_frame_bytes=MAX_FRAME)
    road = RoutedConnection.make(KafkaConnection(rewriter=rewriter, max_frame_bytes=MAX_FRAME), MAX_FRAME,
                                 rewriter.wants if rewriter else None)
    assert road is not None
    expected = _Expected(route_ranges(rewriter.wants if rewriter else None))
    for t, (from_client, data) in enumerate(chunks):
        steps: list[tuple[bytes, list[Event]] | str] = []
        for conn in (whole, road):
            try:
                if from_client:
                    steps.append((b"", conn.receive_from_client(data, t)))
                else:
                    segments, events = conn.receive_from_broker(data, t)
                    steps.append((b"".join(bytes(s) for s in segments), events))
            except FramingError as exc:
                steps.append(str(exc))
        where = f"chunk {t} ({'request' if from_client else 'response'} bytes {data[:64]!r})"
        a, b = steps
        if isinstance(a, tuple) and isinstance(b, tuple):
            if a[0] != b[0]:
                return f"{where}: the client was sent {a[0][:64]!r} by Python, {b[0][:64]!r} routed"
            a, b = expected.events(a[1], from_client), b[1]
        if a != b:
            return f"{where}: Python {a!r}, routed {b!r}"
        if isinstance(a, str):
            return None
        counts = (len(whole.in_flight), whole.client_mid_frame), (road.in_flight, road.client_mid_frame)
        if counts[0] != counts[1]:
            return f"{where}: in flight and mid-frame {counts[0]} on the Python road, {counts[1]} routed"
    return None


RELAY_DEADLINE_S = 5.0


def loopback_pair(timeout_s: float = RELAY_DEADLINE_S) -> tuple[socket.socket, socket.socket]:
    """A connected loopback TCP pair: (the end handed to a relay, the test's end, which times out
    after ``timeout_s`` and writes each chunk at once: no Nagle wait behind a chunk not yet
    acknowledged)."""
    with socket.create_server(("127.0.0.1", 0)) as lst:
        outer = socket.create_connection(lst.getsockname())
        inner, _ = lst.accept()
    outer.settimeout(timeout_s)
    outer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return inner, outer


@dataclass(frozen=True)
class TlsClient:
    """A pair's client speaking TLS to the relay: the relay's certificate and key, and the
    client's context that trusts them."""

    cert: Path
    key: Path
    context: ssl.SSLContext


def _handed(relay: Any, relay_client: socket.socket, relay_broker: socket.socket, client: socket.socket,
            tls: TlsClient | None) -> socket.socket:
    """The pair handed to ``relay``: plainly, or (``tls``) as the proxy hands a TLS client's, the
    core's from its first byte (``front``), its handshake done, then fused (``add`` of the
    plaintext end); the test's client end, speaking TLS where the pair does."""
    if tls is None:
        relay.add(relay_client.detach(), relay_broker.detach())
        return client
    relay.tls_config(str(tls.cert), str(tls.key))
    _, python_end = relay.front(relay_client.detach())
    try:
        client = tls.context.wrap_socket(client, server_hostname="localhost")  # the core's session
        relay.add(os.dup(python_end), relay_broker.detach())
    finally:
        os.close(python_end)
    return client


def relay_disagreement(chunks: list[Chunk], tls: TlsClient | None = None) -> str | None:
    """The core's relay itself (``native/src/relay/``, over loopback sockets, each chunk written by the
    test's client or broker end) against the Python road: where the Python road loses its framing
    before any SaslHandshake v0, the relay ends the pair in the same words; otherwise it hands
    every byte on, in order, both ways. Past a SaslHandshake v0 the core frames only the broker's
    answers owed before the handshake's (the rest is the Python road's alone): there the relay
    ends the pair where the core's ``Wire`` does. None when they agree. With ``tls`` the client's
    bytes go through a TLS session the core holds (``relay/front.rs``): the same must hold of its
    plaintext."""
    import time

    from fetchlat.proxy.relayed import items

    assert CORE is not None
    chunks = list(chunks)
    steps = python_road(chunks)
    framed, handed = native_road(chunks, on=True)
    error = steps[-1] if steps and isinstance(steps[-1], str) else None
    upto = len(steps) if error is not None else len(chunks)
    if handed is not None and (error is None or len(steps) - 1 >= handed):
        # past the handshake the client's bytes are the Python road's alone, and so are the
        # broker's from the handshake's answer on: the relay ends the pair where the core's
        # Wire does (in the Python road's words where that road got as far)
        core_error = framed[-1] if framed and isinstance(framed[-1], str) else None
        if core_error is not None and len(steps) >= len(framed) and steps[len(framed) - 1] != core_error:
            return f"chunk {len(framed) - 1}: the core's Wire refuses it ({core_error}), the Python road: " \
                   f"{steps[len(framed) - 1]}"
        error, upto = core_error, len(framed) if core_error is not None else len(chunks)
    relay = CORE.Relay(MAX_FRAME, flexible_ranges(), route_ranges(None))
    relay_client, client = loopback_pair()
    relay_broker, broker = loopback_pair()
    try:
        client = _handed(relay, relay_client, relay_broker, client, tls)
        sent = {True: bytearray(), False: bytearray()}
        got = {True: bytearray(), False: bytearray()}
        for i, (from_client, data) in enumerate(chunks[:upto]):
            src, dst = (client, broker) if from_client else (broker, client)
            try:
                src.sendall(data)
            except OSError as exc:
                return f"chunk {i}: the relay closed before the Python road's error ({exc})"
            sent[from_client] += data
            if error is not None and i == upto - 1:
                break  # the chunk the Python road refuses: the relay ends the pair on it
            while len(got[from_client]) < len(sent[from_client]):
                try:
                    piece = dst.recv(1 << 20)
                except (TimeoutError, OSError) as exc:
                    return f"chunk {i}: {len(got[from_client])} of {len(sent[from_client])} bytes on ({exc})"
                if not piece:
                    return f"chunk {i}: the relay closed at {len(got[from_client])} of {len(sent[from_client])} bytes"
                got[from_client] += piece
            if got[from_client] != sent[from_client]:
                return f"chunk {i}: the bytes passed on differ from those sent"
        if error is None:
            return None
        deadline = time.monotonic() + RELAY_DEADLINE_S
        closed: list[str] = []
        while not closed:
            closed = [it[7] for it in items(*relay.drain()) if it[1] == CORE.RELAY_KINDS[2]]
            if time.monotonic() > deadline:
                return f"the relay did not end the pair; the Python road: {error}"
            time.sleep(0.001)
        return None if closed == [error] else f"the relay ended the pair with {closed}; the Python road: {error}"
    finally:
        relay.close()
        client.close()
        broker.close()
