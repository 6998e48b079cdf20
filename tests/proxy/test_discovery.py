"""Broker discovery against a fake broker (a garbled Metadata answer cannot be had from a real
one): every kind of bad answer is a failed attempt, and discovery goes on until one answers.

Found on the way (issue #17): ``fetch_brokers`` caught ``ValueError`` while the codec raises its
own ``ProtocolError`` family, so one undecodable Metadata response ended the discovery task for
good (the proxy stayed unready even after the broker recovered); an announced size was read with
an unbounded ``readexactly``."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid

import pytest
from fetchlat.protocol import apis
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.events import BrokerAddress
from fetchlat.protocol.framing import response_frame
from fetchlat.protocol.schema import load
from fetchlat.proxy.discovery import (
    BadAnswer,
    Discovery,
    NoAnswer,
    brokers_of,
    fetch_brokers,
    metadata_request,
    topic_ids_of,
    topics_request,
)

GOOD = encode(load("MetadataResponse"), 1, {"Brokers": [{"NodeId": 3, "Host": "kafka-3", "Port": 9092, "Rack": None}],
                                            "ControllerId": 3, "Topics": []})


class FakeBroker:
    """Answers the n-th connection's request with ``answers[n]`` (bytes, or None: close at once)."""

    def __init__(self, answers: list[bytes | None]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []

    async def __aenter__(self) -> int:
        async def conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            n = len(self.requests)
            head = await r.readexactly(4)
            self.requests.append(head + await r.readexactly(int.from_bytes(head, "big")))
            answer = self.answers[min(n, len(self.answers) - 1)]
            if answer is not None:
                w.write(answer)
                await w.drain()
            w.close()

        self.server = await asyncio.start_server(conn, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()
        await self.server.wait_closed()


BAD = [
    ("undecodable_body", response_frame(apis.METADATA, 1, 1, b"\x00\x00\x00\x05garbage"), BadAnswer, "undecodable"),
    ("wrong_correlation_id", response_frame(apis.METADATA, 1, 7, GOOD), BadAnswer, "correlation id 7"),
    ("oversized_frame", struct.pack(">i", 64 << 20) + b"\x00" * 16, BadAnswer, "exceeds the limit"),
    ("negative_size", struct.pack(">i", -5), BadAnswer, "not positive"),
    ("cut_short", response_frame(apis.METADATA, 1, 1, GOOD)[:20], BadAnswer, "mid-response"),
    ("closed_without_answer", None, NoAnswer, "without answering"),
]


@pytest.mark.parametrize(("name", "answer", "error", "says"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_answer_is_a_clear_error(name: str, answer: bytes | None, error: type[Exception], says: str) -> None:
    async def run() -> None:
        async with FakeBroker([answer]) as port:
            with pytest.raises(error, match=says):
                await fetch_brokers("127.0.0.1", port, max_frame_bytes=1 << 20)

    asyncio.run(run())


def test_discovery_survives_a_garbled_answer_and_learns_from_the_next() -> None:
    learned: list[tuple[BrokerAddress, ...]] = []
    logged: list[str] = []

    async def run() -> None:
        async with FakeBroker([BAD[0][1], response_frame(apis.METADATA, 1, 1, GOOD)]) as port:
            d = Discovery((("127.0.0.1", port),), learned.append, tls=None, server_hostname=None,
                          connect_timeout_s=2.0, refresh_s=lambda: 30.0, max_frame_bytes=1 << 20,
                          log_throttled=lambda key, level, msg, *args: logged.append(msg % args))
            task = asyncio.create_task(d.run())
            for _ in range(100):  # bounded: 5 s at most
                if d.metadata_ok:
                    break
                await asyncio.sleep(0.05)
            assert not task.done(), "the discovery task ended"
            task.cancel()
            assert d.metadata_ok and d.failures == 1

    asyncio.run(run())
    assert learned == [(BrokerAddress(node_id=3, host="kafka-3", port=9092, rack=None),)]
    assert len(logged) == 1 and "undecodable Metadata response" in logged[0]


def test_the_request_is_metadata_v1_asking_for_brokers_only() -> None:
    frame = metadata_request(1)
    assert struct.unpack(">ihhi", frame[:12]) == (len(frame) - 4, apis.METADATA, 1, 1)
    assert brokers_of(response_frame(apis.METADATA, 1, 1, GOOD)[4:]) == [
        BrokerAddress(node_id=3, host="kafka-3", port=9092, rack=None)]


TOPIC_A, TOPIC_B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)
TOPICS = encode(load("MetadataResponse"), 12, {
    "Brokers": [{"NodeId": 3, "Host": "kafka-3", "Port": 9092, "Rack": None}], "ClusterId": "c", "ControllerId": 3,
    "Topics": [{"ErrorCode": 0, "Name": "orders", "TopicId": TOPIC_A, "IsInternal": False, "Partitions": [
                {"ErrorCode": 0, "PartitionIndex": 0, "LeaderId": 3, "LeaderEpoch": 1, "ReplicaNodes": [3],
                 "IsrNodes": [3], "OfflineReplicas": []}]},
               {"ErrorCode": 0, "Name": "audit", "TopicId": TOPIC_B, "IsInternal": False, "Partitions": []},
               {"ErrorCode": 3, "Name": "gone", "TopicId": uuid.UUID(int=0), "IsInternal": False, "Partitions": []}]})


def test_a_topic_id_without_a_name_makes_the_next_round_ask_for_every_topic() -> None:
    """A sidecar meets a topic only by id (a follower's fetch; a client that asked another broker
    for metadata): the next round sends Metadata v12 for all topics and names the ids."""
    learned: list[tuple[tuple[str, uuid.UUID], ...]] = []
    leaders: list[tuple[tuple[str, int, int], ...]] = []
    wants = [True]

    async def run() -> list[bytes]:
        brokers = response_frame(apis.METADATA, 1, 1, GOOD)
        broker = FakeBroker([brokers, response_frame(apis.METADATA, 12, 2, TOPICS), brokers])
        async with broker as port:
            d = Discovery((("127.0.0.1", port),), lambda _b: None, tls=None, server_hostname=None,
                          connect_timeout_s=2.0, refresh_s=lambda: 30.0, max_frame_bytes=1 << 20,
                          log_throttled=lambda *a: None, wants_topics=lambda: wants[0],
                          learn_every_topic=lambda t, lead: (learned.append(t), leaders.append(lead),
                                                             wants.__setitem__(0, False)))
            assert await d._one_round()
            assert not d.topics_due()  # at most one such round per TOPICS_MIN_INTERVAL_S
            assert await d._one_round()  # brokers only: nothing wants names now
        return broker.requests

    requests = asyncio.run(run())
    assert learned == [(("orders", TOPIC_A), ("audit", TOPIC_B))]  # a topic in error is not named
    assert leaders == [(("orders", 0, 3),)]  # and every partition's leader (KIP-392 needs them)
    assert [struct.unpack(">hh", r[4:8]) for r in requests] == [(apis.METADATA, 1), (apis.METADATA, 12),
                                                                  (apis.METADATA, 1)]
    assert tuple(topic_ids_of(response_frame(apis.METADATA, 12, 2, TOPICS)[4:])) == learned[0]
    assert topics_request(2)[12:14] == struct.pack(">h", len("fetchlat-proxy"))


def test_every_topic_is_asked_for_again_after_topic_refresh_s_while_partitions_are_held() -> None:
    """Topics are deleted all day: while the model holds some partition, the ask for every topic
    repeats every ``topic_refresh_s`` (so what it holds of a deleted topic goes), and never
    more often than ``TOPICS_MIN_INTERVAL_S``; with nothing held, it is not asked for."""
    holds, refresh = [False], [3600.0]
    d = Discovery((("127.0.0.1", 1),), lambda _b: None, tls=None, server_hostname=None, connect_timeout_s=1.0,
                  refresh_s=lambda: 30.0, max_frame_bytes=1 << 20, log_throttled=lambda *a: None,
                  holds_topics=lambda: holds[0], topic_refresh_s=lambda: refresh[0])
    assert d.asks_topics() is False  # nothing held, nothing unnamed
    holds[0] = True
    assert d.asks_topics() is True  # never asked yet
    d._topics_at = time.monotonic()
    assert d.asks_topics() is False  # asked just now; the next in an hour
    refresh[0] = 0.0
    assert d.asks_topics() is False  # still at most once per TOPICS_MIN_INTERVAL_S
    d._topics_at = time.monotonic() - 1.5
    assert d.asks_topics() is True
