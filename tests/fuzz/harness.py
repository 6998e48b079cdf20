"""The codec fuzz target, shared by the coverage-guided fuzzer (``make fuzz``, atheris) and the
regression test that replays every input it ever crashed on (tests/fuzz/test_regressions.py).

An input is a conversation: one byte choosing how the streams are cut into reads, then
records of (direction byte, 2-byte length, bytes). Requests go through
``receive_from_client``, responses through ``receive_from_broker`` with a rewriter that moves
every broker, and decoded fetches and produces go through the latency model. The only
exception allowed out is ``ProtocolError`` -- on a real connection it closes that connection.
Where the native core is loaded, every response's bytes are also walked as records by the core
and by the Python road (``walk_batches`` against ``walk``), every message's is digested as a Fetch
answer (a request's: a Produce request) of several versions by the core in the input's reads
against the codec's reading (``digests_agree``: the skeleton and its figures read as the bytes
are, and no digest only where the codec cannot read them either), and the conversation is
framed by the
core's ``Wire`` and by the Python road without a rewriter (``testkit/wire_roads.py``: the same
requests seen and responses matched, the same framing error), the core's relay itself carries it
over loopback sockets as the Python road frames it (every byte on, or the pair ended in the
Python road's words: ``relay_disagreement``), and the routed road (the core
first, the frames the Python road parses routed to it, with a rewriter) must forward and observe
as the Python road alone: a difference is a crash. Seeds are
the captured conversations of four real clients."""

from __future__ import annotations

import struct
from collections.abc import Iterator

from fetchlat.metrics.model import LatencyModel
from fetchlat.protocol import digested
from fetchlat.protocol.connection import KafkaConnection
from fetchlat.protocol.errors import DecodeError, ProtocolError
from fetchlat.protocol.events import FetchExchanged, ProduceExchanged
from fetchlat.protocol.rewrite import ResponseRewriter
from fetchlat.protocol.stream import WALK, Reader, walk_native
from fetchlat.protocol.stream_now import walk_now

from testkit.digests import codec_reads
from testkit.wire_roads import CORE, disagreement, relay_disagreement, routed_disagreement

MAX_RECORDS = 64
REWRITER = ResponseRewriter(lambda node, host, port: ("fuzz.example", 40000 + node % 1000))


def records(data: bytes) -> Iterator[tuple[bool, bytes]]:
    pos = 1
    for _ in range(MAX_RECORDS):
        if pos + 3 > len(data):
            return
        is_request = data[pos] % 2 == 0
        n = struct.unpack_from(">H", data, pos + 1)[0]
        yield is_request, data[pos + 3:pos + 3 + n]
        pos += 3 + n


def chunks(b: bytes, cut: int) -> Iterator[bytes]:
    """Split ``b`` into reads of 1..cut+1 bytes (cut 255: one read)."""
    if cut == 255 or not b:
        yield b
        return
    step = cut + 1
    for i in range(0, len(b), step):
        yield b[i:i + step]


def walks_agree(blob: bytes) -> None:
    """The native core's walk of ``blob`` as records is the Python road's, field for field."""
    if WALK is None:
        return
    a, b = Reader(blob), Reader(blob)
    n, p = walk_native(a, len(blob)), walk_now(b, len(blob))
    fields = ("size_bytes", "batches", "records", "first_offset", "first_timestamp_ms", "next_offset",
              "max_timestamp_ms", "log_append_time", "control_batches", "partial_bytes", "legacy")
    got = [(f, getattr(n, f), getattr(p, f)) for f in fields if getattr(n, f) != getattr(p, f)]
    if got or a.pos != b.pos:
        raise AssertionError(f"the native and Python walks differ: {got}, positions {a.pos} {b.pos}")


DIGEST_VERSIONS = (4, 7, 11, 12, 13, 16, 18)  # each layout change of the Fetch answer
PRODUCE_DIGEST_VERSIONS = (3, 9, 13)  # and of the Produce request


def digests_agree(payload: bytes, cut: int, produce: bool = False) -> None:
    """The core's digest of ``payload`` past its first 8 bytes (an answer's size and correlation
    id; a request's size and key, version: its body is garbage or not), as a Fetch answer of each
    of ``DIGEST_VERSIONS`` (with ``produce``, a Produce request of ``PRODUCE_DIGEST_VERSIONS``) fed
    in the input's reads, reads as the bytes do."""
    if CORE is None:
        return
    body = payload[8:]
    step = cut + 1
    cuts = [] if cut == 255 else list(range(step, len(body), step))
    what = "Produce request" if produce else "Fetch answer"
    for v in PRODUCE_DIGEST_VERSIONS if produce else DIGEST_VERSIONS:
        got = CORE.digest_fetch(body, v, cuts, produce)
        want = codec_reads(body, v, produce)
        if got is None:
            if want is not DecodeError:
                raise AssertionError(f"the core could not follow a {what} v{v} the codec reads")
            continue
        info = codec_reads(got[0], v, produce)
        if info is not DecodeError and digested.restore(info, got[1]) is not None:  # type: ignore[arg-type]
            raise AssertionError(f"the core's digest of a {what} v{v} does not pair up")
        if info != want:
            raise AssertionError(f"the core's digest of a {what} v{v} reads otherwise than its bytes")


def wires_agree(data: bytes, cut: int) -> None:
    """The native core's ``Wire`` frames the conversation as the Python road does."""
    if CORE is None:
        return
    fed = [(is_request, piece) for is_request, payload in records(data) for piece in chunks(payload, cut) if piece]
    d = disagreement(fed)
    if d is not None:
        raise AssertionError(f"the native and Python framing differ: {d}")
    d = routed_disagreement(fed, REWRITER)
    if d is not None:
        raise AssertionError(f"the routed road and the Python road differ: {d}")
    d = relay_disagreement(fed)
    if d is not None:
        raise AssertionError(f"the relay and the Python road differ: {d}")


def one_input(data: bytes) -> None:
    if not data:
        return
    cut = data[0]
    wires_agree(data, cut)
    conn = KafkaConnection(rewriter=REWRITER, max_frame_bytes=1 << 20, wait_time_tag=99)
    model = LatencyModel(wall_minus_mono_ns=0)
    t = 1_000
    try:
        for is_request, payload in records(data):
            if not is_request:
                walks_agree(payload)
            digests_agree(payload, cut, produce=is_request)
            for piece in chunks(payload, cut):
                t += 1_000
                if is_request:
                    conn.receive_from_client(piece, t)
                    continue
                segments, events = conn.receive_from_broker(piece, t)
                for s in segments:
                    bytes(s)  # forwarded segments must be real buffers
                for ev in events:
                    if isinstance(ev, FetchExchanged):
                        model.on_fetch(ev)
                    elif isinstance(ev, ProduceExchanged):
                        model.on_produce(ev)
    except ProtocolError:
        return


def encode_conversation(frames: list[tuple[bool, bytes]], cut: int = 255) -> bytes:
    out = bytearray([cut])
    for is_request, wire in frames:
        for i in range(0, len(wire), 0xFFFF):  # a long frame spans records of one direction
            part = wire[i:i + 0xFFFF]
            out += bytes([0 if is_request else 1]) + struct.pack(">H", len(part)) + part
    return bytes(out)


def seeds() -> Iterator[bytes]:
    from testkit.captures import RUNS, conversations

    for run in RUNS:
        for frames in conversations(run).values():
            wires = [(f.direction == "req", f.wire) for f in frames]
            yield encode_conversation(wires)
            yield encode_conversation(wires, cut=6)
