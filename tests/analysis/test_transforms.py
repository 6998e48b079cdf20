"""Analysis transforms on exact small DataFrames."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow.compute as pc
import pytest
from fetchlat.analysis import finish
from fetchlat.analysis import tables as tb
from fetchlat.analysis import transforms as tf
from fetchlat.analysis.schema import spark_schema
from fetchlat.metrics.trace_schema import TABLES
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

MS = 1_000_000
T0 = 1_795_000_020 * 1_000_000_000  # an exact minute boundary (29_916_667 minutes), epoch ns
UTC = dt.UTC


def exchanges(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    full = [{**dict.fromkeys(TABLES["exchanges"].names), **r} for r in rows]
    return spark.createDataFrame(full, spark_schema("exchanges"))


def fetch(ts_s: float, total: float, wait: float, *, broker: str = "1", kind: str = "consumer", client: str = "c",
          outcome: str = "expired", records: int = 0, replica: int = -1) -> dict[str, Any]:
    return {"ts_ns": T0 + int(ts_s * 1e9), "api": "Fetch", "broker": broker, "kind": kind, "client_id": client,
            "total_ns": int(total * MS), "wait_ns": int(wait * MS), "local_ns": int((total - wait) * MS),
            "e2e_ns": int((total - wait) * MS) + 100_000, "outcome": outcome, "records": records,
            "replica_id": replica}


def products(df: DataFrame) -> dict[str, Any]:
    """The one pass, and the products the driver makes of its lists, as the job makes them."""
    out: dict[str, Any] = finish.from_fine(tf.fine(tf.with_window(tf.timed(df), "1m")).toArrow())
    return out


def hourly(df: DataFrame) -> Any:
    """The hourly histograms the driver finishes summary and produce latency from (Arrow)."""
    return products(df)["hourly"]


def record_latency(spark: SparkSession, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    state = tf.record_state(spark.createDataFrame(rows, spark_schema("partitions")), sla_ms=5000).toArrow()
    out: list[dict[str, Any]] = finish.record_latency(state).to_pylist()
    return out


def pairs_of(spark: SparkSession, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pairs = finish.per_window(products(exchanges(spark, rows))["pair_latency"])
    out: list[dict[str, Any]] = finish.flag_shifts(pairs).to_pylist()
    return out


def test_schema_matches_the_writer(spark: SparkSession) -> None:
    for table, schema in TABLES.items():
        assert spark_schema(table).fieldNames() == schema.names


@pytest.mark.parametrize(("text", "expected"), [("30s", 30_000_000), ("1m", 60_000_000), ("5m", 300_000_000),
                                                ("1h", 3_600_000_000)])
def test_window_length(text: str, expected: int) -> None:
    assert tf.window_us(text) == expected


@pytest.mark.parametrize("text", ["soon", "0s", "1w"])
def test_window_length_rejects_nonsense(text: str) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. 30s"):
        tf.window_us(text)


def test_percentiles_per_window_broker_kind_client(spark: SparkSession) -> None:
    df = exchanges(spark, [fetch(1, 501, 500), fetch(2, 503, 500), fetch(3, 502, 500), fetch(70, 510, 500),
                           {"ts_ns": T0, "api": "Produce", "total_ns": 3 * MS}])
    product = products(df)["latency_by_window"]
    cols = ["window_start", "broker", "kind", "client_id", "fetches", "total_p50", "wait_p50", "local_p50", "local_p99"]
    got = sorted(tuple(r.values()) for r in finish.latency_by_window(product).select(cols).to_pylist())
    w0 = dt.datetime.fromtimestamp(T0 / 1e9, UTC)
    w1 = w0 + dt.timedelta(minutes=1)
    expected = [(w0, "1", "consumer", "c", 3, 502.0, 500.0, 2.0, 3.0),
                (w1, "1", "consumer", "c", 1, 510.0, 500.0, 10.0, 10.0)]
    assert [g[:5] for g in got] == [e[:5] for e in expected]
    for g, e in zip(got, expected, strict=True):
        assert g[5:] == pytest.approx(e[5:], rel=tb.ALPHA)


def test_outcome_mix_and_long_poll_efficiency(spark: SparkSession) -> None:
    df = exchanges(spark, [fetch(1, 501, 500), fetch(2, 40, 30, outcome="woken", records=5),
                           fetch(3, 2, 0, outcome="immediate", records=9), fetch(4, 501, 500)])
    cols = ["fetches", "immediate", "woken", "expired", "error", "unknown", "with_records", "data_efficiency",
            "wait_share"]
    got = products(df)["outcome_mix"].select(cols)
    assert [tuple(r.values()) for r in got.to_pylist()] == [(4, 1, 1, 2, 0, 0, 2, 0.5, 1030.0 / 1044.0)]


def test_grey_failure_on_one_pair_is_flagged_with_its_size(spark: SparkSession) -> None:
    rows = []
    for minute in range(6):
        for follower, local in ((2, 3.0), (3, 4.0)):
            if follower == 3 and minute == 4:
                local = 25.0  # the grey failure: 3 -> 1 slows by ~21 ms for one minute
            for k in range(3):
                rows.append(fetch(minute * 60 + k, local + 500, 500, kind="follower", replica=follower))
    flagged = [r for r in pairs_of(spark, rows) if r["flagged"]]
    assert [(r["leader"], r["follower"]) for r in flagged] == [("1", 3)]
    for col, v in (("local_p50", 25.0), ("baseline_ms", 4.0), ("shift_ms", 21.0)):
        assert flagged[0][col] == pytest.approx(v, rel=tb.ALPHA * (25 + 4) / 21)  # the shift carries both ends' error


def test_a_clean_run_flags_nothing(spark: SparkSession) -> None:
    rows = [fetch(m * 60 + k, 500 + 3 + (k % 2), 500, kind="follower", replica=2) for m in range(6) for k in range(4)]
    pairs = pairs_of(spark, rows)
    assert not any(r["flagged"] for r in pairs) and len(pairs) == 6


def test_a_pairs_baseline_is_what_sparks_percentile_approx_gives(spark: SparkSession) -> None:
    """The baseline, the lower median of a pair's window medians, computed in the driver, is the
    value Spark's own ``percentile_approx(local_p50, 0.5, 10000)`` gives (the job computed it so
    before the tables were finished in the driver): odd and even counts, ties, a null median."""
    import random
    rnd = random.Random(5)
    rows = [("1", f, float(rnd.choice([1.5, 2.0, 2.5, 3.25, 40.0, rnd.random() * 9])) if (f + w) % 17 else None)
            for f in range(2, 9) for w in range(f * 7 + 3)]
    df = spark.createDataFrame(rows, "leader string, follower int, local_p50 double")
    spark_says = {(r["leader"], r["follower"]): r["b"] for r in df.groupBy("leader", "follower").agg(
        F.percentile_approx("local_p50", 0.5, 10_000).alias("b")).collect()}
    ours = finish.flag_shifts(df.toArrow()).to_pylist()
    assert {(r["leader"], r["follower"]): r["baseline_ms"] for r in ours} == spark_says
    assert len(spark_says) == 7


def test_record_latency_with_sla_breaches(spark: SparkSession) -> None:
    base = dict.fromkeys(TABLES["partitions"].names)
    rows = [{**base, "ts_ns": T0, "api": "Fetch", "topic": "t", "partition": 0, "client_id": "c",
             "record_latency_ns": v * MS} for v in (100, 200, 7000)]
    rows.append({**base, "ts_ns": T0, "api": "Produce", "topic": "t", "partition": 0, "client_id": "p"})
    got = record_latency(spark, rows)
    assert [(r["topic"], r["partition"], r["client_id"], r["samples"], r["sla_breaches"]) for r in got] == [
        ("t", 0, "c", 3, 1)]
    assert got[0]["p50_ms"] == pytest.approx(200.0, rel=tb.ALPHA) and got[0]["p99_ms"] == 7000.0  # clamped to the max
    assert (got[0]["max_ms"], got[0]["avg_ms"]) == (7000.0, 7300.0 / 3)  # max and avg exact


def test_in_range(spark: SparkSession) -> None:
    df = exchanges(spark, [fetch(s, 2, 0) for s in (0, 10, 20)])
    assert tf.in_range(df, T0 + 5 * 10**9, T0 + 20 * 10**9).count() == 1


def test_per_broker_tables_merge_the_per_client_histograms(spark: SparkSession) -> None:
    """One pass counts per client; summary, timeline and produce latency merge those histograms
    and give the quantiles of all the rows together (each within ALPHA of the exact value)."""
    rows = [fetch(s, 500 + v, 500, client=c) for s, (c, v) in enumerate(
        [("a", 1), ("a", 2), ("a", 9), ("b", 3), ("b", 4), ("b", 5)])]
    rows += [{"ts_ns": T0 + k, "api": "Produce", "broker": "1", "kind": "producer", "client_id": f"p{k}",
              "total_ns": (k + 1) * MS, "acks": -1, "records": 10} for k in range(4)]
    df = exchanges(spark, rows)
    fine = tf.fine(tf.with_window(tf.timed(df), "1m"))
    assert fine.where("api = 'Fetch'").count() == 2  # one row per client
    h = hourly(df)
    got = finish.summary(h).select(["broker", "kind", "fetches", "local_p50", "local_p90", "local_p999", "wait_p50"])
    assert [tuple(r.values())[:3] for r in got.to_pylist()] == [("1", "consumer", 6)]
    assert list(got.to_pylist()[0].values())[3:] == pytest.approx([3.0, 9.0, 9.0, 500.0], rel=tb.ALPHA)
    timeline = products(df)["timeline"].select(["fetches", "local_p50", "total_p50"]).to_pylist()
    assert [r["fetches"] for r in timeline] == [6]
    assert [timeline[0]["local_p50"], timeline[0]["total_p50"]] == pytest.approx([3.0, 503.0], rel=tb.ALPHA)
    produce = finish.produce_latency(h).to_pylist()
    assert [tuple(r.values())[:4] for r in produce] == [("1", -1, 4, 40)]
    assert list(produce[0].values())[4:] == pytest.approx([2.0, 4.0, 4.0], rel=tb.ALPHA)


def test_merging_over_clients_counts_what_a_plain_count_of_the_rows_does(spark: SparkSession) -> None:
    """The driver reads each row's buckets out of the one pass's packed lists and merges them over
    clients: the hourly histograms are the very counts a plain Spark count of each row's buckets
    by their keys gives, null keys (a fetch's acks, a consumer's replica) and null durations
    included, and the sums of STATS."""
    rows = [fetch(s * 7.0, 500 + (s % 9), 500, broker=str(1 + s % 2), client=f"c{s % 3}", outcome=o, records=s % 4)
            for s, o in zip(range(40), ["expired", "immediate", "woken", "error", "unknown"] * 8, strict=True)]
    rows += [fetch(s * 11.0, 3 + s % 5, 0, broker="2", kind="follower", client="broker-1", replica=1,
                   outcome="immediate", records=5) for s in range(20)]
    rows += [{"ts_ns": T0 + k * 10**9, "api": "Produce", "broker": str(1 + k % 2), "kind": "producer",
              "client_id": "p", "total_ns": (k + 1) * MS, "acks": k % 2, "records": 10} for k in range(8)]
    rows.append(fetch(99.0, 3, 5, client="c9"))  # a negative local latency has a bucket of its own
    rows.append({**fetch(120.0, 3, 1, client="c9"), "e2e_ns": None})  # a part without a value counts nowhere
    timed = tf.with_window(tf.timed(exchanges(spark, rows)), "1m")
    got = products(timed)["hourly"]
    keys = ["api", "broker", "kind", "acks", "hour", "part", "bucket"]
    api = F.when(F.col("api") == "Produce", "Produce").otherwise("Fetch").alias("api")
    each = F.explode(F.array(*[F.struct(F.lit(i).alias("part"), tf.bucket(F.col(f"{p}_ns")).alias("bucket"))
                               for i, p in enumerate(tb.PARTS)]))
    plain = (timed.select("broker", "kind", "acks", tf.hour_of_ts().alias("hour"), api, each.alias("e"))
             .select(*keys[:5], "e.part", "e.bucket").where(F.col("bucket").isNotNull())
             .groupBy(*keys).count().collect())
    counted = got.filter(pc.not_equal(got["part"], tb.STATS_PART)).select([*keys, "n"]).to_pylist()
    assert len(plain) > 20
    assert sorted(tuple(r.values()) for r in counted) == sorted(tuple(r) for r in plain)
    stats = got.filter(pc.equal(got["part"], tb.STATS_PART))
    assert (pc.sum(stats["requests"]).as_py(), pc.sum(stats["records"]).as_py()) == (70, 60 + 100 + 80)
    assert sum(pc.sum(stats[o]).as_py() for o in tb.OUTCOMES) == 62  # the produces have no outcome


def test_a_share_fetch_is_a_fetch_of_its_own_kind(spark: SparkSession) -> None:
    rows = [fetch(1, 501, 500), fetch(2, 503, 500),
            {**fetch(3, 92, 90, client="s", outcome="woken", records=1), "api": "ShareFetch", "kind": "share"},
            {**fetch(4, 94, 90, client="s", outcome="woken", records=1), "api": "ShareFetch", "kind": "share"}]
    got = finish.summary(hourly(exchanges(spark, rows))).select(["broker", "kind", "fetches", "local_p50"])
    got = got.sort_by([("kind", "ascending")]).to_pylist()
    assert [(r["broker"], r["kind"], r["fetches"]) for r in got] == [("1", "consumer", 2), ("1", "share", 2)]
    assert [r["local_p50"] for r in got] == pytest.approx([1.0, 2.0], rel=tb.ALPHA)
    base = dict.fromkeys(TABLES["partitions"].names)
    parts = [{**base, "ts_ns": T0, "api": "ShareFetch", "kind": "share", "topic": "q", "partition": 0,
              "client_id": "s", "record_latency_ns": 40 * MS}]
    assert [(r["topic"], r["client_id"]) for r in record_latency(spark, parts)] == [("q", "s")]


def test_no_percentile_lies_beyond_its_groups_min_or_max(spark: SparkSession) -> None:
    """A bucket stands for a value within 1 % of its members: a group's p99 read from the bucket
    of its largest value could lie above that value (7 594.6 against a max of 7 548.9 ms)."""
    base = dict.fromkeys(TABLES["partitions"].names)
    rows = [{**base, "ts_ns": T0, "api": "Fetch", "topic": "t", "partition": 0, "client_id": "c",
             "record_latency_ns": v} for v in (7_548_900_000, 7_548_900_000, 7_548_900_000)]
    got = record_latency(spark, rows)[0]
    assert got["p50_ms"] == got["p99_ms"] == got["max_ms"] == 7548.9
    df = exchanges(spark, [fetch(1, 7548.9, 500), fetch(2, 7548.9, 500)])
    s = finish.summary(hourly(df)).to_pylist()[0]
    assert s["total_p50"] <= 7548.9 and s["total_p99"] <= 7548.9
