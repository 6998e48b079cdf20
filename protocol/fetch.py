"""Fetch (api key 1) v4-v18: what the latency model needs and nothing more.

Layouts follow FetchRequest.json / FetchResponse.json (Kafka 4.1-era specs, versions 4-18,
flexible from 12); tests check these decoders against the spec-driven walker on generated
messages and on the golden captures. Records are never decoded: batch headers only.
"""

from __future__ import annotations

import uuid as _uuid
from dataclasses import dataclass
from typing import Final

from . import stream as s
from .primitives import I32, I64
from .stream import BatchStats, Parser, Reader

MIN_VERSION: Final = 4
MAX_VERSION: Final = 18
CONSUMER_REPLICA_ID: Final = -1
FUTURE_LOCAL_REPLICA_ID: Final = -3


@dataclass(slots=True, kw_only=True)
class FetchPartitionRequest:
    topic: str | None  # v4-12
    topic_id: _uuid.UUID | None  # v13+
    partition: int
    fetch_offset: int
    log_start_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1

    def __init__(self, *, topic: str | None, topic_id: _uuid.UUID | None, partition: int, fetch_offset: int,
                 log_start_offset: int, partition_max_bytes: int, current_leader_epoch: int = -1) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.partition_max_bytes = partition_max_bytes
        self.current_leader_epoch = current_leader_epoch


@dataclass(slots=True, kw_only=True)
class FetchRequestInfo:
    replica_id: int  # effective id: ReplicaId (v4-14) or ReplicaState.ReplicaId (v15+)
    replica_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    partitions: tuple[FetchPartitionRequest, ...]
    forgotten: tuple[tuple[str | None, _uuid.UUID | None, int], ...]
    rack_id: str | None
    share: bool = False  # a ShareFetch (KIP-932, share.py): no offsets; the answer says what was acquired
    acknowledgements: int = 0  # a ShareFetch's acknowledgement batches (their offsets only, never records)

    def __init__(self, *, replica_id: int, replica_epoch: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
                 isolation_level: int, session_id: int, session_epoch: int,
                 partitions: tuple[FetchPartitionRequest, ...],
                 forgotten: tuple[tuple[str | None, _uuid.UUID | None, int], ...], rack_id: str | None,
                 share: bool = False, acknowledgements: int = 0) -> None:
        self.replica_id = replica_id
        self.replica_epoch = replica_epoch
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.isolation_level = isolation_level
        self.session_id = session_id
        self.session_epoch = session_epoch
        self.partitions = partitions
        self.forgotten = forgotten
        self.rack_id = rack_id
        self.share = share
        self.acknowledgements = acknowledgements

    @property
    def is_follower(self) -> bool:
        return self.replica_id >= 0


@dataclass(slots=True, kw_only=True)
class FetchPartitionResponse:
    topic: str | None
    topic_id: _uuid.UUID | None
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    preferred_read_replica: int
    batches: BatchStats | None
    acquired_first: int = -1  # ShareFetch: the first offset acquired for the member (-1: none)
    acquired: int = 0  # ShareFetch: how many records were acquired

    def __init__(self, *, topic: str | None, topic_id: _uuid.UUID | None, partition: int, error_code: int,
                 high_watermark: int, last_stable_offset: int, log_start_offset: int, preferred_read_replica: int,
                 batches: BatchStats | None, acquired_first: int = -1, acquired: int = 0) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.preferred_read_replica = preferred_read_replica
        self.batches = batches
        self.acquired_first = acquired_first
        self.acquired = acquired


@dataclass(slots=True, kw_only=True)
class FetchResponseInfo:
    throttle_time_ms: int
    error_code: int
    session_id: int
    partitions: tuple[FetchPartitionResponse, ...]
    wait_time_ms: int | None  # a broker-reported WaitTimeMs (KIP-736), if the tag is present
    node_endpoints: bool = False  # v16+: the NodeEndpoints tag lists at least one broker

    def __init__(self, *, throttle_time_ms: int, error_code: int, session_id: int,
                 partitions: tuple[FetchPartitionResponse, ...], wait_time_ms: int | None,
                 node_endpoints: bool = False) -> None:
        self.throttle_time_ms = throttle_time_ms
        self.error_code = error_code
        self.session_id = session_id
        self.partitions = partitions
        self.wait_time_ms = wait_time_ms
        self.node_endpoints = node_endpoints

    @property
    def records_bytes(self) -> int:
        return sum(p.batches.size_bytes for p in self.partitions if p.batches is not None)


NODE_ENDPOINTS_TAG: Final = 0  # Fetch v16+ top-level tag (KIP-951)


def parse_request(version: int) -> Parser[FetchRequestInfo]:
    r = Reader()
    flex = version >= 12
    replica_id = CONSUMER_REPLICA_ID
    replica_epoch = -1
    if version <= 14:
        replica_id = yield from s.i32(r)
    max_wait = yield from s.i32(r)
    min_bytes = yield from s.i32(r)
    max_bytes = yield from s.i32(r)
    isolation = yield from s.i8(r)
    session_id = session_epoch = -1
    if version >= 7:
        session_id = yield from s.i32(r)
        session_epoch = yield from s.i32(r)
    parts: list[FetchPartitionRequest] = []
    for _ in range((yield from s.array_len(r, flex))):
        topic, topic_id = yield from s.topic(r, flex, by_id=version >= 13)
        for _ in range((yield from s.array_len(r, flex))):
            partition = yield from s.i32(r)
            leader_epoch = (yield from s.i32(r)) if version >= 9 else -1
            fetch_offset = yield from s.i64(r)
            if version >= 12:
                yield from s.i32(r)  # LastFetchedEpoch
            log_start = (yield from s.i64(r)) if version >= 5 else -1
            pmax = yield from s.i32(r)
            if flex:
                yield from s.tags(r)
            parts.append(FetchPartitionRequest(topic=topic, topic_id=topic_id, partition=partition,
                                               fetch_offset=fetch_offset, log_start_offset=log_start,
                                               partition_max_bytes=pmax, current_leader_epoch=leader_epoch))
        if flex:
            yield from s.tags(r)
    forgotten: list[tuple[str | None, _uuid.UUID | None, int]] = []
    if version >= 7:
        for _ in range((yield from s.array_len(r, flex))):
            ftopic, ftopic_id = yield from s.topic(r, flex, by_id=version >= 13)
            for _ in range((yield from s.array_len(r, flex))):
                forgotten.append((ftopic, ftopic_id, (yield from s.i32(r))))
            if flex:
                yield from s.tags(r)
    rack = (yield from s.string(r, flex)) if version >= 11 else None
    if flex:
        found = yield from s.tags(r, {1: "ReplicaState"})
        if "ReplicaState" in found:
            raw = found["ReplicaState"][1]
            replica_id = I32.unpack_from(raw, 0)[0]
            replica_epoch = I64.unpack_from(raw, 4)[0]
    return FetchRequestInfo(replica_id=replica_id, replica_epoch=replica_epoch, max_wait_ms=max_wait,
                            min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=isolation,
                            session_id=session_id, session_epoch=session_epoch, partitions=tuple(parts),
                            forgotten=tuple(forgotten), rack_id=rack)


def parse_response(version: int, wait_time_tag: int | None = None, *,
                   after_correlation_id: bool = False) -> Parser[FetchResponseInfo]:
    """The body after the response header (or, with ``after_correlation_id``, from the
    header's tag buffer on). ``wait_time_tag``: the top-level tag number a broker uses for
    WaitTimeMs (KIP-736 was never merged, so it is configurable)."""
    r = Reader()
    flex = version >= 12
    if after_correlation_id and flex:
        yield from s.tags(r)
    throttle = (yield from s.i32(r)) if version >= 1 else 0
    error = session_id = 0
    if version >= 7:
        error = yield from s.i16(r)
        session_id = yield from s.i32(r)
    parts: list[FetchPartitionResponse] = []
    for _ in range((yield from s.array_len(r, flex))):
        topic, topic_id = yield from s.topic(r, flex, by_id=version >= 13)
        for _ in range((yield from s.array_len(r, flex))):
            index = yield from s.i32(r)
            perr = yield from s.i16(r)
            hw = yield from s.i64(r)
            lso = yield from s.i64(r)
            lstart = (yield from s.i64(r)) if version >= 5 else -1
            for _ in range(max(0, (yield from s.array_len(r, flex)))):  # AbortedTransactions
                yield from s.skip(r, 16)
                if flex:
                    yield from s.tags(r)
            prr = (yield from s.i32(r)) if version >= 11 else -1
            batches = yield from s.records(r, flex)
            if flex:
                yield from s.tags(r)
            parts.append(FetchPartitionResponse(topic=topic, topic_id=topic_id, partition=index, error_code=perr,
                                                high_watermark=hw, last_stable_offset=lso, log_start_offset=lstart,
                                                preferred_read_replica=prr, batches=batches))
        if flex:
            yield from s.tags(r)
    wait_ms = None
    if flex:
        wanted = {NODE_ENDPOINTS_TAG: "NodeEndpoints"} if version >= 16 else {}
        if wait_time_tag is not None:
            wanted[wait_time_tag] = "WaitTimeMs"
        found = yield from s.tags(r, wanted)
        if "WaitTimeMs" in found:
            raw = found["WaitTimeMs"][1]
            wait_ms = I32.unpack_from(raw, 0)[0] if len(raw) == 4 else None
        endpoints = found.get("NodeEndpoints")
        has_endpoints = endpoints is not None and endpoints[1][:1] not in (b"", b"\x00", b"\x01")  # count + 1
    else:
        has_endpoints = False
    return FetchResponseInfo(throttle_time_ms=throttle, error_code=error, session_id=session_id,
                             partitions=tuple(parts), wait_time_ms=wait_ms, node_endpoints=has_endpoints)


# The direct twins of these parsers (plain functions for a frame whole in one chunk) are
# generated from this source into ``fetch_now.py`` by ``gen_direct.py``.
