"""The tables finished in the driver (``analysis/finish.py``), against plain Python: groups with
null keys, nearest-rank quantiles of merged histograms and of bucket lists, the clamp to a
group's min and max, and the hours of a product merging to what one hour of all their rows gives."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
from fetchlat.analysis import finish
from fetchlat.analysis import tables as tb
from hypothesis import given, settings
from hypothesis import strategies as st

rows = st.lists(st.tuples(st.integers(0, 5), st.integers(-40, 40), st.integers(1, 9)), min_size=1, max_size=200)


def nearest_rank(values: list[int], per_mille: int) -> int:
    s = sorted(values)
    return s[max(1, -(-len(s) * per_mille // 1000)) - 1]


@given(rows)
@settings(max_examples=200, deadline=None)
def test_histogram_quantiles_are_the_nearest_rank_values(hist: list[tuple[int, int, int]]) -> None:
    gid, bucket, count = (np.array(c, np.int64) for c in zip(*hist, strict=True))
    n = 6
    ks, empty = finish.hist_quantiles(gid, n, bucket, count)
    ones, empty1 = finish.hist_quantiles(gid, n, bucket, None)  # the same rows as a list of values
    for g in range(n):
        values = [b for gg, b, c in hist if gg == g for _ in range(c)]
        listed = [b for gg, b, _ in hist if gg == g]
        assert bool(empty[g]) == (not values) and bool(empty1[g]) == (not listed)
        for i, q in enumerate(tb.PER_MILLE):
            if values:
                assert ks[i][g] == nearest_rank(values, q)
                assert ones[i][g] == nearest_rank(listed, q)


def test_groups_treat_nulls_as_one_key_and_keep_the_key_values() -> None:
    t = pa.table({"a": ["x", None, "x", None, "y"], "b": [1, 2, 1, 2, None]})
    gid, n, first = finish.groups(t, ["a", "b"])
    assert n == 3 and gid[0] == gid[2] and gid[1] == gid[3] and len({gid[0], gid[1], gid[4]}) == 3
    keys = finish.keys_of(t, ["a", "b"], first)
    assert sorted(zip(keys["a"].to_pylist(), keys["b"].to_pylist(), strict=True), key=str) == sorted(
        [("x", 1), (None, 2), ("y", None)], key=str)


def duration_state(hour: int, values: list[int]) -> dict[str, object]:
    return {"topic": "t", "partition": 0, "client_id": "c", "hour": hour, "samples": len(values),
            "_b": [finish_bucket(v) for v in values], "max_ns": max(values), "min_ns": min(values),
            "sum_ns": sum(values), "sla": sum(v > 5_000_000_000 for v in values)}


def finish_bucket(ns: int) -> int:
    return math.ceil(math.log(ns) / math.log(tb.GAMMA)) + 1


@given(st.lists(st.lists(st.integers(1_000, 9_000_000_000), min_size=1, max_size=30), min_size=1, max_size=5))
@settings(max_examples=100, deadline=None)
def test_a_duration_merged_over_hours_is_the_same_as_all_its_rows_in_one_hour(hours: list[list[int]]) -> None:
    per_hour = finish.record_latency(pa.Table.from_pylist([duration_state(h, v) for h, v in enumerate(hours)]))
    everything = [v for vs in hours for v in vs]
    one = finish.record_latency(pa.Table.from_pylist([duration_state(0, everything)]))
    assert per_hour.to_pylist() == one.to_pylist()
    r = one.to_pylist()[0]
    lo, hi = min(everything) / 1e6, max(everything) / 1e6
    assert lo <= r["p50_ms"] <= hi and lo <= r["p99_ms"] <= hi  # clamped to the group's min and max
    p99 = float(finish.bucket_ms(np.array([nearest_rank([finish_bucket(v) for v in everything], 990)]))[0])
    assert r["p99_ms"] == min(hi, max(lo, p99))
    assert (r["samples"], r["max_ms"], r["sla_breaches"]) == (len(everything), hi, sum(
        v > 5_000_000_000 for v in everything))


def test_bucket_ms_is_what_transforms_says_a_bucket_stands_for() -> None:
    k = np.array([-3, 0, 1, 2, 700, 1500])
    got = finish.bucket_ms(k)
    want = [0.0 if x == 0 else (1 if x > 0 else -1) * 2 * tb.GAMMA ** (abs(x) - 1) / (tb.GAMMA + 1) / 1e6
            for x in k.tolist()]
    assert got.tolist() == want
