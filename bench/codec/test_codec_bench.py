"""Codec micro-benchmarks (pytest-benchmark): the per-frame work the proxy does on its hot path,
on real frames (the golden captures) and realistic sizes, with kafka-python's decoder of the
same Fetch response as a reference point.

    make bench-codec      # pytest bench/codec --benchmark-only
    (make test runs them once each with --benchmark-disable, so they stay runnable)
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the golden captures live in tests/
from fetchlat.protocol import apis, fetch, fetch_now, produce
from fetchlat.protocol.connection import KafkaConnection
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.framing import request_frame
from fetchlat.protocol.headers import response_body_start
from fetchlat.protocol.rewrite import ResponseRewriter, cap_api_versions
from fetchlat.protocol.schema import load
from fetchlat.protocol.stream import Feeder, parse_whole
from fetchlat.protocol.walker import walk

from testkit.captures import conversations

TID = uuid.UUID(int=7)
ADVERTISE = ResponseRewriter(lambda n, h, p: ("127.0.0.1", 19092 + n))


def _batch(records: int, value_size: int, base_offset: int = 0) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=4 << 20)
    for k in range(records):
        b.append(k, timestamp=1_700_000_000_000, key=None, value=b"v" * value_size, headers=[])
    raw = bytearray(b.build())
    raw[0:8] = base_offset.to_bytes(8, "big")
    return bytes(raw)


def _request(api_key: int, version: int, corr: int, body: bytes) -> bytes:
    return request_frame(api_key, version, corr, "bench", body)


def _response(api_key: int, version: int, corr: int, body: bytes) -> bytes:
    header = corr.to_bytes(4, "big", signed=True) + (b"\x00" if apis.response_header_version(api_key, version) else b"")
    return (len(header) + len(body)).to_bytes(4, "big") + header + body


def _fetch_request(version: int, partitions: int = 1) -> bytes:
    return encode(load("FetchRequest"), version, {
        "ReplicaId": -1, "MaxWaitMs": 500, "MinBytes": 1, "MaxBytes": 52428800, "IsolationLevel": 0, "SessionId": 0,
        "SessionEpoch": -1, "Topics": [{"Topic": "orders", "TopicId": TID, "Partitions": [
            {"Partition": p, "CurrentLeaderEpoch": -1, "FetchOffset": 0, "LastFetchedEpoch": -1, "LogStartOffset": -1,
             "PartitionMaxBytes": 1048576} for p in range(partitions)]}], "ForgottenTopicsData": [], "RackId": ""})


def _fetch_response(version: int, records: bytes | None) -> bytes:
    return encode(load("FetchResponse"), version, {
        "ThrottleTimeMs": 0, "ErrorCode": 0, "SessionId": 0, "NodeEndpoints": [],
        "Responses": [{"Topic": "orders", "TopicId": TID, "Partitions": [{
            "PartitionIndex": 0, "ErrorCode": 0, "HighWatermark": 1000, "LastStableOffset": 1000, "LogStartOffset": 0,
            "AbortedTransactions": [], "PreferredReadReplica": -1, "Records": records}]}]})


BATCH_1MIB = b"".join(_batch(64, 1024, i * 64) for i in range(16))  # 16 batches of 64 x 1 KiB records
BATCH_16KIB = _batch(16, 1000)
# what a producer with linger.ms=0 leaves: one record per batch, 1 000 batches of 1 KiB (a header each)
ONE_RECORD_BATCHES = b"".join(_batch(1, 1024, 1_000_000_000 + i) for i in range(1000))


def _parse(gen_factory: Callable[[], Any], data: bytes) -> Any:
    return parse_whole(gen_factory(), data)


@pytest.mark.parametrize("version", [12, 16])
def test_parse_fetch_request(benchmark: Any, version: int) -> None:
    body = _fetch_request(version, partitions=8)
    info = benchmark(_parse, lambda: fetch.parse_request(version), body)
    assert len(info.partitions) == 8


@pytest.mark.parametrize("version", [12, 16])
def test_parse_fetch_response_1mib(benchmark: Any, version: int) -> None:
    body = _fetch_response(version, BATCH_1MIB)
    info = benchmark(_parse, lambda: fetch.parse_response(version), body)
    assert info.partitions[0].batches.batches == 16 and info.partitions[0].batches.records == 1024


def test_reference_kafka_python_decodes_the_same_fetch_response(benchmark: Any) -> None:
    """kafka-python 3.x reads the same 1 MiB v12 response (its struct decode, batches unread)."""
    from kafka.protocol.consumer import FetchResponse

    body = _fetch_response(12, BATCH_1MIB)
    resp = benchmark(FetchResponse.decode, body, version=12)
    assert resp is not None


def test_parse_produce_request_16kib(benchmark: Any) -> None:
    body = encode(load("ProduceRequest"), 9, {"TransactionalId": None, "Acks": 1, "TimeoutMs": 30000, "TopicData": [
        {"Name": "orders", "PartitionData": [{"Index": 0, "Records": BATCH_16KIB}]}]})
    info = benchmark(_parse, lambda: produce.parse_request(9), body)
    assert info.acks == 1


def test_forward_a_1mib_fetch_response_in_64kib_reads(benchmark: Any) -> None:
    """The proxy's path for a response: framing, correlation, streaming, the parse beside it."""
    req = _request(apis.FETCH, 12, 1, _fetch_request(12))
    resp = _response(apis.FETCH, 12, 1, _fetch_response(12, BATCH_1MIB))
    chunks = [resp[i : i + 65536] for i in range(0, len(resp), 65536)]

    def run() -> int:
        c = KafkaConnection(rewriter=ADVERTISE)
        c.receive_from_client(req, 1)
        n = 0
        for chunk in chunks:
            out, _ = c.receive_from_broker(chunk, 2)
            n += len(out)
        return n

    assert benchmark(run) >= len(chunks)


def _produce_exchange() -> tuple[bytes, bytes]:
    """A produce request of one 16 KiB batch and its response, as frames."""
    req = _request(apis.PRODUCE, 9, 1, encode(load("ProduceRequest"), 9, {
        "TransactionalId": None, "Acks": 1, "TimeoutMs": 30000,
        "TopicData": [{"Name": "orders", "PartitionData": [{"Index": 0, "Records": BATCH_16KIB}]}]}))
    resp = _response(apis.PRODUCE, 9, 1, encode(load("ProduceResponse"), 9, {"Responses": [
        {"Name": "orders", "PartitionResponses": [{"Index": 0, "ErrorCode": 0, "BaseOffset": 5, "LogAppendTimeMs": -1,
                                                   "LogStartOffset": 0, "RecordErrors": [], "ErrorMessage": None}]}],
        "ThrottleTimeMs": 0}))
    return req, resp


def _forward_produce(request_chunks: list[bytes], resp: bytes) -> int:
    c = KafkaConnection(rewriter=ADVERTISE)
    for ch in request_chunks:
        c.receive_from_client(ch, 1)
    _, events = c.receive_from_broker(resp, 2)
    return len(events)


def test_forward_a_produce_exchange(benchmark: Any) -> None:
    """One produce of a 16 KiB batch and its response through the connection state machine."""
    req, resp = _produce_exchange()
    assert benchmark(_forward_produce, [req], resp) == 2  # the exchange and the response


@pytest.mark.parametrize("seen", ["first", "repeat"])
def test_rewrite_metadata_v12(benchmark: Any, seen: str) -> None:
    """6 brokers, 20 topics x 12 partitions: walked and spliced the first time, from the cache
    (a hash of its bytes) when the same response comes again."""
    body = encode(load("MetadataResponse"), 12, {
        "Brokers": [{"NodeId": n, "Host": f"kafka-{n}.example.internal", "Port": 9092, "Rack": None} for n in range(6)],
        "ClusterId": "c", "ControllerId": 0, "Topics": [
            {"ErrorCode": 0, "Name": f"t{t}", "TopicId": uuid.UUID(int=t + 1), "IsInternal": False, "Partitions": [
                {"ErrorCode": 0, "PartitionIndex": p, "LeaderId": p % 6, "LeaderEpoch": 0, "ReplicaNodes": [0, 1, 2],
                 "IsrNodes": [0, 1, 2], "OfflineReplicas": []} for p in range(12)]} for t in range(20)]})
    frame = _response(apis.METADATA, 12, 9, body)[4:]  # what the rewriter gets: the frame after its size
    if seen == "first":
        result = benchmark(lambda: ResponseRewriter(ADVERTISE.advertise).rewrite(apis.METADATA, 12, frame))
    else:
        ADVERTISE.rewrite(apis.METADATA, 12, frame)
        result = benchmark(ADVERTISE.rewrite, apis.METADATA, 12, frame)
    assert result.body is not None and len(result.learned) == 6


@pytest.mark.parametrize("seen", ["first", "repeat"])
def test_cap_api_versions_from_a_capture(benchmark: Any, seen: str) -> None:
    frames = [f for conv in conversations("confluent").values() for f in conv
              if f.api_key == apis.API_VERSIONS and f.direction == "resp"]
    version = frames[0].api_version
    if seen == "first":
        assert benchmark(cap_api_versions, version, frames[0].body) is not None
    else:
        ADVERTISE.rewrite(apis.API_VERSIONS, version, frames[0].body)
        assert benchmark(ADVERTISE.rewrite, apis.API_VERSIONS, version, frames[0].body).body is not None


def test_walk_a_captured_metadata_response(benchmark: Any) -> None:
    f = next(f for conv in conversations("confluent").values() for f in conv
             if f.api_key == apis.METADATA and f.direction == "resp")
    spec = apis.table()[apis.METADATA].response()
    start = response_body_start(apis.METADATA, f.api_version, f.body)
    msg = benchmark(walk, spec, f.api_version, f.body, start)
    assert msg["Brokers"]


def test_replay_a_captured_confluent_conversation(benchmark: Any) -> None:
    """Every frame of every connection of the confluent-kafka capture, through fresh codecs."""
    convs = [conv for conv in conversations("confluent").values()
             if not any(f.api_key == apis.SASL_HANDSHAKE for f in conv)]

    def run() -> int:
        n = 0
        for conv in convs:
            c = KafkaConnection(rewriter=ADVERTISE)
            for f in conv:
                if f.direction == "req":
                    n += len(c.receive_from_client(f.wire, 1))
                else:
                    n += len(c.receive_from_broker(f.wire, 2)[1])
        return n

    assert benchmark(run) > 0


def _feed_response(pieces: list[Any]) -> Any:
    """A Fetch v12 response through the streaming parser, piece by piece, as reads bring it."""
    f = Feeder(fetch.parse_response(12))
    for p in pieces:
        f.feed(p)
    return f.finish()


def test_feeder_in_small_pieces(benchmark: Any) -> None:
    """The incremental parser fed a 1 MiB response in 1 500-byte pieces (a TCP segment each)."""
    body = _fetch_response(12, BATCH_1MIB)
    pieces = [memoryview(body)[i : i + 1500] for i in range(0, len(body), 1500)]
    assert benchmark(_feed_response, pieces) is not None


@pytest.mark.parametrize("version", [12, 16])
def test_parse_fetch_request_direct_twin(benchmark: Any, version: int) -> None:
    """The plain-function twin the proxy uses when a request arrives in one chunk."""
    body = _fetch_request(version, partitions=8)
    info = benchmark(fetch_now.parse_request_now, body, version)
    assert len(info.partitions) == 8


def test_parse_fetch_response_1mib_direct_twin(benchmark: Any) -> None:
    body = _fetch_response(12, BATCH_1MIB)
    info = benchmark(fetch_now.parse_response_now, body, 12)
    assert info.partitions[0].batches.records == 1024


def test_parse_a_fetch_response_of_one_record_batches(benchmark: Any) -> None:
    """The tiny-batch road: 1 000 headers in one response (per batch: divide the time by 1 000)."""
    body = _fetch_response(12, ONE_RECORD_BATCHES)
    info = benchmark(fetch_now.parse_response_now, body, 12)
    assert info.partitions[0].batches.batches == 1000 and info.partitions[0].batches.records == 1000


def test_feed_a_response_of_one_record_batches_in_64kib_reads(benchmark: Any) -> None:
    """The tiny-batch road of a response that comes in reads (``bytes``, as the proxy's reader
    hands them on): 1 000 one-record batch headers, the streaming parser fed 64 KiB at a time."""
    body = _fetch_response(12, ONE_RECORD_BATCHES)
    pieces = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    info = benchmark(_feed_response, pieces)
    assert info.partitions[0].batches.batches == 1000 and info.partitions[0].batches.records == 1000


def test_forward_a_produce_exchange_in_4kib_reads(benchmark: Any) -> None:
    """The same produce when its request arrives in 4 KiB reads (a pipelining producer's
    requests straddle reads): the pieces are kept and parsed once whole."""
    req, resp = _produce_exchange()
    chunks = [req[i : i + 4096] for i in range(0, len(req), 4096)]
    assert benchmark(_forward_produce, chunks, resp) == 2
