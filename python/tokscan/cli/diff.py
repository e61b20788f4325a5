"""`tokscan diff`: drift between two reports."""

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..outputs import write_file
from .app import (
    ConfigOpt,
    JsonOpt,
    OutputFormat,
    QuietOpt,
    app,
    check_output,
    err,
    out,
    refuse_shared_stdout,
    stdout_taken,
    user_errors,
    write_output,
)


@app.command()
def diff(
    base: Annotated[Path, typer.Argument(metavar="BASE", help="The baseline JSON report (the last good corpus).")],
    new: Annotated[Path, typer.Argument(metavar="NEW", help="The new JSON report.")],
    json_out: Annotated[Path | None, JsonOpt("the drift findings")] = None,
    config_file: ConfigOpt = None,
    junit_out: Annotated[Path | None, typer.Option("--junit", metavar="FILE", help="Write a JUnit XML report.")] = None,
    fmt: Annotated[OutputFormat, typer.Option("--format", help="text table, JSON, or GitHub annotations.")] = (
        OutputFormat.text
    ),
    quiet: QuietOpt = False,
) -> None:
    """Compare two reports: counts, length distributions, special-token and anomaly rates. Exit 1 on drift."""
    with user_errors():
        from ..config import discover, load_file
        from ..errors import UsageError
        from ..outputs import refuse_clobbering
        from ..report import Report, ci, read_as_report
        from ..report.drift import compare, to_json
        from ..report.terminal import print_drift

        if stdout_taken(json_out) and fmt is OutputFormat.github:
            raise UsageError("--format github and --json - both write to stdout; write the JSON to a file")
        to_stdout = refuse_shared_stdout([("--json", json_out), ("--junit", junit_out)], fmt, json_out)
        check_output(json_out, "--json")
        check_output(junit_out, "--junit")
        cfg = load_file(config_file) if config_file is not None else discover()
        refuse_clobbering([("--json", json_out), ("--junit", junit_out)], reads=[base, new, config_file or cfg.source])
        b, n = Report.load(base), Report.load(new)
        with read_as_report(f"{base}, {new}"):
            warning = profile_mismatch(b, n)
            drifts = compare(b, n, cfg.drift)
            junit = ci.junit(n, "never", cfg.policy, drifts) if junit_out is not None else None
            github = ci.github(n, "never", cfg.policy, drifts) if fmt is OutputFormat.github else None
        if warning and not quiet:
            err.print(f"[bold yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
        doc = json.dumps({"base": str(base), "new": str(new), "drift": to_json(drifts)}, indent=2)
        if json_out is not None:
            write_output(json_out, doc)
        elif fmt is OutputFormat.json:
            write_output(Path("-"), doc)
        if junit_out is not None and junit is not None:
            if stdout_taken(junit_out):
                write_output(junit_out, junit)
            else:
                write_file(junit_out, junit, "the JUnit report")
        if github is not None:
            sys.stdout.write(github)
        if fmt is OutputFormat.text and not quiet and not to_stdout:
            print_drift(drifts, out, base)
    raise typer.Exit(1 if drifts else 0)


def profile_mismatch(base, new) -> str | None:
    """Why two reports may not be comparable: different profiles, or the same one resolved differently (another
    tokenizer, or none on one side): special-token counts and several codes then differ for that reason alone."""
    pb, pn = base.data["profile"], new.data["profile"]
    if pb.get("name") != pn.get("name"):
        return f"the reports used different profiles ({pb.get('name')} vs {pn.get('name')}): drift may only be that"
    if pb != pn:
        tb, tn = (("with" if p.get("spelled_special") is not None else "without") for p in (pb, pn))
        how = f" (base {tb} a tokenizer vocabulary, new {tn})" if tb != tn else " (another --tokenizer or file?)"
        return f"profile {pn.get('name')} resolved differently in the two reports{how}: drift may only be that"
    return None
