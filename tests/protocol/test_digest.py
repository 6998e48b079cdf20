"""The native core's digest of a Fetch answer and of a Produce request's body
(``native/src/digest.rs``; ``protocol/digested.py``): its skeleton parsed by the codec, with the
core's figures of each records field put back, reads what the codec reads of the whole message,
for every version: generated messages (whole, in random pieces, a byte at a time), the captured
ones, garbage and answers cut short (where the core gives no digest, the codec cannot read the
bytes either)."""

from __future__ import annotations

import pytest
from fetchlat import native
from fetchlat.protocol import apis, digested, fetch_now
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.errors import DecodeError
from fetchlat.protocol.headers import parse_request_header, response_body_start
from fetchlat.protocol.schema import load
from hypothesis import given, settings
from hypothesis import strategies as st

from testkit.captures import RUNS, frames
from testkit.digests import codec_reads

from .specgen import struct_strategy
from .test_fetch_produce import SETTINGS, cuts_for, with_records

CORE = native.core()
pytestmark = pytest.mark.skipif(CORE is None, reason=f"native core not loaded: {native.reason()}")


def _after_correlation_id(body: bytes, version: int) -> bytes:
    """A response body as the relay holds it: after the correlation id, the header's tags first."""
    return (b"\x00" if version >= 12 else b"") + body


def _through_digest(body: bytes, version: int, cuts: list[int] | None = None, produce: bool = False) -> object:
    """The codec's reading of the core's digest of ``body`` (fed in the pieces ``cuts`` makes; a
    Produce request's body with ``produce``); None where the core could not follow it."""
    assert CORE is not None
    got = CORE.digest_fetch(body, version, cuts or [], produce)
    if got is None:
        return None
    skeleton, stats = got
    assert len(stats) % digested.STATS.size == 0
    info = codec_reads(skeleton, version, produce)
    if info is DecodeError:
        return DecodeError
    assert digested.restore(info, stats) is None  # type: ignore[arg-type]
    return info


@pytest.mark.parametrize("version", range(4, 19))
@SETTINGS
@given(data=st.data())
def test_a_generated_answer_reads_the_same_through_the_digest(version: int, data: st.DataObject) -> None:
    spec = load("FetchResponse")
    body = _after_correlation_id(encode(spec, version, with_records(data.draw(struct_strategy(spec.fields, version)),
                                                                    data)), version)
    whole = codec_reads(body, version)
    assert whole is not DecodeError
    assert _through_digest(body, version) == whole
    assert _through_digest(body, version, cuts_for(data, len(body))) == whole  # as the reads cut it
    assert _through_digest(body, version, list(range(1, len(body)))) == whole  # a byte at a time


def test_every_captured_fetch_answer_reads_the_same_through_the_digest() -> None:
    n = 0
    for f in (f for run in RUNS for f in frames(run)):
        if f.api_key != apis.FETCH or f.direction != "resp":
            continue
        start = response_body_start(f.api_key, f.api_version, f.body)
        body = bytes(f.body[4:])  # after the correlation id: the header's tags, if any, are the digest's
        assert start >= 4
        whole = codec_reads(body, f.api_version)
        assert whole is not DecodeError
        assert _through_digest(body, f.api_version) == whole
        assert _through_digest(body, f.api_version, list(range(7, len(body), 7))) == whole
        n += 1
    assert n >= 4  # the clients' runs hold Fetch answers (the admin run none)


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=300), version=st.integers(4, 18))
def test_garbage_gets_no_digest_or_one_that_reads_as_the_bytes_do(body: bytes, version: int) -> None:
    got = _through_digest(body, version)
    if got is None:  # the core could not follow it: nor can the codec read it
        assert codec_reads(body, version) is DecodeError
    else:  # the core followed it: the codec reads the skeleton as it reads the bytes
        assert got == codec_reads(body, version)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), version=st.integers(4, 18), cut=st.integers(1, 40))
def test_a_cut_answer_gets_no_digest_or_one_that_fails_as_the_bytes_do(data: st.DataObject, version: int,
                                                                       cut: int) -> None:
    spec = load("FetchResponse")
    body = _after_correlation_id(encode(spec, version, with_records(data.draw(struct_strategy(spec.fields, version)),
                                                                    data)), version)
    short = body[:max(0, len(body) - cut)]
    got = _through_digest(short, version, cuts_for(data, len(short)))
    if got is None:
        assert codec_reads(short, version) is DecodeError
    else:
        assert got == codec_reads(short, version)


def test_versions_the_codec_does_not_read_get_no_digest() -> None:
    assert CORE is not None
    assert CORE.digest_fetch(b"\x00" * 64, 3) is None and CORE.digest_fetch(b"\x00" * 64, 19) is None


def test_figures_that_do_not_pair_up_are_the_answers_decode_failure() -> None:
    spec = load("FetchResponse")
    body = _after_correlation_id(encode(spec, 12, {"ThrottleTimeMs": 0, "Responses": [{
        "Topic": "t", "Partitions": [{"PartitionIndex": 0, "HighWatermark": 1, "LastStableOffset": 1,
                                      "Records": b""}]}]}), 12)
    info = fetch_now.parse_response_now(body, 12, after_correlation_id=True)
    assert digested.restore(info, b"") is not None  # a records field without its figures
    info = fetch_now.parse_response_now(body, 12, after_correlation_id=True)
    assert digested.restore(info, digested.STATS.pack(0, *[0] * 10) * 2) is not None  # figures for none


@pytest.mark.parametrize("version", range(3, 14))
@SETTINGS
@given(data=st.data())
def test_a_generated_produce_request_reads_the_same_through_the_digest(version: int, data: st.DataObject) -> None:
    spec = load("ProduceRequest")
    body = encode(spec, version, with_records(data.draw(struct_strategy(spec.fields, version)), data))
    whole = codec_reads(body, version, produce=True)
    assert whole is not DecodeError
    assert _through_digest(body, version, produce=True) == whole
    assert _through_digest(body, version, cuts_for(data, len(body)), produce=True) == whole
    assert _through_digest(body, version, list(range(1, len(body))), produce=True) == whole


def test_every_captured_produce_request_reads_the_same_through_the_digest() -> None:
    n = 0
    for f in (f for run in RUNS for f in frames(run)):
        if f.api_key != apis.PRODUCE or f.direction != "req":
            continue
        body = bytes(f.body[parse_request_header(f.body).body_start:])
        whole = codec_reads(body, f.api_version, produce=True)
        assert whole is not DecodeError
        assert _through_digest(body, f.api_version, produce=True) == whole
        assert _through_digest(body, f.api_version, list(range(5, len(body), 5)), produce=True) == whole
        n += 1
    assert n >= 4


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=300), version=st.integers(3, 13))
def test_a_garbage_request_gets_no_digest_or_one_that_reads_as_the_bytes_do(body: bytes, version: int) -> None:
    got = _through_digest(body, version, produce=True)
    if got is None:
        assert codec_reads(body, version, produce=True) is DecodeError
    else:
        assert got == codec_reads(body, version, produce=True)
