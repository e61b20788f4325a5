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
