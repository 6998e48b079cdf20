"""Soak on Apache Kafka: hours of a production-like mix through 3 brokers, each behind its own
fetchlat sidecar with traces on, with faults at intervals; every sidecar sampled every 10 s.

    make soak BROKER=kafka HOURS=2       # python bench/soak_kafka.py --hours 2 --out build/soak-kafka

The mix, the whole time:
- two idempotent acks=all producers and a transactional one (a transaction of 10 records a second);
- a consumer group on the classic protocol and one on KIP-848 (read_committed), and a share group;
- followers replicating every partition (RF 3, min.insync.replicas 2);
- clients that come and go: every 2 s, 10 connections with client ids never seen before
  (ApiVersions, Metadata, a Fetch), spread over the sidecars;
- a topic created every 30 s (3 partitions, RF 3), written to, and deleted a minute later.

Faults, one every ``--fault-every-s`` (default 10 min), in turn: a broker SIGKILLed and
restarted; a broker paused (SIGSTOP) for 35 s, longer than the clients' 30 s request timeout,
then resumed; a sidecar restarted (SIGTERM, then started again on its port); a burst of bad
frames (garbage, an oversized length, a TLS hello, an HTTP request, a frame cut mid-way) at
every sidecar; a reconnect storm (500 connections at once). Node 0 is the one KRaft controller:
the broker faults take nodes 1 and 2 in turn.

From the end of the warm-up, every ``--census-every-s`` (30 min) and once at the end, each
sidecar is asked for a heap census (SIGUSR1: it logs the objects it holds by type); the summary
gives, per sidecar, the types that grew between its first and last census.

Written to ``--out``: ``samples.jsonl`` (one line per 10 s: per sidecar RSS, and by kind of
mapping, open files, asyncio tasks, loop lag p99, CPU, trace rows written and dropped; records
acknowledged and consumed; the fault under way), ``summary.json`` (heap censuses, RSS slope per
sidecar after warm-up as a linear fit in MB per hour, and the same for each kind of mapping
(``testkit/procfs.py``: glibc's main heap and thread arenas, big anonymous regions, other
anonymous mappings, mapped files) and for glibc's bytes in use and free
(``fetchlat_libc_heap_bytes``), fds and tasks after warm-up, loop lag p99 and rows dropped
outside the faults, acknowledged records lost), ``rss.svg`` (RSS over time, faults marked) and
``rss-by-mapping-N.svg`` (sidecar N's resident MB by kind of mapping after warm-up, as changes).
The exit status is 0 only when the goals hold (docs/reliability.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import statistics
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat.embedded import kafka
from fetchlat.protocol import apis
from prometheus_client.parser import text_string_to_metric_families

from bench.kafka_client import AsyncClient, fetch_request
from bench.procs import cpu_s, quantile, slope_mb_per_h
from testkit.census import census_lines
from testkit.procfs import MAPPING_KINDS, open_fds, rss_by_mapping_mb, rss_mb

IDEM, TXN, SHARE = "soak-idem", "soak-txn", "soak-share"
PAUSE_S = 35.0  # longer than librdkafka's request.timeout.ms (30 s)
FAULT_WINDOW_BEFORE_S, FAULT_WINDOW_AFTER_S = 10.0, 60.0  # "the seconds around a fault"
GOALS = {"rss_slope_mb_per_h": 1.0, "loop_lag_p99_ms": 5.0}
LOG_QUIET = {"log_level": 0}


# ------------------------------------------------------------------------ the clients
class Ledger:
    """What the clients saw, shared by their threads (each writes its own keys)."""

    def __init__(self) -> None:
        self.acked: set[str] = set()  # idempotent producers' acknowledged ids
        self.committed: set[str] = set()  # ids in committed transactions
        self.failed: list[str] = []  # deliveries that failed (the producer said so: not lost)
        self.consumed: dict[str, set[str]] = {}
        self.counts: dict[str, int] = {}
        self.errors: list[str] = []

    def note_error(self, who: str, err: object) -> None:
        if len(self.errors) < 1000:
            self.errors.append(f"{time.strftime('%H:%M:%S')} {who}: {err}")


def idempotent_producer(n: int, bootstrap: str, rate: float, stop: threading.Event, led: Ledger) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "client.id": f"soak-idem-{n}", "enable.idempotence": True,
                  "acks": "all", "linger.ms": 5, **LOG_QUIET})

    def report(err: object, msg: Any) -> None:
        if err is None:
            led.acked.add(msg.value().decode())
        else:
            led.failed.append(f"{msg.value().decode()}: {err}")

    for i in itertools.count():
        if stop.wait(1.0 / rate):
            break
        value = f"i{n}-{i}".encode()
        p.produce(IDEM, value=value, on_delivery=report)
        if i % 10 == 0:
            p.produce(SHARE, value=value)
        p.poll(0)
    if p.flush(120) != 0:
        led.note_error(f"soak-idem-{n}", "records left unflushed after 120 s")


def transactional_producer(bootstrap: str, stop: threading.Event, led: Ledger) -> None:
    from confluent_kafka import KafkaException, Producer

    def fresh() -> Any:
        p = Producer({"bootstrap.servers": bootstrap, "client.id": "soak-txn", "transactional.id": "soak-txn",
                      "acks": "all", "linger.ms": 5, **LOG_QUIET})
        p.init_transactions(60)
        return p

    p = fresh()
    for t in itertools.count():
        if stop.wait(1.0):
            break
        ids = [f"t{t}-{i}" for i in range(10)]
        try:
            p.begin_transaction()
            for v in ids:
                p.produce(TXN, value=v.encode())
            p.commit_transaction(60)
            led.committed.update(ids)
            led.counts["transactions"] = led.counts.get("transactions", 0) + 1
        except KafkaException as exc:
            err = exc.args[0]
            led.counts["transactions_aborted"] = led.counts.get("transactions_aborted", 0) + 1
            led.note_error("soak-txn", err)
            if err.txn_requires_abort():
                with contextlib.suppress(KafkaException):
                    p.abort_transaction(60)
            elif err.fatal() or not err.retriable():
                with contextlib.suppress(Exception):
                    p.flush(10)
                p = fresh()  # a fenced or fatal producer starts over, as an application does
    with contextlib.suppress(Exception):
        p.flush(30)


def group_consumer(protocol: str, bootstrap: str, topics: list[str], stop: threading.Event, led: Ledger) -> None:
    from confluent_kafka import Consumer

    name = f"soak-{protocol}"
    conf = {"bootstrap.servers": bootstrap, "group.id": name, "client.id": name, "auto.offset.reset": "earliest",
            "isolation.level": "read_committed", "group.protocol": protocol, **LOG_QUIET}
    if protocol == "classic":
        conf["session.timeout.ms"] = 30000
    c = Consumer(conf)
    c.subscribe(topics)
    seen = led.consumed.setdefault(name, set())
    while not stop.is_set():
        for m in c.consume(500, 0.5):
            if m.error() is None:
                seen.add(m.value().decode())
            elif not m.error().retriable():
                led.note_error(name, m.error())
    c.close()


def share_consumer(bootstrap: str, stop: threading.Event, led: Ledger) -> None:
    from confluent_kafka import ShareConsumer

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "soak-share", "client.id": "soak-share",
                       **LOG_QUIET})
    c.subscribe([SHARE])
    while not stop.is_set():
        try:
            for m in c.poll(0.5):
                if m.error() is None:
                    led.counts["share_records"] = led.counts.get("share_records", 0) + 1
        except Exception as exc:
            led.note_error("soak-share", exc)
            time.sleep(1.0)
    c.close()


def topic_churn(bootstrap: str, stop: threading.Event, led: Ledger) -> None:
    """A topic every 30 s: created (3 partitions, RF 3), written to, deleted a minute later."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **LOG_QUIET})
    p = Producer({"bootstrap.servers": bootstrap, "client.id": "soak-topics", "acks": "all", **LOG_QUIET})
    alive: list[str] = []
    for n in itertools.count():
        if stop.wait(30.0):
            break
        name = f"churn-{n}"
        try:
            admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=3)])[name].result(60)
            alive.append(name)
            led.counts["topics_created"] = led.counts.get("topics_created", 0) + 1
            for i in range(30):
                p.produce(name, value=f"{name}-{i}".encode())
            p.flush(30)
            if len(alive) > 2:
                old = alive.pop(0)
                admin.delete_topics([old])[old].result(60)
                led.counts["topics_deleted"] = led.counts.get("topics_deleted", 0) + 1
        except Exception as exc:
            led.note_error("soak-topics", exc)


async def client_churn(ports: Callable[[], list[int]], stop: threading.Event, led: Ledger) -> None:
    """Every 2 s, 10 connections with new client ids: ApiVersions, Metadata, a Fetch of 0 ms."""
    serial = itertools.count()

    async def one(port: int) -> None:
        c = await asyncio.wait_for(AsyncClient.connect(port, f"soak-churn-{next(serial)}"), 10)
        try:
            await asyncio.wait_for(c.call(apis.API_VERSIONS, 3, {"ClientSoftwareName": "soak",
                                                                  "ClientSoftwareVersion": "1"}), 10)
            md, _ = await asyncio.wait_for(c.call(apis.METADATA, 12, {
                "Topics": [{"Name": IDEM, "TopicId": uuid.UUID(int=0)}], "AllowAutoTopicCreation": False}), 10)
            tid = md["Topics"][0]["TopicId"]
            await asyncio.wait_for(c.call(apis.FETCH, 12, fetch_request(IDEM, tid, 0, 0)), 10)
        finally:
            await c.close()

    while not stop.is_set():
        outcomes = await asyncio.gather(*(one(random.choice(ports())) for _ in range(10)), return_exceptions=True)
        bad = [o for o in outcomes if isinstance(o, BaseException)]
        led.counts["churn_connections"] = led.counts.get("churn_connections", 0) + len(outcomes)
        led.counts["churn_failed"] = led.counts.get("churn_failed", 0) + len(bad)
        await asyncio.sleep(2.0)


# ------------------------------------------------------------------------------ faults
async def bad_frames(port: int) -> int:
    """One of each bad input at once; each must close only its own connection (how many did)."""
    hello = bytes.fromhex("16030100a5010000a10303") + os.urandom(32) + b"\x00" * 40
    cut = struct.pack(">i", 100) + struct.pack(">hhi", 18, 3, 7)  # a frame that never ends

    async def one(payload: bytes) -> bool:
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
        except (OSError, TimeoutError):
            return False
        try:
            w.write(payload)
            return await asyncio.wait_for(r.read(65536), 5) == b""  # closed by the proxy
        except (OSError, TimeoutError):
            return False
        finally:
            w.close()

    bad = (os.urandom(64), struct.pack(">i", 1 << 30), hello, b"GET /metrics HTTP/1.1\r\n\r\n", cut)
    return sum(await asyncio.gather(*(one(p) for p in bad)))


async def reconnect_storm(ports: list[int], n: int = 500) -> int:
    """``n`` connections at once, each an ApiVersions; returns how many were answered."""
    async def one(i: int) -> bool:
        try:
            c = await asyncio.wait_for(AsyncClient.connect(ports[i % len(ports)], f"soak-storm-{i}"), 20)
            try:
                await asyncio.wait_for(c.call(apis.API_VERSIONS, 3, {"ClientSoftwareName": "storm",
                                                                      "ClientSoftwareVersion": "1"}), 20)
                return True
            finally:
                await c.close()
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            return False
    return sum(await asyncio.gather(*(one(i) for i in range(n))))


# ----------------------------------------------------------------------------- sampling
def scrape(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {"lag": [], "written": 0.0, "dropped": 0.0, "tasks": 0.0, "held": {}, "gc": {},
                           "heap": {}, "relay_handovers": 0.0}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "fetchlat_event_loop_lag_seconds_bucket":
                out["lag"].append((float(s.labels["le"]), s.value))
            elif s.name == "fetchlat_trace_rows_written_total":
                out["written"] = s.value
            elif s.name == "fetchlat_trace_rows_dropped_total":
                out["dropped"] = s.value
            elif s.name == "fetchlat_relay_handovers_total":  # that the relay road carried connections
                out["relay_handovers"] = s.value
            elif s.name == "fetchlat_event_loop_tasks":
                out["tasks"] = s.value
            elif s.name == "fetchlat_held_entries":  # what the bounded structures hold: which one RSS follows
                out["held"][s.labels["structure"]] = int(s.value)
            elif s.name == "python_gc_collections_total":
                out["gc"][s.labels["generation"]] = int(s.value)
            elif s.name in ("fetchlat_python_allocated_blocks", "fetchlat_arrow_allocated_bytes"):
                out["heap"][s.name.removeprefix("fetchlat_")] = int(s.value)  # whose an RSS rise is
            elif s.name == "fetchlat_libc_heap_bytes":  # glibc's share: in use, free but kept
                out["heap"][f"libc_{s.labels['state']}_bytes"] = int(s.value)
    return out


class Watch:
    """One sidecar over its restarts: counters carried across processes."""

    def __init__(self, index: int) -> None:
        self.index, self.pid, self.prev, self.cpu = index, 0, None, 0.0
        self.written_before = self.dropped_before = 0.0  # earlier processes' totals
        self.last: dict[str, Any] = {}

    def sample(self, side: Any, dt: float) -> dict[str, Any]:
        pid = side.proc.pid
        try:
            m = scrape(side.metrics())
            rss, fds, cpu = rss_mb(pid), open_fds(pid), cpu_s(pid)
            mappings = rss_by_mapping_mb(pid)
        except (OSError, ValueError, RuntimeError) as exc:
            return {"sidecar": self.index, "pid": pid, "error": repr(exc)}
        if pid != self.pid:  # a new process: its counters start at 0
            if self.last:
                self.written_before += self.last["written"]
                self.dropped_before += self.last["dropped"]
            self.pid, self.prev, self.cpu = pid, None, 0.0
        lag = [(le, c - dict(self.prev["lag"]).get(le, 0.0)) for le, c in m["lag"]] if self.prev else m["lag"]
        row = {"sidecar": self.index, "pid": pid, "rss_mb": round(rss, 2), "fds": fds, "tasks": int(m["tasks"]),
               "cpu_pct": round((cpu - self.cpu) / dt * 100, 1) if self.cpu else None,
               "loop_lag_p99_ms": round(quantile(sorted(lag), 0.99) * 1000, 3) if lag and lag[-1][1] else None,
               "lag_buckets": lag,
               "rows_written": int(self.written_before + m["written"]),
               "rows_dropped": int(self.dropped_before + m["dropped"]),
               "relay_handovers": int(m["relay_handovers"]),  # this process's: what the relay road carried
               "held": m["held"], "gc_collections": m["gc"], "heap": m["heap"], "rss_by_mapping_mb": mappings}
        self.prev, self.cpu, self.last = m, cpu, m
        return row


# ----------------------------------------------------------------------------- summary


def ask_census(sidecars: list[Any]) -> None:
    """SIGUSR1 to every sidecar that is up (one still starting has no handler yet: the signal
    would end it)."""
    for side in sidecars:
        with contextlib.suppress(Exception):
            if side.ready():
                side.proc.send_signal(signal.SIGUSR1)


def census_growth(first: dict[str, int], last: dict[str, int], top: int = 12) -> dict[str, int]:
    """What grew between two censuses of one process, by type, the most first."""
    grew = {t: last.get(t, 0) - first.get(t, 0) for t in set(first) | set(last)}
    return dict(sorted(((t, n) for t, n in grew.items() if n), key=lambda kv: -kv[1])[:top])


def in_fault(t: float, faults: list[dict[str, Any]]) -> bool:
    return any(f["t_s"] - FAULT_WINDOW_BEFORE_S <= t <= f["end_s"] + FAULT_WINDOW_AFTER_S for f in faults)


def summarise(samples: list[dict[str, Any]], faults: list[dict[str, Any]], warmup_s: float,
              n_sidecars: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i in range(n_sidecars):
        rows = [(s["t_s"], s["sidecars"][i]) for s in samples if "rss_mb" in s["sidecars"][i]]
        start_of: dict[int, float] = {}
        for t, r in rows:
            start_of.setdefault(r["pid"], t)
        # after the first warm-up of the run, and of each restarted process
        warm = [(t, r) for t, r in rows if t >= warmup_s and t - start_of[r["pid"]] >= min(warmup_s, 300.0)]
        quiet = [(t, r) for t, r in warm if not in_fault(t, faults)]
        lag_total: dict[float, float] = {}
        for _t, r in quiet:
            for le, c in r["lag_buckets"]:
                lag_total[le] = lag_total.get(le, 0.0) + c
        dropped_quiet = sum(b["rows_dropped"] - a["rows_dropped"] for (ta, a), (tb, b) in itertools.pairwise(rows)
                            if not in_fault(tb, faults) and not in_fault(ta, faults))
        out[f"sidecar_{i}"] = {
            "processes": len(start_of),
            "rss_mb_first": rows[0][1]["rss_mb"] if rows else None,
            "rss_mb_last": rows[-1][1]["rss_mb"] if rows else None,
            "rss_mb_max": max((r["rss_mb"] for _, r in rows), default=None),
            "rss_slope_mb_per_h_after_warmup": slope_mb_per_h([(t, r["rss_mb"], r["pid"]) for t, r in warm]),
            # whose a rise is: Python's objects, Arrow's buffers, or neither (an allocator keeping pages)
            "python_blocks_slope_per_h_after_warmup": slope_mb_per_h(
                [(t, r["heap"]["python_allocated_blocks"], r["pid"]) for t, r in warm if "heap" in r]),
            "arrow_mb_slope_per_h_after_warmup": slope_mb_per_h(
                [(t, r["heap"]["arrow_allocated_bytes"] / 1e6, r["pid"]) for t, r in warm if "heap" in r]),
            # which allocator's memory a rise is in: the main heap, anonymous mappings, mapped files
            "rss_by_mapping_slope_mb_per_h_after_warmup": {
                kind: slope_mb_per_h([(t, r["rss_by_mapping_mb"][kind], r["pid"]) for t, r in warm
                                      if "rss_by_mapping_mb" in r])
                for kind in MAPPING_KINDS},
            "libc_mb_slope_per_h_after_warmup": {
                state: slope_mb_per_h([(t, r["heap"][f"libc_{state}_bytes"] / 1e6, r["pid"]) for t, r in warm
                                       if f"libc_{state}_bytes" in r.get("heap", {})]) for state in ("in_use", "free")},
            "fds_after_warmup": [min((r["fds"] for _, r in quiet), default=None),
                                 max((r["fds"] for _, r in quiet), default=None)],
            "tasks_after_warmup": [min((r["tasks"] for _, r in quiet), default=None),
                                   max((r["tasks"] for _, r in quiet), default=None)],
            "loop_lag_p99_ms_outside_faults_at_most": round(quantile(sorted(lag_total.items()), 0.99) * 1000, 3)
            if lag_total else None,
            "cpu_pct_median": statistics.median(cpu) if (cpu := [r["cpu_pct"] for _, r in rows
                                                                  if r["cpu_pct"] is not None]) else None,
            "rows_written": rows[-1][1]["rows_written"] if rows else 0,
            "rows_dropped": rows[-1][1]["rows_dropped"] if rows else 0,
            "rows_dropped_outside_faults": dropped_quiet,
        }
    return out


def svg_lines(series: dict[str, list[tuple[float, float]]], faults: list[dict[str, Any]], path: Path,
              unit: str = "MB") -> None:
    """A line per series over the run (``{label: [(t_s, value)]}``), the faults as grey marks."""
    pts = [(t, v) for line in series.values() for t, v in line]
    if not pts:
        return
    w, h, left, bottom, top = 900, 360, 60, 40, 20
    tmax = max(t for t, _ in pts) or 1.0
    lo, hi = min(v for _, v in pts) - 2, max(v for _, v in pts) + 2

    def x(t: float) -> float:
        return left + (w - left - 20) * t / tmax

    def y(r: float) -> float:
        return top + (h - top - bottom) * (hi - r) / (hi - lo)

    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="11"><rect width="{w}" height="{h}" fill="white"/>']
    for f in faults:
        parts.append(f'<rect x="{x(f["t_s"]):.1f}" y="{top}" width="{max(1.0, x(f["end_s"]) - x(f["t_s"])):.1f}" '
                     f'height="{h - top - bottom}" fill="#ddd"/><text x="{x(f["t_s"]) + 2:.1f}" y="{top + 10}" '
                     f'fill="#777" font-size="9">{f["kind"]}</text>')
    for k in range(6):
        r = lo + (hi - lo) * k / 5
        parts.append(f'<text x="4" y="{y(r) + 4:.1f}">{r:.0f} {unit}</text>'
                     f'<line x1="{left}" x2="{w - 20}" y1="{y(r):.1f}" y2="{y(r):.1f}" stroke="#eee"/>')
    for k in range(7):
        t = tmax * k / 6
        parts.append(f'<text x="{x(t) - 10:.1f}" y="{h - 20}">{t / 60:.0f} min</text>')
    for i, (label, line) in enumerate(series.items()):
        points = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in line)
        parts.append(f'<polyline fill="none" stroke="{colours[i % len(colours)]}" stroke-width="1.2" '
                     f'points="{points}"/><text x="{left + 10 + 120 * i}" y="{h - 5}" '
                     f'fill="{colours[i % len(colours)]}">{label}</text>')
    parts.append("</svg>")
    path.write_text("".join(parts))


def svg(samples: list[dict[str, Any]], faults: list[dict[str, Any]], n: int, path: Path) -> None:
    """RSS per sidecar over the run (a line each), the faults as grey marks."""
    svg_lines({f"sidecar {i}": [(s["t_s"], s["sidecars"][i]["rss_mb"]) for s in samples
                                if "rss_mb" in s["sidecars"][i]] for i in range(n)}, faults, path)


def svg_mappings(samples: list[dict[str, Any]], faults: list[dict[str, Any]], i: int, warmup_s: float,
                 path: Path) -> None:
    """One sidecar's resident MB by kind of mapping, each as its change since the process's first
    sample after warm-up (a restart starts each line again at 0): which allocator a rise is in."""
    first: dict[tuple[int, str], float] = {}
    series: dict[str, list[tuple[float, float]]] = {k: [] for k in MAPPING_KINDS}
    for s in samples:
        row = s["sidecars"][i]
        if s["t_s"] < warmup_s or "rss_by_mapping_mb" not in row:
            continue
        for k in MAPPING_KINDS:
            base = first.setdefault((row["pid"], k), row["rss_by_mapping_mb"][k])
            series[k].append((s["t_s"], row["rss_by_mapping_mb"][k] - base))
    svg_lines(series, faults, path, unit="MB Δ")


# --------------------------------------------------------------------------------- run
def renice(pid: int, nice: int) -> None:
    """The sidecars' share of the 2 cores the brokers and clients also use: as a CPU request
    gives a sidecar container its own share (a lower nice needs root; refused, it stays 0)."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, nice)


def read_all(bootstrap: str, topic: str) -> set[str]:
    """Every committed record of ``topic``, read from the beginning to the end offsets."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"soak-verify-{uuid.uuid4()}",
                  "isolation.level": "read_committed", "enable.auto.commit": False, **LOG_QUIET})
    parts = c.list_topics(topic, timeout=30).topics[topic].partitions
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in parts}
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    got: set[str] = set()
    done: dict[int, bool] = {p: ends[p] == 0 for p in parts}
    deadline = time.monotonic() + 300
    while not all(done.values()) and time.monotonic() < deadline:
        for m in c.consume(1000, 1.0):
            if m.error() is None:
                got.add(m.value().decode())
                if m.offset() >= ends[m.partition()] - 1:
                    done[m.partition()] = True
        for p in parts:  # a partition whose tail is a transaction marker ends below its last offset
            pos = c.position([TopicPartition(topic, p)])[0].offset
            if pos >= ends[p]:
                done[p] = True
    c.close()
    return got


async def run(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient, NewTopic

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.tracemalloc:  # the sidecars (started from here on) inherit it; this process is not traced
        os.environ["PYTHONTRACEMALLOC"] = str(args.tracemalloc)
    if args.relay:  # the sidecars (started from here on) take the road it names (proxy/config.py FETCHLAT_RELAY)
        os.environ["FETCHLAT_RELAY"] = args.relay
    if args.pure:  # the sidecars run their sources: tracemalloc then sees the hot path's own lines
        os.environ["FETCHLAT_PURE_PYTHON"] = "1"
    home = Path(tempfile.mkdtemp(prefix="fetchlat-soak-kafka-"))
    traces = home / "traces"
    trace_args = ["--trace-dir", str(traces)]
    settings = {"auto.leader.rebalance.enable": "true", "leader.imbalance.check.interval.seconds": "30"}
    led, stop = Ledger(), threading.Event()
    samples: list[dict[str, Any]] = []
    faults: list[dict[str, Any]] = []
    with kafka.cluster(home / "kafka", brokers=3, sidecars=True, sidecar_args=trace_args, settings=settings) as c:
        for side in c.sidecars:
            renice(side.proc.pid, args.sidecar_nice)
        b = c.bootstrap
        admin = AdminClient({"bootstrap.servers": b, **LOG_QUIET})
        for f in admin.create_topics([NewTopic(IDEM, 6, 3), NewTopic(TXN, 3, 3), NewTopic(SHARE, 3, 3)]).values():
            f.result(60)
        done = kafka.tool("org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", b, "--alter",
                          "--entity-type", "groups", "--entity-name", "soak-share",
                          "--add-config", "share.auto.offset.reset=earliest")
        if done.returncode != 0:
            led.note_error("setup", done.stderr[-500:])
        workers = [threading.Thread(target=idempotent_producer, args=(n, b, args.rate / 2, stop, led), daemon=True)
                   for n in range(2)]
        workers += [threading.Thread(target=transactional_producer, args=(b, stop, led), daemon=True),
                    threading.Thread(target=share_consumer, args=(b, stop, led), daemon=True),
                    threading.Thread(target=topic_churn, args=(b, stop, led), daemon=True)]
        cstop = threading.Event()
        consumers = [threading.Thread(target=group_consumer, args=(p, b, [IDEM, TXN], cstop, led), daemon=True)
                     for p in ("classic", "consumer")]
        for t in [*consumers, *workers]:
            t.start()
        ports = lambda: [s.listen_port for s in c.sidecars]
        churn = asyncio.create_task(client_churn(ports, stop, led))
        watches = [Watch(i) for i in range(len(c.sidecars))]
        kinds = args.faults.split(",")
        t0 = time.monotonic()
        next_fault, fault_n = t0 + args.first_fault_s, 0
        next_census = args.warmup_s
        end = t0 + args.hours * 3600
        fault_task: asyncio.Task[dict[str, Any]] | None = None

        async def fault(kind: str, n: int) -> dict[str, Any]:
            start = time.monotonic() - t0
            rec: dict[str, Any] = {"kind": kind, "t_s": round(start, 1)}
            if kind == "broker_kill":
                node = c.node(1 + n % 2)
                await asyncio.to_thread(node.restart, True, 120.0)
                rec["node"] = node.node_id
            elif kind == "broker_pause":
                node = c.node(1 + n % 2)
                assert node.proc is not None
                os.kill(node.proc.pid, signal.SIGSTOP)
                await asyncio.sleep(PAUSE_S)
                os.kill(node.proc.pid, signal.SIGCONT)
                rec["node"] = node.node_id
            elif kind == "sidecar_restart":
                i = n % len(c.sidecars)
                await asyncio.to_thread(c.sidecars[i].stop)
                c.sidecars[i] = kafka.start_sidecar(c.nodes[i], c.home, trace_args)
                await asyncio.to_thread(c.sidecars[i].wait_ready, 60)
                renice(c.sidecars[i].proc.pid, args.sidecar_nice)
                rec["sidecar"] = i
            elif kind == "bad_frames":
                closed = await asyncio.gather(*(bad_frames(p) for _ in range(20) for p in ports()))
                rec["connections"], rec["closed_within_5_s"] = 20 * 5 * len(c.sidecars), sum(closed)
            else:
                rec["answered"] = await reconnect_storm(ports())
                rec["connections"] = 500
            rec["end_s"] = round(time.monotonic() - t0, 1)
            return rec

        with (out / "samples.jsonl").open("w") as fh:
            last = time.monotonic()
            while time.monotonic() < end:
                await asyncio.sleep(max(0.0, last + args.sample_s - time.monotonic()))
                now = time.monotonic()
                dt, last = now - last, now
                if fault_task is not None and fault_task.done():
                    try:
                        faults.append(fault_task.result())
                    except Exception as exc:
                        faults.append({"kind": "failed", "t_s": round(now - t0, 1), "end_s": round(now - t0, 1),
                                       "error": repr(exc)})
                        led.note_error("fault", exc)
                    fault_task = None
                if fault_task is None and now >= next_fault and now < end - min(600.0, args.fault_every_s):
                    fault_task = asyncio.create_task(fault(kinds[fault_n % len(kinds)], fault_n // len(kinds)))
                    fault_n += 1
                    next_fault = now + args.fault_every_s
                if now - t0 >= next_census:  # each sidecar logs what it holds by type (SIGUSR1)
                    next_census += args.census_every_s
                    await asyncio.to_thread(ask_census, c.sidecars)
                sides = await asyncio.to_thread(
                    lambda d=dt: [w.sample(s, d) for w, s in zip(watches, c.sidecars, strict=True)])
                row = {"t_s": round(now - t0, 1), "sidecars": sides, "acked": len(led.acked),
                       "failed": len(led.failed), "committed": len(led.committed),
                       "consumed": {k: len(v) for k, v in led.consumed.items()}, **led.counts,
                       "fault": kinds[(fault_n - 1) % len(kinds)] if fault_task is not None else None,
                       "errors": len(led.errors)}
                samples.append(row)
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                brief = " ".join(f"s{x['sidecar']}:{x.get('rss_mb')}MB/{x.get('fds')}fd/{x.get('tasks')}t"
                                 f"/{x.get('loop_lag_p99_ms')}ms" for x in sides)
                print(f"{row['t_s']:7.0f}s {brief} acked={row['acked']} committed={row['committed']} "
                      f"consumed={row['consumed']} fault={row['fault']}", flush=True)
        if fault_task is not None:
            faults.append(await fault_task)
        stop.set()
        churn.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await churn
        for t in workers:
            await asyncio.to_thread(t.join, 180)
        # every acknowledged record reaches both groups (bounded wait), then a fresh reader checks the log
        deadline = time.monotonic() + 180
        want = led.acked | led.committed
        while time.monotonic() < deadline and not all(want <= v for v in led.consumed.values()):
            await asyncio.sleep(1.0)
        cstop.set()
        for t in consumers:
            await asyncio.to_thread(t.join, 60)
        in_log = await asyncio.to_thread(read_all, b, IDEM) | await asyncio.to_thread(read_all, b, TXN)
        final = [w.sample(s, args.sample_s) for w, s in zip(watches, c.sidecars, strict=True)]
        ask_census(c.sidecars)  # a last census: with the first after the warm-up, what grew
        await asyncio.sleep(2.0)
        censuses = {}
        for i, side in enumerate(c.sidecars):
            seen = census_lines(side.log())
            if len(seen) >= 2:
                censuses[str(i)] = {"censuses": len(seen), "tracked": [x[0] for x in seen],
                                    "blocks": [x[1] for x in seen], "interpreter_arenas": [x[2] for x in seen],
                                    "grew": census_growth(seen[0][3], seen[-1][3]),
                                    **({"grown_sites": seen[-1][4]} if seen[-1][4] else {})}
    per = summarise(samples, faults, args.warmup_s, len(watches))
    summary = {
        "hours": round((samples[-1]["t_s"] if samples else 0) / 3600, 2), "samples": len(samples),
        "sidecar_nice": args.sidecar_nice, "rate": args.rate, "tracemalloc_frames": args.tracemalloc,
        "pure_python": args.pure, "relay": args.relay or "default",
        "faults": faults, "acked": len(led.acked), "committed": len(led.committed),
        "failed_deliveries": len(led.failed), "first_failed": led.failed[:5],
        "acked_lost": len(led.acked - in_log), "committed_lost": len(led.committed - in_log),
        "acked_not_consumed": {k: len(want - v) for k, v in led.consumed.items()},
        "counts": led.counts, "client_errors": len(led.errors), "first_client_errors": led.errors[:10],
        "sidecars": per, "final": [{k: v for k, v in f.items() if k != "lag_buckets"} for f in final],
        "heap_censuses": censuses,
    }
    goals = {
        "no_acknowledged_record_lost": summary["acked_lost"] == 0 and summary["committed_lost"] == 0,
        "every_fault_survived": all(f["kind"] != "failed" for f in faults),
        "rss_slope_at_most_1_mb_per_h": all((p["rss_slope_mb_per_h_after_warmup"] or 0) <= GOALS["rss_slope_mb_per_h"]
                                            for p in per.values()),
        "rows_dropped_outside_faults_0": all(p["rows_dropped_outside_faults"] == 0 for p in per.values()),
        "loop_lag_p99_at_most_5_ms_outside_faults": all((p["loop_lag_p99_ms_outside_faults_at_most"] or 0)
                                                        <= GOALS["loop_lag_p99_ms"] for p in per.values()),
    }
    summary["goals"] = goals
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    svg(samples, faults, len(watches), out / "rss.svg")
    for i in range(len(watches)):
        svg_mappings(samples, faults, i, args.warmup_s, out / f"rss-by-mapping-{i}.svg")
    print(json.dumps(summary, indent=2))
    return 0 if all(goals.values()) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--out", type=Path, default=Path("build/soak-kafka"))
    ap.add_argument("--rate", type=float, default=50.0, help="records per second from the idempotent producers")
    ap.add_argument("--sample-s", type=float, default=10.0)
    ap.add_argument("--warmup-s", type=float, default=600.0, help="left out of the RSS slope (the first 10 minutes)")
    ap.add_argument("--fault-every-s", type=float, default=600.0)
    ap.add_argument("--sidecar-nice", type=int, default=-5,
                    help="the sidecars' nice value (the brokers and clients run at 0 on the same cores)")
    ap.add_argument("--faults", default="broker_kill,broker_pause,sidecar_restart,bad_frames,reconnect_storm",
                    help="the faults, in the order they come round")
    ap.add_argument("--first-fault-s", type=float, default=900.0)
    ap.add_argument("--census-every-s", type=float, default=1800.0,
                    help="each sidecar logs a heap census (SIGUSR1) this often from the end of the warm-up")
    ap.add_argument("--tracemalloc", type=int, default=0, metavar="FRAMES",
                    help="run the sidecars with PYTHONTRACEMALLOC=FRAMES: each census then names the source lines "
                         "whose live allocations grew since the first (slower sidecars: for finding a leak, "
                         "not for the lag and CPU figures)")
    ap.add_argument("--pure", action="store_true",
                    help="run the sidecars' pure-Python build (FETCHLAT_PURE_PYTHON=1): with --tracemalloc, the "
                         "compiled hot path's allocations are charged to its own lines, not to the event loop's")
    ap.add_argument("--relay", choices=("auto", "native", "off"), default=None,
                    help="the sidecars' relay road (FETCHLAT_RELAY; unset: the proxy's default)")
    return asyncio.run(run(ap.parse_args()))


def _exit_on(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds the run: brokers, sidecars and clients are stopped


if __name__ == "__main__":
    # stopped by SIGTERM (or SIGINT where a background shell ignores it), the soak still stops
    # what it started; the default action would leave three brokers and their sidecars running
    signal.signal(signal.SIGTERM, _exit_on)
    signal.signal(signal.SIGINT, _exit_on)
    raise SystemExit(main())
