"""Trace rows on both roads (``metrics/rows.py``): the native core's columns of machine values
(``native/src/columns.rs``) and the Python road's lists give the writer the same Arrow tables,
row for row: every kind of value, nulls, repeated and unicode strings, the extremes of each
integer width, generated rows (hypothesis), and the same refusals (a row of the wrong width at
once; a value of the wrong type or out of its column's range when the batch is converted, which
the writer counts as dropped rows)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from fetchlat import native
from fetchlat.metrics.model import FetchSample, PartitionSample, ProduceSample, ReplicationSample
from fetchlat.metrics.rows import CONVERSION_ERRORS, NAMES, TraceBatch, TraceColumns, _add, to_arrays
from fetchlat.metrics.trace_schema import TABLES
from fetchlat.metrics.vocabulary import Kind, Outcome, WaitSource
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.skipif(native.core() is None, reason=f"no native core: {native.reason()}")

I64 = (-(2**63), 2**63 - 1)


def fetch_sample(i: int, *, wake_lag: int | None, client: str) -> FetchSample:
    return FetchSample(
        kind=Kind.FOLLOWER if i % 5 == 0 else Kind.CONSUMER, replica_id=i % 3 - 1, client_id=client, api_version=16,
        max_wait_ms=500, min_bytes=1, request_bytes=80 + i, response_bytes=300 + i, records=i, error_code=0,
        throttle_ms=0, total_ns=2_000 + i, first_byte_ns=1_000, transfer_ns=1_000, wait_ns=i * 7,
        wait_source=WaitSource.INFERRED, outcome=Outcome.WOKEN if i % 2 else Outcome.EXPIRED, basis="produce_seen",
        confident=bool(i % 3), local_ns=2_000 - i, e2e_ns=2_100, wake_lag_ns=wake_lag,
        partitions=tuple(PartitionSample(topic=f"topic-{p}", partition=p, fetch_offset=I64[1] - p, high_watermark=-1,
                                         error_code=p % 2, records=p, bytes=200, record_latency_ns=None if p else 5)
                         for p in range(i % 4)))


def mixed(cols: TraceColumns, n: int = 300) -> None:
    """Every kind of row the proxy writes: fetches (with partitions and replication samples),
    produces, other requests; nulls, extremes, unicode client ids, None client ids."""
    for i in range(n):
        client = ["c", "ünïcødé-客户端", "", "c" * 300][i % 4]
        rep = ([ReplicationSample(follower=i % 3, topic="t", partition=i % 2, latency_ns=I64[0] + i)]
               if i % 7 == 0 else [])
        cols.fetch(1_700_000_000 * 10**9 + i, "proxy-1", str(i % 3), i, i, fetch_sample(
            i, wake_lag=None if i % 2 else i, client=client), rep)
        cols.produce(1_700_000_000 * 10**9 + i, "proxy-1", "0", i, 2**31 - 1 - i, 60, ProduceSample(
            client_id=client, acks=-1, api_version=11, records=1, accepted=1, request_bytes=120, error_code=0,
            total_ns=None if i % 9 == 0 else 123_456, throttle_ms=0, partitions=(("topic-a", i % 3, I64[1] - i, 1),)))
        cols.other(1_700_000_000 * 10**9 + i, "proxy-1", "1", i, api_key=i % 70, api_version=i % 5,
                   client_id=None if i % 6 == 0 else client, correlation_id=-(2**31) + i, response_bytes=i,
                   total_ns=i)


def both(fill) -> tuple[TraceBatch, TraceBatch]:  # type: ignore[no-untyped-def]
    out = []
    for road in (True, False):
        cols = TraceColumns(None, native_columns=road)
        fill(cols)
        out.append(cols.take())
    return out[0], out[1]


def assert_same(nat: TraceBatch, py: TraceBatch) -> None:
    assert nat.native is not None and py.native is None
    assert nat.counts == py.counts and nat.rows == py.rows
    for table in NAMES:
        a = pa.Table.from_arrays(to_arrays(nat, table), schema=TABLES[table])
        b = pa.Table.from_arrays(to_arrays(py, table), schema=TABLES[table])
        assert a.schema == b.schema and a.num_rows == b.num_rows == nat.counts[table]
        assert a.equals(b), table
        assert nat.table_rows(table) == py.table_rows(table)


def test_the_native_columns_are_the_python_lists() -> None:
    nat, py = both(mixed)
    assert nat.counts["exchanges"] == 900 and nat.counts["replication"] > 0 and nat.counts["partitions"] > 0
    assert_same(nat, py)


def test_an_empty_batch_and_a_batch_read_while_it_grows() -> None:
    nat, py = both(lambda cols: None)
    assert_same(nat, py)
    cols = TraceColumns(None, native_columns=True)
    mixed(cols, 10)
    first = cols.batch.table_rows("exchanges")  # read while gathering (tests do), then more rows
    mixed(cols, 10)
    assert len(first) == 30 and len(cols.batch.table_rows("exchanges")) == 60


values = {
    "i": st.one_of(st.none(), st.integers(min_value=I64[0], max_value=I64[1])),
    "i32": st.one_of(st.none(), st.integers(min_value=-(2**31), max_value=2**31 - 1)),
    "s": st.one_of(st.none(), st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12),
                   st.sampled_from(["0", "1", "consumer"])),
}
# replication: ts_ns, proxy_id, broker, follower (int32), topic, partition (int32), latency_ns
replication_row = st.tuples(values["i"], values["s"], values["s"], values["i32"], values["s"], values["i32"],
                            values["i"])


@settings(max_examples=150, deadline=None)
@given(st.lists(replication_row, max_size=40))
def test_generated_rows(rows: list[tuple[object, ...]]) -> None:
    def fill(cols: TraceColumns) -> None:
        for r in rows:
            _add(cols.batch, "replication", r)

    assert_same(*both(fill))


@pytest.mark.parametrize("bad", [
    ("a string in an integer column", (1, "p", "0", "x", "t", 0, 5)),
    ("past int32", (1, "p", "0", 2**31, "t", 0, 5)),
    ("past int64", (1, "p", "0", 1, "t", 0, 2**63)),
    ("an integer in a string column", (1, "p", 7, 1, "t", 0, 5)),
])
def test_a_value_that_cannot_be_kept_fails_the_conversion_on_both_roads(bad: tuple[str, tuple[object, ...]]) -> None:
    """The writer catches CONVERSION_ERRORS and counts the table's rows as dropped
    (proxy/traces.py): both roads raise one of them for the batch, not at the row."""
    for road in (True, False):
        b = TraceBatch(native_columns=road)
        _add(b, "replication", (1, "p", "0", 1, "t", 0, 5))
        _add(b, "replication", bad[1])
        with pytest.raises(CONVERSION_ERRORS):
            to_arrays(b, "replication")


def test_a_row_of_the_wrong_width_is_refused_on_both_roads() -> None:
    for road in (True, False):
        b = TraceBatch(native_columns=road)
        with pytest.raises(ValueError, match="3 values for 7 columns"):
            _add(b, "replication", (1, "p", "1"))
        assert b.rows == 0 and to_arrays(b, "replication")[0].to_pylist() == []
