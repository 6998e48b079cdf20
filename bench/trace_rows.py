"""What a trace row costs on each road, in-process (``metrics/rows.py``): the native core's
columns of machine values (``native/src/columns.rs``) against the Python road's lists.

- **gather**, on the event loop: a fetch's rows (its exchange and its partitions' rows), a
  produce's and another request's appended through ``TraceColumns``, as the observer does;
- **convert**, on the writer thread: the batch's columns made Arrow arrays (``to_arrays``), the
  native buffers wrapped, the Python lists converted. Writing Parquet is the same for both
  (``python bench/trace_write.py``).

    python bench/trace_rows.py [--exchanges 12288] [--trials 5]

µs per exchange, best of the trials (a fetch with two partitions, a produce and an ApiVersions
in turn: three exchanges, five rows).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat import native
from fetchlat.metrics.model import FetchSample, PartitionSample, ProduceSample
from fetchlat.metrics.rows import NAMES, TraceColumns, to_arrays
from fetchlat.metrics.vocabulary import Kind, Outcome, WaitSource


def fetch_sample(i: int) -> FetchSample:
    return FetchSample(
        kind=Kind.CONSUMER, replica_id=-1, client_id=f"consumer-{i % 20}", api_version=16, max_wait_ms=500,
        min_bytes=1, request_bytes=120, response_bytes=2_400, records=3, error_code=0, throttle_ms=0,
        total_ns=480_000 + i, first_byte_ns=400_000, transfer_ns=80_000, wait_ns=0, wait_source=WaitSource.INFERRED,
        outcome=Outcome.IMMEDIATE, basis="known_log_end", confident=True, local_ns=480_000 + i, e2e_ns=520_000 + i,
        wake_lag_ns=None, partitions=tuple(PartitionSample(
            topic=f"orders-{p}", partition=p, fetch_offset=1_000 + i, high_watermark=1_003 + i, error_code=0,
            records=2, bytes=1_200, record_latency_ns=2_000_000 + i) for p in range(2)))


def gather(cols: TraceColumns, n: int, fetches: list[FetchSample], produces: list[ProduceSample]) -> None:
    ts = 1_700_000_000 * 10**9
    for i in range(n // 3):
        cols.fetch(ts + i, "sidecar-0", "0", i % 64, i, fetches[i % 64], [])
        cols.produce(ts + i, "sidecar-0", "0", i % 64, i, 60, produces[i % 64])
        cols.other(ts + i, "sidecar-0", "0", i % 64, api_key=18, api_version=3, client_id="rdkafka",
                   correlation_id=i, response_bytes=400, total_ns=200_000 + i)


def measure(road: bool, n: int, trials: int) -> tuple[float, float]:
    fetches = [fetch_sample(i) for i in range(64)]
    produces = [ProduceSample(client_id=f"producer-{i % 10}", acks=-1, api_version=11, records=1, accepted=1,
                              request_bytes=180, error_code=0, total_ns=900_000 + i, throttle_ms=0,
                              partitions=(("orders-0", i % 2, 5_000 + i, 1),)) for i in range(64)]
    best_gather = best_convert = float("inf")
    for _ in range(trials):
        cols = TraceColumns(None, batch_rows=10 * n, native_columns=road)
        gc.collect()
        t0 = time.perf_counter_ns()
        gather(cols, n, fetches, produces)
        t1 = time.perf_counter_ns()
        batch = cols.take()
        for table in NAMES:
            to_arrays(batch, table)
        t2 = time.perf_counter_ns()
        best_gather = min(best_gather, (t1 - t0) / n / 1e3)
        best_convert = min(best_convert, (t2 - t1) / n / 1e3)
    return best_gather, best_convert


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exchanges", type=int, default=12_288)
    ap.add_argument("--trials", type=int, default=5)
    args = ap.parse_args()
    from fetchlat.proxy.build import hot_path

    roads = [("python lists", False)] + ([("native columns", True)] if native.core() is not None else [])
    print(f"µs per exchange ({args.exchanges} exchanges, best of {args.trials}; hot path {hot_path()})")
    figures = {}
    for name, road in roads:
        g, c = figures[name] = measure(road, args.exchanges, args.trials)
        print(f"  {name:15s} gather {g:6.2f}   convert {c:6.2f}   both {g + c:6.2f}")
    if len(figures) == 2:
        (pg, pc), (ng, nc) = figures["python lists"], figures["native columns"]
        print(f"  python / native: gather {pg / ng:.2f}x, convert {pc / nc:.2f}x, both {(pg + pc) / (ng + nc):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
