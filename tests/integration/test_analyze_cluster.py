"""``fetchlat analyze`` on a real Spark standalone cluster (a master and two workers started from
pyspark's jars in a bare environment, testkit/spark_cluster.py), over the traces of a
fleet (many generated sidecars in one shared directory, plus a real proxy's run): the tables
and summary.json equal the same job's on ``local[2]`` exactly, by ``fetchlat analyze --master
spark://`` and by ``spark-submit``. The executors need nothing of fetchlat: the workers run from
``env -i``, and the driver names a Python that does not exist for them, so any Python work sent
to an executor would fail the job."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from testkit.spark_cluster import spark_home, standalone
from tests.analysis.gen import load

from .conftest import Broker
from .test_analyze_e2e import real_proxy_traces

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("java") is None, reason="no Java: Spark's master and workers need it")]

NO_PYTHON = "/nonexistent/python3"  # what an executor would run for Python work
START_NS = 1_795_000_020 * 10**9


def driver_env() -> dict[str, str]:
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": NO_PYTHON,
            "PYSPARK_DRIVER_PYTHON": sys.executable, "FETCHLAT_SPARK_DRIVER_MEMORY": "1g"}


def analyze(args: list[str], env: dict[str, str]) -> None:
    r = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-4000:]


def results(out: Path) -> dict[str, Any]:
    """Every table's rows and summary.json, less what names the run (its time, its length)."""
    got: dict[str, Any] = {t.name: pq.read_table(t).to_pylist() for t in sorted((out / "tables").iterdir())}
    summary = json.loads((out / "summary.json").read_text())
    for k in ("generated_at", "seconds"):
        summary.pop(k)
    got["summary.json"] = summary
    return got


def test_cluster_results_equal_local(tansu: Broker, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"  # six sidecars writing side by side into one directory
    load().generate(str(fleet), 120_000, brokers=6, clients=30, start_ns=START_NS, duration_s=900, seed=11,
                    grey=load().Grey(2, 5, 300, 120, 12.0))
    real = real_proxy_traces(tansu, tmp_path)
    inputs = [str(fleet), str(real)]
    cmd = [sys.executable, "-m", "fetchlat.app", "analyze", *inputs, "--window", "1m"]
    analyze([*cmd, "--out", str(tmp_path / "local"), "--master", "local[2]"], driver_env())
    local = results(tmp_path / "local")
    assert local["summary.json"]["exchanges_read"] > 120_000  # the fleet and the real run
    assert local["summary.json"]["flagged_pairs"]

    with standalone(tmp_path / "spark") as cluster:
        analyze([*cmd, "--out", str(tmp_path / "cluster"), "--master", cluster.master_url], driver_env())
        submit = [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url,
                  "--deploy-mode", "client", "--executor-memory", "1g",
                  str(Path(__import__("fetchlat.analysis").analysis.__file__).with_name("__main__.py")),
                  *inputs, "--window", "1m", "--out", str(tmp_path / "submitted")]
        analyze(submit, driver_env())
        apps = cluster.completed_apps()
    assert [a["state"] for a in apps] == ["FINISHED", "FINISHED"]
    # both workers ran executors of both applications (their work dirs hold the executors' logs,
    # a directory per application; an executor the master relaunched on a loaded machine adds
    # one more of the same application)
    for worker in sorted(d for d in (tmp_path / "spark").glob("worker-*") if d.is_dir()):
        ran = {p.parent.parent.name for p in worker.glob("app-*/*/stderr")}
        assert ran == {a["id"] for a in apps}, (worker, ran)

    assert results(tmp_path / "cluster") == local
    assert results(tmp_path / "submitted") == local
