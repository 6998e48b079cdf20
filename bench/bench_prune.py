"""What ``--since/--until`` saves on a fleet's traces: a day of generated traces in hour
directories (``metrics/trace_layout.py``), analysed whole and for one hour of it.

    python bench/bench_prune.py [--rows 12000000] [--hours 24] [--dir /tmp/fetchlat-bench-traces]

Each run is a fresh driver (``fetchlat analyze`` as a user runs it); prints, per run, the wall
time, the exchanges read and the hour directories read of how many there are.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

START_NS = 498_600 * 3600 * 10**9  # an hour boundary


def analyze(trace_dir: Path, extra: list[str]) -> dict[str, object]:
    out = Path(tempfile.mkdtemp(prefix="fetchlat-prune-"))
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "fetchlat.app", "analyze", str(trace_dir), "--out", str(out), *extra],
                   check=True, capture_output=True, text=True)
    wall = time.monotonic() - t
    s = json.loads((out / "summary.json").read_text())
    return {"args": " ".join(extra) or "(whole day)", "wall_s": round(wall, 1), "exchanges_read": s["exchanges_read"],
            "hour_directories": s["hour_directories"]["exchanges"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=12_000_000)
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--dir", default="/tmp/fetchlat-bench-traces")
    args = ap.parse_args()
    trace_dir = Path(args.dir) / f"prune-{args.rows}-{args.hours}h"
    if not (trace_dir / "exchanges").is_dir():
        from bench.bench_analyze import _gen

        _gen().generate(str(trace_dir), args.rows, brokers=6, clients=200, topics=50,  # type: ignore[attr-defined]
                        start_ns=START_NS, duration_s=args.hours * 3600)
    hour = 3600
    since = START_NS // 10**9 + 10 * hour
    runs = [analyze(trace_dir, []),
            analyze(trace_dir, ["--since", str(since), "--until", str(since + hour)])]
    print(json.dumps({"rows": args.rows, "hours": args.hours, "runs": runs,
                      "speedup": round(float(runs[0]["wall_s"]) / float(runs[1]["wall_s"]), 1)},  # type: ignore[arg-type]
                     indent=2))


if __name__ == "__main__":
    main()
