"""A minimal asyncio Kafka client on fetchlat's own codec, for load runs that need many
connections with exact control of every request (thousands of sockets, each with its own
long poll). Not a general client: one request in flight per connection."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
import time
import uuid
from typing import Any

from fetchlat.protocol import apis
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.framing import request_frame
from fetchlat.protocol.headers import response_body_start
from fetchlat.protocol.walker import walk


class AsyncClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self.reader, self.writer, self.client_id = reader, writer, client_id
        self.corr = 0

    @classmethod
    async def connect(cls, port: int, client_id: str, tls: ssl.SSLContext | None = None) -> AsyncClient:
        """Over TLS with ``tls`` (a client context that trusts the path's certificate)."""
        r, w = await asyncio.open_connection("127.0.0.1", port, ssl=tls, server_hostname="localhost" if tls else None)
        return cls(r, w, client_id)

    async def call(self, key: int, v: int, value: dict[str, Any]) -> tuple[Any, float]:
        """The decoded response and the round trip in seconds."""
        self.corr += 1
        frame = request_frame(key, v, self.corr, self.client_id, encode(apis.table()[key].request(), v, value))
        t0 = time.perf_counter()
        self.writer.write(frame)
        size = struct.unpack(">i", await self.reader.readexactly(4))[0]
        resp = await self.reader.readexactly(size)
        rtt = time.perf_counter() - t0
        if struct.unpack_from(">i", resp)[0] != self.corr:
            raise RuntimeError("correlation id mismatch")
        return walk(apis.table()[key].response(), v, resp, response_body_start(key, v, resp)), rtt

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


def fetch_request(topic: str, topic_id: uuid.UUID, offset: int, max_wait_ms: int, replica: int = -1) -> dict[str, Any]:
    return {"ReplicaId": replica, "MaxWaitMs": max_wait_ms, "MinBytes": 1, "MaxBytes": 1 << 20, "IsolationLevel": 0,
            "SessionId": 0, "SessionEpoch": -1,
            "Topics": [{"Topic": topic, "TopicId": topic_id, "Partitions": [
                {"Partition": 0, "CurrentLeaderEpoch": -1, "FetchOffset": offset, "LastFetchedEpoch": -1,
                 "LogStartOffset": 0, "PartitionMaxBytes": 1 << 20}]}],
            "ForgottenTopicsData": [], "RackId": ""}
