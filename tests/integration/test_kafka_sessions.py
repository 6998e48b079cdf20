"""Fetch sessions (KIP-227) live, on Apache Kafka (a single node behind its sidecar).

The Java consumer fetches incrementally: after its first full fetch each request names only the
partitions that changed. A producer feeds 6 partitions every 10 ms, so the consumer fetches
thousands of times; a second consumer joins its group and leaves again (partitions forgotten,
then added back); then the first pauses, the broker restarts (its session cache is gone with
it), and the consumer resumes on a session the broker no longer knows: the broker answers
``FETCH_SESSION_ID_NOT_FOUND`` and the client starts a new session. Judged by the sidecar's
session counters (every incremental fetch on a mirrored session and in step) and against the
broker's request log: an incremental fetch's wait agrees with ``remoteTimeMs`` as a full
fetch's does in ``test_broker_clock.py``."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

import pytest
from fetchlat.verify import request_log as rl
from prometheus_client.parser import text_string_to_metric_families

from testkit.goals import KnownMiss, hold, judge

from .conftest import JUDGED_BY_THE_BROKERS_CLOCK
from .test_broker_clock import RESULTS

pytestmark = [pytest.mark.integration, JUDGED_BY_THE_BROKERS_CLOCK]

CLIENTS_DIR = Path(__file__).with_name("clients")
TOPIC, PARTITIONS = "sessions", 6
FETCH_SESSION_ID_NOT_FOUND = 70


def java_consumer(bootstrap: str, topic: str, client_id: str, seconds: int, *settings: str) -> subprocess.Popen[str]:
    """``clients/LongConsumer.java`` in group ``<topic>-group``: stdin takes pause/resume."""
    from fetchlat.embedded import kafka

    return subprocess.Popen(
        ["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", f"{kafka.ensure_jars()}/*",
         str(CLIENTS_DIR / "LongConsumer.java"), bootstrap, topic, f"{topic}-group", client_id, str(seconds),
         *settings],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)


def _feed(bootstrap: str, stop: threading.Event, failed: list[int]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1, "client.id": "sessions-feeder",
                  "message.timeout.ms": 60000})
    i = 0
    while not stop.wait(0.01):
        p.produce(TOPIC, b"x" * 100, partition=i % PARTITIONS,
                  on_delivery=lambda err, _m: failed.append(1) if err else None)
        p.poll(0)
        i += 1
    p.flush(60)


def _wait_line(stream: IO[str], want: str, timeout_s: float) -> None:
    """Read ``stream`` up to the line ``want`` (and no further: the rest is the caller's)."""
    seen = threading.Event()

    def read() -> None:
        for line in iter(stream.readline, ""):
            if line.strip() == want:
                seen.set()
                return

    threading.Thread(target=read, daemon=True).start()
    assert seen.wait(timeout_s), f"the consumer never said {want!r}"


def _sessions(text: str) -> dict[str, float]:
    return {s.labels["event"]: s.value for fam in text_string_to_metric_families(text)
            for s in fam.samples if s.name == "fetchlat_fetch_sessions_total"}


def test_java_incremental_sessions_are_mirrored_in_step_and_recover_from_a_lost_session(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    from fetchlat.embedded import kafka

    traces = tmp_path / "traces"
    stop, failed = threading.Event(), []  # type: ignore[var-annotated]
    with kafka.cluster(tmp_path / "kafka", brokers=1, sidecars=True,
                       sidecar_args=["--trace-dir", str(traces), "--trace-rotate-s", "1"]) as c:
        b = c.bootstrap
        admin = AdminClient({"bootstrap.servers": b})
        for f in admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)]).values():
            f.result(timeout=30)
        feeder = threading.Thread(target=_feed, args=(b, stop, failed))
        feeder.start()
        a = java_consumer(b, TOPIC, "sessions-a", 34, "fetch.max.wait.ms=500")
        try:
            time.sleep(7.0)
            second = java_consumer(b, TOPIC, "sessions-b", 7, "fetch.max.wait.ms=500")  # joins, then leaves
            assert second.wait(60) == 0, second.stderr.read() if second.stderr else ""
            time.sleep(3.0)  # the group settles back on one member
            assert a.stdin is not None and a.stdout is not None
            a.stdin.write("pause\n")
            _wait_line(a.stdout, "paused", 10.0)
            time.sleep(1.0)  # longer than the fetch max wait: nothing in flight
            c.nodes[0].restart()
            a.stdin.write("resume\n")
            out, err = a.communicate(timeout=60)
            assert a.returncode == 0, err
        finally:
            if a.poll() is None:
                a.kill()
            stop.set()
            feeder.join(90)
        summary = json.loads(out.strip().splitlines()[-1])
        metrics = c.sidecars[0].metrics()
        time.sleep(2.5)  # the sidecar closes its trace files every second
    assert not failed, "a record was not acknowledged"
    assert summary["records"] > 1000 and summary["assignments"] >= 3, summary  # alone, shared, alone again

    events = _sessions(metrics)
    # every incremental fetch on a session the mirror saw start, at the epoch due
    assert events["incremental"] >= 1000 and events["unknown"] == 0 and events["out_of_step"] == 0, events
    assert events["errors"] >= 1 and events["created"] >= 2, events  # the lost session, and a new one

    requests = list(rl.read(c.nodes[0].request_log, "0", [rl.API_KEYS["Fetch"]]))
    lost = [r for r in requests if r.client_id == "sessions-a" and r.error_code == FETCH_SESSION_ID_NOT_FOUND]
    assert lost, "the broker never refused the consumer's session"
    rows = [r for r in rl.trace_rows(traces) if r["client_id"] == "sessions-a"]
    pairs, unmatched = rl.join(rows, requests)
    incremental = [p for p in pairs if (p.broker.session_epoch or 0) > 0 and p.broker.error_code == 0]
    figures = judge(incremental, len(unmatched))
    with RESULTS.open("a") as fh:
        fh.write(json.dumps({"test": "java_incremental_sessions", "sessions": events, **figures}) + "\n")
    assert figures["matched"] >= 1000, figures
    hold("java_incremental_sessions", figures, KNOWN)


# a fetch whose data's produce went upstream within about a millisecond of it, either way, is
# immediate or woken as the broker's queues order the two: no proxy can tell. With a produce
# every 10 ms that is a few percent of the fetches
RACE = "a fetch and the produce of its data within a millisecond of each other: the broker's queues order them"
KNOWN = [
    KnownMiss("outcome_agree_share", 0.957, "95.7-99.6 % (97.7-98.2 % on a quiet machine, docs/kafka.md)", RACE),
    KnownMiss("abs_err_p50_ms", 0.36, "0.22-0.36 ms, more with other tests' processes running", RACE),
    KnownMiss("abs_err_p99_ms", 5.4, "3.5-5.4 ms; 8.7 and 9.8 ms in a CI run whose broker's own local-time p99 was "
              "13-14 ms (4.1-6.7 ms otherwise): 0.66-0.89 of that p99 in eight runs (2026-12-06)",
              RACE + "; a late wake-up of the broker sets the p99", of_broker_local=0.89),
    KnownMiss("local_bias_ms:woken", 0.22, "+0.09 to +0.18 ms (four runs), +0.22 ms with the wait ending at the answer "
              "(2026-12-05: the broker parked these 0.2 ms after they went out, the model takes 0.4)", RACE),
    KnownMiss("local_bias_ms:immediate", 0.08, "+0.08 ms (2026-11-27)",
              "fetchlat's local includes the socket's time"),
    KnownMiss("local_bias_ms:expired", 10.6, "+10.6 ms, one fetch (2026-11-27)",
              "the broker's expiry lateness, learned by the sidecar's probes"),
]
