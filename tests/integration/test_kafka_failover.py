"""Failover and a rolling restart of the sidecars, nothing lost (Apache Kafka, 3 brokers, a
sidecar each, a topic of replication factor 3 and min ISR 2).

An idempotent acks=all producer writes numbered records every 5 ms and a consumer group reads
them, both through the sidecars, while (a) a broker that leads a partition is killed with
SIGKILL and started again, then (b) every sidecar is restarted, one at a time, as an operator
rolls an upgrade (the killed broker, once back in sync, is given its partitions back by a
preferred leader election). Every acknowledged record is read; each client's longest pause (between two
acknowledgements, between two records read) is reported; every sidecar serves metrics and
writes trace rows after it all, and none needed a restart to find its broker again."""

from __future__ import annotations

import itertools
import json
import threading
import time
from pathlib import Path

import pytest
from fetchlat.verify import request_log as rl
from prometheus_client.parser import text_string_to_metric_families

from .test_broker_clock import RESULTS

pytestmark = [pytest.mark.integration, pytest.mark.long]  # make test-long

TOPIC = "failover"


def _produce(bootstrap: str, stop: threading.Event, acked: dict[int, float], failed: list[str]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0,
                  "message.timeout.ms": 120000, "client.id": "failover-producer"})

    def done(err: object, msg: object) -> None:
        if err is None:
            acked[int(msg.value())] = time.monotonic()  # type: ignore[attr-defined]
        else:
            failed.append(str(err))

    i = 0
    while not stop.wait(0.005):
        p.produce(TOPIC, str(i).encode(), on_delivery=done)
        p.poll(0)
        i += 1
    assert p.flush(120) == 0


def _consume(bootstrap: str, stop: threading.Event, got: dict[int, float]) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "failover-group", "client.id": "failover-consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": True, "fetch.wait.max.ms": 500})
    c.subscribe([TOPIC])
    while not stop.is_set():
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            got.setdefault(int(m.value()), time.monotonic())
    c.close()


def _longest_gap(times: list[float]) -> float:
    times = sorted(times)
    return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def _fetches(text: str) -> float:
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == "fetchlat_fetches_total")


def test_a_killed_leader_and_rolled_sidecars_lose_no_acknowledged_record(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from fetchlat.embedded import kafka

    traces = tmp_path / "traces"
    trace_args = ["--trace-dir", str(traces), "--trace-rotate-s", "1"]
    acked: dict[int, float] = {}
    got: dict[int, float] = {}
    failed: list[str] = []
    marks: dict[str, float] = {}
    with kafka.cluster(tmp_path / "kafka", brokers=3, sidecars=True, sidecar_args=trace_args) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=3,
                                               config={"min.insync.replicas": "2"})]).values():
            f.result(timeout=30)
        time.sleep(2.0)
        leaders = {p.leader for p in admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions.values()}
        victim = min((n for n in leaders if n != 0), default=1)  # node 0 is the one controller: keep it
        stop_p, stop_c = threading.Event(), threading.Event()
        producer = threading.Thread(target=_produce, args=(c.bootstrap, stop_p, acked, failed))
        consumer = threading.Thread(target=_consume, args=(c.bootstrap, stop_c, got))
        consumer.start()
        producer.start()
        try:
            time.sleep(4.0)
            marks["kill"] = time.monotonic()
            c.node(victim).restart(kill=True)  # (a) SIGKILL, then back on the same ports and data
            # once it is back in sync, its partitions go back to it, as an operator (or
            # auto.leader.rebalance, every 5 minutes) would have them
            for _ in range(15):
                time.sleep(1.0)
                elect = kafka.tool("org.apache.kafka.tools.LeaderElectionCommand", "--bootstrap-server",
                                   c.bootstrap, "--election-type", "preferred", "--all-topic-partitions")
                led = {p.leader for p in admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions.values()}
                if victim in led:
                    break
            assert victim in led, (elect.stdout, elect.stderr)
            time.sleep(2.0)
            marks["roll"] = time.monotonic()
            for i, node in enumerate(c.nodes):  # (b) one sidecar at a time, as an upgrade rolls
                c.sidecars[i].stop()
                c.sidecars[i] = kafka.start_sidecar(node, c.home, trace_args)
                c.sidecars[i].wait_ready(30)
                time.sleep(1.5)
            marks["rolled"] = time.monotonic()
            time.sleep(3.0)
        finally:
            stop_p.set()
            producer.join(150)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not set(acked) <= set(got):
                time.sleep(0.2)
            stop_c.set()
            consumer.join(30)
        metrics = [s.metrics() for s in c.sidecars]
        time.sleep(2.5)  # the sidecars close their trace files every second
    lost = sorted(set(acked) - set(got))
    def phase(times: dict[int, float], lo: str, hi: str) -> float:
        return round(_longest_gap([t for t in times.values() if marks[lo] <= t < marks[hi]]), 3)

    marks["end"] = float("inf")
    pauses = {"producer_longest_pause_s": round(_longest_gap(list(acked.values())), 3),
              "consumer_longest_pause_s": round(_longest_gap(list(got.values())), 3),
              "producer_pause_kill_s": phase(acked, "kill", "roll"),
              "consumer_pause_kill_s": phase(got, "kill", "roll"),
              "producer_pause_roll_s": phase(acked, "roll", "end"), "consumer_pause_roll_s": phase(got, "roll", "end"),
              "acked": len(acked), "read": len(got), "lost": len(lost), "failed_deliveries": len(failed),
              "killed_broker": victim}
    with RESULTS.open("a") as fh:
        fh.write(json.dumps({"test": "failover", **pauses}) + "\n")
    assert len(acked) > 1000 and not lost, (lost[:10], pauses)
    assert not failed, failed[:5]
    # both clients went on after each step
    assert any(t > marks["rolled"] for t in acked.values()) and any(t > marks["rolled"] for t in got.values())
    # every sidecar (the restarted ones) measures fetches, and writes trace rows after the roll
    assert all(_fetches(m) > 0 for m in metrics), [_fetches(m) for m in metrics]
    rows = rl.trace_rows(traces)
    wall_rolled = time.time_ns() - int((time.monotonic() - marks["rolled"]) * 1e9)
    assert {r["broker"] for r in rows if r["ts_ns"] > wall_rolled} == {"0", "1", "2"}
