"""The compiled hot path and its pure-Python source are the same program: both builds replay
every captured conversation of real clients, whole and cut into chunks hypothesis draws, and
must give the same codec events, the same bytes out each way, the same core actions, the same
trace rows and the same metric samples (``testkit/replay_dump.py``, run once per build
in its own process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fetchlat.protocol import compiled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit.captures import conversations

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("confluent", "kafkapython", "aiokafka", "kcat", "admin", "sasl-kafkapython", "sasl-tansu-scram")
CONVERSATIONS = [(run, conn, len(frames)) for run in RUNS for conn, frames in sorted(conversations(run).items())]


def run_build(plans: list[dict[str, Any]], *, pure: bool) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    if pure:
        env[compiled.PURE_ENV] = "1"
    r = subprocess.run([sys.executable, "-m", "testkit.replay_dump"], input=json.dumps({"plans": plans}),
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def compiled_build_expected() -> bool:
    return os.environ.get(compiled.PURE_ENV, "") in ("", "0")


def plans() -> list[dict[str, Any]]:
    whole = [{"run": run, "conn": conn, "cuts": []} for run, conn, _ in CONVERSATIONS]
    drawn: list[dict[str, Any]] = []

    @settings(max_examples=60, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        run, conn, n = data.draw(st.sampled_from(CONVERSATIONS))
        cuts = data.draw(st.lists(st.lists(st.integers(0, 1 << 16), max_size=6), min_size=n, max_size=n))
        drawn.append({"run": run, "conn": conn, "cuts": cuts})

    draw()
    return whole + drawn


@pytest.mark.skipif(not compiled_build_expected(), reason="FETCHLAT_PURE_PYTHON is set: only one build to run")
def test_both_builds_give_the_same_events_bytes_rows_and_samples() -> None:
    p = plans()
    fast, pure = run_build(p, pure=False), run_build(p, pure=True)
    assert fast["hot_path"] in ("compiled", "native"), "the compiled build did not load (see tests/proxy/test_build.py)"
    assert pure["hot_path"] == "python"
    assert len(fast["out"]) == len(p) > len(CONVERSATIONS)
    for plan, a, b in zip(p, fast["out"], pure["out"], strict=True):
        assert a == b, f"the builds differ on {plan['run']} conn {plan['conn']} cuts {plan['cuts']}"
    assert any(o["samples"] for o in fast["out"]) and any(o["rows"] for o in fast["out"])
