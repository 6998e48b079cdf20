"""Entry point for spark-submit: ``spark-submit [options] .../fetchlat/analysis/__main__.py
TRACE_DIR ... --out REPORT_DIR`` (same arguments as ``fetchlat analyze``). The one import in the
package that is not relative: a script has no package to be relative to."""

import argparse
import sys

from fetchlat.analysis import cli  # absolute: spark-submit runs this file as a script, not as a module

parser = argparse.ArgumentParser(prog="fetchlat analyze")
cli.add_parser(parser.add_subparsers(dest="command", required=True))
sys.exit(cli.run(parser.parse_args(["analyze", *sys.argv[1:]])))
