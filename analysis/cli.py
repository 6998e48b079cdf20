"""The ``fetchlat analyze`` command line: its arguments, their parsing (times, durations), and
the run with a progress display. Imported by ``fetchlat``'s entry point; imports nothing of
``proxy/`` (spark-submit runs ``analysis/__main__.py``, which needs only this package)."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("analyze", help="analyse trace directories with Spark and write a report",
                       description="Read fetchlat traces (local paths, s3a://, hdfs://, ...) and write report.html, "
                                   "summary.json and tables/ to --out.")
    p.add_argument("trace_dirs", nargs="+", metavar="TRACE_DIR")
    p.add_argument("--out", required=True, help="report directory")
    p.add_argument("--master", help="Spark master URL (default local[*]; under spark-submit, spark-submit's)")
    p.add_argument("--since", help="only traces at or after this time (ISO 8601, or epoch seconds)")
    p.add_argument("--until", help="only traces before this time (ISO 8601, or epoch seconds)")
    p.add_argument("--window", default="1m", help="time window for per-window tables (30s, 1m, 5m, 1h; default 1m)")
    p.add_argument("--record-latency-sla", dest="sla", default="5s", help="record latency SLA (e.g. 500ms, 5s)")
    p.add_argument("--top", type=int, default=10, help="how many slowest clients/partitions to list")


def parse_time_ns(text: str | None, what: str) -> int | None:
    import datetime as dt

    if text is None:
        return None
    try:
        return int(float(text) * 1e9)
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SystemExit(f"fetchlat analyze: {what} '{text}' is neither ISO 8601 (2026-11-22T05:00:00Z) "
                         "nor epoch seconds") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1e9)


def parse_duration_ms(text: str) -> float:
    import re

    m = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|m)?\s*", text)
    if not m:
        raise SystemExit(f"fetchlat analyze: duration '{text}' should look like 500ms, 5s or 1m")
    return float(m.group(1)) * {"ms": 1.0, "s": 1000.0, "m": 60000.0, None: 1000.0}[m.group(2)]


def run(args: argparse.Namespace) -> int:
    try:
        from fetchlat.analysis import job
    except ImportError as exc:
        print(f"fetchlat analyze needs PySpark ({exc}); install it with: pip install 'fetchlat[analysis]'",
              file=sys.stderr)
        return 2
    from rich.console import Console

    console = Console(stderr=True)
    since, until = parse_time_ns(args.since, "--since"), parse_time_ns(args.until, "--until")
    try:
        from fetchlat.analysis.transforms import window_us

        window_us(args.window)
    except ValueError as exc:
        print(f"fetchlat analyze: {exc}", file=sys.stderr)
        return 2
    with console.status("starting Spark") as status:
        summary = job.run(args.trace_dirs, args.out, master=args.master, since_ns=since, until_ns=until,
                          window=args.window, sla_ms=parse_duration_ms(args.sla), top_n=args.top,
                          progress=lambda s: status.update(s))
    import os

    console.print(f"{summary['exchanges_read']:,} exchanges analysed in {summary['seconds']} s; "
                  f"{len(summary['flagged_pairs'])} broker-pair window(s) flagged")
    print(os.path.join(os.path.abspath(args.out), "report.html"))
    return 0
