"""`tokscan profiles` and `tokscan codes`: what the built-in catalogue holds."""

from __future__ import annotations

import typer

from .. import _core
from .app import app, out, user_errors

profiles_app = typer.Typer(
    help="List the built-in profiles and their aliases.",
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
            out.print(
                f"[bold]{name}[/]  vocab_size={p.vocab_size}  {len(p.special_tokens)} named special tokens{also}",
                highlight=False,
            )
        out.print("or a TOML profile file: --profile ./my-model.toml (see README, Profiles)", highlight=False)


@app.command()
def codes() -> None:
    """List the anomaly codes with their default severities."""
    for name, _bit, sev, desc in _core.codes():
        out.print(f"[bold]{name:<22}[/] {sev:<8} {desc}", highlight=False)
