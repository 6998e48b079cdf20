"""``fetchlat analyze`` at scale: N generated rows (default 100 million) on this machine, on
``local[*]`` and on a two-worker Spark standalone cluster started from pyspark's jars, with
DuckDB on the same files as the single-machine reference.

    python bench/bench_scale.py [--rows 100000000] [--dir /tmp/fetchlat-bench-traces]
                                [--worker-memory 5g] [--skip-cluster]

For each Spark run (a fresh driver process each): wall time, rows/s, the time of each step of
the job (its own progress steps), Spark's stages (run time, input and shuffle bytes, from the
driver's REST API), and the peak resident memory of the driver JVM and of every executor JVM
(Linux VmHWM, polled); the cluster's wall time over ``local[*]``'s. Then the bare Spark scan of
``bench_analyze.py`` on ``local[*]`` (every table and column the job reads; a fresh driver) and the
local job's time over it. Then DuckDB's time for the headline percentiles, and how far the
cluster's and local's headline figures are from each other (they must be equal) and from
DuckDB's exact ones. Prints one JSON document; docs/analysis.md keeps the latest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.procs import json_of_run  # noqa: E402  (after the path)


def _vm_hwm_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _java_pids(marker: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker in (d / "cmdline").read_bytes().decode(errors="replace"):
                    out.append(int(d.name))
            except OSError:
                continue
    return out


class PeakMemory:
    """Polls the VmHWM (peak resident set) of JVMs whose command line holds a marker."""

    def __init__(self, markers: dict[str, str]) -> None:
        self.markers = markers
        self.peak: dict[str, dict[int, float]] = {k: {} for k in markers}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(5)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            for kind, marker in self.markers.items():
                for pid in _java_pids(marker):
                    self.peak[kind][pid] = max(self.peak[kind].get(pid, 0.0), _vm_hwm_mb(pid))

    def summary(self) -> dict[str, list[float]]:
        return {k: sorted(round(v) for v in d.values()) for k, d in self.peak.items()}


def run_job(trace_dir: Path, master: str, out: Path, env: dict[str, str]) -> dict[str, Any]:
    """One ``fetchlat analyze`` in a fresh driver process (bench/bench_scale.py --driver)."""
    cmd = [sys.executable, __file__, "--driver", "--dir", str(trace_dir), "--master", master, "--out", str(out)]
    markers = {"driver": "org.apache.spark.deploy.SparkSubmit",
               "executors": "org.apache.spark.executor.CoarseGrainedExecutorBackend"}
    if master.startswith("local"):
        markers.pop("executors")
    with PeakMemory(markers) as mem:
        t = time.monotonic()
        result = json_of_run(cmd, f"the job on {master}", env)
        wall = time.monotonic() - t
    result["wall_s"] = round(wall, 1)
    result["peak_rss_mb"] = mem.summary()
    return result


def driver(args: argparse.Namespace) -> None:
    """In the driver process: the job with its own session, step times, then Spark's stages."""
    from fetchlat.analysis import job

    spark = job.build_session(args.master)
    steps: list[tuple[float, str]] = []
    t0 = time.monotonic()

    def progress(done: float, what: str) -> None:
        name = what.split(" · ")[0].split(" (")[0]
        if not steps or steps[-1][1] != name:
            steps.append((time.monotonic() - t0, name))

    summary = job.run([args.dir], args.out, window="1m", spark=spark, progress=progress)
    total = time.monotonic() - t0
    step_s = {name: round((steps[i + 1][0] if i + 1 < len(steps) else total) - at, 1)
              for i, (at, name) in enumerate(steps) if name != "done"}
    import urllib.request

    stages = []
    url = spark.sparkContext.uiWebUrl
    if url:
        app = spark.sparkContext.applicationId
        with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/stages?status=complete", timeout=30) as r:
            for st in json.load(r):
                stages.append({"id": st["stageId"], "name": st["name"][:60], "tasks": st["numTasks"],
                               "run_s": round(st["executorRunTime"] / 1000, 1),
                               "input_mb": round(st["inputBytes"] / 2**20),
                               "shuffle_write_mb": round(st["shuffleWriteBytes"] / 2**20),
                               "spill_mb": round((st.get("memoryBytesSpilled", 0) + st.get("diskBytesSpilled", 0))
                                                 / 2**20)})
    spark.stop()
    stages.sort(key=lambda s: -s["run_s"])
    print(json.dumps({"job_s": round(total, 1), "rows": summary["exchanges_read"], "steps_s": step_s,
                      "stages_by_run_time": stages[:12],
                      "headline": {f"{b['broker']}/{b['kind']}": b["local_ms"] for b in summary["brokers"]},
                      "flagged": len(summary["flagged_pairs"])}))


def scan(args: argparse.Namespace) -> None:
    """In a fresh driver process on ``local[*]``: the bare scan of ``bench_analyze.py`` (every table
    and column the job reads), after the same warm-up, so the job's time has a yardstick."""
    from fetchlat.analysis import job

    from bench.bench_analyze import bare_scan

    spark = job.build_session("local[*]")
    job.read_table(spark, [args.dir], "exchanges").limit(1).collect()
    print(json.dumps({"bare_scan_s": round(bare_scan(spark, Path(args.dir)), 1)}))
    spark.stop()


def duckdb_headline(trace_dir: Path) -> tuple[float, dict[str, list[float]]]:
    import duckdb

    t = time.monotonic()
    rows = duckdb.connect().execute(f"""
        SELECT broker, kind, quantile_disc(local_ns / 1e6, [0.5, 0.9, 0.99, 0.999])
        FROM read_parquet('{trace_dir}/exchanges/**/*.parquet')
        WHERE api = 'Fetch' AND total_ns IS NOT NULL GROUP BY broker, kind""").fetchall()
    return time.monotonic() - t, {f"{b}/{k}": q for b, k, q in rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--dir", default="/tmp/fetchlat-bench-traces")
    ap.add_argument("--worker-memory", default="5g", help="each of the two workers' memory (executor: 1g less)")
    ap.add_argument("--skip-cluster", action="store_true")
    ap.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--scan", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.driver:
        driver(args)
        return
    if args.scan:
        scan(args)
        return
    trace_dir = Path(args.dir) / f"{args.rows}-proxy"
    results: dict[str, Any] = {"rows": args.rows, "cores": os.cpu_count()}
    if not (trace_dir / "exchanges").is_dir():
        from bench.bench_analyze import _gen

        t = time.monotonic()
        _gen().generate(str(trace_dir), args.rows, brokers=6, clients=200, topics=50,  # type: ignore[attr-defined]
                        duration_s=3600, grey=_gen().Grey(2, 5, 1800, 300, 12.0))  # type: ignore[attr-defined]
        results["generated_s"] = round(time.monotonic() - t, 1)
    results["bytes_on_disk"] = sum(f.stat().st_size for f in trace_dir.rglob("*.parquet"))
    results["files"] = sum(1 for _ in trace_dir.rglob("*.parquet"))
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "FETCHLAT_SPARK_DRIVER_MEMORY": "8g"}
    out = Path(tempfile.mkdtemp(prefix="fetchlat-scale-"))
    local = run_job(trace_dir, "local[*]", out / "local", env)
    results["local"] = local
    print(json.dumps({"local": local}), flush=True)
    if not args.skip_cluster:
        from testkit.spark_cluster import standalone

        executor_mb = int(args.worker_memory.rstrip("g")) * 1024 - 1024
        with standalone(out / "spark", workers=2, cores=1, memory=args.worker_memory) as cluster:
            cenv = {**env, "FETCHLAT_SPARK_DRIVER_MEMORY": "4g",
                    "PYSPARK_SUBMIT_ARGS": f"--conf spark.executor.memory={executor_mb}m pyspark-shell"}
            results["cluster"] = run_job(trace_dir, cluster.master_url, out / "cluster", cenv)
        results["cluster_equals_local"] = results["cluster"]["headline"] == local["headline"]
        results["cluster_over_local"] = round(results["cluster"]["wall_s"] / local["wall_s"], 2)
    results["bare_scan_s"] = json_of_run([sys.executable, __file__, "--scan", "--dir", str(trace_dir)], "the bare scan",
                                         env)["bare_scan_s"]
    results["local_over_bare_scan"] = round(local["job_s"] / results["bare_scan_s"], 2)
    duck_s, duck = duckdb_headline(trace_dir)
    results["duckdb_headline_s"] = round(duck_s, 1)
    diffs = [abs(local["headline"][k][name] - duck[k][i]) / duck[k][i]
             for k in duck for i, name in enumerate(("p50", "p90", "p99", "p999")) if duck[k][i]]
    results["max_relative_diff_vs_duckdb"] = round(max(diffs), 5)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
