"""Scripted proxy-core tests in the manner of mitmproxy's Playbook: a ``Conversation`` driven
by bytes in at scripted times, with what it returns (writes, pauses, closes) and the metric
deltas it causes. Time is scripted too: no sockets, no event loop, no sleeps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fetchlat.metrics.observer import Observer
from fetchlat.metrics.prom import FetchMetrics, ProxyMetrics
from fetchlat.metrics.rows import TraceColumns
from fetchlat.protocol.rewrite import ResponseRewriter
from fetchlat.proxy.conversation import Action, Conversation, CoreContext, WriteUpstream
from fetchlat.proxy.policy import Limits
from fetchlat.proxy.registry import BrokerRegistry
from prometheus_client import CollectorRegistry

MS = 1_000_000
T0 = 1_000_000 * MS
UPSTREAM = ("127.0.0.1", 9092)


@dataclass
class Playbook:
    limits: Limits = field(default_factory=Limits)
    sidecar_node: int | None = None
    tls: bool = False
    traced: bool = True  # rows gathered (False: a proxy without --trace-dir)
    routed: bool = False  # read by the native core first where it is loaded (protocol/routed.py)

    def __post_init__(self) -> None:
        self.prom = CollectorRegistry()
        self.metrics = ProxyMetrics(self.prom)
        self.traces = TraceColumns()  # no hand-off: the script reads every row it made
        self.observer = Observer(self.metrics, FetchMetrics(self.prom), wall_minus_mono_ns=0, proxy_id="pb",
                                 traces=self.traces if self.traced else None)
        self.registry = BrokerRegistry(self.sidecar_node)
        self.ctx = CoreContext(observer=self.observer, registry=self.registry, limits=self.limits,
                               rewriter=ResponseRewriter(lambda node, host, port: ("proxy.test", 20000 + node)),
                               max_frame_bytes=1 << 20, wait_time_tag=None, routed=self.routed)
        self.conv = Conversation(self.ctx, conn_id=1, listener="bootstrap", broker_label="bootstrap",
                                 upstream=UPSTREAM, t_ns=T0, tls=self.tls, peer="client:1")
        self.upstream_writes: list[bytes] = []
        self.client_writes: list[bytes] = []

    @property
    def rows(self) -> list[tuple[str, dict[str, Any]]]:
        """Every trace row so far, table by table, each table's in the order they came."""
        return list(self.traces.batch.all_rows())

    # --------------------------------------------------------------- steps
    def connect_upstream(self, t_ns: int) -> tuple[Action, ...]:
        pending, actions = self.conv.upstream_connected(t_ns, UPSTREAM)
        self.upstream_writes += pending
        return actions

    def client(self, data: bytes, t_ns: int) -> tuple[Action, ...]:
        """What ``session.ClientSide.data_received`` does: forward first, then the core."""
        if self.conv.forwards_directly:
            self.upstream_writes.append(data)
        actions = self.conv.from_client(data, t_ns)
        self.upstream_writes += [a.data for a in actions if isinstance(a, WriteUpstream)]
        return actions

    def broker(self, data: bytes, t_ns: int, t_written_ns: int | None = None) -> tuple[Action, ...]:
        """What ``session.BrokerSide.data_received`` does: the core's segments, written, then
        ``after_write`` at ``t_written_ns``."""
        segments, before = self.conv.from_broker(data, t_ns)
        if segments:
            self.conv.written(segments)
            self.client_writes.append(b"".join(bytes(s) for s in segments))
            t_written_ns = t_ns if t_written_ns is None else t_written_ns
        after = self.conv.after_write(t_ns, t_written_ns)
        return before + after

    # --------------------------------------------------------------- metrics
    def value(self, name: str, **labels: str) -> float:
        v = self.prom.get_sample_value(name, labels)
        return 0.0 if v is None else v
