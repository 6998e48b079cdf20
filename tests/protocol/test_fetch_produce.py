"""The Fetch and Produce push parsers against two references: the spec-driven walker for
every field, and kafka-python's record-batch reader for the batch headers. Generated
messages cover every version; each is fed in random chunk splits."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from fetchlat.protocol import apis, fetch, fetch_now, produce, produce_now
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.headers import parse_request_header, response_body_start
from fetchlat.protocol.schema import load
from fetchlat.protocol.stream import BatchStats, Feeder, Twin, parse_whole
from fetchlat.protocol.walker import walk
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from testkit.captures import frames

from .specgen import struct_strategy


@st.composite
def record_blob(draw: st.DrawFn) -> bytes:
    out = b""
    offset = draw(st.integers(0, 10**9))
    for _ in range(draw(st.integers(0, 4))):
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                      producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
        n = draw(st.integers(1, 5))
        ts = draw(st.integers(0, 2**41))
        for i in range(n):
            b.append(i, timestamp=ts + i, key=b"k", value=b"v" * draw(st.integers(0, 40)), headers=[])
        batch = bytearray(b.build())
        struct.pack_into(">q", batch, 0, offset)
        if draw(st.booleans()):  # LogAppendTime (attribute bit 3)
            struct.pack_into(">h", batch, 21, struct.unpack_from(">h", batch, 21)[0] | 0x08)
        out += bytes(batch)
        offset += n + draw(st.integers(0, 3))
    if out and draw(st.booleans()):  # a partial last batch, as fetch responses may end
        out = out[: len(out) - draw(st.integers(1, min(len(out) - 1, 80)))] if len(out) > 1 else out
    return out


def oracle_stats(blob: bytes | None) -> BatchStats | None:
    if blob is None:
        return None
    st_ = BatchStats(size_bytes=len(blob))
    mr = MemoryRecords(blob)
    used = 0
    while True:
        b = mr.next_batch()
        if b is None:
            break
        used += b.size_in_bytes
        st_.batches += 1
        st_.records += b.records_count
        if st_.first_offset < 0:
            st_.first_offset = b.base_offset
            st_.first_timestamp_ms = b.first_timestamp
        st_.next_offset = b.base_offset + b.last_offset_delta + 1
        st_.max_timestamp_ms = max(st_.max_timestamp_ms, b.max_timestamp)
        st_.log_append_time = b.timestamp_type == 1
    st_.partial_bytes = len(blob) - used
    return st_


def with_records(value: Any, blobs: st.DataObject) -> Any:
    if isinstance(value, dict):
        return {k: (blobs.draw(st.none() | record_blob()) if k == "Records" else with_records(v, blobs))
                for k, v in value.items()}
    if isinstance(value, list):
        return [with_records(v, blobs) for v in value]
    return value


def feed_split(gen: Any, data: bytes, cuts: list[int]) -> Any:
    f = Feeder(gen)
    for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(data)], strict=True)):
        # slices of a read (memoryview) and whole reads (bytes) take different roads in the
        # compiled build's batch reader (stream.records): both, in one message
        f.feed(memoryview(data)[a:b] if i % 2 == 0 else data[a:b])
    result = f.finish()
    assert f.error is None, f.error
    return result


def cuts_for(data: st.DataObject, n: int) -> list[int]:
    return data.draw(st.lists(st.integers(1, max(1, n - 1)), max_size=8, unique=True).map(sorted)) if n > 1 else []


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("version", range(4, 19))
@SETTINGS
@given(data=st.data())
def test_fetch_response(version: int, data: st.DataObject) -> None:
    spec = load("FetchResponse")
    value = with_records(data.draw(struct_strategy(spec.fields, version)), data)
    body = encode(spec, version, value)
    info = feed_split(fetch.parse_response(version), body, cuts_for(data, len(body)))
    ref = walk(spec, version, body).to_plain(body)
    assert (info.throttle_time_ms, info.error_code, info.session_id) == (
        ref.get("ThrottleTimeMs", 0), ref.get("ErrorCode", 0), ref.get("SessionId", 0))
    assert info.node_endpoints == bool(ref.get("NodeEndpoints"))  # decides whether a response is walked
    assert fetch_now.parse_response_now(body, version) == info  # the direct twin reads the same
    expected = [(t.get("Topic"), t.get("TopicId"), p["PartitionIndex"], p["ErrorCode"], p["HighWatermark"],
                 p["LastStableOffset"], p.get("LogStartOffset", -1), p.get("PreferredReadReplica", -1),
                 oracle_stats(p["Records"])) for t in ref["Responses"] or [] for p in t["Partitions"] or []]
    got = [(p.topic, p.topic_id, p.partition, p.error_code, p.high_watermark, p.last_stable_offset,
            p.log_start_offset, p.preferred_read_replica, p.batches) for p in info.partitions]
    assert got == expected


@pytest.mark.parametrize("version", range(4, 19))
@SETTINGS
@given(data=st.data())
def test_fetch_request(version: int, data: st.DataObject) -> None:
    spec = load("FetchRequest")
    value = data.draw(struct_strategy(spec.fields, version))
    body = encode(spec, version, value)
    info = feed_split(fetch.parse_request(version), body, cuts_for(data, len(body)))
    assert fetch_now.parse_request_now(body, version) == info  # the direct twin reads the same
    ref = walk(spec, version, body).to_plain(body)
    rid = ref.get("ReplicaId", -1)
    if rid == -1 and "ReplicaState" in ref:
        rid = ref["ReplicaState"]["ReplicaId"]
    assert info.replica_id == rid
    assert (info.max_wait_ms, info.min_bytes, info.max_bytes, info.isolation_level) == (
        ref["MaxWaitMs"], ref["MinBytes"], ref["MaxBytes"], ref["IsolationLevel"])
    assert (info.session_id, info.session_epoch) == (ref.get("SessionId", -1), ref.get("SessionEpoch", -1))
    assert [(p.topic, p.topic_id, p.partition, p.fetch_offset, p.log_start_offset, p.partition_max_bytes)
            for p in info.partitions] == [
        (t.get("Topic"), t.get("TopicId"), p["Partition"], p["FetchOffset"], p.get("LogStartOffset", -1),
         p["PartitionMaxBytes"]) for t in ref["Topics"] or [] for p in t["Partitions"] or []]
    assert list(info.forgotten) == [(t.get("Topic"), t.get("TopicId"), p) for t in ref.get("ForgottenTopicsData") or []
                                    for p in t["Partitions"] or []]
    assert info.rack_id == ref.get("RackId")


@pytest.mark.parametrize("version", range(3, 14))
@SETTINGS
@given(data=st.data())
def test_produce_request_and_response(version: int, data: st.DataObject) -> None:
    req_spec, resp_spec = load("ProduceRequest"), load("ProduceResponse")
    value = with_records(data.draw(struct_strategy(req_spec.fields, version)), data)
    body = encode(req_spec, version, value)
    info = feed_split(produce.parse_request(version), body, cuts_for(data, len(body)))
    assert produce_now.parse_request_now(body, version) == info  # the direct twin reads the same
    ref = walk(req_spec, version, body).to_plain(body)
    assert (info.acks, info.timeout_ms, info.transactional) == (
        ref["Acks"], ref["TimeoutMs"], ref["TransactionalId"] is not None)
    assert [(p.topic, p.topic_id, p.partition, p.batches) for p in info.partitions] == [
        (t.get("Name"), t.get("TopicId"), p["Index"], oracle_stats(p["Records"]))
        for t in ref["TopicData"] or [] for p in t["PartitionData"] or []]

    rvalue = data.draw(struct_strategy(resp_spec.fields, version))
    rbody = encode(resp_spec, version, rvalue)
    rinfo = feed_split(produce.parse_response(version), rbody, cuts_for(data, len(rbody)))
    assert produce_now.parse_response_now(rbody, version) == rinfo
    rref = walk(resp_spec, version, rbody).to_plain(rbody)
    assert rinfo.throttle_time_ms == rref.get("ThrottleTimeMs", 0)
    assert rinfo.node_endpoints == bool(rref.get("NodeEndpoints"))
    assert [(p.topic, p.topic_id, p.partition, p.error_code, p.base_offset, p.log_append_time_ms,
             p.log_start_offset) for p in rinfo.partitions] == [
        (t.get("Name"), t.get("TopicId"), p["Index"], p["ErrorCode"], p["BaseOffset"], p.get("LogAppendTimeMs", -1),
         p.get("LogStartOffset", -1)) for t in rref["Responses"] or [] for p in t["PartitionResponses"] or []]


def test_reported_wait_time_tag_is_read() -> None:
    spec = load("FetchResponse")
    body = encode(spec, 16, {"Responses": []})
    body = body[:-1] + bytes([1, 42, 4]) + struct.pack(">i", 123)  # top-level tag 42 = WaitTimeMs
    assert parse_whole(fetch.parse_response(16, wait_time_tag=42), body).wait_time_ms == 123
    assert parse_whole(fetch.parse_response(16), body).wait_time_ms is None


@pytest.mark.parametrize("run", ["aiokafka", "kafkapython", "confluent", "kcat"])
def test_captured_fetches_and_produces(run: str) -> None:
    n = 0
    for f in frames(run):
        if f.api_key not in (apis.FETCH, apis.PRODUCE):
            continue
        mod = fetch if f.api_key == apis.FETCH else produce
        if f.direction == "req":
            h = parse_request_header(f.body)
            info = parse_whole(mod.parse_request(f.api_version), f.body[h.body_start:])
        else:
            start = response_body_start(f.api_key, f.api_version, f.body)
            info = parse_whole(mod.parse_response(f.api_version), f.body[start:])
            if f.api_key == apis.FETCH:
                for p in info.partitions:
                    assert p.batches is None or p.batches.partial_bytes == 0
        n += 1
        if f.api_key == apis.FETCH and f.direction == "req":
            assert info.replica_id == -1 and info.max_wait_ms == 500 and info.min_bytes == 1
    assert n >= 4


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=200), version=st.integers(4, 18), cut=st.integers(0, 200))
def test_the_direct_twin_fails_where_the_generator_fails(body: bytes, version: int, cut: int) -> None:
    """Garbage: a Feeder given the frame in one chunk (the twin) or in two (the generator)
    agrees on the result, or on failing."""
    twin = Twin(lambda: fetch.parse_response(version), lambda b: fetch_now.parse_response_now(b, version))
    one = Feeder(twin)
    one.feed(body)
    two = Feeder(twin)
    two.feed(body[:cut])
    two.feed(body[cut:])
    a, b = one.finish(), two.finish()
    assert a == b and (one.error is None) == (two.error is None)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), version=st.integers(3, 12), garbage=st.booleans())
def test_a_collected_request_parses_as_the_generator_does(data: st.DataObject, version: int, garbage: bool) -> None:
    """A small request in pieces is kept as references and parsed once whole (``collect``);
    for any cutting, valid or garbage, it agrees with the generator fed piece by piece."""
    if garbage:
        body = data.draw(st.binary(max_size=300))
    else:
        n = data.draw(st.integers(1, 3))
        body = encode(apis.table()[apis.PRODUCE].request(), version, {
            "TransactionalId": None, "Acks": -1, "TimeoutMs": 1000, "TopicData": [
                {"Name": f"t{i}", "PartitionData": [{"Index": i, "Records": b""}]} for i in range(n)]})
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=4)))
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    collected = Feeder(Twin(lambda: produce.parse_request(version),
                            lambda b: produce_now.parse_request_now(b, version)), collect=True)
    streamed = Feeder(produce.parse_request(version))
    for p in pieces:
        collected.feed(memoryview(p))
        streamed.feed(p)
    a, b = collected.finish(), streamed.finish()
    assert a == b and (collected.error is None) == (streamed.error is None)
    if not garbage:
        assert a is not None and len(a.partitions) == n
