from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

import synth

# `make test` draws the same examples on every run (CI must answer the same twice); `slow` hunts with new ones.
settings.register_profile("fast", max_examples=15, deadline=None, derandomize=True)
settings.register_profile("slow", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


@pytest.fixture(scope="session")
def samples() -> list[synth.Sample]:
    return synth.build_corpus(n_clean=400, seed=7, anomalies_per_code=2)


@pytest.fixture(scope="session")
def layouts(samples, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("layouts")
    return {name: writer(samples, root / name) for name, (writer, _mask) in synth.LAYOUTS.items()}


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokscan", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def oracle_outliers(categories: list[str], totals: list[int]) -> set[int]:
    """Rows whose total length is outside the log2 Tukey far-out fence of their category (numpy)."""
    cats = np.array(categories)
    tot = np.log2(np.array(totals, dtype=np.float64) + 1.0)
    rows: set[int] = set()
    for c in np.unique(cats):
        idx = np.flatnonzero(cats == c)
        if len(idx) < 20:
            continue
        q1, q3 = np.percentile(tot[idx], [25, 75])
        iqr = max(q3 - q1, 0.5)
        rows |= {int(i) for i in idx if tot[i] < q1 - 3 * iqr or tot[i] > q3 + 3 * iqr}
    return rows
