"""What the per-hour state saves (``analysis/state.py``): a day of generated traces analysed and
kept, then the day's 25th hour arrives and the range is analysed again.

    python bench/bench_incremental.py [--rows 12500000] [--hours 25] [--dir /tmp/fetchlat-bench-traces]

Three runs, each a fresh ``fetchlat analyze`` as a user runs it: (1) the first 24 hours, keeping
their state in the report directory; (2) the same command once the 25th hour is there (24 hours
read from the state, one from the traces); (3) all 25 hours from the traces, keeping nothing
(no ``--state``). Then (4) the command kept running (``--every 2s --runs 2``): its first run over
the 24 hours, then the 25th hour arrives (moved in as a proxy moves its files) and its second
run, in the same warm Spark session. Prints the wall time of each, the hours reused and read,
whether the tables of (2), (4) and (3) are equal to the last bit, and (2) / (3) and (4) / (3):
the goal is 1/10 or less.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

START_NS = 498_800 * 3600 * 10**9  # an hour boundary


def analyze(trace_dir: Path, out: Path, extra: list[str]) -> dict[str, object]:
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "fetchlat.app", "analyze", str(trace_dir), "--out", str(out), *extra],
                   check=True, capture_output=True, text=True)
    return {"wall_s": round(time.monotonic() - t, 1), **what_was_read(out)}


def what_was_read(out: Path) -> dict[str, object]:
    """Of a run's summary.json: exchanges read, the state's use, hour directories read."""
    s = json.loads((out / "summary.json").read_text())
    return {"exchanges_read": s["exchanges_read"], "state": s["state"],
            "hour_directories_read": s["hour_directories"]["exchanges"]["read"]}


def follow(gen: Any, day: Path, fleet: Path, out: Path) -> dict[str, object]:
    """(4): ``--every``; the second run's own time (summary.json), and from the hour's arrival to
    its report (the second run plus the looks that saw the hour land and settle: each look lists
    every input file)."""
    last = gen.split_last_hour(str(day), str(fleet))
    proc = subprocess.Popen([sys.executable, "-m", "fetchlat.app", "analyze", str(fleet), "--out", str(out),
                             "--every", "2s", "--runs", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stderr is not None
    tail: list[str] = []

    def wait_for(what: str) -> None:
        nonlocal tail
        for line in proc.stderr:  # type: ignore[union-attr]
            tail = [*tail[-20:], line]
            if what in line:
                return
        raise SystemExit(f"fetchlat analyze --every stopped before '{what}': {''.join(tail)}")

    wait_for("run 1 done")
    first = json.loads((out / "summary.json").read_text())
    t = time.monotonic()
    gen.hour_arrives(str(day), str(fleet), last)
    wait_for("run 2 done")  # its report written
    arrival_to_report = time.monotonic() - t
    proc.communicate(timeout=600)
    if proc.returncode:
        raise SystemExit(f"fetchlat analyze --every failed: {proc.returncode}")
    second = json.loads((out / "summary.json").read_text())
    return {"first_run_s": first["seconds"], "second_run_s": second["seconds"],
            "arrival_to_report_s": round(arrival_to_report, 1), **what_was_read(out)}


def tables(out: Path) -> dict[str, object]:
    return {d.name: pq.read_table(d).to_pylist() for d in sorted((out / "tables").iterdir())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=12_500_000)
    ap.add_argument("--hours", type=int, default=25)
    ap.add_argument("--dir", default="/tmp/fetchlat-bench-traces")
    args = ap.parse_args()
    day = Path(args.dir) / f"incremental-{args.rows}-{args.hours}h"
    from bench.bench_analyze import _gen

    gen: Any = _gen()
    if not (day / "exchanges").is_dir():
        gen.generate(str(day), args.rows, brokers=6, clients=200, topics=50,
                        start_ns=START_NS, duration_s=args.hours * 3600)
    work = Path(tempfile.mkdtemp(prefix="fetchlat-incremental-"))
    fleet, kept, full = work / "fleet", work / "kept", work / "full"
    last = gen.split_last_hour(str(day), str(fleet))
    first = analyze(fleet, kept, ["--state", str(kept / "state")])
    gen.hour_arrives(str(day), str(fleet), last)
    again = analyze(fleet, kept, ["--state", str(kept / "state")])
    whole = analyze(fleet, full, [])
    kept_running = follow(gen, day, work / "fleet-every", work / "every")
    full_s = float(whole["wall_s"])  # type: ignore[arg-type]
    print(json.dumps({"rows": args.rows, "hours": args.hours, "runs": {
        "first hours, kept": first, "again with one more hour": again, "all hours, nothing kept": whole,
        "--every: kept running, the hour arrives": kept_running},
        "tables_equal": tables(kept) == tables(full) == tables(work / "every"),
        "again_over_full": round(float(again["wall_s"]) / full_s, 3),  # type: ignore[arg-type]
        "every_second_run_over_full": round(float(kept_running["second_run_s"]) / full_s, 3),  # type: ignore[arg-type]
        "every_arrival_to_report_over_full": round(float(kept_running["arrival_to_report_s"]) / full_s, 3)},  # type: ignore[arg-type]
        indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
