"""The Prometheus adapter: pinned names and buckets, bounded labels, windowed maxima."""

from __future__ import annotations

from fetchlat.metrics.model import ROUND_TRIPS_TO_TRUST, LatencyModel
from fetchlat.metrics.prom import (
    LATENCY_BUCKETS,
    OTHER,
    BoundedLabel,
    FetchMetrics,
    HeapSizes,
    ProxyMetrics,
    WindowedMax,
)
from prometheus_client import CollectorRegistry, generate_latest

from testkit.events import MS, T0, fetch_ev

S = 1_000_000_000


def test_buckets_span_50us_to_60s_with_five_below_1ms() -> None:
    assert LATENCY_BUCKETS[0] == 0.00005 and LATENCY_BUCKETS[-1] == 60.0
    assert len([b for b in LATENCY_BUCKETS if b < 0.001]) >= 5


def test_bounded_label() -> None:
    lab = BoundedLabel(2)
    assert [lab(x) for x in ("a", "b", "c", "a", "d")] == ["a", "b", OTHER, "a", OTHER]


def test_windowed_max_keeps_one_to_two_windows() -> None:
    w = WindowedMax(60 * S)
    w.observe(("b", "t"), 5.0, 0)
    w.observe(("b", "t"), 3.0, 10 * S)
    assert w.snapshot() == {("b", "t"): 5.0}
    w.observe(("b", "t"), 1.0, 70 * S)  # new window; the last one still counts
    assert w.snapshot() == {("b", "t"): 5.0}
    w.observe(("b", "t"), 2.0, 140 * S)  # two windows later: the 5.0 is gone
    assert w.snapshot() == {("b", "t"): 2.0}
    w.observe(("b", "u"), 9.0, 400 * S)  # long silence: nothing older survives
    assert w.snapshot() == {("b", "u"): 9.0}


def test_pinned_metric_names_are_exported() -> None:
    reg = CollectorRegistry()
    ProxyMetrics(reg)
    fm = FetchMetrics(reg)
    m = LatencyModel(wall_minus_mono_ns=1_700_000_000_000 * MS)
    ts = (T0 + m.wall_minus_mono_ns) // MS - 2_000
    s, rep = m.on_fetch(fetch_ev(T0, T0 + 503 * MS, T0 + 503 * MS, records=1, hw=1, first_ts_ms=ts, max_ts_ms=ts))
    fm.observe_fetch("1", s, rep, T0)
    text = generate_latest(reg).decode()
    for name in ("fetchlat_requests_total", "fetchlat_request_duration_seconds", "fetchlat_fetch_total_seconds",
                 "fetchlat_fetch_wait_seconds", "fetchlat_fetch_local_seconds", "fetchlat_fetch_e2e_seconds",
                 "fetchlat_fetches_total", "fetchlat_record_latency_seconds", "fetchlat_decode_errors_total"):
        assert f"# TYPE {name.removesuffix('_total')}" in text, name
    assert 'fetchlat_record_latency_max_seconds{broker="1",topic="t"} 2.503' in text


def test_new_client_ids_past_the_label_cap_hold_no_memory_of_their_own() -> None:
    """A sidecar meets tens of thousands of client ids over a day: past the client label cap
    they all share ``other``, and so does what the families hold for them (at most brokers x
    kinds x (cap + 1) entries), so memory does not grow with the ids."""
    fm = FetchMetrics(CollectorRegistry(), client_cap=3)
    for i in range(5000):
        fm._client_children("1", "consumer", f"churn-{i}")
    assert len(fm._by_client) == 4  # three kept names and "other"
    assert fm._client_children("1", "consumer", "churn-4999") is fm._client_children("1", "consumer", "churn-7")


def test_held_entries_are_read_at_scrape_time() -> None:
    reg = CollectorRegistry()
    m = ProxyMetrics(reg)
    assert "fetchlat_held_entries{" not in generate_latest(reg).decode()  # nothing said: no sample
    held = {"connections": 3, "partitions": 12}
    m.held.sizes = lambda: held
    text = generate_latest(reg).decode()
    assert 'fetchlat_held_entries{structure="connections"} 3.0' in text
    held["partitions"] = 40  # a scrape reads the sizes as they are now
    assert 'fetchlat_held_entries{structure="partitions"} 40.0' in generate_latest(reg).decode()


def test_the_heap_sizes_say_whose_memory_it_is() -> None:
    """Python's live blocks and Arrow's pool, read at scrape time: blocks made show, blocks freed go."""
    import pyarrow as pa
    from prometheus_client.parser import text_string_to_metric_families

    reg = CollectorRegistry()
    reg.register(HeapSizes())

    def read() -> dict[str, float]:
        return {s.name: s.value for f in text_string_to_metric_families(generate_latest(reg).decode())
                for s in f.samples}

    before = read()
    held = [object() for _ in range(100_000)]
    table = pa.table({"a": pa.array(range(1_000_000))})  # 8 MB in Arrow's pool
    during = read()
    assert during["fetchlat_python_allocated_blocks"] >= before["fetchlat_python_allocated_blocks"] + 90_000
    assert during["fetchlat_arrow_allocated_bytes"] >= before["fetchlat_arrow_allocated_bytes"] + 7_000_000
    del held, table
    after = read()
    assert after["fetchlat_python_allocated_blocks"] < during["fetchlat_python_allocated_blocks"] - 90_000
    assert after["fetchlat_arrow_allocated_bytes"] < during["fetchlat_arrow_allocated_bytes"] - 7_000_000


def test_the_heap_sizes_carry_what_libc_says_when_it_can() -> None:
    """``fetchlat_libc_heap_bytes{state}`` is what the injected reader gives, and absent without one."""
    reg = CollectorRegistry()
    sizes = HeapSizes()
    reg.register(sizes)
    assert "fetchlat_libc_heap_bytes" not in generate_latest(reg).decode()
    sizes.libc = lambda: (1234, 567)
    text = generate_latest(reg).decode()
    assert 'fetchlat_libc_heap_bytes{state="in_use"} 1234.0' in text
    assert 'fetchlat_libc_heap_bytes{state="free"} 567.0' in text


def test_what_the_model_learned_of_its_brokers_is_exported() -> None:
    """``fetchlat_broker_first_byte_seconds`` and ``fetchlat_broker_round_trip_seconds`` follow
    the model; the round trip is absent until the model trusts one."""
    reg = CollectorRegistry()
    m = ProxyMetrics(reg)
    model = LatencyModel(wall_minus_mono_ns=0)
    m.learned.read = lambda: (model.first_byte_ns, model.round_trips.estimate())
    text = generate_latest(reg).decode()
    assert "fetchlat_broker_round_trip_seconds" not in text
    assert f"fetchlat_broker_first_byte_seconds {model.first_byte_ns / 1e9}" in text
    for ns in range(ROUND_TRIPS_TO_TRUST):
        model.learn_round_trip(2_000_000 + ns * 1000)
    model.learn_first_byte(model.first_byte_ns + 160_000)
    text = generate_latest(reg).decode()
    assert "fetchlat_broker_round_trip_seconds 0.002" in text
    assert f"fetchlat_broker_first_byte_seconds {model.first_byte_ns / 1e9}" in text
    assert model.first_byte_ns != 300_000
