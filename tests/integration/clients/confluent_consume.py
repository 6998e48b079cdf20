"""One confluent-kafka consumer, in a process of its own: ``confluent_consume.py <json>`` with the
settings of ``test_ground_truth.confluent_consume``; prints how many records it read.

librdkafka can abort its process (a failed assertion in the consumer's close has been seen on a
busy container): in a child process that costs only the test that ran it, never the whole run."""

from __future__ import annotations

import json
import sys
import time


def main() -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    a = json.loads(sys.argv[1])
    c = Consumer({"bootstrap.servers": a["bootstrap"], "group.id": a["client_id"], "client.id": a["client_id"],
                  "fetch.wait.max.ms": a["max_wait_ms"], "fetch.min.bytes": 1, "enable.auto.commit": False,
                  "max.partition.fetch.bytes": a["fetch_bytes"], "fetch.max.bytes": a["fetch_bytes"],
                  "message.max.bytes": a["fetch_bytes"], "queued.max.messages.kbytes": 64})
    c.assign([TopicPartition(a["topic"], 0, OFFSET_BEGINNING if a["from_start"] else OFFSET_END)])
    n = 0
    end = time.monotonic() + a["seconds"]
    while time.monotonic() < end:
        m = c.poll(0.05)
        if m is not None and m.error() is None:
            n += 1
    c.close()
    print(json.dumps({"records": n}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
