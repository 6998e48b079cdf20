"""Ground truth for the latency model, with real parts: Tansu behind a user-space relay that
adds a known D ms each way, the real proxy in front of it writing traces, and real consumers
(confluent-kafka, kafka-python) doing long polls on idle, pre-filled and slowly fed topics.

- expired and immediate fetches: local = total - wait must equal what the relay added (2·D
  plus its timers' lateness, which the relay measures chunk by chunk) plus the broker's own
  time (measured in the same test with D = 0): p50 within ±3 ms; the naive total shows the
  long poll;
- woken fetches: the data's inferred arrival (request time + first byte - wake lag) must match
  the producer's schedule, and the wait must end where Tansu's answer was ready (its first byte
  less the relay's round trip and what an answer takes to start): Tansu notices the data on its
  next re-check, 50-250 ms late, and the fetch stays parked until then.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from fetchlat.metrics import broker_timing

from .clients.confluent_consume import consume
from .conftest import JUDGED_BY_THE_BROKERS_CLOCK, start_proxy, stop_proxy, tansu_behind_delay

CLIENTS_DIR = Path(__file__).with_name("clients")

# judged against a known delay through a user-space relay, whose jitter lands in a 20 s run's
# medians: run once more when it misses a bar, as the tests judged by the broker's clock (a wrong
# model misses on both runs; pytest says when the second was needed)
pytestmark = [pytest.mark.integration, JUDGED_BY_THE_BROKERS_CLOCK]

MS = 1_000_000
DELAY_MS = 25
MAX_WAIT_MS = 400
RESULTS = Path(os.environ.get("FETCHLAT_GROUND_TRUTH_OUT", "/tmp/fetchlat-ground-truth.jsonl"))


@dataclass
class Rig:
    bootstrap: str
    trace_dir: Path
    holds: Path  # the relay's own measure of what it held each chunk, written when it stops

    def relay_added_ms(self) -> float:
        """What the relay added to a round trip: its median hold each way (the delay, plus its
        timers firing late: whole-millisecond sleeps, a busy machine)."""
        holds = json.loads(self.holds.read_text())
        return float(holds["to_broker"]["p50_ms"] + holds["to_client"]["p50_ms"])


@contextmanager
def rig(tmp_path: Path, delay_ms: float) -> Iterator[Rig]:
    """Tansu advertises the relay, so every proxy->broker connection crosses the delay."""
    trace_dir = tmp_path / f"traces-{delay_ms}"
    tmp_path.mkdir(parents=True, exist_ok=True)
    holds = tmp_path / f"relay-holds-{delay_ms}.json"
    with tansu_behind_delay(delay_ms, holds) as (_, relay_port):
        proxy = start_proxy(f"127.0.0.1:{relay_port}", tmp_path, "--trace-dir", str(trace_dir))
        try:
            yield Rig(proxy.bootstrap, trace_dir, holds)
        finally:
            stop_proxy(proxy)  # SIGTERM: traces flushed and renamed


def relay_lateness_ms(holds: Path) -> float:
    """How late the relay's timers held a chunk at worst past their median, both ways summed."""
    summary = json.loads(holds.read_text())
    return float(sum(summary[d]["max_ms"] - summary[d]["p50_ms"] for d in ("to_broker", "to_client")))


def fetch_rows(trace_dir: Path, client_id: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for f in sorted((trace_dir / "exchanges").rglob("*.parquet")):
        rows += [r for r in pq.read_table(f).to_pylist() if r["api"] == "Fetch" and r["client_id"] == client_id]
    return rows


def p50_ms(rows: list[dict[str, Any]], column: str) -> float:
    return statistics.median(r[column] for r in rows) / MS


# ------------------------------------------------------------------ the two real consumers
def create_topic(bootstrap: str, topic: str, records: int, conf: dict[str, Any] | None = None) -> None:
    """``topic`` of one partition, with ``records`` in it; ``conf``: the clients' security settings."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **(conf or {})})
    for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        f.result(timeout=20)
    if records:
        # one record per batch: Tansu honours max_bytes only at batch granularity
        p = Producer({"bootstrap.servers": bootstrap, **(conf or {}), "linger.ms": 0, "batch.num.messages": 1})
        for i in range(records):
            p.produce(topic, value=b"x" * 200, key=str(i).encode())
        assert p.flush(30) == 0


def confluent_consume(bootstrap: str, topic: str, client_id: str, seconds: float, fetch_bytes: int,
                      on_tick: Callable[[float], None] | None = None, *, max_wait_ms: int = MAX_WAIT_MS,
                      from_start: bool = True, conf: dict[str, Any] | None = None) -> int:
    """A confluent-kafka consumer for ``seconds``: how many records it read (``conf``: its security
    settings). Without ``on_tick`` (which must run beside its polls) it runs in a child process
    (``clients/confluent_consume.py``), so an abort inside librdkafka fails only the test that ran it."""
    args: dict[str, Any] = {"bootstrap": bootstrap, "topic": topic, "client_id": client_id, "seconds": seconds,
                            "fetch_bytes": fetch_bytes, "max_wait_ms": max_wait_ms, "from_start": from_start,
                            "conf": conf or {}}
    if on_tick is not None:
        return consume(**args, on_tick=on_tick)
    r = subprocess.run([sys.executable, str(CLIENTS_DIR / "confluent_consume.py"), json.dumps(args)],
                       capture_output=True, text=True, timeout=seconds + 60)
    assert r.returncode == 0, f"the consumer {client_id} ended with {r.returncode}: {r.stderr[-3000:]}"
    return int(json.loads(r.stdout.strip().splitlines()[-1])["records"])


def kafkapython_consume(bootstrap: str, topic: str, client_id: str, seconds: float, fetch_bytes: int,
                        on_tick: Callable[[float], None] | None = None) -> int:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, fetch_max_wait_ms=MAX_WAIT_MS,
                      fetch_min_bytes=1, max_partition_fetch_bytes=fetch_bytes, fetch_max_bytes=fetch_bytes,
                      enable_auto_commit=False, group_id=None, auto_offset_reset="earliest")
    c.assign([TopicPartition(topic, 0)])
    c.seek_to_beginning()
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for recs in c.poll(50).values():
            n += len(recs)
        if on_tick:
            on_tick(end - time.monotonic())
    c.close()
    return n


CONSUMERS = {"confluent-kafka": confluent_consume, "kafka-python": kafkapython_consume}


def measure(tmp_path: Path, client: str, delay_ms: float) -> dict[str, Any]:
    """Idle long polls (expired) and a catch-up over a pre-filled topic (immediate)."""
    consume = CONSUMERS[client]
    with rig(tmp_path, delay_ms) as r:
        idle, full = f"idle-{uuid.uuid4().hex[:6]}", f"full-{uuid.uuid4().hex[:6]}"
        create_topic(r.bootstrap, idle, 0)
        create_topic(r.bootstrap, full, 400)
        consume(r.bootstrap, idle, f"idle-{client}", 4.5, 1 << 20)
        got = consume(r.bootstrap, full, f"full-{client}", 4.0, 4096)  # small fetches: many immediate ones
    idle_rows = [x for x in fetch_rows(r.trace_dir, f"idle-{client}") if x["outcome"] == "expired"]
    full_rows = [x for x in fetch_rows(r.trace_dir, f"full-{client}")
                 if x["outcome"] == "immediate" and x["records"]]
    assert len(idle_rows) >= 5, "too few expired fetches to measure"
    assert len(full_rows) >= 5, f"too few immediate fetches to measure (consumed {got})"
    return {
        "expired_local_p50_ms": p50_ms(idle_rows, "local_ns"), "expired_total_p50_ms": p50_ms(idle_rows, "total_ns"),
        "immediate_local_p50_ms": p50_ms(full_rows, "local_ns"), "expired_n": len(idle_rows),
        "immediate_n": len(full_rows), "relay_added_ms": r.relay_added_ms(),
    }


def record(result: dict[str, Any]) -> None:
    with RESULTS.open("a") as fh:
        fh.write(json.dumps(result) + "\n")


@pytest.mark.parametrize("client", sorted(CONSUMERS))
def test_local_latency_is_twice_the_delay_plus_broker_time(client: str, tmp_path: Path) -> None:
    base = measure(tmp_path / "d0", client, 0)
    delayed = measure(tmp_path / "dD", client, DELAY_MS)
    added = delayed["relay_added_ms"]
    assert 2 * DELAY_MS - 0.1 <= added < 2 * DELAY_MS + 20, f"the relay's own measure is off: {added} ms"
    err_expired = delayed["expired_local_p50_ms"] - base["expired_local_p50_ms"] - added
    err_immediate = delayed["immediate_local_p50_ms"] - base["immediate_local_p50_ms"] - added
    record({"test": "local", "client": client, "delay_ms": DELAY_MS, "max_wait_ms": MAX_WAIT_MS, "base": base,
            "delayed": delayed, "relay_added_ms": round(added, 3), "error_expired_ms": round(err_expired, 3),
            "error_immediate_ms": round(err_immediate, 3)})
    assert abs(err_expired) <= 3, (base, delayed)
    assert abs(err_immediate) <= 3, (base, delayed)
    # the naive total shows the long poll: max_wait plus the network
    assert delayed["expired_total_p50_ms"] >= MAX_WAIT_MS + 2 * DELAY_MS - 3


@pytest.mark.parametrize("client", sorted(CONSUMERS))
def test_woken_wait_matches_the_producer_schedule(client: str, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    consume = CONSUMERS[client]
    sent_wall_ns: list[int] = []
    with rig(tmp_path, DELAY_MS) as r:
        topic = f"fed-{uuid.uuid4().hex[:6]}"
        create_topic(r.bootstrap, topic, 0)
        producer = Producer({"bootstrap.servers": r.bootstrap, "linger.ms": 0, "acks": 1})
        producer.produce(topic, value=b"warm-up")  # connect the producer before the schedule starts
        producer.flush(10)
        schedule = iter([3.8, 2.9, 2.05, 1.1])  # seconds left when a record is sent: off the poll rhythm

        nxt = [next(schedule)]

        def tick(left: float) -> None:
            if nxt[0] is not None and left <= nxt[0]:
                sent_wall_ns.append(time.time_ns())
                producer.produce(topic, value=b"x")
                producer.poll(0)
                nxt[0] = next(schedule, None)  # type: ignore[call-overload]

        consume(r.bootstrap, topic, f"fed-{client}", 5.0, 1 << 20, tick)
        producer.flush(10)
    woken = [x for x in fetch_rows(r.trace_dir, f"fed-{client}") if x["outcome"] == "woken"]
    assert woken, "no fetch was woken by the producer"
    errors, ends = [], []
    for row in woken:
        inferred_arrival = row["ts_ns"] + row["first_byte_ns"] - row["wake_lag_ns"]
        nearest = min(sent_wall_ns, key=lambda t: abs(t - inferred_arrival))
        errors.append((inferred_arrival - nearest) / MS)
        # parked until its answer was ready, on the clock of the requests the proxy forwards: the
        # first byte less the relay's round trip and what an answer takes to start
        parked = row["ts_ns"] + broker_timing.CONSUMER_PARK_NS
        ready = row["ts_ns"] + row["first_byte_ns"] - 2 * DELAY_MS * MS - broker_timing.CONSUMER_ANSWER_NS
        ends.append((parked + row["wait_ns"] - ready) / MS)
    record({"test": "woken", "client": client, "delay_ms": DELAY_MS, "woken": len(woken), "sent": len(sent_wall_ns),
            "errors_ms": [round(e, 3) for e in errors], "wait_end_errors_ms": [round(e, 3) for e in ends],
            "wake_lag_ms": [round(x["wake_lag_ns"] / MS, 1) for x in woken],
            "relay_lateness_ms": round(relay_lateness_ms(r.holds), 3)})
    assert len(woken) >= 2
    # arrival is inferred from the produce's answer less the learned round trip: within a few ms
    # of the send. A single date can also be late by the relay's own timers on that produce (a
    # busy machine: its chunk held past the median): the worst gets that measured lateness too.
    # Both fail on a model that keeps the round trip in (41-53 ms late).
    lateness = relay_lateness_ms(r.holds)
    assert statistics.median(abs(e) for e in errors) <= 5, errors
    assert all(abs(e) <= 5 + lateness for e in errors), (errors, lateness)
    # the wait's end: the round trip learned is the relay's plus its own time (the shortest answer)
    assert all(abs(e) <= 3 + lateness for e in ends), (ends, lateness)
    # ... and the wake lag is Tansu's lateness plus the round trip: never under the round trip
    assert all(row["wake_lag_ns"] >= 2 * DELAY_MS * MS for row in woken), [row["wake_lag_ns"] for row in woken]
