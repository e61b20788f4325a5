"""Files tokscan reads whole, given as a FIFO or `/dev/zero`: a FIFO blocked the read forever (no writer ever
comes) and `/dev/zero` was read until memory ran out. Each is refused at once in one line naming it (exit 2),
by the one reader of whole files (`tokscan_core::files`, and `tokscan.files` on the Python side), before a byte
is read. Each command runs under a timeout, so that a regression fails instead of hanging."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tokscan
from tokscan.config import load_file

import synth

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="POSIX only")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tokscan", *args], capture_output=True, text=True, cwd=cwd, timeout=60)


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("special")
    samples = synth.build_corpus(n_clean=10, seed=3, anomalies_per_code=0)
    pq.write_table(pa.table({"input_ids": [s.ids for s in samples]}), d / "a.parquet")
    proc = run("scan", "a.parquet", "--json", "report.json", "-q", "--fail-on", "never", cwd=d)
    assert proc.returncode == 0, proc.stderr
    return d


# Every option that names a file tokscan reads whole; `X` is the special file.
CASES = {
    "--prompts": ["scan", "a.parquet", "--prompts", "X", "-q"],
    "--contamination": ["scan", "a.parquet", "--contamination", "X", "-q"],
    "--config": ["scan", "a.parquet", "--config", "X", "-q"],
    "--baseline": ["scan", "a.parquet", "--baseline", "X", "-q"],
    "clean --report": ["clean", "a.parquet", "--report", "X", "--out", "cleaned"],
    "diff BASE": ["diff", "X", "report.json"],
    "diff NEW": ["diff", "report.json", "X"],
    "--check-vocab": ["scan", "a.parquet", "--check-vocab", "X", "-q"],
}


@needs_fifo
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_fifo_or_dev_zero_is_refused_in_one_line(setup, tmp_path, case, kind):
    # A name of the kind the option expects (a mapping must end in .npz): a FIFO, or a link to /dev/zero.
    special = tmp_path / ("m.npz" if case == "--check-vocab" else "input.jsonl")
    if kind == "fifo":
        os.mkfifo(special)
    else:
        special.symlink_to("/dev/zero")
    args = [str(special) if a == "X" else a for a in CASES[case]]
    proc = run(*args, cwd=setup)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert str(special) in lines[0] and "not a regular file" in lines[0], lines[0]
    assert "FIFO" in lines[0] if kind == "fifo" else "character device" in lines[0]
    assert not (setup / "cleaned").exists()


@needs_fifo
def test_the_python_readers_refuse_a_fifo_with_their_own_errors(tmp_path):
    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    with pytest.raises(tokscan.ReportError, match="FIFO"):
        tokscan.Report.load(fifo)
    with pytest.raises(tokscan.UsageError, match="FIFO"):
        load_file(fifo)
    with pytest.raises(tokscan.UsageError, match="a directory, not a regular file"):
        load_file(tmp_path)


def test_a_file_larger_than_the_limit_is_refused_naming_the_variable(setup, tmp_path):
    """`TOKSCAN_MAX_FILE_BYTES` bounds every file read whole (default 4 GiB); a bad value names the variable."""
    cfg = tmp_path / "tokscan.toml"
    cfg.write_text("threads = 1\n" + "# padding\n" * 20)
    env = {**os.environ, "TOKSCAN_MAX_FILE_BYTES": "64"}
    for args in (["scan", "a.parquet", "--config", str(cfg)], ["scan", "a.parquet", "--prompts", str(cfg)]):
        proc = subprocess.run(
            [sys.executable, "-m", "tokscan", *args, "-q"],
            capture_output=True,
            text=True,
            cwd=setup,
            env=env,
            timeout=60,
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert str(cfg) in lines[0] and "TOKSCAN_MAX_FILE_BYTES" in lines[0], lines[0]
    proc = subprocess.run(
        [sys.executable, "-m", "tokscan", "scan", "a.parquet", "--config", str(cfg), "-q"],
        capture_output=True,
        text=True,
        cwd=setup,
        env={**os.environ, "TOKSCAN_MAX_FILE_BYTES": "lots"},
        timeout=60,
    )
    assert proc.returncode == 2 and "TOKSCAN_MAX_FILE_BYTES" in proc.stderr, proc.stderr
