"""The driver's side of ``fetchlat analyze`` stands without Spark: ``tables`` (what both sides
agree on) and ``finish`` (the tables finished with numpy and pyarrow) import in a Python where
pyspark cannot be imported at all, and the Spark side takes its keys and buckets from them."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run_without_pyspark(code: str) -> subprocess.CompletedProcess[str]:
    prelude = textwrap.dedent("""
        import sys
        sys.modules["pyspark"] = None  # any import of pyspark or a module of it now fails
    """)
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=60)


def test_the_driver_side_imports_with_pyspark_absent() -> None:
    r = _run_without_pyspark("""
        import fetchlat.analysis.finish as finish, fetchlat.analysis.tables as tables
        assert callable(finish.hist_quantiles) and tables.PARTS == ("total", "wait", "local", "e2e")
        assert not any(m == "pyspark" or m.startswith("pyspark.") for m in sys.modules if sys.modules[m])
        print("ok")
    """)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_the_check_would_see_a_module_that_needs_spark() -> None:
    r = _run_without_pyspark("import fetchlat.analysis.transforms")
    assert r.returncode != 0 and "pyspark" in r.stderr
