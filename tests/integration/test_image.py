"""The sidecar image, built and run: ``make image`` (Docker from Debian's packages, the base made
with mmdebstrap where no registry gives it), then the image in front of an Apache Kafka 4.4
broker on this host's loopback, as its sidecar. Clients go through it, the native core's relay
takes their connections, traces are written, and ``/metrics`` says the fast road runs.

Slow (the image compiles the hot path and the core): ``make test-long``."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.integration, pytest.mark.long]

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "fetchlat:test"


def metrics(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_the_image_runs_the_fast_road_as_a_kafka_sidecar(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from fetchlat.embedded import kafka

    built = subprocess.run(["make", "-s", "-C", str(ROOT), "image", f"IMAGE={IMAGE}"], capture_output=True,
                           text=True, timeout=3600)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    sidecar_port, metrics_port = kafka.free_port(), kafka.free_port()
    traces = tmp_path / "traces"
    traces.mkdir()
    traces.chmod(0o777)  # the image runs as uid 10001
    name = f"fetchlat-test-{uuid.uuid4().hex[:8]}"
    with kafka.cluster(tmp_path / "kafka", brokers=1, advertised_ports=[sidecar_port]) as c:
        node = c.nodes[0]
        run = subprocess.run(
            ["docker", "run", "-d", "--rm", "--name", name, "--network", "host", "-v", f"{traces}:/traces",
             IMAGE, "--sidecar-node", "0", "--upstream", node.bootstrap, "--listen", f"127.0.0.1:{sidecar_port}",
             "--metrics-listen", f"127.0.0.1:{metrics_port}", "--trace-dir", "/traces", "--trace-rotate-s", "1"],
            capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/health/ready", timeout=2).status == 200:
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, subprocess.run(["docker", "logs", name], capture_output=True,
                                                                   text=True).stderr[-3000:]
                time.sleep(0.5)
            bootstrap = f"127.0.0.1:{sidecar_port}"
            # the test broker creates no topic on first use: CreateTopics goes through the image too
            admin = AdminClient({"bootstrap.servers": bootstrap})
            created = admin.create_topics([NewTopic("image", num_partitions=2, replication_factor=1)])
            created["image"].result(timeout=30)
            failed: list[object] = []
            p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
            for i in range(200):
                p.produce("image", f"record-{i}".encode(), on_delivery=lambda err, _m: err and failed.append(err))
            assert p.flush(30) == 0
            assert failed == []
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "image", "auto.offset.reset": "earliest"})
            consumer.subscribe(["image"])
            got, deadline = 0, time.monotonic() + 60
            while got < 200 and time.monotonic() < deadline:
                m = consumer.poll(1.0)
                if m is not None and m.error() is None:
                    got += 1
            consumer.close()
            assert got == 200, subprocess.run(["docker", "logs", name], capture_output=True, text=True).stderr[-3000:]
            time.sleep(2.5)  # the tick takes what the relay queued; the trace files rotate each second
            m = metrics(metrics_port)
            assert [labels["hot_path"] for labels, _ in m["fetchlat_build_info"]] == ["native"]
            assert sum(v for _, v in m["fetchlat_relay_handovers_total"]) >= 2  # producer and consumer
            fetches = sum(v for labels, v in m["fetchlat_requests_total"] if labels.get("api") == "Fetch")
            assert fetches > 0
        finally:
            subprocess.run(["docker", "stop", "-t", "20", name], capture_output=True, timeout=60)
    files = [f for f in traces.rglob("*.parquet")]
    assert files, "the sidecar wrote traces"
    assert os.stat(files[0]).st_size > 0
