"""The self-contained HTML report: summary, per-category length histograms (inline SVG), the anomaly
table and decoded excerpts of flagged samples. No scripts, no network, no external assets."""

from __future__ import annotations

import html
import math
from typing import Any

from .report import SEVERITY_RANK, Report

PART_COLOURS = {"prompt": "#6b8fd6", "thinking": "#2bb3a3", "response": "#e0913a"}
SEGMENT_COLOURS = {
    "system": "#f3e5ff",
    "user": "#e3f6e3",
    "assistant": "#e3ecff",
    "tool": "#fff6d6",
    "header": "#d9d9d9",
    "thinking": "#dff7f7",
    "response": "#ffffff",
    "tool_call": "#ffe9b3",
    "other": "#f2f2f2",
}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d1d1f;max-width:1200px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#555}.verdict{display:inline-block;padding:2px 10px;border-radius:4px;font-weight:600;color:#fff}
.pass{background:#2e8b57}.fail{background:#c0392b}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:4px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}.sev-error{color:#c0392b;font-weight:600}.sev-warning{color:#b7791f}
.sev-info{color:#2b6cb0}.grid{display:flex;flex-wrap:wrap;gap:14px}.card{border:1px solid #e3e3e3;border-radius:6px;
padding:8px}.card h3{font-size:13px;margin:0 0 4px}.legend span{display:inline-block;margin-right:12px}
.sw{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.seq{font-family:ui-monospace,Menlo,Consolas,monospace;white-space:pre-wrap;font-size:12.5px;border:1px solid #e3e3e3;
border-radius:4px;padding:6px;margin:4px 0 12px}.seg{border-radius:2px}.mark{outline:2px solid #c0392b}
"""


def _e(x: Any) -> str:
    return html.escape(str(x))


def histogram_svg(category: str, lengths: dict[str, Any], width: int = 360, height: int = 150) -> str:
    """Grouped bars over log2 length bins for prompt / thinking / response."""
    used = sorted(
        e
        for part in PART_COLOURS
        for e, c in zip(lengths[part]["histogram"]["edges"], lengths[part]["histogram"]["counts"], strict=True)
        if c
    )
    if not used:
        return ""
    every = sorted({e for part in PART_COLOURS for e in lengths[part]["histogram"]["edges"]})
    edges = [e for e in every if used[0] <= e <= used[-1]]  # the occupied range of bins
    peak = (
        max(
            (c for part in PART_COLOURS for c in lengths[part]["histogram"]["counts"]),
            default=1,
        )
        or 1
    )
    left, bottom = 34, 22
    plot_w, plot_h = width - left - 6, height - bottom - 8
    slot = plot_w / len(edges)
    bar = slot / (len(PART_COLOURS) + 1)
    out = [
        f'<svg class="hist" data-category="{_e(category)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="length histogram of {_e(category)}">',
        f'<line x1="{left}" y1="{8 + plot_h}" x2="{width - 6}" y2="{8 + plot_h}" stroke="#999"/>',
        f'<text x="2" y="14" font-size="10" fill="#555">{peak}</text>',
    ]
    for k, part in enumerate(PART_COLOURS):
        h = dict(zip(lengths[part]["histogram"]["edges"], lengths[part]["histogram"]["counts"], strict=True))
        for i, edge in enumerate(edges):
            c = h.get(edge, 0)
            if not c:
                continue
            bh = max(1.0, plot_h * c / peak)
            x = left + i * slot + (k + 0.5) * bar
            out.append(
                f'<rect x="{x:.1f}" y="{8 + plot_h - bh:.1f}" width="{bar:.1f}" height="{bh:.1f}" '
                f'fill="{PART_COLOURS[part]}"><title>{part} [{edge}, {2 * edge or 1}): {c}</title></rect>'
            )
    step = max(1, math.ceil(len(edges) / 8))
    for i in range(0, len(edges), step):
        label = edges[i] if edges[i] < 1000 else f"{edges[i] // 1000}k"
        out.append(f'<text x="{left + i * slot + 2:.1f}" y="{height - 6}" font-size="9" fill="#555">{label}</text>')
    out.append("</svg>")
    return "".join(out)


def _segments_html(entry: dict[str, Any]) -> str:
    parts = []
    pos = entry["position"]
    for seg in entry.get("segments", []):
        colour = SEGMENT_COLOURS.get(seg["kind"], "#fff")
        cls = "seg mark" if seg["start"] <= pos < seg["end"] else "seg"
        parts.append(
            f'<span class="{cls}" title="{_e(seg["kind"])} {seg["start"]}:{seg["end"]}" '
            f'style="background:{colour}">{_e(seg["text"])}</span>'
        )
    if not parts and entry.get("excerpt"):
        ex = entry["excerpt"]
        parts = [_e(ex.get("before", "")), f'<span class="mark">{_e(ex.get("at", ""))}</span>', _e(ex.get("after", ""))]
    if not parts:
        parts = [_e(entry.get("first", "")), " … ", _e(entry.get("last", ""))]
    return "".join(parts)


def render(report: Report, fail_on: str = "error", policy: Any = None) -> str:
    d = report.data
    failures = report.failures(fail_on, policy)
    verdict = (
        f'<span class="verdict fail">FAIL</span> {len(failures)} code(s) at or above {_e(fail_on)}'
        if failures
        else f'<span class="verdict pass">PASS</span> nothing at or above {_e(fail_on)}'
    )
    body = [
        f"<h1>tokscan report</h1><div class='meta'>tokscan {_e(d['tool']['version'])} · profile "
        f"<b>{_e(d['profile']['name'])}</b> · {len(d['inputs'])} input(s) · {report.n_samples:,} samples · "
        f"{report.n_tokens:,} tokens</div><p>{verdict}</p>",
        "<h2>Length distributions per category</h2><div class='legend'>"
        + "".join(f"<span><i class='sw' style='background:{c}'></i>{p}</span>" for p, c in PART_COLOURS.items())
        + " (log2 length bins; hover a bar for its count)</div><div class='grid'>",
    ]
    for name, c in report.categories.items():
        body.append(
            f"<div class='card'><h3>{_e(name)} · {c['samples']:,} samples · median total "
            f"{c['lengths']['total']['median']:,.0f}</h3>{histogram_svg(name, c['lengths'])}</div>"
        )
    body.append("</div>")
    rows = sorted(
        ((code, a) for code, a in report.anomalies.items() if a["count"]),
        key=lambda ca: (-SEVERITY_RANK[ca[1]["severity"]], -ca[1]["count"]),
    )
    body.append(
        "<h2>Anomalies</h2><table id='anomalies'><tr><th>code</th><th>severity</th><th>samples</th>"
        "<th>share</th><th>examples</th><th>meaning</th></tr>"
    )
    for code, a in rows:
        share = 100 * a["count"] / max(1, report.n_samples)
        body.append(
            f"<tr><td>{_e(code)}</td><td class='sev-{a['severity']}'>{a['severity']}</td><td>{a['count']:,}</td>"
            f"<td>{share:.2f}%</td><td>{_e(', '.join(report.examples(code)))}</td>"
            f"<td style='text-align:left'>{_e(a['description'])}</td></tr>"
        )
    if not rows:
        body.append("<tr><td colspan='6'>No anomalies found.</td></tr>")
    body.append("</table>")
    decoded = d.get("decoded")
    if decoded:
        body.append(
            "<h2>Decoded excerpts</h2><div class='legend'>"
            + "".join(
                f"<span><i class='sw' style='background:{c};border:1px solid #ccc'></i>{k}</span>"
                for k, c in SEGMENT_COLOURS.items()
            )
            + "</div>"
        )
        for code, entries in decoded.items():
            for e in entries:
                who = e["sample_id"] if e["sample_id"] is not None else f"#{e['row']}"
                where = f" at token {e['position']}" if e["position"] is not None else ""
                body.append(f"<h3>{_e(code)} · {_e(who)}{where}</h3><div class='seq'>{_segments_html(e)}</div>")
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>tokscan report</title>"
        f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )
