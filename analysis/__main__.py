"""Entry point for spark-submit: ``spark-submit [options] .../fetchlat/analysis/__main__.py
TRACE_DIR ... --out REPORT_DIR`` (same arguments as ``fetchlat analyze``)."""

import argparse
import sys

from . import cli

parser = argparse.ArgumentParser(prog="fetchlat analyze")
cli.add_parser(parser.add_subparsers(dest="command", required=True))
sys.exit(cli.run(parser.parse_args(["analyze", *sys.argv[1:]])))
