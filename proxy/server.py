"""The proxy: a bootstrap listener, one listener per upstream broker, and the registry of
brokers learned from metadata (ours at start-up and every response clients receive).

Listeners are bound synchronously when a broker is learned, before the response naming it
reaches the client, so a client never sees an address nobody listens on. The proxy only
connects to the configured bootstrap brokers and to brokers they advertise.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import socket
import ssl
import struct

from fetchlat.metrics.model import FetchSample, LatencyModel, ProduceSample, ReplicationSample
from fetchlat.metrics.prom import FetchMetrics, ProxyMetrics
from fetchlat.protocol import apis
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.events import BrokerAddress, FetchExchanged, ProduceExchanged
from fetchlat.protocol.primitives import encode_string
from fetchlat.protocol.rewrite import ResponseRewriter
from fetchlat.protocol.schema import load
from fetchlat.protocol.walker import walk

from . import clock
from .config import Config, HostPort, format_hostport
from .session import ClientSide
from .tls import client_context, server_context
from .traces import TraceWriter

log = logging.getLogger("fetchlat.proxy")

METADATA_VERSION = 1  # our own broker discovery: Topics=[] asks for brokers only


def bind_listener(addr: HostPort) -> socket.socket:
    host, port = addr
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(sockaddr)
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class Proxy:
    def __init__(self, cfg: Config, metrics: ProxyMetrics) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.server_tls = server_context(cfg)  # raises ConfigError with the fix; TLS is done per session
        self.upstream_tls = client_context(cfg)
        self.nodes: dict[int, BrokerAddress] = {}
        self.node_servers: dict[int, asyncio.Server] = {}
        self.node_sockets: dict[int, socket.socket] = {}
        self.servers: list[asyncio.Server] = []
        self.sessions: set[ClientSide] = set()
        self.rewriter = ResponseRewriter(self.advertise)
        self.model = LatencyModel(wall_minus_mono_ns=clock.wall_ns() - clock.now_ns())
        self.fetch_metrics = FetchMetrics(metrics.registry)
        self.traces: TraceWriter | None = None  # set by the CLI when --trace-dir is given
        self._conn_ids = itertools.count(1)
        self.metadata_ok = False
        self.last_beat_ns = clock.now_ns()
        self._rr = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []
        self.bootstrap_port = 0
        self._had_metadata = False
        self._passive = False  # the upstream requires authentication before Metadata
        self.waiting_upstream = 0  # client connections holding requests for an unreachable broker
        metrics.waiting_upstream.set_function(lambda: self.waiting_upstream)
        self._metadata_kick = asyncio.Event()
        self._log_last: dict[str, tuple[float, int]] = {}  # key -> (last logged monotonic s, suppressed)

    # routing -------------------------------------------------------------------------
    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        if self.cfg.sidecar:
            return host, port  # every broker advertises its own sidecar already
        return self.cfg.node_advertise(node_id)

    def broker_label(self, upstream: HostPort, default: str) -> str:
        if self.cfg.sidecar_node is not None:
            return str(self.cfg.sidecar_node)
        for b in self.nodes.values():
            if (b.host, b.port) == upstream:
                return str(b.node_id)
        return default

    def learn(self, brokers: tuple[BrokerAddress, ...]) -> None:
        for b in brokers:
            old = self.nodes.get(b.node_id)
            if old is not None and (old.host, old.port) == (b.host, b.port):
                continue
            if old is not None:
                log.info("broker %d moved from %s:%d to %s:%d", b.node_id, old.host, old.port, b.host, b.port)
            else:
                log.info("learned broker %d at %s:%d", b.node_id, b.host, b.port)
            self.nodes[b.node_id] = b
            if self.cfg.sidecar:
                self._check_sidecar_advertised(b)
            else:
                self._ensure_listener(b.node_id)
        self.metrics.brokers_known.set(len(self.nodes))

    def _check_sidecar_advertised(self, b: BrokerAddress) -> None:
        if (b.host, b.port) in self.cfg.upstreams:
            log.warning("broker %d advertises %s:%d, the very address this sidecar forwards to: clients and "
                        "followers will bypass the sidecar; set the broker's advertised.listeners to the sidecar's "
                        "address", b.node_id, b.host, b.port)
        elif b.node_id == self.cfg.sidecar_node and b.port != self.bootstrap_port:
            log.info("broker %d advertises %s:%d while this sidecar listens on port %d (fine behind a port "
                     "mapping; otherwise check advertised.listeners)", b.node_id, b.host, b.port, self.bootstrap_port)

    def _ensure_listener(self, node_id: int) -> None:
        if node_id in self.node_sockets:
            return
        addr = self.cfg.node_listen(node_id)
        if addr is None:
            return  # served by another sidecar
        try:
            sock = bind_listener(addr)
        except OSError as exc:
            log.error("cannot listen for broker %d on %s (%s): clients told to use it will fail; "
                      "set nodes.%d.listen in the config", node_id, format_hostport(addr), exc.strerror, node_id)
            self.metrics.connection_errors.labels("listener_bind_failed").inc()
            return
        self.node_sockets[node_id] = sock
        label = str(node_id)

        def address() -> list[HostPort]:
            b = self.nodes[node_id]
            return [(b.host, b.port)]

        def factory() -> ClientSide:
            return ClientSide(self, label, address, label)

        async def serve() -> None:
            server = await asyncio.get_running_loop().create_server(factory, sock=sock)
            self.node_servers[node_id] = server
            self.metrics.listeners.set(len(self.node_servers))

        self._tasks.append(asyncio.get_running_loop().create_task(serve()))
        log.info("listening for broker %d on %s (advertised as %s)", node_id, format_hostport(addr),
                 format_hostport(self.cfg.node_advertise(node_id)))

    def bootstrap_upstreams(self) -> list[HostPort]:
        ups = list(self.cfg.upstreams)
        k = next(self._rr) % len(ups)
        return ups[k:] + ups[:k]

    # upstream faults -----------------------------------------------------------------
    def upstream_failed(self) -> None:
        """A round of connection attempts to a broker failed: count it, and re-check metadata now
        (readiness drops while no broker answers)."""
        self.metrics.upstream_failures.inc()
        self.kick_metadata()

    def upstream_lost(self, sess: ClientSide, exc: Exception | None) -> None:
        self.metrics.upstream_lost.inc()
        self.log_throttled("upstream_lost", logging.WARNING,
                           "broker %s:%d closed the connection of client %s (%s); closing the client connection so "
                           "it reconnects", sess.upstream_addr[0], sess.upstream_addr[1], sess.peer,
                           exc or "end of stream")
        self.kick_metadata()

    def kick_metadata(self) -> None:
        self._metadata_kick.set()

    def log_throttled(self, key: str, level: int, msg: str, *args: object, every_s: float = 5.0) -> None:
        """One line per ``key`` every ``every_s`` at most, saying how many were suppressed: a broker
        restart with 1000 clients connected is one event, not 1000 log lines."""
        now = clock.now_ns() / 1e9
        last, suppressed = self._log_last.get(key, (-1e18, 0))
        if now - last < every_s:
            self._log_last[key] = (last, suppressed + 1)
            return
        if suppressed:
            msg += f" [{suppressed} similar suppressed in the last {now - last:.0f} s]"
        self._log_last[key] = (now, 0)
        log.log(level, msg, *args)

    # observations --------------------------------------------------------------------
    def next_conn_id(self) -> int:
        return next(self._conn_ids)

    def record_fetch(self, broker: str, conn_id: int, ev: FetchExchanged, sample: FetchSample,
                     replication: list[ReplicationSample]) -> None:
        if self.traces is not None:
            self.traces.fetch(broker, conn_id, ev, sample, replication)

    def record_produce(self, broker: str, conn_id: int, ev: ProduceExchanged, sample: ProduceSample) -> None:
        if self.traces is not None:
            self.traces.produce(broker, conn_id, ev, sample)

    def enable_traces(self, directory: str) -> None:
        proxy_id = self.cfg.proxy_id or f"{socket.gethostname()}:{self.cfg.listen[1]}"
        writer = self.traces = TraceWriter(directory, proxy_id=proxy_id)
        writer.start()
        self.metrics.trace_rows.dropped = lambda: writer.dropped
        self.metrics.trace_rows.written = lambda: writer.written

    # lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        sock = bind_listener(self.cfg.listen)
        self.bootstrap_port = sock.getsockname()[1]
        name = "sidecar" if self.cfg.sidecar else "bootstrap"
        server = await loop.create_server(
            lambda: ClientSide(self, name, self.bootstrap_upstreams, name), sock=sock
        )
        self.servers.append(server)
        log.info("%s listener on %s -> %s%s", name, format_hostport(self.cfg.listen),
                 ", ".join(format_hostport(u) for u in self.cfg.upstreams),
                 f" (fronting broker {self.cfg.sidecar_node}; addresses pass unchanged)" if self.cfg.sidecar else "")
        self._tasks.append(loop.create_task(self._heartbeat()))
        self._tasks.append(loop.create_task(self._loop_lag()))
        self._tasks.append(loop.create_task(self._metadata_loop()))

    async def stop(self, drain_s: float = 0.0) -> None:
        """Stop accepting; let requests already sent finish (up to ``drain_s``); close every
        connection; flush and close the trace files."""
        for srv in [*self.servers, *self.node_servers.values()]:
            srv.close()
        deadline = clock.now_ns() + int(drain_s * 1e9)
        while clock.now_ns() < deadline and any(sess.codec.in_flight for sess in self.sessions):
            await asyncio.sleep(0.02)
        left = sum(len(sess.codec.in_flight) for sess in self.sessions)
        if left:
            log.warning("shutting down with %d request(s) still in flight after %.1f s", left, drain_s)
        for t in self._tasks:
            t.cancel()
        for sess in list(self.sessions):
            sess.close()
        if self.traces is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.traces.close)

    def reload(self, new: Config) -> None:
        """Apply what is safe to change while running; say what needs a restart."""
        safe = ("idle_timeout_s", "partial_frame_timeout_s", "stalled_client_timeout_s", "metadata_refresh_s",
                "log_level", "drain_timeout_s", "upstream_hold_timeout_s")
        differ = [f.name for f in dataclasses.fields(new) if getattr(new, f.name) != getattr(self.cfg, f.name)]
        changed = {k: getattr(new, k) for k in differ if k in safe}
        needs_restart = sorted(k for k in differ if k not in safe)  # every other setting, TLS included
        self.cfg = dataclasses.replace(self.cfg, **changed)
        logging.getLogger("fetchlat").setLevel(self.cfg.log_level)
        log.info("reloaded: %s", ", ".join(f"{k}={v}" for k, v in changed.items()) or "nothing changed")
        if needs_restart:
            log.warning("not reloaded (needs a restart): %s", ", ".join(needs_restart))

    async def _heartbeat(self) -> None:
        """Every half second: mark the loop alive, and close connections that overstayed."""
        while True:
            now = self.last_beat_ns = clock.now_ns()
            for sess in list(self.sessions):
                reason = sess.expire(now)
                if reason is not None:
                    log.warning("client %s via %s: %s; closing this connection", sess.peer, sess.listener,
                                reason.replace("_", " "))
                    self.metrics.connection_errors.labels(reason).inc()
                    sess.abort()
            await asyncio.sleep(0.5)

    async def _loop_lag(self, every_s: float = 0.1) -> None:
        """Every 100 ms: how much later than asked the loop woke us (a busy or blocked loop
        delays every connection by as much)."""
        hist = self.metrics.loop_lag
        while True:
            before = clock.now_ns()
            await asyncio.sleep(every_s)
            hist.observe(max(0, clock.now_ns() - before - int(every_s * 1e9)) / 1e9)

    async def _metadata_loop(self) -> None:
        delay = 0.2
        while True:
            for host, port in self.cfg.upstreams:
                try:
                    brokers = await asyncio.wait_for(
                        fetch_brokers(host, port, self.upstream_tls, self.cfg.upstream_server_hostname),
                        self.cfg.connect_timeout_s)
                except NoAnswer:
                    # reachable, but it closes on a Metadata request before authentication (a SASL
                    # listener does that): ready; brokers are learned from what clients receive
                    if not self._passive:
                        log.info("broker %s:%d closes unauthenticated Metadata requests (a SASL listener?): it is "
                                 "reachable; brokers are learned from the responses clients receive", host, port)
                    self._passive = True
                    brokers = []
                except (TimeoutError, OSError, ValueError) as exc:
                    self.log_throttled("metadata_failed", logging.WARNING, "metadata from %s:%d failed: %s",
                                       host, port, exc or "timeout")
                    continue
                self.learn(tuple(brokers))
                recovered = not self.metadata_ok and self._had_metadata
                self.metadata_ok = self._had_metadata = True
                if recovered:
                    log.info("upstream metadata fetched again from %s:%d: ready", host, port)
                break
            else:
                if self.metadata_ok:
                    log.warning("no upstream broker answers metadata: not ready until one does")
                self.metadata_ok = False
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            delay = 0.2
            self._metadata_kick.clear()
            with contextlib.suppress(TimeoutError):  # a fault elsewhere asks for an early re-check
                await asyncio.wait_for(self._metadata_kick.wait(), self.cfg.metadata_refresh_s)
            self._metadata_kick.clear()

    def health(self) -> dict[str, object]:
        lag_s = (clock.now_ns() - self.last_beat_ns) / 1e9
        live = lag_s < 5.0
        ready = live and self.metadata_ok and all(n in self.node_servers for n in self.node_sockets)
        return {
            "live": live,
            "ready": ready,
            "loop_heartbeat_age_s": round(lag_s, 3),
            "brokers": {str(k): f"{v.host}:{v.port}" for k, v in sorted(self.nodes.items())},
            "listeners": {str(k): format_hostport(self.cfg.node_advertise(k)) for k in sorted(self.node_servers)},
            "connections": len(self.sessions),
        }


class NoAnswer(ValueError):
    """The broker accepted the connection and closed it without answering our Metadata request."""


async def fetch_brokers(host: str, port: int, tls: ssl.SSLContext | None = None,
                        server_hostname: str | None = None) -> list[BrokerAddress]:
    """Ask one broker for the broker list (Metadata v1, no topics)."""
    reader, writer = await asyncio.open_connection(
        host, port, ssl=tls, server_hostname=(server_hostname or host) if tls else None)
    try:
        body = encode(load("MetadataRequest"), METADATA_VERSION, {"Topics": []})
        header = struct.pack(">hhi", apis.METADATA, METADATA_VERSION, 1) + encode_string("fetchlat-proxy", False)
        frame = header + body
        writer.write(len(frame).to_bytes(4, "big") + frame)
        head = b""
        head = await reader.readexactly(4)
        resp = await reader.readexactly(int.from_bytes(head, "big"))
    except asyncio.IncompleteReadError as exc:
        if not head and not exc.partial:
            raise NoAnswer("broker closed the connection without answering") from exc
        raise ValueError("broker closed the connection mid-response") from exc
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    msg = walk(load("MetadataResponse"), METADATA_VERSION, resp, 4)
    return [BrokerAddress(node_id=b["NodeId"], host=b["Host"], port=b["Port"], rack=b.get("Rack"))
            for b in msg["Brokers"]]
