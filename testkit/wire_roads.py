"""One connection's byte streams through the two roads that frame them: the Python road
(``protocol/connection.py``'s ``KafkaConnection``: requests seen, responses matched) and the native
core's ``Wire`` (``native/src/wire.rs``: the same as records). What the differential test
(``tests/protocol/test_wire_native.py``) and the fuzz harness (``tests/fuzz/harness.py``) compare.

A road's output is one entry per chunk fed: the requests seen and the responses matched in that
chunk, as tuples of the same fields; a framing error ends it (that chunk's entry is the error's
words). From the chunk where a SaslHandshake v0 goes by, only the Python road goes on (its answer
may turn the connection to raw tokens), so outputs are compared up to that chunk.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from fetchlat import native
from fetchlat.protocol import apis, fetch, produce, share
from fetchlat.protocol.connection import KafkaConnection
from fetchlat.protocol.errors import FramingError
from fetchlat.protocol.events import DecodeFailed, RequestSeen, ResponseSeen

CORE = native.core()
MAX_FRAME = 1 << 20
UNREADABLE = "request header longer than the peek window"

Chunk = tuple[bool, bytes]  # (from the client, bytes)
Step = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]] | str  # (requests, responses) or an error


def wire(max_frame_bytes: int = MAX_FRAME) -> Any:
    """A native ``Wire`` with the tables the Python road uses (flexible request versions from the
    specs; the versions ``inflight.observed`` decodes)."""
    assert CORE is not None
    flexible = [(k, a.request_flexible.lo, a.request_flexible.hi) for k, a in apis.table().items()]
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


def native_road(chunks: Iterable[Chunk]) -> tuple[list[Step], int | None]:
    """The native road's steps, and the index of the chunk after which only Python goes on."""
    assert CORE is not None
    expects, _, unreadable, _, _ = CORE.WIRE_FLAGS
    w = wire()
    out: list[Step] = []
    for t, (from_client, data) in enumerate(chunks):
        try:
            (w.from_client if from_client else w.from_broker)(data, t)
        except ValueError as exc:
            out.append(str(exc))
            return out, None
        raw, ids = w.drain()
        names = [i.decode("utf-8") for i in ids]
        requests, responses = [], []
        for kind, corr, key, ver, cid, size, flags, t_req, t_first, t_last in struct.iter_unpack(
                f"={CORE.WIRE_RECORD_WIDTH}q", raw):
            client = names[cid] if cid >= 0 else None
            if kind == 1:
                requests.append((corr, key, ver, client, size, bool(flags & expects), t_req, bool(flags & unreadable)))
            else:
                responses.append((corr, key, ver, client, size, t_req, t_first, t_last))
        out.append((requests, responses))
        if w.needs_python:
            return out, t
    return out, None


def disagreement(chunks: list[Chunk]) -> str | None:
    """None when both roads frame ``chunks`` alike; otherwise the first chunk where they differ."""
    chunks = list(chunks)
    nat, stop = native_road(chunks)
    py = python_road(chunks)
    if stop is not None:
        py = py[:stop + 1]
    for i, (a, b) in enumerate(zip(py, nat, strict=False)):
        if a != b:
            return f"chunk {i} ({'request' if chunks[i][0] else 'response'} bytes {chunks[i][1][:64]!r}): " \
                   f"Python {a!r}, native {b!r}"
    if len(py) != len(nat):
        return f"Python read {len(py)} chunks, native {len(nat)}"
    return None
