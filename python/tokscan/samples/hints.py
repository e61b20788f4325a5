"""A hint when the chosen profile does not fit the corpus: most samples fail to parse (no user turn, ids
outside the vocabulary), which is what scanning DeepSeek data with the default kimi-k2 profile looks like.
The other built-in profiles are tried on a few samples with the same checker, and the best fit is named."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _core
from ..outputs import utf8_paths
from ..report import Report

if TYPE_CHECKING:
    import numpy as np

# numpy is imported only where a hint is being worked out (rarely): the CLI runs `preflight_hint` before every
# scan, and importing numpy would be most of its fixed cost.

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


def _structure_flags(profile: _core.Profile, samples: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Per structure code, the samples `profile` flags with it (it cannot parse them)."""
    import numpy as np

    v = _core.Validator(profile)
    flags, _ = v.check_each([s.astype(np.int64) for s in samples])
    return {c: (flags >> np.uint64(bit) & np.uint64(1)).astype(bool) for c, bit in _structure_bits().items()}


def _structure_counts(flags: list[int]) -> dict[str, int]:
    """Per structure code, how many of the samples whose anomaly bits are `flags` carry it."""
    return {c: sum(f >> bit & 1 for f in flags) for c, bit in _structure_bits().items()}


def _unparsed(profile: _core.Profile, samples: list[np.ndarray]) -> np.ndarray:
    import numpy as np

    return np.logical_or.reduce(list(_structure_flags(profile, samples).values()))


def _better(current: str, samples: list[np.ndarray]) -> str | None:
    """The built-in profile under which fewer than a fifth of `samples` show a structure code, if any."""
    best, best_share = None, 0.2
    # `plain` parses anything (it has no structure): it is the suggestion only when no chat profile fits.
    names = [n for n in _core.builtin_profiles() if n != "plain"] + ["plain"]
    for name in names:
        if name == current or not samples or (name == "plain" and best is not None):
            continue
        bad = _unparsed(_core.Profile.load(name), samples)
        if bad.mean() < best_share:
            best, best_share = name, float(bad.mean())
    return best


def preflight_hint(
    profile: _core.Profile, corpus: Any, columns: Mapping[str, str] | None = None, limit: int = PROBE_SAMPLES
) -> ProfileHint | None:
    """The hint before a scan: the corpus's first `limit` samples (one read at its start) checked with
    `profile`. With the wrong profile every sample is flagged, and a scan of 10M samples spends its time (and
    the memory of its flagged samples) before the hint after it would fire; this one costs a few milliseconds.
    `corpus` is an open `tokscan.forensics.Corpus`, or its paths."""
    given = getattr(corpus, "core", None)  # an open `tokscan.forensics.Corpus` holds its core corpus
    core = given if given is not None else _core.Corpus(utf8_paths(corpus), dict(columns or {}))
    n = min(limit, len(core))
    if n == 0:
        return None
    # The first check runs in the core on its own rows (no arrays, no numpy); only a suspect profile reads the
    # samples to try the others on them.
    code, share = _structure_share(_structure_counts(core.check_ids(profile, 0, n)), n)
    if share < SUSPECT_SHARE:
        return None
    from .corpus import Corpus

    wrapped = corpus if given is not None else Corpus.of(core, columns)
    samples = [s.ids for s in wrapped.fetch_range(0, n)]
    return ProfileHint(code, share, profile.name, _better(profile.name, samples), n)


def _structure_share(counts: Mapping[str, int], n: int) -> tuple[str, float]:
    code = max(STRUCTURE_CODES, key=lambda c: counts.get(c, 0))
    return code, counts.get(code, 0) / max(n, 1)


def _probe(corpus: Any, columns: Mapping[str, str] | None, limit: int) -> list[np.ndarray]:
    from .corpus import opened

    corpus = opened(corpus, columns)
    n = int(corpus.starts[-1])
    import numpy as np

    rows = np.unique(np.linspace(0, n - 1, num=min(limit, n)).astype(np.int64)) if n else []
    return [corpus.fetch(int(r)).ids for r in rows]


def profile_hint(
    report: Report,
    corpus: Any,
    columns: Mapping[str, str] | None = None,
    limit: int = PROBE_SAMPLES,
) -> ProfileHint | None:
    """None when the profile parses most samples; else the worst structure code, its share, and the built-in
    profile (if any) under which fewer than a fifth of `limit` evenly spaced samples show a structure code.
    `corpus` is the corpus's paths (or an open corpus); the samples come from the corpus the scan kept open
    (`report.corpus`) when it did, read only when the hint fires."""
    counts = {code: a["count"] for code, a in report.anomalies.items()}
    code, share = _structure_share(counts, report.n_samples)
    if share < SUSPECT_SHARE:
        return None
    current = report.data["profile"]["name"]
    kept = report.corpus
    probed = _probe(kept if kept is not None else corpus, columns, limit)
    return ProfileHint(code, share, os.fspath(current), _better(current, probed))
