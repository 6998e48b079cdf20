"""Client traffic shared by integration tests: a steady producer + consumer that must lose
nothing while something else goes wrong, and a create-produce-consume round trip."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Steady:
    sent: list[bytes] = field(default_factory=list)
    got: list[bytes] = field(default_factory=list)


def create_topic(bootstrap: str, topic: str, extra: dict[str, object] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **(extra or {})})  # referenced until the futures resolve
    for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        f.result(timeout=30)


@contextmanager
def steady_traffic(bootstrap: str, topic: str | None = None) -> Iterator[Steady]:
    """A producer (a record every 50 ms) and a consumer of the same partition through
    ``bootstrap`` for the duration of the block; on exit the consumer catches up (bounded)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    topic = topic or f"steady-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic)
    s = Steady()
    stop = threading.Event()

    def produce() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        i = 0
        while not stop.is_set():
            v = f"r{i}".encode()
            p.produce(topic, value=v, partition=0)
            s.sent.append(v)
            p.poll(0)
            i += 1
            stop.wait(0.05)
        assert p.flush(20) == 0

    def consume() -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False,
                      "fetch.wait.max.ms": 100})
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (stop.is_set() and len(s.got) >= len(s.sent)):
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                s.got.append(m.value())
        c.close()

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    try:
        yield s
    finally:
        stop.set()
        for t in threads:
            t.join(90)


def roundtrip(bootstrap: str, topic: str | None = None, n: int = 5, extra: dict[str, object] | None = None
              ) -> list[bytes]:
    """Create ``topic``, produce n records, read them back (assign, no group join)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    topic = topic or f"rt-{uuid.uuid4().hex[:6]}"
    base = {"bootstrap.servers": bootstrap, **(extra or {})}
    create_topic(bootstrap, topic, extra)
    p = Producer({**base, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, value=f"{topic}-{i}".encode(), partition=0)
    assert p.flush(30) == 0
    c = Consumer({**base, "group.id": topic, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got


def expected(topic: str, n: int = 5) -> list[bytes]:
    return [f"{topic}-{i}".encode() for i in range(n)]
