"""``fetchlat analyze``, one run: builds the session, reads traces from one or more proxies
(local paths or any URI Spark's Hadoop layer reads: s3a://, hdfs://), chains the transforms,
writes every table as Parquet under ``tables/``, ``summary.json`` and a self-contained
``report.html``. It does the run's I/O with ``state.py``, which reads and writes the kept
per-hour products and lists the trace files; ``transforms``, ``finish``, ``tables`` and
``report`` do none."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..metrics import trace_layout as layout
from . import finish, report, state
from . import tables as tb
from . import transforms as tf
from .schema import SCHEMA_VERSION, spark_schema

Progress = Callable[[float, str], None]  # (share of the run done, 0..1; what it is doing)
# How a run's time splits, in percent (measured on 25 hours, 12.5 M generated rows, local[*]): what turns the
# steps into a share done, and so into an estimate of the time left.
WEIGHTS = {"start": 4, "read": 4, "pass": 48, "products": 34, "keep": 2, "tables": 5, "report": 3}
JAVA_OPTIONS = "-XX:+UseParallelGC"  # local mode's driver JVM (FETCHLAT_SPARK_JAVA_OPTIONS overrides)


def build_session(master: str | None) -> SparkSession:
    b = SparkSession.builder.appName("fetchlat-analyze")
    if master:
        b = b.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # under spark-submit, the master comes from there
        b = b.master("local[*]")
    # a local driver is also the executor: give it room (spark-submit sets its own)
    b = b.config("spark.driver.memory", os.environ.get("FETCHLAT_SPARK_DRIVER_MEMORY", "4g"))
    if master is None or master.startswith("local"):
        # the throughput collector (measured with the KLL sketches this job used before: G1 spent ~20% in GC)
        b = b.config("spark.driver.extraJavaOptions", os.environ.get("FETCHLAT_SPARK_JAVA_OPTIONS", JAVA_OPTIONS))
    spark = (b.config("spark.sql.session.timeZone", "UTC")
             .config("spark.ui.showConsoleProgress", "false")
             # collect_list (a histogram's buckets) is an object-hash aggregate; past 128 groups
             # Spark falls back to sorting, which made per-window x client tables ~10x slower
             .config("spark.sql.objectHashAggregate.sortBased.fallbackThreshold", "1000000")
             .config("spark.sql.shuffle.partitions", os.environ.get("FETCHLAT_SHUFFLE_PARTITIONS", "8"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def table_inputs(spark: SparkSession, dirs: list[str], table: str, since_ns: int | None = None,
                 until_ns: int | None = None) -> tuple[list[str], int]:
    """What to read of ``table`` under each trace directory, through Hadoop's filesystem layer
    (local, s3a://, hdfs://): the hour directories (``metrics/trace_layout.py``) that overlap
    [since, until), and the files of the layout before hour directories. Returns those paths
    and how many hour directories there were in all (the rest were pruned)."""
    paths: list[str] = []
    hours_seen = 0
    for d in dirs:
        base = f"{d.rstrip('/')}/{table}"
        fs, Path = state.hadoop_fs(spark, base)
        if not fs.exists(Path(base)):
            continue
        for st in fs.globStatus(Path(f"{base}/date=*/hour=*")) or []:
            hour = layout.hour_of_dir(st.getPath().toString())
            if hour is None or not st.isDirectory():
                continue
            hours_seen += 1
            if layout.hours_overlap(hour, since_ns, until_ns):
                paths.append(st.getPath().toString())
        for st in fs.listStatus(Path(base)):  # the flat layout; dot files (.tmp-*) are still being written
            name = st.getPath().getName()
            if st.isFile() and name.endswith(".parquet") and not name.startswith((".", "_")):
                paths.append(st.getPath().toString())
    return paths, hours_seen


def _bytes(spark: SparkSession, path: str) -> int:
    fs, Path = state.hadoop_fs(spark, path)
    return int(fs.getContentSummary(Path(path)).getLength())


BYTES_PER_REDUCE_TASK = 50 * 2**20  # 100 M rows (3.3 GB) -> 64 tasks: the setting measured (docs/analysis.md)


def shuffle_partitions(spark: SparkSession, seen: dict[str, Any]) -> int:
    """Reduce tasks for this input, unless FETCHLAT_SHUFFLE_PARTITIONS says: one per 50 MiB of the
    exchanges and partitions read, at least one per core Spark has. A reduce task holds its
    groups' bucket lists in memory, so their count has to grow with the input; below that, more
    tasks than cores only cost (an hour's re-run under --every: 16-18 s with 8 on two cores,
    13.6-15.3 s with 2)."""
    if "FETCHLAT_SHUFFLE_PARTITIONS" in os.environ:
        return int(spark.conf.get("spark.sql.shuffle.partitions") or 8)
    size = sum(int(seen[t]["bytes"]) for t in ("exchanges", "partitions") if t in seen)
    n: int = max(spark.sparkContext.defaultParallelism, -(-size // BYTES_PER_REDUCE_TASK))
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    return n


def read_table(spark: SparkSession, dirs: list[str], table: str, since_ns: int | None = None,
               until_ns: int | None = None, seen: dict[str, Any] | None = None,
               inputs: tuple[list[str], int] | None = None) -> DataFrame:
    """``table``'s rows in [since, until) from every trace directory (or from ``inputs``, as
    ``table_inputs`` gives them), with the writer's schema (a file of an older schema version
    reads its missing columns as null). ``seen`` gets, per table, how many hour directories
    were read of how many there are."""
    paths, hours = inputs or table_inputs(spark, dirs, table, since_ns, until_ns)
    schema = spark_schema(table)
    if seen is not None:
        seen[table] = {"read": sum(1 for p in paths if layout.hour_of_dir(p) is not None), "in_all": hours,
                       "flat_files": sum(1 for p in paths if p.endswith(".parquet")),
                       "bytes": sum(_bytes(spark, p) for p in paths)}
    if not paths:
        return spark.createDataFrame([], schema)
    # dot files (.tmp-*, still being written) inside a directory are hidden from Hadoop readers
    df = spark.read.schema(schema).option("recursiveFileLookup", "true").parquet(*paths)
    return tf.in_range(df, since_ns, until_ns)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    """A table as rows for the report, times as ISO 8601 strings in UTC (each distinct time
    formatted once: a day of windows is 1 440 times over tens of thousands of rows)."""
    for i, name in enumerate(table.column_names):
        col = table[name].combine_chunks()
        if pa.types.is_timestamp(col.type):
            enc = pc.dictionary_encode(col)
            text = pa.array([None if v is None else (v.astimezone(dt.UTC) if v.tzinfo else v.replace(tzinfo=dt.UTC))
                             .isoformat() for v in enc.dictionary.to_pylist()], pa.string())
            table = table.set_column(i, name, pc.take(text, enc.indices))
    out: list[dict[str, Any]] = table.to_pylist()
    return out


def write_table(table: pa.Table, path: str, order: tuple[str, ...] = ()) -> pa.Table:
    """A finished table, ordered by ``order``, as one Parquet file that replaces the directory's
    old one whole."""
    if order:
        table = table.sort_by([(k, "ascending") for k in order])
    new, old = _beside(path, "new"), _beside(path, "old")
    for d in (new, old):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(new)
    pq.write_table(table, os.path.join(new, "part-00000.parquet"), compression="zstd")
    if os.path.exists(path):  # a reader of the report directory (``--every``) sees one whole table or the other
        os.rename(path, old)
    os.rename(new, path)
    shutil.rmtree(old, ignore_errors=True)
    return table


def _beside(path: str, what: str) -> str:
    """A hidden name beside ``path``: ``.name-what``."""
    head, name = os.path.split(path.rstrip("/"))
    return os.path.join(head, f".{name}-{what}")


def write_whole(path: str, text: str) -> None:
    """``text`` to ``path``, replacing it in one rename: a reader never sees half a file."""
    tmp = _beside(path, "new")
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


class _Steps:
    """Reports progress: the steps' weights done so far, plus the running step's share of the
    tasks its Spark stages have finished (polled twice a second)."""

    def __init__(self, report: Progress) -> None:
        self.report = report
        self.done = 0.0
        self.key = ""
        self.what = ""
        self.spark: SparkSession | None = None
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="fetchlat-progress", daemon=True)

    def step(self, key: str, what: str) -> None:
        """Start step ``key`` (WEIGHTS; "" the end: 100 %, whichever steps a run skipped)."""
        self.done = self.done + WEIGHTS.get(self.key, 0) if key else 100
        self.key, self.what = key, what
        self.report(self.done / 100, what)

    def start_polling(self, spark: SparkSession) -> None:
        self.spark = spark
        self._poller.start()

    def close(self) -> None:
        self._stop.set()
        if self._poller.is_alive():
            self._poller.join(2)

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            try:
                tracker = self.spark.sparkContext.statusTracker() if self.spark else None
                stages = [tracker.getStageInfo(i) for i in tracker.getActiveStageIds()] if tracker else []
            except Exception:
                return
            running = [(st.numCompletedTasks, st.numTasks) for st in stages if st is not None and st.numTasks > 0]
            if not running:
                continue
            finished, total = sum(f for f, _ in running), sum(n for _, n in running)
            share = WEIGHTS.get(self.key, 0) * min(0.95, finished / total)
            self.report((self.done + share) / 100, f"{self.what} · Spark tasks {finished}/{total}")


def run(dirs: list[str], out: str, *, master: str | None = None, since_ns: int | None = None,
        until_ns: int | None = None, window: str = "1m", sla_ms: float = 5000.0, top_n: int = 10,
        spark: SparkSession | None = None, progress: Progress = lambda done, what: None,
        state_dir: str | None = None) -> dict[str, Any]:
    """Every table, summary.json and report.html under ``out``. ``state_dir``: where the per-hour
    products are kept and reused (``analysis/state.py``; None: computed afresh, kept nowhere)."""
    t0 = time.monotonic()
    tf.window_us(window)  # fail early on a bad window
    own = spark is None
    steps = _Steps(progress)
    steps.step("start", "starting Spark")
    spark = spark or build_session(master)
    steps.start_polling(spark)
    kept_in_memory: list[DataFrame] = []

    def held(df: DataFrame) -> DataFrame:
        """``df`` kept in memory (and on disk) for the tables that read it, until the run ends: a
        later run in the same session must read its own files, not this run's cached results
        (Spark matches a cached DataFrame by its plan, which names the same paths)."""
        kept_in_memory.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return df

    try:
        steps.step("read", "listing traces")
        inputs = {t: table_inputs(spark, dirs, t, since_ns, until_ns) for t in TRACE_TABLES}
        plan = _plan(spark, dirs, inputs, state_dir, window, sla_ms, since_ns, until_ns)
        unread = set(plan.reused)  # hours whose products come from the state
        to_read = {t: [p for p in inputs[t][0] if layout.hour_of_dir(p) not in unread] for t in TRACE_TABLES}
        seen: dict[str, Any] = {}
        ex, parts, repl = (read_table(spark, dirs, t, seen=seen, since_ns=since_ns, until_ns=until_ns,
                                      inputs=(to_read[t], inputs[t][1])) for t in TRACE_TABLES)
        hours = seen["exchanges"]
        reduce_tasks = shuffle_partitions(spark, seen)
        where = (f"{hours['read']} of {hours['in_all']} hour directories in range" if hours["in_all"]
                 else f"{hours['flat_files']} files")
        if plan.reused:
            where += f", {len(plan.reused)} hour(s) from the state"
        steps.step("pass", f"one pass over the exchanges ({where}, {reduce_tasks} reduce tasks): counts and "
                           "histograms per window x broker x kind x client")
        traces = any(to_read.values()) or not plan.reused  # nothing to read and nothing kept: empty products
        products, per_hour = _products(plan, (ex, parts, repl) if traces else None, window, sla_ms, held, steps)
        steps.step("tables", "finishing the tables")
        tables = finish.tables(products, top_n)
        collected: dict[str, list[dict[str, Any]]] = {}
        for name, table in tables.items():
            order = () if name == IN_ORDER else tb.ORDER.get(name, ())
            table = write_table(table, os.path.join(out, "tables", name), order)
            if name != "latency_by_window":  # the report reads the small ones
                collected[name] = _rows(table)
        rows_in = (ex.count() if per_hour is None and traces else sum((per_hour or {}).values())) + sum(
            int(e.get("exchanges", 0)) for e in plan.reused.values())
        steps.step("report", "writing the report")
        summary = _summary(collected, dirs, window, sla_ms, rows_in, time.monotonic() - t0)
        summary["hour_directories"] = seen
        summary["state"] = {"dir": plan.state_dir, "hours_reused": len(plan.reused), "hours_kept": len(plan.fresh),
                            "not_kept_because": plan.why_not or None}
        os.makedirs(out, exist_ok=True)
        write_whole(os.path.join(out, "summary.json"), json.dumps(summary, indent=2, default=str))
        write_whole(os.path.join(out, "report.html"), report.render(summary, collected))
        steps.step("", "done")
        return summary
    finally:
        steps.close()
        for df in kept_in_memory:
            df.unpersist()
        if own:
            spark.stop()


TRACE_TABLES = ("exchanges", "partitions", "replication")


def _plan(spark: SparkSession, dirs: list[str], inputs: dict[str, tuple[list[str], int]], state_dir: str | None,
          window: str, sla_ms: float, since_ns: int | None, until_ns: int | None) -> state.Plan:
    hour_dirs: dict[int, list[str]] = {}
    flat = 0
    for paths, _ in inputs.values():
        for p in paths:
            h = layout.hour_of_dir(p)
            if h is None:
                flat += 1
            else:
                hour_dirs.setdefault(h, []).append(p)
    key = {"state_version": state.STATE_VERSION, "schema_version": SCHEMA_VERSION, "window": window,
           "sla_ms": sla_ms, "inputs": sorted(dirs)}
    return state.plan(spark, state_dir, key, hour_dirs, flat, since_ns, until_ns, tf.window_us(window))


def _products(plan: state.Plan, traces: tuple[DataFrame, DataFrame, DataFrame] | None, window: str, sla_ms: float,
              held: Callable[[DataFrame], DataFrame], steps: _Steps
              ) -> tuple[dict[str, pa.Table], dict[int, int] | None]:
    """What the tables are finished from (``finish.py``), each with its hour, as one Arrow table
    per product: made from the traces read (Spark's one pass over the exchanges, its lists read by
    the driver a few windows at a time, then the record-latency and replication states), kept for
    the hours the plan keeps, and joined by the kept products of the hours it reuses (read by the
    driver: no Spark job). With them: the exchanges read per hour, when they were counted (to keep
    them). ``traces``: the exchanges, partitions and replication rows to read (None: every hour
    comes from the state)."""
    computed: dict[str, pa.Table] = {}
    per_hour = None
    if traces is not None:
        ex, parts, repl = traces
        fine = held(tf.fine(tf.with_window(tf.timed(ex), window)))
        sizes = _window_sizes(fine)  # the one pass over the exchanges; the driver reads its lists
        steps.step("products", "computing the per-hour products")
        made = [finish.from_fine(chunk) for chunk in _fine_chunks(fine, sizes)]
        computed = {name: finish.concat([m[name] for m in made]) for name in made[0]}
        computed[IN_ORDER] = computed[IN_ORDER].sort_by([(k, "ascending") for k in tb.ORDER[IN_ORDER]])
        computed["records"] = tf.record_state(parts, sla_ms).toArrow()
        computed["replication"] = tf.replication_state(repl).toArrow()
        if plan.keeps and plan.fresh:
            steps.step("keep", "keeping the new hours in the state")
            per_hour = {int(r[0]): int(r[1]) for r in ex.groupBy(tf.hour_of_ts()).count().collect()}
            state.keep(plan, computed, per_hour)
    kept = state.read_products(plan) if plan.reused else {}
    pieces = {name: ([computed[name]] if name in computed else []) + kept.get(name, []) for name in state.PRODUCTS}
    if IN_ORDER in computed:  # each hour a piece of its own: the hours computed now may lie between kept ones
        pieces[IN_ORDER] = _hours_apart(computed[IN_ORDER]) + kept.get(IN_ORDER, [])
    pieces[IN_ORDER].sort(key=_first_hour)
    products = {name: finish.concat(p) for name, p in pieces.items()}
    return products, per_hour


# Latency by window, the one large table, is put in its order once, when its hours are made, and kept
# so: its pieces (the hours read from the traces, and each kept hour) joined in hour order are in
# order, and a run that reuses 24 hours does not sort 1.8 M rows again (writing them took 1.9 s of a
# 10 s re-run, now 0.9 s).
IN_ORDER = "latency_by_window"


def _hours_apart(ordered: pa.Table) -> list[pa.Table]:
    """A table in its order (window first: its hours in a row each) as one slice per hour."""
    hours = ordered[finish.HOUR].to_numpy()
    cuts = [0, *(np.flatnonzero(np.diff(hours)) + 1).tolist(), ordered.num_rows]
    return [ordered.slice(a, b - a) for a, b in itertools.pairwise(cuts) if b > a] or [ordered]


def _first_hour(piece: pa.Table) -> int:
    low = pc.min(piece[finish.HOUR]).as_py() if piece.num_rows else None
    return -1 if low is None else int(low)


ROWS_TO_THE_DRIVER = 20_000_000  # list values (the exchanges' rows) brought to the driver at a time (~160 MB)


def _window_sizes(fine: DataFrame) -> list[tuple[int, int]]:
    """Per window (its start in epoch µs), the rows its lists hold (its exchanges), in window order."""
    rows = fine.groupBy(F.unix_micros("window_start")).agg(F.sum("requests")).collect()
    return sorted((int(r[0]), int(r[1])) for r in rows)


def _fine_chunks(fine: DataFrame, sizes: list[tuple[int, int]]) -> Iterator[pa.Table]:
    """The one pass's rows brought to the driver a few windows at a time (whole windows, at most
    ROWS_TO_THE_DRIVER list values each unless one window holds more), for ``finish.from_fine``: a
    day of a fleet's rows would not fit in the driver at once, and the products of one window never
    need another's (the per-client histograms of an hour brought in two pieces are two rows per
    bucket, which merge by summing). Always at least one table, empty when there are no rows."""
    chunks: list[list[int]] = []
    rows = 0
    for window, n in sizes:
        if not chunks or rows + n > ROWS_TO_THE_DRIVER:
            chunks.append([])
            rows = 0
        chunks[-1].append(window)
        rows += n
    if len(chunks) <= 1:
        yield fine.toArrow()
        return
    w = F.col("window_start")
    for c in chunks:  # consecutive windows: one range to filter (each piece still scans the kept pass)
        yield fine.where((w >= F.timestamp_micros(F.lit(c[0]))) & (w <= F.timestamp_micros(F.lit(c[-1])))).toArrow()


def _summary(c: dict[str, list[dict[str, Any]]], dirs: list[str], window: str, sla_ms: float, rows: int,
             seconds: float) -> dict[str, Any]:
    headline = []
    for r in c["summary"]:
        entry: dict[str, Any] = {"broker": r["broker"], "kind": r["kind"], "fetches": r["fetches"]}
        for part in tb.PARTS:
            entry[f"{part}_ms"] = {q: r[f"{part}_{q}"] for q in tb.QNAMES}
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
