"""Hugging Face `datasets` integration: filter out, or annotate, the samples a scan would flag.

    ds = ds.filter(tokscan.hf_filter(profile="kimi-k2"), batched=True)
    ds = ds.map(tokscan.hf_annotate(profile="kimi-k2"), batched=True)   # adds `tokscan_flags`

Both read the `input_ids` column and, when present, `loss_mask` (or else `labels`, where -100 means mask 0).
With `ds.with_format("arrow")` the batches arrive as Arrow tables and the ids are checked without a copy; with
the default format they arrive as Python lists and are converted once per batch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import _core
from ..errors import UsageError
from .validate import CheckResult, Validator

#: Name of the column `hf_annotate` adds.
FLAGS_COLUMN = "tokscan_flags"


class _BatchCheck:
    """Picklable batch function (datasets fingerprints it, and pickles it into `num_proc` workers)."""

    def __init__(
        self,
        validator: Validator,
        column: str,
        mask_column: str | None,
        labels_column: str | None,
    ) -> None:
        self.validator = validator
        self.column = column
        self.mask_column = mask_column
        self.labels_column = labels_column

    def _columns(self, batch: Any) -> tuple[Any, Any, Any]:
        names = batch.column_names if hasattr(batch, "column_names") else list(batch.keys())
        if self.column not in names:
            raise UsageError(f"hf batch has no {self.column!r} column (columns: {', '.join(names)})")

        def get(name: str) -> Any:
            return batch.column(name) if hasattr(batch, "column") else batch[name]

        mask_col = self.mask_column
        labels_col = self.labels_column
        if mask_col is None and labels_col is None:
            if "loss_mask" in names:
                mask_col = "loss_mask"
            elif "labels" in names:
                labels_col = "labels"
        for c in (mask_col, labels_col):
            if c is not None and c not in names:
                raise UsageError(f"hf batch has no {c!r} column (columns: {', '.join(names)})")
        ids = get(self.column)
        mask = None if mask_col is None else get(mask_col)
        labels = None if labels_col is None else get(labels_col)
        return ids, mask, labels

    def run(self, batch: Any) -> CheckResult:
        ids, mask, labels = self._columns(batch)
        # datasets' "numpy" format hands ragged columns over as object arrays of arrays.
        ids, mask, labels = (
            list(x) if isinstance(x, np.ndarray) and x.dtype == object else x for x in (ids, mask, labels)
        )
        return self.validator.check(ids, loss_mask=mask, labels=labels)


class _Filter(_BatchCheck):
    def __call__(self, batch: Any) -> list[bool]:
        return self.run(batch).ok.tolist()


class _Annotate(_BatchCheck):
    def __call__(self, batch: Any) -> dict[str, Any]:
        return {FLAGS_COLUMN: self.run(batch).flags}


def _validator(
    validator: Validator | None,
    profile: str | os.PathLike[str],
    tokenizer: str | os.PathLike[str] | None,
    policy: Mapping[str, str] | None,
    fail_on: str,
) -> Validator:
    if validator is not None:
        return validator
    return Validator(profile, tokenizer=tokenizer, policy=policy, fail_on=fail_on)


def hf_filter(
    profile: str | os.PathLike[str] = _core.DEFAULT_PROFILE,
    *,
    tokenizer: str | os.PathLike[str] | None = None,
    policy: Mapping[str, str] | None = None,
    fail_on: str = "error",
    column: str = "input_ids",
    mask_column: str | None = None,
    labels_column: str | None = None,
    validator: Validator | None = None,
) -> Any:
    """A batched predicate for `Dataset.filter(..., batched=True)`: keeps the samples with no code at or
    above `fail_on` (after `policy`)."""
    return _Filter(_validator(validator, profile, tokenizer, policy, fail_on), column, mask_column, labels_column)


def hf_annotate(
    profile: str | os.PathLike[str] = _core.DEFAULT_PROFILE,
    *,
    tokenizer: str | os.PathLike[str] | None = None,
    column: str = "input_ids",
    mask_column: str | None = None,
    labels_column: str | None = None,
    validator: Validator | None = None,
) -> Any:
    """A batched function for `Dataset.map(..., batched=True)` that adds a `tokscan_flags` column: each
    sample's anomaly bits (`tokscan.CODES`), 0 for a clean sample."""
    return _Annotate(_validator(validator, profile, tokenizer, None, "error"), column, mask_column, labels_column)
