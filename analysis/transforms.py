"""Pure transforms of trace DataFrames: no session, paths or configuration; built-in Spark
SQL functions only (no Python UDFs on the data path). Durations come out in milliseconds."""

from __future__ import annotations

import re

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

QUANTILES = (0.5, 0.9, 0.99, 0.999)
QNAMES = ("p50", "p90", "p99", "p999")
ACCURACY = 10_000  # percentile_approx: the answer's rank is within 1/ACCURACY of the requested one
PARTS = ("total", "wait", "local", "e2e")


def spark_interval(window: str) -> str:
    """'30s', '1m', '5m', '1h', '1d' -> a Spark interval ('1 minute')."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", window)
    if not m:
        raise ValueError(f"window '{window}': write a number and a unit, e.g. 30s, 1m, 5m, 1h")
    unit = {"s": "second", "m": "minute", "h": "hour", "d": "day"}[m.group(2)]
    return f"{m.group(1)} {unit}{'s' if m.group(1) != '1' else ''}"


def _ts(col: str = "ts_ns") -> Column:
    return F.timestamp_micros(F.floor(F.col(col) / 1000).cast("long"))


def in_range(df: DataFrame, since_ns: int | None, until_ns: int | None) -> DataFrame:
    if since_ns is not None:
        df = df.where(F.col("ts_ns") >= since_ns)
    if until_ns is not None:
        df = df.where(F.col("ts_ns") < until_ns)
    return df


def with_window(df: DataFrame, window: str) -> DataFrame:
    return df.withColumn("window_start", F.window(_ts(), spark_interval(window)).start)


def fetches(exchanges: DataFrame) -> DataFrame:
    """Fetch exchanges with their durations in ms."""
    df = exchanges.where((F.col("api") == "Fetch") & F.col("total_ns").isNotNull())
    for part in PARTS:
        df = df.withColumn(f"{part}_ms", F.col(f"{part}_ns") / 1e6)
    return df


def _quantile_cols(part: str) -> list[Column]:
    arr = F.percentile_approx(F.col(f"{part}_ms"), list(QUANTILES), ACCURACY)
    return [arr.alias(f"_{part}_q")]


def _explode_quantiles(df: DataFrame) -> DataFrame:
    for part in PARTS:
        for i, name in enumerate(QNAMES):
            df = df.withColumn(f"{part}_{name}", F.col(f"_{part}_q")[i])
        df = df.drop(f"_{part}_q")
    return df


def percentiles(df: DataFrame, keys: list[str]) -> DataFrame:
    """Count and p50/p90/p99/p99.9 of total, wait, local and e2e per group."""
    aggs = [F.count(F.lit(1)).alias("fetches")]
    for part in PARTS:
        aggs += _quantile_cols(part)
    return _explode_quantiles(df.groupBy(*keys).agg(*aggs))  # unordered: written tables need no global sort


def latency_by_window(fetch_df: DataFrame) -> DataFrame:
    """Per window x broker x kind x client."""
    return percentiles(fetch_df, ["window_start", "broker", "kind", "client_id"])


def summary(fetch_df: DataFrame) -> DataFrame:
    """The headline: per broker x kind over the whole range."""
    return percentiles(fetch_df, ["broker", "kind"])


def outcome_mix(fetch_df: DataFrame) -> DataFrame:
    """Per window x broker x kind: fetches by outcome, and long-poll efficiency (the share of
    fetches that brought records back, and the share of fetch time spent parked)."""
    return (fetch_df.groupBy("window_start", "broker", "kind").agg(
        F.count(F.lit(1)).alias("fetches"),
        *[F.sum(F.when(F.col("outcome") == o, 1).otherwise(0)).alias(o)
          for o in ("immediate", "woken", "expired", "error", "unknown")],
        F.sum(F.when(F.col("records") > 0, 1).otherwise(0)).alias("with_records"),
        F.sum("wait_ns").alias("_wait"), F.sum("total_ns").alias("_total"),
    ).withColumn("data_efficiency", F.col("with_records") / F.col("fetches"))
     .withColumn("wait_share", F.when(F.col("_total") > 0, F.col("_wait") / F.col("_total")))
     .drop("_wait", "_total").orderBy("window_start", "broker", "kind"))


def pair_latency(fetch_df: DataFrame) -> DataFrame:
    """Follower -> leader: per window, the median and p99 true local fetch latency."""
    f = fetch_df.where(F.col("kind") == "follower")
    return (f.groupBy("window_start", F.col("broker").alias("leader"), F.col("replica_id").alias("follower"))
            .agg(F.count(F.lit(1)).alias("fetches"),
                 F.percentile_approx("local_ms", 0.5, ACCURACY).alias("local_p50"),
                 F.percentile_approx("local_ms", 0.99, ACCURACY).alias("local_p99"))
            .orderBy("leader", "follower", "window_start"))


def flag_shifts(pairs: DataFrame, *, factor: float = 2.0, min_delta_ms: float = 5.0) -> DataFrame:
    """Change detection per broker pair: a window is flagged when its median is more than
    ``factor`` times the pair's baseline (the median of its window medians, which a few bad
    windows cannot move) and at least ``min_delta_ms`` above it. ``shift_ms`` says by how much."""
    w = Window.partitionBy("leader", "follower")
    baseline = F.percentile_approx("local_p50", 0.5, ACCURACY).over(w)
    return (pairs.withColumn("baseline_ms", baseline)
            .withColumn("shift_ms", F.col("local_p50") - F.col("baseline_ms"))
            .withColumn("flagged", (F.col("local_p50") > F.col("baseline_ms") * factor)
                        & (F.col("shift_ms") >= min_delta_ms))
            .orderBy("leader", "follower", "window_start"))


def record_latency(partitions: DataFrame, sla_ms: float) -> DataFrame:
    """KIP-489 record latency per topic x partition x client, with SLA breaches."""
    p = (partitions.where((F.col("api") == "Fetch") & F.col("record_latency_ns").isNotNull())
         .withColumn("lat_ms", F.col("record_latency_ns") / 1e6))
    return (p.groupBy("topic", "partition", "client_id").agg(
        F.count(F.lit(1)).alias("samples"),
        F.percentile_approx("lat_ms", 0.5, ACCURACY).alias("p50_ms"),
        F.percentile_approx("lat_ms", 0.99, ACCURACY).alias("p99_ms"),
        F.max("lat_ms").alias("max_ms"),
        F.avg("lat_ms").alias("avg_ms"),
        F.sum(F.when(F.col("lat_ms") > sla_ms, 1).otherwise(0)).alias("sla_breaches"),
    ).orderBy("topic", "partition", "client_id"))


def produce_latency(exchanges: DataFrame) -> DataFrame:
    p = exchanges.where((F.col("api") == "Produce") & F.col("total_ns").isNotNull()).withColumn(
        "ms", F.col("total_ns") / 1e6)
    return (p.groupBy("broker", "acks").agg(
        F.count(F.lit(1)).alias("requests"), F.sum("records").alias("records"),
        F.percentile_approx("ms", 0.5, ACCURACY).alias("p50_ms"),
        F.percentile_approx("ms", 0.99, ACCURACY).alias("p99_ms"),
        F.max("ms").alias("max_ms"),
    ).orderBy("broker", "acks"))


def replication_latency(replication: DataFrame) -> DataFrame:
    r = replication.withColumn("ms", F.col("latency_ns") / 1e6)
    return (r.groupBy("broker", "follower").agg(
        F.count(F.lit(1)).alias("samples"),
        F.percentile_approx("ms", 0.5, ACCURACY).alias("p50_ms"),
        F.percentile_approx("ms", 0.99, ACCURACY).alias("p99_ms"),
        F.max("ms").alias("max_ms"),
    ).orderBy("broker", "follower"))


def slowest_clients(fetch_df: DataFrame, n: int) -> DataFrame:
    return (fetch_df.groupBy("client_id", "kind").agg(
        F.count(F.lit(1)).alias("fetches"),
        F.percentile_approx("local_ms", 0.99, ACCURACY).alias("local_p99"),
        F.percentile_approx("local_ms", 0.5, ACCURACY).alias("local_p50"),
    ).orderBy(F.col("local_p99").desc(), "client_id").limit(n))


def slowest_partitions(record_lat: DataFrame, n: int) -> DataFrame:
    return record_lat.orderBy(F.col("p99_ms").desc(), "topic", "partition").limit(n)


def timeline(fetch_df: DataFrame) -> DataFrame:
    """Per window x kind: median naive total vs true local (for the report's main chart)."""
    return (fetch_df.groupBy("window_start", "kind").agg(
        F.percentile_approx("total_ms", 0.5, ACCURACY).alias("total_p50"),
        F.percentile_approx("local_ms", 0.5, ACCURACY).alias("local_p50"),
        F.percentile_approx("wait_ms", 0.5, ACCURACY).alias("wait_p50"),
        F.count(F.lit(1)).alias("fetches"),
    ).orderBy("window_start", "kind"))
