"""`tokscan profiles` (and `profiles check`) and `tokscan codes`: what the built-in catalogue holds, and whether
a profile fits a model's real tokenizer and chat template."""

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from .. import _core
from .app import (
    JsonOpt,
    QuietOpt,
    TrustRemoteCodeOpt,
    app,
    check_output,
    err,
    out,
    stdout_taken,
    user_errors,
    write_output,
)

profiles_app = typer.Typer(
    help="List the built-in profiles and their aliases; `profiles check` tests one against a real tokenizer.",
    invoke_without_command=True,
    no_args_is_help=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(profiles_app, name="profiles")


@profiles_app.callback()
def profiles(ctx: typer.Context) -> None:
    """List the built-in profiles and their aliases."""
    if ctx.invoked_subcommand is not None:
        return
    with user_errors():
        aliases: dict[str, list[str]] = {}
        for alias, name in _core.profile_aliases():
            aliases.setdefault(name, []).append(alias)
        for name in _core.builtin_profiles():
            p = _core.Profile.load(name)
            also = f"  (also: {', '.join(aliases[name])})" if name in aliases else ""
            # u32::MAX is the core's "no vocabulary bound" (the `plain` profile): say so instead of the number.
            vocab = "any" if p.vocab_size >= 2**32 - 1 else f"{p.vocab_size:,}"
            out.print(
                f"[bold]{name}[/]  vocab_size={vocab}  {len(p.special_tokens)} named special tokens{also}",
                highlight=False,
            )
        out.print("or a TOML profile file: --profile ./my-model.toml (see docs/guide/profiles.md)", highlight=False)


@profiles_app.command("check")
def check(
    profile: Annotated[str, typer.Argument(metavar="PROFILE", help="Built-in profile name or a TOML profile file.")],
    tokenizer: Annotated[
        Path,
        typer.Option(
            metavar="DIR",
            help="The model's tokenizer directory (or tokenizer.json); its chat template renders the probes.",
        ),
    ],
    chat_template: Annotated[
        Path | None, typer.Option(metavar="FILE", help="A Jinja chat template, instead of the tokenizer's own.")
    ] = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    json_out: Annotated[Path | None, JsonOpt("the result")] = None,
    quiet: QuietOpt = False,
) -> None:
    """Check that a profile fits a tokenizer and its chat template.

    Renders probe conversations (system or not, multi-turn, thinking on and off, tool calls and results)
    through the template, checks them with the profile and reports every disagreement. Exit 0 when the profile
    fits, 1 when it does not."""
    from ..outputs import profile_file, refuse_clobbering
    from ..profile_check import check as run_check

    with user_errors():
        check_output(json_out, "--json")
        refuse_clobbering([("--json", json_out)], reads=[profile_file(profile), tokenizer, chat_template])
        r = run_check(profile, str(tokenizer), chat_template, trust_remote_code)
        if json_out is not None:
            write_output(json_out, json.dumps(r.to_json(), indent=2, ensure_ascii=False))
        if not quiet and not stdout_taken(json_out):
            print_check(r)
    raise typer.Exit(0 if r.ok else 1)


@profiles_app.command("infer")
def infer(
    tokenizer: Annotated[
        Path,
        typer.Option(metavar="DIR", help="The model's tokenizer directory (or tokenizer.json) with its chat template."),
    ],
    chat_template: Annotated[
        Path | None, typer.Option(metavar="FILE", help="A Jinja chat template, instead of the tokenizer's own.")
    ] = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    name: Annotated[str | None, typer.Option(metavar="NAME", help="Profile name [the directory's name].")] = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", metavar="FILE", help="Write the TOML draft here (default: stdout).")
    ] = None,
    quiet: QuietOpt = False,
) -> None:
    """Draft a TOML profile from a tokenizer and its chat template, then check the draft.

    The same probe conversations as `profiles check` are rendered and read: role tokens and names, header
    separator or suffix, end of turn, think tokens, tool-call tokens, BOS/EOS/PAD. The draft is printed (or
    written to --out) with what had to be guessed, then checked like `profiles check`: exit 0 when it fits, 1
    when it does not."""
    from ..outputs import refuse_clobbering
    from ..profile_check import infer as run_infer

    with user_errors():
        check_output(out_file, "--out")
        refuse_clobbering([("--out", out_file)], reads=[tokenizer, chat_template])
        draft = run_infer(str(tokenizer), chat_template, trust_remote_code, name)
        write_output(out_file if out_file is not None else Path("-"), draft.toml)
        if not quiet:
            print_check(draft.check, err)
    raise typer.Exit(0 if draft.check.ok else 1)


def print_check(r, console=out) -> None:
    console.print(f"profile [bold]{r.profile}[/] · tokenizer {r.tokenizer} · template: {r.template}", highlight=False)
    if r.token_problems:
        console.print(f"[bold red]token ids: {len(r.token_problems)} disagreement(s)[/]")
        for line in r.token_problems:
            console.print(f"  {line}", highlight=False, markup=False)
    else:
        console.print("token ids: every profile token has the tokenizer's id")
    for p in r.probes:
        size = f"prompt {p['prompt_tokens']}" if "prompt_tokens" in p else ""
        if p.get("completion_tokens") is not None:
            size += f" + completion {p['completion_tokens']} tokens"
        elif size:
            size += " tokens (prompt only)"
        verdict = "[green]ok[/]" if p["ok"] else f"[bold red]FAIL ({len(p['problems'])})[/]"
        console.print(f"probe {p['name']:<13} {verdict}  {size}  [dim]{p['description']}[/]", highlight=False)
        for line in p["problems"]:
            console.print(f"  - {line}", highlight=False, markup=False, soft_wrap=True)
    # A note usually holds for several probes (the template's habit, not one probe's): each is said once.
    notes: dict[str, list[str]] = {}
    for p in r.probes:
        for line in p["notes"]:
            notes.setdefault(line, []).append(p["name"])
    for line, names in notes.items():
        where = f"probe {names[0]}" if len(names) == 1 else f"probes {', '.join(names)}"
        console.print(f"note ({where}): {line}", style="dim", highlight=False, markup=False, soft_wrap=True)
    failed = [p["name"] for p in r.probes if not p["ok"]]
    if r.ok:
        console.print(f"[bold green]FITS[/]: profile {r.profile} parses every probe as the template rendered it")
    else:
        what = []
        if r.token_problems:
            what.append(f"{len(r.token_problems)} token id disagreement(s)")
        if failed:
            what.append(f"{len(failed)} failing probe(s): {', '.join(failed)}")
        console.print(f"[bold red]DOES NOT FIT[/]: {'; '.join(what)}", highlight=False)


@app.command()
def codes(
    markdown: Annotated[
        bool,
        typer.Option("--markdown", help="The full table in Markdown, as in docs/reference/codes.md (with scopes)."),
    ] = False,
    report_schema: Annotated[
        bool,
        typer.Option(
            "--report-schema", help="The JSON report's fields in Markdown, as in docs/reference/report-schema.md."
        ),
    ] = False,
) -> None:
    """List the anomaly codes with their default severities."""
    if report_schema:
        sys.stdout.write(_core.report_schema_markdown())
        return
    if markdown:
        sys.stdout.write(_core.codes_markdown())
        return
    for name, _bit, sev, desc in _core.codes():
        out.print(f"[bold]{name:<22}[/] {sev:<8} {desc}", highlight=False)
