"""The observation layer: the codec's events with their timestamps in; Prometheus samples and
trace rows out. Every latency figure fetchlat reports is computed here or in the model it
feeds (``model.py``), from timestamps it is handed: it knows nothing of sockets, asyncio or
clocks, so a proxy connection and a packet capture feed it the same way.

"Forwarded upstream" is defined once, in ``ConnectionObserver.forwarded_ns``: the latest of
the moment the request's last byte was read, the moment the broker connection was ready, and
the moment the broker's answer to the request before it on the connection was complete (a
broker takes one request at a time from a connection). A request held while the proxy
(re)connects to its broker is forwarded only when the connection is up, and a pipelined one
reaches the broker only when its turn comes, so ``fetchlat_request_duration_seconds``, the
fetch total (and from it wait and local) and the produce total all measure from then; the
time held counts in ``e2e`` (what the client waited), and a reconnection's hold in
``fetchlat_upstream_hold_seconds``. A connection the broker mutes for a quota (the throttle
of the answer before) holds the next request too; that hold is the throttle, reported as such
on the throttled answer, and counts in neither the next exchange nor its ``e2e``.

Owns: which events become which samples and rows. Must never: read clocks, do I/O, or log.
"""

from __future__ import annotations

from typing import Final

from ..protocol.apis import API_VERSIONS, DESCRIBE_CLUSTER, FIND_COORDINATOR, LIST_OFFSETS, METADATA, api_name
from ..protocol.events import (
    DecodeFailed,
    Event,
    FetchExchanged,
    ProduceExchanged,
    ProduceSent,
    RequestSeen,
    ResponseSeen,
    SaslPassthroughStarted,
    TopicIdsLearned,
)
from ..protocol.inflight import observed
from ..protocol.requests import UNREADABLE_HEADER
from ..protocol.routed import ASKED, HEADER_UNREADABLE, KIND_REQUEST, RECORD_BYTES, ROUTED, record_at
from .awaiting import Awaiting
from .fast import CounterChild, HistogramChild
from .model import DEFAULT_EXPIRY_OVERSHOOT_NS, LatencyModel
from .prom import FetchMetrics, ProxyMetrics
from .rows import TraceColumns
from .vocabulary import Outcome

# Requests a broker answers without waiting on anything: their round trips teach the model the
# network between a proxy and its brokers (``LatencyModel.learn_round_trip``)
ROUND_TRIP_APIS: Final = frozenset((API_VERSIONS, METADATA, LIST_OFFSETS, FIND_COORDINATOR, DESCRIBE_CLUSTER))


class Observer:
    """Per proxy (or per capture): the latency model, the metric families, the trace columns."""

    def __init__(self, metrics: ProxyMetrics, fetch_metrics: FetchMetrics, *, wall_minus_mono_ns: int,
                 proxy_id: str = "", traces: TraceColumns | None = None,
                 expiry_overshoot_ns: int = DEFAULT_EXPIRY_OVERSHOOT_NS, beside_broker: bool = False) -> None:
        self.metrics = metrics
        self.fetch_metrics = fetch_metrics
        self.model = LatencyModel(wall_minus_mono_ns=wall_minus_mono_ns, expiry_overshoot_ns=expiry_overshoot_ns,
                                  beside_broker=beside_broker)
        self.proxy_id = proxy_id
        self.traces = traces  # the rows' column buffers (metrics/rows.py), None without traces
        cluster = self.model.cluster
        self.awaiting = Awaiting(lambda: cluster.wants_topics)  # fetches waiting for the broker's answer

    @property
    def wall_minus_mono_ns(self) -> int:
        return self.model.wall_minus_mono_ns

    def set_clock(self, wall_ns: int, mono_ns: int) -> None:
        """A fresh (wall, monotonic) pair: trace timestamps follow the wall clock's steps."""
        self.model.wall_minus_mono_ns = wall_ns - mono_ns

    def date_awaiting(self, now_ns: int, everything: bool = False) -> None:
        """The fetches held for the broker's answer that are due (``awaiting.py``), or
        ``everything`` held (the proxy stops), dated now in order: the proxy's tick, and
        before each fetch."""
        awaiting = self.awaiting
        for conn, ev, proxy_ns, unheld, fwd, rtt_ns in awaiting.all() if everything else awaiting.due(now_ns):
            conn.dated(ev, proxy_ns, unheld, fwd, rtt_ns)

    def connection(self, conn_id: int, broker: str) -> ConnectionObserver:
        return ConnectionObserver(self, conn_id, broker)


class ConnectionObserver:
    """One client connection's view: its broker label, resolved metric children, client RTT,
    when its broker connection became ready, and when the broker finished its last answer.

    A Kafka broker takes one request at a time from a connection: it reads the next only once
    it has sent the answer to the one before (its network thread mutes the connection
    meanwhile). A pipelined request (a producer's ``max.in.flight`` > 1) waits in the socket
    until then, out of the broker's sight and outside its ``totalTimeMs``. So a request's
    exchange starts when it was forwarded, when the broker connection came up, or when the
    answer before it was complete, whichever is last (away from the broker, the answer before
    it on the clock of forwarding: ``LatencyModel.broker_frame_ns``); the wait before is held
    time (it counts toward the client's end-to-end time, never toward the broker's). Measured against Kafka's
    request log: a producer pipelining 5 acks=all produces showed a produce total p50 of
    862 ms timed from forwarding against the broker's 7.5 ms."""

    __slots__ = ("_children", "broker", "broker_free_ns", "conn_id", "node", "obs", "rtt_ns", "unmuted_ns",
                 "upstream_ready_ns")

    def __init__(self, obs: Observer, conn_id: int, broker: str) -> None:
        self.obs = obs
        self.conn_id = conn_id
        self.broker = broker
        self.node = int(broker) if broker.isdigit() else -1  # the broker's node id, if the label is one
        self.rtt_ns = 0
        self.upstream_ready_ns = 0
        self.broker_free_ns = 0  # the last byte of the latest answer on this connection
        self.unmuted_ns = 0  # when the broker's quota mute of this connection ends (KIP-219)
        self._children: dict[int, tuple[CounterChild, HistogramChild]] = {}

    def set_broker(self, broker: str) -> None:
        if broker != self.broker:
            self.broker = broker
            self.node = int(broker) if broker.isdigit() else -1
            self._children.clear()

    def _unmuted_start_ns(self, t_request_ns: int) -> int:
        """When the broker could start on a request, a quota mute aside: forwarded, its
        connection up, and the answer before it complete."""
        ready = self.upstream_ready_ns if self.upstream_ready_ns >= self.broker_free_ns else self.broker_free_ns
        return t_request_ns if t_request_ns >= ready else ready

    def forwarded_ns(self, t_request_ns: int) -> int:
        """When the broker could start on a request whose last byte was read at ``t_request_ns``:
        forwarded, its connection up, the answer before it complete, and no quota mute on."""
        start = self._unmuted_start_ns(t_request_ns)
        return self.unmuted_ns if self.unmuted_ns > start else start

    def muted_ns(self, t_request_ns: int, fwd_ns: int) -> int:
        """How much of a request's hold (``fwd_ns`` - ``t_request_ns``) was the broker's quota
        mute rather than the answer before it: throttle, not the proxy's or the broker's time."""
        return fwd_ns - self._unmuted_start_ns(t_request_ns)

    def throttled(self, throttle_ms: int, t_first_ns: int) -> None:
        """An answer asked for ``throttle_ms`` of quota delay. Since KIP-219 (Kafka 2.0) a broker
        sends a throttled answer at once, whatever its version, and then mutes the connection
        until the throttle, counted from when it made the answer, is over: a next request the
        client sends meanwhile (clients that throttle themselves do not) waits unread, out of
        the broker's ``totalTimeMs``."""
        if throttle_ms > 0:
            self.unmuted_ns = self.obs.model.broker_frame_ns(t_first_ns) + throttle_ms * 1_000_000

    def upstream_ready(self, t_ns: int, held_since_ns: int | None) -> None:
        """The broker connection is up at ``t_ns``; requests read since ``held_since_ns`` waited."""
        self.upstream_ready_ns = t_ns
        if held_since_ns is not None:
            self.obs.metrics.upstream_hold.observe((t_ns - held_since_ns) / 1e9)

    def handed_on(self, t_read_ns: int, t_written_ns: int) -> None:
        """Bytes read from the broker at ``t_read_ns`` went to the client socket at ``t_written_ns``."""
        self.obs.metrics.added.observe((t_written_ns - t_read_ns) / 1e9)

    def client_rtt(self, rtt_ns: int) -> None:
        self.rtt_ns = rtt_ns
        self.obs.fetch_metrics.client_rtt.labels(self.broker).observe(rtt_ns / 1e9)

    def _api(self, api_key: int) -> tuple[CounterChild, HistogramChild]:
        m, name = self.obs.metrics, api_name(api_key)
        c = self._children[api_key] = (m.requests.labels(name, self.broker),
                                       m.request_duration.labels(name, self.broker))
        return c

    def observe(self, events: list[Event], t_read_ns: int, t_written_ns: int) -> bool:
        """Samples and rows of ``events``, whose bytes were read at ``t_read_ns`` and handed
        on at ``t_written_ns`` (the proxy's own time is the difference). True when one of them
        is worth a log line (a decode failure, SASL pass-through)."""
        obs = self.obs
        notable = False
        for ev in events:
            if isinstance(ev, ResponseSeen):
                self._answered(ev.correlation_id, ev.api_key, ev.api_version, ev.client_id, ev.size_bytes,
                               ev.t_request_ns, ev.t_last_ns,
                               traced=obs.traces is not None and not observed(ev.api_key, ev.api_version))
                if ev.rewritten:
                    obs.metrics.rewrites.labels(api_name(ev.api_key)).inc()
            elif isinstance(ev, RequestSeen):
                (self._children.get(ev.api_key) or self._api(ev.api_key))[0].inc()
            elif isinstance(ev, FetchExchanged):
                self._fetch(ev, t_written_ns - t_read_ns)
            elif isinstance(ev, ProduceExchanged):
                self._produce(ev)
            elif isinstance(ev, ProduceSent):
                obs.model.on_produce_sent(ev.request, self.forwarded_ns(ev.t_request_ns))
            elif isinstance(ev, TopicIdsLearned):
                obs.model.cluster.learn_topic_ids(ev.topics)
                obs.model.cluster.learn_leaders(ev.leaders)
            elif isinstance(ev, DecodeFailed):
                obs.metrics.decode_errors.labels(api_name(ev.api_key)).inc()
                notable = True
            elif isinstance(ev, SaslPassthroughStarted):
                notable = True
        return notable

    def observe_records(self, raw: bytes, ids: list[str], events: list[Event], t_read_ns: int,
                        t_written_ns: int, notes: list[Event]) -> bool:
        """The routed road's read (``protocol/routed.py``): the core's records of the exchanges it
        settled alone, each with the samples and row its ``RequestSeen`` or ``ResponseSeen``
        would give, and the Python road's ``events`` of those routed to it, each exchange's
        observed where its record (flagged ``ROUTED``) stands, so answers are taken in the order
        they came. A request whose header the core could not read becomes the Python road's
        events for it, appended to ``notes`` for the log. True when one is worth a log line."""
        notable = False
        at, n = 0, len(events)
        for off in range(0, len(raw) - RECORD_BYTES + 1, RECORD_BYTES):
            kind, corr, key, ver, cid, size, flags, t_req, _first, t_last = record_at(raw, off)
            if flags & ROUTED:
                end = at
                terminal = RequestSeen if kind == KIND_REQUEST else ResponseSeen
                while end < n and not isinstance(events[end], terminal):
                    end += 1
                if self.observe(events[at:end + 1], t_read_ns, t_written_ns):
                    notable = True
                at = end + 1
            elif kind == KIND_REQUEST:
                if flags & HEADER_UNREADABLE:
                    unread: list[Event] = [
                        DecodeFailed(api_key=key, api_version=ver, direction="request", reason=UNREADABLE_HEADER),
                        RequestSeen(correlation_id=corr, api_key=key, api_version=ver, client_id=None,
                                    size_bytes=size, expects_response=True, t_ns=t_req)]
                    notes += unread
                    notable = self.observe(unread, t_read_ns, t_written_ns) or notable
                else:
                    (self._children.get(key) or self._api(key))[0].inc()
            else:
                if flags & ASKED:  # its request made no record: counted here
                    (self._children.get(key) or self._api(key))[0].inc()
                self._answered(corr, key, ver, ids[cid] if cid >= 0 else None, size, t_req, t_last,
                               traced=self.obs.traces is not None)
        if at < n and self.observe(events[at:], t_read_ns, t_written_ns):
            notable = True
        return notable

    def _answered(self, corr: int, key: int, ver: int, client_id: str | None, size: int, t_request_ns: int,
                  t_last_ns: int, *, traced: bool) -> None:
        """An answer's end (a ``ResponseSeen``, or the core's record of one it settled alone): its
        duration, the broker free from then, a round trip learned, and (``traced``: its exchange
        makes no row of its own, a fetch's or a produce's) its row, when traces are on."""
        obs = self.obs
        fwd = self.forwarded_ns(t_request_ns)
        # every answer ends with this, after its exchange's events; away from the broker it was
        # free a round trip before the answer's end came back (model.broker_frame_ns)
        self.broker_free_ns = obs.model.broker_frame_ns(t_last_ns)
        c = self._children.get(key) or self._api(key)
        c[1].observe((t_last_ns - fwd) / 1e9)
        if key in ROUND_TRIP_APIS and fwd == t_request_ns:  # not held: its own round trip
            obs.model.learn_round_trip(t_last_ns - fwd)
        if traced and obs.traces is not None:
            obs.traces.other(fwd + obs.wall_minus_mono_ns, obs.proxy_id, self.broker, self.conn_id, api_key=key,
                             api_version=ver, client_id=client_id, correlation_id=corr, response_bytes=size + 4,
                             total_ns=t_last_ns - fwd)

    def _held(self, t_request_ns: int) -> tuple[int, int]:
        """When an exchange whose request was read at ``t_request_ns`` went upstream, and how long
        it was held (by the proxy's connecting or the answer before it; a quota mute is not
        counted): the exchange is timed from then (``forwarded_at``)."""
        fwd = self.forwarded_ns(t_request_ns)
        held_ns = fwd - t_request_ns
        if held_ns:
            held_ns -= self.muted_ns(t_request_ns, fwd)
        return fwd, held_ns

    def _fetch(self, ev: FetchExchanged, proxy_ns: int) -> None:
        obs = self.obs
        t_read_ns = ev.t_request_ns
        fwd, held_ns = self._held(t_read_ns)
        unheld = fwd == t_read_ns
        if not unheld:
            ev = ev.forwarded_at(fwd)
        awaiting = obs.awaiting
        if awaiting.held:
            obs.date_awaiting(ev.t_request_ns)
        if awaiting.holds(ev, obs.model, self.node):
            awaiting.hold((self, ev, proxy_ns + held_ns, unheld, fwd, self.rtt_ns))
            return
        self.dated(ev, proxy_ns + held_ns, unheld, fwd, self.rtt_ns)

    def dated(self, ev: FetchExchanged, proxy_ns: int, unheld: bool, fwd: int, rtt_ns: int) -> None:
        """A fetch's sample and row, forwarded at ``fwd`` (``unheld``: as its request was read)."""
        obs = self.obs
        sample, replication = obs.model.on_fetch(ev, proxy_ns=proxy_ns, client_rtt_ns=rtt_ns, broker_node=self.node)
        if unheld and sample.outcome == Outcome.IMMEDIATE and sample.basis == "known_log_end":
            # answered at once, and its turn at the broker began at its forwarding: a round trip.
            # One pipelined behind another comes right after that one's answer (the broker read
            # it from its socket when it sent the answer before): a round trip short
            obs.model.learn_round_trip(sample.first_byte_ns)
        self.throttled(sample.throttle_ms, ev.t_first_ns)
        obs.fetch_metrics.observe_fetch(self.broker, sample, replication, ev.t_last_ns)
        if obs.traces is not None:
            obs.traces.fetch(fwd + obs.wall_minus_mono_ns, obs.proxy_id, self.broker, self.conn_id,
                             ev.correlation_id, sample, replication)

    def _produce(self, ev: ProduceExchanged) -> None:
        obs = self.obs
        fwd, _ = self._held(ev.t_request_ns)
        if fwd != ev.t_request_ns:
            ev = ev.forwarded_at(fwd)
        sample = obs.model.on_produce(ev)
        self.throttled(sample.throttle_ms, ev.t_first_ns)
        obs.fetch_metrics.observe_produce(self.broker, sample)
        if obs.traces is not None:
            obs.traces.produce(fwd + obs.wall_minus_mono_ns, obs.proxy_id, self.broker, self.conn_id,
                               ev.correlation_id, ev.response_bytes, sample)
