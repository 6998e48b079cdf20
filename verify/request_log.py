"""The broker's own clock: Apache Kafka's request log (logger ``kafka.request.logger`` at
DEBUG, one ``Completed request:{json}`` line per request) read and joined with fetchlat's
traces, request by request, to judge the purgatory wait fetchlat infers against the broker's
``remoteTimeMs`` (the time the request was parked in purgatory, plus the work of completing it).

Owns: reading request-log lines (fetchlat's layout ``<epoch ms> Completed request:{...}`` and
Kafka's default ``[yyyy-MM-dd HH:mm:ss,SSS] DEBUG Completed request:{...} (kafka.request.logger)``),
the join key, the broker's outcome of a fetch, and the agreement figures.
Must never: keep a request's or response's records, or anything but the header, the fetch
settings and the timings (the log may hold topic names and client addresses; records are
logged by size only, and fetchlat keeps none of it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..metrics import trace_layout

MARK = "Completed request:"
NS_PER_MS = 1_000_000
API_KEYS = {"Fetch": 1, "Produce": 0, "ShareFetch": 78}
# A join is accepted only when the broker finished within this of the proxy's last response
# byte (clock reads on one host; the request log's own time has 1 ms resolution).
MAX_SKEW_MS = 1_000.0


@dataclass(frozen=True, slots=True)
class BrokerRequest:
    """One completed request as the broker timed it (fractional ms)."""

    node: str  # which broker's log (the trace's ``broker`` label)
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    listener: str | None
    connection: str | None
    end_ms: float | None  # when the log line was written (epoch ms), if the layout has it
    total_ms: float
    local_ms: float
    remote_ms: float
    throttle_ms: float
    request_queue_ms: float
    response_queue_ms: float
    send_ms: float
    max_wait_ms: int | None
    min_bytes: int | None
    replica_id: int | None  # a follower's broker id (replicaState or the old replicaId), else None
    session_id: int | None
    session_epoch: int | None
    acks: int | None
    records_bytes: int  # the records the response carried (the log gives their size only)
    error_code: int = 0  # the response's top-level error (a fetch session's, for one)
    acquired_records: int = 0  # ShareFetch: records the answer acquired for the member (its records are not sized)
    acknowledgements: int = 0  # ShareFetch: acknowledgement batches the request carried

    @property
    def broker_local_ms(self) -> float:
        """What KIP-736 calls TotalLocalTime, by the broker's own clock: total - remote."""
        return self.total_ms - self.remote_ms


def _line_time_ms(prefix: str) -> float | None:
    prefix = prefix.strip()
    if prefix.isdigit():
        return float(prefix)
    if prefix.startswith("[") and "]" in prefix:  # Kafka's default layout: local time, ms
        stamp = prefix[1:prefix.index("]")]
        try:
            return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1000.0
        except ValueError:
            return None
    return None


def _replica_id(request: dict[str, Any]) -> int | None:
    state = request.get("replicaState")
    if isinstance(state, dict) and state.get("replicaId", -1) >= 0:
        return int(state["replicaId"])
    rid = request.get("replicaId")
    return int(rid) if isinstance(rid, int) and rid >= 0 else None


def _records_bytes(response: Any) -> int:
    if not isinstance(response, dict):
        return 0
    return sum(int(p.get("recordsSizeInBytes", 0) or 0) for t in response.get("responses") or ()
               for p in t.get("partitions") or ())


def _acquired(response: Any) -> int:
    if not isinstance(response, dict):
        return 0
    return sum(max(0, int(a.get("lastOffset", -1)) - int(a.get("firstOffset", 0)) + 1)
               for t in response.get("responses") or () for p in t.get("partitions") or ()
               for a in p.get("acquiredRecords") or ())


def _acknowledgements(request: dict[str, Any]) -> int:
    return sum(len(p.get("acknowledgementBatches") or ()) for t in request.get("topics") or ()
               if isinstance(t, dict) for p in t.get("partitions") or ())


def _error_code(response: Any) -> int:
    return int(response.get("errorCode", 0) or 0) if isinstance(response, dict) else 0


def parse_line(line: str, node: str) -> BrokerRequest | None:
    """One request-log line, or None for any other line (a log may hold other loggers' lines)."""
    at = line.find(MARK)
    if at < 0:
        return None
    try:
        d, _ = json.JSONDecoder().raw_decode(line, at + len(MARK))
        h = d["requestHeader"]
        req = d.get("request") or {}
        return BrokerRequest(
            node=node, api_key=int(h["requestApiKey"]), api_version=int(h["requestApiVersion"]),
            correlation_id=int(h["correlationId"]), client_id=str(h.get("clientId") or ""),
            listener=d.get("listener"), connection=d.get("connection"), end_ms=_line_time_ms(line[:at]),
            total_ms=float(d["totalTimeMs"]), local_ms=float(d["localTimeMs"]), remote_ms=float(d["remoteTimeMs"]),
            throttle_ms=float(d.get("throttleTimeMs", 0.0)), request_queue_ms=float(d["requestQueueTimeMs"]),
            response_queue_ms=float(d["responseQueueTimeMs"]), send_ms=float(d["sendTimeMs"]),
            max_wait_ms=req.get("maxWaitMs"), min_bytes=req.get("minBytes"), replica_id=_replica_id(req),
            session_id=req.get("sessionId"), session_epoch=req.get("sessionEpoch", req.get("shareSessionEpoch")),
            acks=req.get("acks"), records_bytes=_records_bytes(d.get("response")),
            error_code=_error_code(d.get("response")), acquired_records=_acquired(d.get("response")),
            acknowledgements=_acknowledgements(req))
    except (ValueError, KeyError, TypeError):
        return None


def read(path: Path | str, node: str, api_keys: Iterable[int] | None = None,
         listener: str | None = None) -> Iterator[BrokerRequest]:
    """Every request in one broker's log (of these API keys, on this listener, if given)."""
    keys = None if api_keys is None else set(api_keys)
    with open(path, errors="replace") as fh:
        for line in fh:
            r = parse_line(line, node)
            if r is None or (keys is not None and r.api_key not in keys):
                continue
            if listener is not None and r.listener != listener:
                continue
            yield r


# ---------------------------------------------------------------------------------- join
@dataclass(frozen=True, slots=True)
class Pair:
    row: dict[str, Any]  # the trace's exchanges row
    broker: BrokerRequest

    @property
    def wait_error_ms(self) -> float:
        """fetchlat's wait minus the broker's remote time."""
        return (self.row["wait_ns"] or 0) / NS_PER_MS - self.broker.remote_ms

    @property
    def local_error_ms(self) -> float:
        """fetchlat's true local minus the broker's own (``totalTimeMs - remoteTimeMs``); NaN
        when the row has no local time."""
        local = self.row["local_ns"]
        return math.nan if local is None else local / NS_PER_MS - self.broker.broker_local_ms


def join(rows: Iterable[dict[str, Any]], requests: Iterable[BrokerRequest]) -> tuple[list[Pair], list[dict[str, Any]]]:
    """Each trace row with the broker's line of the same request: same broker, API, client id
    and correlation id; when several lines share those (a follower's fetchers share one client
    id across leaders; correlation ids restart on each connection), the one that finished
    nearest the proxy's last response byte, within ``MAX_SKEW_MS``. A line is used once.
    Returns the pairs and the rows left unmatched."""
    index: dict[tuple[str, int, str, int], list[BrokerRequest]] = {}
    for r in requests:
        index.setdefault((r.node, r.api_key, r.client_id, r.correlation_id), []).append(r)
    pairs: list[Pair] = []
    unmatched: list[dict[str, Any]] = []
    for row in rows:
        key = (str(row["broker"]), API_KEYS.get(row["api"], -1), row["client_id"] or "", row["correlation_id"])
        candidates = index.get(key)
        if not candidates:
            unmatched.append(row)
            continue
        end_ms = (row["ts_ns"] + (row["total_ns"] or 0)) / NS_PER_MS
        timed = [c for c in candidates if c.end_ms is not None]
        if timed:
            best = min(timed, key=lambda c: abs((c.end_ms or 0.0) - end_ms))
            if abs((best.end_ms or 0.0) - end_ms) > MAX_SKEW_MS:
                unmatched.append(row)
                continue
        elif len(candidates) == 1:
            best = candidates[0]
        else:
            unmatched.append(row)
            continue
        candidates.remove(best)
        pairs.append(Pair(row, best))
    return pairs, unmatched


# --------------------------------------------------------------------------- agreement
def broker_outcome(b: BrokerRequest) -> str:
    """What the broker's clock says happened to a fetch: answered at once (remote 0), expired
    (parked, and let go with less than min bytes: the timer fires up to a tick either side of
    max wait), or woken (parked, then completed with enough data). A ShareFetch's log line does
    not size its records: it had data when it acquired some."""
    if b.remote_ms <= 0.0:
        return "immediate"
    if b.api_key == API_KEYS["ShareFetch"]:
        return "woken" if b.acquired_records > 0 else "expired"
    if b.records_bytes < max(b.min_bytes or 1, 1):
        return "expired"
    return "woken"


def outcome_agrees(p: Pair) -> bool:
    mine = p.row["outcome"]
    theirs = broker_outcome(p.broker)
    return mine == theirs or (mine == "error" and theirs == "immediate")


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest rank (the rule ``perf.stats`` uses): the smallest value with at least q of the data at or below it."""
    if not values:
        return math.nan
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def agreement(pairs: Sequence[Pair], unmatched: int) -> dict[str, Any]:
    """The figures the broker's clock judges fetchlat by, for one set of fetches."""
    n = len(pairs)
    errs = [abs(p.wait_error_ms) for p in pairs]
    signed = [p.wait_error_ms for p in pairs]
    by_outcome: dict[str, dict[str, Any]] = {}
    for name in ("immediate", "woken", "expired"):
        sel = [p for p in pairs if broker_outcome(p.broker) == name]
        e = [abs(p.wait_error_ms) for p in sel]
        by_outcome[name] = {"n": len(sel), "abs_err_p50_ms": quantile(e, 0.5), "abs_err_p99_ms": quantile(e, 0.99),
                            "agree": sum(outcome_agrees(p) for p in sel)}
    local = [p.row["local_ns"] / NS_PER_MS for p in pairs if p.row["local_ns"] is not None]
    broker_local = [p.broker.broker_local_ms for p in pairs]
    return {
        "fetches": n + unmatched, "matched": n, "matched_share": n / (n + unmatched) if n + unmatched else math.nan,
        "outcome_agree_share": sum(outcome_agrees(p) for p in pairs) / n if n else math.nan,
        "abs_err_p50_ms": quantile(errs, 0.5), "abs_err_p99_ms": quantile(errs, 0.99),
        "signed_err_p50_ms": quantile(signed, 0.5),
        "by_broker_outcome": by_outcome,
        "fetchlat_local_p50_ms": quantile(local, 0.5), "fetchlat_local_p99_ms": quantile(local, 0.99),
        "broker_local_p50_ms": quantile(broker_local, 0.5), "broker_local_p99_ms": quantile(broker_local, 0.99),
        "broker_local_zero_remote_race": sum(1 for p in pairs if p.broker.remote_ms <= 0.0
                                             and p.row["outcome"] == "woken"),
    }


def trace_rows(trace_dir: Path | str, api: str | Sequence[str] = "Fetch") -> list[dict[str, Any]]:
    """The exchanges rows of one API (or of several, read in one pass) in a trace directory
    (every hour, every writer)."""
    import pyarrow.parquet as pq

    cols = ["ts_ns", "broker", "api", "client_id", "correlation_id", "kind", "replica_id", "max_wait_ms",
            "min_bytes", "total_ns", "wait_ns", "local_ns", "outcome", "wait_basis", "records", "error_code",
            "throttle_ms", "first_byte_ns", "request_bytes", "response_bytes"]
    wanted = {api} if isinstance(api, str) else set(api)
    rows: list[dict[str, Any]] = []
    for f in trace_layout.local_files(str(trace_dir), "exchanges"):
        rows += [r for r in pq.read_table(f, columns=cols).to_pylist() if r["api"] in wanted]
    return rows
