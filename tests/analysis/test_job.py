"""The whole job on generated traces whose ground truth is known: a grey failure on one broker
pair is flagged with its size, a clean run flags nothing, summary.json agrees with
percentiles computed independently (the report in a browser: test_report.py)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from fetchlat.analysis import job
from pyspark.sql import SparkSession

from testkit.analysis_checks import check_summary, independent_values

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
                  "replication_latency", "slowest_clients", "slowest_partitions", "timeline", "broker_timeline"):
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


def test_the_steps_weights_make_a_whole_run() -> None:
    """The progress bar and the demo's "100% done" add the steps' weights: they must sum to 100."""
    assert sum(job.WEIGHTS.values()) == 100
