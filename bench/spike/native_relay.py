"""Spike: a proxy whose per-read road is the native core's alone (``native/src/relay/``,
``Relay``), with fetchlat's Python road and observer run in batches off it. Not the proxy: what
it measures is whether that design reaches issue 42's goals before it is built out
(``docs/performance.md``, "A native relay").

    python bench/spike/native_relay.py --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT \
        [--trace-dir DIR] [--metrics-listen 127.0.0.1:PORT] [--tick-ms 5]

The core's thread reads both sides of every connection (the broker's with the kernel's stamp),
frames them with the ``Wire``, writes each read on as it came, and queues what Python must see:
the frames the Python road parses (Fetch, Produce, ShareFetch, SaslHandshake v0: the same
``route_ranges`` as ``protocol/routed.py``, with no rewriter) and the records of the exchanges it
settled alone. This process's Python thread takes the queue every ``--tick-ms`` (at once when
it was empty longer) and runs the Python road (``KafkaConnection``) and the observer
(``ConnectionObserver.observe_records``, as the routed road does) over it, with the stamps of
the reads: the metric samples and trace rows are the proxy's, made later, in a batch.

The answers the proxy's rewriter wants (ApiVersions capped; Metadata, FindCoordinator and
DescribeCluster with every broker's address made this listener's, as a routing proxy in front of
one broker does) are held whole by the core and answered from here at once (the core's
``urgent_fd``), with ``ResponseRewriter`` itself; ``--no-rewrite`` passes everything on as it
came (the broker must then advertise this listener).

What it lacks beside the proxy: the calibration probes, discovery, listeners per broker, TLS,
SASL's tokens, holding requests while the broker connection is down.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fetchlat import native
from fetchlat.metrics.observer import Observer
from fetchlat.metrics.prom import FetchMetrics, ProxyMetrics
from fetchlat.protocol.connection import KafkaConnection
from fetchlat.protocol.events import Event, TopicIdsLearned
from fetchlat.protocol.framing import DEFAULT_MAX_FRAME_BYTES
from fetchlat.protocol.held import rewritten
from fetchlat.protocol.rewrite import ResponseRewriter
from fetchlat.protocol.routed import flexible_ranges, route_ranges, whole_ranges
from fetchlat.proxy import clock
from fetchlat.proxy.relayed import items as drained


def hostport(s: str) -> tuple[str, int]:
    host, port = s.rsplit(":", 1)
    return host, int(port)


class Spike:
    def __init__(self, upstream: tuple[str, int], trace_dir: str | None, tick_s: float,
                 rewriter: ResponseRewriter | None) -> None:
        core = native.core()
        if core is None:
            raise SystemExit(f"the native core is not loaded: {native.reason()}")
        self.core = core
        self.rewriter = rewriter
        wants = rewriter.wants if rewriter is not None else None
        self.relay = core.Relay(DEFAULT_MAX_FRAME_BYTES, flexible_ranges(), route_ranges(wants),
                                whole_ranges(wants) if wants is not None else [])
        self.from_client, self.from_broker, self.closed, self.rewrite = core.RELAY_KINDS
        self.upstream = upstream
        self.tick_s = tick_s
        self.metrics = ProxyMetrics(hot_path="native")
        self.observer = Observer(self.metrics, FetchMetrics(self.metrics.registry),
                                 wall_minus_mono_ns=clock.read_wall_minus_mono_ns(), beside_broker=True)
        self.writer = None
        if trace_dir is not None:
            from fetchlat.proxy.traces import TraceWriter

            self.writer = TraceWriter(trace_dir, proxy_id="spike")
            self.writer.start()
            self.observer.proxy_id = "spike"
            self.observer.traces = self.writer.columns
            self.metrics.trace_rows.dropped = lambda: self.writer.dropped  # type: ignore[union-attr]
            self.metrics.trace_rows.written = lambda: self.writer.written  # type: ignore[union-attr]
        self.conns: dict[int, tuple[KafkaConnection, object]] = {}
        self.lock = threading.Lock()  # conns: the accept thread adds, the drain thread takes
        self.stop = threading.Event()
        self.batches = 0
        self.items = 0

    def accept(self, listener: socket.socket) -> None:
        while not self.stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                broker = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                cid = self.relay.add(client.detach(), broker.detach())
                self.conns[cid] = (KafkaConnection(), self.observer.connection(cid, "0"))

    def drain_forever(self) -> None:
        fd, urgent = self.relay.notify_fd, self.relay.urgent_fd
        next_tick = time.monotonic()
        while not self.stop.is_set():
            ready, _, _ = select.select([fd, urgent], [], [], 0.1)
            if fd in ready:
                os.read(fd, 8)
            if ready and urgent not in ready:
                # let a batch gather (the point of the design), unless a client comes to wait
                # for an answer to rewrite meanwhile
                ready, _, _ = select.select([urgent], [], [], self.tick_s)
            if urgent in ready:
                os.read(urgent, 8)
            self.drain()
            now = time.monotonic()
            if now >= next_tick and self.writer is not None:
                self.writer.columns.tick(clock.now_ns())
                next_tick = now + 0.1

    def drain(self) -> None:
        items = drained(*self.relay.drain())
        if not items:
            return
        self.batches += 1
        self.items += len(items)
        notes: list[object] = []
        with self.lock:
            for cid, kind, t_ns, t_written_ns, data, records, ids, _reason, api, _counts, _handed, digest in items:
                if kind == self.closed:
                    self.conns.pop(cid, None)
                    continue
                if kind == self.rewrite:
                    self.answer(cid, data, api)
                    continue
                state = self.conns.get(cid)
                if state is None:
                    continue
                conn, cobs = state
                if kind == self.from_client:
                    events = conn.digested_from_client(*digest, t_ns) if digest is not None else []
                    if data:
                        events += conn.receive_from_client(data, t_ns)
                else:
                    events = conn.digested_from_broker(*digest[1:], t_ns) if digest is not None else []
                    if data:
                        events += conn.receive_from_broker(data, t_ns)[1]
                if kind == self.from_broker:
                    cobs.handed_on(t_ns, t_written_ns)  # type: ignore[attr-defined]
                if records is not None:
                    cobs.observe_records(records, ids, events, t_ns, t_written_ns, notes)  # type: ignore[attr-defined]
                elif events:
                    cobs.observe(events, t_ns, t_written_ns)  # type: ignore[attr-defined]


    def answer(self, cid: int, frame: bytes, api: tuple[int, int]) -> None:
        """An answer the core holds whole: rewritten, or as it came where the rewriter changes
        nothing or cannot read it (the proxy forwards those untouched too)."""
        assert self.rewriter is not None
        before: list[Event] = []
        new = rewritten(self.rewriter, api[0], api[1], memoryview(frame)[4:], before, [])
        self.relay.answer(cid, frame if new is None else len(new).to_bytes(4, "big") + new)
        for ev in before:
            if isinstance(ev, TopicIdsLearned):
                self.observer.model.cluster.learn_topic_ids(ev.topics)
                self.observer.model.cluster.learn_leaders(ev.leaders)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", type=hostport, required=True)
    ap.add_argument("--upstream", type=hostport, required=True)
    ap.add_argument("--trace-dir")
    ap.add_argument("--metrics-listen", type=hostport)
    ap.add_argument("--tick-ms", type=float, default=5.0)
    ap.add_argument("--no-rewrite", action="store_true", help="no rewriter: every answer goes on as it came")
    args = ap.parse_args()
    here = args.listen
    rewriter = None if args.no_rewrite else ResponseRewriter(lambda node, host, port: here)
    spike = Spike(args.upstream, args.trace_dir, args.tick_ms / 1e3, rewriter)
    if args.metrics_listen is not None:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_listen[1], args.metrics_listen[0], registry=spike.metrics.registry)
    listener = socket.create_server(args.listen, backlog=512)
    threading.Thread(target=spike.accept, args=(listener,), daemon=True, name="accept").start()
    signal.signal(signal.SIGTERM, lambda *_: spike.stop.set())
    signal.signal(signal.SIGINT, lambda *_: spike.stop.set())
    try:
        spike.drain_forever()
    finally:
        listener.close()
        spike.relay.close()
        spike.drain()
        if spike.writer is not None:
            spike.writer.columns.tick(clock.now_ns())
            spike.writer.close()
        print(f"batches {spike.batches}, items {spike.items}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
