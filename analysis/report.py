"""The HTML report: one self-contained page rendered from the small tables the job collected.
Pure: data in, text out.

Charts are plotly figures (plotly.py builds them, plotly.js draws them). Plotly, not Vega-Lite
through altair: hover labels with the exact value come with every trace, the heatmap with
marked cells and the date axes need no extra grammar, and plotly.js is one file that plotly.py
ships (``get_plotlyjs``), inlined once, so the page opens with no network; altair's inline
mode needs three bundles from a second package (vl-convert). The tables below the charts are
plain HTML."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from fetchlat.metrics.vocabulary import Outcome
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

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
    return _esc(v)


def _utc(iso: str) -> str:
    """A window start as plotly reads a date (it ignores offsets): ``YYYY-MM-DD HH:MM:SS``, UTC."""
    return iso[:19].replace("T", " ")


def _div(fig: go.Figure, chart_id: str, height: int) -> str:
    fig.update_layout(**LAYOUT, height=height)
    out: str = fig.to_html(full_html=False, include_plotlyjs=False, div_id=chart_id, config=CONFIG)
    return f'<section class="chart" data-chart="{chart_id}">{out}</section>'


def _empty(chart_id: str, title: str, why: str = "no data") -> str:
    return f'<section class="chart empty" data-chart="{chart_id}"><p>{_esc(title)}: {_esc(why)}</p></section>'


def broker_timeline(rows: Sequence[dict[str, Any]]) -> str:
    """Naive total vs true local fetch latency per broker over time, p50 and p99, one panel per kind
    (log scale)."""
    kinds = sorted({r["kind"] for r in rows})
    if not kinds:
        return _empty("broker-timeline", "naive total vs true local per broker")
    fig = make_subplots(rows=len(kinds), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[f"{k} fetches (ms, log scale)" for k in kinds])
    brokers = sorted({r["broker"] for r in rows}, key=lambda b: (len(b), b))
    for row, kind in enumerate(kinds, start=1):
        for i, broker in enumerate(brokers):
            pts = sorted((r for r in rows if r["kind"] == kind and r["broker"] == broker),
                         key=lambda r: r["window_start"])
            if not pts:
                continue
            color = PALETTE[i % len(PALETTE)]
            for col, label, dash, width in (("local_p50", "true local p50", "solid", 2),
                                            ("local_p99", "true local p99", "dot", 1.5),
                                            ("total_p50", "naive total p50", "dash", 1),
                                            ("total_p99", "naive total p99", "dashdot", 1)):
                fig.add_trace(go.Scatter(
                    x=[_utc(r["window_start"]) for r in pts], y=[r[col] for r in pts], mode="lines+markers",
                    name=f"broker {broker} {label}", legendgroup=f"b{broker}", showlegend=row == 1,
                    line={"color": color, "dash": dash, "width": width}, marker={"size": 4},
                    hovertemplate=f"broker {broker} · {kind}<br>{label}: %{{y:.3f}} ms<br>%{{x}}<extra></extra>"),
                    row=row, col=1)
    fig.update_xaxes(title_text="window start (UTC)", row=len(kinds), col=1)
    fig.update_yaxes(type="log")  # the wait makes naive total 100x true local: both stay readable
    return _div(fig, "broker-timeline", 300 * len(kinds) + 80)


def pair_heatmap(cells: Sequence[dict[str, Any]]) -> str:
    """Follower -> leader pairs by window: colour = median true local ms; flagged windows marked."""
    if not cells:
        return _empty("pair-heatmap", "true local latency per broker pair", "no follower fetches")
    pairs = sorted({(str(c["follower"]), str(c["leader"])) for c in cells})
    labels = [f"{f} → {lead}" for f, lead in pairs]
    windows = sorted({_utc(c["window_start"]) for c in cells})
    index = {(str(c["follower"]), str(c["leader"]), _utc(c["window_start"])): c for c in cells}
    z = [[(index[(f, lead, w)]["local_p50"] if (f, lead, w) in index else None) for w in windows] for f, lead in pairs]
    fig = go.Figure(go.Heatmap(
        x=windows, y=labels, z=z, colorscale="YlOrRd", colorbar={"title": "ms"}, name="median true local",
        hovertemplate="%{y}<br>%{x}<br>median true local: %{z:.3f} ms<extra></extra>"))
    flagged = [c for c in cells if c.get("flagged")]
    if flagged:
        fig.add_trace(go.Scatter(
            x=[_utc(c["window_start"]) for c in flagged], y=[f"{c['follower']} → {c['leader']}" for c in flagged],
            mode="markers", name="flagged shift", marker={"symbol": "square-open", "size": 16, "color": "#000",
                                                           "line": {"width": 2}},
            customdata=[[c["local_p50"], c["baseline_ms"], c["shift_ms"]] for c in flagged],
            hovertemplate="%{y} %{x}<br>flagged: %{customdata[0]:.3f} ms, baseline %{customdata[1]:.3f} ms,"
                          " shift +%{customdata[2]:.3f} ms<extra></extra>"))
    fig.update_layout(yaxis={"type": "category", "title": "follower → leader"}, showlegend=bool(flagged))
    return _div(fig, "pair-heatmap", 120 + 28 * len(labels))


def decomposition(summary_rows: Sequence[dict[str, Any]]) -> str:
    """Per broker x kind: p50 purgatory wait + p50 true local (stacked), with the naive total's p50 and p99."""
    if not summary_rows:
        return _empty("decomposition", "latency decomposition")
    rows = sorted(summary_rows, key=lambda r: (r["kind"], len(r["broker"]), r["broker"]))
    x = [f"broker {r['broker']} · {r['kind']}" for r in rows]
    fig = go.Figure()
    for col, label, color in (("wait_p50", "purgatory wait p50", "#bbbbbb"), ("local_p50", "true local p50", "#d62728"),
                              ("local_p99", "true local p99", "#ff9896")):
        if col == "local_p99":
            fig.add_trace(go.Scatter(x=x, y=[r[col] for r in rows], mode="markers", name=label,
                                     marker={"symbol": "diamond", "size": 10, "color": color},
                                     hovertemplate=f"%{{x}}<br>{label}: %{{y:.3f}} ms<extra></extra>"))
        else:
            fig.add_trace(go.Bar(x=x, y=[r[col] for r in rows], name=label, marker_color=color,
                                 hovertemplate=f"%{{x}}<br>{label}: %{{y:.3f}} ms<extra></extra>"))
    fig.add_trace(go.Scatter(x=x, y=[r["total_p50"] for r in rows], mode="markers", name="naive total p50",
                             marker={"symbol": "line-ew-open", "size": 24, "color": "#222"},
                             hovertemplate="%{x}<br>naive total p50: %{y:.3f} ms<extra></extra>"))
    fig.update_layout(barmode="stack", yaxis={"title": "ms"})
    return _div(fig, "decomposition", 380)


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
                            hovertemplate=f"%{{x}}<br>{o}: %{{y}} fetches<extra></extra>")
                     for o, color in OUTCOME_COLORS.items() if any(by_window[w][o] for w in windows)])
    fig.update_layout(barmode="stack", yaxis={"title": "fetches"}, bargap=0.05)
    return _div(fig, "outcome-mix", 340)


def record_latency(rows: Sequence[dict[str, Any]], sla_ms: float) -> str:
    """Record latency (KIP-489) p99 of every partition x client, per topic, against the SLA."""
    if not rows:
        return _empty("record-latency", "record latency per topic", "no consumer fetch returned records")
    topics = sorted({r["topic"] for r in rows})
    fig = go.Figure()
    for breach in (False, True):
        pts = [r for r in rows if (r["p99_ms"] > sla_ms) == breach]
        if pts:
            fig.add_trace(go.Scatter(
                x=[r["topic"] for r in pts], y=[r["p99_ms"] for r in pts], mode="markers",
                marker={"color": "#d62728" if breach else "#9467bd", "size": 6, "opacity": 0.7},
                name="p99 over the SLA" if breach else "p99 within the SLA",
                customdata=[[r["partition"], r["client_id"] or "", r["samples"]] for r in pts],
                hovertemplate="%{x}[%{customdata[0]}] %{customdata[1]}<br>record latency p99: %{y:.3f} ms"
                              "<br>%{customdata[2]} samples<extra></extra>"))
    fig.add_hline(y=sla_ms, line={"color": "#d62728", "dash": "dash"}, annotation_text=f"SLA {sla_ms:g} ms")
    fig.update_layout(xaxis={"type": "category", "categoryarray": topics}, yaxis={"title": "ms", "type": "log"})
    return _div(fig, "record-latency", 380)


def table(title: str, rows: Sequence[dict[str, Any]], columns: Sequence[str], limit: int = 50) -> str:
    if not rows:
        return f"<h3>{_esc(title)}</h3><p class='empty'>none</p>"
    head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows[:limit])
    return f"<h3>{_esc(title)}</h3><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render(summary: dict[str, Any], t: dict[str, list[dict[str, Any]]]) -> str:
    flagged = summary["flagged_pairs"]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>fetchlat report</title><style>",
        "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}",
        "h1{margin-bottom:0}.sub{color:#666;margin-top:4px}table{border-collapse:collapse;margin:8px 0 24px}",
        "td,th{border:1px solid #ddd;padding:3px 8px;font-size:13px;text-align:right}th{background:#f4f4f4}",
        ".chart{margin:8px 0 24px;border:1px solid #eee}.chart.empty p{color:#666;padding:12px}",
        ".flag{color:#b00;font-weight:600}</style>",
        f"<script>{get_plotlyjs()}</script></head><body>",
        "<h1>fetchlat report</h1>",
        f"<p class='sub'>{summary['exchanges_read']:,} exchanges from {_esc(', '.join(summary['inputs']))} · "
        f"window {_esc(summary['window'])} · generated {_esc(summary['generated_at'])} · percentiles within 1% "
        "of the exact value · hover a point for its value, click a legend entry to hide it</p>",
        "<h2>Naive total vs true local, per broker, over time</h2>",
        broker_timeline(t.get("broker_timeline", [])),
        "<h2>Follower &#8594; leader true fetch latency</h2>",
        pair_heatmap(t["pair_latency"]),
        (f"<p class='flag'>{len(flagged)} window(s) flagged</p>" if flagged else "<p>No pair shifted.</p>"),
        table("Flagged windows", flagged, ["follower", "leader", "window_start", "local_p50", "baseline_ms",
                                           "shift_ms"]),
        "<h2>Latency decomposition per broker</h2>",
        decomposition(t["summary"]),
        table("Headline percentiles (ms)", t["summary"],
              ["broker", "kind", "fetches", "total_p50", "total_p99", "wait_p50", "local_p50", "local_p99",
               "local_p999", "e2e_p99"]),
        "<h2>Outcome mix over time</h2>",
        outcome_mix(t["outcome_mix"]),
        table("Long-poll efficiency", t["outcome_mix"],
              ["window_start", "broker", "kind", "fetches", "expired", "woken", "immediate", "data_efficiency",
               "wait_share"], limit=30),
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
        "</body></html>",
    ]
    return "\n".join(parts)
