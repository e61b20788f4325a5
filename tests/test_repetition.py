"""Loops of any period and the repeated n-gram coverage statistic, end to end against plain numpy oracles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tokscan

import synth

QUANTS = {"p1": 1, "p5": 5, "p25": 25, "median": 50, "p75": 75, "p95": 95, "p99": 99}
N = 10  # the coverage n-gram size (README: `ngram_coverage`)
MAX_PERIOD, MIN_REPEATS, MIN_SPAN = 1024, 4, 64  # the default [repetition] policy


def oracle_coverage(c: np.ndarray) -> tuple[int, int]:
    """(tokens inside an n-gram that occurs at least twice, completion length), plainly."""
    if len(c) <= N:
        return 0, len(c)
    grams = np.lib.stride_tricks.sliding_window_view(c, N)
    _, inverse, counts = np.unique(grams, axis=0, return_inverse=True, return_counts=True)
    dup = counts[inverse.ravel()] >= 2
    covered = np.zeros(len(c), dtype=bool)
    for i in np.flatnonzero(dup):
        covered[i : i + N] = True
    return int(covered.sum()), len(c)


def oracle_loop(c: np.ndarray, max_period: int = MAX_PERIOD) -> tuple[int, int, int] | None:
    """(start, period, span) of the earliest loop (ties: shorter period), by trying every period."""
    best = None
    for p in range(1, min(max_period, len(c) - 1) + 1):
        eq = np.concatenate([[False], c[p:] == c[:-p], [False]])
        edges = np.flatnonzero(np.diff(eq.astype(np.int8)))
        for a, b in zip(edges[::2], edges[1::2], strict=True):
            if b - a + p >= max(MIN_SPAN, MIN_REPEATS * p):
                if best is None or (a, p) < best[:2]:
                    best = (int(a), p, int(b - a + p))
                break
    return best


def looping(g: synth.Generator, sid: str, cat: str, period: int, reps: float, end: bool) -> synth.Sample:
    """A completion whose response loops on a block of `period` tokens `reps` times; cut at the length limit
    (no end of turn) when `end` is False."""
    s = g.clean(sid, cat)
    th, rs, unit = g.text(s.thinking), g.text(s.response), g.text(period)
    loop = (unit * (int(reps) + 1))[: int(period * reps)]
    s.completion = [*th, synth.UNTHINK, *rs, *loop, *([synth.IM_END] if end else [])]
    s.response = len(rs) + len(loop)
    s.expected = {"repetition"} | (set() if end else {"truncated"})
    return s


def repeated_phrases(g: synth.Generator, sid: str, cat: str) -> synth.Sample:
    """Not a loop: a few phrases quoted again later (coverage well above 0)."""
    s = g.clean(sid, cat)
    phrase = g.text(int(g.rng.integers(8, 40)))
    body = [*g.text(30), *phrase, *g.text(int(g.rng.integers(0, 50))), *phrase, *g.text(20)]
    if g.rng.random() < 0.5:
        body += phrase
    s.completion = [*g.text(s.thinking), synth.UNTHINK, *body, synth.IM_END]
    s.response = len(body)
    return s


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    g = synth.Generator(seed=13)
    samples = synth.build_corpus(n_clean=200, seed=11, anomalies_per_code=1)
    rng = np.random.default_rng(5)
    for i in range(60):
        cat = synth.CATEGORIES[i % len(synth.CATEGORIES)]
        sid = f"x{i:04d}"
        if i % 2:
            samples.append(repeated_phrases(g, sid, cat))
        else:
            period = int(rng.integers(1, 1100))
            reps = float(rng.uniform(2.0, 7.0))
            samples.append(looping(g, sid, cat, period, reps, end=bool(i % 3)))
    root = tmp_path_factory.mktemp("rep")
    return samples, synth.write_parquet_full(samples, root / "pq"), synth.write_numpy(samples, root / "np")


def test_ngram_coverage_equals_numpy(corpus):
    samples, pq_dir, np_dir = corpus
    pairs = [oracle_coverage(np.array(s.completion, dtype=np.int64)) for s in samples]
    assert sum(1 for c, _ in pairs if c) >= 30  # the statistic is exercised, not all zeros
    reports = [tokscan.scan(pq_dir, threads=t, ngram_coverage=True) for t in (1, 2)]
    reports.append(tokscan.scan(np_dir, threads=2, ngram_coverage=True))
    assert "ngram_coverage" not in tokscan.scan(np_dir).data["overall"], "off by default"
    for r in reports[1:]:
        assert r.data["overall"]["ngram_coverage"] == reports[0].data["overall"]["ngram_coverage"]
        for name, cat in r.data["categories"].items():
            assert cat["ngram_coverage"] == reports[0].data["categories"][name]["ngram_coverage"]
    report = reports[0]
    groups = {"overall": range(len(samples))}
    for cat in synth.CATEGORIES:
        groups[cat] = [i for i, s in enumerate(samples) if s.category == cat]
    for name, rows in groups.items():
        got = report.data["overall" if name == "overall" else "categories"]
        got = got["ngram_coverage"] if name == "overall" else got[name]["ngram_coverage"]
        part = np.array([pairs[i][0] for i in rows], dtype=np.int64)
        whole = np.array([pairs[i][1] for i in rows], dtype=np.int64)
        frac = np.where(whole > 0, part / np.maximum(whole, 1), 0.0)
        assert got["n"] == N
        for key, q in QUANTS.items():
            assert got[key] == pytest.approx(float(np.percentile(frac, q)), rel=1e-12, abs=1e-15), (name, key)
        assert got["min"] == frac.min() and got["max"] == frac.max()
        assert got["mean"] == pytest.approx(float(frac.mean()), rel=1e-12)
        bins = np.where(whole > 0, np.minimum(part * 10 // np.maximum(whole, 1), 9), 0)
        assert got["histogram"]["counts"] == np.bincount(bins, minlength=10).tolist()
        assert got["histogram"]["edges"] == pytest.approx([k / 10 for k in range(10)])


def expected_loops(samples: list[synth.Sample], max_period: int = MAX_PERIOD) -> dict[int, tuple[int, int, int]]:
    """Row -> (sequence position, period, span) of the oracle's loop, for the samples that may hold one."""
    want = {}
    for row, s in enumerate(samples):
        c = np.array(s.completion, dtype=np.int64)
        end = len(c) - 1 if len(c) and c[-1] == synth.IM_END else len(c)
        if "repetition" in s.expected or s.sample_id.startswith("x"):
            loop = oracle_loop(c[:end], max_period)
            if loop is not None:
                want[row] = (len(s.prompt) + loop[0], loop[1], loop[2])
    return want


def test_loops_of_any_period_are_found_with_period_and_span(corpus):
    samples, pq_dir, _ = corpus
    report = tokscan.scan(pq_dir, threads=2)
    flagged = {f["row"]: f for f in report.flagged if "repetition" in f["codes"]}
    want = expected_loops(samples)
    assert len(want) >= 10 and max(p for _, p, _ in want.values()) > 400
    assert set(flagged) == set(want)
    for row, (pos, period, span) in want.items():
        f = flagged[row]
        assert f["positions"]["repetition"] == pos
        assert f["repetition"] == {"period": period, "span": span}
    # Entries of other codes carry no `repetition` field (the schema only grew an optional key).
    assert all("repetition" not in f for f in report.flagged if "repetition" not in f["codes"])


def test_a_profile_that_keeps_max_period_8_still_works(corpus, tmp_path):
    samples, pq_dir, _ = corpus
    builtin = Path(__file__).parents[1] / "rust" / "tokscan-core" / "profiles" / "kimi-k2.toml"
    prof = tmp_path / "old.toml"
    prof.write_text(builtin.read_text() + "\n[repetition]\nmax_period = 8\n")
    report = tokscan.scan(pq_dir, profile=str(prof), threads=1)
    assert report.data["profile"]["repetition"] == {"max_period": 8, "min_repeats": 4, "min_span": 64}
    got = {
        f["row"]: (f["positions"]["repetition"], f["repetition"]["period"], f["repetition"]["span"])
        for f in report.flagged
        if "repetition" in f["codes"]
    }
    want = expected_loops(samples, max_period=8)
    assert want and got == want
    assert len(want) < len(expected_loops(samples))
