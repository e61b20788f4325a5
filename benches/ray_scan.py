"""Ray's cost: the same scan local vs on a warm local Ray cluster, the driver's peak memory as the sample
count grows, and the per-task / per-merge cost a reader needs to predict a bigger run.

    python benches/ray_scan.py --scale 1.0           # the ~254M-token reference corpus (cached, see corpus.py)
    python benches/ray_scan.py --scale 0.1 --json benches/ray-results.json

1. *Overhead*: `tokscan.scan(numpy corpus)` and `scan(..., engine="ray")` alternating on one warm cluster
   (`ray.init` once, not timed), best of `--repeat`; the reports are checked identical.
2. *Driver memory*: corpora of many small samples (1×, 10×, 100× the base count; ~30 tokens each, NumPy), each
   scanned with `engine="ray"` in a fresh driver process that joins the warm cluster; the driver's peak RSS
   (VmHWM) is reported next to a local scan's, whose per-sample records grow with the corpus.
3. *Unit costs*: the wall time of `n` scan tasks over tiny inputs and of merging `n` partial summaries, per
   task / per merge.
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

sys.path.insert(0, str(Path(__file__).parent))
import tokscan
from tokscan import _core

import corpus as bench_corpus

CHILD = """
import json, os, sys, tokscan
r = tokscan.scan(sys.argv[1], engine=sys.argv[2])
hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM:'))
print(json.dumps([int(hwm.split()[1]) / 1024, r.n_samples]))
"""


def small_samples(root: Path, n: int, seed: int = 0, name: str | None = None) -> Path:
    """`n` short distinct samples (a clean Kimi turn around 12 random text ids), NumPy layout."""
    d = root / (name or f"small-{n}")
    if (d / "offsets.npy").is_file():
        return d
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    head = np.array([163594, 14062, 163601, 11, 163586, 163587, 2482, 163601, 12, 163586, 163588, 69702, 163601])
    body = rng.integers(1000, 150_000, size=(n, 12), dtype=np.int64)
    tail = np.array([163586])
    rows = np.concatenate([np.broadcast_to(head, (n, len(head))), body, np.broadcast_to(tail, (n, 1))], axis=1)
    np.save(d / "tokens.npy", rows.astype(np.int32).ravel())
    np.save(d / "offsets.npy", np.arange(n + 1, dtype=np.int64) * rows.shape[1])
    return d


def driver_rss(path: Path, engine: str, address: str) -> tuple[float, int]:
    env = {**os.environ, "RAY_ADDRESS": address}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), engine], capture_output=True, text=True, env=env, check=True
    )
    rss, n = json.loads(out.stdout.strip().splitlines()[-1])
    return rss, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--small", type=int, default=100_000, help="base sample count of the memory runs")
    ap.add_argument(
        "--cache", type=Path, default=Path(os.environ.get("TOKSCAN_BENCH_CACHE", Path.home() / ".cache/tokscan-bench"))
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    address = ray.get_runtime_context().gcs_address
    results: dict[str, object] = {"cpus": args.cpus, "scale": args.scale}

    c = bench_corpus.build(args.cache, scale=args.scale)
    results["overhead"] = {}
    for layout, path in (("parquet_full", str(c.parquet_full)), ("numpy", str(c.numpy))):
        tokscan.scan(path, engine="ray")  # warm the workers (profile loaded, imports done)
        local_t, ray_t = [], []
        for _ in range(args.repeat):
            t = time.perf_counter()
            local = tokscan.scan(path)
            local_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            remote = tokscan.scan(path, engine="ray")
            ray_t.append(time.perf_counter() - t)
            assert remote.data == local.data, "the Ray report differs from the local one"
        results["overhead"][layout] = {
            "tokens": local.n_tokens,
            "local_s": min(local_t),
            "ray_s": min(ray_t),
            "ratio": min(ray_t) / min(local_t),
        }
        print(
            f"overhead ({layout}): {local.n_tokens / 1e6:.0f}M tokens, local {min(local_t):.2f} s, "
            f"ray {min(ray_t):.2f} s ({min(ray_t) / min(local_t):.2f}x)"
        )

    mem = []
    for k in (1, 10, 100):
        d = small_samples(args.cache / "ray-small", args.small * k)
        ray_rss, n = driver_rss(d, "ray", address)
        local_rss, _ = driver_rss(d, "local", address)
        mem.append({"samples": n, "driver_rss_mb_ray": ray_rss, "rss_mb_local": local_rss})
        print(f"memory: {n:,} samples: ray driver {ray_rss:.0f} MB, local scan {local_rss:.0f} MB")
    results["driver_memory"] = mem

    # Per-task cost: 64 tasks over 64 tiny inputs (100 samples each), on the warm cluster.
    tiny_root = args.cache / "ray-tiny"
    for k in range(64):
        small_samples(tiny_root, 100, seed=k, name=f"part-{k:02d}")
    tasks, *_ = _core.plan_scan([str(tiny_root)], None, 64)

    @ray.remote
    def one(task: bytes) -> bytes:
        from tokscan.integrations.ray import _profile

        partial, _buckets, _records = _core.TaskScan(task, _profile("kimi-k2", None, False), {"threads": 1}).run()
        return partial

    ray.get([one.remote(t) for t in tasks])  # warm
    t = time.perf_counter()
    ray.get([one.remote(t) for t in tasks])
    per_task = (time.perf_counter() - t) / len(tasks)
    # Per-merge cost on the partial summaries of the reference corpus's tasks (realistic sizes).
    prof = tokscan.load_profile("kimi-k2")
    ref_tasks, *_ = _core.plan_scan([str(c.parquet_full)], None, 8)
    parts = [_core.TaskScan(t, prof).run()[0] for t in ref_tasks]
    t = time.perf_counter()
    for _ in range(20):
        _core.merge_partials(parts)
    per_merge = (time.perf_counter() - t) / (20 * len(parts))
    size = sum(len(p) for p in parts) / len(parts)
    results["unit_costs"] = {
        "tasks": len(tasks),
        "cluster_cpus": args.cpus,
        "wall_ms_per_task": per_task * 1e3,
        "partial_bytes": size,
        "merge_ms_per_partial": per_merge * 1e3,
    }
    print(
        f"unit costs: {per_task * 1e3:.1f} ms wall per tiny task ({len(tasks)} tasks on {args.cpus} CPUs); "
        f"a reference-corpus partial is {size / 1e3:.0f} kB and merges in {per_merge * 1e3:.2f} ms"
    )
    ray.shutdown()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
