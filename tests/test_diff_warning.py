"""`tokscan diff` warns when the two reports are not comparable: another profile, or the same one resolved with
and without a tokenizer vocabulary. The CLI help's PATHS names every format."""

from __future__ import annotations

from tokscan import demo
from tokscan.api import default_tokenizer_dir

from conftest import run_cli


def test_diff_warns_about_different_profiles_and_tokenizers(layouts, tmp_path):
    path = str(layouts["parquet_full"])
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert run_cli("scan", path, "-q", "--json", str(a)).returncode in (0, 1)
    assert run_cli("scan", path, "-q", "-p", "plain", "--json", str(b)).returncode in (0, 1)
    proc = run_cli("diff", str(a), str(b))
    assert "warning: the reports used different profiles (kimi-k2 vs plain)" in proc.stderr
    assert "warning" not in run_cli("diff", str(a), str(a)).stderr

    root = tmp_path / "demo"
    corpus, profile = demo.write_demo(root, "deepseek", seed=5)
    c, d = tmp_path / "c.json", tmp_path / "d.json"
    run_cli("scan", str(corpus), "-p", profile, "-q", "--json", str(c))
    run_cli("scan", str(corpus), "-p", profile, "--tokenizer", str(default_tokenizer_dir()), "-q", "--json", str(d))
    proc = run_cli("diff", str(c), str(d))
    assert "resolved differently" in proc.stderr and "base without a tokenizer vocabulary, new with" in proc.stderr


def test_scan_help_names_every_format():
    text = " ".join(run_cli("scan", "--help").stdout.split())
    for fmt in ("Parquet", "Arrow IPC", "Feather", "Megatron", "llm.c", "JSONL", "NumPy"):
        assert fmt in text, fmt
