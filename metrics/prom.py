"""Prometheus adapter: the metric families DESIGN.md pins, on a registry of their own.

Names and labels are a pinned interface: extend, never rename. Must never: compute latency
(that is the model's job) or read clocks.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

# 50 µs to 60 s, eight buckets below 1 ms (KIP-403: sub-millisecond precision).
LATENCY_BUCKETS: Final = (
    0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.0025, 0.005, 0.0075,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # the *_created series double the scrape for no use here
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
