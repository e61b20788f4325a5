"""`tokscan clean`: a copy of the corpus without the flagged samples."""

from pathlib import Path
from typing import Annotated

import typer

from .app import (
    CategoryColumnOpt,
    ConfigOpt,
    FailOn,
    IdColumnOpt,
    IdsColumnOpt,
    MaskColumnOpt,
    OutputColumnOpt,
    PromptColumnOpt,
    QuietOpt,
    app,
    corpus_columns,
    out,
    user_errors,
    warn,
)


@app.command()
def clean(
    paths: Annotated[list[str], typer.Argument(metavar="PATHS", help="The corpus, exactly as it was scanned.")],
    report_path: Annotated[Path, typer.Option("--report", metavar="FILE", help="The JSON report of a scan of PATHS.")],
    out_dir: Annotated[
        str,
        typer.Option(
            "--out", metavar="DIR|URL", help="New directory (or empty s3://, gs://, az:// prefix) for the cleaned copy."
        ),
    ],
    fail_on: Annotated[
        FailOn | None, typer.Option(help="Drop samples with a code at or above this severity [the scan's].")
    ] = None,
    code: Annotated[
        list[str] | None,
        typer.Option("--code", metavar="CODE", help="Drop samples with this code instead (repeatable)."),
    ] = None,
    config_file: ConfigOpt = None,
    quiet: QuietOpt = False,
    ids_column: IdsColumnOpt = None,
    prompt_column: PromptColumnOpt = None,
    output_column: OutputColumnOpt = None,
    mask_column: MaskColumnOpt = None,
    id_column: IdColumnOpt = None,
    category_column: CategoryColumnOpt = None,
) -> None:
    """Write a copy of the corpus without the flagged samples (same layout), plus a manifest of what was
    removed. The source is never modified."""
    with user_errors():
        from ..clean import MANIFEST
        from ..clean import clean as run_clean
        from ..config import discover, load_file
        from ..report import Report

        cfg = load_file(config_file) if config_file is not None else discover()
        report = Report.load(report_path)
        # Unless told otherwise, the report is judged as the scan judged it (its recorded --fail-on and policy).
        level = fail_on.value if fail_on else cfg.fail_on
        policy = cfg.policy if cfg.source is not None else None
        columns = corpus_columns(
            config_file, ids_column, prompt_column, output_column, mask_column, id_column, category_column
        )
        from ..remote import is_url

        target: str | Path = out_dir if is_url(out_dir) else Path(out_dir)
        m = run_clean(paths, report, target, fail_on=level, codes=code or (), policy=policy, columns=columns)
        removed = len(m["removed"]) + m.get("removed_summarized", 0)
        manifest = f"{out_dir.rstrip('/')}/{MANIFEST}" if isinstance(target, str) else target / MANIFEST
        lost = m.get("not_copied", 0)
        left_out = f", {lost} malformed line(s) left out with a file that kept no sample" if lost else ""
        if not quiet:
            copied = f" (and {len(m['copied'])} other file(s) copied as they are)" if m.get("copied") else ""
            out.print(
                f"kept {m['kept']} of {m['samples']} samples ({removed} removed{left_out}) in {len(m['inputs'])} "
                f"file(s){copied} -> {out_dir}  ·  manifest: {manifest}",
                highlight=False,
                soft_wrap=not out.is_terminal,  # one line for a log or a pipe: the paths are not broken
            )
            for line in m.get("warnings", []):
                warn(line)
