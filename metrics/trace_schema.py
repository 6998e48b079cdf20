"""The trace schema: explicit and versioned, shared by the writer (proxy/traces.py) and the
analysis job. The first 18 ``exchanges`` columns are pinned (docs/traces.md); extend, never rename.

Tables: ``exchanges`` (one row per request/response pair), ``partitions`` (one row per
partition of a fetch or produce) and ``replication`` (one row per replication-latency sample),
each under ``TRACE_DIR/<table>/`` as ``metrics/trace_layout.py`` places them. Each file's
Parquet metadata holds the schema version and one (wall, monotonic) clock pair.
Must never: hold record keys, values, headers or SASL bytes (there are no such columns).
"""

from __future__ import annotations

from typing import Any, Final

import pyarrow as pa

SCHEMA_VERSION: Final = 1
META_SCHEMA_VERSION: Final = b"fetchlat.schema_version"
META_CLOCK: Final = b"fetchlat.clock"  # JSON {"wall_ns": ..., "mono_ns": ...}

EXCHANGES: Final = pa.schema([
    # pinned (docs/traces.md)
    ("ts_ns", pa.int64()),  # wall clock, epoch ns, when the request was forwarded upstream
    ("proxy_id", pa.string()),
    ("conn_id", pa.int64()),
    ("client_id", pa.string()),
    ("broker", pa.string()),
    ("api", pa.string()),
    ("api_version", pa.int16()),
    ("kind", pa.string()),  # consumer | follower (fetch), producer, or null
    ("max_wait_ms", pa.int32()),
    ("min_bytes", pa.int32()),
    ("response_bytes", pa.int64()),
    ("error_code", pa.int16()),
    ("total_ns", pa.int64()),
    ("wait_ns", pa.int64()),
    ("wait_source", pa.string()),
    ("local_ns", pa.int64()),
    ("e2e_ns", pa.int64()),
    ("outcome", pa.string()),
    # extensions
    ("correlation_id", pa.int32()),
    ("request_bytes", pa.int64()),
    ("records", pa.int64()),
    ("replica_id", pa.int32()),
    ("acks", pa.int16()),
    ("throttle_ms", pa.int32()),
    ("first_byte_ns", pa.int64()),
    ("transfer_ns", pa.int64()),
    ("wake_lag_ns", pa.int64()),
    ("wait_basis", pa.string()),
    ("confident", pa.bool_()),
    ("partitions", pa.int32()),
])

PARTITIONS: Final = pa.schema([
    ("ts_ns", pa.int64()),
    ("proxy_id", pa.string()),
    ("conn_id", pa.int64()),
    ("correlation_id", pa.int32()),
    ("client_id", pa.string()),
    ("broker", pa.string()),
    ("api", pa.string()),
    ("kind", pa.string()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("fetch_offset", pa.int64()),
    ("high_watermark", pa.int64()),
    ("base_offset", pa.int64()),
    ("error_code", pa.int16()),
    ("records", pa.int64()),
    ("bytes", pa.int64()),
    ("record_latency_ns", pa.int64()),
])

REPLICATION: Final = pa.schema([
    ("ts_ns", pa.int64()),  # wall clock, epoch ns, of the follower fetch confirming the records
    ("proxy_id", pa.string()),
    ("broker", pa.string()),  # the leader
    ("follower", pa.int32()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("latency_ns", pa.int64()),  # produce append at the leader -> that follower fetch
])

TABLES: Final = {"exchanges": EXCHANGES, "partitions": PARTITIONS, "replication": REPLICATION}


def empty_row(table: str) -> dict[str, Any]:
    return dict.fromkeys(TABLES[table].names)
