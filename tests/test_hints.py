"""Issue 47: the profile hints judge their probed samples in the core (`Corpus.check_ids` on the first rows before
the scan; one read of the spread rows after it, checked by a `Validator` per profile tried) and say exactly what
the former numpy probe said; the hint after the scan reads the corpus the scan kept, an open corpus, or paths,
object-store URLs included (tests/test_object_store.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tokscan
from tokscan import _core, demo
from tokscan.forensics import Corpus
from tokscan.samples import hints

import synth


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """Name -> paths: DeepSeek data, Kimi data, and the two together (no chat profile parses all; the probes find
    deepseek, kimi-k2, plain or nothing to suggest, depending on the profile and the rows probed)."""
    root = tmp_path_factory.mktemp("hints")
    ds, _profile = demo.write_demo(root / "demo", "deepseek", seed=4)
    kimi = synth.write_jsonl(synth.build_corpus(n_clean=150, seed=3, anomalies_per_code=1), root / "kimi")
    few = synth.write_jsonl(synth.build_corpus(n_clean=20, seed=5), root / "few", n_shards=1)
    return {
        "deepseek": [str(ds)],
        "kimi": [str(kimi)],
        "deepseek+kimi": [str(ds), str(kimi)],
        "few+deepseek": [str(few), str(ds)],
    }


def _old_unparsed(profile: _core.Profile, samples: list[np.ndarray]) -> np.ndarray:
    """The former probe: the samples' arrays re-validated, the structure bits picked out in numpy."""
    flags, _ = _core.Validator(profile).check_each([s.astype(np.int64) for s in samples])
    bits = {name: bit for name, bit, _s, _d in _core.codes()}
    return np.logical_or.reduce(
        [(flags >> np.uint64(bits[c]) & np.uint64(1)).astype(bool) for c in hints.STRUCTURE_CODES]
    )


def _old_better(current: str, samples: list[np.ndarray]) -> str | None:
    best, best_share = None, 0.2
    names = [n for n in _core.builtin_profiles() if n != "plain"] + ["plain"]
    for name in names:
        if name == current or not samples or (name == "plain" and best is not None):
            continue
        bad = _old_unparsed(_core.Profile.load(name), samples)
        if bad.mean() < best_share:
            best, best_share = name, float(bad.mean())
    return best


def _old_rows(n: int, limit: int) -> list[int]:
    return np.unique(np.linspace(0, n - 1, num=min(limit, n)).astype(np.int64)).tolist() if n else []


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 64, 65, 1000])
def test_the_spread_rows_are_numpys(limit):
    sizes = [0, 1, 2, 3, 5, 63, 64, 65, 100, 127, 240, 999, 1000, 10**6 + 3, 2**31 - 1, 2**40 + 17, 10**15 + 7]
    for n in sizes:
        assert hints._spread(n, limit) == _old_rows(n, limit), (n, limit)


def test_runs_join_consecutive_rows():
    assert hints._runs([]) == []
    assert hints._runs([0, 1, 2, 5, 7, 8]) == [(0, 3), (5, 6), (7, 9)]
    assert hints._runs(list(range(64))) == [(0, 64)]


@pytest.mark.parametrize("name", ["deepseek", "kimi", "deepseek+kimi", "few+deepseek"])
@pytest.mark.parametrize("limit", [5, 64, 400])
def test_the_probes_say_what_the_numpy_probe_said(corpora, name, limit):
    """Per profile, the share of unparsed samples (the float compared with the threshold) and the profile suggested
    are those of the former probe, for the first rows (before the scan) and the spread rows (after it)."""
    core = _core.Corpus(corpora[name])
    n = min(limit, len(core))
    first = [s["ids"] for s in core.samples(0, n)]
    rows = hints._spread(len(core), limit)
    spread = [core.sample(r)["ids"] for r in _old_rows(len(core), limit)]
    spread_probe = hints._spread_probe(core, rows)
    for profile_name in _core.builtin_profiles():
        p = _core.Profile.load(profile_name)
        assert hints._unparsed_share(core.check_ids(p, 0, n)) == float(_old_unparsed(p, first).mean())
        assert hints._unparsed_share(spread_probe(p)) == float(_old_unparsed(p, spread).mean())
        assert hints._better(profile_name, lambda q: core.check_ids(q, 0, n), n) == _old_better(profile_name, first)
        assert hints._better(profile_name, spread_probe, len(rows)) == _old_better(profile_name, spread)


def test_the_hints_take_an_open_corpus_or_paths(corpora):
    """Before the scan: a core corpus (the one the CLI hands to the scan), a `tokscan.forensics.Corpus` or paths give
    one hint; after it: the corpus the scan kept, a corpus given, or paths."""
    paths = corpora["deepseek+kimi"]
    kimi = tokscan.load_profile("kimi-k2")
    core = _core.Corpus(paths)
    early = hints.preflight_hint(kimi, core)
    assert early is not None and early.first == 64 and early.better == "deepseek"
    assert early == hints.preflight_hint(kimi, Corpus(paths)) == hints.preflight_hint(kimi, paths)
    assert early.message.startswith("100 % of the first 64 samples have no user turn for profile kimi-k2")
    assert hints.preflight_hint(tokscan.load_profile("deepseek"), core) is None

    report = tokscan.scan(corpora["deepseek"], "kimi-k2", keep_corpus=True)
    assert report.corpus is not None
    late = hints.profile_hint(report, ["never", "opened"])  # the kept corpus is read, not the paths
    assert late is not None and late.better == "deepseek" and late.first is None
    plain = tokscan.scan(corpora["deepseek"], "kimi-k2")
    assert plain.corpus is None
    opened = _core.Corpus(corpora["deepseek"])
    assert late == hints.profile_hint(plain, corpora["deepseek"]) == hints.profile_hint(plain, opened)
    assert late == hints.profile_hint(plain, corpora["deepseek"][0])
    assert hints.profile_hint(tokscan.scan(corpora["deepseek"], "deepseek"), corpora["deepseek"]) is None
