"""`tokscan convert`: any readable corpus as Parquet or NumPy."""

from pathlib import Path
from typing import Annotated

import typer

from .app import (
    CategoryColumnOpt,
    ConfigOpt,
    IdColumnOpt,
    IdsColumnOpt,
    MaskColumnOpt,
    OutputColumnOpt,
    PromptColumnOpt,
    QuietOpt,
    app,
    corpus_columns,
    err,
    out,
    user_errors,
)


@app.command()
def convert(
    paths: Annotated[list[str], typer.Argument(metavar="PATHS", help="The corpus, in any format tokscan reads.")],
    to: Annotated[str, typer.Option("--to", metavar="parquet|numpy", help="Output format.")],
    out_dir: Annotated[Path, typer.Option("--out", metavar="DIR", help="New directory for the converted corpus.")],
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    config_file: ConfigOpt = None,
    quiet: QuietOpt = False,
    ids_column: IdsColumnOpt = None,
    prompt_column: PromptColumnOpt = None,
    output_column: OutputColumnOpt = None,
    mask_column: MaskColumnOpt = None,
    id_column: IdColumnOpt = None,
    category_column: CategoryColumnOpt = None,
) -> None:
    """Write a corpus (Parquet, Arrow IPC, Megatron, JSONL, NumPy) as Parquet or a NumPy corpus directory, keeping
    ids, loss mask, sample ids and categories. The source is only read."""
    with user_errors():
        import sys

        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        from ..convert import convert as run_convert

        columns = corpus_columns(
            config_file, ids_column, prompt_column, output_column, mask_column, id_column, category_column
        )
        show = not no_progress and not quiet and sys.stderr.isatty()
        bar = Progress(
            TextColumn("converting"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=err.console,  # type: ignore[attr-defined]
            disable=not show,
        )
        with bar:
            task = bar.add_task("convert", total=None)
            result = run_convert(
                paths, to, out_dir, columns, progress=lambda done, n: bar.update(task, completed=done, total=n)
            )
        if not quiet:
            out.print(
                f"wrote {result['samples']} samples ({result['tokens']} tokens) as {to} -> {out_dir}", highlight=False
            )
