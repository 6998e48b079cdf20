"""Every client of the compatibility matrix (docs/kafka.md) through fetchlat sidecars in front
of Apache Kafka: a single KRaft node and a 3-broker cluster (topics of replication factor 3,
``min.insync.replicas=2``), each broker behind its own sidecar and advertising it, as
docs/deployment.md deploys them.

Clients: the Java client (admin; producer; consumer with the classic group protocol and with
KIP-848's ``group.protocol=consumer``), Kafka's own tools (TopicCommand, the console producer
and consumer, ``kafka-producer-perf-test`` and ``kafka-consumer-perf-test``), confluent-kafka,
kafka-python, aiokafka, kcat and KafkaJS. Each scenario creates a topic, produces with
``acks=all``, consumes in a group and commits, lists topics and describes the cluster; every
record is accounted for twice — by the client, and by the sidecars' own count of produced
records — and a sampler watching every TCP socket on the machine shows that only the
sidecars ever connect to a broker's port (no client, and no follower, bypasses them).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from . import test_clients as python_clients
from .conftest import ConnectionSampler

pytestmark = pytest.mark.integration

CLIENTS_DIR = Path(__file__).with_name("clients")
JAVA_SCENARIO = CLIENTS_DIR / "ClientScenario.java"
KAFKAJS_SCENARIO = CLIENTS_DIR / "scenario.js"
RECORDS = sorted(f"{k.decode()}:{v.decode()}" for k, v in python_clients.RECORDS)


@pytest.fixture(scope="module", params=[1, 3], ids=["single-node", "three-brokers"])
def kafka_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from fetchlat.embedded import kafka

    home = tmp_path_factory.mktemp(f"kafka-clients-{request.param}")
    with kafka.cluster(home, brokers=request.param, sidecars=True) as c:
        yield c


def sidecar_counts(cluster: Any) -> Counter[str]:
    """Over all sidecars: requests by API (``fetchlat_requests_total``) and, as ``"records"``,
    the records produced (``fetchlat_produced_records_total``)."""
    counts: Counter[str] = Counter()
    for s in cluster.sidecars:
        for fam in text_string_to_metric_families(s.metrics()):
            for x in fam.samples:
                if x.name == "fetchlat_requests_total":
                    counts[x.labels["api"]] += int(x.value)
                elif x.name == "fetchlat_produced_records_total":
                    counts["records"] += int(x.value)
    return counts


@dataclass
class Seen:
    sampler: ConnectionSampler | None = None
    counts: Counter[str] = field(default_factory=Counter)  # what the sidecars counted while the body ran


@contextmanager
def through_sidecars(cluster: Any, records: int) -> Iterator[Seen]:
    """Watches who connects to the brokers while the body runs; afterwards, only sidecars did,
    and the sidecars counted exactly ``records`` more produced records."""
    before = sidecar_counts(cluster)
    sidecar_pids = {s.proc.pid for s in cluster.sidecars}
    seen = Seen()
    with ConnectionSampler(cluster.broker_ports, {n.advertised_port for n in cluster.nodes}) as seen.sampler:
        yield seen
    sampler = seen.sampler
    assert sampler.samples > 5
    assert sampler.to_broker <= sidecar_pids, f"a connection bypassed the sidecars: {sampler.to_broker - sidecar_pids}"
    assert sampler.to_proxy, "nothing connected to a sidecar"
    seen.counts = sidecar_counts(cluster)
    seen.counts.subtract(before)
    assert seen.counts["records"] == records
    assert seen.counts["Fetch"] > 0


GROUP_API = {"classic": "JoinGroup", "consumer": "ConsumerGroupHeartbeat"}


def rf(cluster: Any) -> int:
    return len(cluster.nodes)


def expect(outcome: dict[str, Any], cluster: Any) -> None:
    assert outcome == {"consumed": RECORDS, "committed": len(RECORDS), "topic_listed": True, "partitions": 3,
                       "node_ids": sorted(n.node_id for n in cluster.nodes)}


def run(cmd: list[str], timeout_s: float = 120) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    assert done.returncode == 0, f"{cmd[:4]}... exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


# ------------------------------------------------------------------- Python clients
@pytest.mark.parametrize("client", sorted(python_clients.SCENARIOS))
def test_python_client(client: str, kafka_cluster: Any) -> None:
    with through_sidecars(kafka_cluster, len(RECORDS)):
        o = python_clients.SCENARIOS[client](kafka_cluster.bootstrap, rf(kafka_cluster))
    expect({"consumed": sorted(f"{k.decode()}:{v.decode()}" for k, v in o.consumed), "committed": o.committed,
            "topic_listed": o.topic_listed, "partitions": o.partitions, "node_ids": list(o.node_ids)}, kafka_cluster)


# ------------------------------------------------------------------- the Java client
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_java_client(protocol: str, kafka_cluster: Any) -> None:
    from fetchlat.embedded import kafka

    topic, group = python_clients.names()
    cmd = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", f"{kafka.ensure_jars()}/*", str(JAVA_SCENARIO),
           kafka_cluster.bootstrap, topic, group, protocol, str(rf(kafka_cluster))]
    with through_sidecars(kafka_cluster, len(RECORDS)) as seen:
        out = run(cmd)
    expect(json.loads(out.strip().splitlines()[-1]), kafka_cluster)
    assert seen.counts[GROUP_API[protocol]] > 0  # the group protocol asked for is the one spoken
    assert seen.counts["CreateTopics"] == 1 and seen.counts["DescribeCluster"] >= 1


# ------------------------------------------------------------------- Kafka's own tools
def tool(main: str, *args: str, stdin: str | None = None) -> str:
    from fetchlat.embedded import kafka

    done = kafka.tool(main, *args, stdin=stdin)
    assert done.returncode == 0, f"{main} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


TOPICS = "org.apache.kafka.tools.TopicCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"


def create_topic(cluster: Any, topic: str) -> None:
    tool(TOPICS, "--bootstrap-server", cluster.bootstrap, "--create", "--topic", topic, "--partitions", "3",
         "--replication-factor", str(rf(cluster)))
    described = tool(TOPICS, "--bootstrap-server", cluster.bootstrap, "--describe", "--topic", topic)
    assert described.count(f"Topic: {topic}\tPartition:") == 3, described


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_console_producer_and_consumer(protocol: str, kafka_cluster: Any) -> None:
    topic, group = python_clients.names()
    with through_sidecars(kafka_cluster, len(RECORDS)) as seen:
        create_topic(kafka_cluster, topic)
        tool(CONSOLE_PRODUCER, "--bootstrap-server", kafka_cluster.bootstrap, "--topic", topic,
             "--command-property", "acks=all", "--reader-property", "parse.key=true",
             "--reader-property", "key.separator=:", stdin="".join(r + "\n" for r in RECORDS))
        out = tool(CONSOLE_CONSUMER, "--bootstrap-server", kafka_cluster.bootstrap, "--topic", topic,
                   "--group", group, "--from-beginning", "--max-messages", str(len(RECORDS)),
                   "--timeout-ms", "60000", "--command-property", f"group.protocol={protocol}",
                   "--formatter-property", "print.key=true", "--formatter-property", "key.separator=:")
    assert sorted(out.split()) == RECORDS
    assert seen.counts[GROUP_API[protocol]] > 0


PERF_RECORDS = 20_000


def test_perf_tools(kafka_cluster: Any) -> None:
    """kafka-producer-perf-test then kafka-consumer-perf-test: every record out and back."""
    topic = f"perf-{uuid.uuid4().hex[:8]}"
    with through_sidecars(kafka_cluster, PERF_RECORDS):
        create_topic(kafka_cluster, topic)
        produced = tool(PRODUCER_PERF, "--topic", topic, "--num-records", str(PERF_RECORDS), "--record-size", "100",
                        "--throughput", "-1", "--command-property", f"bootstrap.servers={kafka_cluster.bootstrap}",
                        "acks=all")  # one flag, several values
        consumed = tool(CONSUMER_PERF, "--bootstrap-server", kafka_cluster.bootstrap, "--topic", topic,
                        "--num-records", str(PERF_RECORDS), "--timeout", "60000")
    assert f"{PERF_RECORDS} records sent" in produced, produced
    header, row = consumed.strip().splitlines()[-2:]
    stats = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")], strict=True))
    assert int(stats["data.consumed.in.nMsg"]) == PERF_RECORDS, consumed


# ------------------------------------------------------------------- kcat and KafkaJS
@pytest.mark.skipif(shutil.which("kcat") is None, reason="Debian kcat not installed (make deps installs it)")
def test_kcat(kafka_cluster: Any) -> None:
    topic, group = python_clients.names()
    create_topic(kafka_cluster, topic)
    with through_sidecars(kafka_cluster, len(RECORDS)):
        b = kafka_cluster.bootstrap
        produced = subprocess.run(["kcat", "-P", "-b", b, "-t", topic, "-K:", "-X", "acks=all"],
                                  input="".join(r + "\n" for r in RECORDS).encode(), capture_output=True, timeout=40)
        assert produced.returncode == 0, produced.stderr
        md = json.loads(run(["kcat", "-L", "-J", "-b", b, "-t", topic], timeout_s=40))
        grouped = run(["kcat", "-b", b, "-G", group, topic, "-o", "beginning", "-e", "-f", "%k:%s\n",
                       "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100"], timeout_s=60)
    assert sorted(grouped.split()) == RECORDS
    assert sorted(x["id"] for x in md["brokers"]) == sorted(n.node_id for n in kafka_cluster.nodes)
    assert {x["name"] for x in md["brokers"]} == {f"127.0.0.1:{n.advertised_port}" for n in kafka_cluster.nodes}


@pytest.mark.skipif(not (CLIENTS_DIR / "node_modules" / "kafkajs").is_dir() or shutil.which("node") is None,
                    reason="KafkaJS not installed (make deps installs it with npm)")
def test_kafkajs(kafka_cluster: Any) -> None:
    topic, group = python_clients.names()
    with through_sidecars(kafka_cluster, len(RECORDS)):
        out = run(["node", str(KAFKAJS_SCENARIO), kafka_cluster.bootstrap, topic, group, str(rf(kafka_cluster))])
    expect(json.loads(out.strip().splitlines()[-1]), kafka_cluster)
