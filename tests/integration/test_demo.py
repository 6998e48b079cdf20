"""A shortened ``fetchlat demo`` runs start to finish: real broker, real proxy, real load."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_demo_runs_and_reports_fetch_and_produce() -> None:
    r = subprocess.run([sys.executable, "-m", "fetchlat.proxy", "demo", "--seconds", "6", "--rate", "100"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {line.split()[1]: line.split() for line in r.stdout.splitlines() if line.startswith("│")}
    assert int(rows["Produce"][3]) > 100
    assert int(rows["Fetch"][3]) > 5
    assert "purgatory" in r.stdout
