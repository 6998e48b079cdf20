"""Is the proxy's memory bounded? Two checks on the real proxy and a real Tansu:

1. RSS with N active connections (bench/load_connections.py: ApiVersions, Metadata, then
   back-to-back long polls, one in ten also producing), sampled every second;
2. RSS while fetch responses of ~50 MB pass through, at Fetch v12 (streamed) and v16 (the
   version whose responses may name brokers: streamed past 1 MiB with only the tail held),
   sampled every 10 ms: the peak minus the baseline says whether memory follows response size.
   These come from a FAKE broker (Tansu answers at most ~6 MB per Fetch).

    make bench-memory     # python bench/memory.py --connections 200 --seconds 30 --response-mb 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat.protocol import apis

from bench.kafka_client import AsyncClient, fetch_request
from bench.procs import proxy_in_front, rss_mb


def active_connections(n: int, seconds: float) -> dict[str, Any]:
    r = subprocess.run([sys.executable, str(Path(__file__).with_name("load_connections.py")), "--connections", str(n),
                        "--seconds", str(seconds)], capture_output=True, text=True, timeout=seconds + 300)
    out = json.loads(r.stdout)
    return {"connections": n, "seconds": seconds, "errors": out["errors"], "requests": out["requests"],
            "proxy_rss_mb": out["proxy_rss_mb"]}


def batches(total_mb: int) -> bytes:
    """``total_mb`` MB of real v2 record batches (1 MiB each, offsets running on), built by
    kafka-python's writer: what a broker returns for a consumer far behind."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    out = []
    value = bytes(range(256)) * 256  # 64 KiB
    for i in range(total_mb):
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                      producer_epoch=-1, base_sequence=-1, batch_size=2 << 20)
        for k in range(16):
            b.append(k, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
        raw = bytearray(b.build())
        raw[0:8] = (i * 16).to_bytes(8, "big")  # base offset (not covered by the batch CRC)
        out.append(bytes(raw))
    return b"".join(out)


async def big_fetches(port: int, version: int, times: int, max_bytes: int) -> list[int]:
    from testkit.fake_cluster import TOPIC, TOPIC_ID

    c = await AsyncClient.connect(port, "memory")
    sizes = []
    for _ in range(times):
        req = fetch_request(TOPIC, TOPIC_ID, 0, 500)
        req["MaxBytes"] = max_bytes
        req["Topics"][0]["Partitions"][0]["PartitionMaxBytes"] = max_bytes
        resp, _ = await c.call(apis.FETCH, version, req)
        records = resp["Responses"][0]["Partitions"][0]["Records"]  # a Span: where the bytes lay
        sizes.append(records.end - records.start)
    await c.close()
    return sizes


def large_responses(mb: int, times: int) -> dict[str, Any]:
    """Through the real proxy, from a FAKE broker (testkit/fake_cluster.py): Tansu answers
    at most ~6 MB per Fetch, so a 50 MB response cannot come from it here."""
    from testkit.fake_cluster import FakeCluster

    out: dict[str, Any] = {}
    fake = FakeCluster([1], fetch_records=batches(mb))
    fake.start()
    try:
        with proxy_in_front(Path(tempfile.mkdtemp(prefix="fetchlat-memory-")), fake.ports[1], 1) as run:
            for version in (12, 16):
                samples: list[float] = []
                stop = threading.Event()

                def sample(stop: threading.Event = stop, samples: list[float] = samples) -> None:
                    while not stop.is_set():
                        samples.append(rss_mb(run.proxy_pid))
                        stop.wait(0.01)

                base = rss_mb(run.proxy_pid)
                t = threading.Thread(target=sample)
                t.start()
                t0 = time.monotonic()
                sizes = asyncio.run(big_fetches(run.node_port, version, times, (mb + 8) << 20))
                seconds = time.monotonic() - t0
                stop.set()
                t.join()
                out[f"fetch v{version}"] = {
                    "responses": len(sizes), "records_mb_each": round(sizes[0] / 1e6, 1),
                    "rss_before_mb": round(base, 1), "rss_peak_mb": round(max(samples), 1),
                    "rss_growth_mb": round(max(samples) - base, 1), "seconds": round(seconds, 2),
                }
    finally:
        fake.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--response-mb", type=int, default=50)
    ap.add_argument("--times", type=int, default=5)
    args = ap.parse_args()
    result = {"active connections": active_connections(args.connections, args.seconds),
              "large fetch responses": large_responses(args.response_mb, args.times)}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
