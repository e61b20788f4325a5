"""`tokscan vocab`: a scan that also writes the EAGLE-3 draft-vocabulary mapping of the corpus's top-K
loss-bearing ids (the file formats are in `tokscan.vocab`)."""

import sys
from pathlib import Path
from typing import Annotated

import typer

from .app import (
    CategoryColumnOpt,
    ChatTemplateOpt,
    ConfigOpt,
    FailOn,
    HtmlOpt,
    IdColumnOpt,
    IdsColumnOpt,
    JsonOpt,
    MaskColumnOpt,
    OutputColumnOpt,
    ProfileOpt,
    PromptColumnOpt,
    PromptsOpt,
    QuietOpt,
    TokenizerOpt,
    TrustRemoteCodeOpt,
    app,
    columns_from,
    user_errors,
)
from .scan import ScanArgs, execute


@app.command()
def vocab(
    paths: Annotated[
        list[str] | None,
        typer.Argument(metavar="PATHS", help="The corpus, as for `tokscan scan` [config: paths]."),
    ] = None,
    size: Annotated[int, typer.Option(metavar="K", help="Draft-vocabulary size (e.g. 32000).", min=1)] = 32000,
    out: Annotated[
        Path,
        typer.Option(
            metavar="FILE",
            help="Where to write the mapping: .pt (torch.save {'d2t', 't2d'}, as SpecForge), .npz or .json.",
        ),
    ] = Path("draft_vocab.pt"),
    draft_vocab: Annotated[
        str | None,
        typer.Option(metavar="K,K,...", help="Also report the coverage of these sizes [default: K]."),
    ] = None,
    profile: ProfileOpt = None,
    tokenizer: TokenizerOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    json_out: Annotated[Path | None, JsonOpt("the report")] = None,
    html_out: HtmlOpt = None,
    prompts: PromptsOpt = None,
    chat_template: ChatTemplateOpt = None,
    threads: Annotated[int | None, typer.Option(metavar="N", help="Worker threads (0 = one per core).", min=0)] = None,
    fail_on: Annotated[
        FailOn | None, typer.Option(help="Exit 1 when anything at or above this severity is found [error].")
    ] = None,
    config_file: ConfigOpt = None,
    ids_column: IdsColumnOpt = None,
    prompt_column: PromptColumnOpt = None,
    output_column: OutputColumnOpt = None,
    mask_column: MaskColumnOpt = None,
    id_column: IdColumnOpt = None,
    category_column: CategoryColumnOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Scan a corpus and write the draft-vocabulary mapping of its K most frequent loss-bearing ids."""
    with user_errors():
        code = execute(
            ScanArgs(
                paths=paths or [],
                profile=profile,
                tokenizer=tokenizer,
                trust_remote_code=trust_remote_code,
                json_out=json_out,
                html_out=html_out,
                prompts=prompts,
                chat_template=chat_template,
                threads=threads,
                fail_on=fail_on.value if fail_on else None,
                config=config_file,
                columns=columns_from(
                    input_ids=ids_column,
                    prompt_ids=prompt_column,
                    output_ids=output_column,
                    loss_mask=mask_column,
                    sample_id=id_column,
                    category=category_column,
                ),
                quiet=quiet,
                draft_vocab=draft_vocab if draft_vocab is not None else str(size),
                vocab_size=size,
                vocab_out=out,
                argv=["tokscan", *sys.argv[1:]],
            )
        )
    raise typer.Exit(code)
