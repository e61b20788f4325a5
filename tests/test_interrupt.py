"""Ctrl-C stops a plain `tokscan.scan(path)` (no progress callback) promptly: the core checks for signals from
the scan call itself, as polars does, and the scan stops at its next batch."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

CHILD = textwrap.dedent(
    """
    import sys, time
    import tokscan
    print("ready", flush=True)
    t0 = time.perf_counter()
    try:
        tokscan.scan(sys.argv[1], threads=1)
    except KeyboardInterrupt:
        print(f"interrupted {time.perf_counter() - t0:.3f}", flush=True)
        sys.exit(0)
    print(f"finished {time.perf_counter() - t0:.3f}", flush=True)
    """
)


@pytest.fixture(scope="module")
def slow_corpus(tmp_path_factory):
    """~120M tokens of Parquet in many row groups: a few seconds for one thread, so there is time to interrupt."""
    path = tmp_path_factory.mktemp("interrupt") / "big.parquet"
    rng = np.random.default_rng(0)
    lengths = np.full(30_000, 4_000)
    writer = None
    for chunk in np.array_split(np.arange(len(lengths)), 15):
        flat = rng.integers(0, 150_000, int(lengths[chunk].sum()), dtype=np.int32)
        offsets = np.concatenate([[0], np.cumsum(lengths[chunk])]).astype(np.int32)
        table = pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))})
        writer = writer or pq.ParquetWriter(path, table.schema, compression="zstd")
        writer.write_table(table, row_group_size=250)
    assert writer is not None
    writer.close()
    return path


def run_child(path, interrupt_after: float | None) -> tuple[str, float]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    t0 = time.perf_counter()
    if interrupt_after is not None:
        time.sleep(interrupt_after)
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, err
    return out.strip(), wall


def test_ctrl_c_stops_a_plain_api_scan(slow_corpus):
    full, full_wall = run_child(slow_corpus, None)
    assert full.startswith("finished"), full
    assert full_wall > 1.0, f"the corpus scans in {full_wall:.2f} s: too fast to interrupt reliably"
    got, wall = run_child(slow_corpus, 0.3)
    assert got.startswith("interrupted"), got
    # Stopped within a batch of the signal, not at the end of the scan.
    assert wall < 0.3 + max(0.5, 0.25 * full_wall), (wall, full_wall)
