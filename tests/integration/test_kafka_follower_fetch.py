"""Fetch from follower (KIP-392) on Apache Kafka: 3 brokers in 3 racks, each behind its sidecar,
the rack-aware replica selector on, and a Java consumer in a follower's rack. The leader's
first answer names the preferred read replica; the client finds that broker's address in the
metadata the proxy rewrote (its sidecar), and from then on fetches from the follower through
the follower's sidecar, labelled ``kind=consumer`` on that broker, and joined with that
broker's request log (no fetch bypasses the sidecar), where its wait is judged against the
follower's ``remoteTimeMs``: the follower shows data only once its high watermark moves, which
the follower's sidecar cannot see, so the model dates it from the answer (metrics/model.py)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from fetchlat.verify import request_log as rl

from testkit.goals import KnownMiss, hold, judge

from .conftest import JUDGED_BY_THE_BROKERS_CLOCK
from .test_broker_clock import RESULTS
from .test_kafka_sessions import java_consumer

pytestmark = [pytest.mark.integration, pytest.mark.long, JUDGED_BY_THE_BROKERS_CLOCK]  # make test-long

TOPIC = "racks"  # one partition, replicated to all three brokers
CLIENT = "rack-consumer"


def _feed(bootstrap: str, stop: threading.Event, failed: list[int]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", "client.id": "rack-feeder"})
    while not stop.wait(0.05):
        p.produce(TOPIC, b"x" * 100, on_delivery=lambda err, _m: failed.append(1) if err else None)
        p.poll(0)
    p.flush(30)


def test_a_consumer_in_a_followers_rack_fetches_through_that_followers_sidecar(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from fetchlat.embedded import kafka

    traces = tmp_path / "traces"
    racks = ["rack-0", "rack-1", "rack-2"]
    stop, failed = threading.Event(), []  # type: ignore[var-annotated]
    with kafka.cluster(tmp_path / "kafka", brokers=3, sidecars=True, racks=racks,
                       settings={"replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector"},
                       sidecar_args=["--trace-dir", str(traces), "--trace-rotate-s", "1"]) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=3)]).values():
            f.result(timeout=30)
        time.sleep(2.0)
        leader = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].leader
        follower = (leader + 1) % 3
        feeder = threading.Thread(target=_feed, args=(c.bootstrap, stop, failed))
        feeder.start()
        try:
            consumer = java_consumer(c.bootstrap, TOPIC, CLIENT, 14, "fetch.max.wait.ms=500",
                                     f"client.rack={racks[follower]}")
            out, err = consumer.communicate(timeout=90)
            assert consumer.returncode == 0, err
        finally:
            stop.set()
            feeder.join(60)
        time.sleep(2.5)  # the sidecars close their trace files every second
    assert not failed, "an acks=all record was not acknowledged"
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["records"] >= 100, summary

    rows = [r for r in rl.trace_rows(traces) if r["client_id"] == CLIENT]
    by_broker = {b: sum(1 for r in rows if r["broker"] == b) for b in ("0", "1", "2")}
    # the leader answers the first fetch(es) with the redirect; every later one goes to the follower
    assert by_broker[str(follower)] >= 0.9 * len(rows) and by_broker[str(follower)] >= 20, (leader, by_broker)
    at_follower = [r for r in rows if r["broker"] == str(follower)]
    assert {r["kind"] for r in at_follower} == {"consumer"}

    log = [r for r in rl.read(c.nodes[follower].request_log, str(follower), [rl.API_KEYS["Fetch"]])
           if r.client_id == CLIENT]
    pairs, unmatched = rl.join(at_follower, log)
    assert len(pairs) == len(log), "a fetch reached the follower without crossing its sidecar"
    figures = judge(pairs, len(unmatched))
    with RESULTS.open("a") as fh:
        fh.write(json.dumps({"test": "fetch_from_follower", "leader": leader, "follower": follower,
                             "fetches_by_broker": by_broker, **figures}) + "\n")
    hold("fetch_from_follower", figures, KNOWN)


# the follower shows the data once its high watermark moves, which only the leader's answer to
# the follower's own fetch says: the consumer's fetch is dated from when the follower's sidecar
# saw that (before that was modelled: 0.8 % agreed, |err| p50 44.5 ms)
HW_UNSEEN = ("a consumer's fetch at a follower is woken when the follower's high watermark moves, which its "
             "sidecar sees only in the leader's answer to the follower's fetch: estimated")
KNOWN = [
    KnownMiss("abs_err_p50_ms", 2.0, "1.02 ms with the wait ending at the answer (2026-12-05); 1.7-2.0 ms before",
              HW_UNSEEN),
    KnownMiss("abs_err_p99_ms", 14.6, "14.6 ms (2026-12-05)", HW_UNSEEN),
    KnownMiss("outcome_agree_share", 0.985, "98.5 % (2026-12-05), 98.9-99.6 % (docs/kafka.md)", HW_UNSEEN),
    KnownMiss("local_bias_ms:woken", 1.82, "-0.77 ms (2026-12-05), -1.82 ms (2026-11-27, beside a soak)", HW_UNSEEN),
    KnownMiss("local_bias_ms:immediate", 10.9, "-10.9 ms over 3 fetches (2026-11-27)",
              "fetchlat's local includes the socket's time"),
    KnownMiss("matched_share", 0.95, "100 % in the recorded runs; never missed in the recorded runs: the bound is "
              "one fetch of 20", "a consumer's last fetch may die with it"),
]
