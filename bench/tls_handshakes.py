"""New TLS connections per CPU-second of the proxy: haproxy terminating TLS itself against fetchlat
as the broker's sidecar with ``--tls-cert`` (its clients' sessions the native core's from their
first byte, ``fetchlat-relay-tls+traces``, or the event loop's, ``fetchlat-tls+traces``), in front
of a fresh Tansu each, in rotating order. Each connection does its TLS handshake (the client
offers TLS 1.3 with its default key exchange), one ApiVersions round trip, and closes; the
proxy's CPU over ``--connections`` of them, one at a time, is counted.

    python bench/tls_handshakes.py [--connections 500] [--trials 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fetchlat.protocol import apis

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from bench.bench_proxy import HAPROXY_TLS, RELAYED_TLS_TRACED, TLS_TRACED, client_tls, target  # noqa: E402
from bench.kafka_client import AsyncClient  # noqa: E402
from bench.procs import cpu_s  # noqa: E402

PATHS = (HAPROXY_TLS, RELAYED_TLS_TRACED, TLS_TRACED)


async def connections(port: int, n: int, work: Path) -> None:
    tls = client_tls(work)
    for _ in range(n):
        c = await AsyncClient.connect(port, "bench-tls", tls)
        await c.call(apis.API_VERSIONS, 3, {"ClientSoftwareName": "b", "ClientSoftwareVersion": "1"})
        await c.close()


def one(kind: str, n: int, work: Path) -> float:
    """Connections per CPU-second of the proxy on path ``kind``."""
    with target(kind, work) as (port, pid, _broker):
        assert pid is not None
        asyncio.run(connections(port, 20, work))  # warm: the first handshakes load what they need
        time.sleep(1.5)
        cpu0 = cpu_s(pid)
        asyncio.run(connections(port, n, work))
        time.sleep(2.5)  # the connections' ends and their items drained (a tick and a half)
        return n / (cpu_s(pid) - cpu0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connections", type=int, default=500)
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fetchlat-tls-"))
    rates: dict[str, list[float]] = {k: [] for k in PATHS}
    began = time.monotonic()
    for trial in range(args.trials):
        order = PATHS[trial % len(PATHS):] + PATHS[:trial % len(PATHS)]
        for kind in order:
            rates[kind].append(one(kind, args.connections, work))
            print(f"trial {trial + 1}/{args.trials} {kind}: {rates[kind][-1]:.0f} connections per CPU-second",
                  file=sys.stderr, flush=True)
    hap = statistics.median(rates[HAPROXY_TLS])
    for kind in PATHS:
        med = statistics.median(rates[kind])
        paired = sorted(r / h for r, h in zip(rates[kind], rates[HAPROXY_TLS], strict=True))
        print(f"{kind:28} {med:8.0f} connections per CPU-second (median of {args.trials}; "
              f"{min(rates[kind]):.0f}-{max(rates[kind]):.0f})   {med / hap:.2f}x haproxy's; "
              f"each trial over haproxy's of the same trial: median {statistics.median(paired):.2f}x "
              f"({paired[0]:.2f}-{paired[-1]:.2f})")
    print(f"({args.connections} connections a trial, each a TLS handshake, one ApiVersions and a close; "
          f"{(time.monotonic() - began) / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
