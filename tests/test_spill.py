"""Records spilled to disk past the memory budget (`TOKSCAN_RECORDS_MEMORY`): the corpus-wide checks then run
as on a cluster (keys routed into buckets on disk, repeats found bucket by bucket, records read back to resolve),
and the report is byte-for-byte the in-memory one, on every layout, whatever the budget."""

from __future__ import annotations

from pathlib import Path

import pytest

import tokscan

import synth


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """Every layout, with exact duplicates, repeated sample ids and prompts answered twice or filed under two
    categories, spread over the corpus so that they meet only across units and buckets."""
    samples = synth.with_repeats(31, same_ids=10)
    root = tmp_path_factory.mktemp("spill")
    return {name: writer(samples, root / name) for name, (writer, _mask) in synth.LAYOUTS.items()}


@pytest.mark.parametrize("layout", list(synth.LAYOUTS))
def test_spilled_records_give_the_in_memory_report(corpus, layout, monkeypatch):
    path = str(corpus[layout])
    monkeypatch.setenv("TOKSCAN_RECORDS_MEMORY", "0")  # never spill
    memory = tokscan.scan(path, threads=2)
    assert memory.count("duplicate") >= 40 and memory.count("sample_id_duplicate") >= 10
    assert memory.count("prompt_duplicate") >= 8 and memory.count("prompt_cross_category") >= 4
    # 1 byte: every unit spilled, one key bucket per sample; 20 kB: some units kept, a few buckets.
    for budget in ("1", "20000"):
        monkeypatch.setenv("TOKSCAN_RECORDS_MEMORY", budget)
        spilled = tokscan.scan(path, threads=2)
        assert spilled.findings == memory.findings, (layout, budget)


def test_a_spill_that_cannot_be_written_is_one_line_naming_the_way_out(corpus, tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "TMPDIR": str(tmp_path / "missing"), "TOKSCAN_RECORDS_MEMORY": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "tokscan", "scan", str(corpus["parquet_full"]), "-q"],
        capture_output=True,
        text=True,
        env=env,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "cannot write the scan's temporary records" in lines[0] and "TOKSCAN_RECORDS_MEMORY=0" in lines[0]
    env["TOKSCAN_RECORDS_MEMORY"] = "0"  # kept in memory: no temporary file needed
    proc = subprocess.run(
        [sys.executable, "-m", "tokscan", "scan", str(corpus["parquet_full"]), "-q"], capture_output=True, env=env
    )
    assert proc.returncode == 1, proc.stderr
    # A budget that is not a number of bytes is refused, not taken as the default.
    # (Also where nothing is spilled: a scan with --near-dup keeps every record.)
    for var, more in (
        ("TOKSCAN_RECORDS_MEMORY", []),
        ("TOKSCAN_RECORDS_MEMORY", ["--near-dup"]),
        ("TOKSCAN_MAX_LINE_BYTES", []),
    ):
        bad = {**os.environ, var: "-1"}
        proc = subprocess.run(
            [sys.executable, "-m", "tokscan", "scan", str(corpus["jsonl"]), "-q", *more],
            capture_output=True,
            text=True,
            env=bad,
        )
        assert proc.returncode == 2 and f'{var}="-1": not a number of bytes' in proc.stderr, (more, proc.stderr)


@pytest.mark.parametrize("layout", ["parquet_full", "numpy", "jsonl"])
def test_findings_past_the_detail_limit_are_the_same_rows_and_codes(corpus, layout, monkeypatch):
    """With a detail limit small enough that the corpus-wide findings are summarized before the report sees
    them (in memory and spilled), every flagged row keeps every code it has without a limit."""
    path = str(corpus[layout])
    monkeypatch.setenv("TOKSCAN_RECORDS_MEMORY", "0")
    everything = tokscan.scan(path, threads=2, flagged_detail=0)
    codes = sorted({c for f in everything.flagged for c in f["codes"]})
    assert {"duplicate", "prompt_duplicate", "length_outlier"} <= set(codes)
    want = {c: everything.flagged_rows(c) for c in codes}
    reports = []
    for budget in ("0", "1"):
        monkeypatch.setenv("TOKSCAN_RECORDS_MEMORY", budget)
        r = tokscan.scan(path, threads=2, flagged_detail=3)
        assert r.data["flagged_summarized"]["by_code"]["duplicate"] >= 30, budget
        assert {c: r.flagged_rows(c) for c in codes} == want, budget
        assert r.data["prompt_groups"] == everything.data["prompt_groups"], budget
        reports.append(r.findings)
    assert reports[0] == reports[1]
