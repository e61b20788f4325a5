"""Compatibility path: the Validator for data loaders lives in `tokscan.integrations.validate`.

`tokscan.validate.CORPUS_WIDE_CODES` is documented in docs/guide/data-loader.md and keeps working, as do the other
names below; new code imports `tokscan.integrations.validate` (or uses `tokscan.Validator`).
"""

from .integrations.validate import (
    CORPUS_WIDE_CODES,
    DUMP_CODES,
    IGNORE,
    REFERENCE_CODES,
    SOURCE_CODES,
    CheckResult,
    Validator,
    _rebuild,  # noqa: F401 -- what a Validator pickled before the move names (`tokscan.validate._rebuild`)
    fail_mask,
)

__all__ = [
    "CORPUS_WIDE_CODES",
    "DUMP_CODES",
    "IGNORE",
    "REFERENCE_CODES",
    "SOURCE_CODES",
    "CheckResult",
    "Validator",
    "fail_mask",
]
