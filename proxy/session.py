"""One proxied connection: the client-facing and broker-facing asyncio protocols.

Moves bytes and records time, nothing else: requests are written upstream as the very
object received, then observed; responses go through the codec, which returns the
segments to forward. Backpressure both ways (pause_writing on one side pauses reading on
the other); a close on either side closes the other after its buffered writes.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from fetchlat.protocol.apis import api_name
from fetchlat.protocol.connection import KafkaConnection
from fetchlat.protocol.errors import FramingError
from fetchlat.protocol.events import (
    BrokersLearned,
    DecodeFailed,
    Event,
    FetchExchanged,
    ProduceExchanged,
    RequestSeen,
    ResponseSeen,
    SaslPassthroughStarted,
    TopicIdsLearned,
)
from fetchlat.protocol.inflight import observed
from fetchlat.protocol.sniff import sniff

from . import clock
from .tls import TlsServerSide

if TYPE_CHECKING:
    from .server import Proxy

log = logging.getLogger("fetchlat.proxy")

TLS_HANDSHAKE_TIMEOUT_NS = 10_000_000_000
MAX_PENDING_BYTES = 8 * 1024 * 1024  # client bytes held while the upstream connects
RTT_SAMPLE_EVERY_NS = 1_000_000_000
TCP_INFO_RTT_OFFSET = 68  # struct tcp_info: 8 u8 fields, then u32s; tcpi_rtt (µs) is the 16th
TCP_INFO_LEN = 104


def tcp_rtt_ns(sock: object) -> int | None:
    """The kernel's smoothed RTT of a TCP socket (Linux TCP_INFO), or None."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)  # type: ignore[attr-defined]
    except (OSError, AttributeError):
        return None
    if len(raw) < TCP_INFO_RTT_OFFSET + 4:
        return None
    return int(struct.unpack_from("I", raw, TCP_INFO_RTT_OFFSET)[0]) * 1000


COALESCE_BYTES = 256 << 10  # pieces of a response up to this size are joined into one write


class ClientSide(asyncio.Protocol):
    def __init__(self, proxy: Proxy, listener: str, upstreams: Callable[[], list[tuple[str, int]]],
                 broker_label: str) -> None:
        self.proxy = proxy
        self.listener = listener
        self.upstreams = upstreams  # asked again on every attempt: a restarted broker may have moved
        self.upstream_addr = upstreams()[0]
        self.broker_label = broker_label
        self.transport: asyncio.Transport | None = None
        self.broker: BrokerSide | None = None
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.upstream_ready_ns = 0  # requests buffered before this were forwarded only then
        self.closed = False
        self.client_eof = False  # the client half-closed: the broker closing next is expected
        self.peer = "?"
        self.codec = KafkaConnection(rewriter=proxy.rewriter, max_frame_bytes=proxy.cfg.max_frame_bytes,
                                     wait_time_tag=proxy.cfg.wait_time_tag)
        self.deferred: list[FetchExchanged | ProduceExchanged] = []
        self.conn_id = proxy.next_conn_id()
        self.first_bytes = True
        self.last_active_ns = clock.now_ns()
        self.partial_since_ns = 0  # a request begun and not finished since then (0: none)
        self.stalled_since_ns = 0  # the client stopped reading responses since then (0: reading)
        self.rtt_ns = 0
        self._rtt_at_ns = 0
        self.tls = TlsServerSide(proxy.server_tls) if proxy.server_tls is not None else None
        self.connected_ns = clock.now_ns()
        m = proxy.metrics
        self._bytes_in = m.bytes.labels("client_to_broker", listener)
        self._bytes_out = m.bytes.labels("broker_to_client", listener)
        self._req_children: dict[int, tuple[object, object]] = {}

    # asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.proxy.metrics.connections.labels(self.listener).inc()
        self.proxy.metrics.connections_active.labels(self.listener).inc()
        self.proxy.sessions.add(self)
        asyncio.get_running_loop().create_task(self._connect_upstream())

    async def _connect_upstream(self) -> None:
        """Connect to the broker. While it is unreachable (restarting, refusing) the client's
        requests are held -- up to MAX_PENDING_BYTES, then its reading pauses -- and the
        connection is retried with backoff for ``upstream_hold_timeout_s`` (the principle of
        KIP-286: block a bounded time instead of failing at once); then the client connection
        is closed, so the client reconnects and retries as it does after any disconnect."""
        loop = asyncio.get_running_loop()
        cfg = self.proxy.cfg
        deadline = loop.time() + cfg.upstream_hold_timeout_s
        delay, waiting = 0.05, False
        broker, last_error = None, "timeout"
        while broker is None and not self.closed:
            for host, port in self.upstreams():  # the bootstrap listener may try several brokers
                remaining = deadline - loop.time()
                try:
                    tls = self.proxy.upstream_tls
                    _, broker = await asyncio.wait_for(
                        loop.create_connection(lambda: BrokerSide(self), host, port, ssl=tls,
                                               server_hostname=(cfg.upstream_server_hostname or host) if tls
                                               else None),
                        timeout=max(0.05, min(cfg.connect_timeout_s, remaining)),
                    )
                except (TimeoutError, OSError) as exc:  # ssl.SSLError is an OSError: a failed TLS handshake
                    reason = (exc.strerror or str(exc)) if isinstance(exc, OSError) else "timeout"
                    last_error = f"{host}:{port}: {reason}"
                    continue
                self.upstream_addr = (host, port)
                break
            if broker is not None or self.closed:
                break
            self.proxy.upstream_failed()
            if loop.time() >= deadline:
                break
            if not waiting:
                waiting = True
                self.proxy.waiting_upstream += 1
            await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
            delay = min(delay * 2, 1.0)
        if waiting:
            self.proxy.waiting_upstream -= 1
        if broker is None:
            if not self.closed:
                self.proxy.metrics.connection_errors.labels("upstream_unreachable").inc()
                self.proxy.log_throttled(
                    "upstream_unreachable", logging.WARNING,
                    "client %s via %s: broker unreachable for %.1f s (%s); closing the connection so the client "
                    "reconnects (%d request(s), %d bytes held)", self.peer, self.listener, cfg.upstream_hold_timeout_s,
                    last_error, len(self.codec.in_flight), self.pending_bytes)
                self.close()
            return
        if self.closed:
            broker.close()
            return
        self.broker = broker
        self.upstream_ready_ns = clock.now_ns()
        if self.pending:
            assert broker.transport is not None
            broker.transport.writelines(self.pending)
            self.pending.clear()
            self.pending_bytes = 0
            if self.transport is not None:
                self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        t_ns = clock.now_ns()
        self.last_active_ns = t_ns
        if self.tls is not None:
            plain = self._tls_in(data)
            if not plain:
                return
            data = plain
        if self.first_bytes:
            self.first_bytes = False
            kind = sniff(data[:8])
            if kind is not None:  # never forwarded: the broker would only see garbage
                what = {"tls": "a TLS ClientHello", "http": "an HTTP request"}[kind]
                log.warning("client %s via %s sent %s to a plaintext Kafka listener; closing this connection "
                            "(point the client at a PLAINTEXT listener, or use Kafka's protocol)",
                            self.peer, self.listener, what)
                self.proxy.metrics.connection_errors.labels(f"{kind}_on_plaintext").inc()
                self.abort()
                return
        broker = self.broker
        if broker is not None and broker.transport is not None:
            broker.transport.write(data)  # forward first: the same object, no copy
        else:
            self.pending.append(data)
            self.pending_bytes += len(data)
            if self.pending_bytes > MAX_PENDING_BYTES and self.transport is not None:
                self.transport.pause_reading()
        self._bytes_in.inc(len(data))
        try:
            events = self.codec.receive_from_client(data, t_ns)
        except FramingError as exc:
            self.protocol_failure("request", exc)
            return
        if events:
            self.handle(events)
            if self.deferred:
                self.observe_exchanges(t_ns)
        if self.codec.client_mid_frame:
            if not self.partial_since_ns:
                self.partial_since_ns = t_ns
        else:
            self.partial_since_ns = 0

    def _tls_in(self, data: bytes) -> bytes:
        assert self.tls is not None and self.transport is not None
        was_handshaken = self.tls.handshaken
        try:
            plain, reply = self.tls.feed(data)
        except ssl.SSLError as exc:
            what = "TLS handshake failed" if not self.tls.handshaken else "TLS error"
            hint = (" (a plaintext client on a TLS listener?)" if "WRONG_VERSION_NUMBER" in str(exc)
                    or "HTTP_REQUEST" in str(exc) or "UNKNOWN_PROTOCOL" in str(exc) else "")
            self.proxy.log_throttled(f"tls:{exc.reason}", logging.WARNING,
                                     "client %s via %s: %s: %s%s; closing this connection", self.peer, self.listener,
                                     what, exc.reason or exc, hint)
            self.proxy.metrics.connection_errors.labels("tls_handshake_failed" if what.endswith("failed")
                                                        else "tls_error").inc()
            self.transport.write(self.tls.encrypt([]))  # the alert, if any
            self.abort()
            return b""
        if reply:
            self.transport.write(reply)
        if self.tls.handshaken and not was_handshaken:
            log.debug("client %s via %s: TLS established (client certificate: %s)", self.peer, self.listener,
                      self.tls.peer_subject() or "none")
        if self.tls.closed_by_peer:
            self.close()
        return plain

    def eof_received(self) -> bool | None:
        # half-close: pass it on, keep reading responses (not over TLS: its close ends both ways)
        self.client_eof = True
        if self.tls is not None:
            return None
        if self.broker is not None and self.broker.transport is not None and self.broker.transport.can_write_eof():
            self.broker.transport.write_eof()
            return True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.proxy.metrics.connections_active.labels(self.listener).dec()
        self.proxy.sessions.discard(self)
        if self.broker is not None:
            self.broker.close()

    def pause_writing(self) -> None:
        self.stalled_since_ns = clock.now_ns()
        if self.broker is not None and self.broker.transport is not None:
            self.broker.transport.pause_reading()

    def resume_writing(self) -> None:
        self.stalled_since_ns = 0
        if self.broker is not None and self.broker.transport is not None:
            self.broker.transport.resume_reading()

    # -------------------------------------------------------------------------------
    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        if self.broker is not None:
            self.broker.abort()

    def expire(self, now_ns: int) -> str | None:
        """Why this connection should be closed now, if it should (idle, slowloris, stalled)."""
        cfg = self.proxy.cfg
        if self.tls is not None and not self.tls.handshaken and now_ns - self.connected_ns > TLS_HANDSHAKE_TIMEOUT_NS:
            return "tls_handshake_timeout"
        if self.partial_since_ns and now_ns - self.partial_since_ns > cfg.partial_frame_timeout_s * 1e9:
            return "partial_frame_timeout"
        if self.stalled_since_ns and now_ns - self.stalled_since_ns > cfg.stalled_client_timeout_s * 1e9:
            return "client_not_reading"
        if not self.codec.in_flight and now_ns - self.last_active_ns > cfg.idle_timeout_s * 1e9:
            return "idle_timeout"
        return None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def protocol_failure(self, side: str, exc: Exception) -> None:
        log.warning("client %s via %s: %s framing lost (%s); closing this connection only",
                    self.peer, self.listener, side, exc)
        self.proxy.metrics.connection_errors.labels(f"{side}_framing").inc()
        if self.transport is not None:
            self.transport.abort()
        if self.broker is not None:
            self.broker.abort()

    def write_to_client(self, segments: list[bytes | memoryview]) -> None:
        if self.transport is None or self.closed:
            return
        n = 0
        for s in segments:
            n += len(s)
        if self.tls is not None:
            self.transport.write(self.tls.encrypt(segments))
        elif len(segments) == 1:
            self.transport.write(segments[0])
        elif not segments:
            return
        elif n <= COALESCE_BYTES:  # one send: a client woken by a frame's first bytes reads twice
            self.transport.write(b"".join(segments))
        else:
            self.transport.writelines(segments)
        self._bytes_out.inc(n)

    def handle(self, events: list[Event]) -> None:
        m = self.proxy.metrics
        for ev in events:
            if isinstance(ev, ResponseSeen):
                children = self._children(ev.api_key)
                forwarded_ns = max(ev.t_request_ns, self.upstream_ready_ns)
                children[1].observe((ev.t_last_ns - forwarded_ns) / 1e9)  # type: ignore[attr-defined]
                if ev.rewritten:
                    m.rewrites.labels(api_name(ev.api_key)).inc()
                traces = self.proxy.traces
                if traces is not None and not observed(ev.api_key, ev.api_version):
                    traces.other(self.broker_name(), self.conn_id, api_name(ev.api_key), ev)
            elif isinstance(ev, RequestSeen):
                self._children(ev.api_key)[0].inc()  # type: ignore[attr-defined]
            elif isinstance(ev, FetchExchanged | ProduceExchanged):
                self.deferred.append(ev)  # observed once the response has been written
            elif isinstance(ev, BrokersLearned):
                self.proxy.learn(ev.brokers)
            elif isinstance(ev, TopicIdsLearned):
                self.proxy.model.learn_topic_ids(ev.topics)
            elif isinstance(ev, DecodeFailed):
                m.decode_errors.labels(api_name(ev.api_key)).inc()
                log.info("client %s: %s v%d %s not decoded (%s); forwarded untouched",
                         self.peer, api_name(ev.api_key), ev.api_version, ev.direction, ev.reason)
            elif isinstance(ev, SaslPassthroughStarted):
                log.info("client %s: SASL mechanism %s over raw frames; forwarding without observation",
                         self.peer, ev.mechanism)

    def observe_exchanges(self, t_received_ns: int, t_forwarded_ns: int | None = None) -> None:
        """Feed decoded exchanges to the latency model, after their bytes went out. The proxy's
        own time: from reading the bytes to handing them on (not the parse after that)."""
        now = clock.now_ns()
        proxy_ns = (t_forwarded_ns if t_forwarded_ns is not None else now) - t_received_ns
        if now - self._rtt_at_ns > RTT_SAMPLE_EVERY_NS and self.transport is not None:
            rtt = tcp_rtt_ns(self.transport.get_extra_info("socket"))
            if rtt is not None:
                self.rtt_ns = rtt
                self._rtt_at_ns = now
                self.proxy.fetch_metrics.client_rtt.labels(self.broker_name()).observe(rtt / 1e9)
        broker = self.broker_name()
        for ev in self.deferred:
            if isinstance(ev, FetchExchanged):
                sample, replication = self.proxy.model.on_fetch(ev, proxy_ns=proxy_ns, client_rtt_ns=self.rtt_ns)
                self.proxy.fetch_metrics.observe_fetch(broker, sample, replication, ev.t_last_ns)
                self.proxy.record_fetch(broker, self.conn_id, ev, sample, replication)
            else:
                psample = self.proxy.model.on_produce(ev)
                self.proxy.fetch_metrics.observe_produce(broker, psample)
                self.proxy.record_produce(broker, self.conn_id, ev, psample)
        self.deferred.clear()

    def broker_name(self) -> str:
        return self.proxy.broker_label(self.upstream_addr, self.broker_label)

    def _children(self, api_key: int) -> tuple[object, object]:
        c = self._req_children.get(api_key)
        if c is None:
            name = api_name(api_key)
            m = self.proxy.metrics
            label = self.proxy.broker_label(self.upstream_addr, self.broker_label)
            c = (m.requests.labels(name, label), m.request_duration.labels(name, label))
            self._req_children[api_key] = c
        return c


class BrokerSide(asyncio.Protocol):
    def __init__(self, client: ClientSide) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        t_ns = clock.now_ns()
        client = self.client
        try:
            segments, before = client.codec.forward_from_broker(data, t_ns)
        except FramingError as exc:
            client.protocol_failure("response", exc)
            return
        if before:
            client.handle(before)  # learn brokers (bind listeners) before clients see them
        t_out_ns = t_ns
        if segments:
            client.write_to_client(segments)
            t_out_ns = clock.now_ns()
            client.proxy.metrics.added.observe((t_out_ns - t_ns) / 1e9)
        events = client.codec.after_write()  # parse what is already on its way
        if events:
            client.handle(events)  # the bookkeeping waits until the bytes are on their way
        if client.deferred:
            client.observe_exchanges(t_ns, t_out_ns)

    def eof_received(self) -> bool | None:
        return None  # close fully; connection_lost closes the client after its writes

    def connection_lost(self, exc: Exception | None) -> None:
        client = self.client
        if not client.closed and not client.client_eof:  # the broker went first: restart, crash, or it closed on us
            client.proxy.upstream_lost(client, exc)
        client.close()

    def pause_writing(self) -> None:
        if self.client.transport is not None:
            self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.client.transport is not None:
            self.client.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
