"""Latency statistics with microsecond precision (KIP-403): samples are monotonic nanoseconds,
percentiles are exact (nearest rank over every sample, not sampled), reported in ms with three
decimals."""

from __future__ import annotations

from array import array
from dataclasses import dataclass

PERCENTILES = (50.0, 95.0, 99.0, 99.9)


@dataclass(frozen=True)
class Summary:
    count: int
    avg_ms: float
    max_ms: float
    percentiles_ms: dict[str, float]

    def line(self) -> str:
        ps = ", ".join(f"{k} {v:.3f} ms" for k, v in self.percentiles_ms.items())
        return f"avg {self.avg_ms:.3f} ms, max {self.max_ms:.3f} ms, {ps}"


class Recorder:
    """Every latency sample (int64 ns in a compact array: 8 bytes per record)."""

    def __init__(self) -> None:
        self.samples = array("q")

    def add(self, ns: int) -> None:
        self.samples.append(ns)

    def summary(self) -> Summary:
        return summarize(self.samples)


def nearest_rank(sorted_ns: list[int] | array[int], p: float) -> int:
    n = len(sorted_ns)
    k = max(0, min(n - 1, int(-(-p * n // 100)) - 1))  # ceil(p/100 * n) - 1
    return int(sorted_ns[k])


def summarize(samples: array[int] | list[int]) -> Summary:
    if not samples:
        return Summary(0, 0.0, 0.0, {f"p{p:g}": 0.0 for p in PERCENTILES})
    s = sorted(samples)
    return Summary(
        count=len(s),
        avg_ms=round(sum(s) / len(s) / 1e6, 3),
        max_ms=round(s[-1] / 1e6, 3),
        percentiles_ms={f"p{p:g}": round(nearest_rank(s, p) / 1e6, 3) for p in PERCENTILES},
    )
