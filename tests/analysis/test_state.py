"""Per-hour products kept beside the report (``analysis/state.py``): a run over hours already
analysed reads only the new or changed hours from the traces, and its tables equal a full run's
to the last bit."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from fetchlat.analysis import job
from pyspark.sql import SparkSession

from .gen import load

pytestmark = pytest.mark.long  # 90-105 s: make test-long (make test stays within its 25 minutes)
gen = load()
HOUR = 3600 * 10**9
START_NS = 498_700 * HOUR  # an hour boundary


def tables(out: Path) -> dict[str, list[dict[str, object]]]:
    return {d.name: pq.read_table(d).to_pylist() for d in sorted((out / "tables").iterdir())}


def test_a_later_run_reads_only_new_or_changed_hours_and_agrees_with_a_full_run(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet, later = tmp_path / "fleet", tmp_path / "later"
    # four hours of traces; the fleet first has the first three, then the fourth arrives
    gen.generate(str(later), 24_000, brokers=3, start_ns=START_NS, duration_s=4 * 3600, seed=7)
    shutil.rmtree(later / "replication")  # as on a single broker: a product no hour has a row of is never written
    last = sorted(p.name for p in later.glob("exchanges/date=*/hour=*"))[-1]
    shutil.copytree(later, fleet, ignore=lambda d, names: [n for n in names if n == last])
    assert len(list(fleet.glob("exchanges/date=*/hour=*"))) == 3
    state = tmp_path / "state"

    first = job.run([str(fleet)], str(tmp_path / "r1"), spark=spark, state_dir=str(state))
    assert first["state"]["hours_kept"] == 3 and first["state"]["hours_reused"] == 0
    shutil.copytree(later, fleet, dirs_exist_ok=True)  # the fourth hour arrives
    # and a file arrives late in an old hour: that hour is computed again, the others are reused
    late = sorted((fleet / "exchanges").glob("date=*/hour=*"))[1]
    source = next(iter(sorted(late.glob("*.parquet"))))
    shutil.copy(source, late / ("late-" + source.name))

    second = job.run([str(fleet)], str(tmp_path / "r2"), spark=spark, state_dir=str(state))
    assert (second["state"]["hours_reused"], second["state"]["hours_kept"]) == (2, 2)
    assert second["hour_directories"]["exchanges"]["read"] == 2  # only the new and the changed hour's traces
    full = job.run([str(fleet)], str(tmp_path / "full"), spark=spark)  # no state: every hour from the traces
    assert full["state"]["hours_reused"] == 0
    assert second["exchanges_read"] == full["exchanges_read"] > 24_000
    assert tables(tmp_path / "r2") == tables(tmp_path / "full")
    # the one pass's lists brought to the driver a window at a time give the same tables
    monkeypatch.setattr(job, "ROWS_TO_THE_DRIVER", 1)
    job.run([str(fleet)], str(tmp_path / "hourly"), spark=spark)
    assert tables(tmp_path / "hourly") == tables(tmp_path / "full")

    # what the products depend on besides their inputs: another window or SLA reuses nothing
    inputs = {t: job.table_inputs(spark, [str(fleet)], t) for t in job.TRACE_TABLES}
    for window, sla in (("1m", 5000.0), ("5m", 5000.0), ("1m", 500.0)):
        plan = job._plan(spark, [str(fleet)], inputs, str(state), window, sla, None, None)
        assert (len(plan.reused), len(plan.fresh)) == ((4, 0) if (window, sla) == ("1m", 5000.0) else (0, 4))
    # a window that does not divide an hour, or a range that cuts one: those hours are not kept
    assert job._plan(spark, [str(fleet)], inputs, str(state), "7m", 5000.0, None, None).why_not
    cut = job._plan(spark, [str(fleet)], inputs, str(state), "1m", 5000.0, START_NS + HOUR // 2, None)
    assert (len(cut.reused), len(cut.fresh)) == (3, 0)
