"""The ``fetchlat analyze`` command line: its arguments, their parsing (times, durations), and
the run with a progress display. Imported by ``fetchlat``'s entry point; imports nothing of
``proxy/`` (spark-submit runs ``analysis/__main__.py``, which needs only this package)."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from rich.console import Console
from rich.table import Table


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
    p.add_argument("--state", help="keep per-hour results here (e.g. OUT/state; the driver writes them: a local "
                                   "path, s3://, gs://, hdfs://) and reuse them in later runs over the same hours")
    p.add_argument("--every", help="keep running: look at the traces every EVERY (e.g. 30s, 5m, 1h) and analyse "
                                   "again, in the same Spark session, once they have changed (keeps per-hour "
                                   "state in --state, by default OUT/state)")
    p.add_argument("--runs", type=int, help="with --every: stop after this many runs (default: until interrupted)")


def usage_error(message: str) -> NoReturn:
    """A bad argument: said on stderr, exit status 2 (as argparse's own usage errors)."""
    print(f"fetchlat analyze: {message}", file=sys.stderr)
    raise SystemExit(2)


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
        usage_error(f"{what} '{text}' is neither ISO 8601 (2026-11-22T05:00:00Z) nor epoch seconds")
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1e9)


def parse_duration_ms(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|m|h)?\s*", text)
    if not m:
        usage_error(f"duration '{text}' should look like 500ms, 5s, 1m or 1h")
    return float(m.group(1)) * {"ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3_600_000.0, None: 1000.0}[m.group(2)]


def run(args: argparse.Namespace) -> int:
    try:
        from . import job
    except ImportError as exc:
        print(f"fetchlat analyze needs PySpark and plotly ({exc}); install them with: pip install 'fetchlat[analysis]'",
              file=sys.stderr)
        return 2
    console = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=140)
    since, until = parse_time_ns(args.since, "--since"), parse_time_ns(args.until, "--until")
    try:
        from .transforms import window_us

        window_us(args.window)
    except ValueError as exc:
        print(f"fetchlat analyze: {exc}", file=sys.stderr)
        return 2
    if args.runs is not None and args.every is None:
        print("fetchlat analyze: --runs goes with --every", file=sys.stderr)
        return 2

    def analysis(progress: Report, spark: Any = None) -> dict[str, Any]:
        summary: dict[str, Any] = job.run(
            args.trace_dirs, args.out, master=args.master, since_ns=since, until_ns=until, window=args.window,
            sla_ms=parse_duration_ms(args.sla), top_n=args.top, progress=progress, state_dir=args.state, spark=spark)
        return summary

    if args.every is None:
        said(console, args.out, run_with_progress(console, analysis))
        return 0
    return _follow(console, args, analysis, since, until)


def said(console: Console, out: str, summary: dict[str, Any], run: int | None = None) -> None:
    """A run's headline, what it read, and where its report is (the report's path alone on stdout)."""
    console.print(headline_table(summary))
    kept = summary["state"]
    reused = f" ({kept['hours_reused']} hour(s) read from {kept['dir']})" if kept["hours_reused"] else ""
    if kept["not_kept_because"]:
        console.print(f"nothing kept in the state: {kept['not_kept_because']}")
    which = f"run {run}: " if run is not None else ""
    console.print(f"{which}{summary['exchanges_read']:,} exchanges analysed in {summary['seconds']} s{reused}; "
                  f"{len(summary['flagged_pairs'])} broker-pair window(s) flagged")
    print(os.path.join(os.path.abspath(out), "report.html"), flush=True)


def _follow(console: Console, args: argparse.Namespace, analysis: Callable[..., dict[str, Any]], since: int | None,
            until: int | None) -> int:
    """``--every``: one Spark session, a run now and again whenever the traces have changed."""
    from . import follow, job

    every_s = parse_duration_ms(args.every) / 1000
    if every_s <= 0 or (args.runs is not None and args.runs < 1):
        print("fetchlat analyze: --every needs a positive duration and --runs at least 1", file=sys.stderr)
        return 2
    args.state = args.state or os.path.join(args.out, "state")
    spark = job.build_session(args.master)

    def done(n: int, summary: dict[str, Any]) -> None:
        said(console, args.out, summary, n)
        console.print(f"fetchlat analyze: run {n} done; looking at the traces every {args.every}")

    def failed(n: int, exc: Exception) -> None:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        console.print(f"fetchlat analyze: run {n} failed: {why}; the report stays as the last run wrote it; "
                      "running again once the traces change")

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # a service manager's SIGTERM stops it as Ctrl-C does: Spark stopped, then exit

    signal.signal(signal.SIGTERM, stop)
    try:
        follow.follow(lambda: run_with_progress(console, lambda progress: analysis(progress, spark)),
                      lambda: follow.listing(spark, args.trace_dirs, since, until), every_s, done, failed,
                      runs=args.runs)
    except KeyboardInterrupt:
        console.print("fetchlat analyze: stopped")
    finally:
        spark.stop()
    return 0


PROGRESS_LINE = "fetchlat analyze: {pct:3d}% {what}"  # without a terminal; fetchlat demo reads them back
_PROGRESS_RE = re.compile(r"fetchlat analyze:\s+(\d+)% (.*)")
Report = Callable[[float, str], None]  # (share done, what is running)


def read_progress_line(line: str) -> tuple[float, str] | None:
    """(share done, what) of a PROGRESS_LINE; None for any other line."""
    m = _PROGRESS_RE.match(line)
    return (int(m.group(1)) / 100, m.group(2).rstrip()) if m else None


@contextlib.contextmanager
def progress_bar(console: Console, name: str, line: Callable[[int, str], None]) -> Iterator[Report]:
    """A progress bar with the elapsed time and the time left on a terminal; otherwise ``line``
    (percent, what) once per step, and again each 10%."""
    if not console.is_terminal:
        last: list[Any] = [None, -10]

        def report(done: float, what: str) -> None:
            pct, step = int(done * 100), what.split(" · ")[0]
            if step != last[0] or pct >= last[1] + 10:
                last[:] = [step, pct]
                line(pct, what)

        yield report
        return
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn(f"[bold]{name}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
               TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.description}"))
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("starting", total=1.0)
        yield lambda done, what: bar.update(task, completed=done, description=what)


def run_with_progress(console: Console, work: Callable[[Report], dict[str, Any]]) -> dict[str, Any]:
    """Run ``work(progress)`` under ``progress_bar``; without a terminal, PROGRESS_LINEs on stderr."""
    def line(pct: int, what: str) -> None:
        print(PROGRESS_LINE.format(pct=pct, what=what), file=sys.stderr, flush=True)

    with progress_bar(console, "analyze", line) as report:
        return work(report)


def headline_table(summary: dict[str, Any]) -> Table:
    """Per broker x kind: p50 and p99 (a latency tool's numbers are its tail, not an average)."""
    t = Table(title="fetch latency per broker, ms (percentiles within 1%)")
    cols = (("naive total", "total", "p50"), ("p99", "total", "p99"), ("purgatory wait", "wait", "p50"),
            ("true local", "local", "p50"), ("p99", "local", "p99"), ("end to end", "e2e", "p50"),
            ("p99", "e2e", "p99"))
    for col in ("broker", "kind", "fetches", *(c[0] for c in cols)):
        t.add_column(col, justify="left" if col in ("broker", "kind") else "right")
    for b in summary["brokers"]:
        cells = [b[f"{part}_ms"][q] for _, part, q in cols]
        t.add_row(b["broker"], b["kind"], f"{b['fetches']:,}", *("-" if v is None else f"{v:.3f}" for v in cells))
    return t
