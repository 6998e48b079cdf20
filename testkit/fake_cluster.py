"""FAKE multi-broker Kafka cluster, for what cannot exist here: Tansu is single-node, so
leaders on other nodes, coordinators elsewhere, NodeEndpoints on NOT_LEADER errors and a
broker joining later are scripted. It answers with frames built by our spec-driven encoder
(itself checked against kafka-python and kio) and records which node saw which request."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from fetchlat.protocol import apis
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.headers import parse_request_header
from fetchlat.proxy.discovery import CLIENT_ID as DISCOVERY_CLIENT_ID

NOT_LEADER_OR_FOLLOWER = 6
TOPIC = "orders"
TOPIC_ID = uuid.UUID(bytes=b"\x11" * 16)


@dataclass
class FakeCluster:
    node_ids: list[int]
    later_node_ids: list[int] = field(default_factory=list)  # join when .grow() is called
    ports: dict[int, int] = field(default_factory=dict)
    # (node, api key, version) of each client request; the proxy's own discovery requests (client
    # id "fetchlat-proxy", sent whenever its refresh loop runs) are left out, so a test can assert
    # where a client's request went without racing that loop
    seen: list[tuple[int, int, int]] = field(default_factory=list)
    grown: bool = False
    # a broker with KIP-736: parks fetches for fetch_delay_s, then reports WaitTimeMs in this tag
    wait_time_tag: int | None = None
    reported_wait_ms: int = 0
    fetch_delay_s: float = 0.0
    # when set, a Fetch is answered with these record batches on partition 0 (no error)
    fetch_records: bytes | None = None

    def start(self) -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def serve() -> None:
            for node in self.node_ids + self.later_node_ids:
                sock = socket.socket()
                sock.bind(("127.0.0.1", 0))
                self.ports[node] = sock.getsockname()[1]
                await asyncio.start_server(lambda r, w, n=node: self._conn(n, r, w), sock=sock)
            ready.set()

        self.loop.run_until_complete(serve())
        self.loop.run_forever()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)

    def grow(self) -> None:
        self.grown = True

    def members(self) -> list[int]:
        return self.node_ids + (self.later_node_ids if self.grown else [])

    def broker_list(self, node_key: str = "NodeId") -> list[dict[str, Any]]:
        return [{node_key: n, "Host": "127.0.0.1", "Port": self.ports[n], "Rack": None} for n in self.members()]

    async def _conn(self, node: int, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await r.readexactly(4))[0]
                frame = await r.readexactly(size)
                h = parse_request_header(frame)
                if h.client_id != DISCOVERY_CLIENT_ID:
                    self.seen.append((node, h.api_key, h.api_version))
                if h.api_key == apis.FETCH and self.wait_time_tag is not None:
                    await asyncio.sleep(self.fetch_delay_s)
                    body = self.reporting_fetch(h.api_version)
                else:
                    body = self.answer(node, h.api_key, h.api_version, frame[h.body_start:])
                header = struct.pack(">i", h.correlation_id)
                if apis.response_header_version(h.api_key, h.api_version) == 1:
                    header += b"\x00"
                out = header + body
                w.write(len(out).to_bytes(4, "big") + out)
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            w.close()

    def reporting_fetch(self, v: int) -> bytes:
        """An empty, error-free fetch response carrying WaitTimeMs as a top-level tag."""
        t = apis.table()[apis.FETCH].response()
        part = {"PartitionIndex": 0, "ErrorCode": 0, "HighWatermark": 0, "LastStableOffset": 0, "LogStartOffset": 0,
                "Records": None}
        body = encode(t, v, {"Responses": [{"Topic": TOPIC, "TopicId": TOPIC_ID, "Partitions": [part]}]})
        assert body[-1] == 0  # no top-level tags yet: add ours
        return body[:-1] + bytes([1, self.wait_time_tag or 0, 4]) + struct.pack(">i", self.reported_wait_ms)

    def answer(self, node: int, key: int, v: int, body: bytes) -> bytes:
        t = apis.table()[key].response()
        if key == apis.API_VERSIONS:
            ranges = [(0, 3, 11), (1, 4, 17), (3, 0, 13), (10, 0, 6), (18, 0, 4), (60, 0, 2)]
            return encode(t, v, {"ErrorCode": 0, "ApiKeys": [
                {"ApiKey": k, "MinVersion": lo, "MaxVersion": hi} for k, lo, hi in ranges]})
        if key == apis.METADATA:
            leaders = self.members()
            parts = [{"ErrorCode": 0, "PartitionIndex": i, "LeaderId": leaders[i % len(leaders)],
                      "LeaderEpoch": 0, "ReplicaNodes": [leaders[i % len(leaders)]],
                      "IsrNodes": [leaders[i % len(leaders)]], "OfflineReplicas": []} for i in range(3)]
            topic = {"ErrorCode": 0, "Name": TOPIC, "TopicId": TOPIC_ID, "IsInternal": False, "Partitions": parts}
            return encode(t, v, {"Brokers": self.broker_list(), "ClusterId": "fake",
                                 "ControllerId": self.node_ids[0], "Topics": [topic]})
        coord = self.node_ids[-1]
        if key == apis.FIND_COORDINATOR:
            entry = {"NodeId": coord, "Host": "127.0.0.1", "Port": self.ports[coord], "ErrorCode": 0}
            if v >= 4:
                return encode(t, v, {"Coordinators": [{"Key": "g", **entry}]})
            return encode(t, v, entry)
        if key == apis.DESCRIBE_CLUSTER:
            return encode(t, v, {"ErrorCode": 0, "EndpointType": 1, "ClusterId": "fake",
                                 "ControllerId": self.node_ids[0], "Brokers": self.broker_list("BrokerId")})
        other = self.members()[-1]
        endpoints = [{"NodeId": other, "Host": "127.0.0.1", "Port": self.ports[other], "Rack": None}]
        if key == apis.FETCH and self.fetch_records is not None:
            part = {"PartitionIndex": 0, "ErrorCode": 0, "HighWatermark": 1 << 40, "LastStableOffset": 1 << 40,
                    "LogStartOffset": 0, "Records": self.fetch_records}
            return encode(t, v, {"ErrorCode": 0, "SessionId": 0, "NodeEndpoints": [],
                                 "Responses": [{"Topic": TOPIC, "TopicId": TOPIC_ID, "Partitions": [part]}]})
        if key == apis.FETCH:
            part = {"PartitionIndex": 0, "ErrorCode": NOT_LEADER_OR_FOLLOWER, "HighWatermark": -1,
                    "LastStableOffset": -1, "LogStartOffset": -1,
                    "CurrentLeader": {"LeaderId": other, "LeaderEpoch": 1}, "Records": None}
            return encode(t, v, {"ErrorCode": 0, "SessionId": 0, "NodeEndpoints": endpoints,
                                 "Responses": [{"Topic": TOPIC, "TopicId": TOPIC_ID, "Partitions": [part]}]})
        if key == apis.PRODUCE:
            return encode(t, v, {"Responses": [{"Name": TOPIC, "PartitionResponses": [
                {"Index": 0, "ErrorCode": NOT_LEADER_OR_FOLLOWER, "BaseOffset": -1,
                 "CurrentLeader": {"LeaderId": other, "LeaderEpoch": 1}}]}], "NodeEndpoints": endpoints})
        raise ValueError(f"the fake cluster does not script api {key}")
