"""Entry point for spark-submit: ``spark-submit [options] .../fetchlat/analysis/__main__.py
TRACE_DIR ... --out REPORT_DIR`` (same arguments as ``fetchlat analyze``)."""

import sys

from fetchlat.proxy.cli import main

sys.exit(main(["analyze", *sys.argv[1:]]))
