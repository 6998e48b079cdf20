"""Reading Apache Kafka's request log and joining it with trace rows (verify/request_log.py):
lines in fetchlat's layout and in Kafka's default one, a follower's replica id, lines that are
not requests, the join's tie-break by time, and the broker's outcome of a fetch."""

from __future__ import annotations

import json
from typing import Any

from fetchlat.verify import request_log as rl

MS = 1_000_000


def _line(corr: int, client: str, remote: float, *, prefix: str = "1764057600123", total: float = 101.5,
          max_wait: int = 100, records: int = 0, replica: dict[str, int] | None = None) -> str:
    request: dict[str, Any] = {"maxWaitMs": max_wait, "minBytes": 1, "sessionId": 0, "sessionEpoch": -1}
    if replica is not None:
        request["replicaState"] = replica
    d = {"isForwarded": False,
         "requestHeader": {"requestApiKey": 1, "requestApiVersion": 17, "correlationId": corr, "clientId": client,
                           "requestApiKeyName": "FETCH"},
         "request": request,
         "response": {"responses": [{"topic": "t", "partitions": [{"partitionIndex": 0,
                                                                   "recordsSizeInBytes": records}]}]},
         "connection": "127.0.0.1:9092-127.0.0.1:50000-0-1", "totalTimeMs": total, "requestQueueTimeMs": 0.1,
         "localTimeMs": 0.5, "remoteTimeMs": remote, "throttleTimeMs": 0, "responseQueueTimeMs": 0.1,
         "sendTimeMs": 0.2, "listener": "BROKER"}
    return f"{prefix} Completed request:{json.dumps(d)}"


def test_fetchlat_layout_line() -> None:
    r = rl.parse_line(_line(7, "c1", 101.2), "0")
    assert r is not None
    assert (r.api_key, r.correlation_id, r.client_id, r.remote_ms, r.max_wait_ms, r.replica_id) == (
        1, 7, "c1", 101.2, 100, None)
    assert r.end_ms == 1764057600123.0
    assert abs(r.broker_local_ms - 0.3) < 1e-9


def test_kafkas_default_layout_and_a_followers_replica_state() -> None:
    line = _line(8, "broker-2-fetcher-0", 0.0, prefix="[2026-11-25 07:36:12,903] DEBUG",
                 replica={"replicaId": 2, "replicaEpoch": 5}) + " (kafka.request.logger)"
    r = rl.parse_line(line, "1")
    assert r is not None and r.replica_id == 2 and r.end_ms is not None


def test_other_lines_are_not_requests() -> None:
    assert rl.parse_line("[2026-11-25 07:36:12,903] INFO Kafka Server started", "0") is None
    assert rl.parse_line("Completed request:{not json", "0") is None


def _row(corr: int, client: str, ts_ms: float, wait_ms: float, outcome: str, broker: str = "0") -> dict[str, Any]:
    return {"broker": broker, "api": "Fetch", "client_id": client, "correlation_id": corr,
            "ts_ns": int(ts_ms * MS), "total_ns": int(102 * MS), "wait_ns": int(wait_ms * MS),
            "local_ns": int((102 - wait_ms) * MS), "outcome": outcome}


def test_join_picks_the_line_nearest_in_time_and_uses_each_once() -> None:
    # two connections of one client id reuse correlation id 7 a minute apart (a follower's fetchers)
    early = rl.parse_line(_line(7, "c1", 101.0, prefix="1764057600000"), "0")
    late = rl.parse_line(_line(7, "c1", 101.8, prefix="1764057660000"), "0")
    other_broker = rl.parse_line(_line(7, "c1", 0.0, prefix="1764057660000"), "1")
    assert early and late and other_broker
    rows = [_row(7, "c1", 1764057660000 - 102, 101.0, "expired"), _row(7, "c1", 1764057600000 - 102, 101.0, "expired"),
            _row(9, "c1", 1764057600000, 0.0, "immediate")]
    pairs, unmatched = rl.join(rows, [early, late, other_broker])
    assert [p.broker.remote_ms for p in pairs] == [101.8, 101.0]
    assert unmatched == [rows[2]]
    figures = rl.agreement(pairs, len(unmatched))
    assert figures["matched"] == 2 and figures["matched_share"] == 2 / 3
    assert figures["outcome_agree_share"] == 1.0
    assert abs(figures["abs_err_p50_ms"] - 0.0) < 1e-9 and abs(figures["abs_err_p99_ms"] - 0.8) < 1e-9


def test_broker_outcome() -> None:
    def outcome(remote: float, records: int) -> str:
        r = rl.parse_line(_line(1, "c", remote, records=records), "0")
        assert r is not None
        return rl.broker_outcome(r)

    assert outcome(0.0, 500) == "immediate"
    assert outcome(101.3, 0) == "expired"
    assert outcome(99.6, 0) == "expired"  # the 1 ms timer fired a little early: still no data
    assert outcome(40.0, 200) == "woken"
