"""How late an event loop wakes on a machine whose cores are busy, with the kernel's default time
slice and with a short one asked for (``sched_setattr``'s ``sched_runtime`` for a normal thread:
Linux 6.12+, EEVDF, where a waking thread with a shorter slice may preempt the one running).

A sidecar shares its node with its broker: when the broker's threads fill the cores, a proxy
thread that wakes (a timer, a socket) waits for a core, and every byte it carries waits with it.
Here ``--hogs`` processes spin at nice 0 (bounded: each stops after the run's length); the main
thread runs a uvloop loop that sleeps ``--sleep-ms`` at a time and records how late it wakes.
The two settings take turns, ``--rounds`` times each.

    python bench/wake_slice.py [--hogs 3] [--wakes 2000] [--rounds 3] [--sleep-ms 5] [--slice-us 500]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import uvloop
from fetchlat.proxy.timeslice import read_slice_ns, set_slice_ns
from fetchlat.verify.request_log import quantile as q


def spin(until: float) -> None:
    """A busy core until ``until`` (monotonic seconds), then gone."""
    x = 0
    while time.monotonic() < until:
        for _ in range(10_000):
            x += 1


async def wakes(n: int, sleep_s: float) -> list[float]:
    """How late (ms) each of ``n`` sleeps of ``sleep_s`` woke."""
    loop = asyncio.get_running_loop()
    late: list[float] = []
    for _ in range(n):
        t0 = time.monotonic()
        fut = loop.create_future()
        loop.call_later(sleep_s, fut.set_result, None)
        await fut
        late.append(max(0.0, (time.monotonic() - t0 - sleep_s) * 1000))
    return late


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hogs", type=int, default=3)
    ap.add_argument("--wakes", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sleep-ms", type=float, default=5.0)
    ap.add_argument("--slice-us", type=int, default=500)
    args = ap.parse_args()
    default_ns = read_slice_ns()
    if default_ns is None:
        print("sched_getattr is not available here: nothing to compare")
        return 1
    phase_s = args.wakes * (args.sleep_ms / 1000 + 0.002) + 5
    until = time.monotonic() + phase_s * 2 * args.rounds + 10
    hogs = [multiprocessing.Process(target=spin, args=(until,), daemon=True) for _ in range(args.hogs)]
    for h in hogs:
        h.start()
    got: dict[str, list[float]] = {"default": [], "short": []}
    try:
        for r in range(args.rounds):
            for name in (("default", "short") if r % 2 == 0 else ("short", "default")):
                ok = set_slice_ns(0 if name == "default" else args.slice_us * 1000)
                if not ok:
                    print(f"sched_setattr refused the {name} slice: nothing to compare")
                    return 1
                late = uvloop.run(wakes(args.wakes, args.sleep_ms / 1000))
                got[name] += late
                s = sorted(late)
                print(f"round {r + 1} {name:7s} (slice {read_slice_ns()} ns): late p50 {q(s, 0.5):.3f} ms, "
                      f"p99 {q(s, 0.99):.3f}, p99.9 {q(s, 0.999):.3f}, max {s[-1]:.3f}; "
                      f"over 5 ms {100 * sum(1 for x in s if x > 5) / len(s):.2f} %", flush=True)
    finally:
        for h in hogs:
            h.terminate()
        set_slice_ns(0)
    print(f"\n{args.hogs} spinning processes on {os.cpu_count()} cores; {args.rounds} x {args.wakes} sleeps of "
          f"{args.sleep_ms} ms a setting")
    for name, late in got.items():
        s = sorted(late)
        print(f"{name:7s}: late p50 {q(s, 0.5):.3f} ms, p99 {q(s, 0.99):.3f}, p99.9 {q(s, 0.999):.3f}, "
              f"max {s[-1]:.3f}; over 5 ms {100 * sum(1 for x in s if x > 5) / len(s):.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
