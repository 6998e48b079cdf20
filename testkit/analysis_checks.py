"""Independent checks of ``fetchlat analyze`` output: percentiles recomputed with pyarrow alone,
and the bound every summary.json percentile must meet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as ds
from fetchlat.analysis.tables import ALPHA, PARTS, PER_MILLE, QNAMES


def independent_values(trace_dir: Path) -> dict[tuple[str, str], dict[str, list[float]]]:
    """Per broker x kind, the sorted fetch durations (ms), read with pyarrow alone."""
    t = ds.dataset(trace_dir / "exchanges", format="parquet").to_table()
    t = t.filter(pc.and_(pc.equal(t["api"], "Fetch"), pc.is_valid(t["total_ns"])))
    out: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in t.select(["broker", "kind", "total_ns", "wait_ns", "local_ns", "e2e_ns"]).to_pylist():
        g = out.setdefault((r["broker"], r["kind"]), {p: [] for p in PARTS})
        for part in PARTS:
            g[part].append(r[f"{part}_ns"] / 1e6)
    for g in out.values():
        for vals in g.values():
            vals.sort()
    return out


def check_summary(summary: dict[str, Any], expected: dict[tuple[str, str], dict[str, list[float]]]) -> None:
    """Every percentile in summary.json is within ALPHA (relative) of the exact nearest-rank
    value (rank ceil(q n)) of the rows."""
    got = {(b["broker"], b["kind"]): b for b in summary["brokers"]}
    assert set(got) == set(expected)
    for key, parts in expected.items():
        n = len(parts["total"])
        assert got[key]["fetches"] == n
        for part, vals in parts.items():
            for per_mille, name in zip(PER_MILLE, QNAMES, strict=True):
                exact = vals[max(1, -(-n * per_mille // 1000)) - 1]
                v = got[key][f"{part}_ms"][name]
                assert abs(v - exact) <= ALPHA * abs(exact) + 1e-9, (key, part, name, v, exact)
