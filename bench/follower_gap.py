"""Follower fetches against the leader's request log: when did the produce that fed each one
begin its turn at the broker, against when the fetch was forwarded? By the broker's outcome.

    python bench/follower_gap.py RUN_DIR

``RUN_DIR`` is what ``tests/integration/test_broker_clock.py``'s follower case leaves under its
pytest base directory (``--basetemp``): ``traces/`` (the three sidecars' trace rows) and
``cluster/node-N/logs/request.log``. For each follower fetch with records that the request log
names, the covering produce is the one whose offsets hold the fetch offset (the partitions
table's produce rows), and the gap is fetch forwarded minus that produce's turn (both on the
sidecar's clock; negative: the produce came after the fetch went out).

A fetch the broker parked (``woken``) and one it answered at once (``immediate``) after queueing
it behind that produce look the same from the sidecar's side: in both the data came after the
fetch went out. This prints how often each happens and how long the broker took.
"""

from __future__ import annotations

import bisect
import collections
import sys
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from fetchlat.verify import request_log as rl

NODES = 3


def main(run: Path) -> None:
    rows = [r for r in rl.trace_rows(run / "traces") if r["kind"] == "follower"]
    logged = []
    for i in range(NODES):
        log = run / "cluster" / f"node-{i}" / "logs" / "request.log"
        logged += [r for r in rl.read(log, str(i), [rl.API_KEYS["Fetch"]])
                   if r.listener == "BROKER" and r.client_id != "fetchlat-calibration"]
    pairs, _ = rl.join(rows, logged)
    produced: dict[tuple[str, str, int], list[tuple[int, int, int]]] = collections.defaultdict(list)
    fetched: dict[tuple[str, int, int], list[dict[str, Any]]] = collections.defaultdict(list)
    for p in ds.dataset(run / "traces" / "partitions", format="parquet").to_table().to_pylist():
        if p["api"] == "Produce" and (p["base_offset"] or -1) >= 0:
            produced[(p["broker"], p["topic"], p["partition"])].append(
                (p["base_offset"], p["base_offset"] + p["records"], p["ts_ns"]))
        elif p["api"] == "Fetch" and p["kind"] == "follower" and p["records"]:
            fetched[(p["broker"], p["ts_ns"], p["correlation_id"])].append(p)
    for spans in produced.values():
        spans.sort()
    by_outcome: dict[str, list[tuple[float, float, float]]] = collections.defaultdict(list)
    for pair in pairs:
        r = pair.row
        turns = []
        for p in fetched.get((r["broker"], r["ts_ns"], r["correlation_id"]), []):
            spans = produced.get((r["broker"], p["topic"], p["partition"]), [])
            i = bisect.bisect_right(spans, (p["fetch_offset"], 1 << 62, 0)) - 1
            if i >= 0 and spans[i][0] <= p["fetch_offset"] < spans[i][1]:
                turns.append(spans[i][2])
        if turns:
            by_outcome[rl.broker_outcome(pair.broker)].append(
                ((r["ts_ns"] - min(turns)) / 1e6, pair.broker.remote_ms, pair.broker.total_ms))
    for outcome, xs in sorted(by_outcome.items()):
        gaps = [x[0] for x in xs]

        def q(values: list[float], f: float) -> float:
            return round(rl.quantile(values, f), 2)

        print(f"{outcome:9s} {len(xs):4d} fetches: forwarded - produce's turn p10/p50/p90 {q(gaps, .1)} / "
              f"{q(gaps, .5)} / {q(gaps, .9)} ms, the fetch first in {sum(g < 0 for g in gaps) / len(gaps):.0%}; "
              f"broker remote p50 {q([x[1] for x in xs], .5)} ms, total p50 {q([x[2] for x in xs], .5)} ms")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
