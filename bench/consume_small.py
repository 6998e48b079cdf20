"""What consuming one-record batches costs the proxy, per GB, with and without the native core:
librdkafka (``bench/rdkafka_client.py``, no Python per record) produces records of each size
one per request through the path, then consumes them back; the proxy's CPU during the consume,
per GB of record values. Paths, in rotating order per trial, each to a fresh Tansu: the relay
(``bench/relay.py``, zero decoding: the floor for a proxy built the way fetchlat is), haproxy,
fetchlat on the event loop's road (``fetchlat``, relay off), the same with traces on as deployed
(``fetchlat+traces``: a row per request), fetchlat without its native core
(``FETCHLAT_NATIVE=0``), and fetchlat as a sidecar with ``relay: native``, its connections carried
by the native core's relay (``fetchlat-relay``, ``fetchlat-relay+traces``).

    python bench/consume_small.py [--trials 3] [--sizes 100,1024] [--mb 10] [--paths relay,haproxy,...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_proxy import NO_CORE, RELAYED, RELAYED_TRACED, TRACED, create_topics, rdkafka, target
from bench.procs import cpu_s

KINDS = ("relay", "haproxy", "fetchlat", TRACED, NO_CORE, RELAYED, RELAYED_TRACED)
BASELINES = ("relay", "haproxy")


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
    ap.add_argument("--paths", default=",".join(KINDS), help="comma-separated, the baselines (relay, haproxy) "
                    "always among them: " + ", ".join(KINDS))
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = tuple(k for k in KINDS if k in BASELINES or k in args.paths.split(","))
    got: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as d:
        for t in range(args.trials):
            order = kinds[t % len(kinds):] + kinds[:t % len(kinds)]
            for kind in order:
                for size in sizes:
                    got.setdefault((kind, size), []).append(one(kind, size, args.mb, Path(d)))
                    print(f"trial {t + 1} {kind:16s} {size:5d} B: {got[(kind, size)][-1]:.3f} CPU-s/GB", flush=True)
    print(f"\nproxy CPU-s per GB consumed, one-record batches (median of {args.trials}, min-max):")
    for size in sizes:
        med = {k: statistics.median(got[(k, size)]) for k in kinds}
        cells = "  ".join(f"{k} {med[k]:.3f} ({min(got[(k, size)]):.3f}-{max(got[(k, size)]):.3f})" for k in kinds)
        print(f"  {size:5d} B records: {cells}")
        for k in kinds:
            if k not in BASELINES:
                print(f"  {'':5s}   {k} / relay {med[k] / med['relay']:.2f}, / haproxy {med[k] / med['haproxy']:.2f}")
        for on, off in ((TRACED, "fetchlat"), (RELAYED_TRACED, RELAYED)):
            if on in med and off in med:
                print(f"  {'':5s}   traces on / off ({off}) {med[on] / med[off]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
