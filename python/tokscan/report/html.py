"""The self-contained HTML report: one file, no network, no external assets.

Top to bottom: the run (inputs, profile, tokenizer, command, date, duration, verdict), the per-category table,
special-token counts and rates, length distributions as small multiples on one shared pair of axes, the anomaly
table (with its policy status) and a code x category matrix, the list of flagged samples (plain HTML, filtered
and sorted by a small inline script) and the decoded excerpts with the flagged token highlighted.
"""

from __future__ import annotations

import html
import math
import os
import re
import shlex
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .. import _core
from .html_assets import CSS, JS

if TYPE_CHECKING:
    from . import PolicyValue, Report

#: A finding's severities, most severe first, and what `fail_on` accepts (the core's).
SEVERITIES: tuple[str, ...] = tuple(_core.SEVERITIES)
FAIL_ON: tuple[str, ...] = tuple(_core.FAIL_ON_LEVELS)

#: Rows of the inline flagged-sample list; the full list is always in the JSON report.
DEFAULT_MAX_ROWS = 5000
PARTS = ("prompt", "thinking", "response", "total")
PART_COLOURS = {"prompt": "#4e79a7", "thinking": "#2a9d8f", "response": "#e08a2c", "total": "#6e7781"}
SEGMENT_COLOURS = {
    "system": "#f1e6ff",
    "user": "#e2f5e4",
    "assistant": "#e3ecff",
    "tool_declaration": "#f5ecd0",
    "tool": "#fff3cc",
    "header": "#e4e7eb",
    "prefill": "#cfe8ec",
    "thinking": "#dcf3f1",
    "response": "#ffffff",
    "tool_call": "#ffe7b3",
    "arguments": "#fff0d4",
    "end_of_turn": "#d5dae0",
    "trailing": "#ffd6d6",
    "padding": "#ebebeb",
    "other": "#f2f2f2",
}
CHART_W, CHART_H, YAXIS_W, XAXIS_H = 230, 64, 40, 22


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(n: float) -> str:
    return f"{n:,.0f}"


def _short(n: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            v = n / size
            return f"{v:.0f}{unit}" if v >= 100 or v == int(v) else f"{v:.1f}{unit}"
    return f"{n:,.0f}"


def _pct(part: float, whole: float) -> str:
    share = 100.0 * part / max(1.0, whole)
    return f"{share:.2f}%" if share < 10 else f"{share:.1f}%"


def _breakable(name: str) -> str:
    """A category name that may wrap after `_`, `-`, `/` or `.` in a narrow column header."""
    return re.sub(r"([_\-/.])", r"\1<wbr>", _e(name))


def _category_th(name: str) -> str:
    """A category's column header, set vertically: names like `B2_opencodeinstruct` over narrow count columns
    would otherwise run into their neighbours (and wrapping them breaks words mid-way)."""
    return f"<th class='cat' title='{_e(name)}'><span>{_e(name)}</span></th>"


def _who(sample_id: Any, row: int) -> str:
    return str(sample_id) if sample_id is not None else f"#{row}"


# ---------------------------------------------------------------------------------------------------- run header


def _when(started: datetime | str | None) -> str:
    if started is None:
        started = datetime.now(timezone.utc)
    if isinstance(started, str):
        try:  # the core's RFC 3339 (`run.started`)
            started = datetime.fromisoformat(started.replace("Z", "+00:00"))
        except ValueError:
            return started
    return started.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _command(command: str | Sequence[str] | None) -> str:
    if command is None:
        return "<span class='note'>not recorded</span>"
    text = command if isinstance(command, str) else shlex.join(str(c) for c in command)
    return f"<pre class='cmd'>{_e(text)}</pre>"


def _unusual_glyphs(names: Iterable[str]) -> str:
    """A note naming the characters of the token names that many machines have no font for (DeepSeek's `｜` and
    `▁`), so that a name drawn with empty boxes stays legible; the page's script also draws look-alikes."""
    chars = sorted({ch for n in names for ch in n if 0xFF01 <= ord(ch) <= 0xFFEF or 0x2580 <= ord(ch) <= 0x259F})
    if not chars:
        return ""
    return " · token names use " + ", ".join(
        f"{_e(ch)} (U+{ord(ch):04X} {_e(unicodedata.name(ch, 'unnamed').lower())})" for ch in chars
    )


def _inputs(report: Report) -> str:
    inputs = report.data["inputs"]

    def line(i: Mapping[str, Any]) -> str:
        return (
            f"<code>{_e(i['path'])}</code> <span class='note'>{_e(i['format'])} · {_e(i['layout'])} · "
            f"{_num(i['samples'])} samples · {_short(i['tokens'])} tokens</span>"
        )

    if len(inputs) <= 3:
        return "<br>".join(line(i) for i in inputs)
    rows = "".join(
        f"<tr><td class='l'><code>{_e(i['path'])}</code></td><td class='l'>{_e(i['format'])}</td>"
        f"<td class='l'>{_e(i['layout'])}</td><td>{_num(i['samples'])}</td><td>{_num(i['tokens'])}</td></tr>"
        for i in inputs
    )
    return (
        "<br>".join(line(i) for i in inputs[:2])
        + f"<details><summary>all {len(inputs):,} inputs</summary><div class='scroll'><table><thead><tr>"
        "<th class='l'>path</th><th class='l'>format</th><th class='l'>layout</th><th>samples</th><th>tokens</th>"
        f"</tr></thead><tbody>{rows}</tbody></table></div></details>"
    )


def _verdict(report: Report, fail_on: str, failures: dict[str, int]) -> str:
    if report.drifted() and not failures:
        return (
            f"<span class='verdict fail'>FAIL</span><span class='why'>{report.drifted()} drift check(s) past their "
            f"thresholds against the baseline {_e(report.data['drift']['baseline'])}</span>"
        )
    if fail_on == "never":
        return "<span class='verdict pass'>PASS</span><span class='why'>--fail-on never: the run does not fail</span>"
    if failures:
        findings = sum(failures.values())
        return (
            f"<span class='verdict fail'>FAIL</span><span class='why'>{len(failures)} code(s) at or above "
            f"<b>{_e(fail_on)}</b> fail the run · {_num(findings)} finding(s) (--fail-on {_e(fail_on)})</span>"
        )
    return (
        f"<span class='verdict pass'>PASS</span><span class='why'>nothing at or above <b>{_e(fail_on)}</b> "
        f"beyond what the policy tolerates (--fail-on {_e(fail_on)})</span>"
    )


def _header(
    report: Report,
    fail_on: str,
    failures: dict[str, int],
    command: str | Sequence[str] | None,
    tokenizer: str | os.PathLike[str] | None,
    started: datetime | str | None,
    seconds: float | None,
    decoded: bool,
) -> str:
    d = report.data
    prof = d["profile"]
    if tokenizer is not None:
        tok = f"<code>{_e(os.fspath(tokenizer))}</code>"
    else:
        tok = "<span class='note'>none: token ids are shown, special tokens by the profile's names</span>"
    if seconds is not None:
        rate = f" ({_short(report.n_tokens / seconds)} tok/s)" if seconds > 0 else ""
        took = (f"{seconds:,.2f} s" if seconds >= 1 else f"{1000 * seconds:,.1f} ms") + rate
        # The core's own time; the terminal's figure also counts loading the profile and tokenizer in Python.
        took += " <span class='note'>(the core's scan)</span>"
    else:
        took = "<span class='note'>not recorded</span>"
    found = report.found()
    by_sev = Counter(report.anomalies[c]["severity"] for c in found)
    sev_line = " · ".join(f"{by_sev[s]} {s}" for s in SEVERITIES if by_sev[s]) or "none"
    n_flagged = report.n_flagged
    kpis = [
        (_num(report.n_samples), f"samples in {len(d['inputs']):,} input(s)"),
        (_short(report.n_tokens), f"tokens ({_num(report.n_tokens)})"),
        (_num(n_flagged), f"flagged samples ({_pct(n_flagged, report.n_samples)})"),
        (str(len(found)), f"anomaly codes found ({sev_line})"),
        (str(len(report.categories)), "categories"),
    ]
    toc = [
        ("categories", "Categories"),
        ("special-tokens", "Special tokens"),
        ("lengths", "Length distributions"),
        ("anomalies", "Anomalies"),
        ("flagged", "Flagged samples"),
    ]
    if d.get("prompt_groups"):
        toc.insert(1, ("prompt-groups", "Prompt groups"))
    if d.get("contamination"):
        toc.insert(1, ("contamination", "Contamination"))
    if d.get("near_duplicates"):
        toc.insert(1, ("near-duplicates", "Near duplicates"))
    if decoded:
        toc.append(("decoded", "Decoded excerpts"))
    return (
        f"<header><div class='head'><h1>tokscan report</h1>{_verdict(report, fail_on, failures)}</div>"
        "<dl class='run'>"
        f"<dt>Inputs</dt><dd>{_inputs(report)}</dd>"
        f"<dt>Profile</dt><dd><b>{_e(prof['name'])}</b> <span class='note'>{_e(prof.get('description', ''))} · "
        f"vocab {_num(prof['vocab_size'])}{_unusual_glyphs(prof.get('special_tokens', {}))}</span></dd>"
        f"<dt>Tokenizer</dt><dd>{tok}</dd>"
        f"<dt>Command</dt><dd>{_command(command)}</dd>"
        f"<dt>Date</dt><dd>{_e(_when(started))}</dd>"
        f"<dt>Scan time</dt><dd>{took}</dd>"
        + (
            f"<dt>Engine</dt><dd>{_e(run['engine'])} · {int(run['threads'])} thread(s)"
            + (f" · profile from <code>{_e(run['profile_source'])}</code>" if run.get("profile_source") else "")
            + "</dd>"
            if (run := report.run) and "engine" in run and "threads" in run
            else ""
        )
        + f"<dt>Fail on</dt><dd>{_e(fail_on)}</dd>"
        f"<dt>tokscan</dt><dd>{_e(d['tool']['version'])} <span class='note'>report schema "
        f"{_e(d['schema_version'])}</span></dd></dl>"
        "<div class='kpis'>"
        + "".join(f"<div class='kpi'><b>{v}</b><span>{_e(k)}</span></div>" for v, k in kpis)
        + "</div><nav class='toc'>"
        + "".join(f"<a href='#{a}'>{t}</a>" for a, t in toc)
        + "</nav></header>"
    )


# ---------------------------------------------------------------------------------------------- category tables


def _flagged_by_category(report: Report) -> Counter[str]:
    return Counter(report.flagged_by_category())


def _category_table(report: Report) -> str:
    flagged = _flagged_by_category(report)
    head = (
        "<table id='category-table'><thead><tr><th class='l' rowspan='2'>category</th><th rowspan='2'>samples</th>"
        "<th rowspan='2'>tokens</th><th class='grp' colspan='3'>median length (p50)</th>"
        "<th class='grp' colspan='2'>total length</th><th class='grp' colspan='2'>flagged</th></tr>"
        "<tr><th>prompt</th><th>thinking</th><th>response</th><th>p99</th><th>max</th><th>samples</th><th>share</th>"
        "</tr></thead><tbody>"
    )
    rows = [*report.categories.items(), ("all", report.data["overall"])]
    body = []
    for i, (name, c) in enumerate(rows):
        total = i == len(rows) - 1
        L = c["lengths"]
        n_flag = report.n_flagged if total else flagged.get(name, 0)
        cat = _e(name)
        if n_flag and not total:
            cat = f"<a href='#flagged' data-cat='{_e(name)}'>{_e(name)}</a>"
        cls = " class='total'" if total else ""
        body.append(
            f"<tr{cls} data-category='{_e(name)}'><td class='l'>{cat}</td><td>{_num(c['samples'])}</td>"
            f"<td title='{_num(c['tokens'])}'>{_short(c['tokens'])}</td>"
            + "".join(f"<td>{_num(L[p]['median'])}</td>" for p in ("prompt", "thinking", "response"))
            + f"<td>{_num(L['total']['p99'])}</td><td>{_num(L['total']['max'])}</td>"
            f"<td class='{'sev error' if n_flag else 'zero'}'>{_num(n_flag)}</td>"
            f"<td class='{'' if n_flag else 'zero'}'>{_pct(n_flag, c['samples'])}</td></tr>"
        )
    return (
        "<section id='categories'><h2>Per category</h2><div class='scroll'>"
        + head
        + "".join(body)
        + "</tbody></table></div>"
        "<p class='note'>Lengths in tokens. prompt: before the completion; thinking: inside the reasoning; "
        "response: after it, up to the end of turn; total: the stored sequence.</p>"
    )


#: Line colours of the coverage curves (the corpus as a whole is drawn black).
CURVE_COLOURS = ("#0969da", "#cf222e", "#1a7f37", "#8250df", "#bf8700", "#1b7c83", "#bc4c00", "#6e7781")


def _draft_vocab(report: Report) -> str:
    """Coverage of the loss-bearing tokens by the corpus's top-K ids: a curve over K (log scale) per category
    with the requested sizes marked, the table of those sizes, and the `--check-vocab` result."""
    dv = report.data.get("draft_vocab")
    if not dv:
        return ""
    ks = dv["curve_sizes"]
    w, h, left, bottom, top = 640, 260, 44, 28, 8
    lx = [math.log2(k) for k in ks]
    span = (lx[-1] - lx[0]) or 1.0

    def x(k: float) -> float:
        return left + (math.log2(k) - lx[0]) / span * (w - left - 8)

    def y(v: float) -> float:
        return top + (1 - v) * (h - top - bottom)

    svg = [f'<svg class="curve" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="coverage">']
    for v in (0, 0.25, 0.5, 0.75, 1):
        svg.append(f'<line x1="{left}" x2="{w - 8}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#d0d7de"/>')
        svg.append(f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="10">{v:.0%}</text>')
    for k in dv["sizes"]:
        svg.append(
            f'<line x1="{x(k):.1f}" x2="{x(k):.1f}" y1="{top}" y2="{h - bottom}" stroke="#8c959f" '
            f'stroke-dasharray="3 3"/><text x="{x(k):.1f}" y="{h - bottom + 22}" text-anchor="middle" '
            f'font-size="10">K={_short(k)}</text>'
        )
    for k in ks[:: max(1, len(ks) // 6)]:
        svg.append(f'<text x="{x(k):.1f}" y="{h - bottom + 11}" text-anchor="middle" font-size="10">{_short(k)}</text>')
    series = [*dv["categories"].items(), ("all", dv["overall"])]
    legend = []
    for i, (name, c) in enumerate(series):
        colour = "#1f2328" if name == "all" and i == len(series) - 1 else CURVE_COLOURS[i % len(CURVE_COLOURS)]
        pts = " ".join(f"{x(k):.1f},{y(v):.1f}" for k, v in zip(ks, c["curve"], strict=True))
        width = 2.5 if colour == "#1f2328" else 1.5
        svg.append(
            f'<polyline data-category="{_e(name)}" fill="none" stroke="{colour}" stroke-width="{width}" '
            f'points="{pts}"/>'
        )
        legend.append(f"<span style='color:{colour}'>■</span> {_e(name)}")
    svg.append("</svg>")
    overall = dv["overall"]["coverage"]
    head = "".join(f"<th>K={k:,}</th>" for k in dv["sizes"])
    rows = []
    for name, c in series:
        cells = []
        for k in dv["sizes"]:
            share = c["coverage"][str(k)]
            low = name != "all" and c["loss_tokens"] and share < overall[str(k)] - 0.05
            cells.append(f"<td class='{'dep' if low else ''}'>{share:.1%}</td>")
        rows.append(
            f"<tr><td class='l'>{_e(name)}</td><td>{_num(c['loss_tokens'])}</td><td>{_num(c['distinct'])}</td>"
            f"{''.join(cells)}</tr>"
        )
    check = ""
    ch = dv.get("check")
    if ch:
        verdict = "<span class='dep'>stale</span>" if ch["problems"] else "fits"
        missed = ", ".join(f"{i} ({n:,})" for i, n in ch["missed"][:10]) or "none"
        check = (
            f"<p><b>Checked mapping</b>: {verdict} · {ch['draft_size']:,} draft ids over {ch['target_size']:,} target "
            f"ids · covers {ch['coverage']:.2%}, the corpus's own top {ch['draft_size']:,} {ch['best_coverage']:.2%}"
            f"{''.join('<br>' + _e(p) for p in ch['problems'])}<br>most frequent ids it misses: {missed}</p>"
        )
    return (
        "<section id='draft-vocab'><h2>Draft vocabulary</h2><p class='note'>Share of each category's loss-bearing "
        f"tokens whose id is among the corpus's K most frequent (of {dv['vocab_size']:,}); a category more than 5 "
        f"points below the corpus is marked.</p>{''.join(svg)}<p class='note'>{' · '.join(legend)}</p>"
        "<div class='scroll'><table><thead><tr><th class='l'>category</th><th>loss tokens</th><th>distinct</th>"
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{check}"
    )


def _structure(report: Report) -> str:
    """What each category agrees on: per structural feature, its values and their shares (departures marked)."""
    cats = {name: c.get("consistency") or {} for name, c in report.data["categories"].items()}
    features = sorted({f for table in cats.values() for f in table})
    if not features:
        return ""
    head = "".join(f"<th>{_breakable(f)}</th>" for f in features)
    rows = []
    for name, table in cats.items():
        cells = []
        for f in features:
            counts = table.get(f) or {}
            total = sum(counts.values())
            top = max(counts.values(), default=0)
            parts = [
                f"<span class='{'dep' if n < top else ''}'>{_e(v)} {_pct(n, total)}</span>"
                for v, n in sorted(counts.items(), key=lambda kv: -kv[1])
            ]
            if f in (report.data["categories"][name].get("splits") or ()):
                parts.insert(0, "<b>split</b>")
            cells.append(f"<td class='l'>{'<br>'.join(parts) or '–'}</td>")
        rows.append(f"<tr><td class='l'>{_e(name)}</td>{''.join(cells)}</tr>")
    return (
        "<section id='structure'><h2>Structure by category</h2><p class='note'>Share of each category's samples per "
        "structural feature; a sample off a ≥ 95 % majority of 100+ samples is flagged <code>departs_from_category"
        "</code>, a feature with no such majority is a <code>category_split</code> (marked <b>split</b>).</p>"
        "<div class='scroll'><table><thead><tr><th class='l'>category</th>"
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _pairing(report: Report) -> str:
    """One row per prompts file, and the files the scan left aside."""
    pairing = report.data.get("pairing") or []
    skipped = report.data.get("skipped") or []
    if not pairing and not skipped:
        return ""
    out = ["<section id='pairing'><h2>Prompts and inputs left aside</h2>"]
    if pairing:
        keys = [
            ("records", "records"),
            ("samples", "samples"),
            ("paired", "paired"),
            ("samples_without_record", "no record"),
            ("mismatched", "mismatched"),
            ("shifted", "shifted"),
            ("records_without_sample", "records without sample"),
            ("duplicate_ids", "duplicate ids"),
            ("unrenderable", "unrenderable"),
        ]
        head = "".join(f"<th>{_e(label)}</th>" for _k, label in keys)
        rows = []
        for p in pairing:
            cells = "".join(f"<td>{_num(p.get(k) or 0)}</td>" for k, _label in keys)
            bpt = f"{p['bytes_per_token']:.2f}" if p.get("bytes_per_token") else "–"
            shifts = "; ".join(f"{s['offset']:+d} from row {s['from_row']} to {s['to_row']}" for s in p["shifts"][:3])
            for extra in (p.get("render_error"), p.get("note")):
                if extra:
                    shifts += ("; " if shifts else "") + extra
            rows.append(
                f"<tr><td class='l'>{_e(p['path'])}</td><td class='l'>{_e(p['category'] or 'all')}</td>"
                f"<td class='l'>{_e(p['matched_by'])}</td>{cells}<td>{bpt}</td><td class='l'>{_e(shifts)}</td></tr>"
            )
        out.append(
            "<div class='scroll'><table><thead><tr><th class='l'>prompts file</th><th class='l'>category</th>"
            f"<th class='l'>paired by</th>{head}<th>bytes/token</th><th class='l'>shifts and notes</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>"
        )
    if skipped:
        items = "".join(f"<li><code>{_e(s['path'])}</code>: {_e(s['reason'])}</li>" for s in skipped[:200])
        more = f"<li>… and {len(skipped) - 200} more</li>" if len(skipped) > 200 else ""
        out.append(f"<p class='note'>Left aside by the directory scan:</p><ul>{items}{more}</ul>")
    return "".join(out)


def _prompt_groups(report: Report) -> str:
    """The prompts answered more than once or filed under two categories: the largest groups."""
    g = report.data.get("prompt_groups")
    if not g:
        return ""
    rows = []
    for grp in g["largest"]:
        first = grp["first"]
        cats = ", ".join(f"{_e(c)} {n:,}" for c, n in grp["categories"].items())
        later = ", ".join(f"<a href='#s{r}'>{r:,}</a>" for r in grp["rows"])
        more = " …" if grp["size"] - 1 > len(grp["rows"]) else ""
        rows.append(
            f"<tr><td>{first['row']:,}</td><td class='l'>{_e(_who(first['sample_id'], first['row']))}</td>"
            f"<td class='l'>{_e(first['category'])}</td><td>{grp['size']:,}</td><td>{grp['differing']:,}</td>"
            f"<td class='l'>{cats}</td><td class='l'>{later}{more}</td></tr>"
        )
    return (
        "<section id='prompt-groups'><h2>Prompts answered more than once</h2>"
        f"<p class='note'>{g['groups']:,} prompt(s) shared by {g['samples']:,} samples, {g['cross_category']:,} of "
        "them across categories: the first sample is kept, a later one with another completion is flagged "
        "<code>prompt_duplicate</code>, one in another category <code>prompt_cross_category</code>. The largest "
        "groups:</p><div class='scroll'><table><thead><tr><th>first row</th><th class='l'>sample</th>"
        "<th class='l'>category</th><th>size</th><th>other completions</th><th class='l'>categories</th>"
        f"<th class='l'>later rows</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _contamination(report: Report) -> str:
    """The benchmark files a scan looked for, and the items samples matched."""
    c = report.data.get("contamination")
    if not c:
        return ""
    rows = []
    for f in c["files"]:
        items = c["items"].get(f["path"], {})
        top = sorted(items.items(), key=lambda kv: (-kv[1], kv[0]))
        listed = ", ".join(f"{_e(k)} ×{v:,}" for k, v in top[:50]) + (" …" if len(top) > 50 else "")
        rows.append(
            f"<tr><td class='l'>{_e(f['path'])}</td><td>{f['items']:,}</td><td>{f['ngrams']:,}</td>"
            f"<td>{sum(items.values()):,}</td><td>{len(items):,}</td><td class='l'>{listed}</td></tr>"
        )
    rule = f"at least {c['min_share']:.0%} of" if c["min_share"] > 0 else "at least one of"
    return (
        "<section id='contamination'><h2>Benchmark contamination</h2>"
        f"<p class='note'>A sample is flagged <code>contaminated</code> when its prompt or its completion has {rule} "
        f"its token {c['n']}-grams in a benchmark item (exact token match).</p><div class='scroll'><table><thead>"
        "<tr><th class='l'>benchmark file</th><th>items</th><th>n-grams</th><th>samples</th><th>items matched</th>"
        f"<th class='l'>items (samples)</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _near_duplicates(report: Report) -> str:
    """Near-duplicate clusters: parameters, per-category rates, the largest clusters."""
    nd = report.data.get("near_duplicates")
    if not nd:
        return ""
    cats = "".join(
        f"<tr><td class='l'>{_e(c)}</td><td>{v['samples']:,}</td><td>{v['near_duplicates']:,}</td>"
        f"<td>{v['rate']:.2%}</td></tr>"
        for c, v in sorted(nd["categories"].items())
    )
    rows = []
    for c in nd["largest"]:
        rep = c["representative"]
        members = ", ".join(f"<a href='#s{r}'>{r:,}</a>" for r in c["members"])
        more = " …" if c["size"] - 1 > len(c["members"]) else ""
        rows.append(
            f"<tr><td>{rep['row']:,}</td><td class='l'>{_e(_who(rep['sample_id'], rep['row']))}</td>"
            f"<td class='l'>{_e(c['category'])}</td><td>{c['size']:,}</td><td class='l'>{members}{more}</td></tr>"
        )
    return (
        "<section id='near-duplicates'><h2>Near-duplicate completions</h2>"
        f"<p class='note'>{nd['clusters']:,} cluster(s) of {nd['samples']:,} samples: completions whose token "
        f"{nd['n']}-gram sets have Jaccard ≥ {nd['threshold']} (exact, on the {nd['candidates']:,} candidate pairs "
        f"that MinHash LSH with {nd['bands']} bands × {nd['rows']} rows proposed; a pair at the threshold is a "
        f"candidate with probability {nd['recall_at_threshold']:.1%}). Each cluster keeps its first sample; the "
        "others are flagged <code>near_duplicate</code>.</p><div class='scroll'><table><thead><tr>"
        "<th class='l'>category</th><th>samples</th><th>near duplicates</th><th>rate</th></tr></thead>"
        f"<tbody>{cats}</tbody></table></div><div class='scroll'><table><thead><tr><th>representative row</th>"
        "<th class='l'>sample</th><th class='l'>category</th><th>size</th><th class='l'>members</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _hidden_states(report: Report) -> str:
    """The hidden-state dump: layout, shapes, pairing, norm convention, agreement per category."""
    h = report.data.get("hidden_states")
    if not h:
        return ""
    p, n, a = h["pairing"], h["norm"], h.get("agreement")
    facts = [
        ("layout", f"{h['layout']} ({h['layout_from']})"),
        (
            "files",
            f"{h['files']:,} ({h['bytes']:,} bytes; "
            + ", ".join(f"{k} {v:,}" for k, v in h["containers"].items())
            + ")",
        ),
        (
            "states",
            f"{h.get('dtype')} · D {h.get('hidden_size')} · aux {h.get('aux_width') or '—'} · "
            f"layers {h.get('layers') or '—'}",
        ),
        ("bytes per token", f"{h['bytes_per_token']:,.0f}"),
        ("paired by", f"{p.get('rule')} (" + ", ".join(f"{k} {v:,}" for k, v in sorted(p["by_rule"].items())) + ")"),
        (
            "files with no sample",
            f"{p['unpaired_count']:,}" + (": " + ", ".join(p["unpaired"][:20]) if p["unpaired"] else ""),
        ),
        ("samples with no file", f"{p['samples_without_file']:,}"),
        (
            "norm convention",
            f"{n.get('convention') or 'not decided'} the final norm "
            f"· trainer expects {n.get('trainer_expects') or '—'} · {n['decided_by']}",
        ),
        ("row RMS (10/50/90 %)", " / ".join(f"{x:.3g}" for x in n["row_rms"])),
        ("files departing", f"{n['files_departing']:,}"),
    ]
    if h.get("max_length"):
        facts.append(("captures cut at", f"{h['max_length']:,} positions"))
    if p.get("note"):
        facts.append(("note", p["note"]))
    table = "".join(f"<tr><th class='l'>{_e(k)}</th><td class='l'>{_e(v)}</td></tr>" for k, v in facts)
    agree = ""
    if a:
        cats = "".join(
            f"<tr><td class='l'>{_e(c)}</td><td>{v['samples']:,}</td><td>{v['positions']:,}</td>"
            f"<td>{v['rate']:.1%}</td>"
            f"<td>{v['quantiles'][0]:.0%}</td><td>{v['quantiles'][1]:.0%}</td><td>{v['quantiles'][2]:.0%}</td></tr>"
            for c, v in sorted(a["categories"].items())
        )
        agree = (
            f"<p class='note'>Next-token agreement with {_e(a['target'])}: argmax(lm_head(norm(h<sub>t</sub>))) = "
            f"token t+1 on {a['agreed']:,} of {a['positions']:,} sampled completion positions "
            f"(norm {'applied' if a['norm_applied'] else 'already in the states'}); a sample below {a['min']:.0%} is "
            "flagged <code>hidden_disagree</code>. It is also a ceiling on what a draft can learn from this data.</p>"
            "<div class='scroll'><table><thead><tr><th class='l'>category</th><th>samples</th><th>positions</th>"
            "<th>agreement</th><th>p10</th><th>p50</th><th>p90</th></tr></thead>"
            f"<tbody>{cats}</tbody></table></div>"
        )
    return (
        "<section id='hidden-states'><h2>Hidden states</h2>"
        f"<p class='note'>The dump at <code>{_e(h['dir'])}</code>, checked against the corpus: each file paired "
        "with its sample, its shapes, ids, loss mask and every state row (the <code>hidden_*</code> codes).</p>"
        f"<div class='scroll'><table><tbody>{table}</tbody></table></div>{agree}"
    )


def _special_tokens(report: Report) -> str:
    names = report.data["profile"]["special_tokens"]
    cols = [*report.categories.items(), ("all", report.data["overall"])]
    overall = report.data["overall"]["special_tokens"]
    seen = [n for n in names if overall.get(n, 0)]
    never = [n for n in names if not overall.get(n, 0)]
    head = (
        "<table id='special-tokens-table'><thead><tr><th class='l'>token</th><th>id</th>"
        + "".join(_category_th(name) for name, _c in cols)
        + "</tr></thead><tbody>"
    )
    body = []
    for tok in seen:
        cells = []
        for i, (_name, c) in enumerate(cols):
            n = c["special_tokens"].get(tok, 0)
            rate = n / max(1, c["samples"])
            cls = "zero" if not n else ("n" if i == len(cols) - 1 else "")
            cells.append(
                f"<td class='{cls}' title='{rate:.3f} per sample'>{_num(n)}<span class='sub'>{rate:.2f}</span></td>"
            )
        body.append(f"<tr><td class='l'><code>{_e(tok)}</code></td><td>{_e(names[tok])}</td>{''.join(cells)}</tr>")
    if not body:
        body.append(f"<tr><td class='l' colspan='{len(cols) + 2}'>No special token of the profile was seen.</td></tr>")
    never_note = (
        "<p class='note'>Not seen in any sample: "
        + ", ".join(f"<code>{_e(n)}</code> ({_e(names[n])})" for n in never)
        + ".</p>"
        if never
        else ""
    )
    return (
        "<section id='special-tokens'><h2>Special tokens</h2><p class='note'>Occurrences of each special token of the "
        "profile per category: the count, and below it the rate per sample.</p><div class='scroll'>"
        + head
        + "".join(body)
        + "</tbody></table></div>"
        + never_note
    )


# ------------------------------------------------------------------------------------------ length distributions


def _bins(hist: dict[str, list[int]]) -> dict[int, int]:
    """Histogram bin index -> count; bin 0 holds zeros, bin k holds [2^(k-1), 2^k), so edge e is bin bit_length."""
    return {int(e).bit_length(): int(c) for e, c in zip(hist["edges"], hist["counts"], strict=True) if c}


def _pow2(v: int) -> str:
    """A power of two as context lengths are usually written: 512, 4k, 32k, 1M."""
    if v >= 2**20:
        return f"{v // 2**20}M"
    return f"{v // 1024}k" if v >= 1024 else str(v)


def _tick(k: int) -> str:
    return "0" if k == 0 else _pow2(2 ** (k - 1))


def _nice_ceiling(x: float) -> float:
    for v in (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.4, 0.5, 0.6, 0.8, 1.0):
        if x <= v + 1e-12:
            return v
    return 1.0


def _lengths(report: Report) -> str:
    rows = [*report.categories.items(), ("all", report.data["overall"])]
    bins = {(name, part): _bins(c["lengths"][part]["histogram"]) for name, c in rows for part in PARTS}
    used = [k for b in bins.values() for k in b]
    if not used:
        return "<section id='lengths'><h2>Length distributions</h2><p>No samples.</p>"
    lo, hi = min(used), max(used)
    n_bins = hi - lo + 1
    samples = {name: max(1, c["samples"]) for name, c in rows}
    peak = max(cnt / samples[name] for (name, _p), b in bins.items() for cnt in b.values())
    ymax = _nice_ceiling(peak)
    bw = CHART_W / n_bins
    top, plot_h = 7, CHART_H - 14

    def y_of(share: float) -> float:
        return top + plot_h * (1 - share / ymax)

    def chart(name: str, part: str, median: float) -> str:
        colour = PART_COLOURS[part]
        out = [
            f'<svg class="hist" data-category="{_e(name)}" data-part="{part}" width="{CHART_W}" '
            f'height="{CHART_H}" viewBox="0 0 {CHART_W} {CHART_H}" role="img" '
            f'aria-label="{_e(part)} length distribution of {_e(name)}">'
            f'<rect x="0" y="{top}" width="{CHART_W}" height="{plot_h}" fill="#fafbfc"/>'
            f'<line x1="0" x2="{CHART_W}" y1="{y_of(ymax / 2):.1f}" y2="{y_of(ymax / 2):.1f}" stroke="#e3e7ec"/>'
        ]
        for k, cnt in sorted(bins[(name, part)].items()):
            share = cnt / samples[name]
            h = max(1.0, plot_h * share / ymax)
            x = (k - lo) * bw
            span = "length 0" if k == 0 else f"[{_num(2 ** (k - 1))}, {_num(2**k)})"
            out.append(
                f'<rect x="{x + 0.5:.1f}" y="{top + plot_h - h:.1f}" width="{max(1.0, bw - 1):.1f}" '
                f'height="{h:.1f}" fill="{colour}"><title>{_e(name)} · {part} {span}: {cnt:,} samples '
                f"({100 * share:.1f}%)</title></rect>"
            )
        units = 0.5 if median < 1 else math.log2(median) + 1
        if lo <= units <= hi + 1:
            mx = (units - lo) * bw
            out.append(
                f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="{top}" y2="{top + plot_h}" stroke="#1f2328" '
                f'stroke-width="1.5" stroke-dasharray="3 2"><title>median {median:,.0f}</title></line>'
            )
        out.append(f'<line x1="0" x2="{CHART_W}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#8c959f"/></svg>')
        return "".join(out)

    yaxis = (
        f'<svg width="{YAXIS_W}" height="{CHART_H}" viewBox="0 0 {YAXIS_W} {CHART_H}" aria-hidden="true">'
        + "".join(
            f'<text x="{YAXIS_W - 4}" y="{y_of(v) + 3.5:.1f}" font-size="10" fill="#59636e" '
            f'text-anchor="end">{100 * v:.0f}%</text>'
            for v in (0, ymax / 2, ymax)
        )
        + "</svg>"
    )
    step = max(1, math.ceil(n_bins / 6))
    xaxis = [f'<svg width="{CHART_W}" height="{XAXIS_H}" viewBox="0 0 {CHART_W} {XAXIS_H}" aria-hidden="true">']
    for k in range(lo, hi + 1, step):
        x = (k - lo) * bw + (bw / 2 if k == 0 else 0)
        xaxis.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="0" y2="4" stroke="#8c959f"/>'
            f'<text x="{x:.1f}" y="15" font-size="10" fill="#59636e" text-anchor="'
            f'{"start" if k == lo and k else "middle"}">{_tick(k)}</text>'
        )
    xaxis.append("</svg>")
    x_svg = "".join(xaxis)
    cells = ["<div class='part'></div>", "<div class='axis-title'>share</div>"]
    cells += [f"<div class='part'><i class='sw' style='background:{PART_COLOURS[p]}'></i>{p}</div>" for p in PARTS]
    for i, (name, c) in enumerate(rows):
        cls = "cat all" if i == len(rows) - 1 else "cat"
        cells.append(
            f"<div class='{cls}' title='{_e(name)}'>{_e(name)} <span class='note'>{_num(c['samples'])}</span></div>"
        )
        cells.append(yaxis)
        cells += [chart(name, p, c["lengths"][p]["median"]) for p in PARTS]
    cells += ["<div></div>", "<div></div>"] + [x_svg] * len(PARTS)
    cells += ["<div></div>", "<div></div>"]
    cells += ["<div class='axis-title'>length in tokens (log2 bins)</div>"] * len(PARTS)
    return (
        "<section id='lengths'><h2>Length distributions</h2>"
        f"<p class='note'>Every chart uses the same axes: x is the length in tokens on log2 bins from {_tick(lo)} "
        f"to {_pow2(2**hi)}, y is the share of the category's samples in each bin, 0 to {100 * ymax:.0f}%. "
        "The dashed line marks the median. Hover a bar for its count.</p>"
        f"<div class='scroll'><div class='lengths' style='grid-template-columns:170px {YAXIS_W}px "
        f"repeat(4,{CHART_W}px)'>" + "".join(cells) + "</div></div>"
    )


# --------------------------------------------------------------------------------------------------- anomalies


def _anomalies(
    report: Report,
    fail_on: str,
    policy: Mapping[str, PolicyValue] | None,
    failures: dict[str, int],
    shown: Counter[str],
    decoded: Mapping[str, Any],
) -> str:
    found = report.found()
    words = report.status_words(fail_on, policy)
    if not found:
        return (
            "<section id='anomalies'><h2>Anomalies</h2><table id='anomalies-table'><tbody><tr><td class='l'>"
            "No anomalies found.</td></tr></tbody></table>"
        )
    capped = sum(shown.values()) < sum(Counter(c for f in report.flagged for c in f["codes"]).values()) or bool(
        report.data.get("flagged_summarized")
    )
    body = []
    for code, count in found.items():
        a = report.anomalies[code]
        status, said = words[code]
        cls = {"below_fail_on": "below"}.get(status, status)
        more = f"<span class='sub'>{_num(shown[code])} in the list</span>" if capped else ""
        links = f"<a href='#flagged' data-code='{_e(code)}'>samples</a>"
        if code in decoded:
            links += f" · <a href='#d-{_e(code)}'>excerpts</a>"
        counted, share = f"{_num(count)}{more}", _pct(count, report.n_samples)
        if not report.flags_samples(code):
            # A finding about a category or the corpus, not about samples (`category_split`, `draft_vocab_stale`).
            counted, share = f"{_num(count)} finding(s)", "–"
            section = {"category_split": "structure", "draft_vocab_stale": "draft-vocab"}.get(code)
            links = f"<a href='#{section}'>{section.replace('-', ' ')}</a>" if section else ""
        body.append(
            f"<tr data-code='{_e(code)}'><td class='l'><a href='#flagged' data-code='{_e(code)}'><code>{_e(code)}"
            f"</code></a></td><td class='l sev {a['severity']}'>{a['severity']}</td><td>{counted}</td>"
            f"<td>{share}</td><td class='l'><span class='status {cls}'>{_e(said)}</span>"
            f"</td><td class='l wrap'>{_e(a['description'])}</td><td class='l'>{links}</td></tr>"
        )
    table = (
        "<section id='anomalies'><h2>Anomalies</h2><div class='scroll'><table id='anomalies-table'><thead><tr>"
        "<th class='l'>code</th><th class='l'>severity</th><th>samples</th><th>share</th><th class='l'>verdict</th>"
        "<th class='l'>meaning</th><th class='l'>see</th></tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table></div>"
    )
    return table + _by_category(report, list(found))


def _by_category(report: Report, codes: list[str]) -> str:
    cats = list(report.categories)
    if len(cats) < 2:
        return ""
    head = "<tr><th class='l'>code</th>" + "".join(_category_th(c) for c in cats) + "</tr>"
    body = []
    for code in codes:
        counts = [report.categories[c]["anomalies"].get(code, 0) for c in cats]
        top = max(counts) or 1
        cells = []
        for c, n in zip(cats, counts, strict=True):
            if not n:
                cells.append("<td class='zero'>·</td>")
                continue
            alpha = 0.07 + 0.23 * n / top
            cells.append(
                f"<td class='n' style='background:rgba(207,34,46,{alpha:.2f})' "
                f"title='{_e(code)} in {_e(c)}: {n:,} of {report.categories[c]['samples']:,} samples'>{_num(n)}</td>"
            )
        body.append(f"<tr><td class='l'><code>{_e(code)}</code></td>{''.join(cells)}</tr>")
    return (
        "<h3>By category</h3><p class='note'>Samples flagged with each code in each category.</p>"
        f"<div class='scroll'><table class='heat' id='code-category-table'><thead>{head}</thead><tbody>"
        + "".join(body)
        + "</tbody></table></div>"
    )


# ----------------------------------------------------------------------------------------------- flagged list


def select_rows(flagged: Sequence[Mapping[str, Any]], cap: int | None) -> list[int]:
    """Indices of the flagged samples the page lists: all of them up to `cap`; beyond it, first up to an equal
    share of half the cap for every code (so a rare code is never crowded out), then the rest in row order."""
    if cap is None or len(flagged) <= cap:
        return list(range(len(flagged)))
    codes = {c for f in flagged for c in f["codes"]}
    quota = max(1, cap // (2 * max(1, len(codes))))
    per: Counter[str] = Counter()
    chosen: set[int] = set()
    for i, f in enumerate(flagged):
        if len(chosen) >= cap:
            break
        if any(per[c] < quota for c in f["codes"]):
            chosen.add(i)
            per.update(f["codes"])
    for i in range(len(flagged)):
        if len(chosen) >= cap:
            break
        chosen.add(i)
    return sorted(chosen)


def _source_base(report: Report) -> str | None:
    paths = [os.path.dirname(os.path.abspath(i["path"])) for i in report.data["inputs"]]
    try:
        return os.path.commonpath(paths) if paths else None
    except ValueError:
        return None


def _flagged(report: Report, rows: list[int], decoded_keys: set[tuple[str, int]]) -> str:
    flagged = report.flagged
    n = len(flagged)
    if not n:
        return "<section id='flagged'><h2>Flagged samples</h2><p>No sample was flagged.</p>"
    sev_of = {c: a["severity"] for c, a in report.anomalies.items()}
    listed = {flagged[i]["row"] for i in rows}
    base = _source_base(report)
    rel: dict[str, str] = {}
    out = []
    for i in rows:
        f = flagged[i]
        row = f["row"]
        src = f["source"]
        if src not in rel:
            rel[src] = os.path.relpath(os.path.abspath(src), base) if base else src
        chips = []
        for code in f["codes"]:
            pos = f["positions"].get(code)
            at = f" <i>@{pos}</i>" if pos is not None else ""
            chip = f"<span class='c {sev_of.get(code, '')}'>{_e(code)}{at}</span>"
            if (code, row) in decoded_keys:
                chip = f"<a href='#d-{_e(code)}-{row}'>{chip}</a>"
            chips.append(chip)
        dup = ""
        d = f.get("duplicate_of")
        if d:
            label = _e(_who(d.get("sample_id"), d["row"]))
            dup = f"<a href='#s{d['row']}'>{label}</a>" if d["row"] in listed else label
            dup += f" <span class='note'>row {d['row']:,}</span>"
        p = f.get("prompt_of")
        if p:
            label = _e(_who(p.get("sample_id"), p["row"]))
            target = f"<a href='#s{p['row']}'>{label}</a>" if p["row"] in listed else label
            dup += f"{'; ' if dup else ''}same prompt as {target} <span class='note'>row {p['row']:,}</span>"
        nd = f.get("near_duplicate_of")
        if nd:
            label = _e(_who(nd.get("sample_id"), nd["row"]))
            target = f"<a href='#s{nd['row']}'>{label}</a>" if nd["row"] in listed else label
            dup += f"{'; ' if dup else ''}near {target} <span class='note'>row {nd['row']:,}</span>"
        h = f.get("contamination")
        if h:
            dup += (
                f"{'; ' if dup else ''}benchmark item <b>{_e(h['item'])}</b> <span class='note'>{_e(h['part'])}</span>"
            )
        hs = f.get("hidden_states")
        if hs:
            said = "; ".join(f"{c}: {t}" for c, t in hs["findings"].items())
            where = f"<code>{_e(hs['file'])}</code> " if hs.get("file") else ""
            dup += f"{'; ' if dup else ''}{where}<span class='note'>{_e(said)}</span>"
        out.append(
            f"<tr id='s{row}' data-codes='{_e(' '.join(f['codes']))}'><td>{row}</td>"
            f"<td>{_e(f['sample_id'] if f['sample_id'] is not None else '')}</td><td>{_e(f['category'])}</td>"
            f"<td class='sev {f['severity']}'>{f['severity']}</td><td>{''.join(chips)}</td><td>{dup}</td>"
            f"<td>{_e(rel[src])}</td></tr>"
        )
    cap_note = ""
    summarized = report.data.get("flagged_summarized")
    if summarized:
        cap_note = (
            f"<p class='cap' id='flagged-cap'>This page lists <b>{len(rows):,} of {report.n_flagged:,}</b> flagged "
            f"samples: the scan kept full detail for the first {int(summarized['detail_limit']):,} samples of each "
            f"code, and {int(summarized['samples']):,} more by row and codes only (<code>flagged_summarized</code> "
            "in the JSON report; <code>--flagged-detail</code>). <code>--exclude FILE</code> and "
            "<code>tokscan clean</code> reach every one.</p>"
        )
    elif len(rows) < n:
        cap_note = (
            f"<p class='cap' id='flagged-cap'>This page lists <b>{len(rows):,} of {n:,}</b> flagged samples: for "
            "each code its first samples (so every code is represented), then the rest in row order. The full "
            "list is in the JSON report (<code>flagged</code>; <code>tokscan scan --json</code>), and "
            "<code>--exclude FILE</code> writes every sample to drop.</p>"
        )
    code_counts = Counter(c for i in rows for c in flagged[i]["codes"])
    cat_counts = Counter(str(flagged[i]["category"]) for i in rows)
    sev_counts = Counter(flagged[i]["severity"] for i in rows)
    code_opts = "".join(
        f"<option value='{_e(c)}'>{_e(c)} ({code_counts[c]:,})</option>" for c in report.found() if code_counts[c]
    )
    cat_opts = "".join(f"<option value='{_e(c)}'>{_e(c)} ({cat_counts[c]:,})</option>" for c in sorted(cat_counts))
    sev_opts = "".join(f"<option value='{s}'>{s} ({sev_counts[s]:,})</option>" for s in SEVERITIES if sev_counts[s])
    filters = (
        "<div id='filters' hidden><label for='f-code'>code</label><select id='f-code'><option value=''>all codes"
        f"</option>{code_opts}</select><label for='f-cat'>category</label><select id='f-cat'><option value=''>"
        f"all categories</option>{cat_opts}</select><label for='f-sev'>severity</label><select id='f-sev'>"
        f"<option value=''>any</option>{sev_opts}</select><input id='f-text' type='search' "
        "placeholder='search id, row, source…' aria-label='search'><button id='f-clear' type='button'>clear"
        f"</button><span>showing <span id='f-count'>{len(rows):,}</span> of {len(rows):,}</span></div>"
    )
    return (
        f"<section id='flagged'><h2>Flagged samples <span class='note'>({n:,})</span></h2>"
        "<p class='note'>Every flagged sample in row order: the codes with the token position of each anomaly "
        "(@), the original a duplicate repeats, and its source file (relative to "
        f"<code>{_e(base or '')}</code>). Click a header to sort; the controls filter the list.</p>"
        + cap_note
        + filters
        + "<div class='scroll big'><table id='flagged-list' class='list'><thead><tr><th data-sort='num'>row</th>"
        "<th data-sort='text'>sample id</th><th data-sort='text'>category</th><th data-sort='sev'>severity</th>"
        "<th data-sort='text'>codes @ token position</th><th data-sort='text'>duplicate of</th>"
        "<th data-sort='text'>source</th></tr></thead>"
        f"<tbody>{''.join(out)}</tbody></table></div>"
    )


# ---------------------------------------------------------------------------------------------- decoded excerpts


def _token_pattern(report: Report) -> re.Pattern[str]:
    names = sorted(report.data["profile"]["special_tokens"], key=len, reverse=True)
    alts = [re.escape(n) for n in names if n] + [r"⟨oov -?\d+⟩", r"⟨id -?\d+⟩"]
    return re.compile("|".join(alts))


def _text(text: str, pattern: re.Pattern[str]) -> str:
    """Escaped text with special-token names and out-of-vocabulary markers set apart."""
    out, last = [], 0
    for m in pattern.finditer(text):
        out.append(_e(text[last : m.start()]))
        cls = "oov" if m.group().startswith("⟨") else "sp"
        out.append(f"<span class='{cls}'>{_e(m.group())}</span>")
        last = m.end()
    out.append(_e(text[last:]))
    return "".join(out)


def _visible(text: str) -> str:
    """A flagged token that decodes to whitespace only, made visible."""
    if text.strip():
        return text
    return text.replace(" ", "␣").replace("\n", "↵\n").replace("\t", "⇥") or "∅"


def _hit(text: str, token_id: int | None, pattern: re.Pattern[str], ids_mode: bool) -> str:
    label = f"id {token_id}" if token_id is not None else "no token"
    body = _text(_visible(text), pattern)
    if ids_mode and token_id is not None and re.fullmatch(r"-?\d+", text.strip()):
        label = "id"
    return f"<mark class='hit'>{body}<sup>{_e(label)}</sup></mark>"


def _excerpt_html(entry: dict[str, Any], pattern: re.Pattern[str]) -> str:
    pos = entry.get("position")
    ids_mode = entry.get("decoder") == "ids"
    wrap_ids = "<span class='id'>{}</span>" if ids_mode else "{}"
    ex = entry.get("excerpt")
    token_id = ex.get("id_at") if ex else None
    segs = entry.get("segments")
    if pos is not None and segs:
        parts = []
        for s in segs:
            colour = SEGMENT_COLOURS.get(s["kind"], "#fff")
            title = f"{s['kind']} {s['start']}:{s['end']}"
            if s["start"] == pos and s["end"] == pos + 1:
                inner = _hit(s["text"], token_id, pattern, ids_mode)
            else:
                inner = wrap_ids.format(_text(s["text"], pattern))
            sep = " " if ids_mode and parts else ""
            parts.append(f"{sep}<span class='k' style='background:{colour}' title='{_e(title)}'>{inner}</span>")
        return f"<pre class='seq'>…{''.join(parts)}…</pre>"
    if pos is not None and ex is not None and "at" in ex:
        return (
            f"<pre class='seq'>…{wrap_ids.format(_text(ex['before'], pattern))}"
            f"{_hit(ex['at'], token_id, pattern, ids_mode)}{wrap_ids.format(_text(ex['after'], pattern))}…</pre>"
        )
    if pos is not None and ex is not None:  # ids only, from an older report
        before = " ".join(map(str, ex["ids_before"]))
        after = " ".join(map(str, ex["ids_after"]))
        return f"<pre class='seq'>… {_e(before)} {_hit(str(token_id), token_id, pattern, True)} {_e(after)} …</pre>"
    length = entry.get("length")
    end = f" (of {length:,} tokens)" if length is not None else ""
    return (
        f"<pre class='seq'><span class='edge'>starts</span>{wrap_ids.format(_text(entry.get('first', ''), pattern))}"
        f" …\n<span class='edge'>ends{_e(end)}</span>… {wrap_ids.format(_text(entry.get('last', ''), pattern))}</pre>"
    )


def _decoded(report: Report, decoded: Mapping[str, list[dict[str, Any]]], listed: set[int]) -> str:
    if not decoded:
        return ""
    pattern = _token_pattern(report)
    kinds: set[str] = {s["kind"] for v in decoded.values() for e in v for s in e.get("segments", [])}
    ids_mode = any(e.get("decoder") == "ids" for v in decoded.values() for e in v)
    legend = "".join(
        f"<span><i class='sw' style='background:{c};border:1px solid #d0d7de'></i>{k}</span>"
        for k, c in SEGMENT_COLOURS.items()
        if k in kinds
    )
    how = (
        "Without a tokenizer the excerpts are token ids, special tokens by the profile's names. "
        if ids_mode
        else "Decoded with the tokenizer. "
    )
    out = [
        "<section id='decoded'><h2>Decoded excerpts</h2><p class='note'>"
        + how
        + f"Up to {max(len(v) for v in decoded.values())} sample(s) per code: the tokens around the anomaly, the "
        "flagged token outlined in red with its id (<span class='oov'>⟨oov N⟩</span> is an id outside the "
        "vocabulary), special tokens <span class='sp'>set apart</span>; codes without a position show the "
        "sample's first and last tokens.</p>"
    ]
    if legend:
        out.append(f"<div class='legend'>segments: {legend}</div>")
    order = [c for c in report.found() if c in decoded] + [c for c in decoded if c not in report.anomalies]
    for code in order:
        a = report.anomalies.get(code, {"severity": "info", "description": ""})
        out.append(
            f"<h3 id='d-{_e(code)}'><span class='c {a['severity']}'>{_e(code)}</span> "
            f"<span class='note'>{_e(a['description'])}</span></h3>"
        )
        for e in decoded[code]:
            row = e["row"]
            meta = [f"row {row:,}"]
            if e.get("category") is not None:
                meta.append(_e(e["category"]))
            if e.get("position") is not None:
                meta.append(f"token {e['position']:,}" + (f" of {e['length']:,}" if "length" in e else ""))
            others = [c for c in e.get("codes", []) if c != code]
            if others:
                meta.append("also " + ", ".join(_e(c) for c in others))
            dup = e.get("duplicate_of")
            dup_html = ""
            if dup:
                name = _e(_who(dup.get("sample_id"), dup["row"]))
                target = f"<a href='#s{dup['row']}'>{name}</a>" if dup["row"] in listed else f"<b>{name}</b>"
                dup_html = f" · {'repeats' if code == 'duplicate' else 'same id as'} {target} (row {dup['row']:,})"
            first = e.get("prompt_of")
            if first and code.startswith("prompt_"):
                name = _e(_who(first.get("sample_id"), first["row"]))
                target = f"<a href='#s{first['row']}'>{name}</a>" if first["row"] in listed else f"<b>{name}</b>"
                dup_html += f" · same prompt as {target} (row {first['row']:,}, {_e(first['category'])})"
            near, cluster = e.get("near_duplicate_of"), e.get("cluster")
            body = _excerpt_html(e, pattern)
            if near and cluster:
                name = _e(_who(near.get("sample_id"), near["row"]))
                target = f"<a href='#s{near['row']}'>{name}</a>" if near["row"] in listed else f"<b>{name}</b>"
                dup_html += f" · near copy of {target} (row {near['row']:,}; a cluster of {cluster['size']:,})"
                body = (
                    "<div class='note'>this completion starts</div>"
                    f"<pre class='seq'>{_text(cluster['completion'], pattern)}…</pre>"
                    "<div class='note'>the representative's starts</div>"
                    f"<pre class='seq'>{_text(cluster['representative_completion'], pattern)}…</pre>"
                )
            back = f" · <a href='#s{row}'>in the list</a>" if row in listed else ""
            out.append(
                f"<div class='ex' id='d-{_e(code)}-{row}'><div class='exh'><b>{_e(_who(e['sample_id'], row))}</b> "
                f"<span class='meta'>· {' · '.join(meta)}{dup_html}{back}</span></div>{body}</div>"
            )
    return "".join(out)


# --------------------------------------------------------------------------------------------------------- page


def render(
    report: Report,
    fail_on: str | None = None,
    policy: Mapping[str, PolicyValue] | None = None,
    *,
    command: str | Sequence[str] | None = None,
    tokenizer: str | os.PathLike[str] | None = None,
    started: datetime | str | None = None,
    seconds: float | None = None,
    max_rows: int | None = DEFAULT_MAX_ROWS,
) -> str:
    """The report as one self-contained HTML page.

    `command` (a string or argv list), `tokenizer` (the directory used), `started` (when the run started) and
    `seconds` (the duration) describe the run in the header; each defaults to what the core recorded in the
    report's `run` (a report of schema 1 has none: "not recorded", the date of writing). `max_rows` caps the
    inline list of flagged samples (None: all of them); the page says when it is capped."""
    if fail_on is not None and fail_on not in FAIL_ON:
        raise ValueError(f"fail_on must be one of {', '.join(FAIL_ON)}")
    fail_on, policy = report.judged_by(fail_on, policy)
    failures = report.failures(fail_on, policy)
    run = report.run or {}
    command = command if command is not None else run.get("command")
    tokenizer = tokenizer if tokenizer is not None else run.get("tokenizer")
    started = started if started is not None else run.get("started")
    seconds = seconds if seconds is not None else run.get("seconds")
    decoded: dict[str, list[dict[str, Any]]] = report.data.get("decoded") or {}
    rows = select_rows(report.flagged, max_rows)
    listed = {report.flagged[i]["row"] for i in rows}
    shown = Counter(c for i in rows for c in report.flagged[i]["codes"])
    decoded_keys = {(code, e["row"]) for code, v in decoded.items() for e in v}
    sections = [
        _category_table(report),
        _structure(report),
        _draft_vocab(report),
        _pairing(report),
        _prompt_groups(report),
        _contamination(report),
        _near_duplicates(report),
        _hidden_states(report),
        _special_tokens(report),
        _lengths(report),
        _anomalies(report, fail_on, policy, failures, shown, decoded),
        _flagged(report, rows, decoded_keys),
        _decoded(report, decoded, listed),
    ]
    body = [
        _header(report, fail_on, failures, command, tokenizer, started, seconds, bool(decoded)),
        *(part + "</section>" for part in sections if part),
        f"<footer>tokscan {_e(report.data['tool']['version'])} · self-contained page: no network access, no "
        "external assets · the JSON report holds every number on this page</footer>",
    ]
    title = f"tokscan report · {report.data['profile']['name']} · {report.n_samples:,} samples"
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>{''.join(body)}</main>"
        f"<script>{JS}</script></body></html>\n"
    )
