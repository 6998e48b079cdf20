"""Where does the proxy's CPU go? py-spy samples the real proxy process while the bench's
produce and consume workloads run through it (fresh Tansu), then prints the functions with
the most samples, self and inclusive, and writes the raw collapsed stacks (flamegraph input).

    python bench/profile_proxy.py [--records 100000] [--batch-size 16384] [--linger-ms 5]
                                  [--round-trips 5000] [--out bench-profile] [--rate 250]

The third phase is the small round trips (ApiVersions, Metadata, Fetch max_wait 0, Produce of
one record, one at a time): where the added latency per request goes. py-spy sees Python frames
only (time in uvloop's C code and the kernel lands on ``Runner.run``), so when Linux ``perf`` is
installed the phases are also sampled with it (DWARF call graphs) and split by library (the
CPython interpreter against the kernel's socket work and uvloop) and by owning function: each
sample charged to the nearest compiled fetchlat function, uvloop function or interpreted frame
above it, so malloc, dict lookups and syscalls count for the code that caused them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import create_topics, long_polls, perf, round_trips, target
from bench.procs import cpu_s


def top(collapsed: Path, n: int) -> tuple[list[tuple[str, int]], list[tuple[str, int]], int]:
    """(self, inclusive, total samples) from py-spy's raw collapsed stacks."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        k = int(count)
        total += k
        frames = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")" if " (" in f else f
                  for f in stack.split(";")]
        own[frames[-1]] += k
        for f in set(frames):
            incl[f] += k
    return own.most_common(n), incl.most_common(n), total


def by_library(data: Path) -> list[str]:
    """``perf report --sort dso``: the share of CPU samples per library (libpython = interpreting)."""
    rep = subprocess.run(["perf", "report", "-i", str(data), "--sort", "dso", "--stdio", "--no-children", "-g", "none"],
                         capture_output=True, text=True, check=False)
    return [ln.strip() for ln in rep.stdout.splitlines() if ln.strip() and not ln.startswith("#") and "%" in ln]


# A frame that owns the work below it: a compiled function of fetchlat (mypyc names them
# CPyDef_<module>___<function>), one of uvloop's (Cython: __pyx_), or interpreted Python.
OWNERS = ("CPyDef_", "CPyPy_", "__pyx_f", "__pyx_pw", "_PyEval_EvalFrameDefault")


def by_owner(data: Path, n: int) -> list[tuple[str, float]]:
    """Each sample charged to the nearest owning frame above it (``OWNERS``): what the CPython
    runtime and the kernel do on a compiled function's behalf (allocation, lookups, the
    syscalls of a read or a write) counts as that function's. Needs the DWARF call graphs the
    phases are recorded with. (function, share of samples)."""
    script = subprocess.run(["perf", "script", "-i", str(data), "-F", "ip,sym"], capture_output=True, text=True,
                            check=False)
    owners: collections.Counter[str] = collections.Counter()
    total = 0
    owner: str | None = None
    in_sample = False
    for line in script.stdout.splitlines():
        if not line.strip():
            if in_sample:
                owners[owner or "(kernel or C without an owner)"] += 1
                total += 1
            in_sample, owner = False, None
            continue
        in_sample = True
        parts = line.split()
        sym = parts[1].split("+0x")[0] if len(parts) > 1 else "?"
        if owner is None and sym.startswith(OWNERS):
            owner = sym
    return [(name, k / max(total, 1)) for name, k in owners.most_common(n)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--batch-size", default="16384")
    ap.add_argument("--linger-ms", default="5")
    ap.add_argument("--round-trips", type=int, default=5000, help="per request type")
    ap.add_argument("--rate", default="250", help="py-spy samples per second")
    ap.add_argument("--out", default="bench-profile")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fetchlat-profile-"))
    with target("fetchlat", work) as (port, pid, _broker):
        assert pid is not None
        bootstrap = f"127.0.0.1:{port}"
        topic = f"p-{uuid.uuid4().hex[:6]}"
        create_topics(bootstrap, topic)
        for phase in ("produce", "consume", "round-trips"):
            raw = out / f"{phase}.collapsed"
            rec = subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", args.rate, "--format", "raw",
                                    "--output", str(raw), "--nonblocking"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            native = None
            if shutil.which("perf"):
                native = subprocess.Popen(["perf", "record", "-F", "499", "--call-graph", "dwarf,16384", "-p",
                                           str(pid), "-o", str(out / f"{phase}.perf.data")],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            c0 = cpu_s(pid)
            if phase == "produce":
                perf("produce", "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(args.records),
                     "--record-size", "1024", "--acks", "1", "--batch-size", args.batch_size,
                     "--linger-ms", args.linger_ms)
            elif phase == "round-trips":
                asyncio.run(round_trips(port, topic, args.round_trips))
            else:
                perf("consume", "--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(args.records),
                     "--timeout", "20000", "--group", f"g-{topic}")
            cpu = cpu_s(pid) - c0
            rec.send_signal(signal.SIGINT)
            rec.wait(30)
            if native is not None:
                native.send_signal(signal.SIGINT)
                native.wait(60)
            own, incl, total = top(raw, args.top)
            if phase == "round-trips":
                n = 4 * args.round_trips + long_polls(args.round_trips)
                print(f"\n== {phase}: proxy CPU {cpu:.2f} s for {n} round trips = {1e6 * cpu / n:.1f} µs each; "
                      f"{total} samples (idle included)")
            else:
                gb = args.records * 1024 / 1e9
                print(f"\n== {phase}: proxy CPU {cpu:.2f} s for {gb:.3f} GB = {cpu / gb:.2f} CPU-s/GB; "
                      f"{total} samples (idle included)")
            print("  self%   function")
            for name, k in own:
                print(f"  {100 * k / total:5.1f}   {name}")
            print("  incl%   function")
            for name, k in incl:
                print(f"  {100 * k / total:5.1f}   {name}")
            if native is not None:
                print("  perf: CPU samples by library")
                for line in by_library(out / f"{phase}.perf.data")[:8]:
                    print(f"  {line}")
                print("  perf: CPU samples by owning function (the runtime's and the kernel's work charged to it)")
                for name, share in by_owner(out / f"{phase}.perf.data", args.top):
                    print(f"  {100 * share:5.1f}   {name}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
