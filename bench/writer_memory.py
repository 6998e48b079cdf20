"""The trace writer alone, rows at a steady rate, and the process's resident memory over time by
kind of mapping (``testkit/procfs.py``): what Arrow's pool does to a sidecar's RSS. Each pool
runs in its own process at the same time (the pool is the process's), the proxy's
once-a-minute release (``proxy/memory.py``) included.

    python bench/writer_memory.py [--minutes 25] [--rate 1000] [--pools system,mimalloc]

Prints per pool, after the first 5 minutes: RSS mean, standard deviation and slope (MB/h), and
the mean of each kind of mapping. ``--child`` is the per-pool process (internal).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.procs import slope_mb_per_h
from testkit.procfs import MAPPING_KINDS

SETTLE_S = 300.0  # the first files and batches: left out of the figures


def child(rate: float, minutes: float, out: Path) -> None:
    from fetchlat.proxy import memory
    from fetchlat.proxy.traces import TraceWriter

    from testkit.procfs import rss_by_mapping_mb, rss_mb

    w = TraceWriter(tempfile.mkdtemp(prefix="writer-memory-"), proxy_id="bench", rotate_s=300.0)
    w.start()
    rnd = random.Random(1)
    t0 = time.monotonic()
    n, next_sample, next_tick, next_release = 0, t0, t0, t0 + memory.RELEASE_EVERY_S
    with out.open("w") as fh:
        while (now := time.monotonic()) - t0 < minutes * 60:
            for _ in range(int((now - t0) * rate) - n):
                n += 1
                w.columns.other(time.time_ns(), "bench", "0", n % 50, api_key=rnd.choice((3, 18, 12, 8)),
                                api_version=4, client_id=f"client-{rnd.randrange(5000)}", correlation_id=n,
                                response_bytes=300, total_ns=rnd.randrange(10**5, 10**7))
            if now >= next_tick:
                w.columns.tick(time.monotonic_ns())
                next_tick = now + 1.0
            if now >= next_release:
                memory.release_free_memory()
                next_release = now + memory.RELEASE_EVERY_S
            if now >= next_sample:
                fh.write(json.dumps({"t": now - t0, "rss": rss_mb(os.getpid()), **rss_by_mapping_mb(os.getpid()),
                                     "pool": w.pool, "written": w.written, "dropped": w.dropped}) + "\n")
                fh.flush()
                next_sample = now + 10.0
            time.sleep(0.01)
    w.close()


def figures(path: Path) -> dict[str, object]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    late = [r for r in rows if r["t"] >= SETTLE_S]
    if len(late) < 3:
        return {"pool": rows[-1]["pool"] if rows else "?", "samples": len(late)}
    rss = [r["rss"] for r in late]
    return {"pool": late[-1]["pool"], "samples": len(late), "rss_mean_mb": round(statistics.fmean(rss), 2),
            "rss_sd_mb": round(statistics.pstdev(rss), 2),
            "rss_slope_mb_per_h": slope_mb_per_h([(r["t"], r["rss"], 0) for r in late]),
            "by_mapping_mean_mb": {k: round(statistics.fmean(r[k] for r in late), 2) for k in MAPPING_KINDS},
            "rows_written": late[-1]["written"], "rows_dropped": late[-1]["dropped"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=25.0)
    ap.add_argument("--rate", type=float, default=1000.0, help="rows a second")
    ap.add_argument("--pools", default="system,mimalloc", help="ARROW_DEFAULT_MEMORY_POOL values, one process each")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.rate, args.minutes, args.child)
        return 0
    work = Path(tempfile.mkdtemp(prefix="writer-memory-"))
    procs = []
    for pool in args.pools.split(","):
        env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": pool}
        procs.append((pool, subprocess.Popen([sys.executable, __file__, "--minutes", str(args.minutes), "--rate",
                                              str(args.rate), "--child", str(work / f"{pool}.jsonl")], env=env)))
    for _, p in procs:
        p.wait(timeout=args.minutes * 60 + 300)
    for pool, _ in procs:
        print(json.dumps(figures(work / f"{pool}.jsonl")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
