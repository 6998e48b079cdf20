"""``fetchlat perf produce`` and ``fetchlat perf consume`` as a user runs them, against a real
Tansu through the real proxy: the produce summary and the consume columns, --json, threads
capped at the partition count with a warning, per-thread rows."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from .conftest import JOIN_FAST, ProxyProc

pytestmark = pytest.mark.integration


def fetchlat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fetchlat.app", *args], capture_output=True, text=True,
                          timeout=180)


def test_perf_produce_then_consume(proxy: ProxyProc) -> None:
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    for f in admin.create_topics([NewTopic("perf", num_partitions=2, replication_factor=1)]).values():
        f.result(timeout=20)
    r = fetchlat("perf", "produce", "--bootstrap-server", proxy.bootstrap, "--topic", "perf", "--num-records",
                 "2000", "--record-size", "1024", "--throughput", "2000", "--acks", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["acked"] == 2000 and out["errors"] == 0
    assert 500 <= out["records_per_s"] <= 2100  # paced at 2000/s
    assert abs(out["mb_per_s"] - out["records_per_s"] * 1024 / 2**20) < 0.05
    lat = out["ack_latency"]
    assert lat["count"] == 2000 and 0 < lat["percentiles_ms"]["p50"] <= lat["percentiles_ms"]["p99.9"] <= lat["max_ms"]
    assert any(v != round(v, 1) for v in lat["percentiles_ms"].values()), "µs precision, not whole ms"
    assert out["blocked_in_send"]["count"] == 2000
    text = fetchlat("perf", "produce", "--bootstrap-server", proxy.bootstrap, "--topic", "perf", "--num-records",
                    "200", "--record-size", "100")
    assert text.returncode == 0 and "records/sec" in text.stdout and "time blocked in send" in text.stdout

    c = fetchlat("perf", "consume", "--bootstrap-server", proxy.bootstrap, "--topic", "perf", "--messages", "2200",
                 "--threads", "3", "--timeout", "15000", "--show-detailed-stats",
                 *(a for k, v in JOIN_FAST.items() for a in ("--consumer-prop", f"{k}={v}")))
    assert c.returncode == 0, c.stderr + c.stdout
    assert "--threads 3 is more than the 2 partitions of perf; using 2" in c.stderr
    lines = c.stdout.strip().splitlines()
    assert lines[0] == ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    total = dict(zip(lines[0].split(", "), lines[1].split(", "), strict=True))
    assert int(total["data.consumed.in.nMsg"]) == 2200
    assert float(total["rebalance.time.ms"]) > 0
    thread_rows = [x for x in lines[3:] if x[:2] in ("0,", "1,")]
    assert len(thread_rows) == 2  # one row per (capped) thread
    assert "end-to-end record latency" in lines[-1] and "p99.9" in lines[-1]
