"""The perf tool's statistics: exact nearest-rank percentiles in ms with µs precision."""

from __future__ import annotations

from fetchlat.perf.stats import nearest_rank, summarize


def test_nearest_rank_percentiles_keep_microseconds() -> None:
    samples = [i * 1_000 + 7 for i in range(1, 1001)]  # 1.000007 ms ... 1000.000007 ms, in ns
    s = summarize(list(reversed(samples)))
    assert s.count == 1000
    assert s.percentiles_ms == {"p50": 0.5, "p95": 0.95, "p99": 0.99, "p99.9": 0.999}
    assert s.max_ms == 1.0
    assert nearest_rank(sorted([5, 1, 3]), 50) == 3
    assert summarize([1_234_567]).percentiles_ms["p99.9"] == 1.235  # 1.234567 ms -> µs kept, rounded


def test_empty_run_summarizes_to_zero() -> None:
    assert summarize([]).count == 0
