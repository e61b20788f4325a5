"""Memory that parameters could blow up (issue 46, item 6): near-duplicate parameters whose signatures or candidate
pairs would not fit the budget are refused naming the options and the budget; similar samples under many bands,
and draft-vocabulary counts over many small categories, stay small. Peak memory is the scanning process's own
(`VmHWM`), on small corpora written here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

PEAK_LIMIT_MB = 400


def _numpy_corpus(out: Path, seqs: list[np.ndarray], categories: list[str]) -> Path:
    out.mkdir(parents=True)
    offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in seqs], out=offsets[1:])
    np.save(out / "tokens.npy", np.concatenate(seqs).astype(np.int32))
    np.save(out / "offsets.npy", offsets)
    ids = [f"s{i}" for i in range(len(seqs))]
    pq.write_table(pa.table({"sample_id": ids, "category": categories}), out / "meta.parquet")
    return out


def _similar(out: Path, n: int) -> Path:
    """`n` completions of 300 tokens, each one differing from a common one in 3 tokens."""
    rng = np.random.default_rng(0)
    base = rng.integers(0, 100_000, 300)
    seqs = []
    for _ in range(n):
        s = base.copy()
        s[rng.integers(0, 300, 3)] = rng.integers(0, 100_000, 3)
        seqs.append(s)
    return _numpy_corpus(out, seqs, ["a"] * n)


def _peak_scan(args: str, env: dict[str, str] | None = None) -> dict:
    """`tokscan.scan(<args>)` in a process of its own: its peak resident memory (MB) and parts of the report."""
    code = (
        "import json, tokscan\n"
        f"r = tokscan.scan({args})\n"
        "hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
        "print(json.dumps({'peak_mb': int(hwm.split()[1]) / 1024, 'near': r.data.get('near_duplicates'),"
        " 'vocab': r.data.get('draft_vocab')}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_near_dup_parameters_whose_signatures_exceed_the_budget_are_refused(tmp_path):
    """4096 bins of 4 bytes per sample for 2,000 samples is 33 MB of signatures: over a 16 MB budget, a usage error
    naming the options and the budget before anything is scanned; the defaults fit."""
    path = _similar(tmp_path / "c", 2000)
    env = {**os.environ, "TOKSCAN_NEAR_DUP_MEMORY": str(16 << 20)}
    scan = [sys.executable, "-m", "tokscan", "scan", str(path), "--profile", "plain", "--near-dup"]
    r = subprocess.run(
        [*scan, "--near-dup-bands", "4096", "--near-dup-rows", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert "--near-dup-bands 4096 × --near-dup-rows 1" in lines[0] and "TOKSCAN_NEAR_DUP_MEMORY" in lines[0]
    assert "16.0 MiB" in lines[0], lines[0]
    r = subprocess.run(scan, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode in (0, 1), r.stderr


def test_similar_samples_under_many_bands_stay_small(tmp_path):
    """3,000 near-copies under 4096 bands of 1 row: every band is one group of them, paired with its first 8 rows
    (98M pairs when each band's were kept: 1.6 GB and more); the distinct pairs are kept once."""
    path = _similar(tmp_path / "c", 3000)
    got = _peak_scan(f"{str(path)!r}, 'plain', near_dup=True, near_dup_bands=4096, near_dup_rows=1")
    near = got["near"]
    assert near["clusters"] == 1 and near["samples"] == 3000
    assert got["peak_mb"] < PEAK_LIMIT_MB, got["peak_mb"]


def test_draft_vocab_counts_of_many_small_categories_stay_small(tmp_path):
    """1,000 one-sample categories over a 129,280-id vocabulary: a dense count per id per category was 1 GB (3.3 GB
    for 3,000); counted sparsely, the same coverage in a fraction of it."""
    rng = np.random.default_rng(1)
    seqs = [rng.integers(0, 129_280, 1000) for _ in range(1000)]
    path = _numpy_corpus(tmp_path / "c", seqs, [f"c{i}" for i in range(1000)])
    profile = tmp_path / "p.toml"
    profile.write_text('base = "plain"\nvocab_size = 129280\n')
    got = _peak_scan(f"{str(path)!r}, {str(profile)!r}, draft_vocab=[1000]")
    vocab = got["vocab"]
    assert len(vocab["categories"]) == 1000
    assert vocab["overall"]["loss_tokens"] == 1_000_000
    all_ids = np.concatenate(seqs)
    assert vocab["overall"]["distinct"] == len(np.unique(all_ids))
    one = vocab["categories"]["c7"]
    assert one["loss_tokens"] == 1000 and one["distinct"] == len(np.unique(seqs[7]))
    assert got["peak_mb"] < PEAK_LIMIT_MB, got["peak_mb"]


@pytest.mark.parametrize("budget", ["-1", "1e9", "lots"])
def test_a_bad_budget_names_the_variable(tmp_path, budget):
    path = _similar(tmp_path / "c", 50)
    r = subprocess.run(
        [sys.executable, "-m", "tokscan", "scan", str(path), "--profile", "plain", "--near-dup"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TOKSCAN_NEAR_DUP_MEMORY": budget},
    )
    assert r.returncode == 2 and "TOKSCAN_NEAR_DUP_MEMORY" in r.stderr and "Traceback" not in r.stderr
