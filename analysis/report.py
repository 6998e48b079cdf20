"""The HTML report: one self-contained page rendered from the small tables the job collected.
Pure: data in, text out.

Charts are plotly figures (plotly.py builds them, plotly.js draws them). Plotly, not Vega-Lite
through altair: hover labels with the exact value come with every trace, the heatmap with
marked cells and the date axes need no extra grammar, and plotly.js is one file (its cartesian
bundle, ``plotly_js``), inlined once, so the page opens with no network; altair's inline
mode needs three bundles from a second package (vl-convert). The tables below the charts are
plain HTML."""

from __future__ import annotations

import base64
import functools
import gzip
import html
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs, get_plotlyjs_version
from plotly.subplots import make_subplots

from ..metrics.vocabulary import Outcome

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
OUTCOME_COLORS = {Outcome.IMMEDIATE.value: "#2ca02c", Outcome.WOKEN.value: "#1f77b4",
                  Outcome.EXPIRED.value: "#bbbbbb", Outcome.ERROR.value: "#d62728", Outcome.UNKNOWN.value: "#ff7f0e"}
CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["toImage"]}
LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 40, "b": 40}, "hovermode": "closest",
          "font": {"family": "system-ui, sans-serif", "size": 12}}


def _esc(v: Any) -> str:
    return html.escape(str(v))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"  # thousands separated
    return _esc(v)


def natural(s: Any) -> tuple[tuple[int, int | str], ...]:
    """Sort key that reads numbers as numbers: topic-2 before topic-10, broker 9 before 10."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", str(s)) if p)


def _ms_label(v: float) -> str:
    if v >= 1000:
        return f"{v / 1000:g} s"
    if v >= 1:
        return f"{v:g} ms"
    return f"{v * 1000:g} µs"


def log_axis(values: Sequence[float | None]) -> dict[str, Any]:
    """A log axis in ms whose ticks are labelled in full (1 ms, 2 ms, 5 ms, 10 ms ... 1 s), not
    plotly's bare minor digits ("2", "5")."""
    vs = [v for v in values if v is not None and v > 0]
    if not vs:
        return {"type": "log"}
    lo, hi = min(vs), max(vs)
    ticks: list[float] = []
    decade = 10.0 ** math.floor(math.log10(lo))
    while decade <= hi * 10:
        ticks += [m * decade for m in (1, 2, 5) if lo / 2 <= m * decade <= hi * 2]
        decade *= 10
    ticks = [round(t, 6) for t in ticks]
    span = math.log10(hi / lo)
    pad = 0.15 * span + 0.05  # the lowest line sits clear of the floor, the highest below the top
    return {"type": "log", "tickvals": ticks, "ticktext": [_ms_label(t) for t in ticks],
            "range": [math.log10(lo) - pad, math.log10(hi) + pad]}


def _utc(iso: str) -> str:
    """A window start as plotly reads a date (it ignores offsets): ``YYYY-MM-DD HH:MM:SS``, UTC."""
    return iso[:19].replace("T", " ")


def _div(fig: go.Figure, chart_id: str, height: int) -> str:
    """A chart's place on the page and its figure as JSON: ``LOADER`` draws it once plotly.js is in."""
    fig.update_layout(**LAYOUT, height=height)
    spec = fig.to_json().replace("</", "<\\/")  # never ends its script element early
    return (f'<section class="chart" data-chart="{chart_id}"><div id="{chart_id}" style="height:{height}px"></div>'
            f'<script type="application/json" class="figure" data-for="{chart_id}">{spec}</script></section>')


# plotly.js is inlined gzipped and base64-encoded, and unpacked by the browser's own
# DecompressionStream: the page stays one offline file, at under half the size.
LOADER = """<script>(async () => {
  const b64 = document.getElementById('plotly-gz').textContent.trim();
  const raw = atob(b64), bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  const js = await new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'))).text();
  const s = document.createElement('script'); s.textContent = js; document.head.appendChild(s);
  const config = CONFIG_JSON;
  for (const el of document.querySelectorAll('script.figure')) {
    const fig = JSON.parse(el.textContent);
    await Plotly.newPlot(el.dataset.for, fig.data, fig.layout, config);
  }
  document.body.dataset.drawn = String(Math.round(performance.now()));
})();</script>"""


# plotly.js's cartesian bundle (npm: plotly.js-cartesian-dist-min, MIT, LICENSE beside it): bar,
# heatmap and scatter, every trace the report draws, in 1.5 MB where the full bundle plotly.py ships
# is 4.8 MB. A browser evaluates a script before it draws anything: the full bundle took headless
# Chromium 1.2-1.6 s here, most of the page's draw time.
CARTESIAN = Path(__file__).with_name("plotlyjs") / "plotly-cartesian.min.js"
CARTESIAN_VERSION = "4.1.1"


@functools.cache
def plotly_js() -> str:
    """plotly.js for the page: the cartesian bundle when it is the version plotly.py writes its
    figures for, else the full bundle plotly.py ships (figures and plotly.js must agree)."""
    if get_plotlyjs_version() == CARTESIAN_VERSION and CARTESIAN.is_file():
        return CARTESIAN.read_text()
    full: str = get_plotlyjs()
    return full


@functools.cache
def _plotly_gz_b64() -> str:
    return base64.b64encode(gzip.compress(plotly_js().encode(), 9, mtime=0)).decode()


def _empty(chart_id: str, title: str, why: str = "no data") -> str:
    return f'<section class="chart empty" data-chart="{chart_id}"><p>{_esc(title)}: {_esc(why)}</p></section>'


def _floats(values: Sequence[float | None]) -> np.ndarray:
    """Values as an array of doubles, a missing one NaN (drawn as a gap)."""
    return np.array([math.nan if v is None else v for v in values], dtype=float)


def broker_timeline(rows: Sequence[dict[str, Any]]) -> str:
    """True local fetch latency per broker over time, one panel per kind: one line per broker (a
    legend click hides that one line), p50 or p99 as a choice (the buttons), and the naive total
    (the median over the brokers) for the contrast. Log scale, ticks labelled in full."""
    kinds = sorted({r["kind"] for r in rows})
    if not kinds:
        return _empty("broker-timeline", "naive total vs true local per broker")
    fig = make_subplots(rows=len(kinds), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        specs=[[{"secondary_y": True}] for _ in kinds],
                        subplot_titles=[f"{k} fetches: true local per broker (left), naive total (right, dashed)"
                                        for k in kinds])
    brokers = sorted({r["broker"] for r in rows}, key=natural)
    ys: dict[str, list[np.ndarray]] = {"p50": [], "p99": []}
    for row, kind in enumerate(kinds, start=1):
        mine = [r for r in rows if r["kind"] == kind]
        for i, broker in enumerate(brokers):
            pts = sorted((r for r in mine if r["broker"] == broker), key=lambda r: r["window_start"])
            if not pts:
                continue
            for q in ys:  # arrays: plotly copies and checks a list value by value (seconds for a day)
                ys[q].append(_floats([r[f"local_{q}"] for r in pts]))
            fig.add_trace(go.Scatter(
                x=[_utc(r["window_start"]) for r in pts], y=ys["p50"][-1], mode="lines+markers",
                name=f"broker {broker} · {kind}", line={"color": PALETTE[i % len(PALETTE)], "width": 2},
                marker={"size": 4},
                hovertemplate=f"broker {broker} · {kind}<br>true local: %{{y:,.3f}} ms<br>%{{x}}<extra></extra>"),
                row=row, col=1, secondary_y=False)
        by_window: dict[Any, list[dict[str, Any]]] = {}
        for r in mine:  # grouped once: a day of 1-minute windows is 1 440 of them
            by_window.setdefault(r["window_start"], []).append(r)
        windows = sorted(by_window)
        for q in ys:
            ys[q].append(_floats([_median([r[f"total_{q}"] for r in by_window[w] if r[f"total_{q}"] is not None]
                                          or [math.nan]) for w in windows]))
        fig.add_trace(go.Scatter(
            x=[_utc(w) for w in windows], y=ys["p50"][-1], mode="lines", name=f"naive total · {kind}",
            line={"color": "#999999", "dash": "dash", "width": 1},
            hovertemplate=f"{kind}, median over brokers<br>naive total: %{{y:,.3f}} ms<br>%{{x}}<extra></extra>"),
            row=row, col=1, secondary_y=True)
        # true local on its own axis (left), never squeezed under the wait; the naive total on the right
        fig.update_yaxes(**log_axis([r[c] for r in mine for c in ("local_p50", "local_p99")]),
                         title_text="true local", row=row, col=1, secondary_y=False)
        fig.update_yaxes(**log_axis([r[c] for r in mine for c in ("total_p50", "total_p99")]),
                         title_text="naive total", showgrid=False, row=row, col=1, secondary_y=True)
    fig.update_xaxes(title_text="window start (UTC)", row=len(kinds), col=1)
    fig.update_layout(updatemenus=[{
        "type": "buttons", "direction": "right", "x": 0, "y": 1.12, "xanchor": "left", "showactive": True,
        "buttons": [{"label": label, "method": "restyle", "args": [{"y": ys[q]}]}
                    for q, label in (("p50", "p50"), ("p99", "p99"))]}])
    return _div(fig, "broker-timeline", 300 * len(kinds) + 110)


def pair_heatmap(cells: Sequence[dict[str, Any]]) -> str:
    """Follower -> leader pairs by window: colour = median true local ms; flagged windows marked."""
    if not cells:
        return _empty("pair-heatmap", "true local latency per broker pair", "no follower fetches")
    pairs = sorted({(str(c["follower"]), str(c["leader"])) for c in cells},
                   key=lambda p: (natural(p[0]), natural(p[1])))
    labels = [f"{f} → {lead}" for f, lead in pairs]
    windows = sorted({_utc(c["window_start"]) for c in cells})
    index = {(str(c["follower"]), str(c["leader"]), _utc(c["window_start"])): c for c in cells}
    z = [[(index[(f, lead, w)]["local_p50"] if (f, lead, w) in index else None) for w in windows] for f, lead in pairs]
    # colour on a log scale, labelled in ms: a pair 9x its usual latency stands out, and cells a
    # few percent apart still differ in shade (a linear scale washes them out to one colour)
    values = [v for row in z for v in row if v is not None and v > 0]
    axis = log_axis(values)
    # as arrays (a missing cell NaN, drawn as a gap): plotly checks a list of lists value by value,
    # seconds for a day of windows
    zs = np.array([_floats(row) for row in z])
    with np.errstate(divide="ignore", invalid="ignore"):
        logz = np.where(zs > 0, np.log10(zs), math.nan)
    lo, hi = math.log10(min(values)), math.log10(max(values))
    fig = go.Figure(go.Heatmap(
        x=windows, y=labels, z=logz, customdata=zs, colorscale="YlOrRd", zmin=lo, zmax=max(hi, lo + 0.01),
        colorbar={"title": {"text": "ms", "side": "top"}, "thickness": 12,
                  "tickvals": [math.log10(v) for v in axis.get("tickvals", [])], "ticktext": axis.get("ticktext", [])},
        name="median true local",
        hovertemplate="%{y}<br>%{x}<br>median true local: %{customdata:,.3f} ms<extra></extra>"))
    flagged = [c for c in cells if c.get("flagged")]
    if flagged:
        fig.add_trace(go.Scatter(
            x=[_utc(c["window_start"]) for c in flagged], y=[f"{c['follower']} → {c['leader']}" for c in flagged],
            mode="markers", name="flagged shift", marker={"symbol": "square-open", "size": 16, "color": "#000",
                                                           "line": {"width": 2}},
            customdata=[[c["local_p50"], c["baseline_ms"], c["shift_ms"]] for c in flagged],
            hovertemplate="%{y} %{x}<br>flagged: %{customdata[0]:,.3f} ms, baseline %{customdata[1]:,.3f} ms,"
                          " shift +%{customdata[2]:,.3f} ms<extra></extra>"))
    fig.update_layout(yaxis={"type": "category", "title": "follower → leader"}, showlegend=bool(flagged),
                      legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"})
    return _div(fig, "pair-heatmap", 140 + 18 * len(labels))


def decomposition(summary_rows: Sequence[dict[str, Any]]) -> str:
    """Per broker x kind, on two axes so the wait (hundreds of ms) never dwarfs the true local
    latency (a few ms), the figure the product exists for: true local p50 and p99 on the left;
    the purgatory wait p50 and the naive total p50 and p99 on the right. Percentiles are shown
    side by side, never stacked (they do not add)."""
    if not summary_rows:
        return _empty("decomposition", "latency decomposition")
    rows = sorted(summary_rows, key=lambda r: (r["kind"], natural(r["broker"])))
    x = [f"broker {r['broker']} · {r['kind']}" for r in rows]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("true local latency (ms)", "purgatory wait and naive total (ms)"))
    for col, label, color, panel in (("local_p50", "true local p50", "#d62728", 1),
                                     ("local_p99", "true local p99", "#ff9896", 1),
                                     ("wait_p50", "purgatory wait p50", "#bbbbbb", 2),
                                     ("total_p50", "naive total p50", "#555555", 2),
                                     ("total_p99", "naive total p99", "#999999", 2)):
        fig.add_trace(go.Bar(x=x, y=[r[col] for r in rows], name=label, marker_color=color,
                             hovertemplate=f"%{{x}}<br>{label}: %{{y:,.3f}} ms<extra></extra>"), row=1, col=panel)
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="ms", row=1, col=1)
    return _div(fig, "decomposition", 400)


def outcome_mix(rows: Sequence[dict[str, Any]]) -> str:
    """Fetches by outcome per window, all brokers."""
    if not rows:
        return _empty("outcome-mix", "outcome mix over time")
    by_window: dict[Any, dict[str, int]] = {}
    for r in rows:
        m = by_window.setdefault(_utc(r["window_start"]), dict.fromkeys(OUTCOME_COLORS, 0))
        for o in OUTCOME_COLORS:
            m[o] += r[o] or 0
    windows = sorted(by_window)
    fig = go.Figure([go.Bar(x=windows, y=[by_window[w][o] for w in windows], name=o, marker_color=color,
                            hovertemplate=f"%{{x}}<br>{o}: %{{y:,d}} fetches<extra></extra>")
                     for o, color in OUTCOME_COLORS.items() if any(by_window[w][o] for w in windows)])
    fig.update_layout(barmode="stack", yaxis={"title": "fetches"}, bargap=0.05)
    return _div(fig, "outcome-mix", 340)


def record_latency(rows: Sequence[dict[str, Any]], sla_ms: float) -> str:
    """Record latency (KIP-489) per topic, against the SLA: of every partition x client series of
    a topic, the median, p90 and worst p99 (a fleet has tens of thousands of series: one point
    each would weigh megabytes and hide the shape)."""
    if not rows:
        return _empty("record-latency", "record latency per topic", "no consumer fetch returned records")
    by_topic: dict[str, list[float]] = {}
    for r in rows:
        if r["p99_ms"] is not None:
            by_topic.setdefault(r["topic"], []).append(r["p99_ms"])
    topics = sorted(by_topic, key=natural)
    stats = {tp: sorted(v) for tp, v in by_topic.items()}
    fig = go.Figure()
    for label, q, color, symbol in (("median series p99", 0.5, "#9467bd", "circle"),
                                    ("p90 series p99", 0.9, "#c5b0d5", "diamond"),
                                    ("worst series p99", 1.0, "#d62728", "triangle-up")):
        fig.add_trace(go.Scatter(
            x=topics, y=[stats[tp][min(len(stats[tp]) - 1, int(q * len(stats[tp])))] for tp in topics],
            mode="markers", name=label,
            marker={"color": color, "size": 9, "symbol": symbol},
            customdata=[[len(stats[tp]), sum(1 for v in stats[tp] if v > sla_ms)] for tp in topics],
            hovertemplate=f"%{{x}}<br>{label}: %{{y:,.3f}} ms<br>%{{customdata[0]:,d}} partition &#215; client series, "
                          "%{customdata[1]:,d} over the SLA<extra></extra>"))
    fig.add_hline(y=sla_ms, line={"color": "#d62728", "dash": "dash"}, annotation_text=f"SLA {sla_ms:g} ms",
                  annotation_position="top left", annotation_font_color="#d62728")
    fig.update_layout(xaxis={"type": "category", "categoryarray": topics},
                      yaxis={"title": "record latency p99",
                             **log_axis([*(v for s in stats.values() for v in (s[0], s[-1])), sla_ms])})
    return _div(fig, "record-latency", 380)


# What a column means, shown on its header (hover) and under tables that have it.
COLUMN_NOTES = {
    "data_efficiency": "share of fetches that brought records back (long-poll efficiency)",
    "wait_share": "share of fetch time spent parked in purgatory",
    "baseline_ms": "the pair's usual true local p50: the median of its window medians",
    "shift_ms": "how far this window's p50 is above the baseline",
    "sla_breaches": "record latencies over the SLA",
}


def table(title: str, rows: Sequence[dict[str, Any]], columns: Sequence[str], limit: int = 50,
          source: str | None = None) -> str:
    """A table of the first ``limit`` rows, saying how many it shows and where the rest are
    (``source``: the table under the report's ``tables/``), with its columns explained."""
    if not rows:
        return f"<h3>{_esc(title)}</h3><p class='empty'>none</p>"
    head = "".join(f"<th title='{_esc(COLUMN_NOTES[c])}'>{_esc(c)}</th>" if c in COLUMN_NOTES
                   else f"<th>{_esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows[:limit])
    shown = (f"showing the first {limit:,} of {len(rows):,} rows" if len(rows) > limit
             else f"{len(rows):,} row{'s' if len(rows) != 1 else ''}")
    if source is not None and len(rows) > limit:
        shown += f"; every row is in tables/{_esc(source)}/"
    notes = "; ".join(f"<b>{_esc(c)}</b>: {_esc(COLUMN_NOTES[c])}" for c in columns if c in COLUMN_NOTES)
    return (f"<h3>{_esc(title)}</h3><p class='sub'>{shown}{'. ' + notes if notes else ''}</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def _median(vs: Sequence[float]) -> float:
    s = sorted(vs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def findings(summary: dict[str, Any], t: dict[str, list[dict[str, Any]]]) -> list[str]:
    """What a reader wants first, in words and numbers: which pair, broker or client is slow, by
    how much against its own baseline, when, and how sure the figures are."""
    out: list[str] = []
    flagged = sorted(summary["flagged_pairs"], key=lambda r: -(r["shift_ms"] or 0.0))
    by_pair: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in flagged:
        by_pair.setdefault((str(r["follower"]), str(r["leader"])), []).append(r)
    for (f, lead), rs in list(by_pair.items())[:3]:
        worst = rs[0]
        times = sorted(_utc(r["window_start"]) for r in rs)
        ratio = worst["local_p50"] / worst["baseline_ms"] if worst["baseline_ms"] else math.inf
        out.append(f"<b>Follower {_esc(f)} &#8594; leader {_esc(lead)}</b> is slow: true local p50 "
                   f"{worst['local_p50']:,.1f} ms against its baseline of {worst['baseline_ms']:,.2f} ms "
                   f"({ratio:,.1f}&#215;, +{worst['shift_ms']:,.1f} ms) in {len(rs)} window(s), "
                   f"{_esc(times[0])} to {_esc(times[-1])} UTC.")
    for kind in sorted({r["kind"] for r in t["summary"]}):
        rows = [r for r in t["summary"] if r["kind"] == kind and r.get("local_p99") is not None]
        if len(rows) < 2:
            continue
        worst = max(rows, key=lambda r: r["local_p99"])
        others = _median([r["local_p99"] for r in rows if r is not worst])
        if others > 0 and worst["local_p99"] > 1.5 * others:
            out.append(f"<b>Broker {_esc(worst['broker'])}</b> serves {_esc(kind)} fetches slowest: true local "
                       f"p99 {worst['local_p99']:,.2f} ms, {worst['local_p99'] / others:,.1f}&#215; the other "
                       f"brokers' median ({others:,.2f} ms).")
    fetches = sum(r["fetches"] or 0 for r in t["outcome_mix"])
    unknown = sum(r.get("unknown") or 0 for r in t["outcome_mix"])
    if fetches:
        out.append(f"{fetches:,} fetches; {unknown / fetches:.1%} of them with a wait fetchlat could not infer "
                   "(counted as 0: their local time is an upper bound). Percentiles are within 1 % of the exact "
                   "value.")
    if not by_pair:
        out.insert(0, "No follower &#8594; leader pair shifted against its own baseline.")
    return out


def render(summary: dict[str, Any], t: dict[str, list[dict[str, Any]]]) -> str:
    flagged = summary["flagged_pairs"]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>fetchlat report</title><style>",
        "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}",
        "h1{margin-bottom:0}.sub{color:#666;margin-top:4px}table{border-collapse:collapse;margin:8px 0 24px}",
        "td,th{border:1px solid #ddd;padding:3px 8px;font-size:13px;text-align:right}th{background:#f4f4f4}",
        ".chart{margin:8px 0 24px;border:1px solid #eee}.chart.empty p{color:#666;padding:12px}",
        ".flag{color:#b00;font-weight:600}.findings{background:#fff8f0;border:1px solid #f0d8c0;padding:4px 16px}",
        "</style>",
        "</head><body>",
        "<h1>fetchlat report</h1>",
        "<section class='findings'><h2>Findings</h2><ul>"
        + "".join(f"<li>{line}</li>" for line in findings(summary, t)) + "</ul></section>",
        table("Flagged windows", flagged, ["follower", "leader", "window_start", "local_p50", "baseline_ms",
                                           "shift_ms"], source="pair_latency"),
        f"<p class='sub'>{summary['exchanges_read']:,} exchanges from {_esc(', '.join(summary['inputs']))} · "
        f"window {_esc(summary['window'])} · generated {_esc(summary['generated_at'])} · percentiles within 1% "
        "of the exact value · hover a point for its value, click a legend entry to hide it</p>",
        "<h2>Naive total vs true local, per broker, over time</h2>",
        broker_timeline(t.get("broker_timeline", [])),
        "<h2>Follower &#8594; leader true fetch latency</h2>",
        pair_heatmap(t["pair_latency"]),
        (f"<p class='flag'>{len(flagged)} window(s) flagged (listed at the top)</p>" if flagged
         else "<p>No pair shifted.</p>"),
        "<h2>Latency decomposition per broker</h2>",
        decomposition(t["summary"]),
        table("Headline percentiles (ms)", t["summary"],
              ["broker", "kind", "fetches", "total_p50", "total_p99", "wait_p50", "local_p50", "local_p99",
               "local_p999", "e2e_p99"]),
        "<h2>Outcome mix over time</h2>",
        outcome_mix(t["outcome_mix"]),
        table("Long-poll efficiency", t["outcome_mix"],
              ["window_start", "broker", "kind", "fetches", "expired", "woken", "immediate", "data_efficiency",
               "wait_share"], limit=30, source="outcome_mix"),
        "<h2>Record latency (KIP-489) per topic</h2>",
        record_latency(t["record_latency"], summary["record_latency_sla_ms"]),
        table("Slowest partitions", t["slowest_partitions"],
              ["topic", "partition", "client_id", "samples", "p50_ms", "p99_ms", "max_ms", "avg_ms", "sla_breaches"]),
        "<h2>Produce and replication</h2>",
        table("Produce latency by acks", t["produce_latency"],
              ["broker", "acks", "requests", "records", "p50_ms", "p99_ms", "max_ms"]),
        table("Replication latency per follower", t["replication_latency"],
              ["broker", "follower", "samples", "p50_ms", "p99_ms", "max_ms"]),
        table("Slowest clients (true local p99)", t["slowest_clients"],
              ["client_id", "kind", "fetches", "local_p50", "local_p99"]),
        f"<script id='plotly-gz' type='application/octet-stream'>{_plotly_gz_b64()}</script>",
        LOADER.replace("CONFIG_JSON", json.dumps(CONFIG)),
        "</body></html>",
    ]
    return "\n".join(parts)
