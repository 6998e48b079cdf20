"""A/B of two builds of the proxy on the small round trips, interleaved: the bench's own
``round_trips`` (every request paired with the same request straight to the broker) against a
fresh Tansu per run, alternating the builds, so both see the same machine at the same hour.

    git worktree add /tmp/base <rev> && cp -a .venv /tmp/base/.venv \
        && (cd /tmp/base && .venv/bin/python -m pip install -q --no-deps -e .)
    python bench/ab_round_trips.py --other /tmp/base --pairs 3

Each run is its checkout's own bench code and its own venv's python (``sys.executable`` starts
that build's proxy). Prints the added p50 per request type and the proxy's CPU seconds, per run.

    python bench/ab_round_trips.py --stamps-ab --pairs 3

compares this checkout with itself, its proxy stamping responses from the kernel
(``FETCHLAT_STAMPS=kernel``) against the clock: what the kernel stamps cost. This process holds
a socket with the kernel's stamping on throughout, so both sides run with the kernel stamping
every packet and the difference is the proxy's reading (``--bare-kernel``: not held, so only the
kernel side has the machine stamp packets).

    python bench/ab_round_trips.py --other /tmp/base --pairs 3 --traces

runs both builds with traces on (``FETCHLAT_TRACE_DIR``, a fresh directory per run), as the
README deploys the sidecar: what a change to the trace rows costs or saves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def one_run(n: int) -> dict[str, float]:
    sys.path.insert(0, os.getcwd())
    from bench.bench_proxy import create_topics, round_trips, target
    from bench.procs import cpu_s

    with target("fetchlat", Path(tempfile.mkdtemp())) as (port, pid, broker_port):
        topic = f"ab-{uuid.uuid4().hex[:6]}"
        create_topics(f"127.0.0.1:{broker_port}", topic, topic + "-idle")
        c0 = cpu_s(pid)
        out = asyncio.run(round_trips(port, topic, n, direct_port=broker_port))
        cpu = cpu_s(pid) - c0
    res = {k: round(v["added_p50_us"], 1) for k, v in out.items() if "added_p50_us" in v}
    res["proxy cpu s"] = round(cpu, 2)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--other", help="the other checkout (with its own .venv)")
    ap.add_argument("--stamps-ab", action="store_true", help="this checkout, kernel stamps against clock stamps")
    ap.add_argument("--bare-kernel", action="store_true", help="with --stamps-ab: hold no stamping socket")
    ap.add_argument("--traces", action="store_true", help="every proxy writes traces (FETCHLAT_TRACE_DIR)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--round-trips", type=int, default=2000)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a single run, in this checkout
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one_run(a.round_trips)))
        return
    keeper = None
    if a.stamps_ab and not a.bare_kernel:
        sys.path.insert(0, str(HERE))
        from fetchlat.proxy.stamps import keep_stamping_on

        keeper = keep_stamping_on()
    if a.stamps_ab:
        runs = [("kernel", HERE, {"FETCHLAT_STAMPS": "kernel"}), ("clock", HERE, {"FETCHLAT_STAMPS": "clock"})]
    else:
        runs = [("this", HERE, {}), ("other", Path(a.other), {})]
    for i in range(a.pairs):
        for name, root, env in (runs if i % 2 == 0 else runs[::-1]):
            if a.traces:
                env = {**env, "FETCHLAT_TRACE_DIR": tempfile.mkdtemp(prefix="ab-traces-")}
            r = subprocess.run([str(root / ".venv" / "bin" / "python"), str(HERE / "bench" / "ab_round_trips.py"),
                                "--one", "--round-trips", str(a.round_trips)], cwd=root, capture_output=True,
                               text=True, timeout=600, env={**os.environ, **env})
            line = r.stdout.strip().splitlines()[-1] if r.returncode == 0 else r.stderr[-300:]
            print(f"pair {i + 1} {name:6s} ({root}): {line}", flush=True)
    if keeper is not None:
        keeper.close()


if __name__ == "__main__":
    main()
