"""The core's relay (``native/src/relay/``, ``Relay``: the spike of a per-read road that is the
core's alone, ``bench/spike/native_relay.py``): over real loopback sockets, it writes every byte
on as it came both ways, and what it queues for Python (the bytes the Python road parses, the
records of the exchanges it settled alone) tells the Python road and the observer the same
exchanges as the Python road fed the whole conversation; with a rewriter's answers held whole
and answered from Python, the client gets the very bytes the Python road would have written; a
frame the ``Wire`` refuses ends the pair with the Python road's words; a client that does not
read holds the broker back, and gets every byte once it reads."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest
from fetchlat import native
from fetchlat.protocol import apis
from fetchlat.protocol.connection import KafkaConnection
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.errors import DecodeError
from fetchlat.protocol.events import (
    DecodeFailed,
    FetchExchanged,
    ProduceExchanged,
    ProduceSent,
    RequestSeen,
    ResponseSeen,
)
from fetchlat.protocol.framing import request_frame, response_frame
from fetchlat.protocol.rewrite import ResponseRewriter
from fetchlat.protocol.routed import (
    ASKED,
    HANDED,
    KIND_REQUEST,
    RECORD_FORMAT,
    ROUTED,
    flexible_ranges,
    route_ranges,
    whole_ranges,
)
from fetchlat.protocol.schema import load
from fetchlat.proxy.relayed import items

from testkit.captures import RUNS, Frame, conversations
from testkit.frames import fetch_request, record_batch
from testkit.procfs import thread_named, voluntary_switches
from testkit.wire_roads import loopback_pair

pytestmark = pytest.mark.skipif(native.core() is None, reason=f"native core not loaded: {native.reason()}")
REWRITER = ResponseRewriter(lambda node, host, port: ("proxy.example", 9000 + node))
MAX_FRAME = 100 * 1024 * 1024
DEADLINE_S = 10.0


def _pair() -> tuple[socket.socket, socket.socket]:
    """A connected loopback TCP pair: (the end handed to the relay, the test's end)."""
    return loopback_pair(DEADLINE_S)


class Rig:
    """A relay with one pair: ``client`` and ``broker`` are the test's ends."""

    def __init__(self, max_frame: int = MAX_FRAME, rewriter: ResponseRewriter | None = None,
                 route_held: bool = True, ask_at_answer: bool = False) -> None:
        """``route_held``: the answers held whole are the Python road's to parse too (the spike's
        tables); otherwise they are held for the rewriter only (the proxy's, ``proxy/relayed.py``)."""
        core = native.core()
        assert core is not None
        self.kinds = core.RELAY_KINDS
        wants = None if rewriter is None else rewriter.wants
        self.relay = core.Relay(max_frame, flexible_ranges(), route_ranges(wants if route_held else None),
                                [] if wants is None else whole_ranges(wants), ask_at_answer=ask_at_answer)
        relay_client, self.client = _pair()
        relay_broker, self.broker = _pair()
        self.id = self.relay.add(relay_client.detach(), relay_broker.detach())
        self.items: list[tuple[object, ...]] = []

    def drain_until(self, done: object, what: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            self.items += items(*self.relay.drain())
            if done():  # type: ignore[operator]
                return
            assert time.monotonic() < deadline, f"no {what} within {DEADLINE_S} s: {self.items[-3:]}"
            time.sleep(0.002)

    def close(self) -> None:
        self.relay.close()
        self.client.close()
        self.broker.close()


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    yield r
    r.close()


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = s.recv(n - len(got))
        assert chunk, f"closed after {len(got)} of {n} bytes"
        got += chunk
    return bytes(got)


def _exchanges_python_alone(frames: list[Frame]) -> list[tuple[str, int, int, str | None]]:
    conn = KafkaConnection(max_frame_bytes=MAX_FRAME)
    out: list[tuple[str, int, int, str | None]] = []
    for f in frames:
        events = conn.receive_from_client(f.wire, 1) if f.direction == "req" else conn.receive_from_broker(f.wire, 2)[1]
        out += _seen(events)
    return out


def _seen(events: list[object]) -> list[tuple[str, int, int, str | None]]:
    return [("req" if isinstance(e, RequestSeen) else "resp", e.correlation_id, e.api_key, e.client_id)  # type: ignore[attr-defined]
            for e in events if isinstance(e, RequestSeen | ResponseSeen)]


@pytest.mark.parametrize("run", RUNS)
def test_every_captured_conversation_goes_through_whole_and_tells_the_same_exchanges(run: str) -> None:
    for frames in conversations(run).values():
        r = Rig()
        try:
            assert _through(r, frames) == _exchanges_python_alone(frames)
        finally:
            r.close()


def _through(r: Rig, frames: list[Frame]) -> list[tuple[str, int, int, str | None]]:
    """``frames`` through the relay one at a time (a client with one request in flight, and its
    broker): every byte must come out as it went in; the exchanges its queue tells the Python road
    and the records, in order."""
    from_client, from_broker, _closed, _rewrite, _ready, _learn = r.kinds
    for f in frames:
        sender, receiver = (r.client, r.broker) if f.direction == "req" else (r.broker, r.client)
        sender.sendall(f.wire)
        assert _recv_exactly(receiver, len(f.wire)) == f.wire
    r.drain_until(lambda: _count(r.items) >= len(frames), "records of every frame")
    conn = KafkaConnection(max_frame_bytes=MAX_FRAME)
    seen: list[tuple[str, int, int, str | None]] = []
    for _cid, kind, t_ns, t_written, data, records, ids, _reason, _api, _counts, _handed, digest in r.items:
        assert kind in (from_client, from_broker)
        assert t_ns <= t_written
        events = [] if digest is None else conn.digested_from_client(*digest, t_ns) if kind == from_client \
            else conn.digested_from_broker(*digest[1:], t_ns)
        if data:
            events += conn.receive_from_client(data, t_ns) if kind == from_client else \
                conn.receive_from_broker(data, t_ns)[1]
        python = iter(_seen(events))
        if records is None:
            seen += list(python)
            continue
        names = ids
        for rec in struct.iter_unpack(RECORD_FORMAT, records):
            k, corr, key, _ver, cid, _size, flags = rec[:7]
            if flags & ROUTED:
                seen.append(next(python))
            else:
                seen.append(("req" if k == KIND_REQUEST else "resp", corr, key, names[cid] if cid >= 0 else None))
        seen += list(python)
    return seen


REWRITE_KIND = 3


def _count(items: list[tuple[object, ...]]) -> int:
    """Frames the queued items account for: a record each for the core's, a frame each routed."""
    n = 0
    for _cid, kind, _t, _written, data, records, _ids, _reason, _api, _counts, _handed, _digest in items:
        if kind == REWRITE_KIND:
            continue
        routed = 0
        if records is not None:
            for rec in struct.iter_unpack(RECORD_FORMAT, records):
                n += 1
                routed += bool(rec[6] & ROUTED)
        n += _frames_in(data) - routed  # type: ignore[arg-type]
    return n


def _frames_in(data: bytes) -> int:
    n, at = 0, 0
    while at + 4 <= len(data):
        at += 4 + int.from_bytes(data[at:at + 4], "big")
        n += 1
    return n


def test_a_frame_the_wire_refuses_ends_the_pair_in_the_python_roads_words() -> None:
    r = Rig(max_frame=1024)
    try:
        r.client.sendall(struct.pack(">i", 4096) + b"x" * 16)
        r.drain_until(lambda: any(it[1] == r.kinds[2] for it in r.items), "end of the pair")
        (reason,) = [it[7] for it in r.items if it[1] == r.kinds[2]]
        assert reason == ("request frame of 4096 bytes exceeds the limit of 1024 "
                          "(raise max_frame_bytes if this is legitimate)")
        assert r.client.recv(1) == b""  # closed on the client
        assert r.broker.recv(64) == b""  # and the broker never saw the frame's bytes
    finally:
        r.close()


def test_a_side_that_closes_ends_the_pair(rig: Rig) -> None:
    rig.broker.close()
    rig.drain_until(lambda: any(it[1] == rig.kinds[2] for it in rig.items), "end of the pair")
    assert [it[7] for it in rig.items if it[1] == rig.kinds[2]] == ["broker closed the connection"]
    assert rig.client.recv(1) == b""


@pytest.mark.parametrize("ask_at_answer", [False, True], ids=["request-recorded", "asked-at-answer"])
def test_an_exchange_settled_alone_is_one_record_when_asked_at_its_answer(ask_at_answer: bool) -> None:
    """The proxy's relay (``ask_at_answer``): a request the core settles alone makes no record; its
    answer's, flagged ASKED, stands for both; one the pair ends before its answer is recorded at
    the end, before the close. Otherwise (the tests' other rigs) each makes its own."""
    r = Rig(ask_at_answer=ask_at_answer)
    try:
        for corr in (7, 8):
            req = struct.pack(">hhih", 18, 0, corr, -1)
            r.client.sendall(struct.pack(">i", len(req)) + req)
            assert _recv_exactly(r.broker, 4 + len(req))[4:] == req
        answer = struct.pack(">i", 7) + b"\x00\x00" + b"\x00" * 10
        r.broker.sendall(struct.pack(">i", len(answer)) + answer)
        assert _recv_exactly(r.client, 4 + len(answer))[4:] == answer
        r.drain_until(lambda: any(it[1] == r.kinds[1] for it in r.items), "the answer's record")
        r.relay.end(r.id)  # correlation id 8 is never answered
        r.drain_until(lambda: any(it[1] == r.kinds[2] for it in r.items), "end of the pair")
        kinds = [it[1] for it in r.items]
        recs = [(it[1], rec[0], rec[1], rec[6] & ASKED) for it in r.items if it[5] is not None
                for rec in struct.iter_unpack(RECORD_FORMAT, it[5])]
        req_kind, resp_kind = KIND_REQUEST, KIND_REQUEST + 1
        client, broker = r.kinds[0], r.kinds[1]
        if ask_at_answer:
            assert recs == [(broker, resp_kind, 7, ASKED), (client, req_kind, 8, 0)]
            assert kinds == [broker, client, r.kinds[2]]  # the unanswered request's record before the close
        else:
            assert recs == [(client, req_kind, 7, 0), (client, req_kind, 8, 0), (broker, resp_kind, 7, 0)]
    finally:
        r.close()


def test_a_client_that_does_not_read_holds_the_broker_back_then_gets_every_byte(rig: Rig) -> None:
    # an ApiVersions request, then an answer far bigger than the sockets' buffers
    req = struct.pack(">hhih", 18, 0, 7, -1)
    rig.client.sendall(struct.pack(">i", len(req)) + req)
    assert _recv_exactly(rig.broker, 4 + len(req))[4:] == req
    body = struct.pack(">i", 7) + bytes(range(256)) * (192 * 1024)  # 48 MiB: past every socket buffer
    rig.broker.setblocking(False)
    sent = 0
    frame = struct.pack(">i", len(body)) + body
    deadline = time.monotonic() + DEADLINE_S
    while sent < len(frame) and time.monotonic() < deadline:
        try:
            sent += rig.broker.send(frame[sent:sent + 65536])
        except BlockingIOError:
            time.sleep(0.01)
    assert sent < len(frame), "the relay read the whole answer though its client read none of it"
    rig.broker.setblocking(True)
    rig.broker.settimeout(DEADLINE_S)
    t = threading.Thread(target=lambda: rig.broker.sendall(frame[sent:]))
    t.start()
    assert _recv_exactly(rig.client, len(frame)) == frame
    t.join(DEADLINE_S)
    rig.drain_until(lambda: _count(rig.items) >= 2, "the exchange's records")


@pytest.mark.parametrize("route_held", [True, False], ids=["held-and-routed", "held-only"])
@pytest.mark.parametrize("run", RUNS)
def test_with_a_rewriter_the_client_gets_what_the_python_road_writes(run: str, route_held: bool) -> None:
    """The rewriter's answers are held whole and answered from Python (``REWRITE``, ``answer``):
    frame by frame, the client receives the very bytes the Python road with the same rewriter
    forwards, and nothing of a held answer before it is answered; whether the Python road parses
    those exchanges too or the core settles them."""
    for frames in conversations(run).values():
        r = Rig(rewriter=REWRITER, route_held=route_held)
        python = KafkaConnection(max_frame_bytes=MAX_FRAME, rewriter=REWRITER)
        try:
            for f in frames:
                if f.direction == "req":
                    python.receive_from_client(f.wire, 1)
                    r.client.sendall(f.wire)
                    assert _recv_exactly(r.broker, len(f.wire)) == f.wire
                    continue
                want = b"".join(bytes(s) for s in python.receive_from_broker(f.wire, 2)[0])
                r.broker.sendall(f.wire)
                assert _recv_answering(r, len(want)) == want, f"api {f.api_key} v{f.api_version}"
            if not route_held:  # a held answer the Python road does not read: the core's exchange
                held = {(int.from_bytes(f.body[:4], "big", signed=True), f.api_key) for f in frames
                        if f.direction == "resp" and REWRITER.wants(f.api_key, f.api_version)
                        and not any(k == f.api_key and lo <= f.api_version <= hi for k, lo, hi in route_ranges(None))}

                def settled() -> set[tuple[int, int]]:
                    return {(rec[1], rec[2]) for rec in _records(r.items)  # noqa: B023 - r is this loop's
                            if rec[0] != KIND_REQUEST and not rec[6] & ROUTED}

                r.drain_until(lambda: held <= settled(), "the core's records of the held answers")  # noqa: B023
                assert held, "the capture has answers the rewriter holds"
        finally:
            r.close()


def _records(items: list[tuple[object, ...]]) -> list[tuple[int, ...]]:
    """The core's records in the queued items, in order."""
    return [rec for item in items if item[5] is not None
            for rec in struct.iter_unpack(RECORD_FORMAT, item[5])]  # type: ignore[arg-type]


def _recv_answering(r: Rig, n: int) -> bytes:
    """``n`` bytes at the client, answering the relay's ``REWRITE`` items as the spike does."""
    got = bytearray()
    r.client.settimeout(0.005)
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < n:
        assert time.monotonic() < deadline, f"{len(got)} of {n} bytes"
        for item in items(*r.relay.drain()):
            r.items.append(item)
            if item[1] == REWRITE_KIND:
                frame, (key, version) = item[4], item[8]
                try:
                    body = REWRITER.rewrite(key, version, memoryview(frame)[4:]).body
                except DecodeError:
                    body = None  # forwarded untouched, as the Python road does
                r.relay.answer(item[0], frame if body is None else len(body).to_bytes(4, "big") + body)
        try:
            chunk = r.client.recv(n - len(got))
        except TimeoutError:
            continue
        assert chunk, "closed"
        got += chunk
    r.client.settimeout(DEADLINE_S)
    return bytes(got)


def test_nothing_of_a_held_answer_nor_of_what_follows_goes_before_python_answers() -> None:
    r = Rig(rewriter=REWRITER)
    try:
        # two ApiVersions v0 pipelined; the broker answers both in one write
        for corr in (1, 2):
            req = struct.pack(">hhih", 18, 0, corr, -1)
            r.client.sendall(struct.pack(">i", len(req)) + req)
        _recv_exactly(r.broker, 2 * 14)
        answers = [struct.pack(">iih", 6, corr, 0) for corr in (1, 2)]  # size, correlation id, error 0
        r.broker.sendall(b"".join(answers))
        r.drain_until(lambda: sum(1 for it in r.items if it[1] == REWRITE_KIND) >= 2, "both held answers")
        held = [it for it in r.items if it[1] == REWRITE_KIND]
        assert [(it[4], it[8]) for it in held] == [(answers[0], (18, 0)), (answers[1], (18, 0))]
        r.client.settimeout(0.2)
        with pytest.raises(TimeoutError):
            r.client.recv(1)  # nothing yet, not even the second answer
        rewritten = b"\x00\x00\x00\x06\x00\x00\x00\x01\x00\x23"
        r.relay.answer(held[0][0], rewritten)  # in the first one's place
        assert _recv_exactly(r.client, 10) == rewritten
        with pytest.raises(TimeoutError):
            r.client.recv(1)  # the second waits for its own answer
        r.relay.answer(held[1][0], held[1][4])
        r.client.settimeout(DEADLINE_S)
        assert _recv_exactly(r.client, 10) == answers[1]
    finally:
        r.close()


def _timers(r: Rig) -> tuple[int, ...]:
    deadline = time.monotonic() + DEADLINE_S
    while True:  # the relay's thread adopts a pair it is handed at its next wake-up
        rows = [t for t in r.relay.timers() if t[0] == r.id]
        if rows:
            return tuple(rows[0])
        assert time.monotonic() < deadline, "the pair was never adopted"
        time.sleep(0.002)


def test_counts_and_timers_say_what_the_core_read_and_since_when(rig: Rig) -> None:
    req = struct.pack(">hhih", 18, 0, 7, -1)
    frame = struct.pack(">i", len(req)) + req
    assert _timers(rig)[1:3] == (0, 0) and _timers(rig)[4:6] == (0, 0)  # nothing read, nothing pending
    rig.client.sendall(frame[:5])  # a request begun
    deadline = time.monotonic() + DEADLINE_S
    while _timers(rig)[1] < 5:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    _, from_client, from_broker, read_ns, partial_ns, stalled_ns, _rtt = _timers(rig)
    assert (from_client, from_broker, stalled_ns) == (5, 0, 0)
    assert partial_ns > 0 and read_ns >= partial_ns  # mid-frame since that read
    rig.client.sendall(frame[5:])
    assert _recv_exactly(rig.broker, len(frame)) == frame
    answer = struct.pack(">i", 7) + b"\x00\x00" + b"\x00" * 10
    rig.broker.sendall(struct.pack(">i", len(answer)) + answer)
    assert _recv_exactly(rig.client, 4 + len(answer))[4:] == answer
    rig.drain_until(lambda: any(it[1] == rig.kinds[1] for it in rig.items), "the answer's record")
    assert rig.items[-1][9] == (len(frame), 4 + len(answer))  # every item carries the counts so far
    _, from_client, from_broker, _read, partial_ns, _stalled, rtt_ns = _timers(rig)
    assert (from_client, from_broker, partial_ns) == (len(frame), 4 + len(answer), 0)
    assert rtt_ns > 0  # the client connection's RTT, read at the first answer written


def test_a_pair_python_ends_closes_both_sides_and_says_so(rig: Rig) -> None:
    rig.relay.end(rig.id)
    rig.drain_until(lambda: any(it[1] == rig.kinds[2] for it in rig.items), "end of the pair")
    assert [it[7] for it in rig.items if it[1] == rig.kinds[2]] == ["closed by the proxy"]
    assert rig.client.recv(1) == b"" and rig.broker.recv(1) == b""
    assert rig.relay.timers() == []
    rig.relay.end(rig.id)  # a pair already gone: nothing
    time.sleep(0.05)
    assert not [it for it in items(*rig.relay.drain()) if it[1] == rig.kinds[2]]


def test_bytes_waiting_for_a_client_that_does_not_read_mark_it_stalled(rig: Rig) -> None:
    req = struct.pack(">hhih", 18, 0, 7, -1)
    rig.client.sendall(struct.pack(">i", len(req)) + req)
    assert _recv_exactly(rig.broker, 4 + len(req))[4:] == req
    body = struct.pack(">i", 7) + b"\x00" * (16 << 20)  # past both sockets' buffers
    rig.broker.setblocking(False)
    sent, deadline = 0, time.monotonic() + DEADLINE_S
    frame = struct.pack(">i", len(body)) + body
    while _timers(rig)[5] == 0:
        assert time.monotonic() < deadline, "never stalled"
        try:
            sent += rig.broker.send(frame[sent:])
        except BlockingIOError:
            time.sleep(0.002)
    assert sent < len(frame)


def test_a_repeat_of_an_answer_python_gave_is_answered_by_the_core_alone() -> None:
    """Every connection's ApiVersions answer is the same bytes past its correlation id: Python
    answers (caps) the first; the core answers the repeats itself, each with its own correlation
    id, the very bytes the Python road writes, and counts them as rewrites."""
    r = Rig(rewriter=REWRITER)
    try:
        got_items: list[tuple[object, ...]] = []
        for corr in (7, 8, 9):
            req = struct.pack(">hhih", 18, 0, corr, -1)
            r.client.sendall(struct.pack(">i", len(req)) + req)
            assert _recv_exactly(r.broker, 4 + len(req))[4:] == req
            # Fetch advertised up to v99, past what the codec reads: the rewriter caps it
            answer = struct.pack(">ihi", corr, 0, 1) + struct.pack(">hhh", 1, 0, 99)
            r.broker.sendall(struct.pack(">i", len(answer)) + answer)
            body = REWRITER.rewrite(18, 0, memoryview(answer)).body
            assert body is not None and body != answer
            want = len(body).to_bytes(4, "big") + body
            assert _recv_answering(r, len(want)) == want
            got_items += items(*r.relay.drain())
        r.drain_until(lambda: r.relay.memo_rewrites() == {18: 2}, "the core's count of its own answers")
        assert r.relay.memo_rewrites() == {18: 2}  # the second and third: the core's, the first Python's
    finally:
        r.close()


def test_a_clients_half_close_is_passed_on_and_the_answer_still_comes_back(rig: Rig) -> None:
    req = struct.pack(">hhih", 18, 0, 7, -1)
    rig.client.sendall(struct.pack(">i", len(req)) + req)
    rig.client.shutdown(socket.SHUT_WR)  # the client's end of stream, its read side still open
    assert _recv_exactly(rig.broker, 4 + len(req))[4:] == req
    assert rig.broker.recv(1) == b""  # the end of stream went on to the broker
    answer = struct.pack(">i", 7) + b"\x00" * 12
    rig.broker.sendall(struct.pack(">i", len(answer)) + answer)
    assert _recv_exactly(rig.client, 4 + len(answer))[4:] == answer
    rig.broker.close()
    rig.drain_until(lambda: any(it[1] == rig.kinds[2] for it in rig.items), "end of the pair")
    assert [it[7] for it in rig.items if it[1] == rig.kinds[2]] == [
        "broker closed the connection after the client's end of stream"]
    assert rig.client.recv(1) == b""


def test_a_broker_that_closes_with_bytes_still_waiting_for_the_client_has_them_written_first(rig: Rig) -> None:
    """The broker's end of stream is read only once what waits for the client is written (the
    broker is not read meanwhile: back-pressure), so the close loses none of the answer."""
    req = struct.pack(">hhih", 18, 0, 7, -1)
    rig.client.sendall(struct.pack(">i", len(req)) + req)
    assert _recv_exactly(rig.broker, 4 + len(req))[4:] == req
    body = struct.pack(">i", 7) + bytes(range(256)) * (64 * 1024)  # 16 MiB: the client's socket cannot take it at once
    frame = struct.pack(">i", len(body)) + body
    t = threading.Thread(target=lambda: (rig.broker.sendall(frame), rig.broker.close()))
    t.start()
    time.sleep(0.3)  # the broker's close arrives while most of the answer waits for the client
    assert _recv_exactly(rig.client, len(frame)) == frame
    t.join(DEADLINE_S)
    assert rig.client.recv(1) == b""
    rig.drain_until(lambda: any(it[1] == rig.kinds[2] for it in rig.items), "end of the pair")
    assert [it[7] for it in rig.items if it[1] == rig.kinds[2]] == ["broker closed the connection"]


def _fetch_answer(corr: int, batches: int) -> bytes:
    """A Fetch v12 answer carrying ``batches`` one-record batches (kafka-python's writer)."""
    body = encode(load("FetchResponse"), 12, {"ThrottleTimeMs": 0, "Responses": [{
        "Topic": "t", "Partitions": [{"PartitionIndex": 0, "HighWatermark": batches, "LastStableOffset": batches,
                                      "Records": record_batch() * batches}]}]})
    return response_frame(apis.FETCH, 12, corr, body)


def _produce_exchange(corr: int, partitions: int) -> tuple[bytes, bytes]:
    """A Produce v9 request (acks=1) and an answer naming ``partitions`` partitions."""
    req = encode(load("ProduceRequest"), 9, {"TransactionalId": None, "Acks": 1, "TimeoutMs": 1000, "TopicData": [
        {"Name": "t", "PartitionData": [{"Index": 0, "Records": record_batch()}]}]})
    parts = [{"Index": i, "ErrorCode": 0, "BaseOffset": i, "LogAppendTimeMs": -1, "LogStartOffset": 0,
              "RecordErrors": [], "ErrorMessage": None} for i in range(partitions)]
    answer = encode(load("ProduceResponse"), 9, {"ThrottleTimeMs": 0, "Responses": [
        {"Name": "t", "PartitionResponses": parts}]})
    return request_frame(apis.PRODUCE, 9, corr, "producer-1", req), response_frame(apis.PRODUCE, 9, corr, answer)


def _exchange(conn: KafkaConnection, items: list[tuple[object, ...]]) -> tuple[object, ResponseSeen]:
    """The Fetch or Produce exchange the relay's items of one answer tell the Python road."""
    events: list[object] = []
    for it in items:
        data, t, digest = it[4], it[2], it[11]
        if digest is not None:
            events += conn.digested_from_broker(*digest[1:], t)  # type: ignore[index]
        if data:
            events += conn.receive_from_broker(data, t)[1]  # type: ignore[arg-type]
    exchanged = [e for e in events if isinstance(e, FetchExchanged | ProduceExchanged)]
    seen = [e for e in events if isinstance(e, ResponseSeen)]
    assert len(exchanged) == 1 and len(seen) == 1, events
    return exchanged[0], seen[0]


# Fetch answers of about 0.5 and 18 MiB: digested by the core as they come; a Produce answer of
# about 2.5 MiB: gathered, handed over as bytes in pieces of RELAY_GATHER_BYTES
@pytest.mark.parametrize(("api", "size"), [("fetch", 3_000), ("fetch", 110_000), ("produce", 60_000)])
def test_an_answer_read_in_pieces_is_handed_to_python_gathered_and_tells_the_same(rig: Rig, api: str,
                                                                                  size: int) -> None:
    """An answer the broker writes in pieces, read by the core in many reads, reaches Python as
    its size and correlation id (dated by the read they end in: the answer's first byte), then,
    dated by its last read with the stamps of the reads between beside it, the core's digest of
    its body (a Fetch answer: no record crosses over), or its body in pieces of at least
    ``RELAY_GATHER_BYTES`` but the last; fed to the Python road, those tell the same exchange as
    the answer fed whole, with the first and last reads' stamps."""
    core = native.core()
    assert core is not None
    from_broker = rig.kinds[1]
    if api == "fetch":
        req, answer = fetch_request(7), _fetch_answer(7, size)
    else:
        req, answer = _produce_exchange(7, size)
    digested = api == "fetch"
    rig.client.sendall(req)
    assert _recv_exactly(rig.broker, len(req)) == req
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(_recv_exactly(rig.client, len(answer))))
    reader.start()
    reads_before = sum(rig.relay.stamps())
    piece = 32 << 10 if len(answer) < 4 << 20 else 512 << 10
    for at in range(0, len(answer), piece):  # bounded: at most 80 sends
        rig.broker.sendall(answer[at:at + piece])
        time.sleep(0.001)
    reader.join(DEADLINE_S)
    assert got == [answer]
    rig.drain_until(lambda: any(it[1] == from_broker and it[11] is not None for it in rig.items) if digested
                    else sum(len(it[4]) for it in rig.items if it[1] == from_broker) >= len(answer),
                    "the whole answer handed to Python")
    items = [it for it in rig.items if it[1] == from_broker]
    reads = sum(rig.relay.stamps()) - reads_before
    assert reads > 2, "the answer came in too few reads to gather"
    assert items[0][4] == answer[:8] and items[0][11] is None
    if digested:
        assert len(items) == 2 and items[1][4] == b"" and items[1][11] is not None
        head, skeleton, stats = items[1][11]
        assert head == b""
        assert len(skeleton) < 200 and len(stats) == 8 * core.DIGEST_STATS_WIDTH  # no record crossed over
    else:
        assert all(it[11] is None for it in items)
        assert b"".join(it[4] for it in items[1:]) == answer[8:]
        assert all(len(it[4]) >= core.RELAY_GATHER_BYTES for it in items[1:-1]) and len(items) >= 3
    handed = [pair for it in items for pair in HANDED.iter_unpack(it[10] or b"")]
    assert len(items) + len(handed) == reads  # every read dated once: by its item, or beside it
    assert all(t_read <= t_wrote for t_read, t_wrote in handed)
    conn = KafkaConnection(max_frame_bytes=MAX_FRAME)
    conn.receive_from_client(req, 1)
    exchanged, seen = _exchange(conn, items)
    alone = KafkaConnection(max_frame_bytes=MAX_FRAME)
    alone.receive_from_client(req, 1)
    exchanged_whole, _ = _exchange(alone, [(None, None, 2, None, answer, None, None, None, None, None, None, None)])
    assert exchanged.response == exchanged_whole.response  # type: ignore[attr-defined]
    if digested:
        assert isinstance(exchanged, FetchExchanged) and exchanged.response.partitions[0].batches is not None
        assert exchanged.response.partitions[0].batches.batches == size
    assert (seen.t_first_ns, seen.t_last_ns) == (items[0][2], items[-1][2])


def test_a_fetch_answer_the_core_cannot_follow_is_reported_not_decoded_as_the_bytes_are(rig: Rig) -> None:
    """A Fetch answer read in pieces whose layout lies (its topics array longer than any real
    message) reaches Python as an empty skeleton, which the Python road reports as the answer not
    decoded, as it does the bytes fed whole."""
    from_broker = rig.kinds[1]
    req = fetch_request(9)
    rig.client.sendall(req)
    assert _recv_exactly(rig.broker, len(req)) == req
    # v12: the header's tags, ThrottleTimeMs, ErrorCode, SessionId, then a compact array of 2**30 topics
    body = struct.pack(">i", 9) + b"\x00" + struct.pack(">ihi", 0, 0, 0) + b"\x81\x80\x80\x80\x04" + b"\x00" * 200_000
    answer = struct.pack(">i", len(body)) + body
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(_recv_exactly(rig.client, len(answer))))
    reader.start()
    for at in range(0, len(answer), 32 << 10):  # bounded: 7 sends
        rig.broker.sendall(answer[at:at + (32 << 10)])
        time.sleep(0.002)
    reader.join(DEADLINE_S)
    assert got == [answer]  # every byte went on to the client as it came
    rig.drain_until(lambda: any(it[1] == from_broker and it[11] is not None for it in rig.items), "the digest")
    items = [it for it in rig.items if it[1] == from_broker]
    assert [it[11] for it in items[1:]] == [(b"", b"", b"")]
    def failed(conn: KafkaConnection,
               chunks: list[tuple[bytes | None, tuple[bytes, bytes, bytes] | None]]) -> list[object]:
        conn.receive_from_client(req, 1)
        events: list[object] = []
        for data, digest in chunks:
            if digest is not None:
                events += conn.digested_from_broker(*digest[1:], 2)
            if data:
                events += conn.receive_from_broker(data, 2)[1]
        return [e for e in events if isinstance(e, DecodeFailed | FetchExchanged)]
    through = failed(KafkaConnection(max_frame_bytes=MAX_FRAME), [(it[4], it[11]) for it in items])
    whole = failed(KafkaConnection(max_frame_bytes=MAX_FRAME), [(answer, None)])
    assert [type(e) for e in through] == [type(e) for e in whole] == [DecodeFailed]


# one batch: a request shorter than its first bytes, gathered whole; about 0.5 and 2.5 MiB: digested
@pytest.mark.parametrize("batches", [1, 3_000, 15_000])
def test_a_request_read_in_pieces_is_handed_to_python_gathered_and_tells_the_same(rig: Rig, batches: int) -> None:
    """A Produce request the client writes in pieces, read by the core in many reads, reaches
    Python in one item dated by its last read: whole, or (bigger than its first bytes) as its
    size prefix and first bytes beside the core's digest of its body, no record crossing over.
    Fed to the Python road, the same request as the frame fed whole."""
    core = native.core()
    assert core is not None
    from_client = rig.kinds[0]
    body = encode(load("ProduceRequest"), 9, {"TransactionalId": None, "Acks": 1, "TimeoutMs": 1000, "TopicData": [
        {"Name": "t", "PartitionData": [{"Index": 0, "Records": record_batch() * batches}]}]})
    req = request_frame(apis.PRODUCE, 9, 11, "producer-1", body)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(_recv_exactly(rig.broker, len(req))))
    reader.start()
    piece = 50 if len(req) < 1000 else 32 << 10
    for at in range(0, len(req), piece):  # bounded: at most 80 sends
        rig.client.sendall(req[at:at + piece])
        time.sleep(0.002)
    reader.join(DEADLINE_S)
    assert got == [req]
    rig.drain_until(lambda: any(it[1] == from_client for it in rig.items), "the request handed to Python")
    items = [it for it in rig.items if it[1] == from_client]
    assert len(items) == 1
    if batches == 1:
        assert items[0][4] == req and items[0][11] is None
    else:
        assert items[0][4] == b"" and items[0][11] is not None
        head, skeleton, stats = items[0][11]
        assert head == req[:4 + 512] and len(skeleton) < 100 and len(stats) == 8 * core.DIGEST_STATS_WIDTH

    def sent(fed: list[tuple[bytes, tuple[bytes, bytes, bytes] | None, int]]) -> list[object]:
        conn = KafkaConnection(max_frame_bytes=MAX_FRAME)
        events: list[object] = []
        for data, digest, t in fed:
            if digest is not None:
                events += conn.digested_from_client(*digest, t)
            if data:
                events += conn.receive_from_client(data, t)
        return events
    through, whole = sent([(it[4], it[11], it[2]) for it in items]), sent([(req, None, items[-1][2])])
    assert [type(e) for e in through] == [type(e) for e in whole] and len(whole) == 2  # ProduceSent, RequestSeen
    assert [(e.request, e.t_request_ns) for e in through if isinstance(e, ProduceSent)] == \
        [(e.request, e.t_request_ns) for e in whole if isinstance(e, ProduceSent)]
    assert [e.size_bytes for e in through if isinstance(e, RequestSeen)] == [len(req) - 4]


def test_an_idle_relay_thread_sleeps_until_something_comes(rig: Rig) -> None:
    """With a pair carried and nothing moving, the relay's thread does not wake on a timer of its
    own (it woke every 200 ms before 2026-12-03); a byte still goes through at once."""
    rig.client.sendall(request_frame(apis.API_VERSIONS, 3, 1, "c", encode(load("ApiVersionsRequest"), 3, {
        "ClientSoftwareName": "c", "ClientSoftwareVersion": "1"})))
    _recv_exactly(rig.broker, 4)
    time.sleep(0.3)
    tid = thread_named("fetchlat-relay")
    before = voluntary_switches(tid)
    time.sleep(1.5)
    assert voluntary_switches(tid) - before <= 1  # 7 at a 200 ms wait


def test_the_buffers_handed_back_to_the_relay_thread_hold_a_bounded_memory(rig: Rig) -> None:
    """The drained items' buffers go back to the relay's thread to be filled again (``Spare``),
    but no more of them than ``RELAY_SPARE_HELD_BYTES`` in all: kept by count alone (256 of each
    kind), a hundred answers of about 100 KiB drained at once were all kept, and a burst of small
    produce requests left the pool holding about 20 MB (``docs/performance.md``)."""
    core = native.core()
    assert core is not None
    from_broker = rig.kinds[1]
    answers = 0
    for corr in range(100):  # bounded: a hundred exchanges, one in flight
        req, answer = _produce_exchange(corr, 3_000)
        rig.client.sendall(req)
        assert _recv_exactly(rig.broker, len(req)) == req
        rig.broker.sendall(answer)
        assert _recv_exactly(rig.client, len(answer)) == answer
        answers += len(answer)
    assert answers > 2 * core.RELAY_SPARE_HELD_BYTES
    rig.drain_until(lambda: sum(len(it[4]) for it in rig.items if it[1] == from_broker) >= answers,
                    "every answer handed to Python")
    kept, held = rig.relay.spare_held()
    assert kept > 0 and 0 < held <= core.RELAY_SPARE_HELD_BYTES


def test_after_a_sasl_handshake_v0_a_token_begun_and_not_finished_is_still_mid_frame(rig: Rig) -> None:
    """Once the client's bytes are the Python road's alone (raw SASL tokens may follow a
    SaslHandshake v0), the core still follows where its frames begin and end: the partial-frame
    timeout holds there as before the hand-over."""
    body = struct.pack(">hhih", 17, 0, 9, -1) + struct.pack(">h", 5) + b"PLAIN"
    rig.client.sendall(struct.pack(">i", len(body)) + body)
    assert _recv_exactly(rig.broker, 4 + len(body))[4:] == body
    answer = struct.pack(">i", 9) + b"\x00\x00" + struct.pack(">i", 1) + struct.pack(">h", 5) + b"PLAIN"
    rig.broker.sendall(struct.pack(">i", len(answer)) + answer)
    assert _recv_exactly(rig.client, 4 + len(answer))[4:] == answer
    token = b"\x00user\x00secret"
    rig.client.sendall(struct.pack(">i", len(token)) + token[:3])  # a raw token begun
    deadline = time.monotonic() + DEADLINE_S
    while _timers(rig)[4] == 0:
        assert time.monotonic() < deadline, "the token begun is not seen as a partial frame"
        time.sleep(0.002)
    rig.client.sendall(token[3:])
    assert _recv_exactly(rig.broker, 4 + len(token))[4:] == token
    assert _timers(rig)[4] == 0  # finished: no longer mid-frame


def test_broker_bytes_that_answer_nothing_end_the_pair_with_a_framing_error(rig: Rig) -> None:
    rig.broker.sendall(b"\x00\x00\x00")  # an answer's first bytes with no request in flight
    rig.drain_until(lambda: any(it[1] == rig.kinds[2] for it in rig.items), "end of the pair")
    assert [it[7] for it in rig.items if it[1] == rig.kinds[2]] == ["response from the broker matches no request"]
    assert rig.client.recv(1) == b""


def test_a_broker_gone_after_the_clients_half_close_still_delivers_every_byte_owed(rig: Rig) -> None:
    """The client half-closes; the broker answers with more than the client's socket takes at
    once and closes: the pair ends only once the client has every byte (the broker's hang-up,
    reported while it is not read, waits for them)."""
    req = struct.pack(">hhih", 18, 0, 7, -1)
    rig.client.sendall(struct.pack(">i", len(req)) + req)
    rig.client.shutdown(socket.SHUT_WR)
    assert _recv_exactly(rig.broker, 4 + len(req))[4:] == req
    assert rig.broker.recv(1) == b""
    body = struct.pack(">i", 7) + bytes(range(256)) * (32 * 1024)  # 8 MiB
    frame = struct.pack(">i", len(body)) + body
    t = threading.Thread(target=lambda: (rig.broker.sendall(frame), rig.broker.close()))
    t.start()
    time.sleep(0.5)  # the broker's close (a hang-up: both directions shut) while most of it waits
    assert _recv_exactly(rig.client, len(frame)) == frame
    t.join(DEADLINE_S)
    assert rig.client.recv(1) == b""
    rig.drain_until(lambda: any(it[1] == rig.kinds[2] for it in rig.items), "end of the pair")
    assert [it[7] for it in rig.items if it[1] == rig.kinds[2]] == [
        "broker closed the connection after the client's end of stream"]


def test_a_closed_relay_takes_no_connection() -> None:
    core = native.core()
    assert core is not None
    relay = core.Relay(MAX_FRAME, flexible_ranges(), route_ranges(None))
    relay.close()
    a, b = _pair()
    try:
        with pytest.raises(RuntimeError, match="closed"):
            relay.add(a.fileno(), b.fileno())
        a.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)  # still the caller's, still open
    finally:
        a.close()
        b.close()


def test_the_queue_to_python_is_bounded_and_says_how_deep_it_is() -> None:
    """Nobody drains: at the queue's bound the relay stops reading (back-pressure: a request sent
    then is not passed on), says how deep the queue is and how often it filled, and reads on once
    Python drains it."""
    core = native.core()
    assert core is not None
    relay = core.Relay(MAX_FRAME, flexible_ranges(), route_ranges(None), queue_max=(20, 1 << 20))
    relay_client, client = _pair()
    relay_broker, broker = _pair()
    relay.add(relay_client.detach(), relay_broker.detach())
    try:
        assert relay.queue_depth() == (0, 0, 20, 1 << 20, 0)
        req = struct.pack(">hhih", 18, 0, 0, -1)
        frame = struct.pack(">i", len(req)) + req
        for i in range(20):  # one read, one item (its record) each
            client.sendall(frame)
            assert _recv_exactly(broker, len(frame)) == frame, i
        deadline = time.monotonic() + DEADLINE_S
        while relay.queue_depth()[4] == 0:
            assert time.monotonic() < deadline, f"the queue never filled: {relay.queue_depth()}"
            time.sleep(0.002)
        assert relay.queue_depth()[:2] == (20, 0)
        client.sendall(frame)
        broker.settimeout(0.3)
        with pytest.raises(TimeoutError):
            broker.recv(64)  # not read meanwhile: the queue does not grow
        assert relay.queue_depth()[0] == 20
        assert len(items(*relay.drain())) == 20
        broker.settimeout(DEADLINE_S)
        assert _recv_exactly(broker, len(frame)) == frame  # read on once drained
        assert relay.queue_depth()[4] == 1
    finally:
        relay.close()
        client.close()
        broker.close()


def _stuck_pair(relay: object, hold: int) -> tuple[socket.socket, socket.socket, int]:
    """A pair whose client does not read, with small socket buffers: an answer of ``hold`` bytes
    from its broker is mostly held by the relay. (client, broker, id)."""
    relay_client, client = _pair()
    relay_client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    relay_broker, broker = _pair()
    conn = relay.add(relay_client.detach(), relay_broker.detach())  # type: ignore[attr-defined]
    req = struct.pack(">hhih", 18, 0, 7, -1)
    client.sendall(struct.pack(">i", len(req)) + req)
    assert _recv_exactly(broker, 4 + len(req))[4:] == req
    body = struct.pack(">i", 7) + b"\x00" * hold

    def answer() -> None:
        with contextlib.suppress(OSError):  # the relay may end the pair mid-answer: that is the test
            broker.sendall(struct.pack(">i", len(body)) + body)

    threading.Thread(target=answer, daemon=True).start()
    return client, broker, conn


@pytest.mark.parametrize("bound", ["pair", "total"])
def test_bytes_held_past_a_bound_close_the_connection_that_holds_them(bound: str) -> None:
    """What a connection holds after a read (here: an answer its client does not read) is bounded
    per connection and over all of them: past either, that connection ends, in words the event
    loop counts (``relay_buffers``); the relay says how much it holds."""
    core = native.core()
    assert core is not None
    held_max = (20_000, 1 << 30) if bound == "pair" else (1 << 30, 150_000)
    relay = core.Relay(MAX_FRAME, flexible_ranges(), route_ranges(None), held_max=held_max)
    ends: list[socket.socket] = []
    try:
        assert relay.held()[1:] == held_max
        got: list[tuple[object, ...]] = []
        deadline = time.monotonic() + DEADLINE_S
        for _ in range(8):  # stuck pairs (each holds what one read of its broker brought) until one ends
            client, broker, _ = _stuck_pair(relay, 2 << 20)
            ends += [client, broker]
            while time.monotonic() < deadline and relay.held()[0] < 20_000 and not got:
                got += [it for it in items(*relay.drain()) if it[1] == core.RELAY_KINDS[2]]
                time.sleep(0.01)
            time.sleep(0.1)
            got += [it for it in items(*relay.drain()) if it[1] == core.RELAY_KINDS[2]]
            if got:
                break
        assert got, f"nothing closed; the relay holds {relay.held()}"
        (reason,) = [it[7] for it in got if it[1] == core.RELAY_KINDS[2]]
        want = "the connection holds" if bound == "pair" else "the connections hold"
        assert reason.startswith("relay buffers: " + want), reason
        assert relay.held()[0] <= held_max[0 if bound == "pair" else 1]
    finally:
        relay.close()
        for s in ends:
            s.close()
