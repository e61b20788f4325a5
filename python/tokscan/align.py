"""Compatibility path: the transformers re-rendering of prompts lives in `tokscan.samples.align`.

`tokscan.align` keeps working for code that imports it (tests, benches, benches/README.md);
new code imports `tokscan.samples.align`.
"""

from .samples.align import (
    MIN_SHIFT_RUN,
    SHIFT_WINDOW,
    AlignResult,
    align,
    check_record,
    first_difference,
    read_records,
    render_prompts,
    render_with,
    sample_prompts,
)

__all__ = [
    "MIN_SHIFT_RUN",
    "SHIFT_WINDOW",
    "AlignResult",
    "align",
    "check_record",
    "first_difference",
    "read_records",
    "render_prompts",
    "render_with",
    "sample_prompts",
]
