"""How heavy the report is for a reader: its size, and how long headless Chromium takes from
navigation until every chart is drawn (the page sets ``document.body.dataset.drawn`` to that
moment, in ms since navigation), median over fresh page loads.

    python bench/report_draw.py REPORT.html [--loads 5] [--screenshots DIR]

Prints one JSON line: bytes, drawn_ms per load, their median. ``--screenshots`` also saves what
a reader sees (the top of the page, and each chart) as PNG files in DIR. Run it on an idle machine: the
figure is the reader's, not a test's (no timed assertion lives in the suite).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path)
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--screenshots", type=Path, default=None)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    drawn: list[int] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"),
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        for _ in range(max(1, min(args.loads, 50))):  # bounded
            pg = browser.new_page(viewport={"width": 1200, "height": 900})
            pg.goto(args.report.resolve().as_uri(), wait_until="load")
            pg.wait_for_function("() => document.body.dataset.drawn", timeout=120_000)
            drawn.append(int(pg.evaluate("() => document.body.dataset.drawn")))
            if args.screenshots is not None and len(drawn) == 1:
                args.screenshots.mkdir(parents=True, exist_ok=True)
                pg.screenshot(path=str(args.screenshots / "report-top.png"))
                for chart in pg.locator("section.chart").all():
                    name = chart.get_attribute("data-chart")
                    chart.scroll_into_view_if_needed()
                    chart.screenshot(path=str(args.screenshots / f"report-{name}.png"))
            pg.close()
        browser.close()
    print(json.dumps({"report": str(args.report), "bytes": args.report.stat().st_size, "drawn_ms": drawn,
                      "drawn_ms_median": statistics.median(drawn)}))


if __name__ == "__main__":
    main()
