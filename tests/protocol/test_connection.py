"""Scripted conversations through the connection state machine: Kafka's correlation rules,
acks=0, raw SASL after SaslHandshake v0, framing errors, and hypothesis properties."""

from __future__ import annotations

import contextlib

import pytest
from fetchlat.protocol import apis
from fetchlat.protocol.connection import KafkaConnection
from fetchlat.protocol.encoder import encode
from fetchlat.protocol.errors import FramingError, ProtocolError
from fetchlat.protocol.events import BrokersLearned, RequestSeen, ResponseSeen, TopicIdsLearned
from fetchlat.protocol.framing import request_frame, response_frame
from fetchlat.protocol.rewrite import ResponseRewriter
from fetchlat.protocol.schema import load
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit.captures import conversations


def request(api_key: int, version: int, corr: int, body: bytes, client_id: str = "t") -> bytes:
    return request_frame(api_key, version, corr, client_id, body)


def response(api_key: int, version: int, corr: int, body: bytes) -> bytes:
    return response_frame(api_key, version, corr, body)


def produce_body(version: int, acks: int) -> bytes:
    return encode(load("ProduceRequest"), version, {"TransactionalId": None, "Acks": acks, "TimeoutMs": 1000,
                                                    "TopicData": []})


def test_responses_come_back_in_request_order_and_pipelined() -> None:
    c = KafkaConnection()
    stream = b"".join(request(apis.METADATA, 1, i, encode(load("MetadataRequest"), 1, {"Topics": []}))
                      for i in range(1, 4))
    events = c.receive_from_client(stream, 10)
    assert [e.correlation_id for e in events if isinstance(e, RequestSeen)] == [1, 2, 3]
    body = encode(load("MetadataResponse"), 1, {"Brokers": [], "Topics": []})
    _out, events = c.receive_from_broker(b"".join(response(apis.METADATA, 1, i, body) for i in (1, 2)), 20)
    assert [(e.correlation_id, e.t_request_ns, e.t_last_ns) for e in events if isinstance(e, ResponseSeen)] == [
        (1, 10, 20), (2, 10, 20)]
    with pytest.raises(FramingError, match="does not match"):
        c.receive_from_broker(response(apis.METADATA, 1, 9, body), 30)


def test_produce_with_acks_0_expects_no_response() -> None:
    c = KafkaConnection()
    events = c.receive_from_client(request(apis.PRODUCE, 9, 1, produce_body(9, 0)) +
                                   request(apis.PRODUCE, 7, 2, produce_body(7, 1)), 5)
    assert [(e.correlation_id, e.expects_response) for e in events if isinstance(e, RequestSeen)] == [
        (1, False), (2, True)]
    body = encode(load("ProduceResponse"), 7, {"Responses": []})
    _, events = c.receive_from_broker(response(apis.PRODUCE, 7, 2, body), 6)
    assert [e.correlation_id for e in events if isinstance(e, ResponseSeen)] == [2]


def test_raw_sasl_tokens_after_handshake_v0() -> None:
    c = KafkaConnection()
    hs = encode(load("SaslHandshakeRequest"), 0, {"Mechanism": "SCRAM-SHA-256"})
    c.receive_from_client(request(apis.SASL_HANDSHAKE, 0, 1, hs), 1)
    ok = encode(load("SaslHandshakeResponse"), 0, {"ErrorCode": 0, "Mechanisms": ["SCRAM-SHA-256"]})
    c.receive_from_broker(response(apis.SASL_HANDSHAKE, 0, 1, ok), 2)
    for token, answer in ((b"n,,n=u,r=abc", b"r=abcdef,s=xx,i=4096"), (b"c=biws,r=abcdef,p=zz", b"v=qq")):
        events = c.receive_from_client(len(token).to_bytes(4, "big") + token, 3)
        assert events == []  # tokens are not Kafka requests, and never decoded
        out, events = c.receive_from_broker(len(answer).to_bytes(4, "big") + answer, 4)
        assert b"".join(bytes(s) for s in out)[4:] == answer
    # after two SCRAM rounds the connection speaks Kafka again
    events = c.receive_from_client(request(apis.API_VERSIONS, 0, 2, b""), 5)
    assert [e.api_key for e in events if isinstance(e, RequestSeen)] == [apis.API_VERSIONS]


def test_oversized_and_non_positive_frames_are_framing_errors() -> None:
    c = KafkaConnection(max_frame_bytes=1000)
    with pytest.raises(FramingError, match="exceeds the limit"):
        c.receive_from_client((5000).to_bytes(4, "big"), 1)
    with pytest.raises(FramingError, match="not positive"):
        KafkaConnection().receive_from_client((-3).to_bytes(4, "big", signed=True), 1)


def test_response_matching_no_request_is_a_framing_error() -> None:
    with pytest.raises(FramingError, match="matches no request"):
        KafkaConnection().receive_from_broker(response(apis.METADATA, 1, 1, b"\x00" * 8), 1)


def test_metadata_rewrite_learns_brokers_and_streams_fetches() -> None:
    adv = {1: ("proxy", 9001)}
    c = KafkaConnection(rewriter=ResponseRewriter(lambda n, h, p: adv.get(n)))
    c.receive_from_client(request(apis.METADATA, 12, 1, encode(load("MetadataRequest"), 12, {"Topics": []})), 1)
    body = encode(load("MetadataResponse"), 12, {"Brokers": [{"NodeId": 1, "Host": "kafka-1", "Port": 9092}],
                                                 "Topics": []})
    out, events = c.receive_from_broker(response(apis.METADATA, 12, 1, body), 2)
    learned = [e for e in events if isinstance(e, BrokersLearned)]
    assert [(b.node_id, b.host, b.port) for b in learned[0].brokers] == [(1, "kafka-1", 9092)]
    assert b"proxy" in b"".join(bytes(s) for s in out) and b"kafka-1" not in b"".join(bytes(s) for s in out)
    # a v11 fetch response is streamed: the very object received is forwarded
    c.receive_from_client(request(apis.FETCH, 11, 2, b"\x00" * 40), 3)
    chunk = response(apis.FETCH, 11, 2, b"\x00" * 100)
    out, _ = c.receive_from_broker(chunk[:50], 4)
    assert b"".join(bytes(s) for s in out) == chunk[:50]
    rest = chunk[50:]
    out, _ = c.receive_from_broker(rest, 5)
    assert out[0] is rest


def _streams(run: str) -> list[tuple[bytes, bytes]]:
    out = []
    for conv in conversations(run).values():
        if any(f.api_key == apis.SASL_HANDSHAKE for f in conv):
            continue
        out.append((b"".join(f.wire for f in conv if f.direction == "req"),
                    b"".join(f.wire for f in conv if f.direction == "resp")))
    return out


STREAMS = [s for run in ("confluent", "kafkapython", "aiokafka", "kcat") for s in _streams(run)]


def _run(req: bytes, resp: bytes, req_cuts: list[int], resp_cuts: list[int],
         settle_at_end: bool = False) -> tuple[list[object], bytes]:
    c = KafkaConnection(rewriter=ResponseRewriter(lambda n, h, p: ("proxy", 1000 + n)))
    events: list[object] = []
    for a, b in zip([0, *req_cuts], [*req_cuts, len(req)], strict=True):
        events += c.receive_from_client(req[a:b], 0)
    forwarded = []
    for a, b in zip([0, *resp_cuts], [*resp_cuts, len(resp)], strict=True):
        out, ev = c.forward_from_broker(resp[a:b], 0)
        events += ev
        forwarded += [bytes(s) for s in out]
        if not settle_at_end:
            events += c.after_write()  # what the proxy runs once the chunk went out
    events += c.after_write()
    return events, b"".join(forwarded)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_split_of_a_captured_stream_decodes_identically(data: st.DataObject) -> None:
    req, resp = data.draw(st.sampled_from(STREAMS))
    cuts = st.lists(st.integers(1, max(1, len(req) - 1)), max_size=12, unique=True).map(sorted)
    rcuts = st.lists(st.integers(1, max(1, len(resp) - 1)), max_size=12, unique=True).map(sorted)
    whole = _sides(*_run(req, resp, [], []))
    req_cuts, resp_cuts = data.draw(cuts), data.draw(rcuts)
    assert _sides(*_run(req, resp, req_cuts, resp_cuts)) == whole
    # the parses left for after the write run in order whenever they run
    assert _sides(*_run(req, resp, req_cuts, resp_cuts, settle_at_end=True)) == whole


def _sides(events: list[object], forwarded: bytes) -> tuple[list[object], list[object], bytes]:
    """What a split may not change: the bytes, and the events in order on each side of the write
    (brokers and topic ids learned come before it, so their place among the rest moves)."""
    first = (BrokersLearned, TopicIdsLearned)
    return ([e for e in events if isinstance(e, first)], [e for e in events if not isinstance(e, first)], forwarded)


@settings(max_examples=300, deadline=None)
@given(client=st.binary(max_size=300), broker=st.binary(max_size=300))
def test_random_bytes_raise_only_protocol_errors(client: bytes, broker: bytes) -> None:
    c = KafkaConnection(rewriter=ResponseRewriter(lambda n, h, p: ("proxy", 1)), max_frame_bytes=1 << 20)
    with contextlib.suppress(ProtocolError):
        c.receive_from_client(client, 0)
    with contextlib.suppress(ProtocolError):
        c.receive_from_broker(broker, 0)


@settings(max_examples=300, deadline=None)
@given(junk=st.binary(min_size=1, max_size=200), api=st.sampled_from(sorted(
    [apis.API_VERSIONS, apis.METADATA, apis.FIND_COORDINATOR, apis.DESCRIBE_CLUSTER])), version=st.integers(0, 4))
def test_garbage_responses_to_rewritten_apis_are_forwarded_untouched(junk: bytes, api: int, version: int) -> None:
    c = KafkaConnection(rewriter=ResponseRewriter(lambda n, h, p: ("proxy", 1)))
    c.receive_from_client(request(api, version, 1, b""), 0)
    wire = response(api, version, 1, junk)
    out, events = c.receive_from_broker(wire, 0)
    forwarded = b"".join(bytes(s) for s in out)
    done = [e for e in events if isinstance(e, ResponseSeen)]
    assert len(done) == 1
    if not done[0].rewritten:
        assert forwarded == wire


def _big_fetch(endpoints: list[dict[str, object]], records: int = 3 << 20) -> tuple[bytes, bytes]:
    """A Fetch v16 request and a response with ``records`` bytes of (opaque) records and ``endpoints``."""
    import uuid

    tid = uuid.UUID(int=5)
    req = encode(load("FetchRequest"), 16, {
        "MaxWaitMs": 500, "MinBytes": 1, "MaxBytes": 64 << 20, "IsolationLevel": 0, "SessionId": 0, "SessionEpoch": -1,
        "Topics": [{"TopicId": tid, "Partitions": [{"Partition": 0, "CurrentLeaderEpoch": -1, "FetchOffset": 0,
                                                   "LastFetchedEpoch": -1, "LogStartOffset": -1,
                                                   "PartitionMaxBytes": 64 << 20}]}],
        "ForgottenTopicsData": [], "RackId": ""})
    resp = encode(load("FetchResponse"), 16, {
        "ThrottleTimeMs": 0, "ErrorCode": 0, "SessionId": 0, "NodeEndpoints": endpoints,
        "Responses": [{"TopicId": tid, "Partitions": [{
            "PartitionIndex": 0, "ErrorCode": 0, "HighWatermark": 10, "LastStableOffset": 10, "LogStartOffset": 0,
            "AbortedTransactions": [], "PreferredReadReplica": -1, "Records": b"\x00" * records}]}]})
    return req, resp


def _push(c: KafkaConnection, frame: bytes, chunk: int) -> tuple[list[bytes], int]:
    """Feed ``frame`` in chunks; return what came out and the most bytes waiting in the codec."""
    outs: list[bytes] = []
    waiting = 0
    for i in range(0, len(frame), chunk):
        out, _ = c.receive_from_broker(frame[i : i + chunk], 10 + i)
        outs.extend(bytes(s) for s in out)
        waiting = max(waiting, i + min(chunk, len(frame) - i) - sum(map(len, outs)))
    return outs, waiting


def test_a_big_fetch_v16_response_streams_and_only_its_tail_waits() -> None:
    from fetchlat.protocol.connection import STREAM_TAIL_BYTES

    c = KafkaConnection(rewriter=ResponseRewriter(lambda n, h, p: ("proxy", 9001)))
    req, resp = _big_fetch([])
    c.receive_from_client(request(apis.FETCH, 16, 3, req), 1)
    frame = response(apis.FETCH, 16, 3, resp)
    outs, waiting = _push(c, frame, 256 << 10)
    assert b"".join(outs) == frame  # untouched, whole
    assert waiting <= STREAM_TAIL_BYTES + (256 << 10)  # never the whole 3 MiB


def test_a_big_streamed_fetch_naming_brokers_closes_before_the_client_has_the_frame() -> None:
    c = KafkaConnection(rewriter=ResponseRewriter(lambda n, h, p: ("proxy", 9001)))
    req, resp = _big_fetch([{"NodeId": 2, "Host": "kafka-2.internal", "Port": 9092, "Rack": None}])
    c.receive_from_client(request(apis.FETCH, 16, 4, req), 1)
    frame = response(apis.FETCH, 16, 4, resp)
    outs: list[bytes] = []
    with pytest.raises(FramingError, match="NodeEndpoints"):
        for i in range(0, len(frame), 1 << 20):
            out, _ = c.receive_from_broker(frame[i : i + (1 << 20)], 10 + i)
            outs.extend(bytes(s) for s in out)
    sent = b"".join(outs)
    assert len(sent) < len(frame) and b"kafka-2.internal" not in sent


def test_a_small_fetch_v16_response_naming_brokers_is_rewritten() -> None:
    c = KafkaConnection(rewriter=ResponseRewriter(lambda n, h, p: ("proxy", 9001)))
    req, resp = _big_fetch([{"NodeId": 2, "Host": "kafka-2.internal", "Port": 9092, "Rack": None}], records=100)
    c.receive_from_client(request(apis.FETCH, 16, 5, req), 1)
    out, events = c.receive_from_broker(response(apis.FETCH, 16, 5, resp), 2)
    sent = b"".join(bytes(s) for s in out)
    assert b"proxy" in sent and b"kafka-2.internal" not in sent
    assert any(isinstance(e, BrokersLearned) for e in events)


def test_the_client_id_memo_stays_bounded_and_decodes_the_same() -> None:
    """Clients that make a new client id per connection must not grow the memo of decoded ids
    past its bound; a remembered id and a decoded one are the same string."""
    from fetchlat.protocol import headers

    for i in range(3 * headers.CLIENT_IDS_KEPT):
        frame = request_frame(apis.API_VERSIONS, 3, i, f"client-{i}", b"")
        h = headers.parse_request_header(frame[4:] + b"\x00" * 16)
        assert h.client_id == f"client-{i}"
        assert len(headers._CLIENT_IDS) <= headers.CLIENT_IDS_KEPT
    again = headers.parse_request_header(request_frame(apis.API_VERSIONS, 3, 1, "client-7", b"")[4:] + b"\x00" * 16)
    assert again.client_id == "client-7"


def test_topic_ids_are_made_once_and_the_memo_stays_bounded() -> None:
    """A topic id recurs in every Fetch/Produce v13+: one UUID object per distinct id, equal to
    what uuid.UUID makes, and the memo never holds more than its bound."""
    import os
    import uuid as uuid_module

    from fetchlat.protocol import stream

    raw = os.urandom(16)
    first, again = stream.uuid_of(raw), stream.uuid_of(bytes(raw))
    assert first == uuid_module.UUID(bytes=raw) and again is first
    for _ in range(3 * stream.UUIDS_KEPT):
        stream.uuid_of(os.urandom(16))
        assert len(stream._UUIDS) <= stream.UUIDS_KEPT


def test_short_strings_are_decoded_once_and_the_memo_stays_bounded() -> None:
    """A topic name recurs in every Fetch/Produce that names it: one str per distinct short
    string, equal to its UTF-8 decoding, whether read from bytes or from a memoryview; text that
    is not UTF-8 is a DecodeError every time; a long string is decoded but not kept."""
    from fetchlat.protocol import stream
    from fetchlat.protocol.errors import DecodeError
    from fetchlat.protocol.stream_now import string_now

    name = "orders-é".encode()
    first = stream.text_of(name)
    assert first == "orders-é" and stream.text_of(bytes(bytearray(name))) is first
    framed = len(name).to_bytes(2, "big") + name
    assert string_now(stream.Reader(memoryview(framed)), False) is first
    assert string_now(stream.Reader(framed), False) is first
    for _ in range(2):
        with pytest.raises(DecodeError, match="not UTF-8"):
            stream.text_of(b"\xff\xfe")
    long = b"x" * (stream.TEXT_KEPT_BYTES + 1)
    assert stream.text_of(long) == long.decode() and long not in stream._TEXTS
    for i in range(3 * stream.TEXTS_KEPT):
        stream.text_of(f"topic-{i}".encode())
        assert len(stream._TEXTS) <= stream.TEXTS_KEPT
