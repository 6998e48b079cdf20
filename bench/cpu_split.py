"""Where a small round trip's CPU goes, by the kernel's account: each path's user and system
time per round trip (``/proc/PID/task/*/stat``), haproxy, the relay and fetchlat in turns on a
fresh Tansu each, one request at a time (``bench_proxy.round_trips``: ApiVersions, Metadata,
Fetch with max_wait 0, Produce of one record).

    python bench/cpu_split.py [--round-trips 3000] [--rounds 2] [--traces] [--threads] [--paths P,Q]

The system time is the sockets' work (the same syscalls on every path); the user time is what
each path does in its own process: haproxy's C, the relay's uvloop and Python callbacks,
fetchlat's decoding, model and metrics (``--traces``: and, in a fourth run, its trace rows). It says how much
of fetchlat's cost a leaner road could take off, and how much no proxy avoids. ``--threads``
splits fetchlat's by thread: the event loop's, and with traces the writer thread's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import create_topics, round_trips, target


def by_thread(pid: int) -> dict[str, tuple[float, float]]:
    """User and system CPU seconds of each of ``pid``'s live threads (10 ms ticks), by thread id."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, tuple[float, float]] = {}
    for path in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            fields = path.read_text().rsplit(")", 1)[1].split()
        except OSError:  # a thread that ended meanwhile
            continue
        out[path.parent.name] = (int(fields[11]) / tick, int(fields[12]) / tick)
    return out




def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--round-trips", type=int, default=3000, help="of each request type")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--traces", action="store_true", help="fetchlat once more, writing a trace row per request")
    ap.add_argument("--threads", action="store_true", help="fetchlat's time by thread (the loop's is the main one)")
    ap.add_argument("--paths", help="comma-separated bench_proxy paths instead (e.g. haproxy,fetchlat-relay+traces)")
    args = ap.parse_args()
    kinds = (tuple(k.strip() for k in args.paths.split(",") if k.strip()) if args.paths else
             ("haproxy", "relay", "fetchlat", *(("fetchlat+traces",) if args.traces else ())))
    n = 4 * args.round_trips
    print(f"µs of CPU per round trip ({n} round trips a run): user / system")
    for rnd in range(args.rounds):
        for kind in kinds:
            with target(kind, Path(tempfile.mkdtemp())) as (port, pid, broker_port):
                assert pid is not None
                topic = f"split-{uuid.uuid4().hex[:6]}"
                create_topics(f"127.0.0.1:{broker_port}", topic, topic + "-idle")
                before = by_thread(pid)
                asyncio.run(round_trips(port, topic, args.round_trips, direct_port=broker_port))
                after = by_thread(pid)
            u0, s0 = (sum(t[i] for t in before.values()) for i in (0, 1))
            u1, s1 = (sum(t[i] for t in after.values()) for i in (0, 1))
            print(f"round {rnd + 1} {kind:16s} {1e6 * (u1 - u0) / n:7.1f} / {1e6 * (s1 - s0) / n:7.1f}", flush=True)
            if args.threads and kind.startswith("fetchlat"):
                for tid, (u, s) in sorted(after.items()):
                    du, ds = u - before.get(tid, (0.0, 0.0))[0], s - before.get(tid, (0.0, 0.0))[1]
                    if du + ds > 0:
                        role = "event loop" if tid == str(pid) else f"thread {tid}"
                        print(f"    {role:14s} {1e6 * du / n:7.1f} / {1e6 * ds / n:7.1f}", flush=True)


if __name__ == "__main__":
    main()
