"""Trace rows: one exchange's samples as the rows of the ``exchanges``, ``partitions`` and
``replication`` tables (``trace_schema.py``). Pure: the caller gives the wall-clock time.

Must never: put record keys, values, headers or SASL bytes in a row (there are no such columns).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..protocol.apis import api_name
from .model import FetchSample, ProduceSample, ReplicationSample
from .vocabulary import Kind

Row = tuple[str, dict[str, Any]]  # (table, row)


def _api(s: FetchSample) -> str:
    return "ShareFetch" if s.kind == Kind.SHARE else "Fetch"


def fetch_rows(ts_ns: int, proxy_id: str, broker: str, conn_id: int, correlation_id: int, s: FetchSample,
               replication: list[ReplicationSample]) -> Iterator[Row]:
    api = _api(s)
    for r in replication:
        yield "replication", {"ts_ns": ts_ns, "proxy_id": proxy_id, "broker": broker, "follower": r.follower,
                              "topic": r.topic, "partition": r.partition, "latency_ns": r.latency_ns}
    yield "exchanges", {
        "ts_ns": ts_ns, "proxy_id": proxy_id, "conn_id": conn_id, "client_id": s.client_id,
        "broker": broker, "api": api, "api_version": s.api_version, "kind": s.kind,
        "max_wait_ms": s.max_wait_ms, "min_bytes": s.min_bytes, "response_bytes": s.response_bytes,
        "error_code": s.error_code, "total_ns": s.total_ns, "wait_ns": s.wait_ns, "wait_source": s.wait_source,
        "local_ns": s.local_ns, "e2e_ns": s.e2e_ns, "outcome": s.outcome, "correlation_id": correlation_id,
        "request_bytes": s.request_bytes, "records": s.records, "replica_id": s.replica_id, "acks": None,
        "throttle_ms": s.throttle_ms, "first_byte_ns": s.first_byte_ns, "transfer_ns": s.transfer_ns,
        "wake_lag_ns": s.wake_lag_ns, "wait_basis": s.basis, "confident": s.confident,
        "partitions": len(s.partitions),
    }
    for p in s.partitions:
        yield "partitions", {
            "ts_ns": ts_ns, "proxy_id": proxy_id, "conn_id": conn_id, "correlation_id": correlation_id,
            "client_id": s.client_id, "broker": broker, "api": api, "kind": s.kind, "topic": p.topic,
            "partition": p.partition, "fetch_offset": p.fetch_offset, "high_watermark": p.high_watermark,
            "base_offset": None, "error_code": p.error_code, "records": p.records, "bytes": p.bytes,
            "record_latency_ns": p.record_latency_ns,
        }


def produce_rows(ts_ns: int, proxy_id: str, broker: str, conn_id: int, correlation_id: int, response_bytes: int,
                 s: ProduceSample) -> Iterator[Row]:
    yield "exchanges", {
        "ts_ns": ts_ns, "proxy_id": proxy_id, "conn_id": conn_id, "client_id": s.client_id,
        "broker": broker, "api": "Produce", "api_version": s.api_version, "kind": Kind.PRODUCER,
        "max_wait_ms": None, "min_bytes": None, "response_bytes": response_bytes, "error_code": s.error_code,
        "total_ns": s.total_ns, "wait_ns": None, "wait_source": None, "local_ns": None, "e2e_ns": None,
        "outcome": None, "correlation_id": correlation_id, "request_bytes": s.request_bytes,
        "records": s.records, "replica_id": None, "acks": s.acks, "throttle_ms": s.throttle_ms, "first_byte_ns": None,
        "transfer_ns": None, "wake_lag_ns": None, "wait_basis": None, "confident": None,
        "partitions": len(s.partitions),
    }
    for topic, part, base, n in s.partitions:
        yield "partitions", {
            "ts_ns": ts_ns, "proxy_id": proxy_id, "conn_id": conn_id, "correlation_id": correlation_id,
            "client_id": s.client_id, "broker": broker, "api": "Produce", "kind": Kind.PRODUCER, "topic": topic,
            "partition": part, "fetch_offset": None, "high_watermark": None, "base_offset": base,
            "error_code": None, "records": n, "bytes": None, "record_latency_ns": None,
        }


def other_row(ts_ns: int, proxy_id: str, broker: str, conn_id: int, *, api_key: int, api_version: int,
              client_id: str | None, correlation_id: int, response_bytes: int, total_ns: int) -> Row:
    """Any other request/response pair: its size and total time."""
    return "exchanges", {
        "ts_ns": ts_ns, "proxy_id": proxy_id, "conn_id": conn_id, "client_id": client_id, "broker": broker,
        "api": api_name(api_key), "api_version": api_version, "response_bytes": response_bytes,
        "total_ns": total_ns, "correlation_id": correlation_id,
    }
