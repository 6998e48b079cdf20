"""Load: N concurrent client connections through the real proxy to a real Tansu, each doing
ApiVersions, Metadata and then back-to-back long-poll fetches on an idle topic (every
connection parked in the broker at once), while one in ten also produces a record a second.
Reports errors, round trips, proxy RSS and CPU, and the proxy's event-loop lag p99.

    make load            # python bench/load_connections.py --connections 1000 --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat.protocol import apis

from bench.kafka_client import AsyncClient, fetch_request
from bench.procs import broker_and_proxy, cpu_s, histogram, quantile, rss_mb
from testkit.frames import record_batch


async def one(port: int, i: int, topic: str, deadline: float, stats: dict[str, list[float]], errors: list[str],
              started: asyncio.Event, counter: list[int], total: int) -> None:
    try:
        c = await AsyncClient.connect(port, f"load-{i}")
        _, rtt = await c.call(apis.API_VERSIONS, 3, {"ClientSoftwareName": "load", "ClientSoftwareVersion": "1"})
        stats["api_versions"].append(rtt)
        md, rtt = await c.call(apis.METADATA, 12, {"Topics": [{"Name": topic, "TopicId": uuid.UUID(int=0)}],
                                                     "AllowAutoTopicCreation": False})
        stats["metadata"].append(rtt)
        tid = md["Topics"][0]["TopicId"]
        counter[0] += 1
        if counter[0] == total:
            started.set()
        await started.wait()  # every connection open before the measured phase
        produce = i % 10 == 0
        next_produce = time.monotonic()
        while time.monotonic() < deadline:
            if produce and time.monotonic() >= next_produce:
                next_produce += 1.0
                _, rtt = await c.call(apis.PRODUCE, 9, {
                    "TransactionalId": None, "Acks": 1, "TimeoutMs": 5000, "TopicData": [
                        {"Name": topic + "-fed", "PartitionData": [{"Index": 0, "Records": RECORD_BATCH}]}]})
                stats["produce"].append(rtt)
            _, rtt = await c.call(apis.FETCH, 12, fetch_request(topic, tid, 0, 500))
            stats["fetch"].append(rtt)
        await c.close()
    except Exception as exc:  # counted and reported: a load run must say what failed
        errors.append(f"conn {i}: {exc!r}")


RECORD_BATCH = b""


async def run(args: argparse.Namespace) -> dict[str, object]:
    global RECORD_BATCH
    RECORD_BATCH = record_batch()
    from confluent_kafka.admin import AdminClient, NewTopic

    work = Path(tempfile.mkdtemp(prefix="fetchlat-load-"))
    with broker_and_proxy(work) as run:
        topic = f"load-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": run.bootstrap, "log_level": 0})
        for f in admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1)
                                      for t in (topic, topic + "-fed")]).values():
            f.result(timeout=30)
        stats: dict[str, list[float]] = {"api_versions": [], "metadata": [], "fetch": [], "produce": []}
        errors: list[str] = []
        started = asyncio.Event()
        counter = [0]
        rss0, cpu0 = rss_mb(run.proxy_pid), cpu_s(run.proxy_pid)
        t_open = time.monotonic()
        deadline = t_open + args.seconds + 30  # opening 1000 connections is part of the run
        tasks = [asyncio.create_task(one(run.node_port, i, topic, deadline, stats, errors, started, counter,
                                         args.connections)) for i in range(args.connections)]
        await asyncio.wait_for(started.wait(), 60)
        opened_s = time.monotonic() - t_open
        deadline_measured = time.monotonic() + args.seconds
        lag_before = histogram(run.metrics_text(), "fetchlat_event_loop_lag_seconds")
        rss_curve = []
        while time.monotonic() < deadline_measured:
            await asyncio.sleep(1.0)
            rss_curve.append(round(rss_mb(run.proxy_pid), 1))
        text = run.metrics_text()
        lag_after = histogram(text, "fetchlat_event_loop_lag_seconds")
        active = sum(float(line.split()[-1]) for line in text.splitlines()
                     if line.startswith("fetchlat_connections_active"))
        cpu1 = cpu_s(run.proxy_pid)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def pct(xs: list[float], q: float) -> float:
        return round(sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000, 2) if xs else float("nan")

    return {
        "connections": args.connections, "seconds": args.seconds, "opened_in_s": round(opened_s, 2),
        "proxy_connections_active_at_end": active, "errors": len(errors), "first_errors": errors[:5],
        "requests": {k: len(v) for k, v in stats.items()},
        "round_trip_ms": {k: {"p50": pct(v, 0.5), "p99": pct(v, 0.99)} for k, v in stats.items()},
        "fetch_rate_per_s": round(len(stats["fetch"]) / (args.seconds + opened_s), 1),
        "proxy_rss_mb": {"before": round(rss0, 1), "max": max(rss_curve), "end": rss_curve[-1],
                         "median": statistics.median(rss_curve)},
        "proxy_cpu_s": round(cpu1 - cpu0, 2),
        "event_loop_lag_p99_s_at_most": quantile(lag_after, 0.99, lag_before),
        "event_loop_lag_p50_s_at_most": quantile(lag_after, 0.5, lag_before),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = asyncio.run(run(args))
    print(json.dumps(out, indent=2))
    return 0 if out["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
