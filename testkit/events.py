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


def share_ev(t_req: int, t_first: int, t_last: int, *, acquired_from: int = -1, records: int = 0,
             batch_base: int | None = None, first_ts_ms: int = -1, max_wait: int = 500,
             acknowledgements: int = 0) -> FetchExchanged:
    """A share consumer's ShareFetch of t-0 (as ``share.py`` reads it): no offset asked; the
    answer acquired ``records`` from ``acquired_from`` (in a batch that begins at ``batch_base``)."""
    req = FetchRequestInfo(replica_id=-1, replica_epoch=-1, max_wait_ms=max_wait, min_bytes=1, max_bytes=1 << 20,
                           isolation_level=0, session_id=0, session_epoch=1, partitions=(), forgotten=(),
                           rack_id=None, share=True, acknowledgements=acknowledgements)
    base = acquired_from if batch_base is None else batch_base
    batches = BatchStats(size_bytes=100 * records, batches=1, records=records + acquired_from - base,
                         first_offset=base, next_offset=acquired_from + records, first_timestamp_ms=first_ts_ms,
                         max_timestamp_ms=first_ts_ms)
    parts = (FetchPartitionResponse(topic="t", topic_id=None, partition=0, error_code=0, high_watermark=-1,
                                    last_stable_offset=-1, log_start_offset=-1, preferred_read_replica=-1,
                                    batches=batches, acquired_first=acquired_from, acquired=records),
             ) if records else ()
    resp = FetchResponseInfo(throttle_time_ms=0, error_code=0, session_id=0, wait_time_ms=None, partitions=parts)
    return FetchExchanged(correlation_id=1, client_id="s", api_version=2, request=req, response=resp, covered=(),
                          t_request_ns=t_req, t_first_ns=t_first, t_last_ns=t_last, request_bytes=80,
                          response_bytes=100 + 100 * records)
