"""How long the event loop's thread waits for the interpreter while the trace writer converts
batches: a thread converts full batches (4 096 rows of each table) to Arrow, as the writer does,
while the main thread sleeps 1 ms at a time and records how late it wakes. Converted at once
(the way before), column by column letting go of the GIL after each (``yield_gil``), and after
columns once it has held it half a millisecond (``GilTurns``, the writer's way), in turns; and the
native core's columns (``native/src/columns.rs``), whose buffers are wrapped, not converted.

    python bench/trace_gil.py [--wakes 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat import native
from fetchlat.metrics.model import ProduceSample
from fetchlat.metrics.rows import DEFAULT_BATCH_ROWS, TraceBatch, TraceColumns, to_arrays
from fetchlat.proxy.traces import GilTurns, yield_gil


def batch(native_columns: bool = False) -> TraceBatch:
    cols = TraceColumns(None, native_columns=native_columns)
    for i in range(DEFAULT_BATCH_ROWS):
        cols.produce(time.time_ns(), "10.0.0.1:9092", "0", i % 50, i, 80, ProduceSample(
            client_id=f"client-{i % 30}", acks=-1, api_version=11, records=1, accepted=True, request_bytes=120,
            error_code=0, total_ns=123_456 + i, throttle_ms=0, partitions=(("topic-a", i % 3, 5 + i, 1),)))
    return cols.take()


def overruns(b: TraceBatch, between: object, wakes: int) -> tuple[list[float], float]:
    """How late the main thread's 1 ms sleeps woke (ms, sorted), and the writer's CPU per
    batch converted (µs)."""
    stop = threading.Event()
    cpu: list[int] = []

    def writer() -> None:
        while not stop.is_set():
            if isinstance(between, GilTurns):
                between.begin()
            c0 = time.thread_time_ns()
            for table in ("exchanges", "partitions"):
                to_arrays(b, table, between)  # type: ignore[arg-type]
            cpu.append(time.thread_time_ns() - c0)
            time.sleep(0.02)

    th = threading.Thread(target=writer)
    th.start()
    late = []
    try:
        for _ in range(wakes):
            t = time.perf_counter_ns()
            time.sleep(0.001)
            late.append((time.perf_counter_ns() - t) / 1e6 - 1.0)
    finally:
        stop.set()
        th.join()
    return sorted(late), sum(cpu) / max(1, len(cpu)) / 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wakes", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    roads: list[tuple[str, TraceBatch, object]] = [
        ("python, whole batch", batch(), None), ("python, every column", batch(), yield_gil),
        ("python, every 0.5 ms", batch(), GilTurns())]
    if native.core() is not None:  # the native columns: buffers wrapped, no value converted
        roads += [("native, every column", batch(native_columns=True), yield_gil),
                  ("native, every 0.5 ms", batch(native_columns=True), GilTurns())]
    for r in range(args.rounds):
        for name, b, between in roads:
            late, cpu_us = overruns(b, between, args.wakes)
            p50, p99, p999 = (late[min(len(late) - 1, int(p * len(late)))] for p in (0.5, 0.99, 0.999))
            print(f"round {r + 1} {name:20s} loop wake late: p50 {p50:.3f} p99 {p99:.3f} "
                  f"p99.9 {p999:.3f} max {late[-1]:.3f} ms; writer {cpu_us:7.0f} µs CPU a batch", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
