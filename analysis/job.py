"""``fetchlat analyze``: the only module with I/O. Builds the session, reads traces from one
or more proxies (local paths or any URI Spark's Hadoop layer reads: s3a://, hdfs://), chains
the transforms, writes every table as Parquet under ``tables/``, ``summary.json`` and a
self-contained ``report.html``."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Callable
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from . import report
from . import transforms as tf
from .schema import SCHEMA_VERSION, spark_schema

Progress = Callable[[str], None]


def build_session(master: str | None) -> SparkSession:
    b = SparkSession.builder.appName("fetchlat-analyze")
    if master:
        b = b.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # under spark-submit, the master comes from there
        b = b.master("local[*]")
    # a local driver is also the executor: give it room (spark-submit sets its own)
    b = b.config("spark.driver.memory", os.environ.get("FETCHLAT_SPARK_DRIVER_MEMORY", "4g"))
    spark = (b.config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.showConsoleProgress", "false")
             # percentile_approx is an object-hash aggregate; past 128 groups Spark falls back to
             # sorting, which made per-window x client tables ~10x slower
             .config("spark.sql.objectHashAggregate.sortBased.fallbackThreshold", "1000000")
             .config("spark.sql.shuffle.partitions", os.environ.get("FETCHLAT_SHUFFLE_PARTITIONS", "8"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def read_table(spark: SparkSession, dirs: list[str], table: str) -> DataFrame:
    paths = [f"{d.rstrip('/')}/{table}" for d in dirs]
    paths = [p for p in paths if not _is_local(p) or os.path.isdir(p.removeprefix("file://"))]
    schema = spark_schema(table)
    if not paths:
        return spark.createDataFrame([], schema)
    try:  # dot files (.tmp-*, still being written) are hidden from Hadoop readers
        return spark.read.schema(schema).option("recursiveFileLookup", "true").parquet(*paths)
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc):
            return spark.createDataFrame([], schema)
        raise


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    out = []
    for r in df.collect():
        d = r.asDict()
        for k, v in d.items():
            if isinstance(v, dt.datetime):
                d[k] = v.replace(tzinfo=dt.UTC).isoformat()
        out.append(d)
    return out


def run(dirs: list[str], out: str, *, master: str | None = None, since_ns: int | None = None,
        until_ns: int | None = None, window: str = "1m", sla_ms: float = 5000.0, top_n: int = 10,
        spark: SparkSession | None = None, progress: Progress = lambda s: None) -> dict[str, Any]:
    t0 = time.monotonic()
    tf.spark_interval(window)  # fail early on a bad window
    own = spark is None
    progress("starting Spark")
    spark = spark or build_session(master)
    try:
        progress("reading traces")
        ex = tf.in_range(read_table(spark, dirs, "exchanges"), since_ns, until_ns).cache()
        parts = tf.in_range(read_table(spark, dirs, "partitions"), since_ns, until_ns)
        repl = tf.in_range(read_table(spark, dirs, "replication"), since_ns, until_ns)
        fetch_df = tf.with_window(tf.fetches(ex), window).cache()
        rec = tf.record_latency(parts, sla_ms).cache()
        pairs = tf.flag_shifts(tf.pair_latency(fetch_df)).cache()
        tables: dict[str, DataFrame] = {
            "latency_by_window": tf.latency_by_window(fetch_df),
            "summary": tf.summary(fetch_df),
            "outcome_mix": tf.outcome_mix(fetch_df),
            "pair_latency": pairs,
            "record_latency": rec,
            "produce_latency": tf.produce_latency(ex),
            "replication_latency": tf.replication_latency(repl),
            "slowest_clients": tf.slowest_clients(fetch_df, top_n),
            "slowest_partitions": tf.slowest_partitions(rec, top_n),
            "timeline": tf.timeline(fetch_df),
        }
        collected: dict[str, list[dict[str, Any]]] = {}
        for name, df in tables.items():
            progress(f"computing {name.replace('_', ' ')}")
            path = os.path.join(out, "tables", name)
            df.repartition(1).write.mode("overwrite").parquet(path)  # coalesce(1) would serialise the aggregation
            if name != "latency_by_window":  # small: read back what was written instead of computing it again
                collected[name] = _rows(spark.read.parquet(path).orderBy(*df.columns[:3]))
        rows_in = ex.count()
        progress("writing the report")
        summary = _summary(collected, dirs, window, sla_ms, rows_in, time.monotonic() - t0)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "summary.json"), "w") as fh:
            json.dump(summary, fh, indent=2, default=str)
        with open(os.path.join(out, "report.html"), "w") as fh:
            fh.write(report.render(summary, collected))
        return summary
    finally:
        if own:
            spark.stop()


def _summary(c: dict[str, list[dict[str, Any]]], dirs: list[str], window: str, sla_ms: float, rows: int,
             seconds: float) -> dict[str, Any]:
    headline = []
    for r in c["summary"]:
        entry: dict[str, Any] = {"broker": r["broker"], "kind": r["kind"], "fetches": r["fetches"]}
        for part in tf.PARTS:
            entry[f"{part}_ms"] = {q: r[f"{part}_{q}"] for q in tf.QNAMES}
        headline.append(entry)
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": dt.datetime.now(dt.UTC).isoformat(),
        "inputs": dirs, "window": window, "record_latency_sla_ms": sla_ms,
        "exchanges_read": rows, "seconds": round(seconds, 1),
        "brokers": headline,
        "flagged_pairs": [{k: r[k] for k in ("leader", "follower", "window_start", "local_p50", "baseline_ms",
                                             "shift_ms")} for r in c["pair_latency"] if r["flagged"]],
        "sla_breaches": sum(r["sla_breaches"] for r in c["record_latency"]),
    }
