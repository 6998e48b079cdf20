"""``fetchlat verify`` end to end on files: a request log in fetchlat's layout and a trace
directory in the trace layout, joined and judged per kind; the table, the JSON, ``--check``
and the errors a user meets (a log without its node, a missing file)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fetchlat.app.cli import main
from fetchlat.metrics import trace_layout, trace_schema

from .test_request_log import _line

MS = 1_000_000
T0_MS = 1764057600000  # the first line's time


def _trace(tmp: Path, rows: list[dict[str, Any]]) -> Path:
    """The rows as one trace file, where a proxy's writer puts it."""
    full = [{**trace_schema.empty_row("exchanges"), **r} for r in rows]
    table = pa.Table.from_pylist(full, schema=trace_schema.EXCHANGES)
    d = tmp / "traces" / "exchanges" / trace_layout.hour_dir(trace_layout.hour_of(rows[0]["ts_ns"]))
    d.mkdir(parents=True)
    pq.write_table(table, d / trace_layout.file_name(rows[0]["ts_ns"], "p1"))
    return tmp / "traces"


def _setup(tmp: Path, wait_ms: float = 100.4) -> tuple[Path, Path]:
    """Ten expired consumer fetches (max wait 100 ms; the broker: remote 101.0, total 101.5) and
    ten immediate ones; fetchlat measured total 101.6 ms for the expired ones."""
    lines, rows = [], []
    for i in range(20):
        expired = i < 10
        end = T0_MS + i * 200
        lines.append(_line(i, "c1", 101.0 if expired else 0.0, prefix=str(end), total=101.5 if expired else 0.5,
                           records=0 if expired else 100))
        total = 101.6 if expired else 0.6
        wait = wait_ms if expired else 0.0
        rows.append({"ts_ns": int((end - total) * MS), "broker": "0", "api": "Fetch", "client_id": "c1",
                     "correlation_id": i, "kind": "consumer", "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1,
                     "total_ns": int(total * MS), "wait_ns": int(wait * MS), "local_ns": int((total - wait) * MS),
                     "outcome": "expired" if expired else "immediate", "records": 0 if expired else 1})
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / "request.log"
    log.write_text("\n".join(lines) + "\n")
    return log, _trace(tmp, rows)


def test_the_table_per_kind_and_outcome(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log, traces = _setup(tmp_path)
    assert main(["verify", "--request-log", str(log), "--traces", str(traces)]) == 0  # one broker: node from the traces
    out = capsys.readouterr().out
    assert "brokers 0: 20 fetches in the traces, 20 fetch lines" in out
    consumer = next(line for line in out.splitlines() if line.startswith("consumer"))
    assert consumer.split()[2:5] == ["20", "100.0%", "100.0%"]
    expired = next(line for line in out.splitlines() if line.split()[:1] == ["expired"])
    # wait 100.4 against remote 101.0; local 1.2 against the broker's 0.5
    assert expired.split()[1:] == ["10", "100.0%", "0.60", "0.60", "+0.70"]
    assert "expiry overshoot" in out and ": 1.00 ms" in out


def test_json_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log, traces = _setup(tmp_path / "a", wait_ms=101.0)  # local 0.6 against the broker's 0.5: within the goals
    assert main(["verify", "--request-log", f"0={log}", "--traces", str(traces), "--json", "--check"]) == 0
    figures = json.loads(capsys.readouterr().out)["kinds"]["consumer"]
    assert figures["matched"] == 20 and figures["outcome_agree_share"] == 1.0
    assert abs(figures["local_bias_p50_ms"]["expired"] - 0.1) < 1e-5
    assert abs(figures["local_bias_p50_ms"]["immediate"] - 0.1) < 1e-5
    log, traces = _setup(tmp_path / "b")  # wait 100.4: local 1.2 against 0.5
    assert main(["verify", "--request-log", f"0={log}", "--traces", str(traces), "--check"]) == 1
    err = capsys.readouterr().err
    assert "consumer: bias of true local for expired fetches +0.70 ms (goal within ±0.2 ms)" in err
    # a round trip of 0.1 ms to the broker taken off moves the bias, not the wait
    assert main(["verify", "--request-log", f"0={log}", "--traces", str(traces), "--json", "--network-ms", "0.1"]) == 0
    figures = json.loads(capsys.readouterr().out)["kinds"]["consumer"]
    assert abs(figures["local_bias_p50_ms"]["expired"] - 0.6) < 1e-5


def test_what_a_user_gets_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log, traces = _setup(tmp_path)
    assert main(["verify", "--request-log", str(tmp_path / "nope.log"), "--traces", str(traces)]) == 2
    assert "no such request log" in capsys.readouterr().err
    assert main(["verify", "--request-log", str(log), "--request-log", str(log), "--traces", str(traces)]) == 2
    assert "give each log as NODE=FILE" in capsys.readouterr().err
    assert main(["verify", "--request-log", f"7={log}", "--traces", str(traces)]) == 1
    assert "no fetch in" in capsys.readouterr().err


def test_parts_say_where_the_error_lies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The expired fetches: the broker parked them after its queue and local time (0.1 + 0.5 ms)
    and let them go 101.0 ms later; fetchlat's wait began at a consumer's park and lasted
    100.4 ms: its wait 0.6 ms short. Its total is 0.1 ms beyond the broker's: the bias of true
    local is 0.1 + 0.6."""
    from fetchlat.metrics.broker_timing import CONSUMER_PARK_NS

    park = CONSUMER_PARK_NS / MS
    log, traces = _setup(tmp_path)
    assert main(["verify", "--request-log", str(log), "--traces", str(traces), "--json", "--parts"]) == 0
    parts = json.loads(capsys.readouterr().out)["kinds"]["consumer"]["parts"]
    assert set(parts) == {"expired"} and parts["expired"]["n"] == 10  # the immediate ones have no wait to split
    got = {name: round(parts["expired"][name]["p50"], 3) for name in ("start", "end", "error", "beyond the log",
                                                                        "bias")}
    assert got == {"start": round(park - 0.6, 3), "end": round(park + 100.4 - 101.6, 3), "error": -0.6,
                   "beyond the log": 0.1, "bias": 0.7}
    assert math.isnan(parts["expired"]["start, answer known"]["p50"])  # the rows carry no first byte
    assert main(["verify", "--request-log", str(log), "--traces", str(traces), "--parts"]) == 0
    out = capsys.readouterr().out
    assert "consumer expired (10), ms" in out
    end = f"{park + 100.4 - 101.6:+.2f}"
    assert next(line for line in out.splitlines() if line.strip().startswith("end")).split()[1:3] == [end, end]
    # only some clients: none of them here
    assert main(["verify", "--request-log", f"0={log}", "--traces", str(traces), "--client", "c2"]) == 1
    assert "no fetch in" in capsys.readouterr().err
    assert main(["verify", "--request-log", f"0={log}", "--traces", str(traces), "--client", "c"]) == 0


def test_a_followers_wait_begins_at_its_park() -> None:
    """A follower's fetch parks after the leader recorded its progress: fetchlat starts its wait
    ``FOLLOWER_PARK_NS`` in, and judges that start against the broker's queue and local time."""
    from fetchlat.metrics.broker_timing import FOLLOWER_PARK_NS
    from fetchlat.verify import parts
    from fetchlat.verify import request_log as rl

    line = rl.parse_line(_line(1, "broker-2-fetcher-0", 20.0, total=21.0, records=100,
                               replica={"replicaId": 2, "replicaEpoch": 1}), "0")
    assert line is not None
    row = {"api": "Fetch", "kind": "follower", "wait_ns": 20 * MS, "first_byte_ns": int(21.2 * MS),
           "total_ns": int(21.2 * MS), "local_ns": int(1.2 * MS)}
    got = parts.split(rl.Pair(row, line))
    park = FOLLOWER_PARK_NS / MS
    assert abs(got["start"] - (park - 0.6)) < 1e-9
    assert abs(got["end"] - (park + 20 - 20.6)) < 1e-9
    assert abs(got["error"] - 0.0) < 1e-9
    assert abs(got["start, answer known"] - (21.2 - 0.3 - 20.6)) < 1e-9
