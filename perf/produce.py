"""``fetchlat perf produce`` (KIP-403): records/s, MB/s and acknowledgement latency with
microsecond precision (monotonic ns clock), with the time blocked inside send -- librdkafka's
queue full (KIP-286's buffer wait) -- reported separately from the acknowledgement latency."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from .stats import Recorder, Summary

REPORT_EVERY_S = 5.0


@dataclass
class ProduceResult:
    records: int
    acked: int
    errors: int
    seconds: float
    records_per_s: float
    mb_per_s: float
    ack_latency: Summary
    blocked_in_send_s: float
    blocked_in_send: Summary


def payloads(args: argparse.Namespace) -> list[bytes]:
    if args.payload_file:
        with open(args.payload_file, "rb") as f:
            lines = [x for x in f.read().split(args.payload_delimiter.encode()) if x]
        if not lines:
            raise SystemExit(f"fetchlat perf produce: {args.payload_file} holds no payloads")
        return lines
    return [os.urandom(args.record_size)]


def run(args: argparse.Namespace) -> ProduceResult:
    from confluent_kafka import KafkaException, Producer

    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap_server, "acks": args.acks,
                            "linger.ms": args.linger_ms, "batch.size": args.batch_size,
                            "queue.buffering.max.messages": args.buffer_records, "log_level": 3}
    for kv in args.producer_prop or []:
        k, _, v = kv.partition("=")
        conf[k] = v
    producer = Producer(conf)
    data = payloads(args)
    ack = Recorder()
    blocked = Recorder()
    state = {"acked": 0, "errors": 0, "bytes": 0, "window_n": 0, "window_lat": 0, "window_max": 0}
    now = time.monotonic_ns

    def delivered(sent_ns: int, size: int) -> Any:
        def cb(err: Any, _msg: Any) -> None:
            if err is not None:
                state["errors"] += 1
                return
            lat = now() - sent_ns
            ack.add(lat)
            state["acked"] += 1
            state["bytes"] += size
            state["window_n"] += 1
            state["window_lat"] += lat
            state["window_max"] = max(state["window_max"], lat)
        return cb

    interval_ns = int(1e9 / args.throughput) if args.throughput > 0 else 0
    t0 = now()
    next_send = t0
    last_report = t0
    for i in range(args.num_records):
        if interval_ns:
            while now() < next_send:  # pace: poll while waiting, so callbacks run
                producer.poll(0)
            next_send += interval_ns
        value = data[i % len(data)]
        t_call = now()
        while True:
            try:
                producer.produce(args.topic, value=value, on_delivery=delivered(t_call, len(value)))
                break
            except BufferError:  # the local queue is full: this is time blocked in send
                producer.poll(0.001)
            except KafkaException as exc:
                raise SystemExit(f"fetchlat perf produce: {exc}") from None
        blocked.add(now() - t_call)
        producer.poll(0)
        t = now()
        if t - last_report >= REPORT_EVERY_S * 1e9:
            _progress(state, (t - last_report) / 1e9, args.json)
            last_report = t
    producer.flush(max(30.0, args.num_records / 1000))
    elapsed = (now() - t0) / 1e9
    b = blocked.summary()
    return ProduceResult(
        records=args.num_records, acked=state["acked"], errors=state["errors"], seconds=round(elapsed, 3),
        records_per_s=round(state["acked"] / elapsed, 1), mb_per_s=round(state["bytes"] / elapsed / 2**20, 3),
        ack_latency=ack.summary(), blocked_in_send_s=round(sum(blocked.samples) / 1e9, 6), blocked_in_send=b,
    )


def _progress(state: dict[str, int], window_s: float, quiet: bool) -> None:
    n = state["window_n"]
    if not quiet and n:
        print(f"{n} records acked, {n / window_s:.1f} records/s, avg latency {state['window_lat'] / n / 1e6:.3f} ms, "
              f"max {state['window_max'] / 1e6:.3f} ms", file=sys.stderr, flush=True)
    state["window_n"] = state["window_lat"] = state["window_max"] = 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("produce", help="producer performance (KIP-403: µs precision)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--num-records", type=int, required=True)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--record-size", type=int, default=1024, help="bytes per record (random payload)")
    g.add_argument("--payload-file", help="payloads, one per delimiter-separated chunk")
    p.add_argument("--payload-delimiter", default="\n")
    p.add_argument("--throughput", type=float, default=-1, help="records/s to aim for (-1: as fast as possible)")
    p.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    p.add_argument("--batch-size", type=int, default=16384, help="bytes per batch (librdkafka batch.size)")
    p.add_argument("--linger-ms", type=float, default=5.0)
    p.add_argument("--buffer-records", type=int, default=100000, help="local queue size before send blocks")
    p.add_argument("--producer-prop", action="append", help="extra librdkafka property KEY=VALUE")
    p.add_argument("--json", action="store_true", help="print the summary as JSON only")
    p.set_defaults(perf=main)


def main(args: argparse.Namespace) -> int:
    r = run(args)
    if args.json:
        print(json.dumps(asdict(r)))
    else:
        print(f"{r.acked} records sent, {r.records_per_s} records/sec ({r.mb_per_s} MB/sec), "
              f"{r.ack_latency.line()}")
        print(f"time blocked in send: {r.blocked_in_send_s:.6f} s total ({r.blocked_in_send.line()})")
        if r.errors:
            print(f"{r.errors} records failed", file=sys.stderr)
    return 0 if r.errors == 0 and r.acked == r.records else 1
