"""Soak: a bounded run (default 5 minutes) of mixed traffic through the real proxy to a real
Tansu -- a confluent-kafka producer, consumers with short and long polls on a fed topic,
kafka-python consuming in a group, and raw long polls on an idle topic -- sampling the
proxy's RSS, CPU and event-loop lag every 10 s. At the end every produced record must have
been consumed by each consumer, and no client may have seen an error.

    make soak            # python bench/soak.py --seconds 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat.protocol import apis

from bench.kafka_client import AsyncClient, fetch_request
from bench.procs import broker_and_proxy, cpu_s, histogram, quantile, rss_mb

SAMPLE_S = 10.0


def producer(bootstrap: str, topic: str, stop: threading.Event, sent: list[int], errors: list[str],
             rate: int) -> None:
    from confluent_kafka import Producer

    def report(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(f"produce: {err}")

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "log_level": 0})
    i = 0
    while not stop.is_set():
        p.produce(topic, value=f"{i:09d}".encode() + b"x" * 500, partition=i % 3, on_delivery=report)
        sent[0] += 1
        i += 1
        p.poll(0)
        time.sleep(1.0 / rate)
    if p.flush(30) != 0:
        errors.append("produce: records left unflushed")


def confluent_consumer(bootstrap: str, topic: str, wait_ms: int, stop: threading.Event, got: dict[str, int],
                       errors: list[str]) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    name = f"confluent-wait-{wait_ms}"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": name, "client.id": name, "fetch.wait.max.ms": wait_ms,
                  "enable.auto.commit": False, "log_level": 0})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    got[name] = 0
    while not stop.is_set():
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error() is not None:
            errors.append(f"{name}: {m.error()}")
        else:
            got[name] += 1
    c.close()


def kafkapython_consumer(bootstrap: str, topic: str, stop: threading.Event, got: dict[str, int],
                         errors: list[str]) -> None:
    from kafka import KafkaConsumer

    name = "kafka-python-group"
    got[name] = 0
    try:
        c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=name, client_id=name,
                          auto_offset_reset="earliest", fetch_max_wait_ms=500, enable_auto_commit=True)
        while not stop.is_set():
            for recs in c.poll(200).values():
                got[name] += len(recs)
        c.close()
    except Exception as exc:  # reported at the end
        errors.append(f"{name}: {exc!r}")


async def long_polls(port: int, topic: str, n: int, stop: threading.Event, count: list[int],
                     errors: list[str]) -> None:
    async def one(i: int) -> None:
        try:
            c = await AsyncClient.connect(port, f"long-poll-{i}")
            md, _ = await c.call(apis.METADATA, 12, {"Topics": [{"Name": topic, "TopicId": uuid.UUID(int=0)}],
                                                       "AllowAutoTopicCreation": False})
            tid = md["Topics"][0]["TopicId"]
            while not stop.is_set():
                await c.call(apis.FETCH, 12, fetch_request(topic, tid, 0, 1000))
                count[0] += 1
            await c.close()
        except Exception as exc:
            errors.append(f"long-poll-{i}: {exc!r}")
    await asyncio.gather(*(one(i) for i in range(n)))


async def run(args: argparse.Namespace) -> dict[str, object]:
    from confluent_kafka.admin import AdminClient, NewTopic

    work = Path(tempfile.mkdtemp(prefix="fetchlat-soak-"))
    with broker_and_proxy(work, "--trace-dir", str(work / "traces")) as r:
        fed, idle = "soak-fed", "soak-idle"
        admin = AdminClient({"bootstrap.servers": r.bootstrap, "log_level": 0})
        for f in admin.create_topics([NewTopic(fed, num_partitions=3, replication_factor=1),
                                      NewTopic(idle, num_partitions=1, replication_factor=1)]).values():
            f.result(timeout=30)
        stop, drained, errors = threading.Event(), threading.Event(), []
        sent, got, polls = [0], {}, [0]
        prod = threading.Thread(target=producer, args=(r.bootstrap, fed, stop, sent, errors, args.rate))
        threads = [threading.Thread(target=kafkapython_consumer, args=(r.bootstrap, fed, drained, got, errors))]
        threads += [threading.Thread(target=confluent_consumer, args=(r.bootstrap, fed, w, drained, got, errors))
                    for w in (100, 500)]
        for t in [prod, *threads]:
            t.start()
        lp = asyncio.create_task(long_polls(r.node_port, idle, args.long_polls, stop, polls, errors))
        curve = []
        t0 = time.monotonic()
        lag_prev = histogram(r.metrics_text(), "fetchlat_event_loop_lag_seconds")
        lag_first = lag_prev
        cpu_prev = cpu_s(r.proxy_pid)
        while time.monotonic() - t0 < args.seconds:
            await asyncio.sleep(SAMPLE_S)
            lag = histogram(r.metrics_text(), "fetchlat_event_loop_lag_seconds")
            cpu = cpu_s(r.proxy_pid)
            curve.append({"t_s": round(time.monotonic() - t0), "rss_mb": round(rss_mb(r.proxy_pid), 1),
                          "cpu_pct": round((cpu - cpu_prev) / SAMPLE_S * 100, 1),
                          "loop_lag_p99_ms_at_most": quantile(lag, 0.99, lag_prev) * 1000,
                          "produced": sent[0], "consumer_lag": {k: sent[0] - v for k, v in got.items()},
                          "long_polls": polls[0]})
            print(json.dumps(curve[-1]), flush=True)
            lag_prev, cpu_prev = lag, cpu
        stop.set()
        await asyncio.wait_for(lp, 30)
        prod.join(60)
        # every record produced must reach every consumer (retries may have written one twice,
        # so equal counts >= produced); bounded wait for the slowest to catch up
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (len(set(got.values())) == 1 and min(got.values()) >= sent[0]):
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)  # and nothing more arrives
        drain_s = round(61 - (deadline - time.monotonic()), 1)
        drained.set()
        for t in threads:
            t.join(60)
        time.sleep(0.1)
        lag_end = histogram(r.metrics_text(), "fetchlat_event_loop_lag_seconds")
        written = [float(x.split()[-1]) for x in r.metrics_text().splitlines()
                   if x.startswith("fetchlat_trace_rows_dropped_total")]
    rss = [c["rss_mb"] for c in curve]
    first_min = rss[: max(1, len(rss) // 5)]
    last_min = rss[-max(1, len(rss) // 5):]
    return {
        "seconds": args.seconds, "errors": len(errors), "first_errors": errors[:5], "produced": sent[0],
        "consumed": got, "catch_up_after_stop_s": drain_s,
        "all_consumed": len(got) == 3 and len(set(got.values())) == 1 and min(got.values()) >= sent[0],
        "long_polls": polls[0], "trace_rows_dropped": written[0] if written else None,
        "rss_mb": {"min": min(rss), "max": max(rss), "first_fifth_mean": round(sum(first_min) / len(first_min), 1),
                   "last_fifth_mean": round(sum(last_min) / len(last_min), 1)},
        "event_loop_lag_p99_ms_at_most": quantile(lag_end, 0.99, lag_first) * 1000,
        "curve": curve,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--rate", type=int, default=50, help="records per second produced (Tansu keeps up with 50)")
    ap.add_argument("--long-polls", type=int, default=50)
    args = ap.parse_args()
    out = asyncio.run(run(args))
    print(json.dumps({k: v for k, v in out.items() if k != "curve"}, indent=2))
    ok = out["errors"] == 0 and out["all_consumed"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
