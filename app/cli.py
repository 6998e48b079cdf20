"""The ``fetchlat`` command: one parser built from the subcommands each package owns, and the
dispatch. ``proxy`` (``proxy/cli.py``), ``pcap`` (``capture/run.py``), ``analyze``
(``analysis/cli.py``), ``perf`` (``perf/cli.py``) and ``verify`` (``verify/cli.py``) parse
their own flags; ``demo`` is parsed here and runs ``app/demo.py``."""

from __future__ import annotations

import argparse
import os

from ..analysis import cli as analysis_cli
from ..capture import run as capture_cli
from ..perf import cli as perf_cli
from ..proxy import cli as proxy_cli
from ..verify import cli as verify_cli


def _demo_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo", help="run an embedded broker, the proxy and load; show what it measures")
    p.add_argument("--seconds", type=float, default=60.0, help="how long to run the load (default 60)")
    p.add_argument("--rate", type=int, default=200, help="records per second produced (default 200)")
    p.add_argument("--no-report", dest="no_report", action="store_true",
                   help="skip the closing fetchlat analyze run (Spark)")
    p.add_argument("--broker", choices=("tansu", "kafka"), default=os.environ.get("FETCHLAT_DEMO_BROKER", "tansu"),
                   help="tansu: one embedded Tansu behind one proxy (default); kafka: Apache Kafka, 3 brokers "
                        "each behind its own sidecar, replication latency on screen (env FETCHLAT_DEMO_BROKER)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fetchlat", description="True Kafka fetch latency, measured by a proxy.")
    sub = parser.add_subparsers(dest="command", required=True)
    proxy_cli.add_parser(sub)
    _demo_parser(sub)
    analysis_cli.add_parser(sub)
    perf_cli.add_parser(sub)
    capture_cli.add_parser(sub)
    verify_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "proxy":
        return int(proxy_cli.run(args))
    if args.command == "analyze":
        return int(analysis_cli.run(args))
    if args.command == "perf":
        return int(perf_cli.run(args))
    if args.command == "pcap":
        return int(capture_cli.run(args))
    if args.command == "verify":
        return int(verify_cli.run(args))
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(args)
    parser.error(f"unknown command {args.command}")
    return 2

