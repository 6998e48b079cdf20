"""One client connection's proxy core, sans-I/O (mitmproxy's layers, h11's connection): bytes
and times in, what to do out. It joins the codec (``protocol/``), the connection policy
(``policy.py``) and the observation layer (``metrics/observer.py``); ``session.py`` only
carries out what it returns. ``tests/proxy/test_conversation.py`` scripts it: bytes in at
time t -> writes, pauses, closes with their reason, metric deltas.

The road of one response chunk: ``from_broker`` (segments to write, and what must happen
before the client sees them: brokers learned) -> the I/O layer writes -> ``after_write``
(the deferred parse, then samples and trace rows for every exchange that ended).

Must never: read clocks, touch sockets or asyncio. Logging is returned as ``Log`` actions.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Final

from ..metrics.observer import ConnectionObserver, Observer
from ..metrics.vocabulary import Direction
from ..protocol.apis import api_name
from ..protocol.connection import KafkaConnection, Segment
from ..protocol.errors import FramingError
from ..protocol.events import BrokerAddress, BrokersLearned, DecodeFailed, Event, SaslPassthroughStarted
from ..protocol.rewrite import ResponseRewriter
from ..protocol.routed import Records, RoutedConnection
from ..protocol.sessions import FetchSessions
from .policy import RTT_SAMPLE_EVERY_NS, ConnectionPolicy, Limits, Refusal, first_bytes_verdict, tls_failure
from .registry import BrokerRegistry, HostPort


# ------------------------------------------------------------------ actions
@dataclass(frozen=True, slots=True)
class Close:
    """Close the client connection (and its broker connection). ``abort``: at once, dropping
    what is buffered; otherwise after the buffered writes."""

    message: str
    abort: bool = True
    level: int = logging.WARNING
    reason: str = ""  # the connection_errors label it was counted under


@dataclass(frozen=True, slots=True)
class Log:
    level: int
    message: str


@dataclass(frozen=True, slots=True)
class Learn:
    """Brokers named in a response: known (listeners bound) before the client reads it."""

    brokers: tuple[BrokerAddress, ...]


@dataclass(frozen=True, slots=True)
class WriteUpstream:
    """Write these bytes to the broker (the first chunk, once its first bytes look like Kafka)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class PauseClient:
    pass


@dataclass(frozen=True, slots=True)
class ResumeClient:
    pass


Action = Close | Log | Learn | WriteUpstream | PauseClient | ResumeClient
NOTHING: Final[tuple[Action, ...]] = ()
PAUSE: Final = PauseClient()
RESUME: Final = ResumeClient()


@dataclass(frozen=True, slots=True)
class CoreContext:
    """What a conversation needs of the proxy, and nothing more."""

    observer: Observer
    registry: BrokerRegistry
    limits: Limits
    rewriter: ResponseRewriter | None
    max_frame_bytes: int
    wait_time_tag: int | None
    fetch_sessions: dict[HostPort, FetchSessions] = field(default_factory=dict)  # one mirror per broker
    routed: bool = False  # read by the native core first where it is loaded (protocol/routed.py)

    def sessions_for(self, upstream: HostPort) -> FetchSessions:
        """The fetch-session mirror of the broker at ``upstream``, shared by its connections."""
        mirror = self.fetch_sessions.get(upstream)
        if mirror is None:
            mirror = self.fetch_sessions[upstream] = FetchSessions()
        return mirror


class Conversation:
    """One client connection: forwarding decisions, timers, observation. Never does I/O."""

    def __init__(self, ctx: CoreContext, *, conn_id: int, listener: str, broker_label: str,
                 upstream: HostPort, t_ns: int, tls: bool = False, peer: str = "?") -> None:
        self.ctx = ctx
        self.listener = listener
        self.peer = peer
        self.codec = KafkaConnection(rewriter=ctx.rewriter, max_frame_bytes=ctx.max_frame_bytes,
                                     wait_time_tag=ctx.wait_time_tag, sessions=ctx.sessions_for(upstream))
        # the core frames the connection and hands the Python road only the frames it parses
        self.routed: RoutedConnection | None = None
        if ctx.routed:
            self.routed = RoutedConnection.make(self.codec, ctx.max_frame_bytes,
                                                ctx.rewriter.wants if ctx.rewriter is not None else None)
        self.policy = ConnectionPolicy(ctx.limits, t_ns, tls=tls)
        self._default_label = broker_label
        self.upstream = upstream
        self._generation = -1
        self.observer: ConnectionObserver = ctx.observer.connection(conn_id, broker_label)
        self._refresh_label()
        self.upstream_ready = False
        self.pending: list[bytes] = []
        self._held_since_ns: int | None = None
        self._first = True
        self._rtt_at_ns = 0
        m = ctx.observer.metrics
        self.bytes_in = m.bytes.labels(Direction.CLIENT_TO_BROKER, listener)
        self.bytes_out = m.bytes.labels(Direction.BROKER_TO_CLIENT, listener)
        self._requests = self.codec.requests
        self._responses = self.codec.responses

    @property
    def conn_id(self) -> int:
        return int(self.observer.conn_id)

    @property
    def broker(self) -> str:
        return str(self.observer.broker)

    @property
    def in_flight(self) -> int:
        routed = self.routed
        return len(self.codec.in_flight) if routed is None else routed.in_flight

    @property
    def forwards_directly(self) -> bool:
        """The I/O layer writes client bytes upstream itself, before ``from_client`` (the first
        chunk waits for the sniff verdict; bytes before the broker connection are held)."""
        return self.upstream_ready and not self._first

    def _label_stale(self) -> bool:
        return self.ctx.registry.generation != self._generation

    def _refresh_label(self) -> None:
        reg = self.ctx.registry
        self._generation = reg.generation
        self.observer.set_broker(reg.label(self.upstream, self._default_label))

    def refuse(self, r: Refusal) -> Close:
        self.ctx.observer.metrics.connection_errors.labels(r.reason).inc()
        return Close(f"client {self.peer} via {self.listener}: {r.message}", reason=r.reason)

    # ------------------------------------------------------------------ client -> broker
    def from_client(self, data: bytes, t_ns: int) -> tuple[Action, ...]:
        """Plain bytes the client sent at ``t_ns``. The caller has already written them upstream
        if ``forwards_directly`` (forward first: the same object); otherwise they are held here,
        or (the first chunk) written once they look like Kafka."""
        actions = NOTHING
        if self._first:
            self._first = False
            refusal = first_bytes_verdict(data)
            if refusal is not None:  # never forwarded: the broker would only see garbage
                return (self.refuse(refusal),)
            if self.upstream_ready:
                actions = (WriteUpstream(data),)
        if not self.upstream_ready:
            self.pending.append(data)
            if self._held_since_ns is None:
                self._held_since_ns = t_ns
            if self.policy.held(len(data)):
                actions = (PAUSE,)
        self.bytes_in.inc(len(data))
        routed = self.routed
        if routed is not None:
            try:
                events = routed.receive_from_client(data, t_ns)
            except FramingError as exc:
                return (self.framing_lost("request", exc),)
            self.policy.client_bytes(t_ns, routed.client_mid_frame)
            notes = self.observe_read(routed.client_records(), events, t_ns, t_ns)
        else:
            try:
                events = self._requests.receive(data, t_ns)
            except FramingError as exc:
                return (self.framing_lost("request", exc),)
            self.policy.client_bytes(t_ns, self._requests.mid_frame)
            notes = self.observe_read(None, events, t_ns, t_ns)
        return (*actions, *notes) if notes else actions

    def observe_read(self, records: Records | None, events: list[Event], t_read_ns: int,
                 t_written_ns: int) -> tuple[Action, ...]:
        """A read's events and, on the routed road, the core's records of it (None: it settled
        none of the read's exchanges alone), observed in order; the log lines they are worth."""
        if records is None and not events:
            return NOTHING
        if self._label_stale():
            self._refresh_label()
        if records is None:
            notable = self.observer.observe(events, t_read_ns, t_written_ns)
        else:
            notes: list[Event] = []
            notable = self.observer.observe_records(records[0], records[1], events, t_read_ns, t_written_ns, notes)
            events = events + notes
        return tuple(self._notes(events)) if notable else NOTHING

    def framing_lost(self, side: str, exc: FramingError) -> Close:
        reason = f"{side}_framing"
        self.ctx.observer.metrics.connection_errors.labels(reason).inc()
        return Close(f"client {self.peer} via {self.listener}: {side} framing lost ({exc}); "
                     "closing this connection only", reason=reason)

    def _notes(self, events: list[Event]) -> list[Action]:
        out: list[Action] = []
        for ev in events:
            if isinstance(ev, DecodeFailed):
                out.append(Log(logging.INFO, f"client {self.peer}: {api_name(ev.api_key)} v{ev.api_version} "
                                             f"{ev.direction} not decoded ({ev.reason}); forwarded untouched"))
            elif isinstance(ev, SaslPassthroughStarted):
                out.append(Log(logging.INFO, f"client {self.peer}: SASL mechanism {ev.mechanism} over raw frames; "
                                             "forwarding without observation"))
        return out

    # ------------------------------------------------------------------ upstream
    def upstream_connected(self, t_ns: int, upstream: HostPort) -> tuple[list[bytes], tuple[Action, ...]]:
        """The broker connection is up: the held bytes to write first, and what to do."""
        if upstream != self.upstream and not self.in_flight:  # a bootstrap listener's pick
            self.codec.shared.sessions = self.ctx.sessions_for(upstream)
        self.upstream = upstream
        self._refresh_label()
        self.upstream_ready = True
        self.observer.upstream_ready(t_ns, self._held_since_ns)
        pending, self.pending = self.pending, []
        return pending, ((RESUME,) if self.policy.released() else NOTHING)

    def upstream_failed(self, t_ns: int) -> int | None:
        """A round of connection attempts failed: ns until the next round, or None to give up."""
        self.ctx.observer.metrics.upstream_failures.inc()
        return self.policy.attempt_failed(t_ns)

    def upstream_unreachable(self, last_error: str) -> Close:
        self.ctx.observer.metrics.connection_errors.labels("upstream_unreachable").inc()
        hold_s = self.policy.limits.upstream_hold_ns / 1e9
        return Close(f"client {self.peer} via {self.listener}: broker unreachable for {hold_s:.1f} s ({last_error}); "
                     f"closing the connection so the client reconnects ({self.in_flight} request(s), "
                     f"{self.policy.pending_bytes} bytes held)", abort=False, reason="upstream_unreachable")

    # ------------------------------------------------------------------ broker -> client
    def from_broker(self, data: bytes, t_ns: int) -> tuple[list[Segment], tuple[Action, ...]]:
        """The segments to write to the client, and what must happen before they are written."""
        try:
            routed = self.routed
            if routed is None:
                segments, before = self._responses.forward(data, t_ns)
            else:
                segments, before = routed.forward_from_broker(data, t_ns)
        except FramingError as exc:
            return [], (self.framing_lost("response", exc),)
        if not before:
            return segments, NOTHING
        return segments, self.taught(before, t_ns)

    def taught(self, before: list[Event], t_ns: int) -> tuple[Action, ...]:
        """What an answer rewritten at ``t_ns`` taught (``before``: topic ids and leaders, observed
        here; brokers), and the brokers to learn before its bytes reach the client."""
        self.observer.observe(before, t_ns, t_ns)  # topic ids learned
        registry = self.ctx.registry
        return tuple(Learn(ev.brokers) for ev in before
                     if isinstance(ev, BrokersLearned) and not registry.knows(ev.brokers))

    def written(self, segments: list[Segment]) -> int:
        """Count what went to the client; its size."""
        n = 0
        for s in segments:
            n += len(s)
        self.bytes_out.inc(n)
        return n

    def after_write(self, t_read_ns: int, t_written_ns: int | None) -> tuple[Action, ...]:
        """The bytes read at ``t_read_ns`` were handed on at ``t_written_ns`` (None: nothing was
        written): observe."""
        if t_written_ns is None:
            t_written_ns = t_read_ns
        else:
            self.observer.handed_on(t_read_ns, t_written_ns)
        routed = self.routed
        if routed is not None:
            return self.observe_read(routed.broker_records(), routed.after_write(), t_read_ns, t_written_ns)
        return self.observe_read(None, self._responses.after_write(), t_read_ns, t_written_ns)

    # ------------------------------------------------------------------ timers and TLS
    def client_stalled(self, t_ns: int) -> None:
        self.policy.client_stalled(t_ns)

    def client_resumed(self) -> None:
        self.policy.client_resumed()

    def expire(self, now_ns: int) -> Close | None:
        reason = self.policy.expire(now_ns, self.in_flight > 0)
        if reason is None:
            return None
        return self.refuse(Refusal(reason, f"{reason.replace('_', ' ')}; closing this connection"))

    def tls_established(self) -> None:
        self.policy.tls_pending = False

    def tls_failed(self, handshaken: bool, error: str) -> Close:
        return self.refuse(tls_failure(handshaken, error))

    # ------------------------------------------------------------------ carried by the core (relayed.py)
    @property
    def can_hand_over(self) -> bool:
        """The core can carry the connection from here: its broker connection is up, nothing of
        it is in flight or half read either way, and its codec follows frames (no raw SASL tokens)."""
        codec = self.codec
        return (self.routed is None and self.upstream_ready and not self._first and not self.pending
                and not codec.in_flight and not codec.client_mid_frame and not codec.responses.mid_frame
                and not codec.shared.passthrough)

    def handed_over(self) -> None:
        """The core carries the connection: it passes every answer on as it came (it holds an
        ApiVersions whole for the rewriter itself), so the codec only reads what it is fed."""
        self.codec.responses.rewriter = None

    def rtt_due(self, now_ns: int) -> bool:
        return now_ns - self._rtt_at_ns > RTT_SAMPLE_EVERY_NS

    def client_rtt(self, rtt_ns: int, now_ns: int) -> None:
        self._rtt_at_ns = now_ns
        self.observer.client_rtt(rtt_ns)
