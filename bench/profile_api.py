"""Where a request's CPU goes, per API, in the build that runs: 32 connections of one request
type through the real proxy (``bench/request_rate.py``'s load) while Linux ``perf`` samples the
proxy process; the samples split by library (kernel = the socket work every proxy does,
libpython = interpreter and object allocation, ``hot__mypyc`` = fetchlat's compiled code,
uvloop), and the proxy's CPU per request. The zero-decode relay runs the same load beside it.

    python bench/profile_api.py                     # fetchlat (the installed build) and the relay
    FETCHLAT_PURE_PYTHON=1 python bench/profile_api.py --paths fetchlat
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import NODE, create_topics, target
from bench.procs import cpu_s
from bench.request_rate import MIXES, drive, frame

GROUPS = (("kernel", "[kernel"), ("libpython", "libpython"), ("fetchlat compiled", "hot__mypyc"),
          ("uvloop", "loop.cpython"), ("libc", "libc.so"))


def split(data: Path) -> dict[str, float]:
    rep = subprocess.run(["perf", "report", "-i", str(data), "--sort", "dso", "--stdio", "-g", "none"],
                         capture_output=True, text=True, check=False).stdout
    out: dict[str, float] = defaultdict(float)
    for ln in rep.splitlines():
        parts = ln.split()
        if len(parts) < 2 or not parts[0].endswith("%") or ln.lstrip().startswith("#"):
            continue
        share = float(parts[0].rstrip("%"))
        name = next((g for g, key in GROUPS if key in ln), "other")
        out[name] += share
    return dict(out)


def top(data: Path, n: int) -> list[tuple[float, str, str]]:
    """The ``n`` functions with the most self samples: (share %, library, symbol)."""
    rep = subprocess.run(["perf", "report", "-i", str(data), "--sort", "dso,sym", "--stdio", "-g", "none"],
                         capture_output=True, text=True, check=False).stdout
    out: list[tuple[float, str, str]] = []
    for ln in rep.splitlines():
        parts = ln.split()
        if len(parts) < 4 or not parts[0].endswith("%") or ln.lstrip().startswith("#"):
            continue
        lib = next((g for g, key in GROUPS if key in parts[1]), parts[1])
        out.append((float(parts[0].rstrip("%")), lib, parts[-1]))
        if len(out) == n:
            break
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paths", default="fetchlat,relay")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--connections", type=int, default=32,
                    help="1: one request at a time (every request pays a whole wakeup)")
    ap.add_argument("--top", type=int, default=0, help="also print the N functions with the most self samples")
    a = ap.parse_args()
    import uvloop

    uvloop.install()
    work = Path(tempfile.mkdtemp(prefix="fetchlat-profile-api-"))
    for path in a.paths.split(","):
        with target(path, work) as (port, pid, _):
            assert pid is not None
            topic = f"prof-{uuid.uuid4().hex[:6]}"
            create_topics(f"127.0.0.1:{port}", topic)
            port = port + 1 + NODE if path.startswith("fetchlat") else port
            for mix in MIXES:
                data = frame(mix, topic)
                asyncio.run(drive(port, data, 4, 0.3))
                out = work / f"{path}-{mix.split('(')[0]}.data"
                rec = subprocess.Popen(["perf", "record", "-q", "-F", "999", "-p", str(pid), "-o", str(out)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.2)
                c0 = cpu_s(pid)
                n = asyncio.run(drive(port, data, a.connections, a.seconds))
                cpu = cpu_s(pid) - c0
                rec.send_signal(2)
                rec.wait(30)
                shares = split(out)
                us = cpu / n * 1e6 if n else float("nan")
                cells = "  ".join(f"{g} {shares.get(g, 0.0):4.1f}% ({us * shares.get(g, 0.0) / 100:4.1f} µs)"
                                  for g, _ in GROUPS)
                print(f"{path:8s} {mix:18s} {us:6.1f} µs/request: {cells}", flush=True)
                for share, lib, sym in top(out, a.top):
                    print(f"    {share:5.2f}% {us * share / 100:5.2f} µs  {lib:18s} {sym}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
