"""Decoded Fetch/Produce exchanges out of the connection state machine, and fetch-session
mirroring (KIP-227) as a table of rules."""

from __future__ import annotations

import uuid

import pytest
from fetchlat.protocol.connection import KafkaConnection
from fetchlat.protocol.events import FetchExchanged, ProduceExchanged, TopicIdsLearned
from fetchlat.protocol.fetch import FetchPartitionRequest, FetchRequestInfo, FetchResponseInfo
from fetchlat.protocol.rewrite import ResponseRewriter
from fetchlat.protocol.sessions import FetchSessions

from .captures import conversations


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
        assert e.request.kind == "consumer"
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


def test_kafka_python_opens_a_session_and_fetches_incrementally() -> None:
    events = [e for e in replay("kafkapython") if isinstance(e, FetchExchanged)]
    assert events[0].request.session_epoch == 0  # PROTOCOL-NOTES §2b: kafka-python asks for a session
    topic_keys = {t for e in events for t, _, _ in e.covered}
    assert all(isinstance(t, str | uuid.UUID) for t in topic_keys)


def test_metadata_v10_plus_teaches_topic_ids() -> None:
    learned = {name: tid for e in replay("confluent") if isinstance(e, TopicIdsLearned) for name, tid in e.topics}
    # the ids Tansu gave the three topics in the capture (Metadata v12 responses)
    assert learned == {"t-aiokafka": uuid.UUID("01a2014a-51fd-7131-aeb1-a57582c1f92c"),
                       "t-kafkapython": uuid.UUID("01a20153-2e2a-7541-b9bb-d3a1b25c1bf5"),
                       "t-confluent": uuid.UUID("01a20153-99b0-7ff0-ac2d-0c9a5f06439a")}
