"""What an idle sidecar costs: the CPU a path in front of a fresh Tansu uses while no client
sends anything (fetchlat's own timer: loop lag, topic asks, heartbeat; the relay and haproxy
have none), and, for scale, a bare uvloop process that only re-arms a timer at the same rate.

    python bench/idle_cpu.py [--seconds 30] [--kinds fetchlat,relay,haproxy]

An idle cost shows in every figure per byte of a slow workload: a consume that trickles at
10 MB/s for 10 s pays ten seconds of it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import target
from bench.procs import cpu_s

BARE_TIMER = textwrap.dedent("""
    import asyncio, sys, uvloop
    period = float(sys.argv[1])
    def tick():
        asyncio.get_running_loop().call_later(period, tick)
    async def main():
        asyncio.get_running_loop().call_later(period, tick)
        await asyncio.sleep(3600)
    uvloop.run(main())
""")


def idle(pid: int, seconds: float) -> float:
    time.sleep(2)  # start-up done
    c0 = cpu_s(pid)
    time.sleep(seconds)
    return cpu_s(pid) - c0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--kinds", default="fetchlat,relay,haproxy")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for kind in args.kinds.split(","):
            with target(kind, Path(d)) as (_port, pid, _broker):
                assert pid is not None
                cpu = idle(pid, args.seconds)
            print(f"{kind:10s} idle: {1000 * cpu / args.seconds:6.2f} ms of CPU per second", flush=True)
    for period in (0.1, 1.0):
        bare = subprocess.Popen([sys.executable, "-c", BARE_TIMER, str(period)])
        try:
            cpu = idle(bare.pid, args.seconds)
        finally:
            bare.terminate()
            bare.wait(10)
        print(f"bare uvloop timer every {period:g} s: {1000 * cpu / args.seconds:6.2f} ms of CPU per second",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
