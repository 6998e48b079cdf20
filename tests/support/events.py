"""Decoded exchanges for model, Prometheus and trace tests: what the codec would emit for one
fetch or produce of partition t-0, with scripted timestamps."""

from __future__ import annotations

from fetchlat.protocol.events import FetchExchanged, ProduceExchanged
from fetchlat.protocol.fetch import FetchPartitionRequest, FetchPartitionResponse, FetchRequestInfo, FetchResponseInfo
from fetchlat.protocol.produce import (
    ProducePartitionRequest,
    ProducePartitionResponse,
    ProduceRequestInfo,
    ProduceResponseInfo,
)
from fetchlat.protocol.stream import BatchStats

MS = 1_000_000
T0 = 10_000 * MS  # the request went out at t = 10 s (monotonic)


def fetch_ev(t_req: int, t_first: int, t_last: int, *, offset: int = 0, records: int = 0, hw: int = 0,
             first_ts_ms: int = -1, max_ts_ms: int = -1, log_append: bool = False, replica: int = -1,
             max_wait: int = 500, throttle: int = 0, error: int = 0, isolation: int = 0) -> FetchExchanged:
    req = FetchRequestInfo(replica_id=replica, replica_epoch=-1, max_wait_ms=max_wait, min_bytes=1,
                           max_bytes=1 << 20, isolation_level=isolation, session_id=0, session_epoch=-1,
                           partitions=(FetchPartitionRequest(topic="t", topic_id=None, partition=0, fetch_offset=offset,
                                                             log_start_offset=-1, partition_max_bytes=1 << 20),),
                           forgotten=(), rack_id=None)
    batches = BatchStats(size_bytes=100 * records, batches=1 if records else 0, records=records,
                         first_offset=offset if records else -1, next_offset=offset + records if records else -1,
                         first_timestamp_ms=first_ts_ms, max_timestamp_ms=max_ts_ms, log_append_time=log_append)
    resp = FetchResponseInfo(throttle_time_ms=throttle, error_code=0, session_id=0, wait_time_ms=None, partitions=(
        FetchPartitionResponse(topic="t", topic_id=None, partition=0, error_code=error, high_watermark=hw,
                               last_stable_offset=hw, log_start_offset=0, preferred_read_replica=-1,
                               batches=batches if records else BatchStats()),))
    return FetchExchanged(correlation_id=1, client_id="c", api_version=12, request=req, response=resp,
                          covered=(("t", 0, offset),), t_request_ns=t_req, t_first_ns=t_first, t_last_ns=t_last,
                          request_bytes=80, response_bytes=100 + 100 * records)


def produce_ev(t_req: int, t_resp: int, base: int, n: int, acks: int = 1, error: int = 0) -> ProduceExchanged:
    req = ProduceRequestInfo(transactional=False, acks=acks, timeout_ms=1000, partitions=(
        ProducePartitionRequest(topic="t", topic_id=None, partition=0, batches=BatchStats(batches=1, records=n)),))
    resp = ProduceResponseInfo(throttle_time_ms=0, partitions=(
        ProducePartitionResponse(topic="t", topic_id=None, partition=0, error_code=error, base_offset=base,
                                 log_append_time_ms=-1, log_start_offset=0),))
    return ProduceExchanged(correlation_id=1, client_id="p", api_version=9, request=req, response=resp,
                            t_request_ns=t_req, t_first_ns=t_resp, t_last_ns=t_resp, request_bytes=200,
                            response_bytes=60)
