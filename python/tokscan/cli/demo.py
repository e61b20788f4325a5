"""`tokscan demo`: a small corpus with a sample of every anomaly, scanned."""

import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from .app import app, out, user_errors

DECODED_PER_CODE = 2  # flagged samples per code decoded into the demo's HTML page (`scan --decode N`)


class DemoLayout(str, Enum):
    deepseek = "deepseek"
    kimi = "kimi"


@app.command()
def demo(
    directory: Annotated[
        Path, typer.Argument(metavar="[DIR]", help="Where to write the demo corpus [tokscan-demo].")
    ] = Path("tokscan-demo"),
    layout: Annotated[
        DemoLayout,
        typer.Option(help="deepseek: real text through the DeepSeek-V4 tokenizer; kimi: synthetic K2.5 ids."),
    ] = DemoLayout.deepseek,
    seed: Annotated[int, typer.Option(metavar="N", help="Random seed.")] = 0,
) -> None:
    """Write a small corpus with a sample of every anomaly, scan it and print the summary."""
    from .. import demo as demo_mod
    from ..api import load_profile
    from ..api import scan as run_scan
    from ..report.terminal import print_summary
    from ..samples.corpus import decode_flagged
    from ..samples.tokenizer import load_tokenizer

    with user_errors():
        path, profile = demo_mod.write_demo(directory, layout.value, seed)
        out.print(f"Demo corpus ({layout.value} layout) written to [bold]{path}[/]; scanning it:\n")
        t0 = time.perf_counter()
        tok = demo_mod.demo_tokenizer(layout.value)
        report = run_scan(
            [str(path)], profile=profile, tokenizer=tok, command=["tokscan", *sys.argv[1:]], keep_corpus=True
        )
        seconds = time.perf_counter() - t0
        print_summary(report, out, "error", seconds)
        # The page shows what `scan --decode` gives: flagged samples decoded around the flagged token.
        report.data["decoded"] = decode_flagged(
            report,
            report.corpus,
            load_tokenizer(tok) if tok else None,
            DECODED_PER_CODE,
            None,
            load_profile(profile, tok),
        )
        json_path = directory / "report.json"
        report.write_json(json_path)
        html_path = directory / "report.html"
        report.write_html(html_path, "error")  # the run as the core recorded it (`run`)
        again = f"tokscan scan {path} --profile {profile}" + (f" --tokenizer {tok}" if tok else "")
        out.print(f"\nJSON report: {json_path}  ·  HTML report: {html_path}", highlight=False)
        out.print(f"re-run with: {again}", highlight=False, soft_wrap=True)
