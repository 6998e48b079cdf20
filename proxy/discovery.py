"""Broker discovery: the proxy's own Metadata request to a bootstrap broker, and the loop that
repeats it (every ``metadata_refresh_s``, at once when a connection to a broker fails).

Built on the codec: the request frame from ``protocol.framing``, the response read with the
frame limit, decoded by the spec-driven walker; any ``ProtocolError`` (a garbled or hostile
answer) is a failed attempt like a refused connection, never the end of discovery.
Owns: readiness (``metadata_ok``: some bootstrap broker answered lately).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from typing import Final

from fetchlat.protocol import apis
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.errors import ProtocolError
from fetchlat.protocol.events import BrokerAddress
from fetchlat.protocol.framing import frame_size, request_frame
from fetchlat.protocol.schema import load
from fetchlat.protocol.walker import walk

from .registry import HostPort

log = logging.getLogger("fetchlat.proxy")

METADATA_VERSION: Final = 1  # Topics=[] asks for brokers only
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


async def fetch_brokers(host: str, port: int, tls: ssl.SSLContext | None = None,
                        server_hostname: str | None = None, *, max_frame_bytes: int) -> list[BrokerAddress]:
    """Ask one broker for the broker list (Metadata v1, no topics)."""
    reader, writer = await asyncio.open_connection(
        host, port, ssl=tls, server_hostname=(server_hostname or host) if tls else None)
    head = b""
    try:
        writer.write(metadata_request())
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
    return brokers_of(frame)


class Discovery:
    """Keeps the registry fed from the bootstrap brokers, and says whether any answers."""

    def __init__(self, upstreams: tuple[HostPort, ...], learn: Callable[[tuple[BrokerAddress, ...]], None], *,
                 tls: ssl.SSLContext | None, server_hostname: str | None, connect_timeout_s: float,
                 refresh_s: Callable[[], float], max_frame_bytes: int,
                 log_throttled: Callable[..., None]) -> None:
        self.upstreams = upstreams
        self.learn = learn
        self.tls = tls
        self.server_hostname = server_hostname
        self.connect_timeout_s = connect_timeout_s
        self.refresh_s = refresh_s
        self.max_frame_bytes = max_frame_bytes
        self.log_throttled = log_throttled
        self.metadata_ok = False
        self.failures = 0  # rounds in which no bootstrap broker answered
        self._had_metadata = False
        self._passive = False  # the upstream requires authentication before Metadata
        self._kick = asyncio.Event()

    def kick(self) -> None:
        """Re-check now (a connection to a broker failed)."""
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
