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
from .hf import hf_annotate, hf_filter
from .report import Report
from .validate import CheckResult, Validator

__version__ = _core.__version__

#: Anomaly code name -> bit in a per-sample flag mask.
CODES: dict[str, int] = {name: bit for name, bit, _sev, _desc in _core.codes()}
#: Anomaly code name -> (default severity, description).
CODE_INFO: dict[str, tuple[str, str]] = {name: (sev, desc) for name, _bit, sev, desc in _core.codes()}
#: Names of the built-in profiles.
PROFILES: list[str] = list(_core.builtin_profiles())

__all__ = [
    "CODES",
    "CODE_INFO",
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
