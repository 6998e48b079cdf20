"""Realistic fetchlat traces of any size, with injected anomalies of known size.

    python bench/gen_traces.py OUT_DIR --rows 10000000 [--brokers 6] [--clients 200] [--topics 50]
           [--grey LEADER:FOLLOWER:START_S:LENGTH_S:EXTRA_MS] [--seed 1]

Writes OUT_DIR/{exchanges,partitions,replication}/ with the proxy's own schema
(``fetchlat.metrics.trace_schema``) and, by default, its file layout
(``fetchlat.metrics.trace_layout``: hour directories): one proxy per broker, a file per
proxy per 5 minutes (split at the hour), row groups of the writer's size (``--layout mixed``:
files directly under the table's directory, as proxies wrote before hour directories, each
spanning every broker and the whole duration, kept for comparison).
Mix: 70% consumer fetches (expired / immediate / woken), 20% follower fetches between
every broker pair, 10% produces. A grey failure adds EXTRA_MS to the true local latency of
one follower->leader pair for a stretch of time; ``generate`` returns that ground truth.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fetchlat.metrics import trace_layout
from fetchlat.metrics.trace_schema import META_CLOCK, META_SCHEMA_VERSION, SCHEMA_VERSION, TABLES
from fetchlat.proxy.traces import ROWS_PER_GROUP

MS = 1_000_000


@dataclass(frozen=True)
class Grey:
    leader: int
    follower: int
    start_s: float
    length_s: float
    extra_ms: float


def _write(out: str, table: str, cols: dict[str, Any], name: str, row_group_rows: int | None) -> None:
    schema = TABLES[table].with_metadata({META_SCHEMA_VERSION: str(SCHEMA_VERSION).encode(),
                                          META_CLOCK: json.dumps({"wall_ns": 0, "mono_ns": 0}).encode()})
    n = len(next(iter(cols.values())))
    arrays = [pa.array(cols[f.name], type=f.type) if f.name in cols else pa.nulls(n, f.type) for f in schema]
    os.makedirs(os.path.dirname(os.path.join(out, table, name)), exist_ok=True)
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), os.path.join(out, table, f"{name}.parquet"),
                   compression="zstd", row_group_size=row_group_rows)


def _take(cols: dict[str, Any], mask: Any) -> dict[str, Any]:
    return {k: (v.filter(pa.array(mask)) if isinstance(v, pa.Array | pa.ChunkedArray) else v[mask])
            for k, v in cols.items()}


def generate(out: str, rows: int, *, brokers: int = 3, clients: int = 20, topics: int = 10, partitions: int = 6,
             start_ns: int = 1_795_000_020 * 10**9, duration_s: float = 600.0, grey: Grey | None = None,
             layout: str = "proxy", rotate_s: float = 300.0, rows_per_file: int = 1_000_000,
             seed: int = 1) -> dict[str, Any]:
    """``layout="proxy"`` writes what the proxies write (proxy/traces.py): one proxy per broker,
    each rotating its file every ``rotate_s`` seconds of trace time, rows in time order, row
    groups of ``ROWS_PER_GROUP``. ``layout="mixed"`` writes files of ``rows_per_file`` rows that
    each span the whole duration and every broker (one row group each): no proxy writes that,
    but it is the harder case for the job (every group in every file)."""
    if layout not in ("proxy", "mixed"):
        raise ValueError(f"layout '{layout}': proxy or mixed")
    rng = np.random.default_rng(seed)
    truth: dict[str, Any] = {"rows": rows, "grey": asdict(grey) if grey else None, "layout": layout}
    if layout == "mixed":
        chunks = [(0.0, duration_s, min(rows_per_file, rows - i)) for i in range(0, rows, rows_per_file)]
    else:
        slices = max(1, int(np.ceil(duration_s / rotate_s)))
        edges = [min(duration_s, i * rotate_s) for i in range(slices + 1)]
        counts = np.diff(np.floor(np.array(edges) / duration_s * rows).astype(np.int64))
        chunks = [(edges[i], edges[i + 1], int(counts[i])) for i in range(slices)]
    for index, (t0_s, t1_s, n) in enumerate(chunks):
        if n <= 0:
            continue
        tables = _chunk(rng, n, t0_s, t1_s, start_ns=start_ns, brokers=brokers, clients=clients, topics=topics,
                        partitions=partitions, grey=grey)
        if layout == "mixed":
            for table, cols in tables.items():
                _write(out, table, cols, f"gen-{index:05d}", None)
            continue
        for b in range(1, brokers + 1):  # one file per proxy (= broker) per rotation, in its hour's directory
            name = f"{start_ns + int(t0_s * 1e9)}-sidecar-{b}"
            for table, cols in tables.items():
                hours = np.asarray(cols["ts_ns"]) // trace_layout.HOUR_NS
                for hour in np.unique(hours):
                    _write(out, table, _take(cols, (cols["broker"] == str(b)) & (hours == hour)),
                           f"{trace_layout.hour_dir(int(hour))}/{name}", ROWS_PER_GROUP)
    return truth


def _chunk(rng: np.random.Generator, n: int, t0_s: float, t1_s: float, *, start_ns: int, brokers: int,
           clients: int, topics: int, partitions: int, grey: Grey | None) -> dict[str, dict[str, Any]]:
    """``n`` exchanges in time order between ``t0_s`` and ``t1_s``, with their partition and
    replication rows."""
    ts = np.sort(rng.uniform(t0_s, t1_s, n))
    ts_ns = start_ns + (ts * 1e9).astype(np.int64)
    leader = rng.integers(1, brokers + 1, n)
    kind_draw = rng.random(n)
    is_follower = (kind_draw >= 0.7) & (kind_draw < 0.9)
    is_produce = kind_draw >= 0.9
    follower = ((leader + rng.integers(1, max(2, brokers), n) - 1) % brokers) + 1  # another broker
    client = rng.integers(0, clients, n)
    max_wait = np.where(is_follower, 500, rng.choice([100, 500], n))
    local = rng.lognormal(np.log(2.0), 0.4, n) + leader * 0.3  # ms; brokers differ a little
    local = np.where(is_follower, rng.lognormal(np.log(1.5), 0.3, n), local)
    if grey is not None:
        hit = (is_follower & (leader == grey.leader) & (follower == grey.follower)
               & (ts >= grey.start_s) & (ts < grey.start_s + grey.length_s))
        local = local + np.where(hit, grey.extra_ms, 0.0)
    outcome_draw = rng.random(n)
    outcome = np.where(outcome_draw < 0.4, "expired", np.where(outcome_draw < 0.8, "immediate", "woken"))
    wait = np.where(outcome == "expired", max_wait, np.where(outcome == "immediate", 0.0,
                                                              rng.uniform(0, 1, n) * max_wait))
    total = local + wait
    records = np.where(outcome == "expired", 0, rng.integers(1, 200, n))
    api = np.where(is_produce, "Produce", "Fetch")
    kind = np.where(is_produce, "producer", np.where(is_follower, "follower", "consumer"))
    client_id = np.where(is_follower, np.char.add("broker-", follower.astype(str)),
                         np.char.add("client-", client.astype(str)))
    fetch = ~is_produce
    cols: dict[str, Any] = {
        "ts_ns": ts_ns, "proxy_id": np.char.add("sidecar-", leader.astype(str)),
        "conn_id": client.astype(np.int64), "client_id": client_id, "broker": leader.astype(str), "api": api,
        "api_version": np.where(is_produce, 9, 16).astype(np.int16), "kind": kind,
        "max_wait_ms": np.where(fetch, max_wait, 0).astype(np.int32),
        "min_bytes": np.ones(n, np.int32), "response_bytes": (records * 120 + 100).astype(np.int64),
        "error_code": np.zeros(n, np.int16), "total_ns": (total * MS).astype(np.int64),
        "wait_ns": pa.array(np.where(fetch, wait * MS, 0).astype(np.int64), mask=is_produce),
        "wait_source": pa.array(np.full(n, "inferred"), mask=is_produce),
        "local_ns": pa.array((local * MS).astype(np.int64), mask=is_produce),
        "e2e_ns": pa.array(((local + 0.1) * MS).astype(np.int64), mask=is_produce),
        "outcome": pa.array(outcome, mask=is_produce),
        "records": records.astype(np.int64),
        "replica_id": np.where(is_follower, follower, -1).astype(np.int32),
        "acks": pa.array(np.full(n, -1, np.int16), mask=~is_produce),
        "partitions": np.ones(n, np.int32),
    }
    consumer_data = (kind == "consumer") & (records > 0)
    m = int(consumer_data.sum())
    part_cols = {
        "ts_ns": ts_ns[consumer_data], "proxy_id": cols["proxy_id"][consumer_data],
        "client_id": client_id[consumer_data], "broker": leader[consumer_data].astype(str),
        "api": np.full(m, "Fetch"), "kind": np.full(m, "consumer"),
        "topic": np.char.add("topic-", rng.integers(0, topics, m).astype(str)),
        "partition": rng.integers(0, partitions, m).astype(np.int32),
        "records": records[consumer_data].astype(np.int64),
        "record_latency_ns": (rng.lognormal(np.log(50.0), 1.0, m) * MS).astype(np.int64),
    }
    rep = is_follower & (records > 0)
    k = int(rep.sum())
    repl_cols = {
        "ts_ns": ts_ns[rep], "proxy_id": cols["proxy_id"][rep], "broker": leader[rep].astype(str),
        "follower": follower[rep].astype(np.int32),
        "topic": np.char.add("topic-", rng.integers(0, topics, k).astype(str)),
        "partition": rng.integers(0, partitions, k).astype(np.int32),
        "latency_ns": ((local[rep] + rng.lognormal(np.log(3.0), 0.5, k)) * MS).astype(np.int64),
    }
    return {"exchanges": cols, "partitions": part_cols, "replication": repl_cols}


def split_last_hour(day: str, fleet: str) -> str:
    """Copy ``day``'s traces to ``fleet`` but for their last hour; returns that hour's directory
    name (``hour=HH``), for ``hour_arrives``."""
    hours = Path(day, "exchanges")
    last = sorted(p.relative_to(hours).as_posix() for p in hours.glob("date=*/hour=*"))[-1]
    shutil.copytree(day, fleet, ignore=lambda d, names: [n for n in names if f"{Path(d).name}/{n}" == last])
    return last


def hour_arrives(day: str, fleet: str, last: str) -> None:
    """The hour ``split_last_hour`` held back lands in ``fleet`` as a proxy's files land: each
    table's hour directory staged beside its place, then renamed into it."""
    for table in TABLES:
        src = Path(day, table, last)
        if src.is_dir():
            dest = Path(fleet, table, last)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(src, dest.with_name(".staging-" + dest.name))
            os.rename(dest.with_name(".staging-" + dest.name), dest)


def _grey(text: str) -> Grey:
    leader, follower, start, length, extra = text.split(":")
    return Grey(int(leader), int(follower), float(start), float(length), float(extra))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--duration-s", type=float, default=600.0)
    ap.add_argument("--grey", type=_grey, help="LEADER:FOLLOWER:START_S:LENGTH_S:EXTRA_MS")
    ap.add_argument("--layout", choices=("proxy", "mixed"), default="proxy",
                    help="proxy: one file per broker per 5 minutes, as the proxies write (default); mixed: every file "
                         "spans every broker and the whole duration")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    truth = generate(a.out, a.rows, brokers=a.brokers, clients=a.clients, topics=a.topics,
                     duration_s=a.duration_s, grey=a.grey, layout=a.layout, seed=a.seed)
    print(json.dumps(truth))


if __name__ == "__main__":
    main()
