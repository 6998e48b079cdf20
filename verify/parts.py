"""Where a fetch's wait error lies, against the broker's request log (``fetchlat verify
--parts``): in when the wait began, in when it ended, or outside the broker's log.

For a fetch the broker parked, on the proxy's clock from the request forwarded:

- the broker's wait began after its queue and local time (``requestQueueTimeMs +
  localTimeMs``) and ended ``remoteTimeMs`` later;
- fetchlat's began where the model starts a wait for that kind of fetch (``park_ms``:
  ``metrics/broker_timing.py``) and ended its ``wait_ns`` later.

``start`` is fetchlat's start less the broker's, ``end`` the same for the ends, and the wait
error (fetchlat's wait less ``remoteTimeMs``) is ``end - start``: ``end`` is also what the error
would be were the broker's start known to the proxy. ``start, answer known`` is the error were its
time after waking known as well (the end dated by the first response byte less the broker's
response queue and send time): what is left lies outside the broker's log, the time from the
proxy's forwarding to the broker's network thread reading the request. ``beyond the log`` is
fetchlat's total less ``totalTimeMs``, and the bias of true local the goals hold is that less
the error. Beside the broker (a sidecar, a capture of its port); across a network the round
trip is in ``beyond the log`` and the bias (``--network-ms`` takes it off the bias only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..metrics import broker_timing
from . import request_log as rl

PARKED = ("woken", "expired")  # the broker outcomes with a wait to split
PARTS = ("start", "end", "error", "start, answer known", "beyond the log", "bias")
QUANTILES = (0.1, 0.5, 0.9, 0.99)


def park_ms(pair: rl.Pair) -> float:
    """Where fetchlat starts this fetch's wait, ms after the request was forwarded."""
    kind = "share" if pair.row["api"] == "ShareFetch" else str(pair.row["kind"])
    return broker_timing.park_ns(kind, pair.broker.acknowledgements > 0) / rl.NS_PER_MS


def split(pair: rl.Pair, network_ms: float = 0.0) -> dict[str, float]:
    """One fetch's figures, fetchlat's less the broker's (ms; NaN: a figure the row lacks)."""
    b, r = pair.broker, pair.row
    before = b.request_queue_ms + b.local_ms
    park = park_ms(pair)
    answered = (math.nan if r["first_byte_ns"] is None
                else r["first_byte_ns"] / rl.NS_PER_MS - b.response_queue_ms - b.send_ms)
    return {"start": park - before,
            "end": park + (r["wait_ns"] or 0) / rl.NS_PER_MS - (before + b.remote_ms),
            "error": pair.wait_error_ms,
            "start, answer known": answered - (before + b.remote_ms),
            "beyond the log": (r["total_ns"] or 0) / rl.NS_PER_MS - b.total_ms,
            "bias": pair.local_error_ms - network_ms}


def parts(pairs: Sequence[rl.Pair], network_ms: float = 0.0) -> dict[str, Any]:
    """Per parked broker outcome: how many, and per part its p10/p50/p90/p99 and the p50/p99 of
    its size."""
    out: dict[str, Any] = {}
    for outcome in PARKED:
        figures = [split(p, network_ms) for p in pairs if rl.broker_outcome(p.broker) == outcome]
        if not figures:
            continue
        out[outcome] = {"n": len(figures)}
        for name in PARTS:
            v = [f[name] for f in figures if not math.isnan(f[name])]
            size = [abs(x) for x in v]
            out[outcome][name] = {**{f"p{round(q * 100)}": rl.quantile(v, q) for q in QUANTILES},
                                  "abs_p50": rl.quantile(size, 0.5), "abs_p99": rl.quantile(size, 0.99)}
    return out


def _f(v: float, sign: bool = True) -> str:
    return "-" if math.isnan(v) else f"{v:+.2f}" if sign else f"{v:.2f}"


def table(kind: str, figures: dict[str, Any]) -> list[str]:
    """The lines of one kind's split."""
    lines = []
    for outcome, f in figures.items():
        title = f"{kind} {outcome} ({f['n']}), ms"
        lines += ["", title + ", fetchlat's less the broker's",
                  " " * 22 + "".join(f"{h:>9}" for h in ("p10", "p50", "p90", "p99", "|p50|", "|p99|"))]
        for name in PARTS:
            p = f[name]
            cells = [_f(p[k]) for k in ("p10", "p50", "p90", "p99")] + [_f(p[k], False) for k in ("abs_p50", "abs_p99")]
            lines.append(f"  {name:<20}" + "".join(f"{c:>9}" for c in cells))
    return lines
