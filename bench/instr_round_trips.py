"""The proxy's instructions per small round trip, counted by valgrind (callgrind): a figure a
busy machine does not move, where CPU seconds do. The proxy (this checkout's build, or
``--other``'s) runs under callgrind in front of a fresh Tansu, counting only while each request
type's round trips run (``bench_proxy.round_trips``: ApiVersions, Metadata, Fetch max_wait 0,
Produce of one record, and ListOffsets, the one the native core settles alone, one at a time);
everything else (start-up, calibration, the warm-up) is
left out.

    python bench/instr_round_trips.py [--round-trips 300] [--other CHECKOUT] [--top 25]
    python bench/instr_round_trips.py --paths fetchlat,fetchlat+traces,relay,haproxy --cache-sim

``--paths`` counts other paths in front of the same kind of broker, each under callgrind the same
way: fetchlat with traces on, fetchlat on the routed road (``fetchlat-routed``: the native core
reading every connection first, ``protocol/routed.py``), the zero-decode Python relay
(``bench/relay.py``), haproxy.

Prints, per request type and build, the proxy's instructions per round trip (user space: the
interpreter, the compiled modules, uvloop, libc; a system call counts as the instructions that
make it), and for one type (``--profile``, ApiVersions) the compiled functions with the most
instructions per round trip, inclusive (the pure-Python build's functions are the interpreter's
to callgrind). The counts are instructions, not time: cache misses and the kernel's side are not
in them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def _totals(out: Path) -> dict[str, int]:
    """The events a callgrind dump counted: instructions (Ir), and with ``--cache-sim`` the
    simulated cache misses (I1mr, D1mr, D1mw: first level; ILmr, DLmr, DLmw: last level)."""
    events: list[str] = []
    for line in out.read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        if line.startswith("totals:") or line.startswith("summary:"):
            return dict(zip(events, (int(v) for v in line.split()[1:]), strict=False))
    raise ValueError(f"no totals in {out}")


def one_run(n: int, top: int, profile: str, cache_sim: bool, kind: str = "fetchlat") -> dict[str, object]:
    """In this checkout: a proxy (``kind``, a ``bench_proxy`` path) under callgrind, a dump per
    request type."""
    sys.path.insert(0, str(HERE))
    work = Path(tempfile.mkdtemp(prefix="instr-"))
    prefix = work / "callgrind.out"
    os.environ["FETCHLAT_BENCH_WRAP"] = (f"valgrind --tool=callgrind --instr-atstart=no --quiet "
                                         f"--cache-sim={'yes' if cache_sim else 'no'} "
                                         f"--callgrind-out-file={prefix}.%p")
    from bench.bench_proxy import create_topics, round_trips, target

    with target(kind, work) as (port, pid, broker_port):
        assert pid is not None
        topic = f"instr-{uuid.uuid4().hex[:6]}"
        create_topics(f"127.0.0.1:{broker_port}", topic, topic + "-idle")

        def around(name: str, start: bool) -> None:
            if start:
                subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, capture_output=True)
                subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
            else:
                subprocess.run(["callgrind_control", "-d", re.sub(r"\W", "_", name), str(pid)], check=True,
                               capture_output=True)
                subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True, capture_output=True)

        # round_trips takes every type first, uncounted (WARM_ROUND_TRIPS): every road is taken before counting
        asyncio.run(round_trips(port, topic, n, around=around, list_offsets=True))
    dumps = sorted(work.glob("callgrind.out.*.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
    names = ["ApiVersions", "Metadata", "Fetch(max_wait 0)", "Produce(1 record)", "ListOffsets"]
    res: dict[str, object] = {}
    for name, dump in zip(names, dumps, strict=False):
        got = _totals(dump)
        res[name] = round(got["Ir"] / n)
        if cache_sim:
            res[name + " misses"] = {k: round(v / n) for k, v in got.items() if k != "Ir"}
    chosen = [d for name, d in zip(names, dumps, strict=False) if name.startswith(profile)]
    if chosen:
        ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(chosen[0])],
                             capture_output=True, text=True).stdout
        seen: set[str] = set()
        rows = []
        for ln in ann.splitlines():  # the compiled modules' functions (mypyc names them CPyDef_<module>___<name>)
            m = re.match(r"\s*([\d,]+) \(.*CPyDef_(\w+)", ln)
            if m and m.group(2) not in seen:
                seen.add(m.group(2))
                rows.append(f"{int(m.group(1).replace(',', '')) / n:9,.0f}  {m.group(2)}")
        res["top_inclusive"] = rows[:top]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--round-trips", type=int, default=300)
    ap.add_argument("--other", help="another checkout (with its own .venv), counted after this one")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--profile", default="ApiVersions", help="the request type whose functions are listed "
                    "(ApiVersions, Metadata, Fetch, Produce)")
    ap.add_argument("--cache-sim", action="store_true",
                    help="also simulate the caches: first- and last-level misses per round trip")
    ap.add_argument("--paths", default="fetchlat",
                    help="comma-separated bench_proxy paths: fetchlat, fetchlat+traces, fetchlat-routed, relay, "
                         "haproxy (--other counts its fetchlat paths only)")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    paths = [p.strip() for p in a.paths.split(",") if p.strip()]
    if a.one:
        print(json.dumps(one_run(a.round_trips, a.top, a.profile, a.cache_sim, paths[0])))
        return
    for root in [HERE, *([Path(a.other)] if a.other else [])]:
        for kind in paths:
            if root != HERE and not kind.startswith("fetchlat"):
                continue
            _count(root, kind, a)


def _count(root: Path, kind: str, a: argparse.Namespace) -> None:
    r = subprocess.run([str(root / ".venv" / "bin" / "python"), str(HERE / "bench" / "instr_round_trips.py"),
                        "--one", "--round-trips", str(a.round_trips), "--top", str(a.top), "--paths", kind,
                        "--profile", a.profile, *(["--cache-sim"] if a.cache_sim else [])], cwd=root,
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        print(f"{root} {kind}: failed: {r.stderr[-1500:]}")
        return
    res = json.loads(r.stdout.strip().splitlines()[-1])
    tops = res.pop("top_inclusive", [])
    misses = {k: res.pop(k) for k in [k for k in res if k.endswith(" misses")]}
    print(f"{root} {kind}: instructions per round trip: " + ", ".join(f"{k} {v:,}" for k, v in res.items()),
          flush=True)
    for k, v in misses.items():
        print(f"    {k} per round trip: " + ", ".join(f"{e} {c:,}" for e, c in v.items()), flush=True)
    for line in tops:
        print("   ", line)


if __name__ == "__main__":
    main()
