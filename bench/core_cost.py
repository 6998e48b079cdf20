"""The proxy core's own CPU per exchange, per API, in-process: the captured conversations of
real clients (``tests/data/captures``) replayed through ``Conversation`` (request bytes in,
response bytes in, written, ``after_write``) exactly as ``proxy/session.py`` calls it, without
sockets or the event loop. It isolates what decoding, the model and the metric families cost
from what asyncio costs, and it says which build ran (compiled or pure Python).

    python bench/core_cost.py                      # the build that imports
    FETCHLAT_PURE_PYTHON=1 python bench/core_cost.py
    python bench/core_cost.py --json               # one line, for scripts
    python bench/core_cost.py --traces both        # a trace row per exchange (as deployed), and none

With ``--traces`` (``on``, ``off`` or ``both``) each exchange writes its trace row into column
buffers, as a proxy with ``--trace-dir`` does on its event loop (the writer thread's share,
converting and writing the batches, is not counted); ``both`` runs the two in turns.

Each conversation is replayed ``--rounds`` times on one core object (the first round warms the
metric children, as a long-lived connection has them), and each request/response pair is timed
with ``perf_counter_ns``; the figure per API is the median over its exchanges.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fetchlat.protocol import apis  # noqa: E402
from fetchlat.proxy.build import hot_path  # noqa: E402

from testkit.captures import conversations  # noqa: E402
from testkit.playbook import MS, T0, Playbook  # noqa: E402

RUNS = ("confluent", "kafkapython", "aiokafka", "kcat")
NAMES = {apis.API_VERSIONS: "ApiVersions", apis.METADATA: "Metadata", apis.FETCH: "Fetch", apis.PRODUCE: "Produce"}


def _writer_takes(_batch: object) -> None:
    """The trace writer's side of a hand-off, which this in-process bench does not measure."""


def replay(rounds: int, traced: bool = True) -> dict[str, list[int]]:
    per_api: dict[str, list[int]] = defaultdict(list)
    clock = time.perf_counter_ns
    for run in RUNS:
        for frames in conversations(run).values():
            pairs = []
            pending = {}
            for f in frames:
                if f.direction == "req":
                    pending[len(pairs)] = f
                    pairs.append([f.wire, None, f.api_key])
                elif pairs:
                    for p in pairs:
                        if p[1] is None and p[2] == f.api_key:
                            p[1] = f.wire
                            break
            pairs = [p for p in pairs if p[1] is not None and p[2] in NAMES]
            if not pairs:
                continue
            pb = Playbook(traced=traced)
            # as deployed, full batches go to the writer thread (here: dropped), so rows do not pile
            # up in the loop's memory for the garbage collector to walk
            pb.traces.hand_off = _writer_takes
            pb.connect_upstream(T0)
            t = T0
            for r in range(rounds):
                for request, response, key in pairs:
                    t += MS
                    c0 = clock()
                    pb.client(request, t)
                    pb.broker(response, t + MS)
                    c1 = clock()
                    if r:
                        per_api[NAMES[key]].append(c1 - c0)
    return per_api


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--traces", choices=("on", "off", "both"), default="on")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    modes = {"on": [True], "off": [False], "both": [False, True, False, True]}[a.traces]
    runs: dict[bool, dict[str, list[int]]] = {}
    for traced in modes:  # in turns: a drift of the machine's speed falls on both alike
        for k, v in replay(a.rounds, traced).items():
            runs.setdefault(traced, {}).setdefault(k, []).extend(v)
    out: dict[str, object] = {"hot_path": hot_path()}
    for traced, per_api in runs.items():
        label = "" if len(runs) == 1 else ("traces on: " if traced else "traces off: ")
        out.update({label + k: round(statistics.median(v) / 1000, 2) for k, v in sorted(per_api.items())})
    if a.json:
        print(json.dumps(out))
        return
    print(f"hot path: {out.pop('hot_path')}")
    for k, v in out.items():
        print(f"  {k:24s} {v:8.2f} us per exchange")
    if len(runs) == 2:
        for k in sorted(runs[True]):
            on, off = statistics.median(runs[True][k]), statistics.median(runs[False][k])
            print(f"  {k:12s} traces on / off {on / off:.3f}")


if __name__ == "__main__":
    main()
