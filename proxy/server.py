"""The proxy: wires the registry, the listeners, discovery, the observation layer and the
trace writer together, hands each connection its narrow context, and runs the lifecycle
(start, drain on stop, reload on SIGHUP, health); its timer is ``heartbeat.py``'s.

The proxy only connects to the configured bootstrap brokers and to brokers they advertise.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import socket
from collections.abc import Callable

from ..metrics.observer import Observer
from ..metrics.prom import FetchMetrics, ProxyMetrics
from ..protocol.events import BrokerAddress
from ..protocol.rewrite import ResponseRewriter
from ..protocol.routed import enabled as routed_road_enabled
from . import clock
from .calibration import calibrator_for
from .config import RELOADABLE, Config, HostPort, format_hostport
from .conversation import CoreContext
from .discovery import Discovery
from .heartbeat import Heartbeat
from .listeners import NodeListeners, bind_listener
from .memory import libc_heap_bytes
from .policy import Limits
from .registry import BrokerRegistry
from .relayed import RelayRoad, relay_road
from .session import ClientSide, ConnContext, as_protocol
from .stamps import KERNEL, StampCounts, keep_stamping_on, stamp_source
from .throttled_log import ThrottledLog
from .tls import client_context, reread_server_tls, server_context, server_files
from .traces import TraceWriter

log = logging.getLogger("fetchlat.proxy")

class Proxy:
    def __init__(self, cfg: Config, metrics: ProxyMetrics) -> None:
        self.cfg = cfg
        self.metrics = metrics
        server_tls = server_context(cfg)  # raises ConfigError with the fix; TLS is done per session
        upstream_tls = client_context(cfg)
        self.registry = BrokerRegistry(cfg.sidecar_node)
        self.observer = Observer(metrics, FetchMetrics(metrics.registry),
                                 wall_minus_mono_ns=clock.read_wall_minus_mono_ns(),
                                 expiry_overshoot_ns=cfg.expiry_overshoot_ns,
                                 beside_broker=cfg.sidecar_node is not None)
        self.core = CoreContext(observer=self.observer, registry=self.registry, limits=Limits.from_config(cfg),
                                rewriter=ResponseRewriter(self.advertise), max_frame_bytes=cfg.max_frame_bytes,
                                wait_time_tag=cfg.wait_time_tag, routed=routed_road_enabled())
        self.sessions: set[ClientSide] = set()
        self.log_throttled = ThrottledLog(log)
        self._conn_ids = itertools.count(1)
        self.conn = ConnContext(core=self.core, sessions=self.sessions, next_conn_id=lambda: next(self._conn_ids),
                                learn=self.learn, upstream_failed=self.upstream_failed,
                                upstream_lost=self.upstream_lost, log_throttled=self.log_throttled,
                                waiting_upstream=[0], server_tls=server_tls, upstream_tls=upstream_tls,
                                upstream_server_hostname=cfg.upstream_server_hostname,
                                connect_timeout_s=cfg.connect_timeout_s,
                                kernel_stamps=stamp_source(cfg.stamps) == KERNEL)
        assert self.core.rewriter is not None
        upstream_files = (cfg.upstream_ca, cfg.upstream_cert, cfg.upstream_key) if upstream_tls is not None else None
        self.relay = relay_road(cfg.relay, cfg.sidecar, upstream_files, self.core.routed,
                                cfg.max_frame_bytes, self.core.rewriter, metrics,
                                server_tls=server_files(cfg) if server_tls is not None else None)
        self.conn.relay = self.relay
        counts, relay = self.conn.stamp_counts, self.relay
        metrics.stamps.counts = lambda: self._stamp_counts(counts, relay)
        metrics.heap_sizes.libc = libc_heap_bytes
        self._stamping = keep_stamping_on() if self.conn.kernel_stamps else None
        self.listeners = NodeListeners(cfg, self._node_factory,
                                       lambda: metrics.connection_errors.labels("listener_bind_failed").inc())
        model = self.observer.model  # what the sidecar knows of topics, leaders and partitions
        self.discovery = Discovery(cfg.upstreams, self.learn, tls=upstream_tls,
                                   server_hostname=cfg.upstream_server_hostname,
                                   connect_timeout_s=cfg.connect_timeout_s,
                                   refresh_s=lambda: self.cfg.metadata_refresh_s,
                                   max_frame_bytes=cfg.max_frame_bytes, log_throttled=self.log_throttled,
                                   wants_topics=lambda: model.cluster.wants_topics,
                                   holds_topics=lambda: model.partitions_held > 0,
                                   topic_refresh_s=lambda: self.cfg.topic_refresh_s,
                                   learn_every_topic=model.learn_every_topic)
        # the proxy learns its broker's expiry overshoot, unless it was set (proxy/calibration.py)
        self.calibrator = calibrator_for(cfg, model, self.registry, metrics, self.conn.kernel_stamps)
        metrics.expiry_overshoot.set_function(lambda: model.expiry_overshoot_ns / 1e9)
        metrics.learned.read = lambda: (model.first_byte_ns, model.round_trips.estimate())
        metrics.held.sizes = self._held
        self.traces: TraceWriter | None = None  # set by the CLI when --trace-dir is given
        self.servers: list[asyncio.Server] = []
        discovery = self.discovery
        self.observer.awaiting.can_ask = lambda: discovery.asks  # a fetch may wait for its answer (awaiting.py)
        self.heartbeat = Heartbeat(metrics, self.observer, self.discovery, self.sessions, self.relay)
        self._rr = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []
        self.bootstrap_port = 0
        metrics.waiting_upstream.set_function(lambda: self.conn.waiting_upstream[0])
        metrics.relayed.set_function(lambda: len(relay.conns) if relay is not None else 0)
        metrics.fetch_sessions.sessions = self._session_counts
        metrics.listeners.set_function(lambda: len(self.listeners.servers))
        metrics.brokers_known.set_function(lambda: len(self.registry.nodes))

    @staticmethod
    def _stamp_counts(counts: StampCounts, relay: RelayRoad | None) -> tuple[int, int]:
        """(kernel, clock): the reads of broker sockets by the source of their stamp, the event
        loop's and the core relay's (``fetchlat_stamps_total``)."""
        if relay is None:
            return counts.kernel, counts.clock
        kernel, clock_ = relay.relay.stamps()
        return counts.kernel + int(kernel), counts.clock + int(clock_)

    # routing -------------------------------------------------------------------------
    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        if self.cfg.sidecar:
            return host, port  # every broker advertises its own sidecar already
        return self.cfg.node_advertise(node_id)

    def _session_counts(self) -> list[tuple[str, dict[str, int], int]]:
        """Each broker's fetch-session mirror, by its broker label (``fetchlat_fetch_sessions_*``)."""
        return [(self.registry.label(hp, f"{hp[0]}:{hp[1]}"), m.counts(), len(m))
                for hp, m in list(self.core.fetch_sessions.items())]

    def learn(self, brokers: tuple[BrokerAddress, ...]) -> None:
        changes = self.registry.learn(brokers)
        if changes and self.relay is not None:
            self.relay.brokers_changed(self.registry.generation)  # before any answer naming them is repeated
        for change in changes:
            b, old = change.broker, change.moved_from
            if old is not None:
                log.info("broker %d moved from %s:%d to %s:%d", b.node_id, old.host, old.port, b.host, b.port)
            else:
                log.info("learned broker %d at %s:%d", b.node_id, b.host, b.port)
            if self.cfg.sidecar:
                self._check_sidecar_advertised(b)
            else:
                self.listeners.ensure(b.node_id)

    def _check_sidecar_advertised(self, b: BrokerAddress) -> None:
        if (b.host, b.port) in self.cfg.upstreams:
            log.warning("broker %d advertises %s:%d, the very address this sidecar forwards to: clients and "
                        "followers will bypass the sidecar; set the broker's advertised.listeners to the sidecar's "
                        "address", b.node_id, b.host, b.port)
        elif b.node_id == self.cfg.sidecar_node and b.port != self.bootstrap_port:
            log.info("broker %d advertises %s:%d while this sidecar listens on port %d (fine behind a port "
                     "mapping; otherwise check advertised.listeners)", b.node_id, b.host, b.port, self.bootstrap_port)

    def _node_factory(self, node_id: int) -> Callable[[], asyncio.Protocol]:
        label = str(node_id)

        def factory() -> asyncio.Protocol:
            return as_protocol(ClientSide(self.conn, label, lambda: [self.registry.address(node_id)], label))

        return factory

    def bootstrap_upstreams(self) -> list[HostPort]:
        ups = list(self.cfg.upstreams)
        k = next(self._rr) % len(ups)
        return ups[k:] + ups[:k]

    # upstream faults -----------------------------------------------------------------
    def upstream_failed(self) -> None:
        """A round of connection attempts to a broker failed: re-check metadata now (readiness
        drops while no broker answers)."""
        self.discovery.kick()

    def upstream_lost(self, sess: ClientSide, exc: Exception | None) -> None:
        self.metrics.upstream_lost.inc()
        self.log_throttled("upstream_lost", logging.WARNING,
                           "broker %s:%d closed the connection of client %s (%s); closing the client connection so "
                           "it reconnects", sess.upstream_addr[0], sess.upstream_addr[1], sess.peer,
                           exc or "end of stream")
        self.discovery.kick()

    def enable_traces(self, directory: str) -> None:
        proxy_id = self.cfg.proxy_id or f"{socket.gethostname()}:{self.cfg.listen[1]}"
        writer = self.traces = TraceWriter(directory, proxy_id=proxy_id, rotate_s=self.cfg.trace_rotate_s)
        writer.start()
        self.heartbeat.traces = writer
        self.observer.proxy_id = proxy_id
        self.observer.traces = writer.columns
        self.metrics.trace_rows.dropped = lambda: writer.dropped
        self.metrics.trace_rows.written = lambda: writer.written

    # lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        sock = bind_listener(self.cfg.listen)
        self.bootstrap_port = sock.getsockname()[1]
        name = "sidecar" if self.cfg.sidecar else "bootstrap"
        server = await loop.create_server(
            lambda: as_protocol(ClientSide(self.conn, name, self.bootstrap_upstreams, name)), sock=sock
        )
        self.servers.append(server)
        log.info("%s listener on %s -> %s%s", name, format_hostport(self.cfg.listen),
                 ", ".join(format_hostport(u) for u in self.cfg.upstreams),
                 f" (fronting broker {self.cfg.sidecar_node}; addresses pass unchanged)" if self.cfg.sidecar else "")
        if self.relay is not None:
            self.relay.start(loop)
            log.info("relay: %s: the native core's thread carries each connection after its first answer%s%s",
                     self.cfg.relay, "; it holds each TLS client's session from its first byte"
                     if self.relay.fronts_tls else "",
                     "; it holds each TLS broker connection's session from its first byte"
                     if self.relay.backs_tls else "")
        self.heartbeat.start(loop, probe=self.cfg.loop_probe)
        self.metrics.loop_tasks.set_function(lambda: len(asyncio.all_tasks(loop)))  # read at scrape time
        self._tasks.append(loop.create_task(self.discovery.run()))
        if self.calibrator is not None and not self.cfg.upstream_tls:  # probes speak plaintext only
            self._tasks.append(loop.create_task(self.calibrator.run()))

    async def stop(self, drain_s: float = 0.0) -> None:
        """Stop accepting; let requests already sent finish (up to ``drain_s``); close every
        connection; flush and close the trace files."""
        for srv in self.servers:
            srv.close()
        self.listeners.close()
        deadline = clock.now_ns() + int(drain_s * 1e9)
        while clock.now_ns() < deadline and any(sess.conv.in_flight for sess in self.sessions):
            await asyncio.sleep(0.02)
        left = sum(sess.conv.in_flight for sess in self.sessions)
        if left:
            log.warning("shutting down with %d request(s) still in flight after %.1f s", left, drain_s)
        for t in self._tasks:
            t.cancel()
        self.heartbeat.stop()
        for sess in list(self.sessions):
            sess.close()
        if self.relay is not None:
            self.relay.close()  # the connections it carries close with it
        if self._stamping is not None:
            self._stamping.close()
        self.observer.date_awaiting(clock.now_ns(), everything=True)  # no answer of the broker's comes now
        if self.traces is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.traces.close)

    def reload(self, new: Config) -> None:
        """Apply what is safe to change while running; say what needs a restart."""
        differ = [f.name for f in dataclasses.fields(new) if getattr(new, f.name) != getattr(self.cfg, f.name)]
        changed = {k: getattr(new, k) for k in differ if k in RELOADABLE}
        needs_restart = sorted(k for k in differ if k not in RELOADABLE)  # the rest (TLS files: re-read)
        self.cfg = dataclasses.replace(self.cfg, **changed)
        self.core = dataclasses.replace(self.core, limits=Limits.from_config(self.cfg))
        self.conn.core = self.core  # new connections take the new limits, open ones too:
        for sess in self.sessions:
            sess.conv.policy.limits = self.core.limits
        logging.getLogger("fetchlat").setLevel(self.cfg.log_level)
        log.info("reloaded: %s", ", ".join(f"{k}={v}" for k, v in changed.items()) or "nothing changed")
        if needs_restart:
            log.warning("not reloaded (needs a restart): %s", ", ".join(needs_restart))
        self._reread_tls()

    def _reread_tls(self) -> None:
        """The listener's TLS files read again (``tls.reread_server_tls``): new connections on
        either road get them, open ones keep their session."""
        relay = self.relay
        if self.conn.server_tls is not None:
            ctx = reread_server_tls(self.cfg, relay.relay.tls_config if relay is not None and relay.fronts_tls
                                    else None)
            self.conn.server_tls = ctx or self.conn.server_tls

    def _held(self) -> dict[str, int]:
        """The sizes ``fetchlat_held_entries`` exports (read at scrape time, another thread: each
        ``len`` is one read of a size the loop keeps)."""
        model = self.observer.model
        return {"connections": len(self.sessions), "partitions": model.partitions_held,
                "appends": model.appends_held,
                "topics": len(model.cluster.topic_names), "leaders": len(model.cluster.leaders),
                "brokers": len(self.registry.nodes)}  # fetch sessions: fetchlat_fetch_sessions_mirrored

    @property
    def metadata_ok(self) -> bool:
        return self.discovery.metadata_ok

    def health(self) -> dict[str, object]:
        lag_s = self.heartbeat.age_s()
        live = lag_s < 5.0
        ready = live and self.metadata_ok and self.listeners.all_serving
        return {
            "live": live,
            "ready": ready,
            "loop_heartbeat_age_s": round(lag_s, 3),
            "brokers": {str(k): f"{v.host}:{v.port}" for k, v in sorted(self.registry.nodes.items())},
            "listeners": {str(k): format_hostport(self.cfg.node_advertise(k)) for k in sorted(self.listeners.servers)},
            "connections": len(self.sessions),
            "relayed": len(self.relay.conns) if self.relay is not None else 0,
        }
