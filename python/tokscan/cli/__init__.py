"""The `tokscan` command line: one module per command, registered on one Typer app."""

# Each module registers its command; `tokscan -h` lists them in this order.
# isort: off
from . import scan, vocab, show, align, diff, clean, convert, profiles, demo  # noqa: F401

# isort: on
from .app import app
from .scan import ScanArgs, execute

__all__ = ["ScanArgs", "app", "execute", "main"]


def main() -> None:
    """Runs the app; a usage error click finds (`--threads abc`, `--fail-on bogus`) is one line on stderr, exit
    2, like every other error (click would print the usage, a hint and the error)."""
    import sys

    try:
        code = app(standalone_mode=False)
    except Exception as e:
        # Typer may vendor click, so its exception classes are recognised by name.
        kinds = {c.__name__ for c in type(e).__mro__}
        if "UsageError" in kinds and "NoArgsIsHelpError" not in kinds:
            print(f"tokscan: error: {e.format_message()}", file=sys.stderr)  # type: ignore[attr-defined]
            sys.exit(2)
        if "ClickException" in kinds:
            e.show()  # type: ignore[attr-defined]
            sys.exit(e.exit_code)  # type: ignore[attr-defined]
        if "Abort" in kinds:
            sys.exit(130)
        raise
    sys.exit(code if isinstance(code, int) else 0)
