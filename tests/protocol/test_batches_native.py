"""The native core's walk of record batch headers (``native/src/lib.rs``: ``walk_batches``)
against the Python road's (``protocol/stream.py``: ``walk``): the same figures for the same
bytes, whatever the bytes. Captured fetch responses of four real clients go through the direct
parser (whole frames: the native walk where it is loaded) and through the streaming parser fed
in pieces (the batches whole in a piece walked by the core, the ones across two pieces in
Python); generated blobs -- valid batches, control batches, cut ones, lengths that lie, other
magics, garbage -- go through the native walk, the Python walk and the streaming walk."""

from __future__ import annotations

import struct
from collections.abc import Generator

import pytest
from fetchlat import native
from fetchlat.protocol import apis, stream, stream_now
from fetchlat.protocol.responses import _twin
from fetchlat.protocol.stream import BATCH_HEADER_BYTES, BatchStats, Feeder, Reader
from hypothesis import given, settings
from hypothesis import strategies as st

from testkit.captures import RUNS, frames

needs_core = pytest.mark.skipif(stream.WALK is None, reason=f"native core not loaded: {native.reason()}")

HEADER = struct.Struct(">qiiBIhiqqqhii")  # a v2 batch header, every field


def batch(base: int, records: int = 1, *, size: int = 80, magic: int = 2, attrs: int = 0, last_delta: int = 0,
          base_ts: int = 1_000, max_ts: int = 1_000, length: int | None = None) -> bytes:
    head = HEADER.pack(base, size - 12 if length is None else length, 0, magic, 0, attrs, last_delta, base_ts,
                       max_ts, -1, -1, -1, records)
    return head + bytes(max(0, size - len(head)))


def _walker(n: int, whole: object) -> Generator[None, bytes, BatchStats]:
    r = Reader()
    return (yield from stream.walk(r, n, whole))  # type: ignore[arg-type]


def in_pieces(blob: bytes, step: int) -> BatchStats:
    """The streaming walk, the native core taking the batches whole in each piece."""
    feeder = Feeder(_walker(len(blob), stream.WALK_WHOLE))
    for i in range(0, len(blob), step):
        feeder.feed(blob[i:i + step])
    result = feeder.finish()
    assert feeder.error is None, feeder.error
    return result


def both(blob: bytes, pad: bytes = b"\x07" * 5) -> tuple[BatchStats, BatchStats]:
    """The native and the Python walk of ``blob`` lying inside a larger buffer."""
    buf = pad + blob + pad
    r_native, r_python = Reader(buf), Reader(buf)
    r_native.pos = r_python.pos = len(pad)
    native_stats = stream.walk_native(r_native, len(blob))
    python_stats = stream_now.walk_now(r_python, len(blob))
    assert r_native.pos == r_python.pos == len(pad) + len(blob)
    return native_stats, python_stats


def fields(s: BatchStats) -> tuple[object, ...]:
    return (s.size_bytes, s.batches, s.records, s.first_offset, s.first_timestamp_ms, s.next_offset,
            s.max_timestamp_ms, s.log_append_time, s.control_batches, s.partial_bytes, s.legacy)


@needs_core
def test_valid_control_cut_and_legacy_batches_walk_alike() -> None:
    cases = {
        "one-record batches": b"".join(batch(i) for i in range(1000)),
        "a control batch among data": batch(0, 3, last_delta=2) + batch(3, 1, attrs=0x20) + batch(4, 5, last_delta=4),
        "log append time, last one wins": batch(0, attrs=0x08, max_ts=9) + batch(1, max_ts=3),
        "a last batch cut at max bytes": batch(0) + batch(1)[:70],
        "a tail shorter than a header": batch(0) + bytes(30),
        "a length that runs past the blob": batch(0) + batch(1, length=10_000),
        "a length below a header's": batch(0, length=20) + batch(1),
        "magic 1 stops the walk": batch(0) + batch(1, magic=1) + batch(2),
        "a negative first base offset is taken again": batch(-5) + batch(7),
        "offsets near the top of int64": batch(2**63 - 10, last_delta=2**31 - 1),
        "a negative record count": batch(0, records=-3),
        "empty": b"",
    }
    for name, blob in cases.items():
        n, p = both(blob)
        assert fields(n) == fields(p), name
        for step in (1, 7, 61, 100, 1000, 1 << 20):
            assert fields(in_pieces(blob, step)) == fields(p), (name, step) if blob else None
    n, _ = both(cases["a control batch among data"])
    assert (n.batches, n.records, n.control_batches, n.next_offset) == (3, 8, 1, 9)


@needs_core
@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(-2**31, 2**31 - 1),
                          st.sampled_from([0, 1, 2, 2, 2, 3, 255]), st.integers(-2**15, 2**15 - 1),
                          st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1),
                          st.one_of(st.integers(BATCH_HEADER_BYTES - 12, 300), st.integers(-2**31, 2**31 - 1))),
                max_size=12),
       st.binary(max_size=80))
def test_generated_headers_and_garbage_walk_alike(heads: list[tuple[int, ...]], tail: bytes) -> None:
    blob = b""
    for base, count, magic, attrs, last_delta, max_ts, length in heads:
        body = max(0, min(length, 300) - (BATCH_HEADER_BYTES - 12))
        blob += HEADER.pack(base, length, 0, magic, 0, attrs, last_delta, 0, max_ts, -1, -1, -1, count) + bytes(body)
    blob += tail
    for cut in (len(blob), len(blob) // 2, max(0, len(blob) - 1)):
        n, p = both(blob[:cut])
        assert fields(n) == fields(p)
        if cut:
            for step in (13, 97, 500):
                assert fields(in_pieces(blob[:cut], step)) == fields(p), step


@needs_core
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_walk_alike(blob: bytes) -> None:
    n, p = both(blob)
    assert fields(n) == fields(p)


@needs_core
def test_a_range_outside_the_buffer_is_refused() -> None:
    assert stream.WALK is not None
    for start, n in ((0, 11), (10, 1), (2**62, 2**62)):
        with pytest.raises(ValueError, match="outside"):
            stream.WALK(b"0123456789", start, n)
    assert stream.WALK(memoryview(b"0123456789")[2:], 0, 8)[0] == 0  # any contiguous buffer of bytes


def _stats(info: object) -> list[tuple[object, ...]]:
    return [fields(p.batches) if p.batches is not None else None for p in info.partitions]  # type: ignore[attr-defined]


@needs_core
def test_captured_fetch_responses_walk_alike_whole_and_in_pieces() -> None:
    seen = 0
    for run in RUNS:
        for f in frames(run):
            if f.direction != "resp" or f.api_key != apis.FETCH:
                continue
            twin = _twin(apis.FETCH, f.api_version, None)
            body = f.body[4:]  # after the correlation id
            whole = twin.direct(body)  # the direct parser: the native walk of every partition's records
            for step in (7, 300, 4096):  # the streaming parser: batches across pieces, and whole in them
                feeder = Feeder(twin)
                for i in range(0, len(body), step):
                    feeder.feed(body[i:i + step])
                pieces = feeder.finish()
                assert feeder.error is None, (run, feeder.error)
                assert _stats(whole) == _stats(pieces), (run, step)
            seen += sum(1 for p in whole.partitions if p.batches is not None and p.batches.batches)
    assert seen >= 5, seen  # partitions that carried batches, over the captures
