"""The `tokscan` command line."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

from . import _core
from .api import scan as run_scan
from .errors import TokscanError
from .render import print_decoded, print_drift, print_summary

app = typer.Typer(
    name="tokscan",
    help="Scan token-id training corpora for chat-structure anomalies before you train on them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)
# Wide enough for the category table when output goes to a file or a CI log.
out = Console(width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True)


class FailOn(str, Enum):
    error = "error"
    warning = "warning"
    info = "info"
    never = "never"


@contextmanager
def user_errors():
    """Turns tokscan errors into one line on stderr and exit code 2; Ctrl-C into exit code 130."""
    try:
        yield
    except TokscanError as e:
        err.print(f"[bold red]tokscan: error:[/] {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        err.print("tokscan: interrupted")
        raise typer.Exit(130) from None


def _columns(**roles: str | None) -> dict[str, str]:
    return {role: name for role, name in roles.items() if name}


class PartsColumn(ProgressColumn):
    """`done/total parts · N samples`; the total is unknown (None) until the inputs are planned."""

    def render(self, task: Task) -> Text:
        total = "?" if task.total is None else f"{task.total:,.0f}"
        return Text(f"{task.completed:,.0f}/{total} parts · {task.fields.get('samples', 0):,} samples")


def scan_with_progress(paths: list[str], show_progress: bool, **kwargs):
    if not (show_progress and err.is_terminal):
        # Still poll from this thread, so Ctrl-C cancels the scan promptly.
        return run_scan(paths, progress=lambda _p: None, **kwargs)
    with Progress(
        TextColumn("[bold]scanning"),
        BarColumn(),
        PartsColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task("scan", total=None, samples=0)

        def update(p: dict[str, int]) -> None:
            bar.update(task, total=p["units_total"] or None, completed=p["units_done"], samples=p["samples"])

        return run_scan(paths, progress=update, **kwargs)


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    github = "github"


def load_config(path: Path | None):
    from . import config

    return config.load_file(path) if path is not None else config.discover()


def emit_ci_outputs(report, fail_on: str, cfg, drifts, junit_out: Path | None, fmt: OutputFormat) -> None:
    from . import ciformat

    if junit_out is not None:
        junit_out.write_text(ciformat.junit(report, fail_on, cfg.policy, drifts))
    if fmt is OutputFormat.github:
        sys.stdout.write(ciformat.github(report, fail_on, cfg.policy, drifts))


@app.command()
def scan(
    paths: Annotated[
        list[str] | None,
        typer.Argument(help="Parquet files, directories (recursive), globs, NumPy corpus dirs [config: paths]."),
    ] = None,
    profile: Annotated[
        str | None, typer.Option("--profile", "-p", help="Built-in profile name or a TOML profile file [kimi-k2].")
    ] = None,
    tokenizer: Annotated[
        Path | None, typer.Option(help="Tokenizer dir (tokenizer.json) to resolve the profile's token strings.")
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the JSON report here ('-' for stdout).")
    ] = None,
    threads: Annotated[int | None, typer.Option(help="Worker threads (0 = one per core).", min=0)] = None,
    fail_on: Annotated[
        FailOn | None, typer.Option(help="Exit 1 when anything at or above this severity is found [error].")
    ] = None,
    config_file: Annotated[
        Path | None, typer.Option("--config", help="Config file (default: tokscan.toml / pyproject.toml upward).")
    ] = None,
    baseline: Annotated[
        Path | None, typer.Option(help="A previous JSON report: drift from it fails the run (see `tokscan diff`).")
    ] = None,
    junit_out: Annotated[Path | None, typer.Option("--junit", help="Write a JUnit XML report here.")] = None,
    html_out: Annotated[Path | None, typer.Option("--html", help="Write a self-contained HTML report here.")] = None,
    exclude: Annotated[
        Path | None,
        typer.Option(
            help="Write the samples to drop here, one per line: sample ids (rows when a sample has none). "
            "Selected by --fail-on severity, or by --exclude-code."
        ),
    ] = None,
    exclude_code: Annotated[
        list[str] | None, typer.Option(help="With --exclude: drop the samples with this code (repeatable).")
    ] = None,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", help="text summary, JSON report, or GitHub annotations on stdout.")
    ] = OutputFormat.text,
    ids_column: Annotated[str | None, typer.Option(help="Column with the whole sequence [input_ids].")] = None,
    prompt_column: Annotated[str | None, typer.Option(help="Column with prompt ids [prompt_ids].")] = None,
    output_column: Annotated[str | None, typer.Option(help="Column with completion ids [output_ids].")] = None,
    mask_column: Annotated[str | None, typer.Option(help="Column with the loss mask [loss_mask].")] = None,
    id_column: Annotated[str | None, typer.Option(help="Column with sample ids [sample_id].")] = None,
    category_column: Annotated[str | None, typer.Option(help="Column with categories [category].")] = None,
    decode: Annotated[
        int, typer.Option(help="Decode up to N flagged samples per code (needs --tokenizer).", min=0)
    ] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No terminal summary.")] = False,
    progress: Annotated[bool, typer.Option(help="Progress bar on stderr (terminals only).")] = True,
) -> None:
    """Scan a corpus: per-category statistics, boundary-token counts and every anomalous sample."""
    with user_errors():
        from .api import load_profile
        from .drift import compare
        from .errors import UsageError
        from .report import Report

        cfg = load_config(config_file)
        paths = paths or cfg.paths
        if not paths:
            raise UsageError("no input paths given (pass PATHS or set `paths` in tokscan.toml)")
        columns = {
            **cfg.columns,
            **_columns(
                input_ids=ids_column,
                prompt_ids=prompt_column,
                output_ids=output_column,
                loss_mask=mask_column,
                sample_id=id_column,
                category=category_column,
            ),
        }
        fail_level = fail_on.value if fail_on else (cfg.fail_on or "error")
        base = Report.load(baseline) if baseline is not None else None
        t0 = time.perf_counter()
        report = scan_with_progress(
            paths,
            progress and not quiet and fmt is OutputFormat.text,
            profile=profile if profile is not None else (cfg.profile or "kimi-k2"),
            tokenizer=tokenizer or cfg.tokenizer,
            columns=columns,
            threads=threads if threads is not None else (cfg.threads or 0),
            severities=cfg.severities(),
        )
        seconds = time.perf_counter() - t0
        if decode:
            from .forensics import decode_flagged, load_tokenizer

            tok_dir = tokenizer or cfg.tokenizer
            if tok_dir is None:
                raise UsageError("--decode needs --tokenizer DIR (or `tokenizer` in tokscan.toml)")
            prof = load_profile(profile if profile is not None else (cfg.profile or "kimi-k2"), tok_dir)
            report.data["decoded"] = decode_flagged(report, paths, load_tokenizer(tok_dir), decode, columns, prof)
        drifts = compare(base, report, cfg.drift) if base is not None else None
        to_stdout = (json_out is not None and str(json_out) == "-") or fmt is OutputFormat.json
        if json_out is not None and str(json_out) != "-":
            report.write_json(json_out)
        if to_stdout:
            sys.stdout.write(report.to_json() + "\n")
        emit_ci_outputs(report, fail_level, cfg, drifts, junit_out, fmt)
        if html_out is not None:
            from .html import render

            html_out.write_text(render(report, fail_level, cfg.policy))
        if exclude is not None:
            from .clean import selected, write_exclusions

            drop = selected(report, fail_level, exclude_code or (), cfg.policy)
            kind = write_exclusions(drop, exclude)
            if not quiet and fmt is OutputFormat.text and not to_stdout:
                out.print(f"exclusion list: {len(drop)} sample(s) by {kind} -> {exclude}", highlight=False)
        elif exclude_code:
            raise UsageError("--exclude-code needs --exclude FILE")
        if not quiet and fmt is OutputFormat.text and not to_stdout:
            print_summary(report, out, fail_level, seconds, cfg.policy)
            if "decoded" in report.data:
                print_decoded(report.data["decoded"], out)
            if drifts is not None:
                print_drift(drifts, out, baseline)
        code = report.exit_code(fail_level, cfg.policy)
        raise typer.Exit(1 if code or drifts else 0)


@app.command()
def diff(
    base: Annotated[Path, typer.Argument(help="The baseline JSON report (the last good corpus).")],
    new: Annotated[Path, typer.Argument(help="The new JSON report.")],
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the drift findings as JSON ('-': stdout).")
    ] = None,
    config_file: Annotated[Path | None, typer.Option("--config", help="Config file with [drift] thresholds.")] = None,
    junit_out: Annotated[Path | None, typer.Option("--junit", help="Write a JUnit XML report here.")] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", help="text table, JSON, or GitHub annotations.")] = (
        OutputFormat.text
    ),
) -> None:
    """Compare two reports: counts, length distributions, special-token and anomaly rates. Exit 1 on drift."""
    import json

    with user_errors():
        from . import ciformat
        from .drift import compare, to_json
        from .report import Report

        cfg = load_config(config_file)
        b, n = Report.load(base), Report.load(new)
        drifts = compare(b, n, cfg.drift)
        doc = json.dumps({"base": str(base), "new": str(new), "drift": to_json(drifts)}, indent=2)
        if json_out is not None:
            if str(json_out) == "-":
                sys.stdout.write(doc + "\n")
            else:
                json_out.write_text(doc + "\n")
        if fmt is OutputFormat.json and (json_out is None or str(json_out) != "-"):
            sys.stdout.write(doc + "\n")
        if junit_out is not None:
            junit_out.write_text(ciformat.junit(n, "never", cfg.policy, drifts))
        if fmt is OutputFormat.github:
            sys.stdout.write(ciformat.github(n, "never", cfg.policy, drifts))
        if fmt is OutputFormat.text and (json_out is None or str(json_out) != "-"):
            print_drift(drifts, out, base)
        raise typer.Exit(1 if drifts else 0)


SEGMENT_STYLE = {
    "system": "magenta",
    "user": "green",
    "assistant": "blue",
    "tool": "yellow",
    "header": "bold white on grey23",
    "thinking": "italic cyan",
    "response": "bright_white",
    "tool_call": "bold yellow",
    "other": "dim",
}


@app.command()
def show(
    path: Annotated[list[str], typer.Argument(help="The corpus (as given to `tokscan scan`).")],
    sample_id: Annotated[str | None, typer.Option("--sample-id", help="The sample's id.")] = None,
    row: Annotated[int | None, typer.Option(help="The sample's row in scan order (as in the report).")] = None,
    tokenizer: Annotated[Path | None, typer.Option(help="Tokenizer dir (tokenizer.json) to decode with.")] = None,
    prompts: Annotated[Path | None, typer.Option(help="prompts.jsonl the samples were generated from.")] = None,
    profile: Annotated[str, typer.Option("--profile", "-p", help="Built-in profile name or a TOML file.")] = "kimi-k2",
    raw: Annotated[bool, typer.Option(help="Print token ids beside the text.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the same as JSON.")] = False,
) -> None:
    """Show one sample: its structure, anomalies with positions, and the decoded sequence by segment."""
    import json

    from .api import load_profile
    from .errors import UsageError
    from .forensics import Corpus, describe, explain, load_tokenizer, prompt_record

    with user_errors():
        if (sample_id is None) == (row is None):
            raise UsageError("give exactly one of --sample-id or --row")
        corpus = Corpus(path)
        target = corpus.find_id(sample_id) if sample_id is not None else int(row)  # type: ignore[arg-type]
        sample = corpus.fetch(target)
        explain(sample, load_profile(profile, tokenizer))
        tok = load_tokenizer(tokenizer) if tokenizer is not None else None
        doc = describe(sample, tok, raw)
        record, how = prompt_record(prompts, sample) if prompts is not None else (None, "")
        if prompts is not None:
            doc["prompt_record"] = {"match": how, "record": record}
        if as_json:
            sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
            return
        render_sample(doc, record, how)


def render_sample(doc: dict, record: dict | None, how: str) -> None:
    from rich.panel import Panel
    from rich.text import Text

    L = doc["lengths"]
    out.print(
        f"[bold]sample {doc['sample_id'] if doc['sample_id'] is not None else '-'}[/] · row {doc['row']} · "
        f"{doc['source']} · category {doc['category']}"
    )
    out.print(
        f"lengths: prompt {L['prompt']} · thinking {L['thinking']} · response {L['response']} · total {L['total']}"
    )
    if doc["codes"]:
        for code in doc["codes"]:
            pos = doc["positions"].get(code)
            out.print(f"[bold red]{code}[/]" + (f" at token {pos}" if pos is not None else ""))
    else:
        out.print("[green]no per-sample anomalies[/] (corpus-wide codes need `tokscan scan`)")
    if how:
        out.print(f"prompt record: {how}")
        for m in (record or {}).get("messages", []):
            out.print(Panel(str(m.get("content", "")), title=str(m.get("role", "?")), title_align="left"))
    body = Text()
    for seg in doc["segments"]:
        style = SEGMENT_STYLE.get(seg["kind"], "")
        body.append(f"[{seg['kind']} {seg['start']}:{seg['end']}] ", style="dim")
        body.append(seg.get("text", " ".join(map(str, seg.get("ids", [])))), style=style)
        if "text" in seg and "ids" in seg:
            body.append(f"  {seg['ids']}", style="dim")
        body.append("\n")
    out.print(Panel(body, title="sequence", title_align="left"))
    for code, ex in doc["excerpts"].items():
        if "at" in ex:
            line = Text(f"{code} @ {ex['position']}: …")
            line.append(ex["before"])
            line.append(ex["at"] or "∅", style="bold white on red")
            line.append(ex["after"] + "…")
        else:
            line = Text(f"{code} @ {ex['position']}: {ex['ids_before']} [{ex['id_at']}] {ex['ids_after']}")
        out.print(line)


@app.command()
def align(
    path: Annotated[list[str], typer.Argument(help="The corpus (as given to `tokscan scan`).")],
    prompts: Annotated[Path, typer.Option(help='prompts.jsonl: one {"messages": [...], "tools": ...} per line.')],
    tokenizer: Annotated[Path, typer.Option(help="Tokenizer dir with a chat template.")],
    chat_template: Annotated[
        Path | None, typer.Option(help="A Jinja chat template file, for tokenizers without one.")
    ] = None,
    workers: Annotated[int, typer.Option(help="Rendering processes (0 = one per core).", min=0)] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Check that every sample's prompt is exactly the chat-template rendering of its prompt record."""
    import json

    from .align import align as run_align

    with user_errors():
        r = run_align(path, prompts, str(tokenizer), chat_template, workers or None)
        if as_json:
            sys.stdout.write(json.dumps(r.to_json(), indent=2, ensure_ascii=False) + "\n")
        else:
            out.print(f"{r.n_samples:,} samples, {r.n_records:,} prompt records, matched by {r.matched_by}")
            out.print(
                f"aligned: {r.aligned:,} · mismatched: {len(r.mismatches):,} · without a record: {len(r.missing):,}"
            )
            for s in r.shifts:
                out.print(f"[bold red]{s['message']}[/]")
            for m in r.mismatches[:10]:
                who = m["sample_id"] if m["sample_id"] is not None else f"#{m['row']}"
                out.print(f"[bold]{who}[/] differs from record {m['record']} at token {m['first_difference']}:")
                out.print(f"  sample:   {m['sample_text']!r}", highlight=False)
                out.print(f"  rendered: {m['rendered_text']!r}", highlight=False)
            if len(r.mismatches) > 10:
                out.print(f"… and {len(r.mismatches) - 10:,} more (use --json)")
            out.print("[bold green]ALIGNED[/]" if r.ok else "[bold red]MISALIGNED[/]")
        raise typer.Exit(0 if r.ok else 1)


class DemoLayout(str, Enum):
    deepseek = "deepseek"
    kimi = "kimi"


@app.command()
def demo(
    directory: Annotated[Path, typer.Argument(help="Where to write the demo corpus.")] = Path("tokscan-demo"),
    layout: Annotated[
        DemoLayout,
        typer.Option(help="deepseek: real text through the DeepSeek-V4 tokenizer; kimi: synthetic K2.5 ids."),
    ] = DemoLayout.deepseek,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """Write a small corpus with a sample of every anomaly, scan it and print the summary."""
    from . import demo as demo_mod

    with user_errors():
        path, profile = demo_mod.write_demo(directory, layout.value, seed)
        out.print(f"Demo corpus ({layout.value} layout) written to [bold]{path}[/]; scanning it:\n")
        t0 = time.perf_counter()
        tok = demo_mod.demo_tokenizer(layout.value)
        report = run_scan([str(path)], profile=profile, tokenizer=tok)
        print_summary(report, out, "error", time.perf_counter() - t0)
        json_path = directory / "report.json"
        report.write_json(json_path)
        again = f"tokscan scan {path} --profile {profile}" + (f" --tokenizer {tok}" if tok else "")
        out.print(f"\nJSON report: {json_path}  ·  re-run with: {again}")


@app.command()
def clean(
    paths: Annotated[list[str], typer.Argument(help="The corpus, exactly as it was scanned.")],
    report_path: Annotated[Path, typer.Option("--report", help="The JSON report of a scan of PATHS.")],
    out_dir: Annotated[Path, typer.Option("--out", help="New directory for the cleaned copy.")],
    fail_on: Annotated[
        FailOn | None, typer.Option(help="Drop samples with a code at or above this severity [error].")
    ] = None,
    code: Annotated[
        list[str] | None, typer.Option("--code", help="Drop samples with this code instead (repeatable).")
    ] = None,
    config_file: Annotated[Path | None, typer.Option("--config", help="Config file ([policy] ignores).")] = None,
) -> None:
    """Write a copy of the corpus without the flagged samples (same layout), plus a manifest of what was
    removed. The source is never modified."""
    with user_errors():
        from .clean import MANIFEST
        from .clean import clean as run_clean
        from .report import Report

        cfg = load_config(config_file)
        report = Report.load(report_path)
        level = fail_on.value if fail_on else (cfg.fail_on or "error")
        m = run_clean(paths, report, out_dir, fail_on=level, codes=code or (), policy=cfg.policy, columns=cfg.columns)
        removed = len(m["removed"])
        out.print(
            f"kept {m['kept']} of {m['kept'] + removed} samples ({removed} removed) in {len(m['inputs'])} file(s) "
            f"-> {out_dir}  ·  manifest: {out_dir / MANIFEST}",
            highlight=False,
        )


@app.command()
def profiles() -> None:
    """List the built-in profiles."""
    with user_errors():
        for name in _core.builtin_profiles():
            p = _core.Profile.load(name)
            out.print(f"[bold]{name}[/]  vocab_size={p.vocab_size}  {len(p.special_tokens)} named special tokens")


@app.command()
def codes() -> None:
    """List the anomaly codes with their default severities."""
    for name, _bit, sev, desc in _core.codes():
        out.print(f"[bold]{name:<22}[/] {sev:<8} {desc}", highlight=False)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
