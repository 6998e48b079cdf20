"""The native core's framing, headers and correlation (``native/src/wire/``: ``Wire``) against
the Python road's (``protocol/requests.py``, ``protocol/responses.py``): the same requests seen
and the same responses matched, with the same client ids, sizes and stamps, for the same bytes
whatever the bytes, and the same framing errors in the same words.

The captured conversations of real clients are fed both ways: every frame whole, cut at every
byte boundary, in pieces of a few sizes, and pipelined (a direction's consecutive frames in one
chunk). Generated streams -- headers of every version, client ids that are not UTF-8 or run past
the peek window, produces with acks 0, sizes that lie, garbage -- go through both as well.
"""

from __future__ import annotations

import struct

import pytest
from fetchlat import native
from fetchlat.protocol import apis
from fetchlat.protocol.framing import request_frame, response_frame
from fetchlat.protocol.primitives import encode_uvarint
from fetchlat.protocol.rewrite import ResponseRewriter
from hypothesis import given, settings
from hypothesis import strategies as st

from testkit.captures import RUNS, Frame, conversations
from testkit.wire_roads import (
    CORE,
    MAX_FRAME,
    Chunk,
    cut_frames,
    disagreement,
    frame_pieces,
    pipelined,
    python_road,
    routed_disagreement,
    wire,
)

needs_core = pytest.mark.skipif(CORE is None, reason=f"native core not loaded: {native.reason()}")


REWRITER = ResponseRewriter(lambda node, host, port: ("proxy", 9000 + node))


def agree(chunks: list[Chunk]) -> None:
    """Both roads frame ``chunks`` alike, and the routed road (the core first, only the frames
    the Python road parses routed to it) forwards and observes as the Python road alone, with
    and without a rewriter (which routes more: ApiVersions, Metadata, FindCoordinator...)."""
    assert (d := disagreement(chunks)) is None, d
    assert (d := routed_disagreement(chunks)) is None, d
    assert (d := routed_disagreement(chunks, REWRITER)) is None, d


CONVERSATIONS = [(run, conn, frames) for run in RUNS for conn, frames in conversations(run).items()]


@needs_core
@pytest.mark.parametrize(("run", "conn", "frames"), CONVERSATIONS, ids=[f"{r}-{c}" for r, c, _ in CONVERSATIONS])
def test_captured_conversations_agree_whole_cut_and_pipelined(run: str, conn: int, frames: list[Frame]) -> None:
    whole = [(f.direction == "req", f.wire) for f in frames]
    assert any(isinstance(s, tuple) and s[0] for s in python_road(whole)), "a conversation with requests"
    agree(whole)
    agree(list(pipelined(frames)))
    for step in (1, 3, 7, 300):
        agree(list(frame_pieces(frames, step)))
    for at in range(1, max(len(f.wire) for f in frames)):
        agree(list(cut_frames(frames, at)))


def _header_request(key: int, ver: int, corr: int, client: bytes | None, body: bytes, tags: bytes = b"\x00") -> bytes:
    """A request frame written by hand: any client id bytes, any tag buffer, for any header version."""
    head = struct.pack(">hhi", key, ver, corr)
    hv = apis.request_header_version(key, ver)
    if hv >= 1:
        head += struct.pack(">h", -1) if client is None else struct.pack(">h", len(client)) + client
    if hv >= 2:
        head += tags
    frame = head + body
    return len(frame).to_bytes(4, "big") + frame


def _produce_body(ver: int, txn: bytes | None, acks: int) -> bytes:
    if ver >= 9:
        t = b"\x00" if txn is None else encode_uvarint(len(txn) + 1) + txn
    else:
        t = struct.pack(">h", -1) if txn is None else struct.pack(">h", len(txn)) + txn
    return t + struct.pack(">hi", acks, 1000) + b"\x00" * 4


@needs_core
@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from([0, 1, 3, 7, 17, 18, 36, 60, 78, 200, -1]), ver=st.integers(-1, 20),
       corr=st.integers(-2**31, 2**31 - 1),
       client=st.one_of(st.none(), st.binary(max_size=8), st.sampled_from([b"\xff\xfe", b"x" * 600, "é".encode()])),
       tags=st.sampled_from([b"\x00", b"\x01\x05\x02ab", b"\x02", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"]),
       txn=st.one_of(st.none(), st.binary(max_size=6), st.just(b"t" * 600)), acks=st.sampled_from([0, 1, -1]),
       cut=st.integers(0, 700), answer=st.booleans())
def test_generated_headers_agree(key: int, ver: int, corr: int, client: bytes | None, tags: bytes,
                                 txn: bytes | None, acks: int, cut: int, answer: bool) -> None:
    body = _produce_body(ver, txn, acks) if key == apis.PRODUCE else b"\x00" * 6
    req = _header_request(key, ver, corr, client, body, tags)
    chunks: list[Chunk] = [(True, req[:cut]), (True, req[cut:])] if 0 < cut < len(req) else [(True, req)]
    if answer:
        resp = response_frame(max(key, 0), max(ver, 0), corr, b"\x00" * 5)
        chunks += [(False, resp[:cut % len(resp)]), (False, resp[cut % len(resp):])]
    agree([c for c in chunks if c[1]])


@needs_core
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.binary(min_size=1, max_size=40)), min_size=1,
                max_size=8))
def test_garbage_agrees(chunks: list[Chunk]) -> None:
    agree(chunks)


@needs_core
@pytest.mark.parametrize("case", ["size 0", "size negative", "size too big", "answer to nothing",
                                  "wrong correlation", "answer too short", "request too short"])
def test_framing_errors_in_the_python_roads_words(case: str) -> None:
    api = request_frame(apis.API_VERSIONS, 3, 7, "me", b"\x00\x00\x00")
    chunks: list[Chunk] = {
        "size 0": [(True, b"\x00\x00\x00\x00")],
        "size negative": [(True, api), (False, b"\xff\xff\xff\xfe\x00\x00\x00\x07")],
        "size too big": [(True, (MAX_FRAME + 1).to_bytes(4, "big") + b"\x00" * 8)],
        "answer to nothing": [(False, response_frame(apis.API_VERSIONS, 3, 7, b"\x00"))],
        "wrong correlation": [(True, api), (False, response_frame(apis.API_VERSIONS, 3, 8, b"\x00"))],
        "answer too short": [(True, api), (False, b"\x00\x00\x00\x02\x00\x07\x00\x00")],
        "request too short": [(True, b"\x00\x00\x00\x05\x00\x12\x00\x03\x00")],
    }[case]
    py = python_road(chunks)
    assert isinstance(py[-1], str), "the case is a framing error"
    agree(chunks)


@needs_core
def test_acks_zero_has_no_answer_and_a_sasl_v0_hands_the_connection_back() -> None:
    produce0 = _header_request(apis.PRODUCE, 9, 5, b"p", _produce_body(9, None, 0))
    api = request_frame(apis.API_VERSIONS, 3, 6, "p", b"\x00\x00\x00")
    chunks: list[Chunk] = [(True, produce0 + api), (False, response_frame(apis.API_VERSIONS, 3, 6, b"\x00"))]
    (requests, _), (_, responses) = python_road(chunks)
    assert [r[5] for r in requests] == [False, True] and [r[0] for r in responses] == [6]
    agree(chunks)
    w = wire()
    w.from_client(request_frame(apis.SASL_HANDSHAKE, 0, 1, "p", b"\x00\x05PLAIN"), 0)
    assert w.needs_python
