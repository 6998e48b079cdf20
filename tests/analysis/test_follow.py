"""``fetchlat analyze --every`` (``analysis/follow.py``): one Spark session kept between runs, a
run whenever the traces have changed and settled, reading only new or changed hours."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fetchlat.analysis import follow, job, state
from pyspark.sql import SparkSession

from .gen import load
from .test_state import START_NS, tables

gen = load()


def test_a_run_starts_once_the_listing_has_changed_and_stayed_the_same_for_one_look() -> None:
    looks = iter(["a", "a",  # run 1, and the look after it
                  "a",  # nothing new
                  "b",  # files arriving: not settled yet
                  "b",  # settled: run 2
                  "c",  # the look after run 2: something landed during it
                  "c",  # settled: run 3
                  ])
    seen: list[str] = []
    ran: list[str] = []

    def look() -> str:
        seen.append(next(looks))
        return seen[-1]

    said: list[int] = []
    done = follow.follow(lambda: ran.append(seen[-1]) or {}, look, 1.0,
                         lambda n, summary: said.append(n), _no_failure, runs=3, sleep=lambda s: None)
    assert (done, ran, said) == (3, ["a", "b", "c"], [1, 2, 3])
    assert len(seen) == 7


def test_unchanged_traces_start_no_run() -> None:
    ran: list[int] = []
    looks = 0

    def look() -> str:
        nonlocal looks
        looks += 1
        if looks > 20:
            raise KeyboardInterrupt  # the bound of this test; the command stops this way on Ctrl-C
        return "same"

    with pytest.raises(KeyboardInterrupt):
        follow.follow(lambda: ran.append(1) or {}, look, 1.0, lambda n, s: None, _no_failure, runs=2,
                      sleep=lambda s: None)
    assert ran == [1]


def test_a_failed_run_is_told_and_the_next_change_runs_again() -> None:
    looks = iter(["a", "a", "a", "b", "b"])
    outcomes: list[str] = []

    def run() -> dict[str, object]:
        if not outcomes:
            raise OSError("file:/traces/x.parquet is not a Parquet file")
        return {}

    done = follow.follow(run, lambda: next(looks), 1.0, lambda n, s: outcomes.append(f"{n} ok"),
                         lambda n, exc: outcomes.append(f"{n} failed: {exc}"), runs=2, sleep=lambda s: None)
    assert done == 2
    assert outcomes == ["1 failed: file:/traces/x.parquet is not a Parquet file", "2 ok"]


def _no_failure(n: int, exc: Exception) -> None:
    raise AssertionError(f"run {n} failed: {exc}")


def test_the_listing_names_every_input_file_by_size_and_time(spark: SparkSession, tmp_path: Path) -> None:
    gen.generate(str(tmp_path), 2_000, brokers=2, start_ns=START_NS, duration_s=2 * 3600, seed=3)
    second_hour = START_NS + 3600 * 10**9
    before = follow.listing(spark, [str(tmp_path)], None, None)
    later_hour = follow.listing(spark, [str(tmp_path)], second_hour, None)
    assert follow.listing(spark, [str(tmp_path)], None, None) == before != later_hour
    f = sorted(tmp_path.glob("partitions/date=*/hour=*/*.parquet"))[0]  # a file of the first hour
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))  # rewritten in place
    touched = follow.listing(spark, [str(tmp_path)], None, None)
    assert touched != before
    # before --since: not read, so a change there starts no run
    assert follow.listing(spark, [str(tmp_path)], second_hour, None) == later_hour
    shutil.copy(f, f.with_name(".tmp-" + f.name))  # a file still being written is no input
    assert follow.listing(spark, [str(tmp_path)], None, None) == touched
    shutil.copy(f, f.with_name("late-" + f.name))  # a file added late is
    assert follow.listing(spark, [str(tmp_path)], None, None) != touched
    # a local hour directory is listed by the OS: the very entries Hadoop's layer gives (a kept
    # state's fingerprints stay valid), a name starting with "_" or "." and a directory left out
    (f.parent / "_SUCCESS").write_bytes(b"")
    (f.parent / "sub.parquet").mkdir()
    hour_dir = job.table_inputs(spark, [str(tmp_path)], "partitions")[0][0]
    assert hour_dir.startswith("file:/")
    listed = state.files(spark, hour_dir)
    assert sorted(listed) == sorted(state.hadoop_files(spark, hour_dir)) and len(listed) >= 2


def test_a_run_replaces_each_output_whole(tmp_path: Path) -> None:
    """A reader of the report directory while ``--every`` runs sees one whole table or the other."""
    path = tmp_path / "tables" / "t"
    for n in (3, 5):
        job.write_table(pa.table({"x": list(range(n))[::-1]}), str(path), ("x",))
        assert pq.read_table(path).column("x").to_pylist() == list(range(n))
        job.write_whole(str(tmp_path / "summary.json"), json.dumps({"n": n}))
        assert json.loads((tmp_path / "summary.json").read_text()) == {"n": n}
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["part-00000.parquet", "summary.json", "t", "tables"]


@pytest.mark.long  # a fresh JVM and three runs: ~2 min (make test-long)
def test_the_command_keeps_its_session_and_reads_only_the_hour_that_arrived(spark: SparkSession,
                                                                             tmp_path: Path) -> None:
    day, fleet, out = tmp_path / "day", tmp_path / "fleet", tmp_path / "out"
    gen.generate(str(day), 12_000, brokers=3, start_ns=START_NS, duration_s=3 * 3600, seed=11)
    last = gen.split_last_hour(str(day), str(fleet))
    proc = subprocess.Popen([sys.executable, "-m", "fetchlat.app", "analyze", str(fleet), "--out", str(out),
                             "--every", "1s", "--runs", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "FETCHLAT_SPARK_DRIVER_MEMORY": "1g"})
    try:
        lines = []
        deadline = time.monotonic() + 240
        assert proc.stderr is not None
        for line in proc.stderr:  # bounded by the deadline below and by the process's exit
            lines.append(line)
            if "run 1 done" in line or time.monotonic() > deadline:
                break
        assert any("run 1 done" in line for line in lines), lines[-20:]
        first = json.loads((out / "summary.json").read_text())
        assert (first["state"]["hours_kept"], first["state"]["hours_reused"]) == (2, 0)
        gen.hour_arrives(str(day), str(fleet), last)
        for line in proc.stderr:  # bounded by the deadline and by the process's exit
            lines.append(line)
            if "run 2 done" in line or time.monotonic() > deadline + 240:
                break
        proc.send_signal(signal.SIGTERM)  # as a service manager stops it
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    err = "".join(lines) + err
    assert proc.returncode == 0, err[-2000:]
    assert "run 2: " in err and "run 2 done" in err and "run 3" not in err
    assert err.rstrip().endswith("fetchlat analyze: stopped"), err[-500:]
    second = json.loads((out / "summary.json").read_text())
    assert (second["state"]["hours_reused"], second["state"]["hours_kept"]) == (2, 1)
    assert second["hour_directories"]["exchanges"]["read"] == 1
    full = job.run([str(fleet)], str(tmp_path / "full"), spark=spark)
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in fleet.glob("exchanges/date=*/hour=*/*.parquet"))
    assert second["exchanges_read"] == full["exchanges_read"] == rows
    assert tables(out) == tables(tmp_path / "full")
