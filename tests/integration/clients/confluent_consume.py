"""One confluent-kafka consumer (``consume``): the settings and the poll loop every test's
confluent consumer uses (``test_ground_truth.confluent_consume``). Run as
``confluent_consume.py <json>`` it is a process of its own, and prints how many records it read.

librdkafka can abort its process (a failed assertion in the consumer's close has been seen on a
busy container): in a child process that costs only the test that ran it, never the whole run."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any


def consume(bootstrap: str, topic: str, client_id: str, seconds: float, fetch_bytes: int, max_wait_ms: int,
            from_start: bool, on_tick: Callable[[float], None] | None = None,
            conf: dict[str, Any] | None = None) -> int:
    """Poll ``topic``'s partition 0 for ``seconds``: how many records were read; ``on_tick``
    gets the seconds left after each poll; ``conf``: security settings (SASL_SSL, ...)."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, **(conf or {}), "group.id": client_id, "client.id": client_id,
                  "fetch.wait.max.ms": max_wait_ms, "fetch.min.bytes": 1, "enable.auto.commit": False,
                  "max.partition.fetch.bytes": fetch_bytes, "fetch.max.bytes": fetch_bytes,
                  "message.max.bytes": fetch_bytes, "queued.max.messages.kbytes": 64})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING if from_start else OFFSET_END)])
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        m = c.poll(0.05)
        if m is not None and m.error() is None:
            n += 1
        if on_tick:
            on_tick(end - time.monotonic())
    c.close()
    return n


if __name__ == "__main__":
    print(json.dumps({"records": consume(**json.loads(sys.argv[1]))}), flush=True)
