"""A shortened ``fetchlat demo`` runs start to finish: real broker, real proxy, real load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_demo_runs_and_reports_fetch_and_produce() -> None:
    r = subprocess.run([sys.executable, "-m", "fetchlat.proxy", "demo", "--seconds", "6", "--rate", "100"],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {line.split()[1]: line.split() for line in r.stdout.splitlines() if line.startswith("│")}
    # the final table: client, fetches, naive total, wait, true local (medians over the run)
    def cells(client: str) -> tuple[int, float, float, float]:
        c = [x for x in rows[client] if x != "│"]
        return int(c[1]), float(c[2]), float(c[3]), float(c[4])

    # the idle consumer's long polls expire: naive total ~ max_wait, nearly all of it wait
    fetches, total, wait, local = cells("idle-wait-500ms")
    assert fetches >= 4 and 495 <= total <= 560 and wait == 500.0 and local < 60
    # fed consumers: every fetch is accounted, waits never exceed max_wait
    for client, max_wait in (("fed-wait-500ms", 500), ("fed-wait-100ms", 100), ("fed-wait-20ms", 20)):
        fetches, total, wait, local = cells(client)
        assert fetches >= 3 and wait <= max_wait and local <= total
    assert "Naive total" in r.stdout
    report = Path(r.stdout.split("Report: ")[1].split()[0])
    assert report.name == "report.html" and report.stat().st_size > 5_000
    summary = json.loads((report.parent / "summary.json").read_text())
    assert {b["kind"] for b in summary["brokers"]} == {"consumer"}
