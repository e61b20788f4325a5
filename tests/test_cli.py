"""The command line: summary, JSON report, exit codes and one-line errors for bad input."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import synth
from conftest import run_cli


def assert_one_line_error(proc, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_scan_writes_json_and_fails_on_errors(layouts, tmp_path):
    out = tmp_path / "report.json"
    proc = run_cli("scan", str(layouts["parquet_full"]), "--profile", "kimi-k2", "--json", str(out))
    assert proc.returncode == 1, proc.stderr
    assert "Anomalies" in proc.stdout and "B1_glaive" in proc.stdout and "FAIL" in proc.stdout
    data = json.loads(out.read_text())
    for key in (
        "schema_version",
        "tool",
        "profile",
        "inputs",
        "n_samples",
        "n_tokens",
        "categories",
        "anomalies",
        "flagged",
    ):
        assert key in data
    assert data["tool"]["name"] == "tokscan"
    f = data["flagged"][0]
    assert set(f) >= {"sample_id", "row", "source", "category", "codes", "severity", "positions"}


def test_fail_on_levels(tmp_path):
    clean = [s for s in synth.build_corpus(n_clean=60, seed=3, anomalies_per_code=0)]
    d = synth.write_parquet_full(clean, tmp_path / "clean", n_shards=1)
    assert run_cli("scan", str(d), "-q").returncode == 0
    dirty = synth.build_corpus(n_clean=60, seed=3, anomalies_per_code=1)
    d2 = synth.write_parquet_full(dirty, tmp_path / "dirty", n_shards=1)
    assert run_cli("scan", str(d2), "-q").returncode == 1
    assert run_cli("scan", str(d2), "-q", "--fail-on", "never").returncode == 0
    proc = run_cli("scan", str(d2), "--json", "-")
    assert json.loads(proc.stdout)["n_samples"] == len(dirty)


def test_missing_path(tmp_path):
    assert_one_line_error(run_cli("scan", str(tmp_path / "nope")), str(tmp_path / "nope"), "no such file")


def test_unknown_profile(layouts):
    assert_one_line_error(run_cli("scan", str(layouts["numpy"]), "--profile", "llama-9"), "llama-9", "unknown profile")


def test_unknown_column(layouts):
    proc = run_cli("scan", str(layouts["parquet_full"]), "--ids-column", "tokens")
    assert_one_line_error(proc, "part-000.parquet", '"tokens"', "input_ids")


@pytest.mark.parametrize(
    ("column", "needle"),
    [
        (pa.array(["a b", "c"]), "expected"),
        (pa.array([[1.0, 2.0], [3.0]]), "expected"),
        # A list of lists reads when each row holds one list (a batch of one, `[[...]]`); several are an error.
        (pa.array([[[1], [2]], [[3]]]), "batch of one"),
    ],
    ids=["string", "float-list", "nested-list"],
)
def test_wrong_column_type(tmp_path, column, needle):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"input_ids": column}), path)
    assert_one_line_error(run_cli("scan", str(path)), str(path), "input_ids", needle)


def test_not_parquet(tmp_path):
    path = tmp_path / "notes.parquet"
    path.write_text("hello, I am not a parquet file\n")
    assert_one_line_error(run_cli("scan", str(path)), str(path), "Parquet")


def test_profiles_and_codes_commands():
    proc = run_cli("profiles")
    assert proc.returncode == 0 and "kimi-k2" in proc.stdout and "deepseek" in proc.stdout
    plain = next(line for line in proc.stdout.splitlines() if line.startswith("plain"))
    assert "vocab_size=any" in plain and "4294967295" not in proc.stdout
    proc = run_cli("codes")
    assert proc.returncode == 0 and "unterminated_thinking" in proc.stdout
