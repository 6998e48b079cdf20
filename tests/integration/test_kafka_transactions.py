"""Compression and transactions on Apache Kafka (a single node behind its sidecar).

A transactional producer (zstd batches) commits two transactions of every three and aborts the
third, holding each open 200 ms; an idempotent producer writes lz4 batches beside it. A
``read_committed`` consumer long-polls the transactional topic: its fetches are held by the open
transaction and woken by the commit marker, which the sidecar never sees (the coordinator
writes it). A ``read_uncommitted`` consumer reads the lz4 topic. Every committed record and no
aborted one is read, every idempotent record is read, and each consumer's fetches are judged
against the broker's request log."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from fetchlat.verify import request_log as rl

from testkit.goals import KnownMiss, hold_all, judge

from .conftest import JUDGED_BY_THE_BROKERS_CLOCK
from .test_broker_clock import RESULTS

pytestmark = [pytest.mark.integration, JUDGED_BY_THE_BROKERS_CLOCK]


def _transactions(bootstrap: str, stop: threading.Event, committed: list[int], aborted: list[int]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "fetchlat-txn", "compression.type": "zstd",
                  "linger.ms": 0, "client.id": "txn-producer"})
    p.init_transactions(30)
    n = 0
    while not stop.is_set():
        p.begin_transaction()
        for _ in range(5):
            p.produce("txn", b"t" * 200)
        p.flush(10)
        time.sleep(0.2)  # the transaction stays open: a read_committed fetch is held meanwhile
        if n % 3 == 2:
            p.abort_transaction(30)
            aborted.append(5)
        else:
            p.commit_transaction(30)
            committed.append(5)
        n += 1
        time.sleep(0.1)


def _idempotent(bootstrap: str, stop: threading.Event, acked: list[int]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "lz4",
                  "linger.ms": 0, "client.id": "lz4-producer"})
    while not stop.wait(0.1):
        p.produce("plain", b"p" * 200, on_delivery=lambda err, _m: acked.append(1) if err is None else None)
        p.poll(0)
    p.flush(30)


def _consume(bootstrap: str, topic: str, client_id: str, isolation: str, seconds: float, got: list[int]) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": client_id, "client.id": client_id,
                  "isolation.level": isolation, "fetch.wait.max.ms": 500, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        m = c.poll(0.05)
        if m is not None and m.error() is None:
            got.append(1)
    c.close()


def test_committed_and_compressed_records_are_read_and_judged_by_the_brokers_clock(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from fetchlat.embedded import kafka

    traces = tmp_path / "traces"
    committed: list[int] = []
    aborted: list[int] = []
    acked: list[int] = []
    read_txn: list[int] = []
    read_plain: list[int] = []
    with kafka.cluster(tmp_path / "kafka", brokers=1, sidecars=True,
                       sidecar_args=["--trace-dir", str(traces), "--trace-rotate-s", "1"]) as c:
        b = c.bootstrap
        admin = AdminClient({"bootstrap.servers": b})
        for f in admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1)
                                      for t in ("txn", "plain")]).values():
            f.result(timeout=30)
        stop = threading.Event()
        consumers = [threading.Thread(target=_consume, args=(b, "txn", "txn-committed", "read_committed", 11.0,
                                                             read_txn)),
                     threading.Thread(target=_consume, args=(b, "plain", "lz4-uncommitted", "read_uncommitted", 11.0,
                                                             read_plain))]
        producers = [threading.Thread(target=_transactions, args=(b, stop, committed, aborted)),
                     threading.Thread(target=_idempotent, args=(b, stop, acked))]
        for t in consumers + producers:
            t.start()
        time.sleep(7.0)
        stop.set()
        for t in producers + consumers:
            t.join(60)
        time.sleep(2.5)  # the sidecar closes its trace files every second
    assert sum(committed) >= 50 and sum(aborted) >= 10, (committed, aborted)
    assert len(read_txn) == sum(committed), (len(read_txn), sum(committed), sum(aborted))  # none aborted
    assert len(read_plain) == len(acked) > 30, (len(read_plain), len(acked))

    requests = list(rl.read(c.nodes[0].request_log, "0", [rl.API_KEYS["Fetch"]]))
    figures = {}
    for client in ("txn-committed", "lz4-uncommitted"):
        rows = [r for r in rl.trace_rows(traces) if r["client_id"] == client]
        start = min(r["ts_ns"] for r in rows)
        pairs, unmatched = rl.join([r for r in rows if r["ts_ns"] >= start + 1_000_000_000], requests)
        figures[client] = judge(pairs, len(unmatched))
    with RESULTS.open("a") as fh:
        fh.write(json.dumps({"test": "transactions", **figures}) + "\n")
    for client, f in figures.items():
        assert f["by_broker_outcome"]["woken"]["n"] >= 10, (client, f)
    hold_all([(client, f, KNOWN) for client, f in figures.items()])


# woken by the commit marker: dated by the answer (before that rule: |err| p50 205 ms, the fetch
# dated by the produce of records the open transaction still hid); 25 fetches, 17 of them woken
MARKER = ("a read_committed fetch is woken by the commit marker's append, dated by the answer; lz4 batches "
          "and transactions make the broker's own read longer and more variable")
# the figures: the five recorded runs of each consumer (three inside a whole fresh make test), the last on 2026-12-04
KNOWN = [
    KnownMiss("abs_err_p50_ms", 1.77, "0.34-0.68 ms (0.64-1.08 alone, 1.77 inside a whole make test, before "
              "2026-12-04)",
              MARKER),
    KnownMiss("abs_err_p99_ms", 6.15, "2.9-5.0 ms (the p99 of 25-62 fetches is the worst one or two); 6.1 ms in a "
              "run of 2026-12-06", MARKER),
    KnownMiss("outcome_agree_share", 0.96, "100 % over five runs (one fetch of 25 is 4 %)", MARKER),
    KnownMiss("matched_share", 0.96, "100 % over five runs; never missed in five runs: the bound is one fetch of "
              "25", "a consumer's last fetch may die with it"),
    KnownMiss("local_bias_ms:woken", 0.99, "-0.63 to +0.41 ms; 0.99 ms in a run of 2026-12-06", MARKER),
    KnownMiss("local_bias_ms:expired", 0.6, "-0.41 to +0.54 ms over 8-9 fetches; 0.60 ms in a run of 2026-12-06",
              "the broker's expiry lateness, learned by the sidecar's probes"),
]
