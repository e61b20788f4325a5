"""Exceptions raised by tokscan. Every error the Rust core reports maps to one of these."""

from __future__ import annotations


class TokscanError(Exception):
    """Base class of every tokscan error."""


class UsageError(TokscanError, ValueError):
    """Wrong arguments: nothing to scan, an unknown column role or severity, conflicting options."""


class InputError(TokscanError):
    """An input file exists but cannot be read as a valid corpus (bad Parquet, bad .npy, bad offsets)."""


class InputNotFoundError(InputError, FileNotFoundError):
    """An input path does not exist."""


class ColumnError(InputError):
    """A column that was asked for (or needed) is missing or has the wrong type."""


class ProfileError(TokscanError, ValueError):
    """An unknown profile, an invalid profile file, or a token the profile needs is missing."""


class ScanInterrupted(TokscanError):
    """The scan was cancelled (Ctrl-C)."""


class InternalError(TokscanError):
    """A bug in tokscan (a Rust panic caught at the boundary). Please report it."""


class ReportError(TokscanError, ValueError):
    """A report file that cannot be read (bad JSON or an unknown schema version)."""


def did_you_mean(word: str, choices) -> str:
    """`; did you mean 'X'?` for the choice closest to a mistyped `word` (a unique prefix, else a close
    spelling), or "" when none is close: the hint every closed vocabulary gives (codes, profiles, levels)."""
    import difflib

    valid = sorted(choices)
    close = [c for c in valid if c.startswith(word)] if word else []
    if len(close) != 1:
        close = difflib.get_close_matches(word, valid, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def install_hint(extra: str) -> str:
    """The command that installs the optional dependency group `extra` into this environment: its requirements
    as tokscan's own metadata lists them. No package named tokscan is published, so installing the extra by
    the package's name would install nothing, or someone else's package."""
    import shlex
    import sys
    from importlib import metadata

    try:
        listed = metadata.requires("tokscan") or []
    except metadata.PackageNotFoundError:
        listed = []
    reqs = [r.split(";")[0].strip() for r in listed if f"extra == '{extra}'" in r.replace('"', "'")]
    if not reqs:
        return f"pip install -e '.[{extra}]' in the tokscan checkout"
    return f"{shlex.quote(sys.executable)} -m pip install " + " ".join(shlex.quote(r.replace(" ", "")) for r in reqs)


__all__ = [
    "ColumnError",
    "InputError",
    "InputNotFoundError",
    "InternalError",
    "ProfileError",
    "ReportError",
    "ScanInterrupted",
    "TokscanError",
    "UsageError",
]
