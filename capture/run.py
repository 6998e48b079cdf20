"""``fetchlat pcap``: the proxy's measurements from packet captures (docs/capture.md).

    fetchlat pcap broker.pcapng --broker-port 9092 --trace-dir traces/
    tcpdump -i eth0 -U -w - port 9092 | fetchlat pcap - --broker-port 9092 --metrics-listen 127.0.0.1:9310

Packets go to ``flows.py`` (one TCP conversation each, fed to the proxy's own core with the
capture's timestamps); the rows the observation layer makes go to the same trace writer as the
proxy's (``proxy_id`` ``pcap:<file>``, so ``fetchlat analyze`` reads them as they are) and to
the summary printed at the end. Timestamps are the capture's clock (epoch), so a trace's
``ts_ns`` is when the packet was captured.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any, Final

from ..metrics.model import DEFAULT_EXPIRY_OVERSHOOT_NS
from ..metrics.observer import Observer
from ..metrics.prom import FetchMetrics, ProxyMetrics
from ..metrics.rows import NAMES, TraceBatch, TraceColumns
from ..perf.stats import nearest_rank
from ..protocol.framing import DEFAULT_MAX_FRAME_BYTES
from ..proxy.config import ConfigError, parse_hostport
from .flows import COMPLETE, INTERNAL_ERROR, OPEN_AT_END, Flow, FlowTable, capture_context
from .packets import Segment, format_ip, tcp_segment
from .source import Capture, CaptureError

log = logging.getLogger("fetchlat.pcap")
PROGRESS_EVERY_S: Final = 2.0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("pcap", help="measure true fetch latency from packet captures (pcap, pcapng, or - for a pipe)",
                       description="Reassemble every TCP conversation with a broker port in the captures and measure "
                                   "it as the proxy would: same codec, latency model, metrics and trace files.")
    p.add_argument("captures", nargs="+", metavar="CAPTURE", help="pcap or pcapng file; - reads a live pipe "
                                                                  "(tcpdump -U -w - ...)")
    p.add_argument("--broker-port", dest="broker_ports", type=int, action="append", required=True,
                   help="a port brokers listen on (repeat for several); the server side of it is the broker")
    p.add_argument("--trace-dir", help="write exchanges/partitions traces here (as the proxy does)")
    p.add_argument("--metrics-listen",
                   help="serve the proxy's metric families on HOST:PORT while it runs (e.g. 127.0.0.1:9310)")
    p.add_argument("--proxy-id", help="names this source in traces (default pcap:<first capture's name>)")
    p.add_argument("--max-frame-bytes", type=int, default=DEFAULT_MAX_FRAME_BYTES,
                   help=f"largest Kafka frame accepted (default {DEFAULT_MAX_FRAME_BYTES}), as for the proxy")
    p.add_argument("--wait-time-tag", type=int, default=None,
                   help="the tagged field a broker reports WaitTimeMs in (as for the proxy)")
    p.add_argument("--expiry-overshoot-ms", type=float, default=DEFAULT_EXPIRY_OVERSHOOT_NS / 1e6,
                   help="how long past max wait the broker releases an expired fetch (as for the proxy)")
    p.add_argument("--away-from-broker", action="store_true",
                   help="the capture was taken away from the brokers (on a client host): a produce's answer "
                        "dates its append less the round trip learned from immediate fetches, not as it is")
    p.add_argument("--linger-s", type=float, default=0.0,
                   help="with --metrics-listen: keep serving this long after the capture ends")
    p.add_argument("--quiet", action="store_true", help="no progress line")


class Summary:
    """Per client and broker: fetches, the naive total, the wait, the true local time, outcomes."""

    def __init__(self) -> None:
        self.fetch: dict[tuple[str, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        self.outcomes: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        self.exchanges = 0
        self.produces = 0

    def batch(self, batch: TraceBatch) -> None:
        """The exchanges of a batch of trace rows, read from its columns."""
        cols = dict(zip(NAMES["exchanges"], batch.columns["exchanges"], strict=True))
        apis = cols["api"]
        for k in range(batch.counts["exchanges"]):
            self.exchanges += 1
            if apis[k] == "Produce":
                self.produces += 1
            if apis[k] != "Fetch":
                continue
            key = (str(cols["client_id"][k] or "-"), str(cols["broker"][k] or "-"))
            d = self.fetch[key]
            for col in ("total_ns", "wait_ns", "local_ns"):
                v = cols[col][k]
                if isinstance(v, int):  # None where the model had no figure
                    d[col].append(v)
            self.outcomes[key][str(cols["outcome"][k] or "-")] += 1

    def print(self, flows: FlowTable, captures: list[Capture], seconds: float, out: Any) -> None:
        from rich.console import Console
        from rich.table import Table

        console = Console(file=out, width=140)
        packets = sum(c.packets for c in captures)
        mb = sum(c.bytes for c in captures) / 1e6
        console.print(f"{packets} packets ({mb:.1f} MB of capture) in {seconds:.1f} s "
                      f"({packets / max(seconds, 1e-9):,.0f} packets/s, {mb / max(seconds, 1e-9):.1f} MB/s); "
                      f"{self.exchanges} exchanges measured, {sum(len(d['total_ns']) for d in self.fetch.values())} "
                      f"fetches, {self.produces} produces")
        t = Table(title="Fetches per client and broker (ms, p50 / p99)")
        for col in ("client", "broker", "fetches", "naive total", "wait", "true local", "outcomes"):
            t.add_column(col)

        def pct(xs: list[int]) -> str:
            if not xs:
                return "-"
            s = sorted(xs)
            return f"{nearest_rank(s, 50) / 1e6:.3f} / {nearest_rank(s, 99) / 1e6:.3f}"

        for key in sorted(self.fetch):
            d = self.fetch[key]
            mix = ", ".join(f"{k} {v}" for k, v in self.outcomes[key].most_common())
            t.add_row(key[0], key[1], str(len(d["total_ns"])), pct(d["total_ns"]), pct(d["wait_ns"]),
                      pct(d["local_ns"]), mix)
        console.print(t)
        ended = ", ".join(f"{k} {v}" for k, v in flows.ended.most_common())
        not_read = ", ".join(f"{k} {v}" for k, v in flows.packets_skipped.most_common())
        console.print(f"conversations: {sum(flows.ended.values())} ({ended or 'none'}); "
                      f"{flows.skipped_bytes} bytes skipped before a provable frame; "
                      f"{flows.other_tcp} TCP packets on other ports; packets without TCP: {not_read or 'none'}")


def _flow_ended(flow: Flow) -> None:
    if flow.ended == INTERNAL_ERROR:
        log.warning("%s: decoding stopped by an error in fetchlat (please report it): %s", flow.name, flow.detail)
    elif flow.ended not in (COMPLETE, OPEN_AT_END):
        log.info("%s: decoding stopped: %s (%s)", flow.name, flow.ended, flow.detail)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from ..proxy.build import fetchlat_version, hot_path

    metrics = ProxyMetrics(version=fetchlat_version(), hot_path=hot_path())
    summary = Summary()
    first = args.captures[0]
    proxy_id = args.proxy_id or ("pcap:stdin" if first == "-" else f"pcap:{os.path.basename(first)}")
    writer = None
    if args.trace_dir:
        from ..proxy.traces import TraceWriter

        try:
            writer = TraceWriter(args.trace_dir, proxy_id=proxy_id, block=True)
        except OSError as exc:
            print(f"fetchlat pcap: cannot write traces to {args.trace_dir}: {exc.strerror}", file=sys.stderr)
            return 2
        writer.start()

    def hand_off(batch: TraceBatch) -> None:
        summary.batch(batch)
        if writer is not None:
            writer.hand_off(batch)

    columns = TraceColumns(hand_off)

    observer = Observer(metrics, FetchMetrics(metrics.registry), wall_minus_mono_ns=0, proxy_id=proxy_id,
                        traces=columns, beside_broker=not args.away_from_broker,
                        expiry_overshoot_ns=round(args.expiry_overshoot_ms * 1e6))
    metrics.expiry_overshoot.set(args.expiry_overshoot_ms / 1e3)  # what the model adds to max wait, as a proxy's
    ctx = capture_context(observer, max_frame_bytes=args.max_frame_bytes, wait_time_tag=args.wait_time_tag)
    flows = FlowTable(ctx, set(args.broker_ports), on_end=_flow_ended)
    admin = None
    if args.metrics_listen:
        from ..proxy.admin import AdminServer

        try:
            addr = parse_hostport(args.metrics_listen, "--metrics-listen")
            admin = AdminServer(addr, metrics.registry, lambda: {"live": True, "ready": True})
        except (ConfigError, OSError) as exc:
            print(f"fetchlat pcap: cannot serve metrics on {args.metrics_listen}: {exc}", file=sys.stderr)
            return 2
        admin.start()
    captures: list[Capture] = []
    t0 = time.monotonic()
    code = 0
    try:
        for path in args.captures:
            try:
                cap = Capture(path)
            except CaptureError as exc:
                print(f"fetchlat pcap: {exc}", file=sys.stderr)
                code = 2
                continue  # the other captures are still read
            captures.append(cap)
            feed(cap, flows, progress=not args.quiet, tick=lambda: columns.tick(time.monotonic_ns()))
        flows.close_all()
    except CaptureError as exc:
        print(f"fetchlat pcap: {exc}", file=sys.stderr)
        flows.close_all()
        code = 2
    except KeyboardInterrupt:
        flows.close_all()
    finally:
        columns.flush()
        if writer is not None:
            writer.close(timeout_s=60.0)
    if not captures:
        return code
    if not args.quiet:
        print(file=sys.stderr)
    summary.print(flows, captures, time.monotonic() - t0, sys.stdout)
    print(f"expiry overshoot: {args.expiry_overshoot_ms:g} ms added to max wait for every expired fetch (a capture "
          "cannot probe its broker: --expiry-overshoot-ms sets it, docs/capture.md)")
    if admin is not None:
        if args.linger_s > 0:
            time.sleep(args.linger_s)
        admin.stop()
    return code


def feed(cap: Capture, flows: FlowTable, *, progress: bool = False, tick: Callable[[], None] | None = None) -> None:
    """Every packet of ``cap`` into ``flows`` (``tick`` after each batch of packets). A packet on a
    broker port that the snap length cut is an error: every figure after it would be a guess."""
    linktype = cap.linktype
    broker_ports = flows.broker_ports
    skipped = flows.packets_skipped
    last = time.monotonic()
    start = last
    for buf, packets in cap.batches():
        view = memoryview(buf)
        for i, (ts_ns, off, n) in enumerate(packets):
            seg = tcp_segment(linktype, view[off : off + n])
            if isinstance(seg, Segment):
                if seg.cut and (seg.dst[1] in broker_ports or seg.src[1] in broker_ports):
                    raise CaptureError(
                        f"{cap.path}: packet {cap.packets - len(packets) + 1 + i} "
                        f"({format_ip(seg.src[0])}:{seg.src[1]} -> {format_ip(seg.dst[0])}:{seg.dst[1]}) was cut "
                        f"at {n} bytes by the capture's snap length: recapture with tcpdump -s 0 (the whole packet)")
                flows.segment(seg, ts_ns)
            else:
                skipped[seg] += 1
        if tick is not None:
            tick()
        if progress:
            now = time.monotonic()
            if now - last >= PROGRESS_EVERY_S:
                last = now
                rate = cap.bytes / 1e6 / (now - start)
                print(f"\r{cap.path}: {cap.packets:,} packets, {cap.bytes / 1e6:,.1f} MB ({rate:.1f} MB/s), "
                      f"{len(flows.flows)} open conversations", end="", file=sys.stderr, flush=True)

