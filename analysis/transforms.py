"""Pure transforms of trace DataFrames: no session, paths or configuration; built-in Spark
SQL functions only (no Python UDFs on the data path). Durations come out in milliseconds.
Tables come out unordered (a global sort is a pass of its own); the job orders the small
results it writes (``ORDER``)."""

from __future__ import annotations

import math
import re

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .tables import (
    BUCKET_BITS,
    FETCH_APIS,
    GAMMA,
    HOUR_NS,
    OUTCOMES,
    PARTS,
    RECORD_KEYS,
    REPLICATION_KEYS,
    STORED,
)


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


def timed(exchanges: DataFrame) -> DataFrame:
    """The exchanges the latency tables read: fetches (a ShareFetch is a fetch of kind share)
    and produces with a duration."""
    return exchanges.where(F.col("api").isin(*FETCH_APIS, "Produce") & F.col("total_ns").isNotNull())


def bucket(ns: Column) -> Column:
    """The histogram bucket of a duration in ns (null stays null: it counts nowhere)."""
    k = F.ceil(F.ln(F.abs(ns)) / math.log(GAMMA)) + 1
    return F.when(ns > 0, k).when(ns < 0, -k).when(ns == 0, 0).cast("int")


def packed_buckets() -> Column:
    """A row's buckets of PARTS as one long (``finish.unpack`` reads a part back)."""
    out = F.lit(0).cast("long")
    for i, p in enumerate(PARTS):
        stored = F.coalesce((bucket(F.col(f"{p}_ns")) + STORED).cast("long"), F.lit(0).cast("long"))
        out = out + F.shiftleft(stored, BUCKET_BITS * i)
    return out


def fine(timed_df: DataFrame) -> DataFrame:
    """The one pass over the rows: per window x broker x api x kind x client x replica x acks,
    the counts, outcome counts and sums (STATS, ``total_max_ns``) and the list of the rows'
    buckets (``_v``, each row's four as one long: ``packed_buckets``; a group holds a client's
    fetches of one window, a few hundred). Produces are kept per broker x acks only (no client
    key: nothing reports them per client). The driver reads the lists (``finish.from_fine``).

    ``api`` goes in as a boolean and ``outcome`` as a small number: the strings copied and
    hashed per row are only the ones that have to be (broker, kind, client)."""
    is_fetch = F.col("api").isin(*FETCH_APIS)  # the kind column keeps a share fetch apart
    outcome = F.coalesce(*[F.when(F.col("outcome") == o, F.lit(i)) for i, o in enumerate(OUTCOMES)]).cast("byte")
    rows = timed_df.select("window_start", "broker", is_fetch.alias("_fetch"), "kind",
                           F.when(is_fetch, F.col("client_id")).alias("client_id"), "replica_id", "acks", "records",
                           outcome.alias("_outcome"), "wait_ns", "total_ns", packed_buckets().alias("_v"))
    g = rows.groupBy("window_start", "broker", "_fetch", "kind", "client_id", "replica_id", "acks").agg(
        F.count(F.lit(1)).alias("requests"), F.sum("records").alias("records"),
        *[F.sum(F.when(F.col("_outcome") == i, 1).otherwise(0)).alias(o) for i, o in enumerate(OUTCOMES)],
        F.sum(F.when(F.col("records") > 0, 1).otherwise(0)).alias("with_records"),
        F.sum("wait_ns").alias("wait_sum_ns"), F.sum("total_ns").alias("total_sum_ns"),
        F.max("total_ns").alias("total_max_ns"), F.collect_list("_v").alias("_v"))
    api = F.when(F.col("_fetch"), F.lit("Fetch")).otherwise(F.lit("Produce")).alias("api")
    rest = [c for c in g.columns if c not in ("window_start", "broker", "_fetch")]
    return g.select("window_start", "broker", api, *rest)


def hour_of_ts() -> Column:
    return F.expr(f"ts_ns div {HOUR_NS}")


def duration_state(rows: DataFrame, keys: list[str], ns: Column, sla_ns: float | None = None) -> DataFrame:
    """One duration ``ns`` per ``keys`` x hour: ``samples``, the list of its buckets (``_b``),
    its max, min and sum, and (with ``sla_ns``) how many were over it. States of any hours merge
    (``duration_table``)."""
    sla = [F.sum(F.when(ns > sla_ns, 1).otherwise(0)).alias("sla")] if sla_ns is not None else []
    return rows.where(ns.isNotNull()).groupBy(*keys, hour_of_ts().alias("hour")).agg(
        F.count(F.lit(1)).alias("samples"), F.collect_list(bucket(ns)).alias("_b"), F.max(ns).alias("max_ns"),
        F.min(ns).alias("min_ns"), F.sum(ns).alias("sum_ns"), *sla)


def record_state(partitions: DataFrame, sla_ms: float) -> DataFrame:
    p = partitions.where(F.col("api").isin(*FETCH_APIS))
    return duration_state(p, RECORD_KEYS, F.col("record_latency_ns"), sla_ms * 1e6)


def replication_state(replication: DataFrame) -> DataFrame:
    return duration_state(replication, REPLICATION_KEYS, F.col("latency_ns"))
