"""The whole job on generated traces whose ground truth is known: a grey failure on one broker
pair is flagged with its size, a clean run flags nothing, summary.json agrees with
percentiles computed independently, and the report renders in a real browser."""

from __future__ import annotations

import datetime as dt
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from fetchlat.analysis import job
from pyspark.sql import SparkSession

from .gen import load

gen = load()
START_NS = 1_795_000_020 * 10**9


def spark_percentile(values: list[float], p: float) -> float:
    """percentile_approx's answer when exact: the smallest value with at least p of the data
    at or below it."""
    s = sorted(values)
    return s[max(0, math.ceil(p * len(s)) - 1)]


def independent_summary(trace_dir: Path) -> dict[tuple[str, str], dict[str, float]]:
    t = ds.dataset(trace_dir / "exchanges", format="parquet").to_table()
    t = t.filter(pc.and_(pc.equal(t["api"], "Fetch"), pc.is_valid(t["total_ns"])))
    out: dict[tuple[str, str], dict[str, float]] = {}
    rows = t.select(["broker", "kind", "total_ns", "wait_ns", "local_ns", "e2e_ns"]).to_pylist()
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["broker"], r["kind"]), []).append(r)
    for key, rs in groups.items():
        out[key] = {"fetches": len(rs)}
        for part in ("total", "wait", "local", "e2e"):
            vals = [r[f"{part}_ns"] / 1e6 for r in rs]
            for q, name in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99"), (0.999, "p999")):
                out[key][f"{part}_{name}"] = spark_percentile(vals, q)
    return out


def check_summary(summary: dict[str, Any], expected: dict[tuple[str, str], dict[str, float]]) -> None:
    got = {(b["broker"], b["kind"]): b for b in summary["brokers"]}
    assert set(got) == set(expected)
    for key, exp in expected.items():
        assert got[key]["fetches"] == exp["fetches"]
        for part in ("total", "wait", "local", "e2e"):
            for q in ("p50", "p90", "p99", "p999"):
                assert got[key][f"{part}_ms"][q] == pytest.approx(exp[f"{part}_{q}"], rel=1e-9), (key, part, q)


def test_grey_failure_is_flagged_with_its_size(spark: SparkSession, tmp_path: Path) -> None:
    grey = gen.Grey(leader=2, follower=3, start_s=240, length_s=60, extra_ms=15.0)
    gen.generate(str(tmp_path / "tr"), 60_000, grey=grey, start_ns=START_NS, duration_s=600, seed=7)
    summary = job.run([str(tmp_path / "tr")], str(tmp_path / "out"), window="1m", spark=spark)
    flagged = summary["flagged_pairs"]
    assert [(f["leader"], f["follower"]) for f in flagged] == [("2", 3)]
    start = dt.datetime.fromtimestamp(START_NS / 1e9 + 240, dt.UTC).isoformat()
    assert flagged[0]["window_start"] == start
    assert flagged[0]["shift_ms"] == pytest.approx(15.0, abs=1.5)
    check_summary(summary, independent_summary(tmp_path / "tr"))
    for table in ("latency_by_window", "summary", "outcome_mix", "pair_latency", "record_latency", "produce_latency",
                  "replication_latency", "slowest_clients", "slowest_partitions", "timeline"):
        assert list((tmp_path / "out" / "tables" / table).glob("*.parquet")), table


def test_a_clean_run_flags_nothing(spark: SparkSession, tmp_path: Path) -> None:
    gen.generate(str(tmp_path / "tr"), 60_000, grey=None, start_ns=START_NS, duration_s=600, seed=8)
    summary = job.run([str(tmp_path / "tr")], str(tmp_path / "out"), window="1m", spark=spark)
    assert summary["flagged_pairs"] == []


def test_several_proxies_and_a_time_range(spark: SparkSession, tmp_path: Path) -> None:
    gen.generate(str(tmp_path / "a"), 5_000, start_ns=START_NS, duration_s=100, seed=1)
    gen.generate(str(tmp_path / "b"), 5_000, start_ns=START_NS, duration_s=100, seed=2)
    (tmp_path / "a" / "exchanges" / ".tmp-being-written.parquet").write_bytes(b"not yet parquet")
    both = job.run([str(tmp_path / "a"), str(tmp_path / "b")], str(tmp_path / "o1"), spark=spark)
    assert both["exchanges_read"] == 10_000  # the dot file (a file still being written) is ignored
    half = job.run([str(tmp_path / "a")], str(tmp_path / "o2"), spark=spark, since_ns=START_NS + 50 * 10**9)
    assert 2_000 < half["exchanges_read"] < 3_000


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium not installed (make test installs it)")
def test_report_renders_with_charts_in_headless_chromium(spark: SparkSession, tmp_path: Path) -> None:
    gen.generate(str(tmp_path / "tr"), 20_000, grey=gen.Grey(1, 2, 120, 60, 25.0), start_ns=START_NS,
                 duration_s=300, seed=3)
    job.run([str(tmp_path / "tr")], str(tmp_path / "out"), window="1m", spark=spark)
    page = (tmp_path / "out" / "report.html").resolve().as_uri()
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chromium'}"]
    shot = tmp_path / "report.png"
    subprocess.run(["chromium", *flags, f"--screenshot={shot}", "--window-size=1000,2600", page],
                   capture_output=True, timeout=120, check=True)
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000  # a page with charts, not a blank one
    dom = subprocess.run(["chromium", *flags, "--dump-dom", page], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    assert 'class="chart empty"' not in dom
    assert dom.count('class="series"') >= 4  # naive total and true local, consumers and followers
    assert dom.count('class="bar"') >= 6 and dom.count('class="cell') >= 20
    assert dom.count('class="cell flagged"') == 1
