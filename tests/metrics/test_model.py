"""The latency model with scripted events and time: every outcome of the wait estimate, and
the knowledge the model builds from produce and fetch traffic."""

from __future__ import annotations

import tracemalloc

import pytest
from fetchlat.metrics.broker_timing import CONSUMER_ANSWER_NS, CONSUMER_PARK_NS, FOLLOWER_PARK_NS
from fetchlat.metrics.model import (
    EXPIRED,
    IMMEDIATE,
    INFERRED,
    REPORTED,
    ROUND_TRIPS_KEPT,
    ROUND_TRIPS_TO_TRUST,
    UNKNOWN,
    WOKEN,
    LatencyModel,
    estimate_wait,
)
from fetchlat.metrics.partitions import APPEND_HORIZON_NS, MAX_APPENDS_PER_PARTITION, TRIM_EVERY
from fetchlat.metrics.vocabulary import Kind
from hypothesis import given, settings
from hypothesis import strategies as st

from testkit.events import MS, T0, fetch_ev, produce_ev, share_ev

# name: (estimate_wait arguments beyond the defaults, expected (outcome, wait ms, source, basis, confident))
TABLE = {
    "reported wait is used as is": (
        {"reported_wait_ms": 120, "total_ns": 130 * MS, "returned_bytes": 100},
        (WOKEN, 120, REPORTED, "reported", True)),
    "reported zero is immediate": (
        {"reported_wait_ms": 0, "total_ns": 3 * MS}, (IMMEDIATE, 0, REPORTED, "reported", True)),
    "reported full wait is expired": (
        {"reported_wait_ms": 500, "total_ns": 503 * MS}, (EXPIRED, 500, REPORTED, "reported", True)),
    "reported wait never exceeds total": (
        {"reported_wait_ms": 900, "total_ns": 600 * MS}, (EXPIRED, 600, REPORTED, "reported", True)),
    "error is answered at once": (
        {"error": True, "total_ns": 2 * MS}, ("error", 0, INFERRED, "error", True)),
    "max_wait 0 cannot park": (
        {"max_wait_ms": 0, "total_ns": 2 * MS}, (IMMEDIATE, 0, INFERRED, "max_wait<=0", True)),
    "data known beyond the offset": (
        {"data_at_request": True, "returned_bytes": 500, "total_ns": 4 * MS},
        (IMMEDIATE, 0, INFERRED, "known_log_end", True)),
    "min_bytes 0 never parks": (
        {"min_bytes": 0, "returned_bytes": 0, "total_ns": 1 * MS}, (IMMEDIATE, 0, INFERRED, "known_log_end", True)),
    "woken by produce seen": (
        {"returned_bytes": 200, "arrival_ns": T0 + 80 * MS, "arrival_basis": "produce_seen", "total_ns": 90 * MS},
        (WOKEN, 80, INFERRED, "produce_seen", True)),
    "woken by LogAppendTime": (
        {"returned_bytes": 200, "arrival_ns": T0 + 30 * MS, "arrival_basis": "log_append_time", "total_ns": 40 * MS},
        (WOKEN, 30, INFERRED, "log_append_time", True)),
    "woken by CreateTime is low confidence": (
        {"returned_bytes": 200, "arrival_ns": T0 + 30 * MS, "arrival_basis": "create_time", "total_ns": 40 * MS},
        (WOKEN, 30, INFERRED, "create_time", False)),
    "arrival before the request is immediate": (
        {"returned_bytes": 200, "arrival_ns": T0 - 5 * MS, "arrival_basis": "produce_seen", "total_ns": 3 * MS},
        (IMMEDIATE, 0, INFERRED, "produce_seen", True)),
    "woken wait clamped to max_wait": (
        {"returned_bytes": 200, "arrival_ns": T0 + 900 * MS, "arrival_basis": "create_time", "total_ns": 950 * MS},
        (WOKEN, 500, INFERRED, "create_time", False)),
    "woken wait clamped to total (clock skew)": (
        {"returned_bytes": 200, "arrival_ns": T0 + 300 * MS, "arrival_basis": "create_time", "total_ns": 100 * MS},
        (WOKEN, 100, INFERRED, "create_time", False)),
    "data with no arrival is unknown": (
        {"returned_bytes": 200, "total_ns": 40 * MS}, (UNKNOWN, 0, INFERRED, "no_arrival", False)),
    "empty at max_wait expired": (
        {"returned_bytes": 0, "total_ns": 501 * MS}, (EXPIRED, 500, INFERRED, "expired", True)),
    "empty just under max_wait (within slack) expired": (
        {"returned_bytes": 0, "total_ns": 499 * MS}, (EXPIRED, 499, INFERRED, "expired", True)),
    "too few bytes at max_wait expired": (
        {"returned_bytes": 10, "min_bytes": 1000, "total_ns": 505 * MS}, (EXPIRED, 500, INFERRED, "expired", True)),
    "expired wait includes the broker's expiry overshoot": (
        {"returned_bytes": 0, "total_ns": 503 * MS, "expiry_overshoot_ns": 1 * MS},
        (EXPIRED, 501, INFERRED, "expired", True)),
    "expiry overshoot never beyond total": (
        {"returned_bytes": 0, "total_ns": 500 * MS + 400_000, "expiry_overshoot_ns": 1 * MS},
        (EXPIRED, 500.4, INFERRED, "expired", True)),
    "empty and early is unknown": (
        {"returned_bytes": 0, "total_ns": 120 * MS}, (UNKNOWN, 0, INFERRED, "early_without_data", False)),
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_wait_estimate(name: str) -> None:
    args, (outcome, wait_ms, source, basis, confident) = TABLE[name]
    kw = {"max_wait_ms": 500, "min_bytes": 1, "t_request_ns": T0, "error": False, "returned_bytes": 0, **args}
    w = estimate_wait(**kw)  # type: ignore[arg-type]
    assert (w.outcome, w.wait_ns / MS, w.source, w.basis, w.confident) == (outcome, wait_ms, source, basis, confident)


# ------------------------------------------------------------------ scripted exchanges
def test_idle_long_poll_expires_and_local_is_what_is_left() -> None:
    m = LatencyModel(wall_minus_mono_ns=0, expiry_overshoot_ns=0)
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 503 * MS, T0 + 503 * MS))
    assert (s.outcome, s.wait_ns, s.local_ns) == (EXPIRED, 500 * MS, 3 * MS)
    # by default the broker's timer lateness (one 1 ms tick) is purgatory, not local time
    s, _ = LatencyModel(wall_minus_mono_ns=0).on_fetch(fetch_ev(T0, T0 + 503 * MS, T0 + 503 * MS))
    assert (s.wait_ns, s.local_ns) == (501 * MS, 2 * MS)


# a consumer's woken fetch waits from its park (CONSUMER_PARK_NS after it went out) until its
# answer is ready (CONSUMER_ANSWER_NS before its first byte); its data dates the wake (wake lag)
def _answered_wait(t_req: int, t_first: int) -> int:
    return t_first - CONSUMER_ANSWER_NS - (t_req + CONSUMER_PARK_NS)


def test_woken_by_a_produce_the_proxy_saw() -> None:
    m = LatencyModel(wall_minus_mono_ns=0)
    m.on_produce(produce_ev(T0 + 100 * MS, T0 + 102 * MS, base=0, n=5))
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 352 * MS, T0 + 353 * MS, records=5, hw=5))
    # Tansu-like: parked at T0, data forwarded at +100 ms, answered on its next re-check at +352 ms:
    # parked until then (as KIP-736's WaitTimeMs would count it), the re-check's lateness its wake lag
    assert (s.outcome, s.basis, s.wait_ns) == (WOKEN, "produce_seen", _answered_wait(T0, T0 + 352 * MS))
    assert s.local_ns == 1 * MS + CONSUMER_ANSWER_NS + CONSUMER_PARK_NS
    assert s.wake_lag_ns == 252 * MS


def test_a_sidecar_dates_a_consumers_data_by_the_acknowledgement() -> None:
    m = LatencyModel(wall_minus_mono_ns=0, beside_broker=True)
    m.on_produce(produce_ev(T0 + 100 * MS, T0 + 102 * MS, base=0, n=5))
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 103 * MS, T0 + 103 * MS, records=5, hw=5))
    # the high watermark covered the data when the produce was acknowledged (+102 ms)
    assert (s.outcome, s.wake_lag_ns) == (WOKEN, 1 * MS)
    assert s.wait_ns == _answered_wait(T0, T0 + 103 * MS)
    # data acknowledged before the fetch had parked found it not parked yet
    m.on_produce(produce_ev(T0 + 200 * MS, T0 + 200 * MS + CONSUMER_PARK_NS // 2, base=5, n=5))
    s, _ = m.on_fetch(fetch_ev(T0 + 200 * MS, T0 + 201 * MS, T0 + 201 * MS, offset=5, records=5, hw=10))
    assert (s.outcome, s.wait_ns) == (IMMEDIATE, 0)


def _away_with_a_round_trip_learned(rtt_ms: int, answers: int) -> LatencyModel:
    """A proxy a round trip of ``rtt_ms`` from its broker that has seen ``answers`` requests the
    broker answered without waiting, over offsets 0-4 appended long before."""
    m = LatencyModel(wall_minus_mono_ns=0)
    m.on_produce(produce_ev(T0 - 900 * MS, T0 - 900 * MS + rtt_ms * MS, base=0, n=5))
    for i in range(answers):
        m.learn_round_trip(rtt_ms * MS + (i % 3) * MS // 10)  # ApiVersions, Metadata, ...: 20.0-20.2 ms
    return m


def test_away_from_the_broker_a_consumers_data_is_dated_by_the_answer_less_the_round_trip() -> None:
    """A round trip of 20 ms: a produce forwarded at +100 ms reaches the broker at +110, is
    appended and covered by the high watermark at +115, and its answer is back at +125. A
    consumer's fetch forwarded at T0 reached purgatory at +10 and was woken at +115: its data
    came 105 ms after it went out (on the clock of the fetches the proxy forwards), the answer
    less the round trip. The forwarding alone would say 100. Its answer, back at +130, was ready
    a round trip earlier on that clock."""
    m = _away_with_a_round_trip_learned(20, answers=4)
    assert m.round_trips.estimate() == 20 * MS
    m.on_produce(produce_ev(T0 + 100 * MS, T0 + 125 * MS, base=5, n=5))
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 130 * MS, T0 + 130 * MS, offset=5, records=5, hw=10))
    assert (s.outcome, s.basis, s.wake_lag_ns) == (WOKEN, "produce_seen", 25 * MS)
    assert s.wait_ns == _answered_wait(T0, T0 + 110 * MS)


def test_away_from_the_broker_the_forwarding_dates_the_data_until_the_round_trip_is_learned() -> None:
    m = _away_with_a_round_trip_learned(20, answers=3)
    m.on_produce(produce_ev(T0 + 100 * MS, T0 + 125 * MS, base=5, n=5))
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 125 * MS, T0 + 125 * MS, offset=5, records=5, hw=10))
    assert (s.outcome, s.wake_lag_ns) == (WOKEN, 25 * MS)  # dated at +100
    assert s.wait_ns == _answered_wait(T0, T0 + 125 * MS)  # its answer as seen


def test_away_from_the_broker_the_answer_never_dates_data_before_its_produce_was_forwarded() -> None:
    m = _away_with_a_round_trip_learned(20, answers=4)
    m.on_produce(produce_ev(T0 + 100 * MS, T0 + 110 * MS, base=5, n=5))  # answered faster than the round trip
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 115 * MS, T0 + 115 * MS, offset=5, records=5, hw=10))
    assert (s.outcome, s.wake_lag_ns) == (WOKEN, 15 * MS)  # dated at +100, not +90
    # its wait never ends before the data came
    assert s.wait_ns == 100 * MS - CONSUMER_PARK_NS


def test_the_round_trip_is_the_shortest_of_the_recent_ones() -> None:
    """A slow answer now and then (a coordinator busy, a GC pause) does not move it; the oldest
    of more than 32 go."""
    m = LatencyModel(wall_minus_mono_ns=0)
    for ns in [6 * MS, 5 * MS, 90 * MS, 6 * MS, 90 * MS]:
        m.learn_round_trip(ns)
    assert m.round_trips.estimate() == 5 * MS
    for _ in range(32):
        m.learn_round_trip(7 * MS)
    assert m.round_trips.estimate() == 7 * MS


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=50), max_size=200))
def test_the_kept_shortest_is_the_shortest_of_the_window(rtts: list[int]) -> None:
    """The estimate kept as answers come (O(1) to read) is what a min over the last 32 gives,
    ties and the shortest leaving the window included (small values: many ties)."""
    m = LatencyModel(wall_minus_mono_ns=0)
    for i, ns in enumerate(rtts):
        m.learn_round_trip(ns)
        window = rtts[max(0, i + 1 - ROUND_TRIPS_KEPT): i + 1]
        assert m.round_trips.estimate() == (min(window) if len(window) >= ROUND_TRIPS_TO_TRUST else -1)


def test_a_follower_is_woken_by_the_end_of_the_append() -> None:
    """The append begins with the produce's turn at the broker and ends out of the sidecar's
    sight (acks=all answers after replication): a follower's data is dated by its answer less
    what an answer takes this broker to start, never before the append began."""
    m = LatencyModel(wall_minus_mono_ns=0, beside_broker=True)
    for _ in range(64):
        m.learn_first_byte(1 * MS)  # the calibration's fetches that cannot park, answered in 1 ms
    assert abs(m.first_byte_ns - 1 * MS) < 0.02 * MS
    m.first_byte_ns = 1 * MS
    m.on_produce(produce_ev(T0 + 100 * MS, T0 + 108 * MS, base=0, n=5, acks=-1))  # acks=all: acked after replication
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 104 * MS, T0 + 104 * MS, records=5, hw=0, replica=2))
    # its wait began once the leader had recorded its progress (FOLLOWER_PARK_NS after it went out)
    assert (s.kind, s.outcome, s.basis, s.wait_ns) == ("follower", WOKEN, "append_end", 103 * MS - FOLLOWER_PARK_NS)
    assert s.local_ns == MS + FOLLOWER_PARK_NS
    assert not s.confident  # estimated
    # answered at once after the append began: the append's start dates it
    m.on_produce(produce_ev(T0 + 200 * MS, T0 + 208 * MS, base=5, n=5, acks=-1))
    s, _ = m.on_fetch(fetch_ev(T0 + 150 * MS, T0 + 200 * MS + MS // 2, T0 + 200 * MS + MS // 2, offset=5, records=5,
                               hw=5, replica=2))
    assert (s.outcome, s.basis, s.wait_ns) == (WOKEN, "produce_seen", 50 * MS - FOLLOWER_PARK_NS)
    # data whose append ended before the follower's fetch had parked found it not parked yet
    s, _ = m.on_fetch(fetch_ev(T0 + 300 * MS, T0 + 301 * MS + MS // 2, T0 + 301 * MS + MS // 2, offset=10, records=5,
                               hw=10, replica=2))
    assert (s.outcome, s.basis, s.wait_ns) == (IMMEDIATE, "append_end", 0)


def test_a_follower_is_woken_by_an_acks_all_produce_not_answered_yet() -> None:
    """acks=all: the leader answers a produce only after every follower's next fetch shows it
    has the records, so when a follower's fetch comes back its data's produce is still pending.
    The pending produces follow the last answered one in the log, each as long as its records."""
    m = LatencyModel(wall_minus_mono_ns=0, beside_broker=True)
    m.first_byte_ns = 1 * MS  # what an answer takes this broker to start (learned)
    m.on_produce(produce_ev(T0 - 90 * MS, T0 - 80 * MS, base=0, n=5, acks=-1))  # offsets 0-4, answered
    first, second = (produce_ev(T0 + t * MS, T0 + 90 * MS, base=b, n=5, acks=-1) for t, b in ((20, 5), (40, 10)))
    m.on_produce_sent(first.request, T0 + 20 * MS)  # offsets 5-9
    m.on_produce_sent(second.request, T0 + 40 * MS)  # offsets 10-14
    # a follower that has 0-9 already, parked at T0, is woken by the second produce
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 41 * MS, T0 + 41 * MS, offset=10, records=5, hw=5, replica=2))
    assert (s.kind, s.outcome, s.basis, s.wait_ns) == ("follower", WOKEN, "produce_seen", 40 * MS - FOLLOWER_PARK_NS)
    # one still at 5, fetching after the first was sent, found it there (answered in the time an
    # answer takes)
    s, _ = m.on_fetch(fetch_ev(T0 + 30 * MS, T0 + 31 * MS, T0 + 31 * MS, offset=5, records=5, hw=5, replica=1))
    assert (s.outcome, s.basis, s.wait_ns) == (IMMEDIATE, "append_end", 0)
    # the same, answered 3 ms later than an answer takes: the append had not ended, it was parked
    s, _ = m.on_fetch(fetch_ev(T0 + 30 * MS, T0 + 34 * MS, T0 + 34 * MS, offset=5, records=5, hw=5, replica=3))
    assert (s.outcome, s.basis, s.wait_ns) == (WOKEN, "append_end", 3 * MS - FOLLOWER_PARK_NS)
    m.on_produce(first)  # answered: no longer pending, and now a known append
    assert m.logs.get("t", 0).pending == [T0 + 40 * MS]
    # a produce sent after the follower's response began cannot have woken it
    late = produce_ev(T0 + 60 * MS, T0 + 90 * MS, base=15, n=5, acks=-1)
    m.on_produce(second)
    m.on_produce_sent(late.request, T0 + 60 * MS)
    s, _ = m.on_fetch(fetch_ev(T0 + 50 * MS, T0 + 55 * MS, T0 + 55 * MS, offset=15, records=5, hw=15, replica=2))
    assert s.basis != "produce_seen"


def test_a_consumer_answered_before_the_produce_that_woke_it_is_dated_by_that_produce() -> None:
    """Kafka completes a parked consumer fetch as the high watermark moves, racing the produce's
    own answer: the fetch's answer can come first. Its data is then dated by the pending
    produce forwarded (the CreateTime, the producer's clock before its batch was sent, would call
    it immediate)."""
    m = LatencyModel(wall_minus_mono_ns=0, beside_broker=True)
    m.on_produce(produce_ev(T0 - 90 * MS, T0 - 80 * MS, base=0, n=5))  # offsets 0-4, answered
    pending = produce_ev(T0 + 30 * MS, T0 + 36 * MS, base=5, n=5)
    m.on_produce_sent(pending.request, T0 + 30 * MS)  # offsets 5-9, not answered yet
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 34 * MS, T0 + 34 * MS, offset=5, records=5, hw=10,
                               first_ts_ms=(T0 - 2 * MS) // MS))
    assert (s.kind, s.outcome, s.basis, s.wake_lag_ns) == ("consumer", WOKEN, "produce_seen", 4 * MS)


def test_acks_zero_produce_dates_the_data_by_its_forwarding() -> None:
    m = LatencyModel(wall_minus_mono_ns=0, beside_broker=True)
    m.on_produce(produce_ev(T0 + 100 * MS, T0 + 100 * MS, base=0, n=5, acks=0))
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 103 * MS, T0 + 103 * MS, records=5, hw=5))
    assert (s.outcome, s.wake_lag_ns) == (WOKEN, 3 * MS)


def test_a_rejected_batch_is_not_produced_until_the_retry_is_accepted() -> None:
    m = LatencyModel(wall_minus_mono_ns=0)
    rejected = m.on_produce(produce_ev(T0, T0 + 1 * MS, base=-1, n=5, error=6))  # NOT_LEADER_OR_FOLLOWER
    accepted = m.on_produce(produce_ev(T0 + 2 * MS, T0 + 3 * MS, base=0, n=5))
    acks0 = produce_ev(T0 + 4 * MS, T0 + 4 * MS, base=5, n=5, acks=0)
    acks0.response = None  # acks=0: no response
    unanswered = m.on_produce(acks0)
    assert [(s.records, s.accepted) for s in (rejected, accepted, unanswered)] == [(5, 0), (5, 5), (5, 5)]


def test_data_known_before_the_request_is_immediate() -> None:
    m = LatencyModel(wall_minus_mono_ns=0)
    m.on_produce(produce_ev(T0 - 50 * MS, T0 - 49 * MS, base=0, n=5))
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 2 * MS, T0 + 2 * MS, records=5, hw=5))
    assert (s.outcome, s.wait_ns, s.local_ns) == (IMMEDIATE, 0, 2 * MS)


def test_high_watermark_from_an_earlier_fetch_counts_as_knowledge() -> None:
    m = LatencyModel(wall_minus_mono_ns=0)
    m.on_fetch(fetch_ev(T0, T0 + 1 * MS, T0 + 1 * MS, offset=0, records=3, hw=10))
    s, _ = m.on_fetch(fetch_ev(T0 + 5 * MS, T0 + 7 * MS, T0 + 7 * MS, offset=3, records=7, hw=10))
    assert (s.outcome, s.basis) == (IMMEDIATE, "known_log_end")


def test_read_committed_waits_on_the_stable_offset() -> None:
    m = LatencyModel(wall_minus_mono_ns=0)
    m.logs.get("t", 0).log_end = 10
    m.logs.get("t", 0).stable_end = 3
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 503 * MS, T0 + 503 * MS, offset=3, isolation=1))
    assert s.outcome == EXPIRED


def test_create_time_arrival_uses_the_wall_clock_pair() -> None:
    wall_minus_mono = 1_700_000_000_000 * MS
    m = LatencyModel(wall_minus_mono_ns=wall_minus_mono)
    arrival_wall_ms = (T0 + wall_minus_mono) // MS + 40
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 45 * MS, T0 + 45 * MS, records=1, hw=1, first_ts_ms=arrival_wall_ms,
                               max_ts_ms=arrival_wall_ms))
    assert (s.outcome, s.basis, s.wake_lag_ns, s.confident) == (WOKEN, "create_time", 5 * MS, False)
    assert s.partitions[0].record_latency_ns == 5 * MS  # KIP-489: response time - newest record


def test_record_latency_of_records_produced_in_the_past() -> None:
    wall_minus_mono = 1_700_000_000_000 * MS
    m = LatencyModel(wall_minus_mono_ns=wall_minus_mono)
    old = (T0 + wall_minus_mono) // MS - 60_000  # records stamped a minute before the fetch went out
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 1 * MS, T0 + 2 * MS, records=2, hw=2, first_ts_ms=old, max_ts_ms=old))
    assert s.partitions[0].record_latency_ns == 60_002 * MS


def test_follower_fetch_confirms_appends_as_replication_latency() -> None:
    m = LatencyModel(wall_minus_mono_ns=0)
    m.on_fetch(fetch_ev(T0, T0 + 1 * MS, T0 + 1 * MS, offset=0, replica=2, max_wait=500))  # follower at 0
    m.on_produce(produce_ev(T0 + 10 * MS, T0 + 11 * MS, base=0, n=5))
    m.on_produce(produce_ev(T0 + 20 * MS, T0 + 21 * MS, base=5, n=5))
    s, rep = m.on_fetch(fetch_ev(T0 + 30 * MS, T0 + 31 * MS, T0 + 31 * MS, offset=5, replica=2, records=5, hw=10))
    assert s.kind == "follower"
    assert [(r.follower, r.latency_ns) for r in rep] == [(2, 20 * MS)]  # offsets 0-4, appended at +10 ms
    _, rep = m.on_fetch(fetch_ev(T0 + 45 * MS, T0 + 46 * MS, T0 + 46 * MS, offset=10, replica=2))
    assert [r.latency_ns for r in rep] == [25 * MS]
    _, rep = m.on_fetch(fetch_ev(T0 + 50 * MS, T0 + 51 * MS, T0 + 51 * MS, offset=10, replica=3))
    assert rep == []  # a follower's first fetch: what it confirmed before we looked is not counted


def test_a_partitions_appends_are_bounded_and_take_eight_bytes_a_column() -> None:
    """The appends a sidecar keeps of a partition it leads: a bounded window, stored as int64
    columns (the soak's RSS grew by ~0.45 MB a partition while they were lists of ints)."""
    m = LatencyModel(wall_minus_mono_ns=0)
    n = 3 * MAX_APPENDS_PER_PARTITION
    m.on_produce(produce_ev(T0, T0 + MS, base=0, n=1))  # the partition exists before we count
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for i in range(1, n):  # timestamps far above the small-int cache, as monotonic ns are
            m.on_produce(produce_ev(T0 + i * MS, T0 + i * MS + 500_000, base=i, n=1))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # three int64 columns at the bound, with the growth a column keeps, and no int objects
    assert held < 3 * 8 * MAX_APPENDS_PER_PARTITION * 1.5, held
    # the window still dates data: the newest appends are there, the oldest went
    sent = T0 + (n - 2) * MS - 100_000  # just before the last append began
    s, _ = m.on_fetch(fetch_ev(sent, T0 + n * MS, T0 + n * MS, offset=n - 2, records=1, hw=n - 1))
    assert s.basis == "produce_seen"
    m.on_fetch(fetch_ev(T0 + n * MS, T0 + (n + 1) * MS, T0 + (n + 1) * MS, offset=1, replica=2, max_wait=500))
    _, rep = m.on_fetch(fetch_ev(T0 + (n + 2) * MS, T0 + (n + 3) * MS, T0 + (n + 3) * MS, offset=n, replica=2))
    # a follower confirming everything gets a sample for each append still held, the oldest trimmed
    assert MAX_APPENDS_PER_PARTITION * 3 // 4 <= len(rep) <= MAX_APPENDS_PER_PARTITION, len(rep)
    assert rep[-1].latency_ns == 3 * MS  # the last append (end n) began at T0 + (n - 1) ms


SECOND = 1000 * MS


def _held_appends(m: LatencyModel) -> int:
    return len(m.logs.get("t", 0).append_ends)


def test_appends_go_after_the_horizon_once_every_follower_holds_them() -> None:
    """A partition written 10 times a second for 5 minutes, its follower confirming each append:
    what is held is the last minute's, not the last 4 096 appends."""
    m = LatencyModel(wall_minus_mono_ns=0)
    m.on_fetch(fetch_ev(T0, T0 + MS, T0 + MS, offset=0, replica=2, max_wait=500))
    samples = []
    for i in range(3000):
        t = T0 + i * 100 * MS
        m.on_produce(produce_ev(t, t + 2 * MS, base=i, n=1))
        samples += m.on_fetch(fetch_ev(t + 5 * MS, t + 6 * MS, t + 6 * MS, offset=i + 1, replica=2))[1]
    assert len(samples) == 3000 and {r.latency_ns for r in samples} == {5 * MS}  # every append, once
    per_horizon = APPEND_HORIZON_NS // (100 * MS)
    assert per_horizon <= _held_appends(m) <= per_horizon + TRIM_EVERY + 1
    assert m.appends_held == _held_appends(m)  # what fetchlat_held_entries{structure="appends"} says
    m.learn_every_topic((), ())  # the topic is gone: so are its appends
    assert m.appends_held == 0


def test_data_in_appends_let_go_was_there_before_a_fetch_in_flight() -> None:
    """A consumer far behind fetches just as the first append after a long lull comes: the
    append lets the old ones go (and moves the known log end past the request), yet the data
    the fetch gets was there long before it: immediate, not woken by that append."""
    m = LatencyModel(wall_minus_mono_ns=0)
    for i in range(2 * TRIM_EVERY - 1):
        m.on_produce(produce_ev(T0 + i * 100 * MS, T0 + i * 100 * MS + 2 * MS, base=i, n=1))
    r = T0 + 100 * SECOND
    m.on_produce(produce_ev(r + MS, r + 3 * MS, base=2 * TRIM_EVERY - 1, n=1))
    assert _held_appends(m) == 1  # the lull's appends went
    s, _ = m.on_fetch(fetch_ev(r, r + 4 * MS, r + 4 * MS, offset=10, records=1, hw=2 * TRIM_EVERY))
    assert s.outcome == IMMEDIATE, (s.outcome, s.basis)


def test_a_lagging_follower_keeps_its_unconfirmed_appends_and_is_sampled_when_it_catches_up() -> None:
    """Follower 3 stops fetching for 2 minutes (a restart) while follower 2 keeps up: the appends
    3 has not confirmed stay past the horizon, and its catching-up fetch samples each of them."""
    m = LatencyModel(wall_minus_mono_ns=0)
    for f in (2, 3):
        m.on_fetch(fetch_ev(T0, T0 + MS, T0 + MS, offset=0, replica=f, max_wait=500))
    n = 1200  # 2 minutes at 10 a second
    for i in range(n):
        t = T0 + i * 100 * MS
        m.on_produce(produce_ev(t, t + 2 * MS, base=i, n=1))
        m.on_fetch(fetch_ev(t + 5 * MS, t + 6 * MS, t + 6 * MS, offset=i + 1, replica=2))
    assert _held_appends(m) >= n - 1
    t = T0 + n * 100 * MS
    _, rep = m.on_fetch(fetch_ev(t, t + MS, t + MS, offset=n, replica=3))
    assert len(rep) == n and max(r.latency_ns for r in rep) == n * 100 * MS
    for i in range(n, n + 2 * TRIM_EVERY):  # both hold everything now: the old appends go
        t = T0 + i * 100 * MS
        m.on_produce(produce_ev(t, t + 2 * MS, base=i, n=1))
        for f in (2, 3):
            m.on_fetch(fetch_ev(t + 5 * MS, t + 6 * MS, t + 6 * MS, offset=i + 1, replica=f))
    assert _held_appends(m) <= APPEND_HORIZON_NS // (100 * MS) + TRIM_EVERY + 1
    assert m.appends_held == _held_appends(m)


def test_throttled_and_error_fetches() -> None:
    m = LatencyModel(wall_minus_mono_ns=0)
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 503 * MS, T0 + 503 * MS, throttle=200))
    assert s.throttled and s.outcome == EXPIRED
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 1 * MS, T0 + 1 * MS, error=6))
    assert (s.outcome, s.error_code, s.wait_ns) == ("error", 6, 0)


def test_e2e_adds_proxy_time_and_client_rtt() -> None:
    m = LatencyModel(wall_minus_mono_ns=0)
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 503 * MS, T0 + 503 * MS), proxy_ns=50_000, client_rtt_ns=200_000)
    assert s.e2e_ns == s.local_ns + 250_000


def test_a_topic_id_without_a_name_is_asked_about_once() -> None:
    import uuid

    m = LatencyModel(wall_minus_mono_ns=0)
    known, gone = uuid.UUID(int=1), uuid.UUID(int=2)
    assert m.cluster.topic(known) == str(known) and m.cluster.unnamed == {known}  # the proxy asks its broker now
    m.cluster.learn_topic_ids((("orders", known),), everything=True)  # every topic the broker has: not `gone`
    assert m.cluster.topic(known) == "orders" and m.cluster.unnamed == set()
    m.cluster.topic(gone)
    m.cluster.learn_topic_ids((("orders", known),), everything=True)
    m.cluster.topic(gone)
    assert m.cluster.unnamed == set() and m.cluster.nameless == {gone}  # not asked about again
    m.cluster.learn_topic_ids((("late", gone),))  # a client's Metadata names it after all
    assert m.cluster.topic(gone) == "late" and m.cluster.nameless == set()


def test_topic_names_hold_what_exists_and_stay_bounded() -> None:
    """Topics are created and deleted all day: a full answer (the proxy's own Metadata for every
    topic) replaces the names, so a deleted topic's id goes; partial answers (clients' Metadata)
    add, up to the bound every per-partition map has."""
    import uuid

    from fetchlat.metrics.cluster import MAX_PARTITIONS, ClusterView

    c = ClusterView()
    for day in range(3):  # 10 000 topics a day, each deleted by the next day's full answer
        topics = tuple((f"t-{day}-{i}", uuid.UUID(int=day * 10_000 + i + 1)) for i in range(10_000))
        c.learn_topic_ids(topics, everything=True)
        assert len(c.topic_names) == 10_000 and c.topic(topics[0][1]) == f"t-{day}-0"
    for i in range(MAX_PARTITIONS + 10):  # only partial answers, never a full one
        c.learn_topic_ids(((f"p-{i}", uuid.UUID(int=10**9 + i)),))
    assert len(c.topic_names) <= MAX_PARTITIONS


def test_a_full_answer_lets_go_of_what_the_model_held_of_deleted_topics() -> None:
    """A topic deleted (its partitions no longer in the broker's answer for every topic): the
    model's per-partition state and the partition leaders of that topic go; the others stay."""
    import uuid

    m = LatencyModel(wall_minus_mono_ns=0)
    m.on_produce(produce_ev(T0, T0 + MS, 0, 1))  # topic "t", partition 0
    assert m.partitions_held == 1
    m.cluster.learn_leaders((("t", 0, 1), ("old", 0, 1)))
    assert m.learn_every_topic((("t", uuid.UUID(int=1)),), (("t", 0, 1),)) == 0  # "t" exists: kept
    assert m.partitions_held == 1 and m.cluster.leaders == {("t", 0): 1}  # "old" is gone from the leaders
    assert m.learn_every_topic((("u", uuid.UUID(int=2)),), (("u", 0, 1),)) == 1  # "t" deleted since
    assert m.partitions_held == 0 and m.cluster.leaders == {("u", 0): 1} and m.cluster.topic_names == {
        uuid.UUID(int=2): "u"}


def test_a_follower_serving_a_consumer_dates_its_data_by_the_answer() -> None:
    """KIP-392: broker 2 serves a consumer for a partition broker 1 leads. The record was made
    10 ms before the fetch, yet broker 2 showed it only once its high watermark moved (the
    leader's side of replication, invisible here): answered 40 ms after the request, the fetch
    was woken then, less the broker's time to start an answer. At the leader, the same exchange
    is immediate by its CreateTime. A leader unknown asks for the leaders."""
    wall_minus_mono = 1_700_000_000_000 * MS
    made = (T0 + wall_minus_mono) // MS - 10
    ev = fetch_ev(T0, T0 + 40 * MS, T0 + 41 * MS, records=1, hw=1, first_ts_ms=made, max_ts_ms=made)
    m = LatencyModel(wall_minus_mono_ns=wall_minus_mono)
    s, _ = m.on_fetch(ev, broker_node=2)
    assert (s.outcome, s.basis) == (IMMEDIATE, "create_time") and m.cluster.leaders_wanted  # leader unknown: as before
    m.cluster.learn_leaders((("t", 0, 1),), everything=True)
    assert not m.cluster.leaders_wanted
    s, _ = m.on_fetch(ev, broker_node=2)
    assert (s.outcome, s.basis, s.confident) == (WOKEN, "replica_high_watermark", False)
    assert s.wake_lag_ns == m.first_byte_ns and s.wait_ns == _answered_wait(T0, T0 + 40 * MS)
    s, _ = LatencyModel(wall_minus_mono_ns=wall_minus_mono).on_fetch(ev, broker_node=1)
    assert (s.outcome, s.basis) == (IMMEDIATE, "create_time")


def test_a_follower_fetch_shows_which_broker_leads() -> None:
    m = LatencyModel(wall_minus_mono_ns=0)
    m.on_fetch(fetch_ev(T0, T0 + 500 * MS, T0 + 500 * MS, replica=2), broker_node=0)
    assert m.cluster.leaders == {("t", 0): 0}


def test_a_read_committed_fetch_woken_by_a_commit_marker_is_dated_by_the_answer() -> None:
    """A transaction's records were produced (and seen) before a read_committed fetch went out,
    but the stable offset held them back; the answer, 200 ms later, carries them with their
    commit marker (a control batch): the marker woke the fetch, not the produce."""
    m = LatencyModel(wall_minus_mono_ns=0)
    m.on_produce(produce_ev(T0 - 5 * MS, T0 - 4 * MS, base=3, n=5))
    m.logs.get("t", 0).stable_end = 3
    ev = fetch_ev(T0, T0 + 200 * MS, T0 + 201 * MS, offset=3, records=5, hw=9, isolation=1)
    ev.response.partitions[0].batches.control_batches = 1
    s, _ = m.on_fetch(ev)
    assert (s.outcome, s.basis, s.confident) == (WOKEN, "transaction_marker", False)
    assert s.wake_lag_ns == m.first_byte_ns and s.wait_ns == _answered_wait(T0, T0 + 200 * MS)
    m2 = LatencyModel(wall_minus_mono_ns=0)  # read_uncommitted: the produce made it visible
    m2.on_produce(produce_ev(T0 - 5 * MS, T0 - 4 * MS, base=3, n=5))
    s, _ = m2.on_fetch(fetch_ev(T0, T0 + 1 * MS, T0 + 1 * MS, offset=3, records=5, hw=9))
    assert s.outcome == IMMEDIATE


def test_a_share_fetch_is_dated_from_the_first_offset_it_acquired() -> None:
    m = LatencyModel(wall_minus_mono_ns=0, beside_broker=True)
    # an idle share consumer's long poll runs to expiry: kind share, nothing acquired
    s, _ = m.on_fetch(share_ev(T0 - 600 * MS, T0 - 98 * MS, T0 - 98 * MS), broker_node=0)
    assert (s.kind, s.outcome, s.wait_ns, s.local_ns, s.records) == (Kind.SHARE, EXPIRED, 501 * MS, 1 * MS, 0)
    # parked at T0, woken when the produce of offsets 0-4 was acknowledged (+102 ms)
    m.on_produce(produce_ev(T0 + 100 * MS, T0 + 102 * MS, base=0, n=5))
    s, _ = m.on_fetch(share_ev(T0, T0 + 103 * MS, T0 + 103 * MS, acquired_from=0, records=3), broker_node=0)
    # parked 0.9 ms after it went out (the broker's share-group work first), and parked as the
    # broker counts it until its answer was ready, 0.3 ms before the answer's first byte (+103 ms)
    assert (s.outcome, s.basis, s.wait_ns, s.local_ns, s.records) == (WOKEN, "produce_seen", 101_800_000, 1_200_000, 3)
    assert s.partitions[0].fetch_offset == 0 and m.cluster.leaders[("t", 0)] == 0  # only a leader serves a share fetch
    # the next share fetch acquires the rest of the batch, which was in the log before it went out
    s, _ = m.on_fetch(share_ev(T0 + 200 * MS, T0 + 202 * MS, T0 + 202 * MS, acquired_from=3, records=2,
                               batch_base=0), broker_node=0)
    assert (s.outcome, s.wait_ns, s.local_ns, s.records) == (IMMEDIATE, 0, 2 * MS, 2)


def test_a_share_fetch_answered_before_the_produce_that_woke_it_is_dated_by_that_produce() -> None:
    m = LatencyModel(wall_minus_mono_ns=0, beside_broker=True)
    m.on_produce(produce_ev(T0 - 900 * MS, T0 - 898 * MS, base=0, n=1))
    m.on_produce_sent(produce_ev(T0 + 50 * MS, T0 + 53 * MS, base=1, n=1).request, T0 + 50 * MS)
    # the share fetch's answer (+52 ms) comes before the produce's (+53 ms): woken by it, and
    # parked until 0.3 ms before its own answer
    s, _ = m.on_fetch(share_ev(T0, T0 + 52 * MS, T0 + 52 * MS, acquired_from=1, records=1, first_ts_ms=1),
                      broker_node=0)
    assert (s.outcome, s.basis, s.wait_ns) == (WOKEN, "produce_seen", 52 * MS - 300_000 - 900_000)
    assert s.wake_lag_ns == 2 * MS  # the data's arrival stays what the wake lag counts from


def test_a_share_fetch_carrying_acknowledgements_parks_later_and_its_wait_ends_at_its_answer() -> None:
    m = LatencyModel(wall_minus_mono_ns=0, beside_broker=True)
    m.on_produce(produce_ev(T0 + 10 * MS, T0 + 12 * MS, base=0, n=5))
    # the broker completed it 3 ms after the produce's answer (reading the log, acquiring): the
    # broker counts all of that as its wait; with acknowledgements it parked 1.5 ms in
    s, _ = m.on_fetch(share_ev(T0, T0 + 15 * MS, T0 + 15 * MS, acquired_from=0, records=5, acknowledgements=2),
                      broker_node=0)
    assert (s.outcome, s.wait_ns, s.local_ns) == (WOKEN, 15 * MS - 300_000 - 1_500_000, 1_800_000)
    # data there before it parked: immediate, and never taken for what an answer takes to start
    before = m.first_byte_ns
    s, _ = m.on_fetch(share_ev(T0 + 12_500_000, T0 + 14 * MS, T0 + 14 * MS, acquired_from=0, records=5,
                               acknowledgements=1), broker_node=0)
    assert (s.outcome, s.wait_ns, m.first_byte_ns) == (IMMEDIATE, 0, before)
    # a share fetch's wait ends at its answer only within max wait
    m.on_produce(produce_ev(T0 + 104 * MS, T0 + 105 * MS, base=5, n=1))
    s, _ = m.on_fetch(share_ev(T0 + 100 * MS, T0 + 160 * MS, T0 + 161 * MS, acquired_from=5, records=1,
                               max_wait=20), broker_node=0)
    assert (s.outcome, s.wait_ns) == (WOKEN, 20 * MS)


def test_a_partition_the_answer_did_not_name_is_not_asked_about_again() -> None:
    m = LatencyModel(wall_minus_mono_ns=0)
    m.on_fetch(fetch_ev(T0, T0 + 2 * MS, T0 + 2 * MS, records=1, hw=1, first_ts_ms=1), broker_node=2)
    assert m.cluster.wants_topics
    m.cluster.learn_leaders((("other", 0, 1),), everything=True)  # the answer does not name t-0 (a topic gone)
    m.on_fetch(fetch_ev(T0, T0 + 2 * MS, T0 + 2 * MS, records=1, hw=1, first_ts_ms=1), broker_node=2)
    assert not m.cluster.wants_topics
    m.cluster.learn_leaders((("t", 0, 1),))  # relayed Metadata names it after all
    s, _ = m.on_fetch(fetch_ev(T0, T0 + 2 * MS, T0 + 2 * MS, records=1, hw=1, first_ts_ms=1), broker_node=2)
    assert s.basis == "replica_high_watermark"
