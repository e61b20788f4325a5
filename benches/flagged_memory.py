"""Peak memory of a scan whose every sample is flagged (issue 22, item 9): one command, in benches/README.md.

    python benches/flagged_memory.py [--samples 1000000] [--cache DIR] [--tokscan PATH] [--flagged-detail N]

Writes (once, cached) a NumPy corpus of three-token samples that the default profile cannot parse (every one is
flagged `no_user_turn`), runs ``tokscan scan DIR --json FILE --exclude FILE -q`` in a child process and prints
its peak RSS, the flagged counts from the report (listed in full / packed in `flagged_summarized`) and the
number of lines in the exclude file (each flagged sample must still be listed there). `--flagged-detail` is
passed through (default: the CLI's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

DEFAULT_CACHE = Path(os.environ.get("TOKSCAN_BENCH_CACHE", Path.home() / ".cache" / "tokscan-bench"))


def corpus(n: int, cache: Path) -> Path:
    d = cache / f"all-flagged-{n}"
    if (d / "offsets.npy").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    np.save(d / "tokens.npy", rng.integers(1000, 50_000, size=3 * n, dtype=np.int32))
    np.save(d / "offsets.npy", np.arange(0, 3 * n + 1, 3, dtype=np.int64))
    return d


def own_peak_mb(p: subprocess.Popen) -> float:
    """The child's own peak RSS (VmHWM of its process image), read until it exits. `ru_maxrss` of a child is
    not it: Linux starts a child's maximum at its parent's size at fork, so a driver that built a large corpus
    in memory would be counted too."""
    peak = 0
    status = f"/proc/{p.pid}/status"
    while p.poll() is None:
        try:
            with open(status) as f:
                peak = max(peak, next((int(x.split()[1]) for x in f if x.startswith("VmHWM:")), 0))
        except (OSError, StopIteration):
            break
        time.sleep(0.02)
    return peak / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--tokscan", default=str(Path(sys.executable).parent / "tokscan"))
    ap.add_argument("--flagged-detail", type=int, default=None)
    a = ap.parse_args()
    extra = [] if a.flagged_detail is None else ["--flagged-detail", str(a.flagged_detail)]
    d = corpus(a.samples, a.cache)
    out = a.cache / "flagged-out"
    out.mkdir(exist_ok=True)
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [a.tokscan, "scan", str(d), "--json", str(out / "r.json"), "--exclude", str(out / "x.txt"), "-q", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    rss = own_peak_mb(p)
    _stdout, stderr = p.communicate()
    secs = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        sys.exit(f"scan failed: {stderr.strip()}")
    report = json.loads((out / "r.json").read_text())
    with open(out / "x.txt", "rb") as f:
        excluded = sum(1 for _ in f)
    n_listed = len(report["flagged"])
    n_packed = int(report.get("flagged_summarized", {}).get("samples", 0))
    print(
        f"{a.samples:,} samples: peak RSS {rss:,.0f} MB, {secs:.1f} s, flagged {n_listed + n_packed:,} "
        f"({n_listed:,} in full, {n_packed:,} summarized), "
        f"exclude lines {excluded:,}, report {(out / 'r.json').stat().st_size / 1e6:,.1f} MB"
    )


if __name__ == "__main__":
    main()
