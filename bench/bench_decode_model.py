"""Cost of observing fetches: decoding (streamed, batch headers only) and the latency model.

    python bench/bench_decode_model.py [--seconds 2] [--json]

Measures, on this machine, in one run:
- batch-header scanning throughput (GB/s of records skipped) with 16 KB batches, the fetch
  response fed in 64 KB chunks as the proxy receives them (goal >= 2 GB/s);
- a whole Fetch exchange through the connection state machine (request + response decode,
  session mirror), per fetch;
- the latency model per fetch (goal < 20 µs).
Figures go to docs/performance-observe.md by hand, with the command and machine.
"""

from __future__ import annotations

import argparse
import json
import struct
import time
import uuid
from typing import Any

from fetchlat.metrics.model import LatencyModel
from fetchlat.protocol import apis, fetch
from fetchlat.protocol.connection import KafkaConnection
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.events import FetchExchanged
from fetchlat.protocol.framing import request_frame, response_frame
from fetchlat.protocol.schema import load
from fetchlat.protocol.stream import Feeder
from kafka.record.default_records import DefaultRecordBatchBuilder


def batch(base: int, size: int) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=size * 2)
    value = b"x" * (size - 120)
    b.append(0, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    out = bytearray(b.build())
    struct.pack_into(">q", out, 0, base)
    return bytes(out)


def fetch_response(version: int, records: bytes, partitions: int = 1) -> bytes:
    spec = load("FetchResponse")
    parts = [{"PartitionIndex": i, "HighWatermark": 10**6, "LastStableOffset": 10**6, "LogStartOffset": 0,
              "Records": records} for i in range(partitions)]
    return encode(spec, version, {"Responses": [{"Topic": "bench", "TopicId": uuid.UUID(int=1), "Partitions": parts}]})


def timeit(fn: Any, seconds: float) -> tuple[float, int]:
    n = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        fn()
        n += 1
    return (time.perf_counter() - t0) / n, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results: dict[str, Any] = {}

    # 1. batch-header scanning: 1 MiB of 16 KB batches, fed in 64 KB chunks
    blob = b"".join(batch(i, 16 * 1024) for i in range(64))
    body = fetch_response(12, blob)
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]

    def scan() -> None:
        f = Feeder(fetch.parse_response(12))
        for c in chunks:
            f.feed(c)
        f.finish()

    per, _ = timeit(scan, args.seconds)
    results["scan_16k_batches_gb_per_s"] = round(len(blob) / per / 1e9, 2)
    results["scan_16k_batches_us_per_mib"] = round(per * 1e6, 1)

    # 2. a whole small fetch exchange through the connection (1 partition, 1 KB of records)
    small_records = batch(0, 1024)
    req_body = encode(load("FetchRequest"), 12, {
        "ReplicaId": -1, "MaxWaitMs": 500, "MinBytes": 1, "MaxBytes": 1 << 20, "SessionId": 0, "SessionEpoch": -1,
        "Topics": [{"Topic": "bench", "Partitions": [{"Partition": 0, "FetchOffset": 0, "LogStartOffset": -1,
                                                      "PartitionMaxBytes": 1 << 20}]}]})
    resp_body = fetch_response(12, small_records)
    exchanges: list[FetchExchanged] = []

    def exchange(corr: list[int] = [0]) -> None:  # noqa: B006 - a counter
        corr[0] += 1
        c = corr[0]
        codec.receive_from_client(request_frame(apis.FETCH, 12, c, "bench", req_body), c)
        _, events = codec.receive_from_broker(response_frame(apis.FETCH, 12, c, resp_body), c + 1)
        for e in events:
            if isinstance(e, FetchExchanged):
                exchanges.append(e)

    codec = KafkaConnection()
    per, _ = timeit(exchange, args.seconds)
    results["fetch_exchange_decode_us"] = round(per * 1e6, 2)

    # 3. the model alone, per fetch
    model = LatencyModel(wall_minus_mono_ns=0)
    ev = exchanges[-1]
    per, _ = timeit(lambda: model.on_fetch(ev, proxy_ns=10_000, client_rtt_ns=50_000), args.seconds)
    results["model_us_per_fetch"] = round(per * 1e6, 2)
    results["goals"] = {"scan_gb_per_s": ">= 2", "model_us_per_fetch": "< 20"}
    if args.json:
        print(json.dumps(results))
    else:
        for k, v in results.items():
            print(f"{k:32} {v}")


if __name__ == "__main__":
    main()
