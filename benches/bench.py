"""tokscan benchmark: one command, documented in benches/README.md.

    python benches/bench.py [--scale 1.0] [--repeat 3] [--json out.json] [--scaling] [--cache DIR]

Each measurement runs in a fresh subprocess (so peak RSS is that contender's own) and contenders alternate
within each repetition; the best wall time of the repetitions is reported.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import corpus as corpus_mod
from contenders import CONTENDERS

DEFAULT_CACHE = Path(os.environ.get("TOKSCAN_BENCH_CACHE", Path.home() / ".cache" / "tokscan-bench"))


#: Modules each contender imports, loaded before the clock starts (interpreter start-up is not timed,
#: except for the CLI, whose start-up is part of what a user waits for).
WARM = {
    "tokscan_api": "tokscan",
    "tokscan_api_json": "tokscan",
    "duckdb_core": "duckdb",
    "polars_core": "polars",
    "numpy_pyarrow_core": "pyarrow.parquet",
    "zstd_floor": "zstandard",
}


def run_one(name: str, path: str, threads: int) -> dict:
    if name in WARM:
        importlib.import_module(WARM[name])
    c0 = cpu_seconds()
    t0 = time.perf_counter()
    info = CONTENDERS[name](Path(path), threads)
    seconds = time.perf_counter() - t0
    cpu = cpu_seconds() - c0
    return {"seconds": seconds, "cpu_s": cpu, "rss_mb": max(peak_rss_mb(), children_rss_mb()), **info}


def cpu_seconds() -> float:
    """User + system CPU time of this process's threads and its waited-for children (the CLI contender)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def peak_rss_mb() -> float:
    """This process image's peak RSS (VmHWM); ru_maxrss would include the forking parent's size."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def children_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def measure(name: str, path: Path, threads: int) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--one", name, "--path", str(path), "--threads", str(threads)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def target_path(c: corpus_mod.Corpus, name: str) -> Path:
    if name == "zstd_floor":
        return c.zstd_chunks
    if name == "mmap_floor":
        return c.numpy
    return c.parquet_full


def table(c: corpus_mod.Corpus, repeat: int, threads: int, names: list[str], extra: dict[str, Path]) -> dict:
    runs: dict[str, list[dict]] = {}
    jobs = [(n, target_path(c, n)) for n in names] + list(extra.items())
    for _ in range(repeat):
        for label, path in jobs:
            name = label.split("@")[0]
            runs.setdefault(label, []).append(measure(name, path, threads))
    best = {k: min(v, key=lambda r: r["seconds"]) for k, v in runs.items()}
    for r in best.values():
        r["mtok_s"] = c.n_tokens / r["seconds"] / 1e6
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--one")
    ap.add_argument("--path")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="corpus size relative to the 88k-sample seed corpus")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--scaling", action="store_true", help="also time 1/4x, 1/2x, 1x, 2x and 1 vs 2 threads")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(run_one(a.one, a.path, a.threads)))
        return

    t0 = time.perf_counter()
    c = corpus_mod.build(a.cache, a.scale)
    print(
        f"corpus: {c.n_samples:,} samples, {c.n_tokens / 1e6:,.1f}M tokens at {c.root} "
        f"(ready in {time.perf_counter() - t0:.0f} s)"
    )
    extra = {
        "tokscan_api@numpy": c.numpy,
        "tokscan_api@split": c.parquet_split,
        "tokscan_cli_json@numpy": c.numpy,
    }
    best = table(c, a.repeat, a.threads, list(CONTENDERS), extra)
    duck = best["duckdb_core"]["seconds"]
    floor = best["zstd_floor"]["seconds"]
    print(f"\n{'contender':<24}{'seconds':>9}{'Mtok/s':>10}{'peak RSS MB':>13}{'vs duckdb':>11}{'vs zstd':>9}")
    for name, r in best.items():
        print(
            f"{name:<24}{r['seconds']:>9.3f}{r['mtok_s']:>10,.0f}{r['rss_mb']:>13,.0f}"
            f"{duck / r['seconds']:>10.2f}x{r['seconds'] / floor:>8.2f}x"
        )
    cli, api = best["tokscan_cli_json"]["seconds"], best["tokscan_api_json"]["seconds"]
    cli_np, floor_np = best["tokscan_cli_json@numpy"]["seconds"], best["mmap_floor"]["seconds"]
    print(
        f"\nCLI targets: scan --json on zstd Parquet {cli:.3f} s = {cli / api:.2f}x scan()+write_json "
        f"({api:.3f} s; target <= 1.15x); CLI on NumPy {floor_np / cli_np:.0%} of one numpy pass "
        f"({cli_np:.3f} s vs {floor_np:.3f} s; target >= 50%)"
    )
    out: dict = {"corpus": {"samples": c.n_samples, "tokens": c.n_tokens, "scale": a.scale}, "results": best}
    if a.scaling:
        scaling = {}
        for s in (0.25, 0.5, 1.0, 2.0):
            cs = corpus_mod.build(a.cache, a.scale * s)
            r = min((measure("tokscan_api", cs.parquet_full, 0) for _ in range(a.repeat)), key=lambda r: r["seconds"])
            scaling[f"{s}x"] = {"tokens": cs.n_tokens, **r}
            print(
                f"scale {s:>4}x: {cs.n_tokens / 1e6:7.1f}M tokens {r['seconds']:.3f} s "
                f"{r['rss_mb']:.0f} MB ({cs.n_tokens / r['seconds'] / 1e6:,.0f} Mtok/s)"
            )
        t1 = min((measure("tokscan_api", c.parquet_full, 1) for _ in range(a.repeat)), key=lambda r: r["seconds"])
        t2 = best["tokscan_api"]
        # CPU seconds tell whether a shortfall is extra work in the scan (CPU grows with threads) or the
        # machine not running both threads all the time (CPU flat, wall speed-up below the thread count).
        print(
            f"threads: 1 -> {t1['seconds']:.3f} s ({t1['cpu_s']:.2f} CPU s), 2 -> {t2['seconds']:.3f} s "
            f"({t2['cpu_s']:.2f} CPU s); speed-up {t1['seconds'] / t2['seconds']:.2f}x, "
            f"CPU use {t2['cpu_s'] / t2['seconds']:.2f} of 2 cores"
        )
        out["scaling"] = scaling
        out["threads"] = {"1": t1, "2": t2}
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
