"""``fetchlat verify``: its flags, and the run (``report.py`` does the work)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import report


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "verify", help="judge fetchlat's traces by the broker's own request log (kafka.request.logger at DEBUG)",
        description="Joins each fetch in fetchlat's traces with the broker's line for the same request and "
                    "prints how far fetchlat's wait and true local time are from the broker's own clock. "
                    "See docs/kafka.md for turning the request log on.")
    p.add_argument("--request-log", action="append", required=True, metavar="[NODE=]FILE",
                   help="a broker's request log; NODE is its node id as the traces name it (the broker label). "
                        "Give one per broker; without NODE, the traces must name one broker only")
    p.add_argument("--traces", required=True, type=Path, help="the trace directory (--trace-dir of the proxies)")
    p.add_argument("--listener", default=None, help="only the log lines of this listener (the one clients and "
                                                    "the sidecars use), when the broker has several")
    p.add_argument("--network-ms", type=float, default=0.0,
                   help="the round trip between proxy and broker (ms), taken off fetchlat's true local time "
                        "before it is compared (0 for a sidecar)")
    p.add_argument("--since-minutes", type=float, default=None, help="only fetches of the last N minutes")
    p.add_argument("--client", default="", metavar="PREFIX",
                   help="only the fetches of clients whose id starts with PREFIX (a follower's: broker-N-fetcher)")
    p.add_argument("--parts", action="store_true",
                   help="also print where each kind's wait error lies: in when the wait began, when it ended, "
                        "or outside the broker's log (per parked outcome)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of the table")
    p.add_argument("--check", action="store_true",
                   help="exit 1 when a goal is missed (matched and outcome ≥ 99 %%, |err| p50 ≤ 0.5 ms and "
                        "p99 ≤ 3 ms, bias within ±0.2 ms)")


def run(args: argparse.Namespace) -> int:
    logs = [report.LogFile(*report.parse_log_arg(text)) for text in args.request_log]
    for lf in logs:
        if not lf.path.exists():
            print(f"fetchlat verify: no such request log: {lf.path}", file=sys.stderr)
            return 2
    if not args.traces.is_dir():
        print(f"fetchlat verify: no such trace directory: {args.traces}", file=sys.stderr)
        return 2
    since_ns = 0 if args.since_minutes is None else time.time_ns() - int(args.since_minutes * 60e9)
    try:
        result = report.verify(logs, args.traces, listener=args.listener, network_ms=args.network_ms,
                               since_ns=since_ns, client=args.client, parts=args.parts)
    except report.UnnamedLog as exc:
        print(f"fetchlat verify: {exc}", file=sys.stderr)
        return 2
    if not result["kinds"]:
        print(f"fetchlat verify: no fetch in {args.traces} for brokers {', '.join(result['brokers'])}",
              file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, default=str) if args.json else report.table(result))
    missed = report.misses(result)
    if args.check and missed:
        print("\ngoals missed:\n  " + "\n  ".join(missed), file=sys.stderr)
        return 1
    return 0
