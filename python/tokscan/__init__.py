"""tokscan: scan token-id training corpora for chat-structure anomalies before you train on them."""

from __future__ import annotations

from . import _core
from .api import load_profile, scan
from .errors import (
    ColumnError,
    InputError,
    InputNotFoundError,
    InternalError,
    ProfileError,
    ReportError,
    ScanInterrupted,
    TokscanError,
    UsageError,
)
from .report import Report

__version__ = _core.__version__

#: Anomaly code name -> bit *index* in a per-sample flag word: test `flags & (1 << CODES[c])`, or use CODE_MASKS.
CODES: dict[str, int] = {name: bit for name, bit, _sev, _desc in _core.codes()}
#: Anomaly code name -> its mask in a per-sample flag word (`flags & CODE_MASKS[c]`).
CODE_MASKS: dict[str, int] = {name: 1 << bit for name, bit in CODES.items()}
#: Anomaly code name -> (default severity, description).
CODE_INFO: dict[str, tuple[str, str]] = {name: (sev, desc) for name, _bit, sev, desc in _core.codes()}
#: Names of the built-in profiles.
PROFILES: list[str] = list(_core.builtin_profiles())

#: Loaded on first use: they pull in numpy, which `tokscan scan` does not need (start-up time of the CLI).
_LAZY = {
    "CheckResult": ".integrations.validate",
    "Validator": ".integrations.validate",
    "hf_annotate": ".integrations.hf",
    "hf_filter": ".integrations.hf",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tokscan' has no attribute {name!r}")


__all__ = [
    "CODES",
    "CODE_INFO",
    "CODE_MASKS",
    "PROFILES",
    "CheckResult",
    "ColumnError",
    "InputError",
    "InputNotFoundError",
    "InternalError",
    "ProfileError",
    "Report",
    "ReportError",
    "ScanInterrupted",
    "TokscanError",
    "UsageError",
    "Validator",
    "__version__",
    "hf_annotate",
    "hf_filter",
    "load_profile",
    "scan",
]
