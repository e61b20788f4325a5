"""Terminal rendering of reports (rich)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from . import SEVERITY_RANK, Report

if TYPE_CHECKING:
    from . import PolicyValue

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
EXAMPLES_PER_CODE = 3


#: Where the core says a `truncated` sample was cut (`cut_in`), in words, in its order.
CUT_IN = {"reasoning": "the reasoning", "tool_call": "a tool call", "response": "the response"}


def _num(n: float) -> str:
    return f"{n:,.0f}"


def _tokens(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


#: Below this terminal width the tables switch to a compact form that fits 80 columns.
COMPACT_BELOW = 120


def _len(n: float, compact: bool) -> str:
    """A length: exact, or in k above 9,999 when the table must be compact (never cut by the terminal)."""
    if compact and n >= 10_000:
        return _tokens(round(n))
    return _num(n)


def _table(title: str, compact: bool) -> Table:
    if compact:
        return Table(
            title=title,
            title_justify="left",
            header_style="bold",
            box=box.SIMPLE_HEAD,
            collapse_padding=True,
            pad_edge=False,
            show_edge=False,
        )
    return Table(title=title, title_justify="left", header_style="bold")


def category_table(report: Report, width: int = 200) -> Table:
    compact = width < COMPACT_BELOW
    t = _table("Per category", compact)
    t.add_column("category", no_wrap=not compact, overflow="fold")
    for col in ("samples", "tokens"):
        t.add_column(col, justify="right", no_wrap=True)
    for part, short in (("prompt", "prompt"), ("thinking", "think"), ("response", "resp")):
        t.add_column(f"{short if compact else part}\np50", justify="right", no_wrap=True)
    t.add_column("total\np99", justify="right", no_wrap=True)
    t.add_column("total\nmax", justify="right", no_wrap=True)
    t.add_column("flag" if compact else "flagged", justify="right", no_wrap=True)
    flagged_by_cat = report.flagged_by_category()
    rows = [*report.categories.items(), ("all", report.data["overall"])]
    for i, (name, c) in enumerate(rows):
        lengths = c["lengths"]
        cells = [_len(lengths[p]["median"], compact) for p in ("prompt", "thinking", "response")]
        cells.append(_len(lengths["total"]["p99"], compact))
        flagged = sum(flagged_by_cat.values()) if name == "all" and i == len(rows) - 1 else flagged_by_cat.get(name, 0)
        t.add_row(
            Text(name, style="bold" if i == len(rows) - 1 else ""),
            _num(c["samples"]),
            _tokens(c["tokens"]),
            *cells,
            _len(lengths["total"]["max"], compact),
            Text(_num(flagged), style="red" if flagged else "green"),
            end_section=i == len(rows) - 2,
        )
    return t


#: A category whose coverage falls this far (share) below the corpus's stands out in the draft-vocabulary table.
COVERAGE_GAP = 0.05


def draft_vocab_table(dv: dict, width: int = 200) -> Table:
    """Per category: loss-bearing tokens, distinct ids and the share the corpus's top-K ids cover; a category
    served clearly worse than the corpus (by COVERAGE_GAP) in yellow."""
    compact = width < COMPACT_BELOW
    t = _table(
        f"Draft vocabulary: loss-bearing tokens covered by the corpus's top-K ids (of {dv['vocab_size']:,})", compact
    )
    t.add_column("category", no_wrap=not compact, overflow="fold")
    t.add_column("loss tokens", justify="right", no_wrap=True)
    t.add_column("distinct", justify="right", no_wrap=True)
    for k in dv["sizes"]:
        t.add_column(f"K={k:,}", justify="right", no_wrap=True)
    overall = dv["overall"]["coverage"]
    rows = [*dv["categories"].items(), ("all", dv["overall"])]
    for i, (name, c) in enumerate(rows):
        cells = []
        for k in dv["sizes"]:
            share = c["coverage"][str(k)]
            low = name != "all" and c["loss_tokens"] and share < overall[str(k)] - COVERAGE_GAP
            cells.append(Text(f"{share:.1%}", style="yellow" if low else ""))
        t.add_row(
            Text(name, style="bold" if i == len(rows) - 1 else ""),
            _tokens(c["loss_tokens"]),
            _num(c["distinct"]),
            *cells,
            end_section=i == len(rows) - 2,
        )
    return t


def print_vocab_check(check: dict, console: Console) -> None:
    """One line for `--check-vocab`, and the reasons it fails."""
    head = "[bold red]stale[/]" if check["problems"] else "[green]fits[/]"
    console.print(
        f"[bold]draft-vocabulary mapping[/] {head}: {check['draft_size']:,} draft ids over "
        f"{check['target_size']:,} target ids; covers {check['coverage']:.2%} of the loss-bearing tokens, "
        f"the corpus's own top {check['draft_size']:,} {check['best_coverage']:.2%}",
        highlight=False,
    )
    for p in check["problems"]:
        console.print(f"  [red]{escape(p)}[/]", highlight=False)
    if check["missed"]:
        missed = ", ".join(f"{i} ({_num(n)})" for i, n in check["missed"][:10])
        console.print(f"  most frequent ids it misses: {missed}", highlight=False)


#: How each policy status reads in the table (full width, compact) and its style.
STATUS_STYLE = {"fails": "bold red", "tolerated": "yellow", "ignored": "dim", "below_fail_on": "dim"}
STATUS_SHORT = {"fails": "FAILS", "tolerated": "tolerated", "ignored": "ignored", "below_fail_on": "below"}


def anomaly_table(
    report: Report, width: int = 200, fail_on: str | None = None, policy: Mapping[str, PolicyValue] | None = None
) -> Table:
    compact = width < COMPACT_BELOW
    words = report.status_words(fail_on, policy)
    t = _table("Anomalies", compact)
    t.add_column("code", no_wrap=True)
    t.add_column("sev" if compact else "severity", no_wrap=True)
    t.add_column("samples", justify="right", no_wrap=True)
    t.add_column("share", justify="right", no_wrap=True)
    t.add_column("policy", no_wrap=True)
    t.add_column("examples (sample_id or #row @ position)", overflow="fold")
    examples: dict[str, list[str]] = {}
    for f in report.flagged:
        for code in f["codes"]:
            ex = examples.setdefault(code, [])
            if len(ex) < EXAMPLES_PER_CODE:
                who = str(f["sample_id"]) if f["sample_id"] is not None else f"#{f['row']}"
                pos = f["positions"].get(code)
                ex.append(f"{who}@{pos}" if pos is not None else who)
    n = max(1, report.n_samples)
    found = [(c, a) for c, a in report.anomalies.items() if a["count"] > 0]
    found.sort(key=lambda ca: (-SEVERITY_RANK[ca[1]["severity"]], -ca[1]["count"], ca[0]))
    for code, a in found:
        sev = a["severity"]
        status, said = words[code]
        about_samples = report.flags_samples(code)
        t.add_row(
            code,
            Text(sev, style=SEVERITY_STYLE[sev]),
            _num(a["count"]),
            f"{100 * a['count'] / n:.2f}%" if about_samples else "–",
            Text(STATUS_SHORT[status] if compact else said, style=STATUS_STYLE[status]),
            # A finding about a category or the corpus flags no sample: say where it is instead.
            ", ".join(examples.get(code, [])) if about_samples else NO_SAMPLE_FINDING.get(code, ""),
        )
    return t


def print_decoded(decoded: dict, console: Console) -> None:
    console.print("[bold]Decoded examples[/]")
    for code, entries in decoded.items():
        for e in entries:
            who = e["sample_id"] if e["sample_id"] is not None else f"#{e['row']}"
            line = Text(f"{code} · {who}", style="bold")
            ex = e["excerpt"]
            cluster = e.get("cluster")
            if cluster is not None:
                rep = e["near_duplicate_of"]
                rep_who = rep["sample_id"] if rep["sample_id"] is not None else f"#{rep['row']}"
                line.append(f" ≈ {rep_who} (cluster of {cluster['size']:,})", style="")
                console.print(line)
                console.print(Text(f"    this:           {cluster['completion']!r}"))
                console.print(Text(f"    representative: {cluster['representative_completion']!r}"))
                continue
            if ex is not None:
                line.append(f" @ {ex['position']}: …", style="")
                line.append(ex["before"], style="")
                line.append(ex["at"] or "∅", style="bold white on red")
                line.append(ex["after"] + "…", style="")
            else:
                line.append(f": starts {e['first']!r} … ends {e['last']!r}", style="")
            console.print(line)
            hit = e.get("contamination") or {}
            if hit.get("text"):
                console.print(
                    Text(
                        f"    shares {hit.get('item_matched', 0):,} of the {hit.get('item_ngrams', 0):,} n-grams of "
                        f"{hit['item']} ({hit['part']}): {hit['text']!r}"
                    )
                )


def print_drift(drifts, console: Console, baseline: object) -> None:
    if not drifts:
        console.print(f"[bold green]No drift[/] from {baseline}")
        return
    t = Table(title=f"Drift from {baseline}", title_justify="left", header_style="bold")
    for col in ("check", "category", "subject", "finding"):
        t.add_column(col)
    for d in drifts:
        t.add_row(d.check, d.category, d.subject, d.message)
    console.print(t)
    console.print(f"[bold red]DRIFT[/]: {len(drifts)} finding(s)")


#: Where the terminal summary says more of a finding that flags no sample.
NO_SAMPLE_FINDING = {
    "category_split": "finding(s): see the category's 'structure' line",
    "draft_vocab_stale": "finding: see the draft vocabulary lines",
    "hidden_orphan": "file(s) with no sample: see the hidden-state lines",
    "hidden_unreadable": "file(s) with no sample: see the hidden-state lines",
    "hidden_convention": "finding: see the hidden-state lines",
}


def print_consistency(categories: dict, console: Console) -> None:
    """One compact line per category: each structural feature's majority value, with its share where some
    samples depart from it."""
    for name, c in categories.items():
        table = c.get("consistency") or {}
        if not table:
            continue
        splits = set(c.get("splits") or ())
        parts = []
        for feature, counts in table.items():
            total = sum(counts.values())
            if feature in splits:
                shares = " / ".join(f"{v} {n / total:.1%}" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))
                parts.append(f"[yellow]{feature} split: {shares}[/]")
                continue
            value, n = max(counts.items(), key=lambda kv: kv[1])
            part = f"{feature}={value}"
            if n < total:
                part += f" [yellow]{n / total:.1%}[/]"
            parts.append(part)
        console.print(f"[bold]structure[/] {escape(name)}: " + " · ".join(parts), highlight=False)


def print_pairing(pairing: list[dict], console: Console) -> None:
    """One line per prompts file: how samples and records paired, and what disagreed."""
    for p in pairing:
        what = p["category"] or "the whole corpus"
        parts = [f"{_num(p['paired'])} of {_num(p['samples'])} samples paired"]
        for key, label in (
            ("samples_without_record", "without a record"),
            ("mismatched", "mismatched"),
            ("shifted", "shifted"),
            ("records_without_sample", "record(s) without a sample"),
            ("duplicate_ids", "duplicate id(s)"),
            ("unrenderable", "the chat template could not render"),
        ):
            if p.get(key):
                parts.append(f"[red]{_num(p[key])} {label}[/]")
        how = "by id" if p["matched_by"] == "id" else "by line"
        basis = "tokens" if p["compared"] == "tokens" else "turns and sizes"
        if p.get("bytes_per_token"):
            basis += f", {p['bytes_per_token']:.2f} bytes/token"
        console.print(
            f"[bold]prompts[/] {escape(p['path'])} ({escape(what)}, {how}, {basis}): " + ", ".join(parts),
            highlight=False,
        )
        if p.get("render_error"):
            console.print(f"  [red]the chat template failed[/] on {escape(p['render_error'])}", highlight=False)
        if p.get("records_too_large"):
            lines = ", ".join(str(n) for n in p["records_too_large_lines"])
            more = " …" if p["records_too_large"] > len(p["records_too_large_lines"]) else ""
            console.print(
                f"  [yellow]{_num(p['records_too_large'])} record(s) larger than {_num(p['max_record_bytes'])} bytes "
                f"not rendered[/] (compared by shape; TOKSCAN_MAX_RECORD_BYTES raises the limit): line {lines}{more}",
                highlight=False,
            )
        for s in p["shifts"][:3]:
            console.print(
                f"  [red]shifted by {s['offset']:+d}[/] from row {s['from_row']} to {s['to_row']} "
                f"(record line {s['from_line']} on): sample i matches record i{s['offset']:+d}",
                highlight=False,
            )


def print_prompt_groups(groups: dict | None, console: Console, limit: int = 3) -> None:
    """One line for the prompts answered more than once or filed under two categories, and the largest groups."""
    if not groups:
        return
    console.print(
        f"[bold]prompt groups[/]: {_num(groups['groups'])} prompt(s) shared by {_num(groups['samples'])} samples "
        f"({_num(groups['cross_category'])} across categories)",
        highlight=False,
    )
    for g in groups["largest"][:limit]:
        first = g["first"]
        who = first["sample_id"] if first["sample_id"] is not None else f"row {first['row']}"
        cats = ", ".join(f"{escape(c)} {n}" for c, n in g["categories"].items())
        console.print(
            f"  {g['size']} samples from {escape(str(who))}: {g['differing']} other completion(s); {cats}",
            highlight=False,
        )


def print_contamination(c: dict | None, console: Console, limit: int = 5) -> None:
    """One line per benchmark file: its items and n-grams, the samples that share them and the items matched most."""
    if not c:
        return
    share = f", ≥ {c['min_share']:.0%} of a part's n-grams" if c["min_share"] > 0 else ""
    for f in c["files"]:
        items = c["items"].get(f["path"], {})
        n = sum(items.values())
        top = sorted(items.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        style = "red" if n else "green"
        line = (
            f"[bold]contamination[/] {escape(f['path'])} ({_num(f['items'])} items, {_num(f['ngrams'])} "
            f"{c['n']}-grams{share}): [{style}]{_num(n)} sample(s)[/] from {len(items)} item(s)"
        )
        if top:
            line += ": " + ", ".join(f"{escape(k)} ×{v}" for k, v in top)
        console.print(line, highlight=False)


def print_near_duplicates(nd: dict | None, console: Console, limit: int = 3) -> None:
    """The near-duplicate clusters: how many, the parameters, the per-category rates and the largest clusters."""
    if not nd:
        return
    rates = ", ".join(
        f"{escape(c)} {v['rate']:.1%}" for c, v in sorted(nd["categories"].items()) if v["near_duplicates"]
    )
    console.print(
        f"[bold]near duplicates[/]: {_num(nd['clusters'])} cluster(s) of {_num(nd['samples'])} samples "
        f"(Jaccard ≥ {nd['threshold']} over token {nd['n']}-grams; {nd['bands']}×{nd['rows']} bands, candidate "
        f"midpoint {nd['implied_threshold']:.2f}){': ' + rates if rates else ''}",
        highlight=False,
    )
    for c in nd["largest"][:limit]:
        rep = c["representative"]
        who = rep["sample_id"] if rep["sample_id"] is not None else f"row {rep['row']}"
        console.print(f"  {c['size']} samples like {escape(str(who))} ({escape(c['category'])})", highlight=False)


def _rules(pairing: dict) -> str:
    return ", ".join(f"{r.replace('_', ' ')} {_num(n)}" for r, n in sorted(pairing["by_rule"].items()))


def hidden_state_lines(h: dict | None) -> list[str]:
    """The hidden-state dump in a few lines (Rich markup): layout, files, shapes, pairing, norm, agreement."""
    if not h:
        return []
    shape = [f"{h['dtype']}" if h.get("dtype") else None, f"D {h['hidden_size']:,}" if h.get("hidden_size") else None]
    if h.get("aux_width"):
        shape.append(f"aux {h['aux_width']:,}")
    if h.get("layers"):
        shape.append(f"{h['layers']} layers")
    shape.append(f"{h['bytes_per_token']:,.0f} B/token")
    p = h["pairing"]
    rule = p["rule"].replace("_", " ") if p.get("rule") else "none"
    lines = [
        f"[bold]hidden states[/] {escape(h['dir'])}: {escape(str(h['layout']))} ({escape(h['layout_from'])}), "
        f"{_num(h['files'])} files, {_bytes(h['bytes'])}, {' · '.join(s for s in shape if s)}; paired by {rule}"
        f" ({_rules(p)})"
    ]
    if p.get("note"):
        lines.append(f"  [dim]{escape(p['note'])}[/]")
    if p["unpaired_count"]:
        listed = ", ".join(escape(f) for f in p["unpaired"][:3])
        more = f" and {_num(p['unpaired_count'] - 3)} more" if p["unpaired_count"] > 3 else ""
        lines.append(f"  [yellow]{_num(p['unpaired_count'])} file(s) pair with no sample[/]: {listed}{more}")
    n = h["norm"]
    expects = n.get("trainer_expects")
    if n.get("convention"):
        ok = expects is None or expects == n["convention"]
        verdict = (
            ""
            if expects is None
            else (" [green]as its trainer expects[/]" if ok else f" [red]but its trainer expects {expects}[/]")
        )
        lines.append(
            f"  last state stored {n['convention']} the final norm{verdict}; "
            f"{_num(n['files_departing'])} file(s) depart"
        )
    else:
        q = n["row_rms"]
        lines.append(
            f"  norm convention not decided (--target-model decides it): row RMS {q[0]:.3g} / {q[1]:.3g} / {q[2]:.3g} "
            f"(10/50/90 %), {_num(n['files_departing'])} file(s) off the dump's scale"
        )
    a = h.get("agreement")
    if a and a["positions"]:
        cats = ", ".join(f"{escape(c)} {v['rate']:.1%}" for c, v in sorted(a["categories"].items()))
        lines.append(
            f"  next-token agreement: {_num(a['agreed'])} of {_num(a['positions'])} sampled positions "
            f"({a['agreed'] / a['positions']:.1%}) over {_num(a['samples'])} samples: {cats}"
        )
    if h.get("max_length"):
        lines.append(f"  captures cut at {h['max_length']:,} positions (hidden_truncated)")
    return lines


def print_hidden_states(h: dict | None, console: Console) -> None:
    for line in hidden_state_lines(h):
        console.print(line, highlight=False)


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} B"


def print_skipped(skipped: list[dict], console: Console, limit: int = 5) -> None:
    """What a directory scan left aside, so nothing is dropped without a word."""
    if not skipped:
        return
    shown = ", ".join(f"{escape(s['path'])} ({escape(s['reason'])})" for s in skipped[:limit])
    more = f" and {len(skipped) - limit} more (see the JSON report's 'skipped')" if len(skipped) > limit else ""
    console.print(f"[dim]skipped {len(skipped)} non-corpus file(s): {shown}{more}[/]", highlight=False)


def print_summary(
    report: Report,
    console: Console,
    fail_on: str | None = None,
    seconds: float | None = None,
    policy: Mapping[str, PolicyValue] | None = None,
) -> None:
    """The terminal summary; `fail_on` and `policy` default to what the scan ran with."""
    fail_on, policy = report.judged_by(fail_on, policy)
    d = report.data
    parts = [
        Text(f"tokscan {d['tool']['version']}", style="bold"),
        Text.assemble("profile ", (str(d["profile"]["name"]), "bold")),
        Text(f"{len(d['inputs'])} input(s)"),
        Text(f"{_num(report.n_samples)} samples"),
        Text(f"{_tokens(report.n_tokens)} tokens"),
    ]
    if seconds is not None and seconds > 0:
        # Wall time of the whole command (tokenizer loading included), so small corpora read in k tok/s.
        parts.append(Text(f"{seconds:.2f} s ({_tokens(round(report.n_tokens / seconds))} tok/s)"))
    for line in _joined(parts, " · ", console.width):
        console.print(line, highlight=False)
    console.print(category_table(report, console.width))
    print_consistency(d.get("categories") or {}, console)
    dv = d.get("draft_vocab")
    if dv and dv["sizes"]:
        console.print(draft_vocab_table(dv, console.width))
    if dv and dv.get("check"):
        print_vocab_check(dv["check"], console)
    print_pairing(d.get("pairing") or [], console)
    print_prompt_groups(d.get("prompt_groups"), console)
    print_contamination(d.get("contamination"), console)
    print_near_duplicates(d.get("near_duplicates"), console)
    print_hidden_states(d.get("hidden_states"), console)
    print_skipped(d.get("skipped") or [], console)
    if any(a["count"] for a in report.anomalies.values()):
        console.print(anomaly_table(report, console.width, fail_on, policy))
    else:
        console.print("[green]No anomalies found.[/]")
    cut = report.data["overall"].get("truncated_in") or {}
    if cut:
        console.print(
            "truncated samples were cut " + " · ".join(f"in {w} {cut[k]:,}" for k, w in CUT_IN.items() if k in cut),
            highlight=False,
        )
    unchecked = report.not_checked()
    if unchecked:
        console.print(
            "[dim]not checked in this corpus: " + "; ".join(f"{c} ({why})" for c, why in unchecked.items()) + "[/]",
            highlight=False,
        )
    for line in verdict_lines(report, fail_on, policy):
        console.print(line, highlight=False)


def _joined(parts: list[Text], sep: str, width: int) -> list[Text]:
    """`parts` joined by `sep` into lines no wider than `width`, broken only between parts (a narrow terminal
    never splits a value such as `11.8M` across lines)."""
    lines = [Text()]
    for part in parts:
        if lines[-1].cell_len and lines[-1].cell_len + len(sep) + part.cell_len > width:
            lines.append(Text())
        if lines[-1].cell_len:
            lines[-1].append(sep)
        lines[-1].append_text(part)
    return lines


def verdict_lines(report: Report, fail_on: str | None = None, policy: Mapping[str, PolicyValue] | None = None):
    """The verdict in words that keep codes and samples apart: how many codes fail the run and how many samples
    carry one, then how many samples are flagged in all and what the policy made of the other codes."""
    fail_on, policy = report.judged_by(fail_on, policy)
    words = report.status_words(fail_on, policy)
    failing = {c for c, (status, _) in words.items() if status == "fails"}
    if failing:
        carriers = sum(1 for f in report.flagged if failing.intersection(f["codes"])) + report.n_summarized(failing)
        head = (
            f"[bold red]FAIL[/] (--fail-on {fail_on}): {len(failing)} code(s) fail the run, "
            f"in {_num(carriers)} sample(s)"
        )
    elif report.drifted():
        head = f"[bold red]FAIL[/] (--baseline): {report.drifted()} drift check(s) past their thresholds"
    elif fail_on == "never":
        head = "[bold green]PASS[/] (--fail-on never): the run does not fail"
    else:
        head = f"[bold green]PASS[/] (--fail-on {fail_on}): no code fails the run"
    lines = [head]
    if failing and report.drifted():
        lines.append(f"and {report.drifted()} drift check(s) past their thresholds (--baseline)")
    if report.n_flagged:
        other: dict[str, int] = {}
        for status, _ in words.values():
            if status != "fails":
                other[status] = other.get(status, 0) + 1
        parts = [f"{other[s]} {w}" for s, w in OTHER_WORDS if s in other]
        lines.append(
            f"{_num(report.n_flagged)} sample(s) flagged in all"
            + (f" · other codes: {', '.join(parts)}" if parts else "")
        )
    return lines


OTHER_WORDS = (("tolerated", "tolerated"), ("ignored", "ignored"), ("below_fail_on", "below --fail-on"))
