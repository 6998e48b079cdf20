"""Pure transforms of trace DataFrames: no session, paths or configuration; built-in Spark
SQL functions only (no Python UDFs on the data path). Durations come out in milliseconds.
Tables come out unordered (a global sort is a pass of its own); the job orders the small
results it writes (``ORDER``)."""

from __future__ import annotations

import math
import re

from fetchlat.metrics.vocabulary import Outcome
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

PER_MILLE = (500, 900, 990, 999)
QNAMES = ("p50", "p90", "p99", "p999")
PARTS = ("total", "wait", "local", "e2e")
# Quantiles come from log-bucket histograms (DDSketch's mapping): a duration v (ns) counts in
# bucket ``bucket(v)`` = sign(v) * (ceil(ln|v| / ln GAMMA) + 1), 0 for v = 0; a bucket stands for
# 2 GAMMA^(|k|-1) / (GAMMA + 1), which is within ALPHA (relative) of every value in it. A
# quantile is the bucket of the nearest-rank value (rank ceil(q n)), so it is within ALPHA of
# that exact value. Counts are integers: histograms merge by summing, in any order, so one pass
# over the rows serves every coarser table, and any partitioning (local[*], any cluster) gives
# the same tables to the last bit.
ALPHA = 0.01
GAMMA = (1 + ALPHA) / (1 - ALPHA)
FINE_KEYS = ("window_start", "broker", "api", "kind", "client_id", "replica_id", "acks")
COARSE_KEYS = ("window_start", "broker", "api", "kind", "replica_id", "acks")  # FINE_KEYS but the client
OUTCOMES = tuple(o.value for o in Outcome)  # the order encodes outcome as a number in the one pass
STATS = ("requests", "records", *OUTCOMES, "with_records", "wait_sum_ns", "total_sum_ns")


def window_us(window: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", window)
    if not m or int(m.group(1)) == 0:
        raise ValueError(f"window '{window}': write a number and a unit, e.g. 30s, 1m, 5m, 1h")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)] * 1_000_000


def in_range(df: DataFrame, since_ns: int | None, until_ns: int | None) -> DataFrame:
    if since_ns is not None:
        df = df.where(F.col("ts_ns") >= since_ns)
    if until_ns is not None:
        df = df.where(F.col("ts_ns") < until_ns)
    return df


def with_window(df: DataFrame, window: str) -> DataFrame:
    """``window_start``: the start of the epoch-aligned window holding ``ts_ns`` (UTC)."""
    us = window_us(window)
    return df.withColumn("window_start", F.timestamp_micros(F.floor(F.col("ts_ns") / (us * 1000)).cast("long") * us))


FETCH_APIS = ("Fetch", "ShareFetch")


def timed(exchanges: DataFrame) -> DataFrame:
    """The exchanges the latency tables read: fetches (a ShareFetch is a fetch of kind share)
    and produces with a duration."""
    return exchanges.where(F.col("api").isin(*FETCH_APIS, "Produce") & F.col("total_ns").isNotNull())


ORDER = {
    "latency_by_window": ("window_start", "broker", "kind", "client_id"),
    "summary": ("broker", "kind"),
    "outcome_mix": ("window_start", "broker", "kind"),
    "pair_latency": ("leader", "follower", "window_start"),
    "record_latency": ("topic", "partition", "client_id"),
    "produce_latency": ("broker", "acks"),
    "replication_latency": ("broker", "follower"),
    "timeline": ("window_start", "kind"),
    "broker_timeline": ("window_start", "broker", "kind"),
}


def bucket(ns: Column) -> Column:
    """The histogram bucket of a duration in ns (null stays null: it counts nowhere)."""
    k = F.ceil(F.ln(F.abs(ns)) / math.log(GAMMA)) + 1
    return F.when(ns > 0, k).when(ns < 0, -k).when(ns == 0, 0).cast("int")


def _rank(n: Column, per_mille: int) -> Column:
    """The nearest rank, ceil(n q), in integers (a double q n can land just above a whole number)."""
    return F.greatest(F.lit(1), F.floor((n.cast("long") * per_mille + 999) / 1000))  # long: a fleet's n > 2^31


def sorted_lists(df: DataFrame, cols: list[str]) -> DataFrame:
    """``df`` with each of ``cols`` (arrays of buckets) sorted, once: a later select that reads
    a sorted list several times must not sort it again each time (Spark keeps a projection
    apart when inlining it would repeat an expensive expression). ``sort_array``, not
    ``array_sort``: the latter compares through a lambda, uncompiled, 5x slower."""
    return df.select(*[F.sort_array(c).alias(c) if c in cols else c for c in df.columns])


def list_quantile_buckets(s: Column, offset: int = 0) -> dict[str, Column]:
    """The buckets of the PER_MILLE quantiles of a sorted array of buckets (each stored as bucket +
    ``offset``), one per value (null when empty), by QNAMES. What a bucket stands for in ms is the
    driver's to say (``finish.bucket_ms``): one rule for every table, where Spark's ``pow`` and
    numpy's differ in the last bit for one bucket in ten."""
    return {name: (F.try_element_at(s, _rank(F.size(s), q).cast("int")) - offset).cast("short")
            for q, name in zip(PER_MILLE, QNAMES, strict=True)}


STAT_COLS = (*STATS, "total_max_ns")
# In the per-client lists a bucket is stored with its part in the bits above it: bucket +
# PART_OFFSET[part]. A part's sorted list reads as sorted buckets (``list_quantile_buckets`` takes
# the offset off), and the four lists concatenated and exploded name their part without a
# lambda per element (Spark evaluates a lambda per element, uncompiled: seconds at 10 M rows).
# |bucket| <= 2 186 for any duration a long holds.
BUCKET_BITS = 15
PART_OFFSET = tuple((1 << (BUCKET_BITS - 1)) + (i << BUCKET_BITS) for i in range(len(PARTS)))
BUCKET_MASK = (1 << BUCKET_BITS) - 1


def fine(timed_df: DataFrame) -> DataFrame:
    """The one pass over the rows: per window x broker x api x kind x client x replica x acks,
    the counts, outcome counts and sums (STATS, ``total_max_ns``) and, per duration, the list of
    its buckets (``{part}_b``, stored + PART_OFFSET: a group holds a client's fetches of one
    window, a few hundred). Produces are kept per broker x acks only (no client key: nothing
    reports them per client).

    ``api`` goes in as a boolean and ``outcome`` as a small number: the strings copied and
    hashed per row are only the ones that have to be (broker, kind, client)."""
    is_fetch = F.col("api").isin(*FETCH_APIS)  # the kind column keeps a share fetch apart
    outcome = F.coalesce(*[F.when(F.col("outcome") == o, F.lit(i)) for i, o in enumerate(OUTCOMES)]).cast("byte")
    rows = timed_df.select("window_start", "broker", is_fetch.alias("_fetch"), "kind",
                           F.when(is_fetch, F.col("client_id")).alias("client_id"), "replica_id", "acks", "records",
                           outcome.alias("_outcome"), "wait_ns", "total_ns",
                           *[(bucket(F.col(f"{p}_ns")) + PART_OFFSET[i]).alias(f"{p}_b") for i, p in enumerate(PARTS)])
    g = rows.groupBy("window_start", "broker", "_fetch", "kind", "client_id", "replica_id", "acks").agg(
        F.count(F.lit(1)).alias("requests"), F.sum("records").alias("records"),
        *[F.sum(F.when(F.col("_outcome") == i, 1).otherwise(0)).alias(o) for i, o in enumerate(OUTCOMES)],
        F.sum(F.when(F.col("records") > 0, 1).otherwise(0)).alias("with_records"),
        F.sum("wait_ns").alias("wait_sum_ns"), F.sum("total_ns").alias("total_sum_ns"),
        F.max("total_ns").alias("total_max_ns"),
        *[F.collect_list(f"{p}_b").alias(f"{p}_b") for p in PARTS])  # nulls count nowhere
    api = F.when(F.col("_fetch"), F.lit("Fetch")).otherwise(F.lit("Produce")).alias("api")
    rest = [c for c in g.columns if c not in ("window_start", "broker", "_fetch")]
    return g.select("window_start", "broker", api, *rest)


STATS_PART = -1  # a histogram table's row of part -1 carries its group's STAT_COLS (bucket, n null)


def without_clients(fine_df: DataFrame) -> DataFrame:
    """``fine`` as histograms merged over clients: per window x broker x api x kind x replica x
    acks x part x bucket the count ``n``, and per window x ... x acks a STATS_PART row of sums.
    What every per-broker table reads instead of the per-client rows.

    The count runs on one long per (group, part, bucket): each group of COARSE_KEYS gets a
    number (``row_number`` in the keys' order: the same on any partitioning), so the tens of
    millions of (part, bucket) items are counted by a hash of one long, not of the group's
    strings; the keys come back by the number."""
    keys = list(COARSE_KEYS)
    stats = fine_df.groupBy(*keys).agg(*[F.sum(c).alias(c) for c in STATS], F.max("total_max_ns").alias("total_max_ns"))
    ids = stats.select(*keys, F.row_number().over(Window.orderBy(*keys)).cast("long").alias("_gid"))
    tagged = fine_df.join(F.broadcast(ids), [fine_df[k].eqNullSafe(ids[k]) for k in keys])
    items = tagged.select("_gid", F.explode(F.concat(*[f"{p}_b" for p in PARTS])).alias("_v"))
    shift = BUCKET_BITS + 2  # a key is gid | part (2 bits) | stored bucket (BUCKET_BITS)
    counts = (items.select((F.shiftleft("_gid", shift) + F.col("_v")).alias("_k"))
              .groupBy("_k").agg(F.count(F.lit(1)).alias("n")))
    counts = counts.select(F.shiftright("_k", shift).alias("_gid"),
                           F.shiftright("_k", BUCKET_BITS).bitwiseAND(3).cast("int").alias("part"),
                           (F.col("_k").bitwiseAND(BUCKET_MASK) - PART_OFFSET[0]).cast("int").alias("bucket"), "n")
    counts = counts.join(F.broadcast(ids), "_gid").select(
        *keys, "part", "bucket", "n", *[F.lit(None).cast("long").alias(c) for c in STAT_COLS])
    nulls = [F.lit(None).cast("int").alias("bucket"), F.lit(None).cast("long").alias("n")]
    return stats.select(*keys, F.lit(STATS_PART).alias("part"), *nulls, *STAT_COLS).unionByName(counts)


def _fetches(df: DataFrame) -> DataFrame:
    return df.where(F.col("api") == "Fetch")


def latency_by_window(fine_df: DataFrame) -> DataFrame:
    """Per window x broker x kind x client (and replica, for followers): count and the buckets of
    p50/p90/p99/p99.9 of each duration (``finish.latency_by_window`` states them in ms)."""
    lists = [f"{p}_b" for p in PARTS]
    return sorted_lists(_fetches(fine_df), lists).select(
        "window_start", "broker", "kind", "client_id", "replica_id", F.col("requests").alias("fetches"),
        *[q.alias(f"{p}_{name}") for i, p in enumerate(PARTS)
          for name, q in list_quantile_buckets(F.col(f"{p}_b"), PART_OFFSET[i]).items()])


# Every per-hour product (``analysis/state.py``) carries its hour: epoch hours, UTC, in integers
# (a double division of ts_ns could put a row a few hundred ns from the hour in the wrong one).
HOUR_NS = 3_600_000_000_000


def hour_of_ts() -> Column:
    return F.expr(f"ts_ns div {HOUR_NS}")


def hour_of_window() -> Column:
    return F.expr(f"unix_micros(window_start) div {HOUR_NS // 1000}")


def duration_state(rows: DataFrame, keys: list[str], ns: Column, sla_ns: float | None = None) -> DataFrame:
    """One duration ``ns`` per ``keys`` x hour: ``samples``, the list of its buckets (``_b``),
    its max, min and sum, and (with ``sla_ns``) how many were over it. States of any hours merge
    (``duration_table``)."""
    sla = [F.sum(F.when(ns > sla_ns, 1).otherwise(0)).alias("sla")] if sla_ns is not None else []
    return rows.where(ns.isNotNull()).groupBy(*keys, hour_of_ts().alias("hour")).agg(
        F.count(F.lit(1)).alias("samples"), F.collect_list(bucket(ns)).alias("_b"), F.max(ns).alias("max_ns"),
        F.min(ns).alias("min_ns"), F.sum(ns).alias("sum_ns"), *sla)


RECORD_KEYS = ["topic", "partition", "client_id"]
REPLICATION_KEYS = ["broker", "follower"]


def record_state(partitions: DataFrame, sla_ms: float) -> DataFrame:
    p = partitions.where(F.col("api").isin(*FETCH_APIS))
    return duration_state(p, RECORD_KEYS, F.col("record_latency_ns"), sla_ms * 1e6)


def replication_state(replication: DataFrame) -> DataFrame:
    return duration_state(replication, REPLICATION_KEYS, F.col("latency_ns"))


def client_histogram(fine_df: DataFrame) -> DataFrame:
    """Per client x kind x hour: the count ``n`` of each stored true-local bucket (``bucket``),
    and a row with a null bucket whose ``n`` is the client's fetches. Hours merge by summing."""
    f = _fetches(fine_df).select("client_id", "kind", hour_of_window().alias("hour"), "requests", "local_b")
    keys = ["client_id", "kind", "hour"]
    counts = (f.select(*keys, F.explode("local_b").alias("bucket"))
              .groupBy(*keys, "bucket").agg(F.count(F.lit(1)).alias("n")))
    fetches = f.groupBy(*keys).agg(F.sum("requests").alias("n")).select(*keys, F.lit(None).cast("int").alias("bucket"),
                                                                          "n")
    return fetches.unionByName(counts)


def products(fine_df: DataFrame, brokers: DataFrame, partitions: DataFrame, replication: DataFrame,
             sla_ms: float) -> dict[str, DataFrame]:
    """What Spark hands the driver, each with its hour: latency by window as it is (a window lies in
    one hour), the histograms merged over clients (``brokers``: ``without_clients(fine_df)``, which
    the driver turns into the other per-window tables and the hourly histograms: ``finish.py``),
    the per-client true-local histograms, and the record-latency and replication states."""
    return {
        "latency_by_window": latency_by_window(fine_df).withColumn("hour", hour_of_window()),
        "brokers": brokers.withColumn("hour", hour_of_window()),
        "clients": client_histogram(fine_df),
        "records": record_state(partitions, sla_ms),
        "replication": replication_state(replication),
    }
