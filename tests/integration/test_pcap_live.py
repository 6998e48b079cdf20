"""``fetchlat pcap`` against the proxy, with real parts: Tansu behind the delay relay (D ms each
way), the real proxy in front writing its traces, real clients (confluent-kafka producing on a
schedule and long-polling, kafka-python catching up, aiokafka idle), and ``tcpdump`` on
loopback capturing both legs behind the proxy: proxy -> relay and relay -> Tansu.

- On the proxy -> relay leg the capture sees what the proxy sees: for the same fetches
  (matched by client id, correlation id and time) the same outcome for >= 99 % and total, wait
  and local within 0.2 ms at p50 of the proxy's own rows.
- On the relay -> Tansu leg the delay is gone: local latency there is the proxy's minus 2·D.
- ``fetchlat analyze`` reads the capture's traces unchanged (its summary checked against
  percentiles computed independently from the same files).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from testkit.analysis_checks import check_summary, independent_values

from .conftest import free_ports, start_proxy, stop_proxy, tansu_behind_delay
from .test_ground_truth import create_topic

pytestmark = pytest.mark.integration

MS = 1_000_000
DELAY_MS = 20
RESULTS = Path(os.environ.get("FETCHLAT_PCAP_OUT", "/tmp/fetchlat-pcap-live.jsonl"))
# The proxy learns its broker's expiry overshoot by probing, which a capture cannot: this test
# compares what the two roads measure, so both are given the same figure.
SAME_OVERSHOOT = ("--expiry-overshoot-ms", "1")


def rows(trace_dir: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in sorted((trace_dir / "exchanges").rglob("*.parquet")):
        out += pq.read_table(f).to_pylist()
    return out


def fetches(trace_dir: Path) -> list[dict[str, Any]]:
    return [r for r in rows(trace_dir) if r["api"] == "Fetch"]


def match(proxy: list[dict[str, Any]], capture: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Pairs of rows of the same fetch: same client id and correlation id, nearest in time
    (a client's connections each count correlation ids on their own)."""
    by_key: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for r in capture:
        by_key.setdefault((r["client_id"], r["correlation_id"]), []).append(r)
    pairs = []
    for p in proxy:
        cands = by_key.get((p["client_id"], p["correlation_id"]), [])
        if cands:
            best = min(cands, key=lambda c: abs(c["ts_ns"] - p["ts_ns"]))
            if abs(best["ts_ns"] - p["ts_ns"]) < 50 * MS:
                pairs.append((p, best))
    return pairs


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * q))]


def traffic(bootstrap: str, seconds: float) -> None:
    """Three clients at once: a scheduled producer with a long-polling confluent consumer
    (woken fetches), kafka-python over a pre-filled topic (immediate), aiokafka on an idle one
    (expired)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    fed, full, idle = (f"{k}-{uuid.uuid4().hex[:6]}" for k in ("fed", "full", "idle"))
    for topic, records in ((fed, 0), (full, 200), (idle, 0)):
        create_topic(bootstrap, topic, records)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "client.id": "pcap-producer"})
    stop = time.monotonic() + seconds

    def confluent() -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "pcap-confluent", "client.id": "pcap-confluent",
                      "fetch.wait.max.ms": 300, "enable.auto.commit": False})
        c.assign([TopicPartition(fed, 0, OFFSET_BEGINNING)])
        while time.monotonic() < stop:
            c.poll(0.05)
        c.close()

    def kafkapython() -> None:
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KTP

        c = KafkaConsumer(bootstrap_servers=bootstrap, client_id="pcap-kafkapython", fetch_max_wait_ms=300,
                          max_partition_fetch_bytes=2048, fetch_max_bytes=2048, enable_auto_commit=False,
                          group_id=None, auto_offset_reset="earliest")
        c.assign([KTP(full, 0)])
        c.seek_to_beginning()
        while time.monotonic() < stop:
            c.poll(50)
        c.close()

    def aio() -> None:
        from aiokafka import AIOKafkaConsumer

        async def run() -> None:
            c = AIOKafkaConsumer(idle, bootstrap_servers=bootstrap, client_id="pcap-aiokafka",
                                 fetch_max_wait_ms=300, enable_auto_commit=False, group_id=None)
            await c.start()
            try:
                while time.monotonic() < stop:
                    await c.getmany(timeout_ms=100)
            finally:
                await c.stop()

        asyncio.run(run())

    threads = [threading.Thread(target=f) for f in (confluent, kafkapython, aio)]
    for t in threads:
        t.start()
    for left in (0.8, 0.6, 0.35):  # seconds left, as a share: off the poll rhythm, woken fetches
        time.sleep(max(0.0, stop - time.monotonic() - seconds * left))
        producer.produce(fed, value=b"y" * 100)
        producer.flush(10)
    for t in threads:
        t.join(seconds + 30)


def test_a_capture_behind_the_proxy_measures_what_the_proxy_measures(tmp_path: Path) -> None:
    cap = tmp_path / "legs.pcap"
    procs: list[subprocess.Popen[bytes]] = []
    with tansu_behind_delay(DELAY_MS) as (tansu_port, relay_port):
        try:
            dump = subprocess.Popen(["tcpdump", "-i", "lo", "-U", "-s", "0", "-n", "-w", str(cap),
                                     f"tcp port {relay_port} or tcp port {tansu_port}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            procs.append(dump)
            # and live: a second tcpdump piped into fetchlat pcap, its metrics scraped while it runs
            pipe = subprocess.Popen(["tcpdump", "-i", "lo", "-U", "-s", "0", "-n", "-w", "-", f"tcp port {relay_port}"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            procs.append(pipe)
            metrics_port = free_ports(0)
            live = subprocess.Popen([sys.executable, "-m", "fetchlat.app", "pcap", "-", "--broker-port",
                                     str(relay_port), "--away-from-broker", "--metrics-listen",
                                     f"127.0.0.1:{metrics_port}", "--quiet"],
                                    stdin=pipe.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append(live)
            for d in (dump, pipe):
                assert d.stderr is not None
                assert b"listening on" in d.stderr.readline()
            proxy = start_proxy(f"127.0.0.1:{relay_port}", tmp_path, "--trace-dir", str(tmp_path / "proxy"),
                                *SAME_OVERSHOOT)
            try:
                traffic(proxy.bootstrap, 6.0)
                time.sleep(0.5)
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
                    scraped = resp.read().decode()  # while the pipe still runs
            finally:
                stop_proxy(proxy)
            time.sleep(0.3)
            for d in (dump, pipe):
                d.send_signal(signal.SIGINT)
                d.wait(10)
            live_out, live_err = live.communicate(timeout=60)
            assert live.returncode == 0, live_err
        finally:
            for p in reversed(procs):
                if p.poll() is None:  # what is left if a step above failed before stopping it
                    p.terminate()
                    p.wait(10)

    legs = {}
    # the proxy -> relay leg is 2 x D from Tansu, as the proxy is; the relay -> Tansu leg beside it
    for leg, port, where in (("proxy-relay", relay_port, ["--away-from-broker"]), ("relay-tansu", tansu_port, [])):
        r = subprocess.run([sys.executable, "-m", "fetchlat.app", "pcap", str(cap), "--broker-port", str(port),
                            "--trace-dir", str(tmp_path / leg), "--quiet", *SAME_OVERSHOOT, *where],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "fetches" in r.stdout and "conversations:" in r.stdout
        legs[leg] = fetches(tmp_path / leg)
        assert {x["proxy_id"] for x in legs[leg]} == {"pcap:legs.pcap"}

    proxy_rows = fetches(tmp_path / "proxy")
    live_fetches = sum(float(ln.rsplit(" ", 1)[1]) for ln in scraped.splitlines()
                       if ln.startswith("fetchlat_fetches_total{"))
    assert live_fetches >= 0.5 * len(proxy_rows), "the live pipe's metrics lag"
    assert "conversations:" in live_out
    # the overshoot the capture's model adds to max wait, exported as a proxy's is, and said at the end
    assert "fetchlat_broker_expiry_overshoot_seconds 0.001" in scraped, scraped
    assert "expiry overshoot: 1 ms" in live_out, live_out
    assert len(proxy_rows) >= 30, "too few fetches to compare"
    pairs = match(proxy_rows, legs["proxy-relay"])
    same = sum(p["outcome"] == c["outcome"] for p, c in pairs)
    diff = {col: [abs(p[col] - c[col]) / MS for p, c in pairs] for col in ("total_ns", "wait_ns", "local_ns")}
    far = match(proxy_rows, legs["relay-tansu"])
    behind = [(p["local_ns"] - c["local_ns"]) / MS for p, c in far if p["outcome"] in ("immediate", "expired")]
    result = {
        "proxy_fetches": len(proxy_rows), "matched": len(pairs), "same_outcome": same,
        "outcomes": {o: sum(p["outcome"] == o for p, _ in pairs) for o in {p["outcome"] for p, _ in pairs}},
        **{f"{col}_abs_diff_ms": {"p50": round(statistics.median(v), 4), "p90": round(pct(v, 0.9), 4),
                                  "max": round(max(v), 4)} for col, v in diff.items()},
        "far_leg_matched": len(far), "local_minus_far_leg_local_ms_p50": round(statistics.median(behind), 3),
        "delay_ms_each_way": DELAY_MS, "live_pipe_fetches_scraped": live_fetches,
    }
    with RESULTS.open("a") as fh:
        fh.write(json.dumps(result) + "\n")
    print(json.dumps(result))
    assert len(pairs) >= 0.99 * len(proxy_rows), result
    assert same >= 0.99 * len(pairs), result
    for col, v in diff.items():
        assert statistics.median(v) <= 0.2, (col, result)
    assert len(behind) >= 10 and abs(statistics.median(behind) - 2 * DELAY_MS) <= 3, result

    # the capture's traces are the proxy's: fetchlat analyze reads them unchanged
    out = tmp_path / "report"
    r = subprocess.run([sys.executable, "-m", "fetchlat.app", "analyze", str(tmp_path / "proxy-relay"), "--out",
                        str(out), "--window", "10s", "--master", "local[2]"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    check_summary(json.loads((out / "summary.json").read_text()), independent_values(tmp_path / "proxy-relay"))
