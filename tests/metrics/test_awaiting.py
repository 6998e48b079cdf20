"""A fetch of a partition whose leader the proxy does not know yet waits for its broker's answer
(``metrics/awaiting.py``): at a follower (KIP-392), dated by that answer as the follower's, where
it was dated as the leader's before; the order of fetches kept; a wait in vain ends."""

from __future__ import annotations

import uuid

from fetchlat.metrics.awaiting import HOLD_MAX_NS, REST_NS
from fetchlat.metrics.observer import Observer
from fetchlat.metrics.prom import FetchMetrics, ProxyMetrics
from fetchlat.metrics.rows import TraceColumns
from fetchlat.metrics.vocabulary import Outcome

from testkit.events import MS, T0, fetch_ev, produce_ev

WALL_MINUS_MONO = 1_700_000_000_000 * MS


def observer(can_ask: bool = True) -> Observer:
    metrics = ProxyMetrics()
    obs = Observer(metrics, FetchMetrics(metrics.registry), wall_minus_mono_ns=WALL_MINUS_MONO,
                   traces=TraceColumns(native_columns=False), beside_broker=True)
    obs.awaiting.can_ask = lambda: can_ask
    return obs


def follower_fetch(at: int, offset: int = 0) -> object:
    """A consumer's fetch at broker 2 of the record at ``offset``, made 10 ms before it, answered
    40 ms after it."""
    made = (at + WALL_MINUS_MONO) // MS - 10
    return fetch_ev(at, at + 40 * MS, at + 41 * MS, offset=offset, records=1, hw=offset + 1, first_ts_ms=made,
                    max_ts_ms=made)


def rows(obs: Observer) -> list[tuple[object, object]]:
    assert obs.traces is not None
    return [(r["outcome"], r["wait_basis"]) for r in obs.traces.batch.table_rows("exchanges")]


def test_a_fetch_of_a_partition_of_unknown_leader_waits_for_the_answer_and_is_dated_by_it() -> None:
    obs = observer()
    conn = obs.connection(1, "2")
    conn.observe([follower_fetch(T0)], T0 + 41 * MS, T0 + 41 * MS)
    conn.observe([follower_fetch(T0 + 100 * MS, 1)], T0 + 141 * MS, T0 + 141 * MS)
    assert rows(obs) == [] and len(obs.awaiting.held) == 2 and obs.model.cluster.wants_topics  # asked for
    obs.date_awaiting(T0 + 500 * MS)
    assert rows(obs) == []  # no answer yet
    obs.model.learn_every_topic((("t", uuid.UUID(int=1)),), (("t", 0, 1),))  # broker 1 leads it
    obs.date_awaiting(T0 + 1000 * MS)
    assert rows(obs) == [(Outcome.WOKEN.value, "replica_high_watermark")] * 2  # the follower's, in order
    conn.observe([follower_fetch(T0 + 2000 * MS, 2)], T0 + 2041 * MS, T0 + 2041 * MS)
    assert len(rows(obs)) == 3 and not obs.awaiting.held  # known now: dated at once


def test_held_fetches_are_dated_before_the_next_one_and_keep_their_order() -> None:
    obs = observer()
    conn = obs.connection(1, "2")
    conn.observe([follower_fetch(T0)], T0 + 41 * MS, T0 + 41 * MS)
    obs.model.learn_every_topic((("t", uuid.UUID(int=1)),), (("t", 0, 2),))  # broker 2 leads it after all
    conn.observe([follower_fetch(T0 + 100 * MS, 1)], T0 + 141 * MS, T0 + 141 * MS)  # dates the one held first
    assert rows(obs) == [(Outcome.IMMEDIATE.value, "create_time")] * 2 and not obs.awaiting.held


def test_a_wait_in_vain_ends_and_nothing_waits_for_a_while() -> None:
    obs = observer()
    conn = obs.connection(1, "2")
    conn.observe([follower_fetch(T0)], T0 + 41 * MS, T0 + 41 * MS)
    obs.date_awaiting(T0 + HOLD_MAX_NS)  # no answer came: dated with what is known
    assert rows(obs) == [(Outcome.IMMEDIATE.value, "create_time")]
    conn.observe([follower_fetch(T0 + HOLD_MAX_NS + MS, 1)], T0 + HOLD_MAX_NS + 42 * MS, T0 + HOLD_MAX_NS + 42 * MS)
    assert len(rows(obs)) == 2  # resting: dated at once
    later = T0 + HOLD_MAX_NS + REST_NS + MS
    conn.observe([follower_fetch(later, 2)], later + 41 * MS, later + 41 * MS)
    assert len(rows(obs)) == 2 and len(obs.awaiting.held) == 1  # waits again


def test_nothing_waits_where_the_proxy_cannot_ask_nor_away_from_a_broker_nor_once_known() -> None:
    obs = observer(can_ask=False)  # a capture replayed, a broker that wants authentication first
    obs.connection(1, "2").observe([follower_fetch(T0)], T0 + 41 * MS, T0 + 41 * MS)
    assert len(rows(obs)) == 1 and not obs.awaiting.held
    obs = observer()
    obs.connection(1, "kafka-1:9092").observe([follower_fetch(T0)], T0 + 41 * MS, T0 + 41 * MS)  # no node id
    assert len(rows(obs)) == 1
    obs = observer()
    conn = obs.connection(1, "2")
    conn.observe([produce_ev(T0, T0 + MS, 0, 1)], T0 + MS, T0 + MS)  # a produce here: broker 2 leads it
    conn.observe([follower_fetch(T0 + 2 * MS)], T0 + 43 * MS, T0 + 43 * MS)
    assert len(rows(obs)) == 2 and not obs.awaiting.held


def test_the_proxy_stopping_dates_every_fetch_held() -> None:
    obs = observer()
    obs.connection(1, "2").observe([follower_fetch(T0)], T0 + 41 * MS, T0 + 41 * MS)
    obs.date_awaiting(T0 + 50 * MS, everything=True)
    assert len(rows(obs)) == 1 and not obs.awaiting.held
