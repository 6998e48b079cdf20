"""The connection policy as a table: one named row per rule."""

from __future__ import annotations

import pytest
from fetchlat.proxy.policy import ConnectionPolicy, Limits, first_bytes_verdict, tls_failure

MS = 1_000_000
LIM = Limits(idle_ns=1000 * MS, partial_frame_ns=300 * MS, stalled_client_ns=200 * MS, tls_handshake_ns=100 * MS,
             upstream_hold_ns=1000 * MS, max_pending_bytes=10)


def _policy(*, tls: bool = False, mid_frame_at: int | None = None, stalled_at: int | None = None,
            handshaken: bool = False, active_at: int = 0) -> ConnectionPolicy:
    p = ConnectionPolicy(LIM, 0, tls=tls)
    p.client_bytes(active_at, mid_frame=False)
    if mid_frame_at is not None:
        p.client_bytes(mid_frame_at, mid_frame=True)
    if stalled_at is not None:
        p.client_stalled(stalled_at)
    if handshaken:
        p.tls_pending = False
    return p


EXPIRY = [
    # name, policy, now, requests in flight -> reason
    ("fresh_connection_stays", _policy(), 10 * MS, False, None),
    ("tls_handshake_not_done_in_time", _policy(tls=True), 101 * MS, False, "tls_handshake_timeout"),
    ("tls_handshake_done_in_time", _policy(tls=True, handshaken=True), 101 * MS, False, None),
    ("request_begun_never_finished", _policy(mid_frame_at=10 * MS), 311 * MS, True, "partial_frame_timeout"),
    ("request_begun_within_the_limit", _policy(mid_frame_at=10 * MS), 300 * MS, True, None),
    ("client_stopped_reading", _policy(stalled_at=50 * MS), 251 * MS, True, "client_not_reading"),
    ("idle_without_requests", _policy(active_at=5 * MS), 1006 * MS, False, "idle_timeout"),
    ("long_poll_in_flight_is_not_idle", _policy(active_at=5 * MS), 5000 * MS, True, None),
]


@pytest.mark.parametrize(("name", "policy", "now", "in_flight", "reason"), EXPIRY, ids=[r[0] for r in EXPIRY])
def test_expire(name: str, policy: ConnectionPolicy, now: int, in_flight: bool, reason: str | None) -> None:
    assert policy.expire(now, in_flight) == reason


def test_finishing_a_request_clears_the_partial_frame_timer() -> None:
    p = _policy(mid_frame_at=10 * MS)
    p.client_bytes(20 * MS, mid_frame=False)
    assert p.expire(400 * MS, True) is None


def test_held_bytes_over_the_limit_ask_for_a_pause_until_released() -> None:
    p = _policy()
    assert not p.held(6) and not p.held(4) and p.held(1)
    assert p.released()  # it had paused the client
    assert not p.held(10)
    assert not p.released()


def test_attempt_timeouts_stay_within_the_hold() -> None:
    p = _policy()
    assert p.attempt_timeout_ns(0, 10_000 * MS) == 1000 * MS  # the hold is shorter than the connect timeout
    assert p.attempt_timeout_ns(990 * MS, 10_000 * MS) == 50 * MS  # never less than 50 ms
    assert p.attempt_timeout_ns(0, 200 * MS) == 200 * MS


SNIFF = [
    ("kafka_request", b"\x00\x00\x00\x40\x00\x12\x00\x03", None),
    ("tls_client_hello", b"\x16\x03\x01\x02\x00\x01\x00\x01", "tls_on_plaintext"),
    ("http_get", b"GET / HTTP/1.1\r\n", "http_on_plaintext"),
    ("http2_preface", b"PRI * HTTP/2.0\r\n", "http_on_plaintext"),
    ("too_short_to_tell", b"\x16", None),
]


@pytest.mark.parametrize(("name", "first", "reason"), SNIFF, ids=[r[0] for r in SNIFF])
def test_first_bytes_verdict(name: str, first: bytes, reason: str | None) -> None:
    v = first_bytes_verdict(first)
    assert (v.reason if v else None) == reason


TLS = [
    ("handshake_failed", False, "SSLV3_ALERT_BAD_CERTIFICATE", "tls_handshake_failed", ""),
    ("plaintext_client_on_tls", False, "WRONG_VERSION_NUMBER", "tls_handshake_failed", "plaintext client"),
    ("error_after_handshake", True, "DECRYPTION_FAILED_OR_BAD_RECORD_MAC", "tls_error", ""),
]


@pytest.mark.parametrize(("name", "handshaken", "error", "reason", "hint"), TLS, ids=[r[0] for r in TLS])
def test_tls_failure(name: str, handshaken: bool, error: str, reason: str, hint: str) -> None:
    r = tls_failure(handshaken, error)
    assert r.reason == reason and error in r.message and hint in r.message
