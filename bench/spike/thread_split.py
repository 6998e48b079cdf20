"""Where one path's CPU per small round trip goes, thread by thread: a fresh Tansu fronted by the
path (``bench/bench_proxy.py``'s ``target``), ``round_trips``' four types one at a time, and each
of the proxy's threads' run time (``/proc/PID/task/TID/schedstat``) from before them to 5 s
after (the trace writer's last write comes once its rows have been idle 3 s).

    python bench/spike/thread_split.py --path native-relay+traces --round-trips 2000 [--broker kafka]

Threads are named by the kernel's ``comm`` (the native relay's is ``fetchlat-relay``; Python's
threads all show ``python``: the first is the main thread, then in the order they started).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import bench_proxy as bp


def tasks(pid: int) -> dict[int, tuple[str, int]]:
    out: dict[int, tuple[str, int]] = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = Path(f"/proc/{pid}/task/{t}/comm").read_text().strip()
            ns = int(Path(f"/proc/{pid}/task/{t}/schedstat").read_text().split()[0])
        except OSError:
            continue
        out[int(t)] = (comm, ns)
    return out


def _syscalls(pid: int) -> dict[int, tuple[str, int]]:
    """Each thread's voluntary context switches (``/proc/PID/task/TID/status``): how often it slept
    and woke."""
    out: dict[int, tuple[str, int]] = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = Path(f"/proc/{pid}/task/{t}/comm").read_text().strip()
            status = Path(f"/proc/{pid}/task/{t}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                out[int(t)] = (comm, int(line.split()[1]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", default=bp.SPIKE_TRACED)
    ap.add_argument("--round-trips", type=int, default=2000)
    ap.add_argument("--broker", choices=bp.BROKERS, default="tansu")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fetchlat-split-"))
    with bp.target(args.path, work, args.broker) as (port, pid, _broker_port):
        assert pid is not None, "a path with a process of its own"
        topic = f"rt-{uuid.uuid4().hex[:6]}"
        bp.create_topics(f"127.0.0.1:{port}", topic, topic + "-idle")
        routes = args.path.startswith("fetchlat") and args.path not in (bp.RELAYED, bp.RELAYED_TRACED)
        rt_port = port + 1 + bp.NODE if routes and args.broker == "tansu" else port
        before = tasks(pid)
        syscalls0 = _syscalls(pid)
        asyncio.run(bp.round_trips(rt_port, topic, args.round_trips, None, pid))
        time.sleep(5.0)
        after = tasks(pid)
        syscalls1 = _syscalls(pid)
    n = 4 * args.round_trips
    total = 0.0
    for tid, (comm, ns) in sorted(after.items()):
        us = (ns - before.get(tid, (comm, 0))[1]) / 1e3 / n
        total += us
        print(f"{args.path} thread {tid} {comm:16} {us:7.2f} µs per round trip")
    for tid, (comm, n1) in sorted(syscalls1.items()):
        n0 = syscalls0.get(tid, (comm, 0))[1]
        if n1 - n0:
            print(f"{args.path} thread {tid} {comm:16} {(n1 - n0) / n:7.2f} wake-ups per round trip")
    polls = bp.long_polls(args.round_trips)
    print(f"{args.path} all threads {total:7.2f} µs per round trip ({n} round trips and {polls} long polls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
