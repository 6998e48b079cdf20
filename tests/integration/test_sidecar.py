"""Sidecar mode against a real Tansu that advertises its sidecar (the deployment topology of
deploy/): addresses pass unchanged, clients and (synthetic) followers reach the broker only
through the sidecar, and every fetch is labelled with the fronted broker's id."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fetchlat.protocol import apis

from .conftest import (
    TANSU_NODE_ID,
    Broker,
    ConnectionSampler,
    ProxyProc,
    free_ports,
    run_tansu,
    start_proxy,
    stop_proxy,
)
from .test_model_live import consumer_fetches, follower_fetch, samples
from .test_routing import Client

pytestmark = pytest.mark.integration


@dataclass
class Sidecar:
    broker_port: int
    proxy: ProxyProc


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Sidecar]:
    base = free_ports(0, 1000)  # the sidecar and its metrics
    # the broker listens on its own port but advertises the sidecar: clients and followers
    # that learn addresses from it land on the sidecar
    with run_tansu(tmp_path / "tansu.log", advertise_port=base) as broker:
        p = start_proxy(broker.bootstrap, tmp_path, "--sidecar-node", str(TANSU_NODE_ID), base=base)
        try:
            yield Sidecar(broker.port, p)
        finally:
            stop_proxy(p)


def test_clients_and_followers_pass_the_sidecar_with_addresses_unchanged(sidecar: Sidecar) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    proxy = sidecar.proxy
    topic = f"side-{uuid.uuid4().hex[:6]}"
    with ConnectionSampler({sidecar.broker_port}, {proxy.listen_port}) as sampler:
        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
            f.result(timeout=20)
        p = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 0})
        for i in range(20):
            p.produce(topic, value=f"v{i}".encode())
        assert p.flush(15) == 0
        c = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": f"g-{topic}", "fetch.wait.max.ms": 100})
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group join: Tansu's take ~20 s
        got: list[bytes] = []
        for _ in range(100):  # bounded: 100 polls of at most 0.2 s
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
            if len(got) == 20:
                break
        c.close()
        client = Client(proxy.listen_port)
        md = client.call(apis.METADATA, 12, {"Topics": [{"Name": topic, "TopicId": uuid.UUID(int=0)}]})
        topic_id = md["Topics"][0]["TopicId"]
        follower_fetch(client, 12, 2, topic, topic_id, 0)
        follower_fetch(client, 15, 3, topic, topic_id, 20)
        client.close()
    assert got == [f"v{i}".encode() for i in range(20)]
    # the broker's own advertisement comes back untouched: the sidecar's address
    assert [(b["NodeId"], b["Host"], b["Port"]) for b in md["Brokers"]] == [
        (TANSU_NODE_ID, "127.0.0.1", proxy.listen_port)]
    assert sampler.to_broker == {proxy.proc.pid}, "a connection bypassed the sidecar"
    assert os.getpid() in sampler.to_proxy
    health = proxy.health()
    assert health["ready"] and health["listeners"] == {}  # no per-node listeners in sidecar mode
    consumer_fetches(proxy)  # a new topic's first fetches are counted once the sidecar knows its leader
    fetches = samples(proxy, "fetchlat_fetches_total")
    kinds = {dict(k)["kind"] for k in fetches}
    assert kinds == {"consumer", "follower"}
    assert {dict(k)["broker"] for k in fetches} == {str(TANSU_NODE_ID)}
    assert sum(v for k, v in fetches.items() if dict(k)["kind"] == "follower") == 2
    assert "bypass the sidecar" not in proxy.log()


def test_a_broker_advertising_itself_is_called_out(tansu: Broker, tmp_path: Path) -> None:
    p = start_proxy(tansu.bootstrap, tmp_path, "--sidecar-node", str(TANSU_NODE_ID))
    stop_proxy(p)
    assert "the very address this sidecar forwards to" in p.log()
