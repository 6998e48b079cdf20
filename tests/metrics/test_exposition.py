"""A scrape's text (``metrics/exposition.py``) is ``generate_latest``'s, byte for byte: the proxy's
own families written by themselves, every other collector in its place."""

from __future__ import annotations

from collections.abc import Iterator

from fetchlat.metrics.exposition import render
from fetchlat.metrics.fast import FastCounter, FastHistogram
from fetchlat.metrics.prom import LATENCY_BUCKETS, FetchMetrics, ProxyMetrics
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

disable_created_metrics()  # as ProxyMetrics does

# label values as clients name themselves: quotes, backslashes, line ends, any text
VALUES = st.one_of(st.sampled_from(["a", "b", 'q"uote', "back\\slash", "line\nend", "", "ünïcode ✓"]),
                   st.text(max_size=12))
AMOUNTS = st.one_of(st.sampled_from([*LATENCY_BUCKETS, 0.0, 1e-7, 61.0, 1e9]),
                    st.floats(min_value=0, max_value=120, allow_nan=False))


class _Fixed(Collector):
    """A collector of another kind, whose values do not move between two scrapes."""

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily("fixed_things", "doc with a \\ and\na line end", labels=["z", "a"])
        g.add_metric(["1", 'x"y'], 2.5)
        yield g


@settings(max_examples=150, deadline=None)
@given(obs=st.lists(st.tuples(VALUES, VALUES, AMOUNTS), max_size=40),
       incs=st.lists(st.tuples(VALUES, st.floats(min_value=0, max_value=1e7, allow_nan=False)), max_size=20),
       many=st.integers(min_value=0, max_value=3_000_000))
def test_a_registry_of_every_kind_renders_as_generate_latest(obs: list[tuple[str, str, float]],
                                                             incs: list[tuple[str, float]], many: int) -> None:
    r = CollectorRegistry()
    Gauge("first_gauge", "before the fast families", registry=r).set(3)
    h = FastHistogram("x_seconds", "doc", ["kind", "broker"], buckets=LATENCY_BUCKETS, registry=r)
    Histogram("theirs_seconds", "prometheus_client's own, between ours", ["le_not"], registry=r).labels("v").observe(1)
    c = FastCounter("y", "doc", ["api"], registry=r)
    FastCounter("z_total", "a name that ends with _total", registry=r).inc(many)
    bare = FastHistogram("lag_seconds", "no labels", buckets=(0.1, 1.0), registry=r)
    Counter("after", "last", registry=r).inc()
    r.register(_Fixed())
    for a, b, v in obs:
        h.labels(a, b).observe(v)
        bare.observe(v)
    for label, v in incs:
        c.labels(label).inc(v)
    for _ in range(many % 5):
        bare.observe(0.05)
    first = render(r)
    assert first == generate_latest(r)
    assert render(r) == first  # the kept line beginnings write the same again


def test_counts_past_a_million_are_written_as_go_writes_them() -> None:
    r = CollectorRegistry()
    h = FastHistogram("big_seconds", "doc", buckets=(1.0,), registry=r)
    child = h.labels()
    child.counts[0] = 1_234_567
    child.counts[1] = 10**17
    FastCounter("n", "doc", registry=r).inc(12_345_678)
    assert render(r) == generate_latest(r)
    assert b'big_seconds_bucket{le="1.0"} 1.234567e+06' in render(r)


def test_the_proxys_registry_renders_as_generate_latest() -> None:
    """The families a sidecar exports, with samples in them; the process and interpreter
    collectors move between two calls, so each text is compared without their lines."""
    reg = CollectorRegistry()
    m = ProxyMetrics(reg)
    f = FetchMetrics(reg)
    m.requests.labels("Fetch", "0").inc()
    m.request_duration.labels("Fetch", "0").observe(0.012)
    f.client_rtt.labels("0").observe(0.0004)
    f.produce.labels("0", "1").observe(0.002)
    moving = ("process_", "python_gc_", "python_info", "fetchlat_libc_", "fetchlat_python_", "fetchlat_arrow_")

    def lines(text: bytes) -> list[str]:
        def name(line: str) -> str:
            return line.split(" ")[2] if line.startswith("#") else line
        return [x for x in text.decode().splitlines() if not name(x).startswith(moving)]

    ours = lines(render(reg))
    assert ours == lines(generate_latest(reg))
    assert any(x.startswith('fetchlat_requests_total{api="Fetch",broker="0"}') for x in ours)
