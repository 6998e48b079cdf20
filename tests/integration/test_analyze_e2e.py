"""``fetchlat analyze`` on traces written by a real proxy run (Tansu + real clients): the
command's summary.json equals percentiles computed independently with pyarrow from the
same files."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from testkit.analysis_checks import check_summary, independent_values

from .conftest import Broker, start_proxy, stop_proxy
from .test_ground_truth import confluent_consume, create_topic

pytestmark = pytest.mark.integration


def real_proxy_traces(tansu: Broker, tmp_path: Path) -> Path:
    """Traces of a real proxy in front of Tansu: a consumer on a fed topic and one on an idle
    topic (fetches that park), while a producer writes every 150 ms."""
    from confluent_kafka import Producer

    traces = tmp_path / "traces"
    p = start_proxy(tansu.bootstrap, tmp_path, "--trace-dir", str(traces))
    try:
        idle, fed = f"idle-{uuid.uuid4().hex[:6]}", f"fed-{uuid.uuid4().hex[:6]}"
        create_topic(p.bootstrap, idle, 0)
        create_topic(p.bootstrap, fed, 50)
        stop = threading.Event()

        def produce() -> None:
            prod = Producer({"bootstrap.servers": p.bootstrap, "linger.ms": 0})
            while not stop.is_set():
                prod.produce(fed, value=b"x")
                prod.poll(0)
                stop.wait(0.15)
            prod.flush(10)

        t = threading.Thread(target=produce)
        t.start()
        a = threading.Thread(target=confluent_consume, args=(p.bootstrap, idle, "e2e-idle", 3.0, 1 << 20))
        a.start()
        confluent_consume(p.bootstrap, fed, "e2e-fed", 3.0, 1 << 20)
        a.join()
        stop.set()
        t.join()
    finally:
        stop_proxy(p)
    return traces


def test_analyze_real_proxy_traces(tansu: Broker, tmp_path: Path) -> None:
    traces = real_proxy_traces(tansu, tmp_path)
    out = tmp_path / "report"
    r = subprocess.run([sys.executable, "-m", "fetchlat.app", "analyze", str(traces), "--out", str(out),
                        "--window", "10s", "--master", "local[2]"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("report.html")
    summary = json.loads((out / "summary.json").read_text())
    expected = independent_values(traces)
    assert len(expected[("111", "consumer")]["total"]) >= 10
    check_summary(summary, expected)
    assert (out / "report.html").stat().st_size > 5_000
