"""``fetchlat perf consume`` (KIP-628): ``--threads N`` consumers in one group sharing the
totals, the kafka-consumer-perf-test columns, per-thread rows with --show-detailed-stats, and
end-to-end record latency (consume time minus record timestamp) percentiles."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .stats import Recorder, Summary

COLUMNS = ("start.time", "end.time", "data.consumed.in.MB", "MB.sec", "data.consumed.in.nMsg", "nMsg.sec",
           "rebalance.time.ms", "fetch.time.ms", "fetch.MB.sec", "fetch.nMsg.sec")


@dataclass
class ThreadStats:
    thread: int
    start_ns: int = 0
    assigned_ns: int = 0
    end_ns: int = 0
    messages: int = 0
    bytes: int = 0
    e2e: Recorder = field(default_factory=Recorder)


def _partitions(bootstrap: str, topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3}).list_topics(topic, timeout=15)
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        raise SystemExit(f"fetchlat perf consume: topic {topic} not found")
    return len(t.partitions)


def run(args: argparse.Namespace) -> tuple[list[ThreadStats], int, int]:
    from confluent_kafka import Consumer

    parts = _partitions(args.bootstrap_server, args.topic)
    threads = args.threads
    if threads > parts:
        print(f"WARNING: --threads {threads} is more than the {parts} partitions of {args.topic}; "
              f"using {parts} (a consumer without a partition would sit idle)", file=sys.stderr)
        threads = parts
    lock = threading.Lock()
    total = {"messages": 0}
    deadline_idle_ns = int(args.timeout * 1e6)
    stats = [ThreadStats(i) for i in range(threads)]

    def work(st: ThreadStats) -> None:
        c = Consumer({"bootstrap.servers": args.bootstrap_server, "group.id": args.group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "fetch.wait.max.ms": args.fetch_max_wait_ms, "log_level": 3,
                      **dict(kv.split("=", 1) for kv in args.consumer_prop or [])})

        def on_assign(consumer: Any, partitions: Any) -> None:
            if not st.assigned_ns:
                st.assigned_ns = time.monotonic_ns()

        st.start_ns = time.monotonic_ns()
        c.subscribe([args.topic], on_assign=on_assign)
        last_msg = time.monotonic_ns()
        while True:
            with lock:
                if total["messages"] >= args.messages:
                    break
            batch = c.consume(num_messages=500, timeout=0.2)
            now_wall = time.time_ns()
            t = time.monotonic_ns()
            n = b = 0
            for m in batch:
                if m.error() is not None:
                    continue
                n += 1
                b += len(m.value() or b"") + len(m.key() or b"")
                ts_type, ts_ms = m.timestamp()
                if ts_type != 0:
                    st.e2e.add(now_wall - ts_ms * 1_000_000)
            if n:
                last_msg = t
                st.messages += n
                st.bytes += b
                with lock:
                    total["messages"] += n
            elif t - max(last_msg, st.assigned_ns) > deadline_idle_ns and (
                    st.assigned_ns or t - st.start_ns > 6 * deadline_idle_ns):
                break  # idle for --timeout since the last record (or since the assignment)
        st.end_ns = time.monotonic_ns()
        c.close()

    wall0_ms = int(time.time() * 1000)
    ts = [threading.Thread(target=work, args=(st,)) for st in stats]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return stats, wall0_ms, int(time.time() * 1000)


def row(stats: list[ThreadStats], wall0_ms: int, wall1_ms: int) -> dict[str, Any]:
    start = min(s.start_ns for s in stats)
    end = max(s.end_ns for s in stats)
    assigned = [s.assigned_ns for s in stats if s.assigned_ns]
    rebalance_ms = (max(assigned) - start) / 1e6 if assigned else 0.0
    secs = (end - start) / 1e9 or 1e-9
    fetch_s = max((end - start) / 1e9 - rebalance_ms / 1e3, 1e-9)
    mb = sum(s.bytes for s in stats) / 2**20
    n = sum(s.messages for s in stats)
    return {
        "start.time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall0_ms / 1000)) + f":{wall0_ms % 1000:03d}",
        "end.time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall1_ms / 1000)) + f":{wall1_ms % 1000:03d}",
        "data.consumed.in.MB": round(mb, 4), "MB.sec": round(mb / secs, 4), "data.consumed.in.nMsg": n,
        "nMsg.sec": round(n / secs, 4), "rebalance.time.ms": round(rebalance_ms, 3),
        "fetch.time.ms": round(fetch_s * 1e3, 3), "fetch.MB.sec": round(mb / fetch_s, 4),
        "fetch.nMsg.sec": round(n / fetch_s, 4),
    }


def add_parser(sub: Any) -> None:
    p = sub.add_parser("consume", help="consumer performance, multi-threaded (KIP-628)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--messages", type=int, required=True, help="stop after this many records in total")
    p.add_argument("--threads", type=int, default=1, help="consumers in one group (capped at the partitions)")
    p.add_argument("--group", default="fetchlat-perf-consumer")
    p.add_argument("--timeout", type=float, default=10000, help="ms without a record before giving up")
    p.add_argument("--fetch-max-wait-ms", type=int, default=500)
    p.add_argument("--consumer-prop", action="append", help="extra librdkafka property KEY=VALUE")
    p.add_argument("--show-detailed-stats", action="store_true", help="a row per thread as well")
    p.add_argument("--json", action="store_true")
    p.set_defaults(perf=main)


def main(args: argparse.Namespace) -> int:
    stats, w0, w1 = run(args)
    total = row(stats, w0, w1)
    e2e = Recorder()
    for s in stats:
        e2e.samples.extend(s.e2e.samples)
    latency: Summary = e2e.summary()
    per_thread = [{"thread": s.thread, **row([s], w0, w1)} for s in stats]
    if args.json:
        print(json.dumps({**total, "e2e_latency": asdict(latency),
                          **({"threads": per_thread} if args.show_detailed_stats else {})}))
    else:
        print(", ".join(COLUMNS))
        print(", ".join(str(total[c]) for c in COLUMNS))
        if args.show_detailed_stats:
            print("thread, " + ", ".join(COLUMNS))
            for r in per_thread:
                print(f"{r['thread']}, " + ", ".join(str(r[c]) for c in COLUMNS))
        print(f"end-to-end record latency (consume time - record timestamp): {latency.line()}")
    return 0 if total["data.consumed.in.nMsg"] >= args.messages else 1
