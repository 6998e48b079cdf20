"""How late the event loop wakes while another thread renders a Prometheus scrape: through
prometheus_client's ``generate_latest`` at CPython's default switch interval (5 ms) and at the
proxy's (``proxy/interpreter.py``: 1 ms), and through the proxy's own renderer
(``metrics/exposition.py``, the same bytes) at 1 ms.

A thread renders a registry the size of a busy sidecar's (fetchlat's families: latency buckets,
series per broker, kind and client: about 4 500 lines, as a 3-broker soak sidecar's /metrics)
every ``--every-s``; the main thread runs a uvloop loop that sleeps 1 ms at a time and records how
late it wakes. The three settings take turns, ``--rounds`` times each.

    python bench/scrape_gil.py [--wakes 1000] [--rounds 3] [--every-s 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collections.abc import Callable

import uvloop
from fetchlat.metrics.exposition import render
from fetchlat.metrics.fast import FastHistogram
from fetchlat.metrics.prom import LATENCY_BUCKETS
from fetchlat.proxy.interpreter import SWITCH_INTERVAL_S
from fetchlat.verify.request_log import quantile as q
from prometheus_client import CollectorRegistry, generate_latest

DEFAULT_SWITCH_S = sys.getswitchinterval()  # CPython's (5 ms)


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    for name in ("total", "wait", "local"):
        h = FastHistogram(f"bench_{name}_seconds", name, ["broker", "kind", "client"], buckets=LATENCY_BUCKETS,
                          registry=reg)
        for broker in range(3):
            for kind in ("consumer", "follower", "share"):
                for client in range(6):
                    h.labels(str(broker), kind, f"client-{client}").observe(0.001 * (client + 1))
    return reg


def lateness(reg: CollectorRegistry, switch_s: float, renderer: Callable[[CollectorRegistry], bytes], wakes: int,
             every_s: float) -> list[float]:
    stop = threading.Event()

    def scraper() -> None:
        while not stop.is_set():
            renderer(reg)
            stop.wait(every_s)

    async def loop() -> list[float]:
        late = []
        for _ in range(wakes):
            t = time.perf_counter_ns()
            await asyncio.sleep(0.001)
            late.append((time.perf_counter_ns() - t) / 1e6 - 1.0)
        return sorted(late)

    sys.setswitchinterval(switch_s)
    th = threading.Thread(target=scraper)
    th.start()
    try:
        return uvloop.run(loop())
    finally:
        stop.set()
        th.join()
        sys.setswitchinterval(DEFAULT_SWITCH_S)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wakes", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--every-s", type=float, default=0.05)
    args = ap.parse_args()
    reg = registry()
    assert render(reg) == generate_latest(reg)
    for name, renderer in (("generate_latest", generate_latest), ("render", render)):
        t = time.perf_counter()
        text = renderer(reg)
        took_ms, lines = (time.perf_counter() - t) * 1e3, text.count(b"\n")
        print(f"one {name}: {took_ms:.1f} ms, {lines} lines, {len(text)} bytes")
    settings = {f"generate_latest, switch {DEFAULT_SWITCH_S * 1e3:.0f} ms": (DEFAULT_SWITCH_S, generate_latest),
                f"generate_latest, switch {SWITCH_INTERVAL_S * 1e3:.0f} ms": (SWITCH_INTERVAL_S, generate_latest),
                f"render, switch {SWITCH_INTERVAL_S * 1e3:.0f} ms": (SWITCH_INTERVAL_S, render)}
    rows: dict[str, list[list[float]]] = {k: [] for k in settings}
    for _ in range(args.rounds):
        for name, (switch_s, renderer) in settings.items():
            late = lateness(reg, switch_s, renderer, args.wakes, args.every_s)
            rows[name].append(late)
            print(f"{name}: wake-up late by p50 {q(late, 0.5):.2f}, p99 {q(late, 0.99):.2f}, max {late[-1]:.2f} ms")
    for name, runs in rows.items():
        print(f"median of {args.rounds}, {name}: p50 {statistics.median(q(r, 0.5) for r in runs):.2f} ms, "
              f"p99 {statistics.median(q(r, 0.99) for r in runs):.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
