"""``fetchlat analyze`` throughput on N trace rows, with its baselines in the same run.

    python bench/bench_analyze.py [--rows 10000000] [--layout proxy|mixed] [--dir /tmp/fetchlat-bench-traces]
                                  [--master local[*]] [--repeat 3]

1. generate N rows once (bench/gen_traces.py; kept in --dir for later runs), laid out as the
   proxies write them (``--layout proxy``: a file per broker per 5 minutes) or with every
   file spanning every broker and the whole hour (``--layout mixed``);
2. a bare Spark scan of the same files (every table and column the job reads, summed or counted:
   no shortcut);
3. the full job (every table, summary.json, report.html);
4. DuckDB computing the same headline percentiles, as a single-machine reference.
Prints rows/s for each and the job/scan ratio (goal: the job within 4x the bare scan), and the
CPU seconds the JVM spent in each of the two (task threads, JIT compilers, GC, the rest).

``--repeat N`` runs the whole comparison N times, each in a fresh process (a fresh JVM: a user's
``fetchlat analyze`` starts cold, so a warm second run would flatter the job), and prints every
run and the median, lowest and highest ratio: on a shared 2-core machine one run's two
timings move together, but runs differ by 20% or more.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.procs import json_of_run, thread_cpu_s

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _gen() -> object:
    spec = importlib.util.spec_from_file_location("gen_traces", Path(__file__).with_name("gen_traces.py"))
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_traces"] = mod
    spec.loader.exec_module(mod)
    return mod


SCANNED = {
    "exchanges": ("ts_ns", "api", "broker", "kind", "client_id", "replica_id", "outcome", "records", "acks", "total_ns",
                  "wait_ns", "local_ns", "e2e_ns"),
    "partitions": ("ts_ns", "api", "topic", "partition", "client_id", "record_latency_ns"),
    "replication": ("ts_ns", "broker", "follower", "latency_ns"),
}


def jvm_cpu(spark: SparkSession) -> dict[str, float]:
    """CPU seconds the driver JVM's threads have used, by kind: Spark's task threads, the JIT
    compilers, the garbage collector, the rest (Linux /proc; all zero elsewhere). On 2 cores a
    cold JVM's JIT competes with the task threads, so the split says where a run's time went."""
    pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
    use = {"tasks": 0.0, "jit": 0.0, "gc": 0.0, "other": 0.0}
    for name, seconds in thread_cpu_s(pid):
        kind = ("tasks" if name.startswith("Executor task") else "jit" if "Compiler" in name
                else "gc" if name.startswith("GC Thread") else "other")
        use[kind] += seconds
    return use


def bare_scan(spark: SparkSession, trace_dir: Path) -> float:
    """Seconds to read every table the job reads, every column it reads, summed or counted."""
    from fetchlat.analysis import job
    from pyspark.sql import functions as F

    t = time.monotonic()
    for table, cols in SCANNED.items():
        df = job.read_table(spark, [str(trace_dir)], table)
        types = dict(df.dtypes)
        df.agg(*[F.count(c) if types[c] == "string" else F.sum(F.col(c).cast("double")) for c in cols]).collect()
    return time.monotonic() - t


def _spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before[k], 1) for k in after}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--dir", default="/tmp/fetchlat-bench-traces")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--layout", choices=("proxy", "mixed"), default="proxy")
    ap.add_argument("--repeat", type=int, default=1, help="runs, each in a fresh process; prints the median too")
    args = ap.parse_args()
    if args.repeat > 1:
        repeat(args)
        return
    trace_dir = Path(args.dir) / f"{args.rows}-{args.layout}"
    if not (trace_dir / "exchanges").is_dir():
        t = time.monotonic()
        _gen().generate(str(trace_dir), args.rows, brokers=6, clients=200, topics=50,  # type: ignore[attr-defined]
                        duration_s=3600, grey=_gen().Grey(2, 5, 1800, 300, 12.0), layout=args.layout)  # type: ignore[attr-defined]
        print(f"generated {args.rows:,} rows in {time.monotonic() - t:.1f} s", flush=True)
    size = sum(f.stat().st_size for f in trace_dir.rglob("*.parquet"))

    from fetchlat.analysis import job

    spark = job.build_session(args.master)
    results: dict[str, object] = {"rows": args.rows, "layout": args.layout, "bytes_on_disk": size,
                                  "master": args.master, "cores": os.cpu_count()}
    # warm-up: the JVM and the file listing (both runs below pay the same from here on)
    job.read_table(spark, [str(trace_dir)], "exchanges").limit(1).collect()

    cpu0 = jvm_cpu(spark)
    scan_s = bare_scan(spark, trace_dir)
    results["bare_scan_s"] = round(scan_s, 2)
    cpu1 = jvm_cpu(spark)

    out = tempfile.mkdtemp(prefix="fetchlat-bench-report-")
    t = time.monotonic()
    summary = job.run([str(trace_dir)], out, window="1m", spark=spark)
    job_s = time.monotonic() - t
    results["jvm_cpu_s"] = {"bare_scan": _spent(cpu0, cpu1), "job": _spent(cpu1, jvm_cpu(spark))}
    shutil.rmtree(out, ignore_errors=True)
    results["job_s"] = round(job_s, 2)
    results["job_rows_per_s"] = round(args.rows / job_s)
    results["scan_rows_per_s"] = round(args.rows / scan_s)
    results["job_over_scan"] = round(job_s / scan_s, 2)
    results["flagged"] = summary["flagged_pairs"]
    spark.stop()

    import duckdb

    t = time.monotonic()
    con = duckdb.connect()
    q = f"""
        SELECT broker, kind, count(*) AS n,
          {", ".join(f"quantile_disc({p}_ns / 1e6, [0.5, 0.9, 0.99, 0.999]) AS {p}"
                     for p in ("total", "wait", "local", "e2e"))}
        FROM read_parquet('{trace_dir}/exchanges/**/*.parquet')
        WHERE api = 'Fetch' AND total_ns IS NOT NULL GROUP BY broker, kind ORDER BY broker, kind"""
    duck = con.execute(q).fetchall()
    duck_s = time.monotonic() - t
    results["duckdb_headline_s"] = round(duck_s, 2)
    results["duckdb_rows_per_s"] = round(args.rows / duck_s)
    spark_p50 = {(b["broker"], b["kind"]): b["local_ms"]["p50"] for b in summary["brokers"]}
    results["max_local_p50_diff_ms_vs_duckdb"] = round(max(abs(spark_p50[(r[0], r[1])] - r[5][0]) for r in duck), 6)
    print(json.dumps(results, indent=2))


def repeat(args: argparse.Namespace) -> None:
    runs = []
    for i in range(args.repeat):
        cmd = [sys.executable, __file__, "--rows", str(args.rows), "--dir", args.dir, "--master", args.master,
               "--layout", args.layout]
        run = json_of_run(cmd, f"run {i + 1}")
        cpu = run["jvm_cpu_s"]["job"]
        print(f"run {i + 1}: scan {run['bare_scan_s']} s, job {run['job_s']} s, job/scan {run['job_over_scan']}, "
              f"flagged {len(run['flagged'])}, job JVM CPU s {cpu}", flush=True)
        runs.append(run)
    ratios = [r["job_over_scan"] for r in runs]
    print(json.dumps({"rows": args.rows, "layout": args.layout, "runs": [
        {k: r[k] for k in ("bare_scan_s", "job_s", "job_over_scan", "duckdb_headline_s",
                           "max_local_p50_diff_ms_vs_duckdb", "jvm_cpu_s")} for r in runs],
        "job_over_scan_median": statistics.median(ratios), "job_over_scan_min": min(ratios),
        "job_over_scan_max": max(ratios)}, indent=2))


if __name__ == "__main__":
    main()
