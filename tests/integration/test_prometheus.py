"""A real Prometheus (Debian ``prometheus``) scrapes a real proxy under load — producers with
two acks settings, long-poll and short-poll consumers, synthetic follower fetches (no
follower broker exists here), a decode failure and an HTTP request on the Kafka port — and
every PromQL expression of every dashboard panel and alert rule goes through its HTTP API:
all parse, and every panel returns data."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fetchlat.protocol import apis
from fetchlat.protocol.framing import request_frame

from .conftest import TANSU_NODE_ID, Broker, ProxyProc, free_ports, start_proxy, stop_proxy, wait_port
from .test_bad_input import attack
from .test_ground_truth import create_topic
from .test_routing import Client

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RATE_INTERVAL = "20s"  # what $__rate_interval stands for here: scrapes every second
LOAD_S = 22.0
# needs a broker that throttles (quotas): Tansu does not, so this panel is empty here
# (test_kafka_quotas.py has Apache Kafka throttle both and checks the metrics behind them)
NEEDS_THROTTLING = {"fetchlat-truth / Throttle time the broker asked for, p99 (throttled fetches only)",
                    "fetchlat-replication / Produce throttle the broker asked for, p99 (throttled produces only)"}


class Prom:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:  # a bad expression answers 400 with the reason
            return json.loads(e.read())


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[Prom, Path]]:
    if shutil.which("prometheus") is None:
        pytest.fail("Debian 'prometheus' is not installed: run make test (it installs it)")
    port = free_ports(0)
    cfg_dir = tmp_path / "prom"
    cfg_dir.mkdir()
    shutil.copy(DEPLOY / "prometheus" / "alerts.yml", cfg_dir / "alerts.yml")
    proc: subprocess.Popen[bytes] | None = None

    def start(target: str) -> Prom:
        nonlocal proc
        (cfg_dir / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": ["alerts.yml"],
            "scrape_configs": [{"job_name": "fetchlat", "static_configs": [{"targets": [target]}]}],
        }))
        log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - the server's stderr
        proc = subprocess.Popen(["prometheus", f"--config.file={cfg_dir / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT)
        wait_port(port, 30)
        return Prom(port)

    try:
        yield start, tmp_path  # type: ignore[misc]
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(20)


def fetch_req(replica: int, topic: str, topic_id: uuid.UUID, offset: int, max_wait_ms: int) -> dict[str, Any]:
    return {"ReplicaState": {"ReplicaId": replica, "ReplicaEpoch": 1}, "MaxWaitMs": max_wait_ms, "MinBytes": 1,
            "MaxBytes": 1 << 20, "IsolationLevel": 0, "SessionId": 0, "SessionEpoch": -1,
            "Topics": [{"Topic": topic, "TopicId": topic_id, "Partitions": [
                {"Partition": 0, "CurrentLeaderEpoch": -1, "FetchOffset": offset, "LastFetchedEpoch": -1,
                 "LogStartOffset": 0, "PartitionMaxBytes": 1 << 20}]}],
            "ForgottenTopicsData": [], "RackId": ""}


def run_load(proxy: ProxyProc, stop: threading.Event, errors: list[str]) -> list[threading.Thread]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    topic = f"prom-{uuid.uuid4().hex[:6]}"
    create_topic(proxy.bootstrap, topic, 0)

    def guard(fn: Any) -> Any:
        def run() -> None:
            try:
                fn()
            except Exception as exc:  # reported by the test, not lost in a thread
                errors.append(f"{fn.__name__}: {exc!r}")
        return run

    def produce(acks: str) -> Any:
        def producer() -> None:
            p = Producer({"bootstrap.servers": proxy.bootstrap, "linger.ms": 0, "acks": acks})
            while not stop.wait(0.05):
                p.produce(topic, value=b"x" * 100, partition=0)
                p.poll(0)
            p.flush(10)
        return producer

    def consume(wait_ms: int) -> Any:
        def consumer() -> None:
            c = Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": f"g{wait_ms}",
                          "client.id": f"wait-{wait_ms}ms", "fetch.wait.max.ms": wait_ms})
            c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            while not stop.is_set():
                c.poll(0.1)
            c.close()
        return consumer

    def follower(replica: int) -> Any:
        def fetcher() -> None:
            c = Client(proxy.listen_port + 1 + TANSU_NODE_ID)
            md = c.call(apis.METADATA, 12, {"Topics": [{"Name": topic, "TopicId": uuid.UUID(int=0)}]})
            topic_id, offset = md["Topics"][0]["TopicId"], 0
            while not stop.is_set():  # bounded by the load's duration
                r = c.call(apis.FETCH, 15, fetch_req(replica, topic, topic_id, offset, 200))
                offset = max(offset, r["Responses"][0]["Partitions"][0]["HighWatermark"])
            c.close()
        return fetcher

    fns = [produce("1"), produce("all"), consume(500), consume(20), follower(2), follower(3)]
    threads = [threading.Thread(target=guard(f), daemon=True) for f in fns]
    for t in threads:
        t.start()
    return threads


def bad_input(proxy: ProxyProc) -> None:
    # a Fetch v12 whose body is cut short: forwarded untouched, counted as a decode error
    s = __import__("socket").create_connection(("127.0.0.1", proxy.listen_port), timeout=5)
    s.sendall(request_frame(apis.FETCH, 12, 7, "x", b"\x00\x00\x00"))
    time.sleep(0.3)
    s.close()
    assert attack(proxy.listen_port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # http_on_plaintext


def dashboard_queries() -> list[tuple[str, str, list[str]]]:
    out = []
    for f in sorted((DEPLOY / "grafana" / "dashboards").glob("*.json")):
        d = json.loads(f.read_text())
        for p in d["panels"]:
            out.append((f.stem, p["title"], [t["expr"] for t in p["targets"]]))
    return out


def substitute(expr: str) -> str:
    for var in ("broker", "kind", "topic", "client"):
        expr = expr.replace(f"${var}", ".*")
    return expr.replace("$__rate_interval", RATE_INTERVAL)


def finite(result: list[dict[str, Any]]) -> bool:
    return any(not math.isnan(float(r["value"][1])) for r in result)


def test_every_panel_and_alert_runs_on_a_real_prometheus(tansu: Broker, prometheus: Any) -> None:
    start, tmp_path = prometheus
    proxy = start_proxy(tansu.bootstrap, tmp_path, "--trace-dir", str(tmp_path / "traces"), "--loop-probe")
    stop, errors = threading.Event(), []
    try:
        prom = start(f"127.0.0.1:{proxy.metrics_port}")
        threads = run_load(proxy, stop, errors)
        bad_input(proxy)
        time.sleep(LOAD_S)  # load keeps running while the queries below see the last 20 s
        no_data, failed = [], []
        for dash, title, exprs in dashboard_queries():
            got = False
            for expr in exprs:
                r = prom.get("/api/v1/query", query=substitute(expr))
                if r["status"] != "success":
                    failed.append(f"{dash} / {title}: {r.get('error')}")
                    continue
                got = got or finite(r["data"]["result"])
            if not got and f"{dash} / {title}" not in NEEDS_THROTTLING:
                no_data.append(f"{dash} / {title}")
        rules = prom.get("/api/v1/rules")["data"]["groups"][0]["rules"]
        alert_exprs = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())["groups"][0]["rules"]
        for rule in alert_exprs:
            r = prom.get("/api/v1/query", query=rule["expr"])
            if r["status"] != "success":
                failed.append(f"alert {rule['alert']}: {r.get('error')}")
        up = prom.get("/api/v1/query", query='up{job="fetchlat"}')["data"]["result"]
    finally:
        stop.set()
        stop_proxy(proxy)
    for t in threads:
        t.join(15)
    assert not errors
    assert not failed, failed
    assert not no_data, f"panels without data: {no_data}"
    assert len(dashboard_queries()) >= 35
    assert len(rules) == len(alert_exprs) == 7 and all(r["health"] == "ok" for r in rules), rules
    assert [float(u["value"][1]) for u in up] == [1.0]
