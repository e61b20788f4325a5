"""Benchmark smoke: the benchmark's corpus generator and contenders run, and tokscan counts the same samples
and tokens as the numpy + pyarrow core scan. Speed is measured by `make bench` (ratios in the same run,
benches/README.md), never asserted here: a shared CI machine makes timed unit tests flaky."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "benches"))

import contenders
import corpus


def test_contenders_agree_on_the_benchmark_corpus(tmp_path):
    c = corpus.build(tmp_path, scale=0.01, shards=4, floors=False)
    assert c.n_tokens > 2_000_000
    got = contenders.tokscan_api(c.parquet_full)
    assert got == {"samples": c.n_samples, "tokens": c.n_tokens}
    assert contenders.numpy_core(c.parquet_full) == got
