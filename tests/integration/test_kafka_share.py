"""Share groups (KIP-932) through the proxy, on Apache Kafka 4.4 (a single node behind its
sidecar): Kafka's own ``KafkaShareConsumer`` reads every record of a topic in a share group,
acknowledging each, with its ShareFetch and ShareAcknowledge requests crossing the sidecar,
which reads their responses (v1-v2, to rewrite NodeEndpoints) without a decode error. The
share-fetch latency itself (wait, local, ``kind=share``) is not built yet: docs/kafka.md."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .test_ground_truth import create_topic

pytestmark = pytest.mark.integration

CLIENTS_DIR = Path(__file__).with_name("clients")
RECORDS = 50


def _by_api(text: str, name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out[s.labels["api"]] = out.get(s.labels["api"], 0.0) + s.value
    return out


def test_a_share_consumer_reads_every_record_through_the_sidecar(tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from fetchlat.embedded import kafka

    with kafka.cluster(tmp_path / "kafka", brokers=1, sidecars=True) as c:
        b = c.bootstrap
        create_topic(b, "shared", 0)
        done = kafka.tool("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", b, "--alter",
                          "--entity-type", "groups", "--entity-name", "share-group",
                          "--add-config", "share.auto.offset.reset=earliest")
        assert done.returncode == 0, done.stderr
        p = Producer({"bootstrap.servers": b, "acks": "all", "client.id": "share-producer"})
        for i in range(RECORDS):
            p.produce("shared", f"v{i}".encode())
        assert p.flush(30) == 0
        out = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", f"{kafka.ensure_jars()}/*",
                              str(CLIENTS_DIR / "ShareConsumer.java"), b, "shared", "share-group", str(RECORDS), "60"],
                             capture_output=True, text=True, timeout=120, check=False)
        assert out.returncode == 0, out.stderr[-3000:]
        metrics = c.sidecars[0].metrics()
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"records": RECORDS}
    requests = _by_api(metrics, "fetchlat_requests_total")
    assert requests.get("ShareFetch", 0) >= 1 and requests.get("ShareGroupHeartbeat", 0) >= 1, requests
    errors = _by_api(metrics, "fetchlat_decode_errors_total")
    assert not {k: v for k, v in errors.items() if k.startswith("Share") and v}, errors
