"""What the capture tests share: a proxy core wired for a capture, with every trace row kept."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fetchlat.capture.flows import FlowTable, capture_context
from fetchlat.metrics.observer import Observer
from fetchlat.metrics.prom import FetchMetrics, ProxyMetrics
from fetchlat.metrics.rows import TraceColumns


class Rows:
    """The trace rows a capture made (gathered, never handed off)."""

    def __init__(self) -> None:
        self.columns = TraceColumns()

    @property
    def rows(self) -> list[tuple[str, dict[str, Any]]]:
        return list(self.columns.batch.all_rows())

    def exchanges(self) -> list[dict[str, Any]]:
        return self.columns.batch.table_rows("exchanges")


def table(ports: set[int], **kw: Any) -> tuple[FlowTable, Rows]:
    rows = Rows()
    metrics = ProxyMetrics()
    observer = Observer(metrics, FetchMetrics(metrics.registry), wall_minus_mono_ns=0, proxy_id="pcap:test",
                        traces=rows.columns)
    return FlowTable(capture_context(observer), ports, **kw), rows


# ---------------------------------------------------------------- writing captures
def ipv4_tcp(src: tuple[str | bytes, int], dst: tuple[str | bytes, int], seq: int, flags: int,
             payload: bytes = b"") -> bytes:
    """One Ethernet frame: IPv4, TCP, ``payload``. Addresses as text or as their 4 bytes."""
    import ipaddress
    import struct

    def packed(ip: str | bytes) -> bytes:
        return ip if isinstance(ip, bytes) else ipaddress.IPv4Address(ip).packed

    tcp = struct.pack("!HHIIBBHHH", src[1], dst[1], seq % 2**32, 0, 5 << 4, flags, 65535, 0, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0x4000, 64, 6, 0, packed(src[0]), packed(dst[0]))
    return b"\x00" * 12 + b"\x08\x00" + ip + tcp


def write_pcap(path: Any, packets: Iterable[tuple[int, bytes]], *, snaplen: int = 262144, linktype: int = 1) -> None:
    """A classic pcap file (µs timestamps): ``(timestamp ns, frame)`` each, cut at ``snaplen``."""
    import struct

    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, linktype))
        for t_ns, frame in packets:
            kept = frame[:snaplen]
            f.write(struct.pack("<IIII", t_ns // 1_000_000_000, t_ns % 1_000_000_000 // 1000, len(kept), len(frame)))
            f.write(kept)
