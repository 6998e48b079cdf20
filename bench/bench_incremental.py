"""What the per-hour state saves (``analysis/state.py``): a day of generated traces analysed and
kept, then the day's 25th hour arrives and the range is analysed again.

    python bench/bench_incremental.py [--rows 12500000] [--hours 25] [--dir /tmp/fetchlat-bench-traces]

Three runs, each a fresh ``fetchlat analyze`` as a user runs it: (1) the first 24 hours, keeping
their state in the report directory; (2) the same command once the 25th hour is there (24 hours
read from the state, one from the traces); (3) all 25 hours from the traces, keeping nothing
(no ``--state``). Prints the wall time of each, the hours reused and read, whether the tables of
(2) and (3) are equal to the last bit, and (2) / (3): the goal is 1/10 or less.
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

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

START_NS = 498_800 * 3600 * 10**9  # an hour boundary


def analyze(trace_dir: Path, out: Path, extra: list[str]) -> dict[str, object]:
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "fetchlat.proxy", "analyze", str(trace_dir), "--out", str(out), *extra],
                   check=True, capture_output=True, text=True)
    wall = time.monotonic() - t
    s = json.loads((out / "summary.json").read_text())
    return {"wall_s": round(wall, 1), "exchanges_read": s["exchanges_read"], "state": s["state"],
            "hour_directories_read": s["hour_directories"]["exchanges"]["read"]}


def tables(out: Path) -> dict[str, object]:
    return {d.name: pq.read_table(d).to_pylist() for d in sorted((out / "tables").iterdir())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=12_500_000)
    ap.add_argument("--hours", type=int, default=25)
    ap.add_argument("--dir", default="/tmp/fetchlat-bench-traces")
    args = ap.parse_args()
    day = Path(args.dir) / f"incremental-{args.rows}-{args.hours}h"
    if not (day / "exchanges").is_dir():
        from bench.bench_analyze import _gen

        _gen().generate(str(day), args.rows, brokers=6, clients=200, topics=50,  # type: ignore[attr-defined]
                        start_ns=START_NS, duration_s=args.hours * 3600)
    work = Path(tempfile.mkdtemp(prefix="fetchlat-incremental-"))
    fleet, kept, full = work / "fleet", work / "kept", work / "full"
    last = sorted(p.relative_to(day / "exchanges").as_posix() for p in (day / "exchanges").glob("date=*/hour=*"))[-1]
    shutil.copytree(day, fleet, ignore=lambda d, names: [n for n in names if f"{Path(d).name}/{n}" == last])
    first = analyze(fleet, kept, ["--state", str(kept / "state")])
    shutil.copytree(day, fleet, dirs_exist_ok=True)  # the last hour arrives
    again = analyze(fleet, kept, ["--state", str(kept / "state")])
    whole = analyze(fleet, full, [])
    print(json.dumps({"rows": args.rows, "hours": args.hours, "runs": {
        "first hours, kept": first, "again with one more hour": again, "all hours, nothing kept": whole},
        "tables_equal": tables(kept) == tables(full),
        "again_over_full": round(float(again["wall_s"]) / float(whole["wall_s"]), 3)}, indent=2))  # type: ignore[arg-type]
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
