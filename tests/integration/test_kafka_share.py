"""Share groups (KIP-932) through the proxy, on Apache Kafka 4.4 (a single node behind its
sidecar): a share consumer (Kafka's own ``KafkaShareConsumer`` in explicit and implicit
acknowledgement mode, and librdkafka's ``ShareConsumer`` from confluent-kafka) reads every
record of a topic in a share group with its ShareFetch and ShareAcknowledge requests crossing
the sidecar, which decodes them without an error, and the true share-fetch latency
(``kind=share``: wait, local, outcome) is judged against the broker's request log as consumer
fetches are in ``test_broker_clock.py``."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from fetchlat.verify import request_log as rl
from prometheus_client.parser import text_string_to_metric_families

from testkit.goals import KnownMiss, hold, judge

from .conftest import JUDGED_BY_THE_BROKERS_CLOCK
from .test_broker_clock import RESULTS
from .test_ground_truth import create_topic

pytestmark = [pytest.mark.integration, JUDGED_BY_THE_BROKERS_CLOCK]

CLIENTS_DIR = Path(__file__).with_name("clients")


def _by_label(text: str, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out[s.labels[label]] = out.get(s.labels[label], 0.0) + s.value
    return out


def _share_consumer(bootstrap: str, topic: str, group: str, records: int, seconds: int, mode: str,
                    client_id: str) -> subprocess.Popen[str]:
    from fetchlat.embedded import kafka

    return subprocess.Popen(["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", f"{kafka.ensure_jars()}/*",
                             str(CLIENTS_DIR / "ShareConsumer.java"), bootstrap, topic, group, str(records),
                             str(seconds), mode, client_id], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _feed(bootstrap: str, topic: str, stop: threading.Event, sent: list[int], burst_at: list[int]) -> None:
    """Twice a record every 100 ms for 5 s (each wakes a parked share fetch) after 3 s of quiet
    (the share consumer's long polls expire), then a burst of 3 000 (share fetches find records
    waiting)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "client.id": "share-producer"})
    for phase in range(2):
        if stop.wait(3.0):
            return
        for i in range(50):
            p.produce(topic, f"t{phase}-{i}".encode())
            p.poll(0)
            sent.append(1)
            if stop.wait(0.1):
                return
    burst_at.append(time.time_ns())
    for i in range(3000):
        p.produce(topic, f"b{i}".encode())
        sent.append(1)
        if i % 100 == 0:
            p.poll(0)
    assert p.flush(30) == 0


class _RdkafkaShareConsumer(threading.Thread):
    """librdkafka's share consumer (implicit acknowledgement), as the Java one's process is used:
    ``communicate`` returns its JSON line and ``returncode``."""

    def __init__(self, bootstrap: str, topic: str, group: str, records: int, seconds: int, client_id: str) -> None:
        super().__init__(daemon=True)
        self.args = (bootstrap, topic, group, records, seconds, client_id)
        self.got: set[bytes] = set()
        self.error = ""
        self.returncode: int | None = None

    def run(self) -> None:
        from confluent_kafka import ShareConsumer

        bootstrap, topic, group, records, seconds, client_id = self.args
        try:
            c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id})
            c.subscribe([topic])
            deadline = time.monotonic() + seconds  # a bound, not a goal
            while len(self.got) < records and time.monotonic() < deadline:
                for m in c.poll(0.5):
                    if m.error() is None:
                        self.got.add(m.value())
            c.close()
            self.returncode = 0
        except Exception as exc:  # reported by the test
            self.error, self.returncode = repr(exc), 1

    def poll(self) -> int | None:
        return self.returncode if not self.is_alive() else None

    def kill(self) -> None:
        pass  # bounded by its own deadline

    def communicate(self, timeout: float) -> tuple[str, str]:
        self.join(timeout)
        return json.dumps({"records": len(self.got)}), self.error


# The Java consumer acknowledging explicitly (ShareAcknowledge) runs with make test; its implicit
# mode and librdkafka's (implicit) consumer with make test-long (make test's 25 minutes are near:
# 24 min 27 s on a fresh clone with the librdkafka case in it)
CLIENTS = ["java-explicit", pytest.param("java-implicit", marks=pytest.mark.long),
           pytest.param("librdkafka", marks=pytest.mark.long)]


@pytest.mark.parametrize("client", CLIENTS)
def test_share_fetch_latency_agrees_with_the_brokers_clock(tmp_path: Path, client: str) -> None:
    from fetchlat.embedded import kafka

    traces = tmp_path / "traces"
    mode = client.split("-")[-1]
    name = client
    topic, group, client = f"shared-{name}", f"share-group-{name}", f"share-{name}"
    with kafka.cluster(tmp_path / "kafka", brokers=1, sidecars=True,
                       sidecar_args=["--trace-dir", str(traces), "--trace-rotate-s", "1"]) as c:
        b = c.bootstrap
        create_topic(b, topic, 0)
        done = kafka.tool("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", b, "--alter",
                          "--entity-type", "groups", "--entity-name", group,
                          "--add-config", "share.auto.offset.reset=earliest")
        assert done.returncode == 0, done.stderr
        sent: list[int] = []
        stop = threading.Event()
        consumer: subprocess.Popen[str] | _RdkafkaShareConsumer
        if mode == "librdkafka":
            consumer = _RdkafkaShareConsumer(b, topic, group, 3100, 40, client)
            consumer.start()
        else:
            consumer = _share_consumer(b, topic, group, 3100, 40, mode, client)
        burst_at: list[int] = []  # when the burst began (wall clock, as the trace rows' ts_ns)
        feeder = threading.Thread(target=_feed, args=(b, topic, stop, sent, burst_at))
        try:
            time.sleep(4.0)  # the consumer joins its share group before the first record
            feeder.start()
            out, err = consumer.communicate(timeout=90)
        finally:
            if consumer.poll() is None:
                consumer.kill()
            stop.set()
            if feeder.is_alive():
                feeder.join(60)
        assert consumer.returncode == 0, err[-3000:]
        metrics = c.sidecars[0].metrics()
        time.sleep(2.5)  # the sidecar closes its trace files every second
        requests = list(rl.read(c.nodes[0].request_log, "0", [rl.API_KEYS["ShareFetch"]]))
    assert json.loads(out.strip().splitlines()[-1]) == {"records": len(sent)} == {"records": 3100}

    calls = _by_label(metrics, "fetchlat_requests_total", "api")
    assert calls.get("ShareFetch", 0) >= 50 and calls.get("ShareGroupHeartbeat", 0) >= 1, calls
    if mode == "explicit":
        assert calls.get("ShareAcknowledge", 0) >= 1, calls
    errors = {k: v for k, v in _by_label(metrics, "fetchlat_decode_errors_total", "api").items() if v}
    assert not errors, errors
    outcomes = {}
    for fam in text_string_to_metric_families(metrics):
        for s in fam.samples:
            if s.name == "fetchlat_fetches_total" and s.labels["kind"] == "share":
                outcomes[s.labels["outcome"]] = s.value
    assert outcomes.get("expired", 0) >= 3 and outcomes.get("woken", 0) >= 30, outcomes

    rows = [r for r in rl.trace_rows(traces, "ShareFetch") if r["client_id"] == client]
    assert rows and {r["kind"] for r in rows} == {"share"}
    pairs, unmatched = rl.join(rows, requests)
    # a share fetch carrying acknowledgements is answered once the broker has written them to the
    # share-group state: the request log counts that in remoteTimeMs, fetchlat in local time (it
    # waited for the broker's work, not for data). Where fetchlat found the data there at once,
    # the broker's remote time is that write alone: those fetches are judged apart
    persisting = [p for p in pairs if p.broker.acknowledgements and p.row["outcome"] == "immediate"]
    judged = [p for p in pairs if p not in persisting]
    figures = judge(judged, len(unmatched))
    # a share session's first fetches also wait for the broker to initialise the share partition
    # (its state read from the share coordinator), which the request log counts as remote time
    steady = rl.agreement([p for p in judged if (p.broker.session_epoch or 0) >= 2], 0)
    persist_ms = sorted(p.broker.remote_ms for p in persisting)
    with RESULTS.open("a") as fh:
        fh.write(json.dumps({"test": f"share_fetch_{name}", **figures,
                             "steady_abs_err_p50_ms": steady["abs_err_p50_ms"],
                             "steady_abs_err_p99_ms": steady["abs_err_p99_ms"],
                             "immediate_with_acknowledgements": len(persisting),
                             "their_remote_p50_ms": persist_ms[len(persist_ms) // 2] if persist_ms else None}) + "\n")
    # the fetches set apart are the burst's, where records wait for every fetch (a share fetch
    # parks 1.5 ms in when it carries acknowledgements, so data that came before then finds it
    # there: up to 38 of 147 in a run); a session's opening fetch may be one more
    assert burst_at, "the burst never began"
    before_burst = [p.row["ts_ns"] for p in persisting if p.row["ts_ns"] < burst_at[0]]
    assert len(before_burst) <= 2, (len(persisting), [(t - burst_at[0]) / 1e9 for t in before_burst])
    assert len(pairs) >= 0.99 * len(rows), (len(pairs), len(rows))
    hold(f"share_fetch_{name}", figures, KNOWN, kind="share")


# docs/latency-model.md says why: a share fetch parks only after the broker's share-group work
# (the share session, the acknowledgements it carries, trying to acquire) and is answered once
# the broker has read and acquired the records the data woke it for; the request log counts the
# first as local time and the second as remote, and no byte the sidecar sees marks either
SHARE_WORK = ("the broker's share-partition work before parking (the acknowledgements a fetch carries: p50 "
              "1.30-2.09 ms over six runs) and a session's opening state read are not marked by any byte a "
              "proxy sees")
KNOWN = [
    KnownMiss("abs_err_p50_ms", 0.91, "0.24-0.39 ms without acknowledgements (Java, explicit); 0.31-0.91 ms with them "
              "(Java implicit, librdkafka; 2026-12-04, four runs each)", SHARE_WORK),
    KnownMiss("abs_err_p99_ms", 22.8, "3.6-8.0 ms, 13.7 and 22.8 ms once each (2026-12-04)", SHARE_WORK),
    KnownMiss("outcome_agree_share", 0.986, "99.1-100 %; 98.6 % in a run of 2026-12-06", SHARE_WORK),
    KnownMiss("local_bias_ms:woken", 0.9, "-0.38 to +0.31 ms without acknowledgements; -0.90 to -0.05 ms with them "
              "(2026-12-04, three clients, four runs each)", SHARE_WORK),
    KnownMiss("local_bias_ms:expired", 1.21, "-0.30 to +1.21 ms over 6-7 fetches (2026-12-04)",
              "the broker's expiry lateness, learned by the sidecar's probes"),
    KnownMiss("local_bias_ms:immediate", 0.22, "+0.08 to +0.19 ms over 1-9 fetches (2026-12-04); 0.21 ms in a run of "
              "2026-12-06", SHARE_WORK),
]
