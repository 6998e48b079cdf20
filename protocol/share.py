"""ShareFetch (api key 78, KIP-932) v0-v2: what the latency model needs, as a fetch.

A share consumer long-polls like a consumer (MaxWaitMs, MinBytes) but names no offset: the
broker hands it records it *acquires* for it (AcquiredRecords: offset ranges locked for this
member), from wherever the share partition stands. So a share fetch is read into the same
``FetchRequestInfo`` / ``FetchResponseInfo`` as a fetch, marked ``share``, with no fetch
offsets (-1) and, per partition of the answer, the first offset acquired and how many records
were: the model dates the data from there (``metrics/model.py``).

Layouts follow ShareFetchRequest.json / ShareFetchResponse.json as Kafka 4.4 declares them
(v0 was Kafka 4.0's early access: a PartitionMaxBytes per partition; v1 adds MaxRecords and
BatchSize, v2 ShareAcquireMode and IsRenewAck; every version flexible). Acknowledgements that
ride on a share fetch are skipped (their offsets only; never records). Tests check these
decoders against the spec-driven walker on generated messages.
"""

from __future__ import annotations

import uuid as _uuid
from typing import Final

from . import stream as s
from .fetch import (
    CONSUMER_REPLICA_ID,
    FetchPartitionRequest,
    FetchPartitionResponse,
    FetchRequestInfo,
    FetchResponseInfo,
)
from .stream import Parser, Reader

MIN_VERSION: Final = 0
MAX_VERSION: Final = 2


def parse_request(version: int) -> Parser[FetchRequestInfo]:
    r = Reader()
    yield from s.string(r, True)  # GroupId
    yield from s.string(r, True)  # MemberId
    epoch = yield from s.i32(r)  # ShareSessionEpoch
    max_wait = yield from s.i32(r)
    min_bytes = yield from s.i32(r)
    max_bytes = yield from s.i32(r)
    if version >= 1:
        yield from s.skip(r, 8)  # MaxRecords, BatchSize
    if version >= 2:
        yield from s.skip(r, 2)  # ShareAcquireMode, IsRenewAck
    parts: list[FetchPartitionRequest] = []
    acks = 0
    for _ in range((yield from s.array_len(r, True))):
        topic_id = yield from s.uuid(r)
        for _ in range((yield from s.array_len(r, True))):
            partition = yield from s.i32(r)
            pmax = (yield from s.i32(r)) if version == 0 else -1
            for _ in range(max(0, (yield from s.array_len(r, True)))):  # AcknowledgementBatches
                acks += 1
                yield from s.skip(r, 16)  # FirstOffset, LastOffset
                yield from s.skip(r, max(0, (yield from s.array_len(r, True))))  # AcknowledgeTypes (int8)
                yield from s.tags(r)
            yield from s.tags(r)
            parts.append(FetchPartitionRequest(topic=None, topic_id=topic_id, partition=partition, fetch_offset=-1,
                                               log_start_offset=-1, partition_max_bytes=pmax))
        yield from s.tags(r)
    forgotten: list[tuple[str | None, _uuid.UUID | None, int]] = []
    for _ in range((yield from s.array_len(r, True))):
        ftopic_id = yield from s.uuid(r)
        for _ in range((yield from s.array_len(r, True))):
            forgotten.append((None, ftopic_id, (yield from s.i32(r))))
        yield from s.tags(r)
    yield from s.tags(r)
    return FetchRequestInfo(replica_id=CONSUMER_REPLICA_ID, replica_epoch=-1, max_wait_ms=max_wait,
                            min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0, session_id=0,
                            session_epoch=epoch, partitions=tuple(parts), forgotten=tuple(forgotten), rack_id=None,
                            share=True, acknowledgements=acks)


def parse_response(version: int, *, after_correlation_id: bool = False) -> Parser[FetchResponseInfo]:
    """The body after the response header (or, with ``after_correlation_id``, from the
    header's tag buffer on: every ShareFetch response has the flexible header)."""
    r = Reader()
    if after_correlation_id:
        yield from s.tags(r)
    throttle = yield from s.i32(r)
    error = yield from s.i16(r)
    yield from s.string(r, True)  # ErrorMessage
    if version >= 1:
        yield from s.skip(r, 4)  # AcquisitionLockTimeoutMs
    parts: list[FetchPartitionResponse] = []
    for _ in range((yield from s.array_len(r, True))):
        topic_id = yield from s.uuid(r)
        for _ in range((yield from s.array_len(r, True))):
            index = yield from s.i32(r)
            perr = yield from s.i16(r)
            yield from s.string(r, True)  # ErrorMessage
            yield from s.skip(r, 2)  # AcknowledgeErrorCode
            yield from s.string(r, True)  # AcknowledgeErrorMessage
            yield from s.skip(r, 8)  # CurrentLeader: LeaderId, LeaderEpoch
            yield from s.tags(r)
            batches = yield from s.records(r, True)
            first = -1
            acquired = 0
            for _ in range(max(0, (yield from s.array_len(r, True)))):  # AcquiredRecords
                lo = yield from s.i64(r)
                hi = yield from s.i64(r)
                yield from s.skip(r, 2)  # DeliveryCount
                yield from s.tags(r)
                if lo >= 0 and (first < 0 or lo < first):
                    first = lo
                acquired += hi - lo + 1 if hi >= lo else 0
            yield from s.tags(r)
            parts.append(FetchPartitionResponse(topic=None, topic_id=topic_id, partition=index, error_code=perr,
                                                high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                                                preferred_read_replica=-1, batches=batches, acquired_first=first,
                                                acquired=acquired))
        yield from s.tags(r)
    endpoints = yield from s.array_len(r, True)  # NodeEndpoints: rewritten by rewrite.py, only counted here
    for _ in range(max(0, endpoints)):
        yield from s.skip(r, 4)  # NodeId
        yield from s.string(r, True)  # Host
        yield from s.skip(r, 4)  # Port
        yield from s.string(r, True)  # Rack
        yield from s.tags(r)
    yield from s.tags(r)
    return FetchResponseInfo(throttle_time_ms=throttle, error_code=error, session_id=0, partitions=tuple(parts),
                             wait_time_ms=None, node_endpoints=endpoints > 0)


# The direct twins of these parsers are generated from this source into ``share_now.py`` by
# ``gen_direct.py``.
