"""Trace rows as columns: one exchange's samples appended to the column buffers of the
``exchanges``, ``partitions`` and ``replication`` tables (``trace_schema.py``). Pure: the caller
gives the wall-clock time, and takes full batches (``TraceColumns.take``) to the writer.

A row is no object of its own: its values go to its table's columns in one call, in the
schema's column order, and a batch of columns goes to the writer thread in one hand-off. Two
roads, the same rows (``tests/metrics/test_rows_native.py``):

- native (the core's ``Columns``, ``native/src/columns.rs``): each value is kept as a machine
  value (strings as indexes into the batch's own dictionary), and the writer wraps the buffers
  as Arrow arrays without converting a value;
- Python: each value is appended to its column's list, and the writer has pyarrow convert each
  list at once.

No dict per row, no lock per row. Must never: put record keys, values, headers or SASL bytes in
a row (there are no such columns).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final

import pyarrow as pa

from .. import native
from ..protocol.apis import api_name
from .model import FetchSample, ProduceSample, ReplicationSample
from .trace_schema import TABLES
from .vocabulary import Kind

Row = tuple[str, dict[str, Any]]  # (table, row): the rows of a batch, read back (tests, tools)
NAMES: Final = {t: tuple(s.names) for t, s in TABLES.items()}
DEFAULT_BATCH_ROWS: Final = 4096
# How old a batch's first row may grow before the batch goes over at the caller's tick, by
# default (``TraceColumns.tick``; the trace writer passes its hold, ``proxy/traces.py``)
HAND_OFF_EVERY_NS: Final = 1_000_000_000
_CORE: Final = native.core()
# what converting a batch's columns raises for a value that cannot be kept (the writer counts the
# table's rows as dropped): pyarrow raises OverflowError past int64, TypeError for a wrong type
CONVERSION_ERRORS: Final = (ValueError, TypeError, OverflowError, pa.ArrowException)


def column_kinds(schema: pa.Schema) -> str:
    """How the native core keeps each column of ``schema``: ``8``, ``4``, ``2`` a signed integer of
    that many bytes, ``b`` bool, ``s`` string."""
    out = []
    for f in schema:
        if pa.types.is_signed_integer(f.type) and f.type.bit_width in (16, 32, 64):
            out.append(str(f.type.bit_width // 8))
        elif pa.types.is_boolean(f.type):
            out.append("b")
        elif pa.types.is_string(f.type):
            out.append("s")
        else:
            raise TypeError(f"no native column for {f.name}: {f.type}")
    return "".join(out)


KINDS: Final = {t: column_kinds(s) for t, s in TABLES.items()}


def native_array(field: pa.Field, rows: int, taken: tuple[Any, ...]) -> pa.Array:
    """One column of the native core's (``Columns.buffers``) as an Arrow array of ``field``'s type:
    its buffers, already of that type (integers at their width, a string's offsets and bytes),
    wrapped as they are. A value that did not fit its column was refused when added (the
    batch's ``bad``), as the Python road's conversion refuses it."""
    values, valid, nulls = taken[0], taken[1], taken[2]
    validity = None if valid is None else pa.py_buffer(valid)
    if pa.types.is_string(field.type):
        return pa.Array.from_buffers(pa.string(), rows, [validity, pa.py_buffer(values), pa.py_buffer(taken[3])],
                                     null_count=nulls)
    return pa.Array.from_buffers(field.type, rows, [validity, pa.py_buffer(values)], null_count=nulls)


class TraceBatch:
    """The columns of some rows of each table, as the writer takes them. ``native_columns``:
    which road (the native core's when it is loaded, by default)."""

    def __init__(self, *, native_columns: bool | None = None) -> None:
        core = _CORE
        use = core is not None if native_columns is None else native_columns
        self.native: dict[str, Any] | None = None
        if use:
            if core is None:
                raise RuntimeError(f"no native core: {native.reason()}")
            self.native = {t: core.Columns(KINDS[t]) for t in NAMES}
        self._lists: dict[str, list[list[object]]] | None = (
            None if use else {t: [[] for _ in names] for t, names in NAMES.items()})
        self._arrays: dict[str, tuple[int, list[pa.Array]]] = {}  # table -> (its rows then, its arrays)
        self.counts: dict[str, int] = dict.fromkeys(NAMES, 0)
        self.rows = 0  # over every table
        self.first_ns = 0  # the caller's clock at the first tick that found rows in it (0: none yet)

    def arrays(self, table: str, between: Callable[[], None] | None = None) -> list[pa.Array]:
        """``table``'s columns as Arrow arrays of the schema's types (``to_arrays``, made once
        for the rows held)."""
        done = self._arrays.get(table)
        if done is not None and done[0] == self.counts[table]:
            return done[1]
        arrays = to_arrays(self, table, between)
        self._arrays[table] = (self.counts[table], arrays)
        return arrays

    @property
    def columns(self) -> dict[str, list[list[object]]]:
        """Every table's columns as lists of Python values: the Python road's own lists; the
        native road's, made from its arrays (tools and tests; the writer takes ``arrays``)."""
        if self._lists is not None:
            return self._lists
        return {t: [a.to_pylist() for a in self.arrays(t)] for t in NAMES}

    def table_rows(self, table: str) -> list[dict[str, Any]]:
        """The rows of ``table`` as dicts, in the order they came (for tests and tools)."""
        names = NAMES[table]
        cols = self.columns[table]
        return [{n: cols[i][k] for i, n in enumerate(names)} for k in range(self.counts[table])]

    def all_rows(self) -> Iterator[Row]:
        for table in NAMES:
            for row in self.table_rows(table):
                yield table, row


def to_arrays(batch: TraceBatch, table: str, between: Callable[[], None] | None = None) -> list[pa.Array]:
    """``table``'s columns of ``batch`` as Arrow arrays of the schema's types: the native road's
    buffers wrapped, the Python road's lists converted. ``between`` runs after each column: the
    writer thread passes ``proxy/traces.py``'s ``yield_gil``. A value of the wrong type, or out
    of its column's range, raises one of ``CONVERSION_ERRORS``."""
    schema = TABLES[table]
    arrays = []
    if batch.native is not None:
        rows, bad, cols = batch.native[table].buffers()
        if bad is not None:
            raise ValueError(f"a {table} trace row could not be kept: {bad}")
        for f, taken in zip(schema, cols, strict=True):
            arrays.append(native_array(f, rows, taken))
            if between is not None:
                between()
    else:
        assert batch._lists is not None
        for f, col in zip(schema, batch._lists[table], strict=True):
            arrays.append(pa.array(col, type=f.type))
            if between is not None:
                between()
    return arrays


def _add(batch: TraceBatch, table: str, values: tuple[object, ...]) -> None:
    if batch.native is not None:
        batch.native[table].add(values)  # ValueError for a row of the wrong width, nothing added
    else:
        assert batch._lists is not None
        cols = batch._lists[table]
        if len(values) != len(cols):
            raise ValueError(f"a {table} row of {len(values)} values for {len(cols)} columns")
        for i in range(len(values)):
            cols[i].append(values[i])
    batch.counts[table] += 1
    batch.rows += 1


def _api(s: FetchSample) -> str:
    return "ShareFetch" if s.kind == Kind.SHARE else "Fetch"


class TraceColumns:
    """The rows being gathered, and when they go over: ``hand_off`` (the trace writer's; it never
    blocks the caller but in a writer made to block, offline) takes a batch once it holds
    ``batch_rows`` rows, and at the caller's timer (``tick``) once its first row is ``every_ns``
    old. Without ``hand_off`` the rows stay gathered (tests read them)."""

    def __init__(self, hand_off: Callable[[TraceBatch], None] | None = None,
                 batch_rows: int = DEFAULT_BATCH_ROWS, *, native_columns: bool | None = None,
                 every_ns: int = HAND_OFF_EVERY_NS) -> None:
        self.hand_off = hand_off
        self.batch_rows = batch_rows
        self.every_ns = every_ns
        self.native_columns = native_columns  # which road (TraceBatch's default: native when loaded)
        self.batch = TraceBatch(native_columns=native_columns)

    def take(self) -> TraceBatch:
        """The rows gathered so far; gathering starts again empty."""
        batch, self.batch = self.batch, TraceBatch(native_columns=self.native_columns)
        return batch

    def flush(self) -> None:
        """Every row gathered so far goes over now."""
        if self.batch.rows and self.hand_off is not None:
            self.hand_off(self.take())

    def tick(self, now_ns: int) -> None:
        """On the caller's timer (``now_ns`` its clock): the batch goes over once its first row is
        ``every_ns`` old. A batch's age is dated by the first tick that finds rows in it (no clock
        is read per row), so it is at most one tick younger than its first row."""
        b = self.batch
        if not b.rows:
            return
        if not b.first_ns:
            b.first_ns = now_ns
        elif now_ns - b.first_ns >= self.every_ns:
            self.flush()

    def _added(self) -> None:
        if self.batch.rows >= self.batch_rows and self.hand_off is not None:
            self.hand_off(self.take())

    def fetch(self, ts_ns: int, proxy_id: str, broker: str, conn_id: int, correlation_id: int, s: FetchSample,
              replication: list[ReplicationSample]) -> None:
        b = self.batch
        api = _api(s)
        for r in replication:
            _add(b, "replication", (ts_ns, proxy_id, broker, r.follower, r.topic, r.partition, r.latency_ns))
        _add(b, "exchanges", (
            ts_ns, proxy_id, conn_id, s.client_id, broker, api, s.api_version, s.kind, s.max_wait_ms, s.min_bytes,
            s.response_bytes, s.error_code, s.total_ns, s.wait_ns, s.wait_source, s.local_ns, s.e2e_ns, s.outcome,
            correlation_id, s.request_bytes, s.records, s.replica_id, None, s.throttle_ms, s.first_byte_ns,
            s.transfer_ns, s.wake_lag_ns, s.basis, s.confident, len(s.partitions)))
        for p in s.partitions:
            _add(b, "partitions", (
                ts_ns, proxy_id, conn_id, correlation_id, s.client_id, broker, api, s.kind, p.topic, p.partition,
                p.fetch_offset, p.high_watermark, None, p.error_code, p.records, p.bytes, p.record_latency_ns))
        self._added()

    def produce(self, ts_ns: int, proxy_id: str, broker: str, conn_id: int, correlation_id: int,
                response_bytes: int, s: ProduceSample) -> None:
        b = self.batch
        _add(b, "exchanges", (
            ts_ns, proxy_id, conn_id, s.client_id, broker, "Produce", s.api_version, Kind.PRODUCER, None, None,
            response_bytes, s.error_code, s.total_ns, None, None, None, None, None,
            correlation_id, s.request_bytes, s.records, None, s.acks, s.throttle_ms, None,
            None, None, None, None, len(s.partitions)))
        for topic, part, base, n in s.partitions:
            _add(b, "partitions", (
                ts_ns, proxy_id, conn_id, correlation_id, s.client_id, broker, "Produce", Kind.PRODUCER, topic, part,
                None, None, base, None, n, None, None))
        self._added()

    def other(self, ts_ns: int, proxy_id: str, broker: str, conn_id: int, *, api_key: int, api_version: int,
              client_id: str | None, correlation_id: int, response_bytes: int, total_ns: int) -> None:
        """Any other request/response pair: its size and total time."""
        _add(self.batch, "exchanges", (
            ts_ns, proxy_id, conn_id, client_id, broker, api_name(api_key), api_version, None, None, None,
            response_bytes, None, total_ns, None, None, None, None, None,
            correlation_id, None, None, None, None, None, None,
            None, None, None, None, None))
        self._added()
