"""A fleet's traces: many sidecars' files side by side in hour directories
(``metrics/trace_layout.py``). A time range reads only the hour directories it overlaps; the
layout before hour directories and files of other schema versions are read in the same run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from fetchlat.analysis import job
from fetchlat.metrics import trace_layout
from fetchlat.metrics.trace_schema import META_CLOCK, META_SCHEMA_VERSION, TABLES
from pyspark.sql import SparkSession

from .gen import load

gen = load()
HOUR = 3600 * 10**9
START_NS = 498_611 * HOUR  # an hour boundary


def _dirs(summary: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in summary["hour_directories"]["exchanges"].items() if k != "bytes"}


def count_in(trace_dir: Path, since: int, until: int) -> int:
    t = ds.dataset(trace_dir / "exchanges", format="parquet").to_table(columns=["ts_ns"])
    return int(pc.sum(pc.and_(pc.greater_equal(t["ts_ns"], since), pc.less(t["ts_ns"], until))).as_py())


def test_a_time_range_reads_only_its_hour_directories(spark: SparkSession, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    gen.generate(str(fleet), 30_000, brokers=4, start_ns=START_NS, duration_s=6 * 3600, seed=5)
    hours = sorted(p.relative_to(fleet / "exchanges").as_posix() for p in (fleet / "exchanges").glob("date=*/hour=*"))
    assert len(hours) == 6 and all(trace_layout.hour_of_dir(h) is not None for h in hours)
    for f in (fleet / "exchanges").rglob("*.parquet"):  # every file holds rows of its directory's hour only
        hour = trace_layout.hour_of_dir(f.parent.as_posix())
        ts = pq.read_table(f, columns=["ts_ns"])["ts_ns"]
        assert hour is not None and pc.min(ts).as_py() // HOUR == pc.max(ts).as_py() // HOUR == hour

    since, until = START_NS + 2 * HOUR + 600 * 10**9, START_NS + 3 * HOUR + 600 * 10**9  # 02:10 to 03:10
    s = job.run([str(fleet)], str(tmp_path / "o"), spark=spark, since_ns=since, until_ns=until)
    assert _dirs(s) == {"read": 2, "in_all": 6, "flat_files": 0}
    assert 0 < s["hour_directories"]["exchanges"]["bytes"] < sum(
        f.stat().st_size for f in (fleet / "exchanges").rglob("*.parquet")) / 2
    assert s["exchanges_read"] == count_in(fleet, since, until) > 0
    whole = job.run([str(fleet)], str(tmp_path / "all"), spark=spark)
    assert _dirs(whole) == {"read": 6, "in_all": 6, "flat_files": 0}
    assert whole["exchanges_read"] == 30_000


def _rewrite(path: Path, version: str, keep: list[str] | None = None, extra: str | None = None) -> None:
    """Rewrite a trace file as another schema version's writer would have: fewer columns (an
    older version) or one more (a newer one)."""
    t = pq.read_table(path)
    if keep is not None:
        t = t.select(keep)
    if extra is not None:
        t = t.append_column(extra, pa.array(["x"] * t.num_rows))
    meta = {META_SCHEMA_VERSION: version.encode(), META_CLOCK: json.dumps({"wall_ns": 0, "mono_ns": 0}).encode()}
    pq.write_table(t.replace_schema_metadata(meta), path)


def test_old_layout_and_other_schema_versions_are_read_together(spark: SparkSession, tmp_path: Path) -> None:
    gen.generate(str(tmp_path / "new"), 4_000, start_ns=START_NS, duration_s=600, seed=1)
    gen.generate(str(tmp_path / "flat"), 3_000, start_ns=START_NS, duration_s=600, seed=2, layout="mixed",
                 rows_per_file=1_000)  # files directly under exchanges/, the layout before hour directories
    flat = sorted((tmp_path / "flat" / "exchanges").glob("*.parquet"))
    assert len(flat) == 3
    older = TABLES["exchanges"].names[:20]  # an older writer: the pinned columns and two more
    _rewrite(flat[0], "0", keep=older)
    _rewrite(flat[1], "2", extra="a_column_from_the_future")
    s = job.run([str(tmp_path / "new"), str(tmp_path / "flat")], str(tmp_path / "o"), spark=spark)
    assert s["exchanges_read"] == 7_000
    assert _dirs(s) == {"read": 1, "in_all": 1, "flat_files": 3}
    assert sum(b["fetches"] for b in s["brokers"]) == 7_000 - sum(
        pc.sum(pc.equal(pq.read_table(f, columns=["api"])["api"], "Produce")).as_py()
        for f in [*flat, *(tmp_path / "new" / "exchanges").rglob("*.parquet")])
