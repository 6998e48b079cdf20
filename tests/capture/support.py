"""What the capture tests share: a proxy core wired for a capture, with every trace row kept."""

from __future__ import annotations

from typing import Any

from fetchlat.capture.flows import FlowTable, capture_context
from fetchlat.metrics.observer import Observer
from fetchlat.metrics.prom import FetchMetrics, ProxyMetrics


class Rows:
    def __init__(self) -> None:
        self.rows: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, table: str, row: dict[str, Any]) -> None:
        self.rows.append((table, row))

    def exchanges(self) -> list[dict[str, Any]]:
        return [r for t, r in self.rows if t == "exchanges"]


def table(ports: set[int], **kw: Any) -> tuple[FlowTable, Rows]:
    rows = Rows()
    metrics = ProxyMetrics()
    observer = Observer(metrics, FetchMetrics(metrics.registry), wall_minus_mono_ns=0, proxy_id="pcap:test", sink=rows)
    return FlowTable(capture_context(observer), ports, **kw), rows
