"""The HTML report: one self-contained page (inline SVG charts, no scripts, no network),
rendered from the small tables the job collected. Pure: data in, text out."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from fetchlat.metrics.vocabulary import Outcome

PALETTE = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
OUTCOME_COLORS = {Outcome.IMMEDIATE: "#2ca02c", Outcome.WOKEN: "#1f77b4", Outcome.EXPIRED: "#bbbbbb",
                  Outcome.ERROR: "#d62728", Outcome.UNKNOWN: "#ff7f0e"}


def _empty(title: str, width: int, why: str = "no data") -> str:
    return f'<svg class="chart empty" width="{width}" height="60"><text x="10" y="30">{_esc(title)}: {why}</text></svg>'


def _esc(v: Any) -> str:
    return html.escape(str(v))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.1f}"
    return _esc(v)


def line_chart(title: str, series: Mapping[str, Sequence[tuple[float, float]]], y_label: str,
               width: int = 900, height: int = 280) -> str:
    """Lines over a numeric x (epoch seconds); a chart with no points says so."""
    pts = [p for s in series.values() for p in s]
    if not pts:
        return _empty(title, width)
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y1 = max(p[1] for p in pts) * 1.1 or 1.0
    pad_l, pad_b, pad_t = 60, 30, 30
    w, h = width - pad_l - 10, height - pad_b - pad_t
    def sx(x: float) -> float:
        return pad_l + (x - x0) / (x1 - x0) * w if x1 > x0 else pad_l + w / 2

    def sy(y: float) -> float:
        return pad_t + h - y / y1 * h

    out = [f'<svg class="chart" width="{width}" height="{height}" role="img" aria-label="{_esc(title)}">',
           f'<text x="{pad_l}" y="18" class="title">{_esc(title)}</text>',
           f'<line x1="{pad_l}" y1="{pad_t + h}" x2="{pad_l + w}" y2="{pad_t + h}" class="axis"/>',
           f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{pad_t + h}" class="axis"/>']
    for i in range(5):
        yv = y1 * i / 4
        out.append(f'<text x="{pad_l - 6}" y="{sy(yv) + 4:.1f}" text-anchor="end" class="tick">{yv:.1f}</text>')
    out.append(f'<text x="12" y="{pad_t + h / 2}" class="tick" transform="rotate(-90 12 {pad_t + h / 2})">'
               f'{_esc(y_label)}</text>')
    for i, (name, s) in enumerate(series.items()):
        color = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(s))
        out.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="2" points="{path}"/>')
        for x, y in s:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}"/>')
        out.append(f'<text x="{pad_l + 10 + 190 * i}" y="{height - 6}" fill="{color}" class="legend">'
                   f'&#9632; {_esc(name)}</text>')
    out.append("</svg>")
    return "".join(out)


def stacked_bars(title: str, rows: Sequence[tuple[str, dict[str, float]]], colors: dict[str, str], unit: str,
                 width: int = 900) -> str:
    """Horizontal stacked bars, one row per label."""
    if not rows:
        return _empty(title, width)
    bar_h, gap, pad_l, pad_t = 22, 8, 220, 30
    height = pad_t + len(rows) * (bar_h + gap) + 30
    top = max(sum(v.values()) for _, v in rows) or 1.0
    w = width - pad_l - 80
    out = [f'<svg class="chart" width="{width}" height="{height}" role="img" aria-label="{_esc(title)}">',
           f'<text x="10" y="18" class="title">{_esc(title)}</text>']
    for i, (label, parts) in enumerate(rows):
        y = pad_t + i * (bar_h + gap)
        out.append(f'<text x="{pad_l - 8}" y="{y + 15}" text-anchor="end" class="tick">{_esc(label)}</text>')
        x = float(pad_l)
        for key, value in parts.items():
            bw = value / top * w
            if bw > 0:
                out.append(f'<rect class="bar" x="{x:.1f}" y="{y}" width="{bw:.1f}" height="{bar_h}" '
                           f'fill="{colors.get(key, "#888")}"><title>{_esc(key)}: {value:.3f} {unit}</title></rect>')
            x += bw
        out.append(f'<text x="{x + 6:.1f}" y="{y + 15}" class="tick">{sum(parts.values()):.2f} {unit}</text>')
    for j, (key, color) in enumerate(colors.items()):
        out.append(f'<text x="{pad_l + 130 * j}" y="{height - 8}" fill="{color}" class="legend">'
                   f'&#9632; {_esc(key)}</text>')
    out.append("</svg>")
    return "".join(out)


def heatmap(title: str, cells: Sequence[dict[str, Any]], width: int = 900) -> str:
    """Follower -> leader pairs by window: colour = median local ms; flagged windows outlined."""
    if not cells:
        return _empty(title, width, "no follower fetches")
    pairs = sorted({(str(c["follower"]), str(c["leader"])) for c in cells})
    windows = sorted({str(c["window_start"]) for c in cells})
    pad_l, pad_t = 140, 30
    cw = max(4.0, (width - pad_l - 10) / max(1, len(windows)))
    ch = 20
    height = pad_t + len(pairs) * ch + 40
    top = max(float(c["local_p50"] or 0) for c in cells) or 1.0
    out = [f'<svg class="chart" width="{width}" height="{height}" role="img" aria-label="{_esc(title)}">',
           f'<text x="10" y="18" class="title">{_esc(title)}</text>']
    for i, (fol, lead) in enumerate(pairs):
        out.append(f'<text x="{pad_l - 6}" y="{pad_t + i * ch + 14}" text-anchor="end" class="tick">'
                   f'{_esc(fol)} &#8594; {_esc(lead)}</text>')
    index = {(str(c["follower"]), str(c["leader"]), str(c["window_start"])): c for c in cells}
    for i, (fol, lead) in enumerate(pairs):
        for j, win in enumerate(windows):
            c = index.get((fol, lead, win))
            if c is None:
                continue
            v = float(c["local_p50"] or 0) / top
            color = f"rgb({int(255 * v)},{int(80 + 100 * (1 - v))},{int(200 * (1 - v))})"
            stroke = ' stroke="#000" stroke-width="2"' if c.get("flagged") else ""
            note = f" (flagged: +{c['shift_ms']:.1f} ms)" if c.get("flagged") else ""
            out.append(f'<rect class="cell{" flagged" if c.get("flagged") else ""}" x="{pad_l + j * cw:.1f}" '
                       f'y="{pad_t + i * ch}" width="{cw:.1f}" height="{ch - 2}" fill="{color}"{stroke}>'
                       f'<title>{_esc(fol)}&#8594;{_esc(lead)} {_esc(win)}: {float(c["local_p50"]):.2f} ms'
                       f'{note}</title></rect>')
    out.append(f'<text x="{pad_l}" y="{height - 10}" class="legend">colour: median true local fetch latency '
               f'(0 - {top:.1f} ms); outlined: flagged shift</text></svg>')
    return "".join(out)


def table(title: str, rows: Sequence[dict[str, Any]], columns: Sequence[str], limit: int = 50) -> str:
    if not rows:
        return f"<h3>{_esc(title)}</h3><p class='empty'>none</p>"
    head = "".join(f"<th>{_esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows[:limit])
    return f"<h3>{_esc(title)}</h3><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _epoch(iso: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(iso).timestamp()


def render(summary: dict[str, Any], t: dict[str, list[dict[str, Any]]]) -> str:
    series: dict[str, list[tuple[float, float]]] = {}
    for r in t["timeline"]:
        x = _epoch(r["window_start"])
        series.setdefault(f"{r['kind']} naive total p50", []).append((x, r["total_p50"]))
        series.setdefault(f"{r['kind']} true local p50", []).append((x, r["local_p50"]))
    decomposition = [(f"broker {r['broker']} · {r['kind']}", {"wait": r["wait_p50"], "local": r["local_p50"]})
                     for r in t["summary"]]
    mix_rows: dict[str, dict[str, float]] = {}
    for r in t["outcome_mix"]:
        key = f"broker {r['broker']} · {r['kind']}"
        m = mix_rows.setdefault(key, dict.fromkeys(OUTCOME_COLORS, 0.0))
        for o in OUTCOME_COLORS:
            m[o] += r[o]
    rec_rows = [(f"{r['topic']}[{r['partition']}] {r['client_id'] or ''}", {"p99": r["p99_ms"]})
                for r in t["slowest_partitions"]]
    flagged = summary["flagged_pairs"]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>fetchlat report</title><style>",
        "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:960px}",
        "h1{margin-bottom:0}.sub{color:#666;margin-top:4px}table{border-collapse:collapse;margin:8px 0 24px}",
        "td,th{border:1px solid #ddd;padding:3px 8px;font-size:13px;text-align:right}th{background:#f4f4f4}",
        ".chart{display:block;margin:12px 0 28px;background:#fcfcfc;border:1px solid #eee}",
        ".title{font-weight:600;font-size:14px}.tick{font-size:11px;fill:#444}.legend{font-size:12px}",
        ".axis{stroke:#999}.flag{color:#b00;font-weight:600}</style></head><body>",
        "<h1>fetchlat report</h1>",
        f"<p class='sub'>{summary['exchanges_read']:,} exchanges from {_esc(', '.join(summary['inputs']))} · "
        f"window {_esc(summary['window'])} · generated {_esc(summary['generated_at'])}</p>",
        "<h2>Naive total vs true local, over time</h2>",
        line_chart("median fetch latency (ms)", series, "ms"),
        "<h2>Latency decomposition per broker (p50)</h2>",
        stacked_bars("purgatory wait + true local (ms)", decomposition, {"wait": "#bbbbbb", "local": "#d62728"}, "ms"),
        table("Headline percentiles (ms)", t["summary"],
              ["broker", "kind", "fetches", "total_p50", "total_p99", "wait_p50", "local_p50", "local_p99",
               "local_p999", "e2e_p99"]),
        "<h2>Follower &#8594; leader true fetch latency</h2>",
        heatmap("median local latency per broker pair and window", t["pair_latency"]),
        (f"<p class='flag'>{len(flagged)} window(s) flagged</p>" if flagged else "<p>No pair shifted.</p>"),
        table("Flagged windows", flagged, ["follower", "leader", "window_start", "local_p50", "baseline_ms",
                                           "shift_ms"]),
        "<h2>Outcome mix</h2>",
        stacked_bars("fetches by outcome", list(mix_rows.items()), OUTCOME_COLORS, "fetches"),
        table("Long-poll efficiency", t["outcome_mix"],
              ["window_start", "broker", "kind", "fetches", "expired", "woken", "immediate", "data_efficiency",
               "wait_share"], limit=30),
        "<h2>Record latency (KIP-489)</h2>",
        stacked_bars(f"slowest partitions, p99 ms (SLA {summary['record_latency_sla_ms']} ms)", rec_rows,
                     {"p99": "#9467bd"}, "ms"),
        table("Record latency per topic / partition / client", t["record_latency"],
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
