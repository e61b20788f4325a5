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
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from . import _core
from .api import scan as run_scan
from .errors import TokscanError
from .render import print_summary

app = typer.Typer(
    name="tokscan",
    help="Scan token-id training corpora for chat-structure anomalies before you train on them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
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


def scan_with_progress(paths: list[str], show_progress: bool, **kwargs):
    if not (show_progress and err.is_terminal):
        # Still poll from this thread, so Ctrl-C cancels the scan promptly.
        return run_scan(paths, progress=lambda _p: None, **kwargs)
    with Progress(
        TextColumn("[bold]scanning"),
        BarColumn(),
        TextColumn("{task.completed:,.0f}/{task.total:,.0f} parts · {task.fields[samples]:,} samples"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task("scan", total=None, samples=0)

        def update(p: dict[str, int]) -> None:
            bar.update(task, total=p["units_total"] or None, completed=p["units_done"], samples=p["samples"])

        return run_scan(paths, progress=update, **kwargs)


@app.command()
def scan(
    paths: Annotated[
        list[str], typer.Argument(help="Parquet files, directories (recursive), globs, NumPy corpus dirs.")
    ],
    profile: Annotated[
        str, typer.Option("--profile", "-p", help="Built-in profile name or a TOML profile file.")
    ] = "kimi-k2",
    tokenizer: Annotated[
        Path | None,
        typer.Option(help="Tokenizer dir (tokenizer.json) to resolve the profile's token strings."),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the JSON report here ('-' for stdout).")
    ] = None,
    threads: Annotated[int, typer.Option(help="Worker threads (0 = one per core).", min=0)] = 0,
    fail_on: Annotated[
        FailOn, typer.Option(help="Exit 1 when anything at or above this severity is found.")
    ] = FailOn.error,
    ids_column: Annotated[str | None, typer.Option(help="Column with the whole sequence [input_ids].")] = None,
    prompt_column: Annotated[str | None, typer.Option(help="Column with prompt ids [prompt_ids].")] = None,
    output_column: Annotated[str | None, typer.Option(help="Column with completion ids [output_ids].")] = None,
    mask_column: Annotated[str | None, typer.Option(help="Column with the loss mask [loss_mask].")] = None,
    id_column: Annotated[str | None, typer.Option(help="Column with sample ids [sample_id].")] = None,
    category_column: Annotated[str | None, typer.Option(help="Column with categories [category].")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No terminal summary.")] = False,
    progress: Annotated[bool, typer.Option(help="Progress bar on stderr (terminals only).")] = True,
) -> None:
    """Scan a corpus: per-category statistics, boundary-token counts and every anomalous sample."""
    with user_errors():
        columns = _columns(
            input_ids=ids_column,
            prompt_ids=prompt_column,
            output_ids=output_column,
            loss_mask=mask_column,
            sample_id=id_column,
            category=category_column,
        )
        t0 = time.perf_counter()
        report = scan_with_progress(
            paths,
            progress and not quiet,
            profile=profile,
            tokenizer=tokenizer,
            columns=columns,
            threads=threads,
        )
        seconds = time.perf_counter() - t0
        to_stdout = json_out is not None and str(json_out) == "-"
        if json_out is not None:
            if to_stdout:
                sys.stdout.write(report.to_json() + "\n")
            else:
                report.write_json(json_out)
        if not quiet and not to_stdout:
            print_summary(report, out, fail_on.value, seconds)
        raise typer.Exit(report.exit_code(fail_on.value))


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
        report = run_scan([str(path)], profile=profile)
        print_summary(report, out, "error", time.perf_counter() - t0)
        json_path = directory / "report.json"
        report.write_json(json_path)
        out.print(f"\nJSON report: {json_path}  ·  re-run with: tokscan scan {path} --profile {profile}")


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
