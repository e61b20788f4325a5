"""The `tokscan` command line: one module per command, registered on one Typer app."""

# Each module registers its command; `tokscan -h` lists them in this order.
# isort: off
from . import scan, show, align, diff, clean, convert, profiles, demo  # noqa: F401

# isort: on
from .app import app
from .scan import ScanArgs, execute

__all__ = ["ScanArgs", "app", "execute", "main"]


def main() -> None:
    app()
