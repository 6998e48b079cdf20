"""The latency model through the real proxy process: follower fetches (ReplicaId, and
ReplicaState in v15+) against a real Tansu, a FAKE broker that reports WaitTimeMs (no real
broker does: KIP-736 was never merged), and record latency of records stamped in the past."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from fetchlat.protocol import apis
from prometheus_client.parser import text_string_to_metric_families

from testkit.fake_cluster import TOPIC, TOPIC_ID, FakeCluster

from .conftest import TANSU_NODE_ID, Broker, ProxyProc, start_proxy, stop_proxy
from .test_routing import Client

pytestmark = pytest.mark.integration


def samples(proxy: ProxyProc, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for fam in text_string_to_metric_families(proxy.metrics()):
        for s in fam.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def consumer_fetches(proxy: ProxyProc, timeout_s: float = 10.0) -> float:
    """The consumer fetches the proxy counted, once some are in (or the bound passes): a new
    topic's first fetches at a sidecar wait for its broker to name the topic and its leader
    (``metrics/awaiting.py``), about a tick."""
    deadline = time.monotonic() + timeout_s
    while True:
        n = sum(v for k, v in samples(proxy, "fetchlat_fetches_total").items() if dict(k)["kind"] == "consumer")
        if n >= 1 or time.monotonic() > deadline:
            return n
        time.sleep(0.2)


def follower_fetch(c: Client, version: int, replica: int, topic: str, topic_id: uuid.UUID, offset: int) -> None:
    value: dict[str, object] = {
        "MaxWaitMs": 50, "MinBytes": 1, "MaxBytes": 1 << 20, "IsolationLevel": 0, "SessionId": 0, "SessionEpoch": -1,
        "Topics": [{"Topic": topic, "TopicId": topic_id, "Partitions": [
            {"Partition": 0, "CurrentLeaderEpoch": -1, "FetchOffset": offset, "LastFetchedEpoch": -1,
             "LogStartOffset": 0, "PartitionMaxBytes": 1 << 20}]}],
        "ForgottenTopicsData": [], "RackId": "",
    }
    if version >= 15:
        value["ReplicaState"] = {"ReplicaId": replica, "ReplicaEpoch": 1}
    else:
        value["ReplicaId"] = replica
    c.call(apis.FETCH, version, value)


def test_follower_fetches_give_replication_latency_per_follower(tansu: Broker, tmp_path: Path) -> None:
    proxy = start_proxy(tansu.bootstrap, tmp_path, "--trace-dir", str(tmp_path / "tr"))
    try:
        _follower_scenario(proxy)
    finally:
        stop_proxy(proxy)
    rows = [r for f in (tmp_path / "tr" / "replication").rglob("*.parquet") for r in pq.read_table(f).to_pylist()]
    assert sorted((r["follower"], r["partition"]) for r in rows) == [(2, 0)] * 3 + [(3, 0)] * 3
    assert all(r["broker"] == str(TANSU_NODE_ID) and r["latency_ns"] > 0 for r in rows)


def _follower_scenario(proxy: ProxyProc) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"rep-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        f.result(timeout=20)
    c = Client(proxy.listen_port + 1 + TANSU_NODE_ID)
    md = c.call(apis.METADATA, 12, {"Topics": [{"Name": topic, "TopicId": uuid.UUID(int=0)}]})
    topic_id = md["Topics"][0]["TopicId"]
    # followers 2 (Fetch v12, ReplicaId) and 3 (Fetch v15, ReplicaState) start at offset 0
    follower_fetch(c, 12, 2, topic, topic_id, 0)
    follower_fetch(c, 15, 3, topic, topic_id, 0)
    p = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 0, "acks": 1})
    for _ in range(3):
        p.produce(topic, value=b"x", partition=0)
        p.flush(10)
    time.sleep(0.2)
    follower_fetch(c, 12, 2, topic, topic_id, 3)  # follower 2 now holds offsets 0-2
    time.sleep(0.1)
    follower_fetch(c, 15, 3, topic, topic_id, 3)
    c.close()
    fetches = samples(proxy, "fetchlat_fetches_total")
    assert sum(v for k, v in fetches.items() if ("kind", "follower") in k) == 4
    rep = samples(proxy, "fetchlat_replication_seconds_count")
    rep_sum = samples(proxy, "fetchlat_replication_seconds_sum")
    by_follower = {dict(k)["follower"]: v for k, v in rep.items()}
    assert by_follower == {"2": 3.0, "3": 3.0}
    mean = {dict(k)["follower"]: v / by_follower[dict(k)["follower"]] for k, v in rep_sum.items()}
    assert 0.2 <= mean["2"] < mean["3"] < 1.5  # follower 3 confirmed 100 ms later


def test_a_reported_wait_time_is_used_as_is(tmp_path: Path) -> None:
    fake = FakeCluster(node_ids=[1], wait_time_tag=99, reported_wait_ms=123, fetch_delay_s=0.15)
    fake.start()
    p = start_proxy(f"127.0.0.1:{fake.ports[1]}", tmp_path, "--wait-time-tag", "99", "--trace-dir",
                    str(tmp_path / "tr"))
    try:
        c = Client(p.listen_port + 2)
        for _ in range(3):
            c.call(apis.FETCH, 16, {"MaxWaitMs": 500, "MinBytes": 1, "MaxBytes": 1 << 20, "SessionEpoch": -1,
                                    "Topics": [{"TopicId": TOPIC_ID, "Partitions": [
                                        {"Partition": 0, "FetchOffset": 0, "PartitionMaxBytes": 1 << 20}]}]})
        c.close()
    finally:
        stop_proxy(p)
        fake.stop()
    rows = [r for f in (tmp_path / "tr" / "exchanges").rglob("*.parquet") for r in pq.read_table(f).to_pylist()
            if r["api"] == "Fetch"]
    assert len(rows) == 3
    for r in rows:
        assert (r["wait_source"], r["wait_ns"], r["outcome"]) == ("reported", 123_000_000, "woken")
        assert r["local_ns"] == r["total_ns"] - 123_000_000
        assert r["total_ns"] >= 150_000_000  # the fake parked it for 150 ms
    assert TOPIC  # the fake's topic is what the proxy resolved


def test_records_stamped_in_the_past_show_their_age(tansu: Broker, tmp_path: Path) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    p = start_proxy(tansu.bootstrap, tmp_path, "--trace-dir", str(tmp_path / "tr"))
    topic = f"old-{uuid.uuid4().hex[:6]}"
    try:
        prod = Producer({"bootstrap.servers": p.bootstrap, "linger.ms": 0})
        stamp_ms = int(time.time() * 1000) - 60_000  # a minute ago
        for i in range(3):
            prod.produce(topic, value=b"x", partition=0, timestamp=stamp_ms + i)
        assert prod.flush(20) == 0
        c = Consumer({"bootstrap.servers": p.bootstrap, "group.id": "old", "client.id": "old-reader",
                      "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = 0
        deadline = time.monotonic() + 20
        while got < 3 and time.monotonic() < deadline:
            m = c.poll(0.2)
            got += m is not None and m.error() is None
        c.close()
        assert got == 3
    finally:
        stop_proxy(p)
    rows = [r for f in (tmp_path / "tr" / "partitions").rglob("*.parquet") for r in pq.read_table(f).to_pylist()
            if r["api"] == "Fetch" and r["topic"] == topic and r["record_latency_ns"] is not None]
    assert rows
    for r in rows:
        assert 60.0 <= r["record_latency_ns"] / 1e9 < 75.0  # the newest record is ~60 s old
