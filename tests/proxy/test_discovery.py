"""Broker discovery against a fake broker (a garbled Metadata answer cannot be had from a real
one): every kind of bad answer is a failed attempt, and discovery goes on until one answers.

Found on the way (issue #17): ``fetch_brokers`` caught ``ValueError`` while the codec raises its
own ``ProtocolError`` family, so one undecodable Metadata response ended the discovery task for
good (the proxy stayed unready even after the broker recovered); an announced size was read with
an unbounded ``readexactly``."""

from __future__ import annotations

import asyncio
import struct

import pytest
from fetchlat.protocol import apis
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.events import BrokerAddress
from fetchlat.protocol.framing import response_frame
from fetchlat.protocol.schema import load
from fetchlat.proxy.discovery import BadAnswer, Discovery, NoAnswer, brokers_of, fetch_brokers, metadata_request

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
