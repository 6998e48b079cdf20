"""Produce (api key 0) v3-v13: acks, per-partition batch headers; responses' base offsets,
LogAppendTime and errors. Layouts follow ProduceRequest.json / ProduceResponse.json
(versions 3-13, flexible from 9; v13 names topics by id). Records are never decoded."""

from __future__ import annotations

import uuid as _uuid
from dataclasses import dataclass
from typing import Final

from . import stream as s
from .stream import BatchStats, Parser, Reader

MIN_VERSION: Final = 3
MAX_VERSION: Final = 13


@dataclass(slots=True, kw_only=True)
class ProducePartitionRequest:
    topic: str | None
    topic_id: _uuid.UUID | None
    partition: int
    batches: BatchStats | None

    def __init__(self, *, topic: str | None, topic_id: _uuid.UUID | None, partition: int,
                 batches: BatchStats | None) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.batches = batches


@dataclass(slots=True, kw_only=True)
class ProduceRequestInfo:
    transactional: bool
    acks: int
    timeout_ms: int
    partitions: tuple[ProducePartitionRequest, ...]

    def __init__(self, *, transactional: bool, acks: int, timeout_ms: int,
                 partitions: tuple[ProducePartitionRequest, ...]) -> None:
        self.transactional = transactional
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.partitions = partitions

    @property
    def records(self) -> int:
        return sum(p.batches.records for p in self.partitions if p.batches is not None)


@dataclass(slots=True, kw_only=True)
class ProducePartitionResponse:
    topic: str | None
    topic_id: _uuid.UUID | None
    partition: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int

    def __init__(self, *, topic: str | None, topic_id: _uuid.UUID | None, partition: int, error_code: int,
                 base_offset: int, log_append_time_ms: int, log_start_offset: int) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.error_code = error_code
        self.base_offset = base_offset
        self.log_append_time_ms = log_append_time_ms
        self.log_start_offset = log_start_offset


@dataclass(slots=True, kw_only=True)
class ProduceResponseInfo:
    throttle_time_ms: int
    partitions: tuple[ProducePartitionResponse, ...]
    node_endpoints: bool = False  # v10+: the NodeEndpoints tag lists at least one broker

    def __init__(self, *, throttle_time_ms: int, partitions: tuple[ProducePartitionResponse, ...],
                 node_endpoints: bool = False) -> None:
        self.throttle_time_ms = throttle_time_ms
        self.partitions = partitions
        self.node_endpoints = node_endpoints


NODE_ENDPOINTS_TAG: Final = 0  # Produce v10+ top-level tag (KIP-951)


def parse_request(version: int) -> Parser[ProduceRequestInfo]:
    r = Reader()
    flex = version >= 9
    txn = yield from s.string(r, flex)
    acks = yield from s.i16(r)
    timeout = yield from s.i32(r)
    parts: list[ProducePartitionRequest] = []
    for _ in range((yield from s.array_len(r, flex))):
        topic, topic_id = yield from s.topic(r, flex, by_id=version >= 13)
        for _ in range((yield from s.array_len(r, flex))):
            index = yield from s.i32(r)
            batches = yield from s.records(r, flex)
            if flex:
                yield from s.tags(r)
            parts.append(ProducePartitionRequest(topic=topic, topic_id=topic_id, partition=index, batches=batches))
        if flex:
            yield from s.tags(r)
    if flex:
        yield from s.tags(r)
    return ProduceRequestInfo(transactional=txn is not None, acks=acks, timeout_ms=timeout, partitions=tuple(parts))


def parse_response(version: int, *, after_correlation_id: bool = False) -> Parser[ProduceResponseInfo]:
    r = Reader()
    flex = version >= 9
    if after_correlation_id and flex:
        yield from s.tags(r)  # the response header's tag buffer
    parts: list[ProducePartitionResponse] = []
    for _ in range((yield from s.array_len(r, flex))):
        topic, topic_id = yield from s.topic(r, flex, by_id=version >= 13)
        for _ in range((yield from s.array_len(r, flex))):
            index = yield from s.i32(r)
            err = yield from s.i16(r)
            base = yield from s.i64(r)
            lat = (yield from s.i64(r)) if version >= 2 else -1
            lstart = (yield from s.i64(r)) if version >= 5 else -1
            if version >= 8:
                for _ in range(max(0, (yield from s.array_len(r, flex)))):  # RecordErrors
                    yield from s.i32(r)
                    yield from s.string(r, flex)
                    if flex:
                        yield from s.tags(r)
                yield from s.string(r, flex)  # ErrorMessage
            if flex:
                yield from s.tags(r)
            parts.append(ProducePartitionResponse(topic=topic, topic_id=topic_id, partition=index, error_code=err,
                                                  base_offset=base, log_append_time_ms=lat, log_start_offset=lstart))
        if flex:
            yield from s.tags(r)
    throttle = (yield from s.i32(r)) if version >= 1 else 0
    has_endpoints = False
    if flex:
        found = yield from s.tags(r, {NODE_ENDPOINTS_TAG: "NodeEndpoints"} if version >= 10 else None)
        endpoints = found.get("NodeEndpoints")
        has_endpoints = endpoints is not None and endpoints[1][:1] not in (b"", b"\x00", b"\x01")  # count + 1
    return ProduceResponseInfo(throttle_time_ms=throttle, partitions=tuple(parts), node_endpoints=has_endpoints)


# The direct twins of these parsers (plain functions for a frame whole in one chunk) are
# generated from this source into ``produce_now.py`` by ``gen_direct.py``.
