"""The whole job on generated traces whose ground truth is known: a grey failure on one broker
pair is flagged with its size, a clean run flags nothing, summary.json agrees with
percentiles computed independently, and the report renders in a real browser."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
from pathlib import Path

import pytest
from fetchlat.analysis import job
from pyspark.sql import SparkSession

from tests.support.analysis_checks import check_summary, independent_values

from .gen import load

gen = load()
START_NS = 1_795_000_020 * 10**9


def test_grey_failure_is_flagged_with_its_size(spark: SparkSession, tmp_path: Path) -> None:
    grey = gen.Grey(leader=2, follower=3, start_s=240, length_s=60, extra_ms=15.0)
    gen.generate(str(tmp_path / "tr"), 60_000, grey=grey, start_ns=START_NS, duration_s=600, seed=7)
    summary = job.run([str(tmp_path / "tr")], str(tmp_path / "out"), window="1m", spark=spark)
    flagged = summary["flagged_pairs"]
    assert [(f["leader"], f["follower"]) for f in flagged] == [("2", 3)]
    start = dt.datetime.fromtimestamp(START_NS / 1e9 + 240, dt.UTC).isoformat()
    assert flagged[0]["window_start"] == start
    assert flagged[0]["shift_ms"] == pytest.approx(15.0, abs=1.5)
    check_summary(summary, independent_values(tmp_path / "tr"))
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
