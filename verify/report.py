"""``fetchlat verify``: fetchlat's traces judged by the broker's own request log, per kind of
fetch (consumer, follower, share), with the figures the tests judged by the broker's clock
assert, the bias of fetchlat's true local time per outcome, and the broker's expiry overshoot
read off its own log.

Owns: which rows and log lines a verification takes, the bias and overshoot figures, the goals
a ``--check`` holds them to, and the table printed. The join and the agreement figures are
``request_log.py``'s, where each error lies ``parts.py``'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import parts as error_parts
from . import request_log as rl

KINDS = ("consumer", "follower", "share")
OUTCOMES = ("immediate", "woken", "expired")
# The goals (docs/kafka.md): what a verification is held to by ``--check``.
GOALS = {"matched_share": 0.99, "outcome_agree_share": 0.99, "abs_err_p50_ms": 0.5, "abs_err_p99_ms": 3.0,
         "local_bias_ms": 0.2}
# The bias of an outcome is judged from this many of its fetches on: the median of one or two is
# a single fetch's figure, not the model's
BIAS_MIN_FETCHES = 5


@dataclass(frozen=True)
class LogFile:
    node: str | None  # the broker's node id, as the traces' ``broker`` label names it (None: the traces')
    path: Path


class UnnamedLog(ValueError):
    """A log given without its node id, where the traces name more than one broker (or none)."""


def parse_log_arg(text: str) -> tuple[str | None, Path]:
    """``NODE=PATH`` or ``PATH`` (the node then comes from the traces)."""
    node, sep, path = text.partition("=")
    if sep and node.strip().lstrip("-").isdigit():
        return node.strip(), Path(path)
    return None, Path(text)


Network = float | Callable[[rl.Pair], float]  # the round trip between proxy and broker: one, or each fetch's


def bias(pairs: Sequence[rl.Pair], network_ms: Network) -> dict[str, float]:
    """Per broker outcome, the median of fetchlat's true local minus (the broker's own local,
    ``totalTimeMs - remoteTimeMs``, plus the round trip between proxy and broker: one figure,
    or what each fetch met, as a ground truth that measures its network gives it)."""
    net = network_ms if callable(network_ms) else (lambda _p: network_ms)
    out: dict[str, float] = {}
    for name in OUTCOMES:
        d = [p.local_error_ms - net(p) for p in pairs
             if rl.broker_outcome(p.broker) == name and p.row["local_ns"] is not None]
        out[name] = rl.quantile(d, 0.5)
    return out


def judge(pairs: Sequence[rl.Pair], unmatched: int, network_ms: Network = 0.0) -> dict[str, Any]:
    """The agreement figures of these fetches, with the bias of true local per outcome: what
    ``missed`` holds to the goals."""
    figures = rl.agreement(pairs, unmatched)
    figures["local_bias_p50_ms"] = bias(pairs, network_ms)
    return figures


def expiry_overshoot_ms(requests: Sequence[rl.BrokerRequest]) -> tuple[float, int]:
    """The median of ``remoteTimeMs - maxWaitMs`` over the fetches the broker let go at expiry:
    how late its purgatory timer releases them (``--expiry-overshoot-ms``), and how many."""
    over = [r.remote_ms - (r.max_wait_ms or 0) for r in requests
            if r.max_wait_ms and r.remote_ms > 0 and rl.broker_outcome(r) == "expired"]
    return rl.quantile(over, 0.5), len(over)


def verify(logs: Sequence[LogFile], trace_dir: Path | str, *, listener: str | None = None,
           network_ms: float = 0.0, since_ns: int = 0, client: str = "", parts: bool = False) -> dict[str, Any]:
    """Every fetch and share fetch in the traces of the brokers whose logs are given (of the
    clients whose id starts with ``client``), joined with those logs and judged, per kind, with
    where the error lies when ``parts`` (``parts.py``). A log given without its node (one at
    most) is the one broker the traces name (``UnnamedLog`` if they name more, or none)."""
    traced = [r for r in rl.trace_rows(trace_dir, ("Fetch", "ShareFetch"))
              if r["ts_ns"] >= since_ns and (r["client_id"] or "").startswith(client)]
    unnamed = [lf for lf in logs if lf.node is None]
    if unnamed:
        brokers = {str(r["broker"]) for r in traced}
        if len(unnamed) > 1 or len(brokers) != 1:
            raise UnnamedLog(f"the traces name brokers {sorted(brokers) or 'none'}: give each log as NODE=FILE")
        logs = [LogFile(brokers.pop(), lf.path) if lf.node is None else lf for lf in logs]
    nodes = {str(lf.node) for lf in logs}
    rows = [r for r in traced if str(r["broker"]) in nodes]
    keys = [rl.API_KEYS["Fetch"], rl.API_KEYS["ShareFetch"]]
    requests = [r for lf in logs for r in rl.read(lf.path, str(lf.node), keys, listener=listener)]
    out: dict[str, Any] = {"brokers": sorted(nodes), "trace_rows": len(rows), "log_lines": len(requests),
                           "network_ms": network_ms, "kinds": {}}
    pool = list(requests)
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        pairs, unmatched = rl.join(mine, pool)
        used = {id(p.broker) for p in pairs}
        pool = [r for r in pool if id(r) not in used]
        out["kinds"][kind] = judge(pairs, len(unmatched), network_ms)
        if parts:
            out["kinds"][kind]["parts"] = error_parts.parts(pairs, network_ms)
    out["expiry_overshoot_ms"], out["expired_in_log"] = expiry_overshoot_ms(
        [r for r in requests if r.api_key == rl.API_KEYS["Fetch"]])
    return out


@dataclass(frozen=True)
class Miss:
    """A goal one kind of fetch misses: ``goal`` a key of GOALS (``local_bias_ms:<outcome>`` for
    the bias of one outcome), ``text`` the figure against the goal in words, ``figure`` the figure
    (a share for the ``_share`` goals, ms for the others; a bias's size)."""

    kind: str
    goal: str
    text: str
    figure: float = math.nan


def missed(result: dict[str, Any]) -> list[Miss]:
    """Each goal a kind misses (empty: every goal holds)."""
    out: list[Miss] = []
    for kind, f in result["kinds"].items():
        if f["matched_share"] < GOALS["matched_share"]:
            out.append(Miss(kind, "matched_share",
                            f"{kind}: {f['matched_share']:.1%} of fetches matched (goal ≥ 99 %)", f["matched_share"]))
        if f["outcome_agree_share"] < GOALS["outcome_agree_share"]:
            out.append(Miss(kind, "outcome_agree_share",
                            f"{kind}: outcome agrees for {f['outcome_agree_share']:.1%} (goal ≥ 99 %)",
                            f["outcome_agree_share"]))
        if f["abs_err_p50_ms"] > GOALS["abs_err_p50_ms"]:
            out.append(Miss(kind, "abs_err_p50_ms",
                            f"{kind}: |wait - remoteTimeMs| p50 {f['abs_err_p50_ms']:.2f} ms (goal ≤ 0.5 ms)",
                            f["abs_err_p50_ms"]))
        if f["abs_err_p99_ms"] > GOALS["abs_err_p99_ms"]:
            out.append(Miss(kind, "abs_err_p99_ms",
                            f"{kind}: |wait - remoteTimeMs| p99 {f['abs_err_p99_ms']:.2f} ms (goal ≤ 3 ms)",
                            f["abs_err_p99_ms"]))
        for outcome, b in f["local_bias_p50_ms"].items():
            judged = f["by_broker_outcome"][outcome]["n"] >= BIAS_MIN_FETCHES
            if judged and not math.isnan(b) and abs(b) > GOALS["local_bias_ms"]:
                out.append(Miss(kind, f"local_bias_ms:{outcome}",
                                f"{kind}: bias of true local for {outcome} fetches {b:+.2f} ms (goal within ±0.2 ms)",
                                abs(b)))
    return out


def misses(result: dict[str, Any]) -> list[str]:
    """Each goal a kind misses, in words (empty: every goal holds)."""
    return [m.text for m in missed(result)]


def _ms(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.2f}"


def _bias(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:+.2f}"


def table(result: dict[str, Any]) -> str:
    """The agreement table, one row per kind and outcome, as the tests print it."""
    head = (f"brokers {', '.join(result['brokers'])}: {result['trace_rows']} fetches in the traces, "
            f"{result['log_lines']} fetch lines in the request logs"
            + (f", a round trip of {result['network_ms']} ms to the broker taken off" if result["network_ms"] else ""))
    lines = [head, "",
             f"{'kind':<9} {'outcome':<10} {'fetches':>8} {'matched':>8} {'agree':>7} "
             f"{'|err| p50':>9} {'|err| p99':>9} {'bias p50':>9}",
             "-" * 75]
    for kind, f in result["kinds"].items():
        lines.append(f"{kind:<9} {'all':<10} {f['fetches']:>8} {f['matched_share']:>8.1%} "
                     f"{f['outcome_agree_share']:>7.1%} {_ms(f['abs_err_p50_ms']):>9} {_ms(f['abs_err_p99_ms']):>9} "
                     f"{'':>9}")
        for outcome in OUTCOMES:
            o = f["by_broker_outcome"][outcome]
            if not o["n"]:
                continue
            lines.append(f"{'':<9} {outcome:<10} {o['n']:>8} {'':>8} {o['agree'] / o['n']:>7.1%} "
                         f"{_ms(o['abs_err_p50_ms']):>9} {_ms(o['abs_err_p99_ms']):>9} "
                         f"{_bias(f['local_bias_p50_ms'][outcome]):>9}")
        lines.append(f"{'':<9} true local p50: fetchlat {_ms(f['fetchlat_local_p50_ms'])} ms, "
                     f"broker {_ms(f['broker_local_p50_ms'])} ms")
    lines += ["", "agree: fetchlat's outcome is the broker's (remoteTimeMs 0: immediate; parked, let go short of "
              "min bytes: expired; parked, answered with data: woken)",
              "|err|: |fetchlat's wait - remoteTimeMs|; bias: fetchlat's true local - (totalTimeMs - remoteTimeMs) "
              "- network, median"]
    if result["expired_in_log"]:
        lines.append(f"the broker's expiry overshoot (remoteTimeMs - maxWaitMs of its expired fetches, median of "
                     f"{result['expired_in_log']}): {result['expiry_overshoot_ms']:.2f} ms")
    split = [line for kind, f in result["kinds"].items() if "parts" in f
             for line in error_parts.table(kind, f["parts"])]
    if split:
        lines += [*split, "", "per fetch, fetchlat's less the broker's. start / end: when the wait began / ended;",
                  "error: end - start (end: the error were the broker's start known); start, answer known: the",
                  "error were its response queue and send time after waking known too; beyond the log: the total",
                  "less totalTimeMs; bias: beyond the log - error - network"]
    return "\n".join(lines)
