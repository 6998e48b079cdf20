"""Prometheus adapter: the pinned metric families (docs/operations.md), on a registry of their own.

Names and labels are a pinned interface: extend, never rename. Must never: compute latency
(that is the model's job) or read clocks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Gauge, GCCollector, ProcessCollector, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .fast import FastCounter as Counter
from .fast import FastHistogram as Histogram
from .fast import HistogramChild
from .model import FetchSample, ProduceSample, ReplicationSample

# 50 µs to 60 s, eight buckets below 1 ms (KIP-403: sub-millisecond precision).
LATENCY_BUCKETS: Final[tuple[float, ...]] = (
    0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.0025, 0.005, 0.0075,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry | None = None, *, version: str = "", hot_path: str = "python",
                 stamps: str = "clock") -> None:
        disable_created_metrics()  # the *_created series double the scrape for no use here
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter("fetchlat_requests", "Requests seen", ["api", "broker"], registry=r)
        self.request_duration = Histogram(
            "fetchlat_request_duration_seconds",
            "Request forwarded upstream -> response fully received",
            ["api", "broker"], buckets=LATENCY_BUCKETS, registry=r,
        )
        self.decode_errors = Counter(
            "fetchlat_decode_errors", "Frames that could not be decoded (forwarded anyway)", ["api"], registry=r
        )
        self.connections = Counter(
            "fetchlat_connections", "Client connections accepted", ["listener"], registry=r
        )
        self.connections_active = Gauge(
            "fetchlat_connections_active", "Client connections open", ["listener"], registry=r
        )
        self.connection_errors = Counter(
            "fetchlat_connection_errors", "Connections closed by the proxy, by reason", ["reason"], registry=r
        )
        self.bytes = Counter(
            "fetchlat_bytes", "Bytes forwarded", ["direction", "listener"], registry=r
        )
        self.rewrites = Counter(
            "fetchlat_rewritten_responses", "Responses rewritten (addresses, ApiVersions caps)", ["api"], registry=r
        )
        self.listeners = Gauge("fetchlat_listeners", "Per-broker listeners open", registry=r)
        self.brokers_known = Gauge("fetchlat_brokers_known", "Upstream brokers learned from metadata", registry=r)
        self.waiting_upstream = Gauge(
            "fetchlat_connections_waiting_upstream",
            "Client connections whose requests are held while their broker is unreachable", registry=r,
        )
        self.relayed = Gauge(
            "fetchlat_connections_relayed",
            "Client connections carried by the native core's relay now (relay: native), of fetchlat_connections_active",
            registry=r,
        )
        self.relay_queue_items = Gauge(
            "fetchlat_relay_queue_items",
            "Items the native core's relay has queued for the event loop and the loop has not taken yet", registry=r,
        )
        self.relay_queue_bytes = Gauge(
            "fetchlat_relay_queue_bytes",
            "Bytes for the event loop in the relay's queue (of fetchlat_relay_queue_items)", registry=r,
        )
        self.relay_held_bytes = Gauge(
            "fetchlat_relay_held_bytes",
            "Bytes the native core's relay holds for its connections (waiting for a socket, held whole, gathered)",
            registry=r,
        )
        self.relay_queue_full = Counter(
            "fetchlat_relay_queue_full",
            "Times the relay's queue reached its bound and the relay stopped reading until the event loop drained it",
            registry=r,
        )
        self.handovers = Counter(
            "fetchlat_relay_handovers", "Client connections handed to the native core's relay (relay: native)",
            registry=r,
        )
        self.upstream_failures = Counter(
            "fetchlat_upstream_connect_failures", "Rounds of failed connection attempts to a broker", registry=r
        )
        self.upstream_lost = Counter(
            "fetchlat_upstream_disconnects",
            "Broker connections closed by the broker side (restart, crash) while the client was connected",
            registry=r,
        )
        self.upstream_hold = Histogram(
            "fetchlat_upstream_hold_seconds",
            "Client connections whose first requests were held while their broker connection came up: how long "
            "(counted in e2e, not in request or fetch durations)", buckets=LATENCY_BUCKETS, registry=r,
        )
        self.build_info = Gauge("fetchlat_build_info", "1, labelled with the version, the build of the hot path "
                                "that runs (native, compiled or python) and where responses' receive stamps come from "
                                "(kernel or clock)", ["version", "hot_path", "stamps"], registry=r)
        self.build_info.labels(version, hot_path, stamps).set(1)
        self.stamps = StampCounters()  # fetchlat_stamps_total{source}
        r.register(self.stamps)
        self.held = HeldEntries()  # fetchlat_held_entries{structure}
        r.register(self.held)
        self.trace_rows = TraceRowCounters()  # fetchlat_trace_rows_{written,dropped}_total
        self.fetch_sessions = FetchSessionCounters()  # fetchlat_fetch_sessions_total, _mirrored
        r.register(self.trace_rows)
        r.register(self.fetch_sessions)
        self.loop_lag = Histogram(
            "fetchlat_event_loop_lag_seconds",
            "How late the event loop ran a timer (sampled once a second): time every connection on it waited",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.loop_late_ticks = Counter(
            "fetchlat_event_loop_late_ticks",
            "Ticks 5 ms late or more, by what the loop's thread did over the next 5 ms: running (a callback), "
            "waiting_for_cpu, in_poll (asleep past its timer), blocked (the interpreter, a lock, the disk); "
            "counted with loop_probe on", ["loop"], registry=r)
        self.expiry_overshoot = Gauge("fetchlat_broker_expiry_overshoot_seconds",
                                      "How long past max wait the broker lets an expired fetch go, as the model "
                                      "uses it: learned by the sidecar's probes, set (--expiry-overshoot-ms), or "
                                      "the default", registry=r)
        self.calibration = CalibrationCounters()  # fetchlat_calibration_probes_total{result}
        r.register(self.calibration)
        self.learned = BrokerLearned()  # the model's other learned figures
        r.register(self.learned)
        self.loop_tasks = Gauge("fetchlat_event_loop_tasks", "asyncio tasks alive on the proxy's event loop "
                                "(flat in a healthy proxy: one per listener and discovery, none per request)",
                                registry=r)
        self.added = Histogram(
            "fetchlat_proxy_added_seconds",
            "The proxy's own time per response chunk: read from the broker -> handed to the client socket",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.heap_sizes = HeapSizes()  # whose memory an RSS rise is (proxy/memory.py sets .libc)
        if registry is None:  # process_cpu_seconds_total, process_resident_memory_bytes, open fds;
            ProcessCollector(registry=r)  # and python_gc_*: the collector's runs per generation
            GCCollector(registry=r)
            r.register(self.heap_sizes)


class TraceRowCounters(Collector):
    """Counters owned by the trace writer thread, read at scrape time (0 without traces)."""

    def __init__(self) -> None:
        self.written: Callable[[], int] = lambda: 0
        self.dropped: Callable[[], int] = lambda: 0

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily("fetchlat_trace_rows_written", "Trace rows written", value=self.written())
        yield CounterMetricFamily("fetchlat_trace_rows_dropped", "Trace rows dropped (queue full or write error)",
                                  value=self.dropped())


class HeldEntries(Collector):
    """How many entries the proxy's bounded structures hold, read at scrape time: ``sizes()``
    gives them by structure (connections, partitions the model follows, topics and leaders it
    knows, brokers; fetch sessions are ``fetchlat_fetch_sessions_mirrored``'s). Each has a bound
    or goes with what it belongs to; one that keeps rising under steady traffic is filling
    toward its bound (docs/reliability.md)."""

    def __init__(self) -> None:
        self.sizes: Callable[[], dict[str, int]] = dict

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("fetchlat_held_entries", "Entries held by the proxy's bounded structures",
                                   labels=["structure"])
        for name, n in sorted(self.sizes().items()):
            family.add_metric([name], n)
        yield family


class HeapSizes(Collector):
    """What the interpreter, Arrow and glibc's allocator hold, read at scrape time (any thread may
    read them: each allocator keeps its own count): RSS rising while all stay flat is an allocator
    keeping pages, not something held (``proxy/memory.py``). ``libc()`` gives glibc's (in use,
    free but kept) bytes, or None where the libc cannot say."""

    def __init__(self, libc: Callable[[], tuple[int, int] | None] = lambda: None) -> None:
        self.libc = libc

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("fetchlat_python_allocated_blocks", "Memory blocks the interpreter holds (live "
                                "objects and their buffers): flat while RSS rises is the allocator keeping pages",
                                value=sys.getallocatedblocks())
        arrow = sys.modules.get("pyarrow")  # never loaded here: only when traces are on
        held = arrow.default_memory_pool().bytes_allocated() if arrow is not None else 0
        yield GaugeMetricFamily("fetchlat_arrow_allocated_bytes", "Bytes Arrow's memory pool holds (the trace "
                                "writer's tables)", value=held)
        libc = self.libc()
        if libc is not None:
            family = GaugeMetricFamily("fetchlat_libc_heap_bytes", "Bytes glibc's allocator holds over all its "
                                       "arenas: in use, and free but kept by it (the once-a-minute trim gives their "
                                       "pages back, so not all of what is free is resident)",
                                       labels=["state"])
            family.add_metric(["in_use"], libc[0])
            family.add_metric(["free"], libc[1])
            yield family


class StampCounters(Collector):
    """Reads of broker sockets by where their receive stamp came from, counted by the I/O layer
    (``proxy/stamps.py``) and read at scrape time: ``counts()`` gives (kernel, clock)."""

    def __init__(self) -> None:
        self.counts: Callable[[], tuple[int, int]] = lambda: (0, 0)

    def collect(self) -> Iterator[CounterMetricFamily]:
        kernel, clock = self.counts()
        family = CounterMetricFamily("fetchlat_stamps", "Reads of broker sockets by the source of their receive "
                                     "stamp: kernel (the packet's arrival, SO_TIMESTAMPNS) or clock (read when the "
                                     "event loop got to it)", labels=["source"])
        family.add_metric(["kernel"], kernel)
        family.add_metric(["clock"], clock)
        yield family


class BrokerLearned(Collector):
    """What the latency model learned of its brokers besides the expiry overshoot, read at scrape
    time: ``read()`` gives (an immediate answer's first byte, the network round trip or -1 until
    enough answers were seen), in ns (``metrics/model.py``: ``learn_first_byte``, ``RoundTrips``)."""

    def __init__(self) -> None:
        self.read: Callable[[], tuple[int, int]] = lambda: (-1, -1)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        first_byte, round_trip = self.read()
        if first_byte >= 0:
            yield GaugeMetricFamily("fetchlat_broker_first_byte_seconds", "How long the broker takes to start "
                                    "answering a fetch that does not park, as the model uses it: learned (smoothed) "
                                    "from fetches answered at once and the sidecar's probes; a follower's data is "
                                    "dated by its answer's first byte less this", value=first_byte / 1e9)
        if round_trip >= 0:
            yield GaugeMetricFamily("fetchlat_broker_round_trip_seconds", "The network round trip to the brokers "
                                    "the model learned (the shortest recent answer of requests a broker answers at "
                                    "once, with nothing before them on their connection); away from its brokers a "
                                    "proxy takes it off a produce's answer to date the append. Absent until enough "
                                    "answers were seen", value=round_trip / 1e9)


class CalibrationCounters(Collector):
    """The sidecar's own probe fetches (``proxy/calibration.py``) by what came of them, read at
    scrape time: ``counts()`` gives {result: count}."""

    def __init__(self) -> None:
        self.counts: Callable[[], dict[str, int]] = dict

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("fetchlat_calibration_probes", "The sidecar's own probe fetch pairs to its "
                                     "broker, by result: expired (a sample of the expiry overshoot), woken (a "
                                     "record arrived: no sample), stalled (too late to be the timer), failed",
                                     labels=["result"])
        for result, n in sorted(self.counts().items()):
            family.add_metric([result], n)
        yield family


class FetchSessionCounters(Collector):
    """The fetch-session mirrors' counts (``protocol/sessions.py``), read at scrape time:
    ``sessions()`` gives (broker, counts by event, sessions mirrored) per broker."""

    def __init__(self) -> None:
        self.sessions: Callable[[], Iterable[tuple[str, dict[str, int], int]]] = lambda: ()

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        events = CounterMetricFamily("fetchlat_fetch_sessions", "Fetch sessions (KIP-227) the mirror met, by event",
                                     labels=["broker", "event"])
        live = GaugeMetricFamily("fetchlat_fetch_sessions_mirrored", "Fetch sessions mirrored now", labels=["broker"])
        totals: dict[str, tuple[dict[str, int], int]] = {}
        for broker, counts, n in self.sessions():  # brokers reached at several addresses add up
            old, m = totals.get(broker, ({}, 0))
            totals[broker] = ({k: old.get(k, 0) + v for k, v in counts.items()}, m + n)
        for broker, (counts, n) in sorted(totals.items()):
            for event, value in counts.items():
                events.add_metric([broker, event], value)
            live.add_metric([broker], n)
        yield events
        yield live


OTHER: Final = "other"
MAX_WINDOW_NS: Final = 60 * 1_000_000_000


class WindowedMax:
    """The largest value seen per label tuple over the last one to two windows (the window
    rotates when an observation arrives after it ended). Time is passed in, never read."""

    def __init__(self, window_ns: int) -> None:
        self.window_ns = window_ns
        self.start_ns: int | None = None
        self.current: dict[tuple[str, ...], float] = {}
        self.previous: dict[tuple[str, ...], float] = {}

    def observe(self, key: tuple[str, ...], value: float, now_ns: int) -> None:
        if self.start_ns is None:
            self.start_ns = now_ns
        elif now_ns - self.start_ns >= self.window_ns:
            expired = now_ns - self.start_ns >= 2 * self.window_ns
            self.previous = {} if expired else self.current
            self.current = {}
            self.start_ns = now_ns
        if value > self.current.get(key, float("-inf")):
            self.current[key] = value

    def snapshot(self) -> dict[tuple[str, ...], float]:
        out = dict(self.previous)
        for k, v in dict(self.current).items():
            if v > out.get(k, float("-inf")):
                out[k] = v
        return out


class _MaxCollector(Collector):
    def __init__(self, name: str, doc: str, labels: list[str], source: WindowedMax) -> None:
        self.name, self.doc, self.labels, self.source = name, doc, labels, source

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily(self.name, self.doc, labels=self.labels)
        for key, value in sorted(self.source.snapshot().items()):
            g.add_metric(list(key), value)
        yield g


class BoundedLabel:
    """Caps a label's values: the first ``cap`` distinct values keep their name, the rest
    share ``other``, so a client inventing topic or client ids cannot explode the series."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._kept: set[str] = set()

    def __call__(self, value: str | None) -> str:
        v = value or ""
        if v in self._kept:
            return v
        if len(self._kept) < self.cap:
            self._kept.add(v)
            return v
        return OTHER


CHILD_CACHE_CAP: Final = 10_000


class _KindChildren:
    """A fetch's series that only the broker and the kind label: resolved once per pair, not
    per fetch (the children themselves live in the families; this only holds references)."""

    def __init__(self, m: FetchMetrics, broker: str, k: str) -> None:
        self.m, self.broker, self.k = m, broker, k
        # every fetch observes these (two exist at 0 from the first fetch, as before)
        self.total = m.total.labels(broker, k)
        self.first_byte = m.first_byte.labels(broker, k)
        self.transfer = m.transfer.labels(broker, k)
        self.with_records = m.with_records.labels(broker, k)
        self.throttled = m.throttled.labels(broker, k)
        # these series appear with their first observation, as before: resolved on first use
        self._local: HistogramChild | None = None
        self._e2e: HistogramChild | None = None
        self._wake_lag: HistogramChild | None = None
        self._wait: dict[str, HistogramChild] = {}

    def local(self) -> HistogramChild:
        c = self._local
        if c is None:
            c = self._local = self.m.local.labels(self.broker, self.k)
        return c

    def e2e(self) -> HistogramChild:
        c = self._e2e
        if c is None:
            c = self._e2e = self.m.e2e.labels(self.broker, self.k)
        return c

    def wake_lag(self) -> HistogramChild:
        c = self._wake_lag
        if c is None:
            c = self._wake_lag = self.m.wake_lag.labels(self.broker, self.k)
        return c

    def wait(self, source: str) -> HistogramChild:
        c = self._wait.get(source)
        if c is None:
            c = self._wait[source] = self.m.wait.labels(self.broker, self.k, source)
        return c


class _ClientChildren:
    """The per-client-id series of one (broker, kind, client id)."""

    def __init__(self, m: FetchMetrics, broker: str, k: str, client: str) -> None:
        self.fetches = m.client_fetches.labels(broker, k, client)
        self.total = m.client_time.labels(broker, k, client, "total")
        self.wait = m.client_time.labels(broker, k, client, "wait")
        self.local = m.client_time.labels(broker, k, client, "local")


class FetchMetrics:
    """The latency model's samples as Prometheus families (the pinned names of docs/operations.md, plus
    extensions). All durations in seconds."""

    def __init__(self, registry: CollectorRegistry, *, topic_cap: int = 100, client_cap: int = 100) -> None:
        r, buckets = registry, LATENCY_BUCKETS
        h = lambda name, doc, labels: Histogram(name, doc, labels, buckets=buckets, registry=r)
        self.total = h("fetchlat_fetch_total_seconds", "Fetch duration including purgatory (what other tools report)",
                       ["broker", "kind"])
        self.wait = h("fetchlat_fetch_wait_seconds", "Purgatory wait of a fetch", ["broker", "kind", "source"])
        self.local = h("fetchlat_fetch_local_seconds", "TotalLocalTime = total - wait", ["broker", "kind"])
        self.e2e = h("fetchlat_fetch_e2e_seconds", "Real end-to-end: local + proxy time + client-leg RTT",
                     ["broker", "kind"])
        self.fetches = Counter("fetchlat_fetches", "Fetches by outcome", ["broker", "kind", "outcome"], registry=r)
        self.record_latency = h("fetchlat_record_latency_seconds",
                                "KIP-489: response time minus the newest record timestamp, per partition",
                                ["broker", "topic"])
        self.client_record_latency = h("fetchlat_client_record_latency_seconds",
                                       "KIP-489 record latency per consumer client id", ["broker", "client"])
        self.wake_lag = h("fetchlat_fetch_wake_lag_seconds",
                          "Woken fetches: data arrival -> first response byte (Kafka wakes on append; "
                          "some brokers re-check on a timer)", ["broker", "kind"])
        self.first_byte = h("fetchlat_fetch_first_byte_seconds", "Fetch forwarded -> first response byte",
                            ["broker", "kind"])
        self.transfer = h("fetchlat_fetch_transfer_seconds", "First -> last response byte", ["broker", "kind"])
        self.throttled = Counter("fetchlat_fetch_throttled", "Fetches the broker throttled (kept out of local/e2e)",
                                 ["broker", "kind"], registry=r)
        self.throttle = h("fetchlat_fetch_throttle_seconds", "Throttle time the broker asked for",
                          ["broker", "kind"])
        self.low_confidence = Counter("fetchlat_fetch_low_confidence", "Fetches whose wait is a low-confidence guess",
                                      ["broker", "kind", "basis"], registry=r)
        self.produce = h("fetchlat_produce_seconds", "Produce request forwarded -> response", ["broker", "acks"])
        self.produce_records = Counter("fetchlat_produced_records", "Records produced (accepted by the broker)",
                                       ["broker", "acks"], registry=r)
        self.produce_throttle = h("fetchlat_produce_throttle_seconds",
                                  "Throttle time the broker asked of a producer (quota), when it asked",
                                  ["broker", "acks"])
        self.replication = h("fetchlat_replication_seconds",
                             "Produce append at the leader -> follower fetch confirming it", ["broker", "follower"])
        self.client_rtt = h("fetchlat_client_rtt_seconds", "Client-leg TCP round-trip time (kernel TCP_INFO)",
                            ["broker"])
        self.client_time = Counter("fetchlat_client_fetch_seconds",
                                   "Per client id: summed fetch time by part (total, wait, local); divide by "
                                   "fetchlat_client_fetches_total for averages", ["broker", "kind", "client", "part"],
                                   registry=r)
        self.client_fetches = Counter("fetchlat_client_fetches", "Fetches per client id (throttled ones excluded)",
                                      ["broker", "kind", "client"], registry=r)
        self.with_records = Counter("fetchlat_fetches_with_records",
                                    "Fetches that returned records (long-poll efficiency: / fetchlat_fetches_total)",
                                    ["broker", "kind"], registry=r)
        self.follower_local = h("fetchlat_follower_fetch_local_seconds",
                                "True local fetch time per follower -> leader pair (broker = the leader)",
                                ["broker", "follower"])
        self.topic_label = BoundedLabel(topic_cap)
        self._by_kind: dict[tuple[str, str], _KindChildren] = {}
        # by (broker, kind, client label): past the label cap every new client id shares "other",
        # so this holds at most brokers x kinds x (cap + 1) entries, whatever the churn of ids
        self._by_client: dict[tuple[str, str, str], _ClientChildren] = {}
        self.client_label = BoundedLabel(client_cap)
        self.follower_label = BoundedLabel(client_cap)  # replica ids come off the wire: cap them too
        self.record_latency_max = WindowedMax(MAX_WINDOW_NS)
        self.client_record_latency_max = WindowedMax(MAX_WINDOW_NS)
        r.register(_MaxCollector("fetchlat_record_latency_max_seconds",
                                 "Largest KIP-489 record latency per topic over the last 60-120 s",
                                 ["broker", "topic"], self.record_latency_max))
        r.register(_MaxCollector("fetchlat_client_record_latency_max_seconds",
                                 "Largest KIP-489 record latency per consumer client id over the last 60-120 s",
                                 ["broker", "client"], self.client_record_latency_max))

    def _kind_children(self, broker: str, k: str) -> _KindChildren:
        key = (broker, k)
        c = self._by_kind.get(key)
        if c is None:
            c = self._by_kind[key] = _KindChildren(self, broker, k)
        return c

    def _client_children(self, broker: str, k: str, client_id: str | None) -> _ClientChildren:
        label = self.client_label(client_id)
        key = (broker, k, label)
        c = self._by_client.get(key)
        if c is None:
            if len(self._by_client) >= CHILD_CACHE_CAP:
                self._by_client.clear()  # brokers learned without end (a bound all the same): rebuilt on use
            c = self._by_client[key] = _ClientChildren(self, broker, k, label)
        return c

    def observe_fetch(self, broker: str, s: FetchSample, replication: list[ReplicationSample], now_ns: int) -> None:
        k = s.kind
        c = self._kind_children(broker, k)
        self.fetches.labels(broker, k, s.outcome).inc()
        if s.records:
            c.with_records.inc()  # exists (at 0) from the first fetch
        c.total.observe(s.total_ns / 1e9)
        c.first_byte.observe(s.first_byte_ns / 1e9)
        c.transfer.observe(s.transfer_ns / 1e9)
        if s.throttled:
            c.throttled.inc()
            self.throttle.labels(broker, k).observe(s.throttle_ms / 1e3)
        else:
            c.wait(s.wait_source).observe(s.wait_ns / 1e9)
            c.local().observe(s.local_ns / 1e9)
            c.e2e().observe(s.e2e_ns / 1e9)
            if k == "follower":
                self.follower_local.labels(broker, self.follower_label(str(s.replica_id))).observe(s.local_ns / 1e9)
            cc = self._client_children(broker, k, s.client_id)
            cc.fetches.inc()
            cc.total.inc(s.total_ns / 1e9)
            cc.wait.inc(s.wait_ns / 1e9)
            cc.local.inc(s.local_ns / 1e9)
        if not s.confident:
            self.low_confidence.labels(broker, k, s.basis).inc()
        if s.wake_lag_ns is not None:
            c.wake_lag().observe(max(0, s.wake_lag_ns) / 1e9)
        if k != "follower" and s.partitions:  # consumers' and share consumers' records
            client = self.client_label(s.client_id)
            for p in s.partitions:
                if p.record_latency_ns is not None:
                    lat = max(0, p.record_latency_ns) / 1e9
                    topic = self.topic_label(p.topic)
                    self.record_latency.labels(broker, topic).observe(lat)
                    self.client_record_latency.labels(broker, client).observe(lat)
                    self.record_latency_max.observe((broker, topic), lat, now_ns)
                    self.client_record_latency_max.observe((broker, client), lat, now_ns)
        for r in replication:
            self.replication.labels(broker, self.follower_label(str(r.follower))).observe(max(0, r.latency_ns) / 1e9)

    def observe_produce(self, broker: str, s: ProduceSample) -> None:
        acks = str(s.acks)
        self.produce_records.labels(broker, acks).inc(s.accepted)
        if s.total_ns is not None:
            self.produce.labels(broker, acks).observe(s.total_ns / 1e9)
        if s.throttle_ms > 0:
            self.produce_throttle.labels(broker, acks).observe(s.throttle_ms / 1e3)
