"""The ``fetchlat perf`` command line: ``produce`` and ``consume``, each parsed by its module."""

from __future__ import annotations

import argparse

from . import consume, produce


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("perf", help="producer / consumer performance with µs-precision latency",
                       description="Load generators: fetchlat perf produce | consume (--help on each).")
    perf_sub = p.add_subparsers(dest="perf_command", required=True)
    produce.add_parser(perf_sub)
    consume.add_parser(perf_sub)


def run(args: argparse.Namespace) -> int:
    return int(args.perf(args))
