"""Every real client works through the real proxy exactly as it does directly (kcat: works
at all, which it cannot against Tansu directly), and no client connection bypasses it.

Each scenario creates a topic, produces 5 records, consumes them in a consumer group and
commits, lists topics and describes the cluster. The broker advertises its own address, so a
client that escaped the proxy would connect to the broker port; a sampler watching every
TCP socket on the machine shows only the proxy process ever does.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from fetchlat import native
from fetchlat.proxy.build import hot_path

from .conftest import JOIN_FAST, TANSU_NODE_ID, Broker, ConnectionSampler, ProxyProc, start_proxy, stop_proxy

pytestmark = pytest.mark.integration

T = TypeVar("T")
RECORDS = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(5)]


@dataclass(frozen=True)
class Outcome:
    consumed: tuple[tuple[bytes, bytes], ...]
    committed: int
    topic_listed: bool
    partitions: int
    node_ids: tuple[int, ...]


def until(get: Callable[[], T], ok: Callable[[T], bool], timeout_s: float = 10.0) -> T:
    """``get()`` again until ``ok`` says yes or the bound passes (a new topic reaches every
    broker's metadata a moment after the controller has it)."""
    deadline = time.monotonic() + timeout_s
    value = get()
    while not ok(value) and time.monotonic() < deadline:
        time.sleep(0.2)
        value = get()
    return value


def names() -> tuple[str, str]:
    u = uuid.uuid4().hex[:8]
    return f"t-{u}", f"g-{u}"


# --------------------------------------------------------------------- confluent-kafka
def confluent_scenario(bootstrap: str, rf: int = 1) -> Outcome:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, group = names()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=rf)]).values():
        f.result(timeout=20)
    md = until(lambda: admin.list_topics(timeout=20), lambda m: topic in m.topics)
    cluster = admin.describe_cluster(request_timeout=20).result(timeout=20)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for k, v in RECORDS:
        p.produce(topic, key=k, value=v, partition=int(k[1:]) % 3)
    assert p.flush(20) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, **JOIN_FAST})
    c.subscribe([topic])
    got: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 90  # a bound, not a goal: a join takes Tansu ~3 s (JOIN_FAST)
    while len(got) < len(RECORDS) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append((m.key(), m.value()))
    c.commit(asynchronous=False)
    committed = c.committed([TopicPartition(topic, i) for i in range(3)], timeout=20)
    c.close()
    return Outcome(tuple(sorted(got)), sum(max(tp.offset, 0) for tp in committed), topic in md.topics,
                   len(md.topics[topic].partitions), tuple(sorted(n.id for n in cluster.nodes)))


# --------------------------------------------------------------------- kafka-python
def kafkapython_scenario(bootstrap: str, rf: int = 1) -> Outcome:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    topic, group = names()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20000)
    admin.create_topics([NewTopic(topic, 3, rf)])
    listed = topic in until(admin.list_topics, lambda names: topic in names)
    cluster = admin.describe_cluster()
    admin.close()
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for k, v in RECORDS:
        p.send(topic, key=k, value=v, partition=int(k[1:]) % 3)
    p.flush(20)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, session_timeout_ms=JOIN_FAST["session.timeout.ms"],
                      heartbeat_interval_ms=JOIN_FAST["heartbeat.interval.ms"])
    got: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 90  # a bound, not a goal: a join takes Tansu ~3 s (JOIN_FAST)
    while len(got) < len(RECORDS) and time.monotonic() < deadline:
        for recs in c.poll(500).values():
            got += [(r.key, r.value) for r in recs]
    c.commit()
    committed = sum(c.committed(TopicPartition(topic, i)) or 0 for i in range(3))
    parts = len(c.partitions_for_topic(topic) or ())
    c.close()
    return Outcome(tuple(sorted(got)), committed, listed, parts,
                   tuple(sorted(b.get("broker_id", b.get("node_id")) for b in cluster["brokers"])))


# --------------------------------------------------------------------- aiokafka
def aiokafka_scenario(bootstrap: str, rf: int = 1) -> Outcome:
    async def run() -> Outcome:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        topic, group = names()
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 3, rf)])
        listed = topic in await admin.list_topics()
        for _ in range(50):  # bounded, as until() is
            if listed:
                break
            await asyncio.sleep(0.2)
            listed = topic in await admin.list_topics()
        cluster = await admin.describe_cluster()
        await admin.close()
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await p.start()
        for k, v in RECORDS:
            await p.send_and_wait(topic, key=k, value=v, partition=int(k[1:]) % 3)
        await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=JOIN_FAST["session.timeout.ms"],
                             heartbeat_interval_ms=JOIN_FAST["heartbeat.interval.ms"])
        await c.start()
        got: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + 90  # a bound, not a goal: a join takes Tansu ~3 s (JOIN_FAST)
        while len(got) < len(RECORDS) and time.monotonic() < deadline:
            for recs in (await c.getmany(timeout_ms=500)).values():
                got += [(r.key, r.value) for r in recs]
        await c.commit()
        committed = 0
        for i in range(3):
            committed += await c.committed(TopicPartition(topic, i)) or 0
        parts = len(c.partitions_for_topic(topic) or ())
        await c.stop()
        return Outcome(tuple(sorted(got)), committed, listed, parts,
                       tuple(sorted(b["node_id"] for b in cluster["brokers"])))

    return asyncio.run(run())


SCENARIOS = {"confluent-kafka": confluent_scenario, "kafka-python": kafkapython_scenario,
             "aiokafka": aiokafka_scenario}


@pytest.mark.parametrize("client", sorted(SCENARIOS))
def test_client_behaves_through_the_proxy_as_directly(client: str, tansu: Broker, proxy: ProxyProc) -> None:
    scenario = SCENARIOS[client]
    direct = scenario(tansu.bootstrap)
    assert direct.consumed == tuple(sorted(RECORDS))  # the scenario itself is sound
    with ConnectionSampler({tansu.port}, proxy.ports) as sampler:
        proxied = scenario(proxy.bootstrap)
    assert proxied == direct
    assert sampler.samples > 10
    assert sampler.to_broker == {proxy.proc.pid}, "a client connection bypassed the proxy"
    assert os.getpid() in sampler.to_proxy
    metrics = proxy.metrics()
    for api in ("Produce", "Fetch", "Metadata", "FindCoordinator", "JoinGroup", "OffsetCommit"):
        assert f'fetchlat_requests_total{{api="{api}",broker="{TANSU_NODE_ID}"}}' in metrics, api
    assert "fetchlat_request_duration_seconds_bucket" in metrics
    built = hot_path()  # what this test process loads; the proxy process is the same install
    assert f'fetchlat_build_info{{hot_path="{built}",stamps="kernel",version="0.1.0"}} 1.0' in metrics  # said
    assert f"hot path: {built} (" in proxy.log()
    assert "response stamps: kernel" in proxy.log()
    stamped = {source: float(re.search(rf'fetchlat_stamps_total{{source="{source}"}} (\S+)', metrics)[1])  # type: ignore[index]
               for source in ("kernel", "clock")}
    assert stamped["kernel"] > 0 and stamped["clock"] <= 0.01 * stamped["kernel"], stamped  # stamped by the kernel
    assert 'fetchlat_connection_errors_total' not in metrics or 'reason="request_framing"' not in metrics


# --------------------------------------------------------------------- kcat (librdkafka 2.0.2)
def kcat(*args: str, data: bytes | None = None, timeout: float = 40) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["kcat", *args], input=data, capture_output=True, timeout=timeout)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="Debian kcat not installed (make test installs it)")
def test_kcat_works_through_the_proxy_but_not_directly(tansu: Broker, proxy: ProxyProc, tmp_path: Path) -> None:
    topic, group = names()
    # directly, librdkafka 2.0.2 (Debian 12's kcat) cannot parse Tansu's ApiVersions tags
    # (docs/proxy.md); Debian 13's newer librdkafka can
    direct = kcat("-L", "-b", tansu.bootstrap, "-m", "3", timeout=20)
    if b"librdkafka 2.0." in kcat("-V").stdout:
        assert direct.returncode != 0
    with ConnectionSampler({tansu.port}, proxy.ports) as sampler:
        lines = b"".join(k + b":" + v + b"\n" for k, v in RECORDS)
        produced = kcat("-P", "-b", proxy.bootstrap, "-t", topic, "-K:", data=lines)
        assert produced.returncode == 0, produced.stderr
        md = json.loads(kcat("-L", "-J", "-b", proxy.bootstrap, "-t", topic).stdout)
        consumed = kcat("-C", "-b", proxy.bootstrap, "-t", topic, "-o", "beginning", "-e", "-f", "%k:%s\n")
        assert consumed.returncode == 0, consumed.stderr
        grouped = kcat("-b", proxy.bootstrap, "-G", group, topic, "-o", "beginning", "-e", "-f", "%k:%s\n",
                       "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100",
                       *(a for k, v in JOIN_FAST.items() for a in ("-X", f"{k}={v}")))
        assert grouped.returncode == 0, grouped.stderr
    got = sorted(tuple(line.split(b":", 1)) for line in consumed.stdout.splitlines() if line)
    assert got == sorted(RECORDS)
    assert sorted(tuple(line.split(b":", 1)) for line in grouped.stdout.splitlines() if line) == sorted(RECORDS)
    assert [b["id"] for b in md["brokers"]] == [TANSU_NODE_ID]
    assert md["brokers"][0]["name"] == f"127.0.0.1:{proxy.listen_port + 1 + TANSU_NODE_ID}"
    assert sampler.to_broker == {proxy.proc.pid}, "a kcat connection bypassed the proxy"
    assert 'fetchlat_rewritten_responses_total{api="ApiVersions"}' in proxy.metrics()


@pytest.mark.skipif(native.core() is None, reason=f"native core not loaded: {native.reason()}")
def test_a_client_behaves_alike_on_the_routed_road(tansu: Broker, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy reading every connection through the native core first (``FETCHLAT_ROUTED=1``,
    ``protocol/routed.py``): librdkafka gets the same outcome as going direct, and the exchanges
    the core settles alone (group heartbeats and commits) are counted and timed like the rest.
    One client here (47 s of ``make test``); every client's captured conversations are held to
    the Python road in ``tests/proxy/test_routed_conversation.py``."""
    scenario = SCENARIOS["confluent-kafka"]
    direct = scenario(tansu.bootstrap)
    monkeypatch.setenv("FETCHLAT_ROUTED", "1")
    proxy = start_proxy(tansu.bootstrap, tmp_path)
    try:
        assert scenario(proxy.bootstrap) == direct
        metrics = proxy.metrics()
        assert "connections read by the routed road" in proxy.log()
    finally:
        stop_proxy(proxy)
    for api in ("Produce", "Fetch", "Metadata", "FindCoordinator", "JoinGroup", "OffsetCommit"):
        assert f'fetchlat_requests_total{{api="{api}",broker="{TANSU_NODE_ID}"}}' in metrics, api
    assert f'fetchlat_request_duration_seconds_count{{api="OffsetCommit",broker="{TANSU_NODE_ID}"}}' in metrics
    assert 'reason="request_framing"' not in metrics and 'reason="response_framing"' not in metrics
