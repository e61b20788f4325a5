"""`Validator`: the scan's per-sample checks on in-memory batches, for training data loaders.

The ids are never copied: NumPy arrays (and CPU torch tensors, through `.numpy()`) are read in place, Arrow
list arrays are imported through the Arrow C data interface (`__arrow_c_array__`), and the GIL is released
while the batch is checked. Corpus-wide codes (`duplicate`, `sample_id_duplicate`, `prompt_duplicate`, `length_outlier`,
...) need the whole corpus and are never set by `check`; every other code is set exactly when `tokscan scan` sets it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _core
from ..errors import UsageError

#: Codes that need the whole corpus; `Validator.check` never sets them.
CORPUS_WIDE_CODES = tuple(sorted(c for c, scope in _core.code_scopes().items() if scope == "corpus"))
#: Codes only an input's reader sets (JSONL generator metadata); `Validator.check` never sets them either.
SOURCE_CODES = tuple(sorted(c for c, scope in _core.code_scopes().items() if scope == "source"))
#: Codes that need reference data a scan is given (`--contamination` benchmarks); never set by `Validator.check`.
REFERENCE_CODES = tuple(sorted(c for c, scope in _core.code_scopes().items() if scope == "reference"))
#: Codes decided from a hidden-state dump (`--hidden-states`); never set by `Validator.check`.
DUMP_CODES = tuple(sorted(c for c, scope in _core.code_scopes().items() if scope == "hidden states"))
IGNORE = "ignore"


@functools.cache
def _code_table() -> dict[str, tuple[int, str]]:
    """Code name -> (bit, default severity), in bit order (the core's table never changes in a process)."""
    return {name: (bit, sev) for name, bit, sev, _desc in sorted(_core.codes(), key=lambda c: c[1])}


def fail_mask(policy: Mapping[str, str | int] | None = None, fail_on: str = "error") -> int:
    """The bits of the codes that make a sample bad: at or above `fail_on` after `policy`'s overrides
    (code -> `error`/`warning`/`info`, or `ignore`), decided by the core's policy engine. A count or rate
    tolerance is corpus-wide, so one sample cannot be judged by it: a tolerated code still makes a sample bad
    here (as `tokscan scan --exclude` would drop it were the tolerance exceeded)."""
    return int(_core.policy_sample_mask(dict(policy or {}), fail_on))


def _names(bits: int) -> list[str]:
    return [name for name, (bit, _sev) in _code_table().items() if bits >> bit & 1]


@dataclass(frozen=True)
class CheckResult:
    """Per-sample results of one `Validator.check` call."""

    #: One `uint64` per sample; bit `tokscan.CODES[code]` is set when the sample has `code`.
    flags: np.ndarray
    #: Sample lengths in tokens (2-D input: without trailing padding).
    lengths: np.ndarray
    #: The bits that make a sample bad under the validator's policy.
    fail_mask: int

    def __len__(self) -> int:
        return len(self.flags)

    def __repr__(self) -> str:
        bad = int(np.count_nonzero(~self.ok))
        counts = ", ".join(f"{c}={n:,}" for c, n in self.counts().items())
        return f"<CheckResult {len(self):,} samples, {bad:,} bad; codes: {counts or 'none'}>"

    @property
    def ok(self) -> np.ndarray:
        """Boolean mask: True for samples with no code at or above the validator's `fail_on`."""
        return (self.flags & np.uint64(self.fail_mask)) == 0

    @property
    def bad_rows(self) -> np.ndarray:
        """Indices of the samples that are not `ok`."""
        return np.flatnonzero(~self.ok)

    def codes_of(self, i: int) -> list[str]:
        """The codes set for sample `i`, in bit order."""
        return _names(int(self.flags[i]))

    def failing_codes_of(self, i: int) -> list[str]:
        """The codes of sample `i` that make it bad under the policy (empty when it is `ok`)."""
        return _names(int(self.flags[i]) & self.fail_mask)

    def counts(self) -> dict[str, int]:
        """Number of samples with each code (codes never seen are left out)."""
        out = {}
        for name, (bit, _sev) in _code_table().items():
            n = int(np.count_nonzero(self.flags & np.uint64(1 << bit)))
            if n:
                out[name] = n
        return out


def _is_torch_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "numpy") and hasattr(x, "device")


def _host(x: Any, what: str) -> Any:
    """Torch tensors become NumPy views (CPU: no copy; other devices are copied to the host)."""
    if _is_torch_tensor(x):
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        return x.numpy()
    return x


def _is_arrow(x: Any) -> bool:
    return hasattr(x, "__arrow_c_array__") or type(x).__name__ == "ChunkedArray"


def _as_array(x: Any, what: str) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x if x.flags.c_contiguous else np.ascontiguousarray(x)
    try:
        return np.ascontiguousarray(x)
    except (TypeError, ValueError) as e:
        raise UsageError(f"{what}: cannot read as an array ({e})") from None


def _ragged_lists(x: Any, what: str) -> Any:
    """A Python list of per-sample sequences as an Arrow list array (one copy out of Python objects)."""
    import pyarrow as pa

    try:
        rows = [_host(r, what) for r in x]
        if what == "ids":
            # Inferred first, so a float id is refused rather than truncated by the cast (163586.9 -> 163586).
            inferred = pa.array(rows)
            value = getattr(inferred.type, "value_type", None)
            if value is None or not (pa.types.is_integer(value) or pa.types.is_null(value)):
                raise UsageError(f"{what}: token ids must be integers, found {value or inferred.type}")
            return inferred.cast(pa.large_list(pa.int64()))
        return pa.array(rows, type=pa.large_list(pa.int64()))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
        raise UsageError(f"{what}: not a list of integer sequences ({e})") from None


def _integers(x: np.ndarray, what: str) -> np.ndarray:
    """`x` as int64 when it holds integers; a float array is refused, never truncated."""
    if x.dtype.kind not in "iu":
        raise UsageError(f"{what} must be integers, found {x.dtype}")
    return x if x.dtype in (np.int32, np.int64) else x.astype(np.int64)


def _sequence(x: Any, what: str) -> np.ndarray:
    """One sample as a contiguous 1-D array (a view when it already is one)."""
    x = _host(x, what)
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
        if x.dtype == np.float64 and x.size == 0:
            x = x.astype(np.int64)
    if x.ndim != 1:
        x = x.reshape(-1)
    return x if x.flags.c_contiguous else np.ascontiguousarray(x)


def _labels_to_mask(labels: Any) -> Any:
    """`labels != -100` in the labels' own layout (the HF convention for "no loss here")."""
    labels = _host(labels, "labels")
    if _is_arrow(labels):
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(labels, pa.ChunkedArray):
            return pa.chunked_array([_labels_to_mask(c) for c in labels.chunks], type=pa.large_list(pa.bool_()))
        labels = labels.cast(pa.large_list(pa.int64()))
        keep = pc.not_equal(labels.values, -100).fill_null(False)
        return pa.LargeListArray.from_arrays(labels.offsets, keep, mask=labels.is_null())
    if isinstance(labels, list):
        return _labels_to_mask(_ragged_lists(labels, "labels"))
    return _as_array(labels, "labels") != -100


class Validator:
    """Checks batches for a training data loader; build it once and call `check` for every batch, from any
    thread. `policy` maps codes to `error`/`warning`/`info` or `ignore`; a sample is bad (`ok` False) when
    it has a code at or above `fail_on`. `pad_id` is the padding of 2-D batches (default: the profile's
    PAD). `threads > 1` checks the rows of a batch in parallel (safe in forked DataLoader workers)."""

    def __init__(
        self,
        profile: str | os.PathLike[str] | _core.Profile = _core.DEFAULT_PROFILE,
        *,
        tokenizer: str | os.PathLike[str] | None = None,
        policy: Mapping[str, str] | None = None,
        fail_on: str = "error",
        pad_id: int | None = None,
        threads: int = 1,
    ) -> None:
        from ..profiles import load_profile

        self.profile = profile if isinstance(profile, _core.Profile) else load_profile(profile, tokenizer)
        self.policy = dict(policy or {})
        self.fail_on = fail_on
        self.fail_mask = fail_mask(self.policy, fail_on)
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads < 2**16:
            raise UsageError(f"threads must be a positive number, got {threads!r}")
        self._core = _core.Validator(self.profile, pad_id, threads)
        self._args = (profile if not isinstance(profile, _core.Profile) else None, tokenizer, pad_id, threads)

    @property
    def pad_id(self) -> int | None:
        return self._core.pad_id

    def __repr__(self) -> str:
        return f"Validator(profile={self.profile.name!r}, fail_on={self.fail_on!r}, pad_id={self.pad_id})"

    def check(
        self,
        ids: Any,
        offsets: Any = None,
        loss_mask: Any = None,
        *,
        labels: Any = None,
        mask_offsets: Any = None,
    ) -> CheckResult:
        """Checks a batch.

        * `ids`: a 1-D integer array (int32/int64/uint32/uint16/uint64) with `offsets` (rows + 1 values); a 2-D
          padded array (rows × length); an Arrow `ListArray`/`LargeListArray`/`ChunkedArray` of integers; a
          torch tensor (1-D with offsets, or 2-D); or a Python list of sequences (converted once).
        * `loss_mask`: the same layout as `ids` (1-D: same offsets unless `mask_offsets`); or give `labels`
          instead, where `-100` means mask 0.
        """
        if loss_mask is not None and labels is not None:
            raise UsageError("give loss_mask or labels, not both")
        if labels is not None:
            loss_mask = _labels_to_mask(labels)
        ids = _host(ids, "ids")
        loss_mask = None if loss_mask is None else _host(loss_mask, "loss_mask")
        if isinstance(ids, list):
            if offsets is not None:
                ids = _as_array(ids, "ids")
            else:
                ids = _ragged_lists(ids, "ids")
                if isinstance(loss_mask, list):
                    loss_mask = _ragged_lists(loss_mask, "loss_mask")
        if _is_arrow(ids):
            if offsets is not None:
                raise UsageError("ids is an Arrow list array: offsets are not used with it")
            return self._check_arrow(ids, loss_mask)
        ids = _as_array(ids, "ids")
        if offsets is not None:
            offsets = _host(offsets, "offsets")
            offsets = _integers(_as_array(offsets, "offsets"), "offsets")
        if loss_mask is not None:
            loss_mask = _as_array(loss_mask, "loss_mask")
            # The shape first: a mask of the wrong length is the mistake to name, whatever its dtype.
            if mask_offsets is None and ids.ndim == 1 and loss_mask.shape != ids.shape:
                raise UsageError(f"loss_mask has {loss_mask.size} values, ids have {ids.size}")
        if mask_offsets is not None:
            mask_offsets = _integers(_as_array(_host(mask_offsets, "mask_offsets"), "mask_offsets"), "mask_offsets")
            mask_offsets = mask_offsets.astype(np.int64, copy=False)
        flags, lengths = self._core.check_numpy(ids, offsets, loss_mask, mask_offsets)
        return CheckResult(flags, lengths, self.fail_mask)

    def check_each(self, ids: Sequence[Any], loss_masks: Sequence[Any] | None = None) -> CheckResult:
        """Checks separately stored samples in one call: `ids` is a sequence of 1-D arrays / CPU tensors /
        lists (one per sample), `loss_masks` the same of masks (an entry may be None). Nothing is concatenated;
        a mask whose length differs from its ids is `loss_mask_misaligned`."""
        seqs = [_sequence(x, "ids") for x in ids]
        masks = None
        if loss_masks is not None:
            if len(loss_masks) != len(seqs):
                raise UsageError(f"{len(loss_masks)} loss masks for {len(seqs)} samples")
            masks = [None if m is None else _sequence(m, "loss_mask") for m in loss_masks]
        flags, lengths = self._core.check_each(seqs, masks)
        return CheckResult(flags, lengths, self.fail_mask)

    def _check_arrow(self, ids: Any, loss_mask: Any) -> CheckResult:
        import pyarrow as pa

        if isinstance(loss_mask, list):
            loss_mask = _ragged_lists(loss_mask, "loss_mask")
        elif isinstance(loss_mask, np.ndarray):
            raise UsageError("ids is an Arrow list array: give loss_mask as an Arrow list array too")
        if isinstance(ids, pa.ChunkedArray):
            parts = []
            start = 0
            for chunk in ids.chunks:
                m = None
                if loss_mask is not None:
                    m = loss_mask.slice(start, len(chunk))
                    if isinstance(m, pa.ChunkedArray):
                        m = m.combine_chunks()
                parts.append(self._core.check_arrow(chunk, m))
                start += len(chunk)
            if not parts:
                return CheckResult(np.zeros(0, np.uint64), np.zeros(0, np.uint32), self.fail_mask)
            return CheckResult(
                np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), self.fail_mask
            )
        if isinstance(loss_mask, pa.ChunkedArray):
            loss_mask = loss_mask.combine_chunks()
        if loss_mask is not None and len(loss_mask) != len(ids):
            raise UsageError(f"loss_mask has {len(loss_mask)} rows, ids have {len(ids)}")
        flags, lengths = self._core.check_arrow(ids, loss_mask)
        return CheckResult(flags, lengths, self.fail_mask)

    def __reduce__(self) -> tuple[Any, ...]:
        """Picklable (for HF `datasets` fingerprints and spawned workers) when built from a profile name."""
        name, tokenizer, pad_id, threads = self._args
        if name is None:
            raise TypeError("a Validator built from a Profile object cannot be pickled; pass the profile name")
        return (
            _rebuild,
            (name, tokenizer, self.policy, self.fail_on, pad_id, threads),
        )


def _rebuild(name: Any, tokenizer: Any, policy: dict[str, str], fail_on: str, pad_id: Any, threads: int) -> Validator:
    return Validator(name, tokenizer=tokenizer, policy=policy, fail_on=fail_on, pad_id=pad_id, threads=threads)
