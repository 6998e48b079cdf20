"""Independent checks of ``fetchlat analyze`` output: percentiles recomputed with pyarrow alone,
and the rank bound every summary.json percentile must meet."""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as ds
from fetchlat.analysis.transforms import PARTS, QNAMES, QUANTILES, RANK_ERROR


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
    """Every percentile in summary.json is a real value whose rank is within the KLL sketch's
    bound of the requested one: p +- (1/accuracy + 1/n)."""
    got = {(b["broker"], b["kind"]): b for b in summary["brokers"]}
    assert set(got) == set(expected)
    for key, parts in expected.items():
        n = len(parts["total"])
        assert got[key]["fetches"] == n
        eps = RANK_ERROR + 1 / n
        for part, vals in parts.items():
            for q, name in zip(QUANTILES, QNAMES, strict=True):
                v = got[key][f"{part}_ms"][name]
                below, upto = bisect.bisect_left(vals, v - 1e-9), bisect.bisect_right(vals, v + 1e-9)
                assert upto > below, (key, part, name, "not a value of the data")
                assert upto / n >= q - eps and below / n <= q + eps, (key, part, name, v, below / n, upto / n)
