"""A hint when the chosen profile does not fit the corpus: most samples fail to parse (no user turn, ids
outside the vocabulary), which is what scanning DeepSeek data with the default kimi-k2 profile looks like.
The other built-in profiles are tried on a few samples with the same checker, and the best fit is named."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import _core
from ..outputs import utf8_paths
from ..report import Report

# The CLI runs `preflight_hint` before every scan: it checks the samples in the core and never imports numpy
# (importing it would be most of the CLI's fixed cost).

#: Codes that mean "this profile cannot parse the sample", not "the sample is bad".
STRUCTURE_CODES = ("missing_user", "out_of_vocab")
#: Share of samples with a structure code above which the profile is suspect.
SUSPECT_SHARE = 0.5
#: How many samples the other profiles are tried on.
PROBE_SAMPLES = 64

_WHAT = {"missing_user": "have no user turn", "out_of_vocab": "hold ids outside the vocabulary"}


@dataclass(frozen=True)
class ProfileHint:
    code: str
    share: float
    profile: str
    better: str | None  # a built-in profile that parses the probed samples, if any
    first: int | None = None  # before the scan: how many of the corpus's first samples were probed

    @property
    def message(self) -> str:
        which = "samples" if self.first is None else f"the first {self.first} samples"
        head = f"{100 * self.share:.0f} % of {which} {_WHAT[self.code]} for profile {self.profile}"
        if self.better is not None:
            return f"{head}: is this {self.better} data? try --profile {self.better}"
        return f"{head}: no built-in profile fits either; write a TOML profile (docs/guide/profiles.md)"


def _structure_bits() -> dict[str, int]:
    """Each structure code's bit in the core's anomaly flags."""
    bits = {n_: bit for n_, bit, _sev, _d in _core.codes()}
    return {c: bits[c] for c in STRUCTURE_CODES}


#: The probed samples' anomaly flags (one int per sample, in the core's bits) under a profile: the core checks
#: them (`Corpus.check_ids`, or a `Validator` on the rows read once); Python only counts bits.
Probe = Callable[[_core.Profile], list[int]]


def _structure_counts(flags: list[int]) -> dict[str, int]:
    """Per structure code, how many of the samples whose anomaly bits are `flags` carry it."""
    return {c: sum(f >> bit & 1 for f in flags) for c, bit in _structure_bits().items()}


def _unparsed_share(flags: list[int]) -> float:
    """The share of the samples whose anomaly bits are `flags` that carry any structure code."""
    mask = sum(1 << bit for bit in _structure_bits().values())
    return sum(1 for f in flags if f & mask) / len(flags)


def _better(current: str, probe: Probe, n: int) -> str | None:
    """The built-in profile under which fewer than a fifth of the `n` probed samples show a structure code, if
    any."""
    best, best_share = None, 0.2
    # `plain` parses anything (it has no structure): it is the suggestion only when no chat profile fits.
    names = [p for p in _core.builtin_profiles() if p != "plain"] + ["plain"]
    for name in names:
        if name == current or not n or (name == "plain" and best is not None):
            continue
        share = _unparsed_share(probe(_core.Profile.load(name)))
        if share < best_share:
            best, best_share = name, share
    return best


def _core_corpus(corpus: Any, columns: Mapping[str, str] | None) -> _core.Corpus:
    """The core's corpus of `corpus`: itself (a `_core.Corpus`), the one an open `tokscan.forensics.Corpus` holds,
    or the corpus of the paths it is (or of the one path), opened with `columns`."""
    if isinstance(corpus, _core.Corpus):
        return corpus
    core = getattr(corpus, "core", None)
    if isinstance(core, _core.Corpus):
        return core
    return _core.Corpus(utf8_paths(_listed(corpus)), dict(columns or {}))


def preflight_hint(
    profile: _core.Profile, corpus: Any, columns: Mapping[str, str] | None = None, limit: int = PROBE_SAMPLES
) -> ProfileHint | None:
    """The hint before a scan: the corpus's first `limit` samples (one read at its start) checked with
    `profile`. With the wrong profile every sample is flagged, and a scan of 10M samples spends its time (and
    the memory of its flagged samples) before the hint after it would fire; this one costs a few milliseconds.
    `corpus` is an open corpus (`_core.Corpus`, which the CLI then hands to the scan, or a
    `tokscan.forensics.Corpus`), or its paths (opened with `columns`)."""
    core = _core_corpus(corpus, columns)
    n = min(limit, len(core))
    if n == 0:
        return None

    # Every profile's check runs in the core on the corpus's own first rows (no arrays, no numpy).
    def probe(p: _core.Profile) -> list[int]:
        return core.check_ids(p, 0, n)

    code, share = _structure_share(_structure_counts(probe(profile)), n)
    if share < SUSPECT_SHARE:
        return None
    return ProfileHint(code, share, profile.name, _better(profile.name, probe, n), n)


def _structure_share(counts: Mapping[str, int], n: int) -> tuple[str, float]:
    code = max(STRUCTURE_CODES, key=lambda c: counts.get(c, 0))
    return code, counts.get(code, 0) / max(n, 1)


def _spread(n: int, limit: int) -> list[int]:
    """`limit` rows evenly spaced over `n` (first and last included), ascending and distinct: what
    `numpy.unique(numpy.linspace(0, n - 1, num=min(limit, n)).astype(numpy.int64))` gives, in the same float
    arithmetic (row `i` at `i * step`, truncated), without numpy."""
    k = min(limit, n)
    if k <= 0:
        return []
    if k == 1:
        return [0]
    step = (n - 1) / (k - 1)
    return sorted({int(i * step) for i in range(k - 1)} | {n - 1})


def _runs(rows: list[int]) -> list[tuple[int, int]]:
    """Ascending distinct `rows` as `[start, end)` ranges of consecutive rows."""
    out: list[tuple[int, int]] = []
    for r in rows:
        if out and out[-1][1] == r:
            out[-1] = (out[-1][0], r + 1)
        else:
            out.append((r, r + 1))
    return out


def _spread_probe(core: _core.Corpus, rows: list[int]) -> Probe:
    """The probe of `rows` of `core`: each row is read once, here (a range of consecutive rows in one pass),
    and every profile's `Validator` checks the ids read, as `Corpus.check_ids` checks a row's ids (no mask, no
    prompt split). Rows spread over a corpus lie in different row groups and pages: reading them again for
    every profile tried (`check_ids` per row) would decode each several times."""
    ids = [s["ids"] for start, end in _runs(rows) for s in core.samples(start, end)]

    def probe(p: _core.Profile) -> list[int]:
        flags, _lengths = _core.Validator(p).check_each(ids)
        return [int(f) for f in flags]

    return probe


def profile_hint(
    report: Report,
    corpus: Any,
    columns: Mapping[str, str] | None = None,
    limit: int = PROBE_SAMPLES,
) -> ProfileHint | None:
    """None when the profile parses most samples; else the worst structure code, its share, and the built-in
    profile (if any) under which fewer than a fifth of `limit` evenly spaced samples show a structure code.
    `corpus` is the corpus's paths (or an open corpus); the samples come from the corpus the scan kept open
    (`report.corpus`) when it did, read only when the hint fires. Paths that are object-store URLs (a Ray
    scan's, or a report's whose scan kept nothing) are fetched for it: large Parquet objects and NumPy / Megatron
    token files only their footer or head and then the parts that hold the probed rows."""
    counts = {code: a["count"] for code, a in report.anomalies.items()}
    code, share = _structure_share(counts, report.n_samples)
    if share < SUSPECT_SHARE:
        return None
    current = os.fspath(report.data["profile"]["name"])

    def probed(core: _core.Corpus, fill: Callable[[int], object] | None = None) -> ProfileHint:
        rows = _spread(len(core), limit)
        if fill is not None:
            for r in rows:
                fill(r)
        return ProfileHint(code, share, current, _better(current, _spread_probe(core, rows), len(rows)))

    kept = report.corpus if report.corpus is not None else corpus
    from ..remote import any_url, staged_footers

    if isinstance(kept, _core.Corpus) or getattr(kept, "core", None) is not None or not any_url(_listed(kept)):
        return probed(_core_corpus(kept, columns))
    with staged_footers(_listed(kept)) as (local, _bases, sparse):
        paths, cols = utf8_paths(local), dict(columns or {})
        return probed(
            _core_corpus(local, columns), (lambda r: _core.fill_row(paths, r, sparse, cols)) if sparse else None
        )


def _listed(paths: Any) -> list[Any]:
    """`paths` as a list: one path, or the paths it holds."""
    return [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
