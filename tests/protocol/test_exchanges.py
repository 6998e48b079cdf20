"""Decoded Fetch/Produce exchanges out of the connection state machine, and fetch-session
mirroring (KIP-227) as a table of rules."""

from __future__ import annotations

import uuid

import pytest
from fetchlat.protocol import apis
from fetchlat.protocol.connection import KafkaConnection
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.events import FetchExchanged, ProduceExchanged, TopicIdsLearned
from fetchlat.protocol.fetch import FetchPartitionRequest, FetchRequestInfo, FetchResponseInfo
from fetchlat.protocol.framing import request_frame, response_frame
from fetchlat.protocol.rewrite import ResponseRewriter
from fetchlat.protocol.schema import load
from fetchlat.protocol.sessions import FetchSessions

from testkit.captures import conversations


def replay(run: str) -> list[object]:
    events: list[object] = []
    for conv in conversations(run).values():
        c = KafkaConnection(rewriter=ResponseRewriter(lambda n, h, p: (h, p)))
        for i, f in enumerate(conv):
            if f.direction == "req":
                events += c.receive_from_client(f.wire, i)
            else:
                events += c.receive_from_broker(f.wire, i)[1]
    return events


@pytest.mark.parametrize("run", ["aiokafka", "kafkapython", "confluent", "kcat"])
def test_each_client_run_yields_its_five_records_both_ways(run: str) -> None:
    events = replay(run)
    produced = sum(e.request.records for e in events if isinstance(e, ProduceExchanged))
    fetched = [e for e in events if isinstance(e, FetchExchanged)]
    got = sum(p.batches.records for e in fetched for p in e.response.partitions if p.batches)
    consumers = 2 if run == "kcat" else 1  # the kcat run consumes as kcat-simple, then as kcat-group
    assert produced == 5 and got == 5 * consumers
    for e in fetched:
        assert not e.request.is_follower
        assert e.t_request_ns <= e.t_first_ns <= e.t_last_ns
        assert len(e.covered) >= len(e.request.partitions)
    acked = [p for e in events if isinstance(e, ProduceExchanged) and e.response for p in e.response.partitions]
    assert acked and all(p.error_code == 0 for p in acked)


def _req(session_id: int, epoch: int, parts: dict[tuple[str, int], int],
         forgotten: tuple[tuple[str, int], ...] = ()) -> FetchRequestInfo:
    return FetchRequestInfo(
        replica_id=-1, replica_epoch=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        partitions=tuple(FetchPartitionRequest(topic=t, topic_id=None, partition=p, fetch_offset=o,
                                               log_start_offset=-1, partition_max_bytes=1 << 20)
                         for (t, p), o in parts.items()),
        forgotten=tuple((t, None, p) for t, p in forgotten), rack_id=None)


def _resp(session_id: int, error: int = 0) -> FetchResponseInfo:
    return FetchResponseInfo(throttle_time_ms=0, error_code=error, session_id=session_id, partitions=(),
                             wait_time_ms=None)


def test_fetch_session_rules() -> None:
    s = FetchSessions()
    full = _req(0, 0, {("a", 0): 10, ("a", 1): 20})
    cov = s.covered(full)
    s.on_response(full, _resp(7), cov)  # the broker opens session 7
    assert len(s) == 1
    inc = _req(7, 1, {("a", 1): 25}, forgotten=())
    assert sorted(s.covered(inc)) == [("a", 0, 10), ("a", 1, 25)]  # unlisted partitions still covered
    inc2 = _req(7, 2, {("b", 0): 0}, forgotten=(("a", 0),))
    assert sorted(s.covered(inc2)) == [("a", 1, 25), ("b", 0, 0)]
    s.on_response(inc2, _resp(7, error=71), ())  # INVALID_FETCH_SESSION_EPOCH drops the mirror
    assert len(s) == 0
    sessionless = _req(0, -1, {("c", 0): 5})
    assert s.covered(sessionless) == (("c", 0, 5),)
    s.on_response(sessionless, _resp(0), s.covered(sessionless))
    assert len(s) == 0
    unknown = _req(99, 3, {("d", 0): 1})  # a session we never saw start
    assert s.covered(unknown) == (("d", 0, 1),)
    assert s.counts() == {"created": 1, "incremental": 2, "unknown": 1, "out_of_step": 0, "errors": 1,
                          "closed": 0, "dropped": 0}


def test_a_session_is_the_brokers_and_its_epochs_are_checked() -> None:
    """One mirror per broker: a session opened on one connection goes on on the next (the
    client's connection closed, the session did not). An epoch other than the one due is
    counted out of step; a closing fetch (epoch -1) ends the session; a full mirror forgets its
    least recently used session first."""
    broker = FetchSessions(limit=2)
    first, second = KafkaConnection(sessions=broker), KafkaConnection(sessions=broker)
    first.receive_from_client(_fetch(1, 0, 0, {0: 10, 1: 20}), 10)
    first.receive_from_broker(_fetch_response(1, 7, (0, 1)), 15)
    second.receive_from_client(_fetch(1, 7, 1, {1: 25}), 20)
    (ev,) = [e for e in second.receive_from_broker(_fetch_response(1, 7, (1,)), 25)[1]
             if isinstance(e, FetchExchanged)]
    assert sorted(ev.covered) == [("t", 0, 10), ("t", 1, 25)]
    s = broker
    s.covered(_req(7, 3, {}))  # epoch 2 was due
    assert (s.incremental, s.out_of_step) == (2, 1)
    s.covered(_req(7, 4, {}))  # in step again from the epoch it saw
    assert s.out_of_step == 1
    for sid in (8, 9):  # two more sessions: 7, used least recently, makes room
        s.on_response(_req(0, 0, {("a", sid): 0}), _resp(sid), (("a", sid, 0),))
    assert (len(s), s.dropped) == (2, 1)
    s.on_response(_req(9, -1, {}), _resp(0), ())
    assert (len(s), s.closed) == (1, 1)
    assert s.covered(_req(7, 5, {("t", 0): 11})) == (("t", 0, 11),) and s.unknown == 1


def test_kafka_python_asks_for_a_session_and_tansu_answers_sessionless() -> None:
    (ev,) = [e for e in replay("kafkapython") if isinstance(e, FetchExchanged)]
    assert ev.request.session_epoch == 0  # docs/proxy.md: kafka-python asks for a session
    assert ev.response.session_id == 0  # Tansu has no fetch sessions: every fetch stays a full one
    assert ev.covered == (("t-kafkapython", 0, ev.request.partitions[0].fetch_offset),)


def _fetch(corr: int, session_id: int, epoch: int, parts: dict[int, int], forgotten: tuple[int, ...] = ()) -> bytes:
    body = encode(load("FetchRequest"), 12, {
        "ReplicaId": -1, "MaxWaitMs": 500, "MinBytes": 1, "MaxBytes": 1 << 20, "SessionId": session_id,
        "SessionEpoch": epoch,
        "Topics": [{"Topic": "t", "Partitions": [{"Partition": p, "FetchOffset": o, "PartitionMaxBytes": 1 << 20}
                                                 for p, o in parts.items()]}] if parts else [],
        "ForgottenTopicsData": [{"Topic": "t", "Partitions": list(forgotten)}] if forgotten else []})
    return request_frame(apis.FETCH, 12, corr, "c", body)


def _fetch_response(corr: int, session_id: int, parts: tuple[int, ...]) -> bytes:
    body = encode(load("FetchResponse"), 12, {"SessionId": session_id, "Responses": [{"Topic": "t", "Partitions": [
        {"PartitionIndex": p, "HighWatermark": 100, "LastStableOffset": 100, "Records": None} for p in parts]}]})
    return response_frame(apis.FETCH, 12, corr, body)


def test_an_incremental_fetch_covers_the_whole_session() -> None:
    """KIP-227 on the wire: a full fetch opens session 7 on partitions 0 and 1; the incremental
    fetches list only what changed, yet each exchange covers the session's whole set."""
    c = KafkaConnection()
    got = []
    for corr, (req, resp) in enumerate([
        (_fetch(1, 0, 0, {0: 10, 1: 20}), _fetch_response(1, 7, (0, 1))),
        (_fetch(2, 7, 1, {1: 25}), _fetch_response(2, 7, (1,))),  # only partition 1 moved
        (_fetch(3, 7, 2, {2: 0}, forgotten=(0,)), _fetch_response(3, 7, ())),  # add 2, forget 0
    ], start=1):
        c.receive_from_client(req, corr * 10)
        got += [e for e in c.receive_from_broker(resp, corr * 10 + 5)[1] if isinstance(e, FetchExchanged)]
    assert [e.request.session_epoch for e in got] == [0, 1, 2]
    assert [len(e.request.partitions) for e in got] == [2, 1, 1]
    assert [sorted(e.covered) for e in got] == [
        [("t", 0, 10), ("t", 1, 20)],
        [("t", 0, 10), ("t", 1, 25)],
        [("t", 1, 25), ("t", 2, 0)],
    ]


def test_metadata_v10_plus_teaches_topic_ids() -> None:
    learned = {name: tid for e in replay("confluent") if isinstance(e, TopicIdsLearned) for name, tid in e.topics}
    # the ids Tansu gave the three topics in the capture (Metadata v12 responses)
    assert learned == {"t-aiokafka": uuid.UUID("01a2014a-51fd-7131-aeb1-a57582c1f92c"),
                       "t-kafkapython": uuid.UUID("01a20153-2e2a-7541-b9bb-d3a1b25c1bf5"),
                       "t-confluent": uuid.UUID("01a20153-99b0-7ff0-ac2d-0c9a5f06439a")}
