"""The proxy core, scripted: bytes in at time t -> what is written, paused, closed (with its
reason) and which metrics move. One test per rule, in milliseconds; the integration tests
prove the same rules end to end through real sockets."""

from __future__ import annotations

import logging

import pytest
from fetchlat.protocol import apis
from fetchlat.protocol.framing import request_frame
from fetchlat.proxy.carried import CarriedConversation
from fetchlat.proxy.conversation import Close, Conversation, Learn, Log, PauseClient, ResumeClient, WriteUpstream
from fetchlat.proxy.policy import Limits

from testkit.frames import empty_fetch_response, fetch_request, metadata_request, metadata_response
from testkit.playbook import MS, T0, Playbook


def ready() -> Playbook:
    pb = Playbook()
    assert pb.connect_upstream(T0) == ()
    return pb


# ---------------------------------------------------------------- forwarding
def test_a_request_is_forwarded_first_and_counted() -> None:
    pb = ready()
    req = metadata_request(1)
    # the first chunk waits for the sniff verdict, and is written once it looks like Kafka...
    assert pb.client(req, T0 + MS) == (WriteUpstream(req),)
    pb.client(metadata_request(2), T0 + 2 * MS)
    assert pb.upstream_writes == [req, metadata_request(2)]  # ...the next ones by the I/O layer, first
    assert pb.value("fetchlat_requests_total", api="Metadata", broker="bootstrap") == 2


def test_a_response_goes_back_rewritten_and_brokers_are_learned_before_the_write() -> None:
    pb = ready()
    pb.client(metadata_request(1), T0 + MS)
    actions = pb.broker(metadata_response(1, [(1, "kafka-1", 9092)]), T0 + 3 * MS)
    assert actions == (Learn(((_broker(1, "kafka-1", 9092)),)),)
    assert b"proxy.test" in pb.client_writes[0] and b"kafka-1" not in pb.client_writes[0]
    assert pb.value("fetchlat_request_duration_seconds_sum", api="Metadata", broker="bootstrap") == pytest.approx(0.002)
    assert pb.value("fetchlat_rewritten_responses_total", api="Metadata") == 1
    assert pb.registry.nodes == {}  # learning is the caller's: it binds listeners, then writes


def _broker(node: int, host: str, port: int) -> object:
    from fetchlat.protocol.events import BrokerAddress

    return BrokerAddress(node_id=node, host=host, port=port, rack=None)


def test_the_broker_label_follows_the_registry() -> None:
    pb = ready()
    pb.registry.learn((_broker(7, *pb.conv.upstream),))  # type: ignore[arg-type]
    pb.client(metadata_request(1), T0 + MS)
    pb.broker(metadata_response(1, []), T0 + 2 * MS)
    assert pb.value("fetchlat_requests_total", api="Metadata", broker="7") == 1


def test_time_held_for_the_broker_connection_is_not_broker_time() -> None:
    """A request read at 1 ms waits until the broker connection is up at 6 ms: its duration and
    the fetch total count from 6 ms; the 5 ms held go to e2e and fetchlat_upstream_hold_seconds."""
    pb = Playbook()
    assert pb.client(fetch_request(1, max_wait_ms=0), T0 + 1 * MS) == ()
    assert pb.upstream_writes == []  # held
    pb.connect_upstream(T0 + 6 * MS)
    assert pb.upstream_writes == [fetch_request(1, max_wait_ms=0)]
    pb.broker(empty_fetch_response(1), T0 + 8 * MS)
    assert pb.value("fetchlat_request_duration_seconds_sum", api="Fetch", broker="bootstrap") == pytest.approx(0.002)
    assert pb.value("fetchlat_fetch_total_seconds_sum", broker="bootstrap", kind="consumer") == pytest.approx(0.002)
    assert pb.value("fetchlat_fetch_local_seconds_sum", broker="bootstrap", kind="consumer") == pytest.approx(0.002)
    assert pb.value("fetchlat_fetch_e2e_seconds_sum", broker="bootstrap", kind="consumer") == pytest.approx(0.007)
    assert pb.value("fetchlat_upstream_hold_seconds_sum") == pytest.approx(0.005)
    (row,) = [r for t, r in pb.rows if t == "exchanges"]
    assert (row["ts_ns"], row["total_ns"], row["e2e_ns"]) == (T0 + 6 * MS, 2 * MS, 7 * MS)


def test_a_pipelined_request_starts_when_the_broker_has_answered_the_one_before() -> None:
    """Two metadata requests and a fetch sent back to back at 1, 2 and 3 ms: the broker takes one
    at a time, answering at 10, 15 and 16 ms. The second is timed from 10 ms (5 ms), the fetch
    from 15 ms (1 ms); its 12 ms in the socket are the client's to wait (e2e), not the broker's."""
    pb = ready()
    for corr, t in ((1, 1), (2, 2)):
        pb.client(metadata_request(corr), T0 + t * MS)
    pb.client(fetch_request(3, max_wait_ms=0), T0 + 3 * MS)
    pb.broker(metadata_response(1, []), T0 + 10 * MS)
    pb.broker(metadata_response(2, []), T0 + 15 * MS)
    pb.broker(empty_fetch_response(3), T0 + 16 * MS)
    assert pb.value("fetchlat_request_duration_seconds_sum", api="Metadata", broker="bootstrap") == pytest.approx(
        0.009 + 0.005)
    assert pb.value("fetchlat_fetch_total_seconds_sum", broker="bootstrap", kind="consumer") == pytest.approx(0.001)
    (row,) = [r for t, r in pb.rows if t == "exchanges" and r["api"] == "Fetch"]
    assert (row["ts_ns"], row["total_ns"], row["e2e_ns"]) == (T0 + 15 * MS, 1 * MS, 13 * MS)


def test_away_from_the_broker_a_pipelined_request_starts_a_round_trip_before_the_answer_came_back() -> None:
    """A proxy 10 ms from its broker each way (a round trip of 20 ms, learned from four metadata
    requests answered at once). A metadata request and a fetch sent back to back at 100 ms reach
    the broker at 110 ms; it takes 30 ms over the first (answer seen at 150 ms), then reads the
    fetch from its socket and answers it in 2 ms (seen at 152 ms). On the clock of forwarding the
    broker was free at 130 ms (150 less the round trip): the fetch is timed from there, 22 ms
    (its 2 ms at the broker and the round trip, as an unheld fetch's), not 2 ms; its 30 ms in
    the socket are held time (e2e). A fetch forwarded after that moment is timed from its own
    forwarding."""
    pb = ready()
    t = T0
    for corr in range(1, 5):  # the round trip learned: 20 ms
        pb.client(metadata_request(corr), t)
        pb.broker(metadata_response(corr, []), t + 20 * MS)
        t += 30 * MS
    assert pb.observer.model.round_trips.estimate() == 20 * MS
    t0 = T0 + 200 * MS
    pb.client(metadata_request(5), t0 + 100 * MS)
    pb.client(fetch_request(6, max_wait_ms=0), t0 + 100 * MS)  # in the broker's socket while it answers 5
    pb.broker(metadata_response(5, []), t0 + 150 * MS)
    pb.broker(empty_fetch_response(6), t0 + 152 * MS)
    (row,) = [r for tb, r in pb.rows if tb == "exchanges" and r["api"] == "Fetch"]
    assert (row["ts_ns"], row["total_ns"], row["e2e_ns"]) == (t0 + 130 * MS, 22 * MS, 52 * MS)
    pb.client(metadata_request(7), t0 + 200 * MS)
    pb.client(fetch_request(8, max_wait_ms=0), t0 + 201 * MS)  # reaches the broker at 211: free since 210
    pb.broker(metadata_response(7, []), t0 + 220 * MS)
    pb.broker(empty_fetch_response(8), t0 + 222 * MS)
    rows = [r for tb, r in pb.rows if tb == "exchanges" and r["api"] == "Fetch"]
    assert (rows[1]["ts_ns"], rows[1]["total_ns"], rows[1]["e2e_ns"]) == (t0 + 201 * MS, 21 * MS, 21 * MS)


def test_a_request_on_a_connection_muted_for_a_quota_starts_when_the_mute_ends() -> None:
    """A fetch answered at 2 ms with a 200 ms throttle: the broker mutes the connection until
    202 ms (KIP-219). The next fetch, sent at 3 ms (a client that does not throttle itself),
    is read by the broker at 202 ms and answered at 205 ms: its total is 3 ms, and the 199 ms
    muted are throttle (on the answer before), neither its total nor its e2e."""
    pb = ready()
    pb.client(fetch_request(1, max_wait_ms=0), T0)
    pb.broker(empty_fetch_response(1, throttle_ms=200), T0 + 2 * MS)
    pb.client(fetch_request(2, max_wait_ms=0), T0 + 3 * MS)
    pb.broker(empty_fetch_response(2), T0 + 205 * MS)
    rows = [r for t, r in pb.rows if t == "exchanges"]
    assert [(r["throttle_ms"], r["total_ns"], r["e2e_ns"]) for r in rows] == [(200, 2 * MS, 2 * MS),
                                                                               (0, 3 * MS, 3 * MS)]
    assert rows[1]["ts_ns"] == T0 + 202 * MS
    assert pb.value("fetchlat_fetch_throttled_total", broker="bootstrap", kind="consumer") == 1
    assert pb.value("fetchlat_fetch_throttle_seconds_sum", broker="bootstrap", kind="consumer") == pytest.approx(0.2)


def test_held_bytes_past_the_limit_pause_the_client_until_the_broker_is_up() -> None:
    pb = Playbook(limits=Limits(max_pending_bytes=100))
    req = fetch_request(1)
    assert pb.client(req, T0) == ()
    assert pb.client(fetch_request(2), T0 + MS) == (PauseClient(),)
    assert pb.connect_upstream(T0 + 2 * MS) == (ResumeClient(),)
    assert len(pb.upstream_writes) == 2


def test_a_long_poll_that_expires_is_all_purgatory() -> None:
    pb = ready()
    pb.client(fetch_request(1), T0)
    pb.broker(empty_fetch_response(1), T0 + 502 * MS, t_written_ns=T0 + 502 * MS + 30_000)
    assert pb.value("fetchlat_fetches_total", broker="bootstrap", kind="consumer", outcome="expired") == 1
    # max wait 500 ms plus the broker's expiry overshoot (1 ms by default: metrics/model.py)
    assert pb.value("fetchlat_fetch_wait_seconds_sum", broker="bootstrap", kind="consumer",
                    source="inferred") == pytest.approx(0.501)
    assert pb.value("fetchlat_fetch_local_seconds_sum", broker="bootstrap", kind="consumer") == pytest.approx(0.001)
    # e2e adds the proxy's own read -> write time of the response
    assert pb.value("fetchlat_fetch_e2e_seconds_sum", broker="bootstrap", kind="consumer") == pytest.approx(0.00103)
    assert pb.value("fetchlat_proxy_added_seconds_sum") == pytest.approx(0.00003)


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(("first", "reason"), [
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "tls_on_plaintext"),
    (b"GET /metrics HTTP/1.1\r\n", "http_on_plaintext"),
], ids=["tls_client_hello", "http_request"])
def test_a_non_kafka_first_chunk_is_refused_and_never_forwarded(first: bytes, reason: str) -> None:
    pb = ready()
    (close,) = pb.client(first, T0)
    assert isinstance(close, Close) and close.abort and "plaintext Kafka listener" in close.message
    assert pb.upstream_writes == []
    assert pb.value("fetchlat_connection_errors_total", reason=reason) == 1


def test_a_bad_request_frame_size_closes_this_connection_only() -> None:
    pb = ready()
    (close,) = pb.client(b"\x00\x20\x00\x00" + b"x" * 10, T0)  # 2 MiB: above the 1 MiB limit
    assert isinstance(close, Close) and "request framing lost" in close.message and "exceeds the limit" in close.message
    assert pb.value("fetchlat_connection_errors_total", reason="request_framing") == 1


def test_a_response_matching_no_request_closes_the_connection() -> None:
    pb = ready()
    pb.client(metadata_request(1), T0)
    (close,) = pb.broker(metadata_response(9, []), T0 + MS)
    assert isinstance(close, Close) and "does not match" in close.message
    assert pb.client_writes == []
    assert pb.value("fetchlat_connection_errors_total", reason="response_framing") == 1


def test_an_undecodable_request_is_forwarded_counted_and_logged() -> None:
    pb = ready()
    bad = request_frame(apis.FETCH, 12, 1, "c", b"\xff\xff")
    pb.client(bad, T0)
    (note,) = [a for a in pb.client(request_frame(apis.FETCH, 12, 2, "c", b"\xff\xff"), T0 + MS)
               if isinstance(a, Log)]
    assert note.level == logging.INFO and "Fetch v12 request not decoded" in note.message
    assert len(pb.upstream_writes) == 2
    assert pb.value("fetchlat_decode_errors_total", api="Fetch") == 2


# ---------------------------------------------------------------- timers
@pytest.mark.parametrize(("name", "limits", "script", "reason"), [
    ("idle", Limits(idle_ns=100 * MS), [], "idle_timeout"),
    ("partial_frame", Limits(partial_frame_ns=100 * MS), [b"\x00\x00\x00\x40\x00"], "partial_frame_timeout"),
], ids=["idle", "partial_frame"])
def test_a_timer_closes_the_connection_with_its_reason(name: str, limits: Limits, script: list[bytes],
                                                       reason: str) -> None:
    pb = Playbook(limits=limits)
    pb.connect_upstream(T0)
    for chunk in script:
        pb.client(chunk, T0)
    assert pb.conv.expire(T0 + 100 * MS) is None  # at the limit: not yet
    close = pb.conv.expire(T0 + 101 * MS)
    assert close is not None and reason.replace("_", " ") in close.message
    assert pb.value("fetchlat_connection_errors_total", reason=reason) == 1


def test_a_request_in_flight_is_not_idle() -> None:
    pb = Playbook(limits=Limits(idle_ns=100 * MS))
    pb.connect_upstream(T0)
    pb.client(fetch_request(1), T0)
    assert pb.conv.expire(T0 + 400 * MS) is None  # a long poll parked at the broker
    pb.broker(empty_fetch_response(1), T0 + 500 * MS)
    assert pb.conv.expire(T0 + 601 * MS) is not None


def test_a_client_that_stops_reading_is_closed() -> None:
    pb = Playbook(limits=Limits(stalled_client_ns=100 * MS))
    pb.connect_upstream(T0)
    pb.client(fetch_request(1), T0)
    pb.conv.client_stalled(T0 + MS)
    assert pb.conv.expire(T0 + 50 * MS) is None
    pb.conv.client_resumed()
    assert pb.conv.expire(T0 + 200 * MS) is None
    pb.conv.client_stalled(T0 + 200 * MS)
    close = pb.conv.expire(T0 + 301 * MS + 1)
    assert close is not None and "client not reading" in close.message


def test_an_unreachable_broker_is_retried_with_backoff_then_the_client_is_closed() -> None:
    pb = Playbook(limits=Limits(upstream_hold_ns=1000 * MS))
    delays = []
    t = T0
    while (d := pb.conv.upstream_failed(t)) is not None:
        delays.append(d // MS)
        t += d
    assert delays == [50, 100, 200, 400, 250]  # doubling, the last one cut to the deadline
    close = pb.conv.upstream_unreachable("127.0.0.1:9092: Connection refused")
    assert not close.abort and "reconnects" in close.message and "unreachable for 1.0 s" in close.message
    assert pb.value("fetchlat_upstream_connect_failures_total") == 6
    assert pb.value("fetchlat_connection_errors_total", reason="upstream_unreachable") == 1


def test_the_broker_label_follows_the_broker_actually_connected() -> None:
    """A bootstrap connection may land on another bootstrap broker than the first it tried: its
    label follows the address connected, even when the registry did not change meanwhile."""
    pb = Playbook()
    pb.registry.learn((_broker(5, "127.0.0.1", 9093),))  # type: ignore[arg-type]
    conv = Conversation(pb.ctx, conn_id=2, listener="bootstrap", broker_label="bootstrap",
                        upstream=("127.0.0.1", 9092), t_ns=T0)
    assert conv.broker == "bootstrap"  # 9092 names no known broker
    conv.upstream_connected(T0 + MS, ("127.0.0.1", 9093))
    assert conv.broker == "5"


# ---------------------------------------------------------------- the hand-over to the core (relayed.py)
def test_a_connection_is_handed_to_the_core_only_between_whole_exchanges() -> None:
    pb = Playbook()
    assert not pb.conv.can_hand_over  # no broker connection yet, nothing seen
    pb.connect_upstream(T0)
    assert not pb.conv.can_hand_over  # the first bytes are not sniffed yet
    req = fetch_request(1, max_wait_ms=0)
    pb.client(req[:7], T0 + MS)
    assert not pb.conv.can_hand_over  # a request half read
    pb.client(req[7:], T0 + MS)
    assert not pb.conv.can_hand_over  # in flight
    answer = empty_fetch_response(1)
    pb.broker(answer[:9], T0 + 2 * MS)
    assert not pb.conv.can_hand_over  # an answer half read
    pb.broker(answer[9:], T0 + 3 * MS)
    assert pb.conv.can_hand_over


def test_a_connection_the_core_carries_is_counted_and_timed_by_what_the_core_says() -> None:
    pb = ready()
    pb.client(metadata_request(1), T0 + MS)
    pb.broker(metadata_response(1, []), T0 + 2 * MS)
    pb.conv.handed_over()
    assert pb.conv.codec.responses.rewriter is None  # the core holds what must be rewritten
    carried = CarriedConversation(pb.conv)
    before_in = pb.value("fetchlat_bytes_total", direction="client_to_broker", listener="bootstrap")
    before_out = pb.value("fetchlat_bytes_total", direction="broker_to_client", listener="bootstrap")
    # a fetch the core carried: its bytes routed to the Python road, read at 5 ms and written on at 5.1
    req, answer = fetch_request(2, max_wait_ms=0), empty_fetch_response(2)
    assert carried.read(False, req, T0 + 4 * MS, T0 + 4 * MS, None, len(req), 0) == ()
    assert carried.read(True, answer, T0 + 5 * MS, T0 + 5 * MS + 100_000, None, len(req), len(answer)) == ()
    assert pb.value("fetchlat_fetch_total_seconds_sum", broker="bootstrap", kind="consumer") == pytest.approx(0.001)
    # the counters move by what the core read since the hand-over, once, whichever report says it first
    carried.timers(T0 + 6 * MS, (len(req), len(answer)), T0 + 4 * MS, 0, 0, 0)
    assert pb.value("fetchlat_bytes_total", direction="client_to_broker", listener="bootstrap") == before_in + len(req)
    assert pb.value("fetchlat_bytes_total", direction="broker_to_client", listener="bootstrap") == \
        before_out + len(answer)
    # the core's timers decide the policy's verdicts: a request half read for longer than allowed
    limits = Limits()
    later = T0 + 4 * MS + limits.partial_frame_ns + MS
    carried.timers(later, (len(req) + 3, len(answer)), later - MS, T0 + 4 * MS, 0, 0)
    close = pb.conv.expire(later)
    assert close is not None and close.reason == "partial_frame_timeout"
    # a client stalled past its limit
    carried.timers(later, (len(req) + 3, len(answer)), later, 0, later - limits.stalled_client_ns - MS, 0)
    close = pb.conv.expire(later)
    assert close is not None and close.reason == "client_not_reading"


def test_the_cores_reasons_for_ending_a_connection_are_read_as_the_event_loops() -> None:
    pb = ready()
    carried = CarriedConversation(pb.conv)
    went, refused = carried.ended("request frame of 4096 bytes exceeds the limit of 1024 (raise "
                                    "max_frame_bytes if this is legitimate)", (0, 0))
    assert not went and refused is not None and refused.reason == "request_framing"
    assert "request framing lost" in refused.message
    assert pb.value("fetchlat_connection_errors_total", reason="request_framing") == 1
    assert carried.ended("broker closed the connection", (0, 0)) == (True, None)
    assert carried.ended("write to the broker: Broken pipe (os error 32)", (0, 0)) == (True, None)
    assert carried.ended("broker closed the connection after the client's end of stream", (0, 0)) == (
        False, None)  # the client half-closed first: the broker's close is expected
    assert carried.ended("closed by the proxy", (0, 0)) == (False, None)
    # a TLS session the core holds, ended for its TLS: counted and worded as the event loop's road's
    went, refused = carried.ended("tls error: received corrupt message of type InvalidContentType", (0, 0))
    assert not went and refused is not None and refused.reason == "tls_error"
    assert "TLS error: received corrupt message" in refused.message
    assert "a plaintext client on a TLS listener?" in refused.message
    assert pb.value("fetchlat_connection_errors_total", reason="tls_error") == 1
    went, refused = carried.ended("tls handshake failed: peer sent no certificates", (0, 0))
    assert refused is not None and refused.reason == "tls_handshake_failed"
    assert pb.value("fetchlat_connection_errors_total", reason="tls_handshake_failed") == 1
