"""Small request and response frames built with fetchlat's own codec (what the scripted
conversation tests and the fetch-road benchmark feed the proxy core), and a record batch built
by kafka-python's writer (what the load tests and benchmarks produce)."""

from __future__ import annotations

import time

from fetchlat.protocol import apis
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.framing import request_frame, response_frame
from fetchlat.protocol.schema import load


def metadata_request(corr: int) -> bytes:
    return request_frame(apis.METADATA, 1, corr, "pb", encode(load("MetadataRequest"), 1, {"Topics": []}))


def metadata_response(corr: int, brokers: list[tuple[int, str, int]]) -> bytes:
    body = encode(load("MetadataResponse"), 1, {
        "Brokers": [{"NodeId": n, "Host": h, "Port": p, "Rack": None} for n, h, p in brokers],
        "ControllerId": 1, "Topics": []})
    return response_frame(apis.METADATA, 1, corr, body)


def fetch_request(corr: int, *, max_wait_ms: int = 500, offset: int = 5) -> bytes:
    body = encode(load("FetchRequest"), 12, {
        "ReplicaId": -1, "MaxWaitMs": max_wait_ms, "MinBytes": 1, "MaxBytes": 1 << 20, "SessionEpoch": -1,
        "Topics": [{"Topic": "t", "Partitions": [{"Partition": 0, "FetchOffset": offset,
                                                  "PartitionMaxBytes": 1 << 20}]}]})
    return request_frame(apis.FETCH, 12, corr, "consumer-1", body)


def empty_fetch_response(corr: int, hw: int = 5, throttle_ms: int = 0) -> bytes:
    body = encode(load("FetchResponse"), 12, {"ThrottleTimeMs": throttle_ms, "Responses": [{
        "Topic": "t", "Partitions": [{"PartitionIndex": 0, "HighWatermark": hw, "LastStableOffset": hw,
                                      "Records": None}]}]})
    return response_frame(apis.FETCH, 12, corr, body)


def record_batch() -> bytes:
    """One record of 100 bytes, v2 batch, built by kafka-python's writer (an independent encoder)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000), key=None, value=b"x" * 100, headers=[])
    return bytes(b.build())
