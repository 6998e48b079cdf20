"""The lock-free families expose exactly what prometheus_client's own would."""

from __future__ import annotations

import pytest
from fetchlat.metrics.fast import FastCounter, FastHistogram
from fetchlat.metrics.prom import LATENCY_BUCKETS
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest

disable_created_metrics()  # as ProxyMetrics does

LABELS = st.sampled_from(["a", "b", "other"])
AMOUNTS = st.one_of(st.sampled_from([*LATENCY_BUCKETS, 0.0, 1e-7, 61.0, 1e9]),
                    st.floats(min_value=0, max_value=120, allow_nan=False))


@settings(max_examples=150, deadline=None)
@given(obs=st.lists(st.tuples(LABELS, LABELS, AMOUNTS), max_size=60))
def test_histogram_text_equals_prometheus_clients(obs: list[tuple[str, str, float]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    a = FastHistogram("x_seconds", "doc", ["broker", "kind"], buckets=LATENCY_BUCKETS, registry=ours)
    b = Histogram("x_seconds", "doc", ["broker", "kind"], buckets=LATENCY_BUCKETS, registry=theirs)
    for l1, l2, v in obs:
        a.labels(l1, l2).observe(v)
        b.labels(l1, l2).observe(v)
    assert _lines(ours) == _lines(theirs)


@settings(max_examples=100, deadline=None)
@given(incs=st.lists(st.tuples(LABELS, st.floats(min_value=0, max_value=1e6, allow_nan=False)), max_size=40))
def test_counter_text_equals_prometheus_clients(incs: list[tuple[str, float]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    a = FastCounter("y", "doc", ["api"], registry=ours)
    b = Counter("y", "doc", ["api"], registry=theirs)
    for label, v in incs:
        a.labels(label).inc(v)
        b.labels(label).inc(v)
    assert _lines(ours) == _lines(theirs)


def test_unlabelled_families_and_misuse() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    FastHistogram("lag_seconds", "doc", buckets=(0.1, 1.0), registry=ours).observe(0.5)
    Histogram("lag_seconds", "doc", buckets=(0.1, 1.0), registry=theirs).observe(0.5)
    FastCounter("n", "doc", registry=ours).inc(2)
    Counter("n", "doc", registry=theirs).inc(2)
    assert _lines(ours) == _lines(theirs)
    c = FastCounter("m", "doc", ["a", "b"])
    with pytest.raises(ValueError, match="2 label values"):
        c.labels("only-one")
    with pytest.raises(ValueError, match="only go up"):
        c.labels("x", "y").inc(-1)


def _lines(reg: CollectorRegistry) -> list[str]:
    return sorted(generate_latest(reg).decode().splitlines())
