"""`--ray-address` that cannot work fails within seconds with one line: `auto` with no cluster on this machine
(it must not start a local one), and a host:port nothing listens on (Ray alone retries it for ~20 s and prints
its C++ client's log lines)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import synth

pytest.importorskip("ray")


def run(args, env) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tokscan", *args], capture_output=True, text=True, env=env, timeout=120
    )
    return proc, time.monotonic() - t0


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray-errors")
    return synth.write_parquet_full(synth.build_corpus(n_clean=20, seed=4, anomalies_per_code=0), root / "c")


def test_auto_with_no_cluster_is_one_line_and_starts_nothing(corpus, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = str(tmp_path)  # where `ray start` would record a cluster: empty
    proc, seconds = run(["scan", str(corpus), "--ray", "--ray-address", "auto", "-q"], env)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "none is running" in lines[0], proc.stderr
    assert not (tmp_path / "ray").exists(), "a local cluster was started"
    assert seconds < 30


def test_a_bad_address_fails_fast_with_one_line(corpus):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc, seconds = run(["scan", str(corpus), "--ray", "--ray-address", "127.0.0.1:1", "-q"], env)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "cannot connect to the Ray cluster at 127.0.0.1:1" in lines[0]
    assert seconds < 30
