"""A throughput client that is not the bottleneck: confluent-kafka (librdkafka 2.16) with no
Python callback per record. Produce hands the same 1 KiB value to ``produce()`` in a loop and
polls only when the local queue is full; consume takes records in batches of 10 000 with
``consume()``. (Debian's kcat links librdkafka 2.0.2, which cannot read Tansu's ApiVersions
response directly: docs/proxy.md)

    python bench/rdkafka_client.py produce BOOTSTRAP TOPIC RECORDS [key=value ...]
    python bench/rdkafka_client.py consume BOOTSTRAP TOPIC RECORDS [key=value ...]

``value.bytes=N`` (not a librdkafka property) sets the records' size (1 KiB by default).
Prints one JSON line: records, seconds, MB/s.
"""

from __future__ import annotations

import json
import sys
import time
import uuid


def produce(bootstrap: str, topic: str, n: int, props: dict[str, str], size: int = 1024) -> float:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "log_level": 0, **props})
    value = b"v" * size
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:  # the local queue is full: let librdkafka send
                p.poll(0.005)
    left = p.flush(120)
    if left:
        raise SystemExit(f"{left} records not delivered")
    return time.perf_counter() - t0


def consume(bootstrap: str, topic: str, n: int, props: dict[str, str], size: int = 1024) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0, **props})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group join: its seconds are not throughput
    got, t0, deadline = 0, time.perf_counter(), time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        for m in c.consume(num_messages=10_000, timeout=1.0):
            if m.error() is None:
                got += 1
    elapsed = time.perf_counter() - t0
    c.close()
    if got < n:
        raise SystemExit(f"consumed {got} of {n} records")
    return elapsed


def main() -> int:
    mode, bootstrap, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    props = dict(kv.split("=", 1) for kv in sys.argv[5:])
    size = int(props.pop("value.bytes", "1024"))
    seconds = (produce if mode == "produce" else consume)(bootstrap, topic, n, props, size)
    print(json.dumps({"records": n, "seconds": round(seconds, 3), "mb_per_s": round(n * size / 1e6 / seconds, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
