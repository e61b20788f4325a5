"""`tokscan align`: is every sample's prompt exactly the chat-template rendering of its prompt record?"""

import json
from pathlib import Path
from typing import Annotated

import typer

from .app import (
    CategoryColumnOpt,
    ConfigOpt,
    IdColumnOpt,
    IdsColumnOpt,
    JsonOpt,
    MaskColumnOpt,
    OutputColumnOpt,
    PromptColumnOpt,
    QuietOpt,
    TrustRemoteCodeOpt,
    app,
    check_output,
    corpus_columns,
    out,
    stdout_taken,
    user_errors,
    write_output,
)


@app.command()
def align(
    path: Annotated[list[str], typer.Argument(metavar="PATHS", help="The corpus (as given to `tokscan scan`).")],
    prompts: Annotated[
        Path, typer.Option(metavar="FILE", help='prompts.jsonl: one {"messages": [...], "tools": ...} per line.')
    ],
    tokenizer: Annotated[
        Path,
        typer.Option(
            metavar="DIR",
            help="Tokenizer directory (its chat template: tokenizer_config.json or chat_template.jinja), "
            "or a tokenizer.json file.",
        ),
    ],
    chat_template: Annotated[
        Path | None, typer.Option(metavar="FILE", help="A Jinja chat template file, for tokenizers without one.")
    ] = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    workers: Annotated[int, typer.Option(metavar="N", help="Rendering processes (0 = one per core).", min=0)] = 0,
    json_out: Annotated[Path | None, JsonOpt("the result")] = None,
    quiet: QuietOpt = False,
    config_file: ConfigOpt = None,
    ids_column: IdsColumnOpt = None,
    prompt_column: PromptColumnOpt = None,
    output_column: OutputColumnOpt = None,
    mask_column: MaskColumnOpt = None,
    id_column: IdColumnOpt = None,
    category_column: CategoryColumnOpt = None,
) -> None:
    """Check that every sample's prompt is exactly the chat-template rendering of its prompt record."""
    from ..align import align as run_align

    with user_errors():
        check_output(json_out, "--json")
        columns = corpus_columns(
            config_file, ids_column, prompt_column, output_column, mask_column, id_column, category_column
        )
        r = run_align(
            path,
            prompts,
            str(tokenizer),
            chat_template,
            workers or None,
            trust_remote_code=trust_remote_code,
            columns=columns,
        )
        if json_out is not None:
            write_output(json_out, json.dumps(r.to_json(), indent=2, ensure_ascii=False))
        if not quiet and not stdout_taken(json_out):
            out.print(f"{r.n_samples:,} samples, {r.n_records:,} prompt records, matched by {r.matched_by}")
            out.print(
                f"aligned: {r.aligned:,} · mismatched: {len(r.mismatches):,} · without a record: {len(r.missing):,}"
            )
            for s in r.shifts:
                out.print(f"[bold red]{s['message']}[/]", highlight=False)
            for m in r.mismatches[:10]:
                who = m["sample_id"] if m["sample_id"] is not None else f"#{m['row']}"
                out.print(f"[bold]{who}[/] differs from record {m['record']} at token {m['first_difference']}:")
                out.print(f"  sample:   {m['sample_text']!r}", highlight=False)
                out.print(f"  rendered: {m['rendered_text']!r}", highlight=False)
            if len(r.mismatches) > 10:
                out.print(f"… and {len(r.mismatches) - 10:,} more (use --json FILE)")
            out.print("[bold green]ALIGNED[/]" if r.ok else "[bold red]MISALIGNED[/]")
    raise typer.Exit(0 if r.ok else 1)
