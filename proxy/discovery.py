"""Broker discovery: the proxy's own Metadata request to a bootstrap broker, and the loop that
repeats it (every ``metadata_refresh_s``, at once when a connection to a broker fails).

Topic ids: fetches and produces of recent clients and every follower name topics by id (Fetch
v13+, Produce v13+), and the latency model keys a partition by name. A proxy learns the ids
from the Metadata responses its clients receive, but in a cluster a client asks any broker
for metadata, and followers never do: a sidecar may see a topic only by id. When the model
meets an id it cannot name (``wants_topics``), the next round also asks for every topic's id
(Metadata v12, all topics), at most once per ``TOPICS_MIN_INTERVAL_S``. The same answer names
every partition's leader: a sidecar whose broker serves a consumer as a follower (KIP-392)
dates that fetch's data differently (``metrics/model.py``), and asks when it meets a partition
whose leader it does not know. Topics come and go all day: while the model holds some
partition, the same ask repeats every ``topic_refresh_s``, and what the model holds of a topic
the answer no longer names goes.

Built on the codec: the request frame from ``protocol.framing``, the response read with the
frame limit, decoded by the spec-driven walker; any ``ProtocolError`` (a garbled or hostile
answer) is a failed attempt like a refused connection, never the end of discovery.
Owns: readiness (``metadata_ok``: some bootstrap broker answered lately).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import ssl
import time
import uuid
from collections.abc import Callable
from typing import Final

from ..protocol import apis
from ..protocol.encoder import encode
from ..protocol.errors import ProtocolError
from ..protocol.events import BrokerAddress
from ..protocol.framing import frame_size, request_frame
from ..protocol.rewrite import metadata_leaders
from ..protocol.schema import load
from ..protocol.walker import walk
from .registry import HostPort

log = logging.getLogger("fetchlat.proxy")

METADATA_VERSION: Final = 1  # Topics=[] asks for brokers only
TOPICS_VERSION: Final = 12  # v10+ gives each topic's id; Topics=null asks for every topic
# Only ids and partitions never asked about make the proxy ask (the model keeps those an answer
# did not name apart), so one ask follows quickly on what the last one could not name.
TOPICS_MIN_INTERVAL_S: Final = 1.0
CLIENT_ID: Final = "fetchlat-proxy"


class NoAnswer(Exception):
    """The broker accepted the connection and closed it without answering our Metadata request."""


class BadAnswer(Exception):
    """The broker's answer is not a Metadata response (cut short, oversized, undecodable)."""


def metadata_request(correlation_id: int = 1) -> bytes:
    body = encode(load("MetadataRequest"), METADATA_VERSION, {"Topics": []})
    frame: bytes = request_frame(apis.METADATA, METADATA_VERSION, correlation_id, CLIENT_ID, body)
    return frame


def brokers_of(frame: bytes, correlation_id: int = 1) -> list[BrokerAddress]:
    """The brokers a Metadata v1 response frame (after its size prefix) names."""
    got = int.from_bytes(frame[:4], "big", signed=True)
    if got != correlation_id:
        raise BadAnswer(f"answer has correlation id {got}, not {correlation_id}")
    try:
        msg = walk(load("MetadataResponse"), METADATA_VERSION, frame, 4)
        return [BrokerAddress(node_id=b["NodeId"], host=b["Host"], port=b["Port"], rack=b.get("Rack"))
                for b in msg["Brokers"]]
    except ProtocolError as exc:
        raise BadAnswer(f"undecodable Metadata response: {exc}") from None


def topics_request(correlation_id: int = 2) -> bytes:
    body = encode(load("MetadataRequest"), TOPICS_VERSION, {
        "Topics": None, "AllowAutoTopicCreation": False, "IncludeTopicAuthorizedOperations": False})
    frame: bytes = request_frame(apis.METADATA, TOPICS_VERSION, correlation_id, CLIENT_ID, body)
    return frame


def topics_of(frame: bytes, correlation_id: int = 2
              ) -> tuple[list[tuple[str, uuid.UUID]], list[tuple[str, int, int]]]:
    """(name, id) of every topic and (topic, partition, leader) of every partition a Metadata
    v12 response frame (after its size prefix) names, from one walk."""
    got = int.from_bytes(frame[:4], "big", signed=True)
    if got != correlation_id:
        raise BadAnswer(f"answer has correlation id {got}, not {correlation_id}")
    if frame[4:5] != b"\x00":  # the flexible response header's tagged fields: none expected
        raise BadAnswer("Metadata response header carries tagged fields")
    try:
        msg = walk(load("MetadataResponse"), TOPICS_VERSION, frame, 5)
    except ProtocolError as exc:
        raise BadAnswer(f"undecodable Metadata response: {exc}") from None
    ids = [(t["Name"], t["TopicId"]) for t in msg["Topics"]
           if t["ErrorCode"] == 0 and t["Name"] and t["TopicId"] != uuid.UUID(int=0)]
    return ids, metadata_leaders(msg)


def topic_ids_of(frame: bytes, correlation_id: int = 2) -> list[tuple[str, uuid.UUID]]:
    """(name, id) of every topic a Metadata v12 response frame (after its size prefix) names."""
    return topics_of(frame, correlation_id)[0]


async def _ask(host: str, port: int, request: bytes, tls: ssl.SSLContext | None, server_hostname: str | None,
               max_frame_bytes: int) -> bytes:
    """One request on a connection of its own; the response frame after its size prefix."""
    reader, writer = await asyncio.open_connection(
        host, port, ssl=tls, server_hostname=(server_hostname or host) if tls else None)
    head = b""
    try:
        writer.write(request)
        head = await reader.readexactly(4)
        size = frame_size(head, max_frame_bytes, "Metadata response")
        frame = await reader.readexactly(size)
    except asyncio.IncompleteReadError as exc:
        if not head and not exc.partial:
            raise NoAnswer("broker closed the connection without answering") from exc
        raise BadAnswer("broker closed the connection mid-response") from exc
    except ProtocolError as exc:
        raise BadAnswer(str(exc)) from None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return frame


async def fetch_brokers(host: str, port: int, tls: ssl.SSLContext | None = None,
                        server_hostname: str | None = None, *, max_frame_bytes: int) -> list[BrokerAddress]:
    """Ask one broker for the broker list (Metadata v1, no topics)."""
    return brokers_of(await _ask(host, port, metadata_request(), tls, server_hostname, max_frame_bytes))


async def fetch_topics(host: str, port: int, tls: ssl.SSLContext | None = None, server_hostname: str | None = None,
                       *, max_frame_bytes: int) -> tuple[list[tuple[str, uuid.UUID]], list[tuple[str, int, int]]]:
    """Ask one broker for every topic's id and every partition's leader (Metadata v12)."""
    return topics_of(await _ask(host, port, topics_request(), tls, server_hostname, max_frame_bytes))


class Discovery:
    """Keeps the registry fed from the bootstrap brokers, and says whether any answers."""

    def __init__(self, upstreams: tuple[HostPort, ...], learn: Callable[[tuple[BrokerAddress, ...]], None], *,
                 tls: ssl.SSLContext | None, server_hostname: str | None, connect_timeout_s: float,
                 refresh_s: Callable[[], float], max_frame_bytes: int,
                 log_throttled: Callable[..., None],
                 wants_topics: Callable[[], bool] = lambda: False,
                 holds_topics: Callable[[], bool] = lambda: False,
                 topic_refresh_s: Callable[[], float] = lambda: float("inf"),
                 learn_every_topic: Callable[[tuple[tuple[str, uuid.UUID], ...], tuple[tuple[str, int, int], ...]],
                                             object] = lambda _t, _l: None) -> None:
        self.upstreams = upstreams
        self.learn = learn
        self.tls = tls
        self.server_hostname = server_hostname
        self.connect_timeout_s = connect_timeout_s
        self.refresh_s = refresh_s
        self.max_frame_bytes = max_frame_bytes
        self.log_throttled = log_throttled
        self.wants_topics = wants_topics
        self.holds_topics = holds_topics
        self.topic_refresh_s = topic_refresh_s
        self.learn_every_topic = learn_every_topic
        # monotonic s of the last topic-id round; never yet: long enough ago for any period (it was
        # -1 s, which a host up for less than topic_refresh_s took for a round asked just now)
        self._topics_at = -math.inf
        self.metadata_ok = False
        self.failures = 0  # rounds in which no bootstrap broker answered
        self._had_metadata = False
        self._passive = False  # the upstream requires authentication before Metadata
        self._kick = asyncio.Event()

    @property
    def asks(self) -> bool:
        """It asks its broker about topics: a broker answered, and not one that closes on
        Metadata before authentication."""
        return self.metadata_ok and not self._passive

    def topics_due(self) -> bool:
        return time.monotonic() - self._topics_at >= TOPICS_MIN_INTERVAL_S

    def asks_topics(self) -> bool:
        """Whether the next round asks for every topic: an id without a name or a partition
        without a known leader was met, or ``topic_refresh_s`` passed since the last ask while
        the model holds some partition (so what it holds of a deleted topic goes in time); at
        most once per ``TOPICS_MIN_INTERVAL_S`` either way."""
        if not self.topics_due():
            return False
        if self.wants_topics():
            return True
        return self.holds_topics() and time.monotonic() - self._topics_at >= self.topic_refresh_s()

    def kick(self) -> None:
        """Re-check now (a connection to a broker failed, or a topic id has no name)."""
        self._kick.set()

    async def _one_round(self) -> bool:
        for host, port in self.upstreams:
            try:
                brokers = await asyncio.wait_for(
                    fetch_brokers(host, port, self.tls, self.server_hostname, max_frame_bytes=self.max_frame_bytes),
                    self.connect_timeout_s)
            except NoAnswer:
                # reachable, but it closes on a Metadata request before authentication (a SASL
                # listener does that): ready; brokers are learned from what clients receive
                if not self._passive:
                    log.info("broker %s:%d closes unauthenticated Metadata requests (a SASL listener?): it is "
                             "reachable; brokers are learned from the responses clients receive", host, port)
                self._passive = True
                brokers = []
            except (TimeoutError, OSError, BadAnswer) as exc:
                self.log_throttled("metadata_failed", logging.WARNING, "metadata from %s:%d failed: %s",
                                   host, port, exc or "timeout")
                continue
            self.learn(tuple(brokers))
            if not self._passive and self.asks_topics():
                self._topics_at = time.monotonic()
                try:
                    ids, leaders = await asyncio.wait_for(fetch_topics(
                        host, port, self.tls, self.server_hostname, max_frame_bytes=self.max_frame_bytes),
                        self.connect_timeout_s)
                    self.learn_every_topic(tuple(ids), tuple(leaders))
                except (TimeoutError, OSError, BadAnswer, NoAnswer) as exc:
                    self.log_throttled("topics_failed", logging.WARNING, "topic ids from %s:%d failed: %s",
                                       host, port, exc or "timeout")
            recovered = not self.metadata_ok and self._had_metadata
            self.metadata_ok = self._had_metadata = True
            if recovered:
                log.info("upstream metadata fetched again from %s:%d: ready", host, port)
            return True
        return False

    async def run(self) -> None:
        delay = 0.2
        while True:
            if not await self._one_round():
                if self.metadata_ok:
                    log.warning("no upstream broker answers metadata: not ready until one does")
                self.metadata_ok = False
                self.failures += 1
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            delay = 0.2
            self._kick.clear()
            with contextlib.suppress(TimeoutError):  # a fault elsewhere asks for an early re-check
                await asyncio.wait_for(self._kick.wait(), self.refresh_s())
            self._kick.clear()
