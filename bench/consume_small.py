"""What consuming one-record batches costs the proxy, per GB, with and without the native core:
librdkafka (``bench/rdkafka_client.py``, no Python per record) produces records of each size
one per request through the path, then consumes them back; the proxy's CPU during the consume,
per GB of record values. Paths, in rotating order per trial, each to a fresh Tansu: the relay
(``bench/relay.py``, zero decoding: the floor for a proxy built the way fetchlat is), haproxy,
fetchlat as installed, the same with traces on as deployed (``fetchlat+traces``: a row per
request), and fetchlat without its native core (``FETCHLAT_NATIVE=0``).

    python bench/consume_small.py [--trials 3] [--sizes 100,1024] [--mb 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import NO_CORE, TRACED, create_topics, rdkafka, target
from bench.procs import cpu_s

KINDS = ("relay", "haproxy", "fetchlat", TRACED, NO_CORE)


def one(kind: str, size: int, mb: float, work: Path) -> float:
    n = int(mb * 1e6 / size)
    with target(kind, work) as (port, pid, _broker):
        assert pid is not None
        bootstrap = f"127.0.0.1:{port}"
        topic = f"s-{uuid.uuid4().hex[:6]}"
        create_topics(bootstrap, topic)
        rdkafka("produce", bootstrap, topic, str(n), "linger.ms=0", f"batch.size={size + 100}", f"value.bytes={size}")
        c0 = cpu_s(pid)
        rdkafka("consume", bootstrap, topic, str(n), f"value.bytes={size}")
        return (cpu_s(pid) - c0) / (n * size / 1e9)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--mb", type=float, default=10.0, help="MB of record values per measurement")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    got: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as d:
        for t in range(args.trials):
            order = KINDS[t % len(KINDS):] + KINDS[:t % len(KINDS)]
            for kind in order:
                for size in sizes:
                    got.setdefault((kind, size), []).append(one(kind, size, args.mb, Path(d)))
                    print(f"trial {t + 1} {kind:16s} {size:5d} B: {got[(kind, size)][-1]:.3f} CPU-s/GB", flush=True)
    print(f"\nproxy CPU-s per GB consumed, one-record batches (median of {args.trials}, min-max):")
    for size in sizes:
        med = {k: statistics.median(got[(k, size)]) for k in KINDS}
        cells = "  ".join(f"{k} {med[k]:.3f} ({min(got[(k, size)]):.3f}-{max(got[(k, size)]):.3f})" for k in KINDS)
        print(f"  {size:5d} B records: {cells}")
        print(f"  {'':5s}   fetchlat / relay {med['fetchlat'] / med['relay']:.2f}, with traces / relay "
              f"{med[TRACED] / med['relay']:.2f}, without the core / relay {med[NO_CORE] / med['relay']:.2f}, "
              f"fetchlat / haproxy {med['fetchlat'] / med['haproxy']:.2f}, traces on / off "
              f"{med[TRACED] / med['fetchlat']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
