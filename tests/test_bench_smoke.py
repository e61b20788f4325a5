"""Benchmark smoke: on a few million tokens, tokscan's full catalogue must not be slower than the numpy +
pyarrow *core* scan measured in the same run. A ratio, never an absolute time."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "benches"))

import contenders
import corpus


def best_of(n: int, f, *args) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f(*args)
        times.append(time.perf_counter() - t0)
    return min(times)


def test_tokscan_not_slower_than_numpy_baseline(tmp_path):
    c = corpus.build(tmp_path, scale=0.01, shards=4, floors=False)
    assert c.n_tokens > 2_000_000
    got = contenders.tokscan_api(c.parquet_full)
    assert got == {"samples": c.n_samples, "tokens": c.n_tokens}
    assert contenders.numpy_core(c.parquet_full) == got
    t_tokscan = best_of(3, contenders.tokscan_api, c.parquet_full)
    t_numpy = best_of(3, contenders.numpy_core, c.parquet_full)
    print(f"tokscan {t_tokscan:.3f} s, numpy+pyarrow {t_numpy:.3f} s ({t_numpy / t_tokscan:.1f}x)")
    assert t_tokscan <= t_numpy, (t_tokscan, t_numpy)
