"""Multi-broker routing through the real proxy process, against the FAKE cluster
(testkit/fake_cluster.py): node listeners, leaders on other nodes, coordinators,
NodeEndpoints on NOT_LEADER_OR_FOLLOWER, a broker appearing later, sidecar node maps.

On both roads: each connection's first exchange is an ApiVersions, so what a test asks after it
is carried by the native core where the relay is on (``relay: native``: the rewrites are the
core's held answers, rewritten by Python) and by the event loop where it is off."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fetchlat import native
from fetchlat.protocol import apis
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.framing import request_frame
from fetchlat.protocol.headers import response_body_start
from fetchlat.protocol.walker import walk
from prometheus_client.parser import text_string_to_metric_families

from testkit.fake_cluster import TOPIC, TOPIC_ID, FakeCluster

from .conftest import ProxyProc, free_ports, start_proxy, stop_proxy, wait_port

pytestmark = pytest.mark.integration


class Client:
    """A minimal scripted Kafka client built on our own (oracle-checked) encoder; ``first``: its
    connection's first exchange is an ApiVersions (a relay takes the connection after it)."""

    firsts = 0  # the connections opened with ``first``, by every client

    def __init__(self, port: int, *, first: bool = False) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.corr = 0
        if first:
            self.call(apis.API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"})
            Client.firsts += 1

    def call(self, key: int, v: int, value: dict[str, Any]) -> Any:
        self.corr += 1
        frame = request_frame(key, v, self.corr, "routing-test", encode(apis.table()[key].request(), v, value))
        self.sock.sendall(frame)
        size = struct.unpack(">i", self._read(4))[0]
        resp = self._read(size)
        assert struct.unpack(">i", resp[:4])[0] == self.corr
        return walk(apis.table()[key].response(), v, resp, response_body_start(key, v, resp))

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("proxy closed the connection")
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    c = FakeCluster(node_ids=[1, 2], later_node_ids=[3])
    c.start()
    yield c
    c.stop()


ROADS = ["native", "off"] if native.core() is not None else ["off"]


@pytest.fixture(params=ROADS, ids=[f"relay-{r}" for r in ROADS])
def routed(cluster: FakeCluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ProxyProc]:
    # the proxy listens for broker N on base + 1 + N: every broker this cluster has or grows
    listeners = [1 + n for n in (*cluster.node_ids, *cluster.later_node_ids)]
    p = start_proxy(f"127.0.0.1:{cluster.ports[1]}", tmp_path, "--relay", request.param,
                    base=free_ports(0, *listeners, 1000))
    firsts = Client.firsts
    yield p
    firsts = Client.firsts - firsts
    handovers = _counted(p, "fetchlat_relay_handovers_total")
    stop_proxy(p)
    if request.param == "native":  # every connection was carried by the core after its first answer
        assert firsts >= 1 and handovers == firsts
    else:
        assert handovers == 0


def addrs(entries: list[Any], key: str = "NodeId") -> dict[int, tuple[str, int]]:
    return {e[key]: (e["Host"], e["Port"]) for e in entries}


def test_each_node_gets_its_own_listener_and_routes_to_that_node(cluster: FakeCluster, routed: ProxyProc) -> None:
    base = routed.listen_port
    c = Client(base, first=True)
    md = c.call(apis.METADATA, 12, {"Topics": None, "AllowAutoTopicCreation": False})
    assert addrs(md["Brokers"]) == {1: ("127.0.0.1", base + 2), 2: ("127.0.0.1", base + 3)}
    assert [p["LeaderId"] for p in md["Topics"][0]["Partitions"]] == [1, 2, 1]  # ids kept, not remapped
    for node in (1, 2):
        wait_port(base + 1 + node)
        before = len(cluster.seen)
        n = Client(base + 1 + node, first=True)
        n.call(apis.API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"})
        n.close()
        assert cluster.seen[before:] == [(node, apis.API_VERSIONS, 3)] * 2
    c.close()


def test_a_repeated_metadata_answer_is_rewritten_and_counted_each_time(cluster: FakeCluster, routed: ProxyProc) -> None:
    """On the relay the core repeats Python's rewrite of an answer it saw before, and queues the
    answer for Python to learn from: every repeat names the proxy, and is counted, as on the
    event loop."""
    base = routed.listen_port
    c = Client(base, first=True)
    for _ in range(4):
        md = c.call(apis.METADATA, 12, {"Topics": None, "AllowAutoTopicCreation": False})
        assert addrs(md["Brokers"]) == {1: ("127.0.0.1", base + 2), 2: ("127.0.0.1", base + 3)}
    c.close()
    deadline = time.monotonic() + 5  # the core's repeats are learned from at the next batch
    while time.monotonic() < deadline and _counted(routed, REWRITES, api="Metadata") < 4:
        time.sleep(0.1)
    assert _counted(routed, REWRITES, api="Metadata") == 4


REWRITES = "fetchlat_rewritten_responses_total"


def _counted(p: ProxyProc, name: str, **labels: str) -> float:
    """The sum of the proxy's samples of ``name`` with ``labels``."""
    return sum(s.value for fam in text_string_to_metric_families(p.metrics()) for s in fam.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


@pytest.mark.parametrize("version", [2, 3, 4, 6])
def test_coordinator_on_another_node_is_rewritten(cluster: FakeCluster, routed: ProxyProc, version: int) -> None:
    c = Client(routed.listen_port, first=True)
    fc = c.call(apis.FIND_COORDINATOR, version, {"Key": "g", "KeyType": 0, "CoordinatorKeys": ["g"]})
    entry = fc["Coordinators"][0] if version >= 4 else fc
    assert (entry["NodeId"], entry["Host"], entry["Port"]) == (2, "127.0.0.1", routed.listen_port + 3)
    c.close()


def test_describe_cluster_is_rewritten(cluster: FakeCluster, routed: ProxyProc) -> None:
    c = Client(routed.listen_port, first=True)
    dc = c.call(apis.DESCRIBE_CLUSTER, 1, {"IncludeClusterAuthorizedOperations": False, "EndpointType": 1})
    base = routed.listen_port
    assert addrs(dc["Brokers"], "BrokerId") == {1: ("127.0.0.1", base + 2), 2: ("127.0.0.1", base + 3)}
    c.close()


@pytest.mark.parametrize(("api", "version"), [(apis.FETCH, 16), (apis.FETCH, 17), (apis.FETCH, 18),
                                              (apis.PRODUCE, 10), (apis.PRODUCE, 11)])
def test_node_endpoints_on_not_leader_point_at_the_proxy_and_a_later_broker_gets_a_listener(
    cluster: FakeCluster, routed: ProxyProc, api: int, version: int
) -> None:
    cluster.grow()  # broker 3 joins; only the NOT_LEADER answer names it
    base = routed.listen_port
    wait_port(base + 2)  # broker 1's listener: opened once the proxy's own discovery has named it
    c = Client(base + 2, first=True)
    if api == apis.FETCH:
        req = {"MaxWaitMs": 0, "MinBytes": 1, "Topics": [{"TopicId": TOPIC_ID, "Partitions": [
            {"Partition": 0, "FetchOffset": 0, "PartitionMaxBytes": 1024}]}]}
    else:
        req = {"Acks": 1, "TimeoutMs": 1000, "TopicData": [{"Name": TOPIC, "PartitionData": [
            {"Index": 0, "Records": None}]}]}
    resp = c.call(api, version, req)
    assert addrs(resp["NodeEndpoints"]) == {3: ("127.0.0.1", base + 4)}
    wait_port(base + 4)
    before = len(cluster.seen)
    n3 = Client(base + 4, first=True)
    n3.call(apis.API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"})
    assert cluster.seen[before:] == [(3, apis.API_VERSIONS, 3)] * 2
    n3.close()
    c.close()


def test_sidecar_node_map_advertises_other_sidecars(cluster: FakeCluster, tmp_path: Path) -> None:
    own = free_ports(0)
    cfg = tmp_path / "sidecar.yaml"
    cfg.write_text(
        "advertise_host: broker-1.sidecar\n"
        "nodes:\n"
        f"  1: {{listen: '127.0.0.1:{own}', advertise: 'broker-1.sidecar:{own}'}}\n"
        "  2: {remote: true, advertise: 'broker-2.sidecar:19093'}\n"
    )
    p = start_proxy(f"127.0.0.1:{cluster.ports[1]}", tmp_path, "--config", str(cfg))
    try:
        c = Client(p.listen_port)
        md = c.call(apis.METADATA, 12, {"Topics": None})
        assert addrs(md["Brokers"]) == {1: ("broker-1.sidecar", own), 2: ("broker-2.sidecar", 19093)}
        c.close()
        assert set(p.health()["listeners"]) == {"1"}  # type: ignore[arg-type]
        before = len(cluster.seen)
        n1 = Client(own)
        n1.call(apis.API_VERSIONS, 0, {})
        assert cluster.seen[before:] == [(1, apis.API_VERSIONS, 0)]
        n1.close()
    finally:
        stop_proxy(p)
