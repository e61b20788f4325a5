"""Throughput of `tokscan.scan("s3://…")` from a loopback S3-compatible server (moto's, as in the tests) against
the same scan of the local files (issue 25 item 4; goal: at least 0.7x). The corpus is the test-suite's seeded
Kimi-shaped samples, written as zstd Parquet `input_ids` + `loss_mask` shards, NumPy and JSONL, and uploaded.

    .venv/bin/python benches/object_store.py [--samples 20000] [--repeat 3] [--ray]

Prints one line per layout (best of `--repeat`, alternating local and remote); numbers are recorded in
benches/README.md. The remote time includes fetching every object (the whole scan, as the CLI does it). With
`--ray`, also the Ray scan (a local two-CPU cluster) of the files and of the URL, and how much of the corpus
the Ray driver staged to plan (each task fetches its own parts)."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import boto3
from moto.server import ThreadedMotoServer

import tokscan

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
import synth  # the test-suite's corpora


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ray", action="store_true", help="also the Ray engine, local files against the URL")
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench-secret",
        AWS_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
        AWS_ALLOW_HTTP="true",
    )
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1")
    client.create_bucket(Bucket="bench")
    samples = synth.build_corpus(n_clean=a.samples, seed=3, anomalies_per_code=2)
    try:
        with tempfile.TemporaryDirectory() as d:
            writers = {
                "parquet": lambda o: synth.write_parquet_full(samples, o, 8, 512),
                "numpy": lambda o: synth.write_numpy(samples, o, with_mask=True, dtype="uint32"),
                "jsonl": lambda o: synth.write_jsonl(samples, o, n_shards=8),
            }
            for name, write in writers.items():
                local = write(Path(d) / name)
                files = [p for p in sorted(local.rglob("*")) if p.is_file()]
                size = sum(p.stat().st_size for p in files)
                for f in files:
                    client.upload_file(str(f), "bench", f"{name}/{f.relative_to(local).as_posix()}")
                url = f"s3://bench/{name}/"
                tl, tr = [], []
                for _ in range(a.repeat):
                    t = time.perf_counter()
                    rl = tokscan.scan(str(local), "kimi-k2")
                    tl.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    rr = tokscan.scan(url, "kimi-k2")
                    tr.append(time.perf_counter() - t)
                assert rl.n_samples == rr.n_samples and rl.n_tokens == rr.n_tokens
                lo, re_ = min(tl), min(tr)
                print(
                    f"{name:8s} {len(files):3d} objects {size / 1e6:7.1f} MB {rl.n_tokens / 1e6:6.1f}M tokens  "
                    f"local {lo:6.3f} s  s3 {re_:6.3f} s  ratio {lo / re_:.2f}x  "
                    f"({size / 1e6 / re_:.0f} MB/s from the server)",
                    flush=True,
                )
                if a.ray:
                    ray_line(name, local, url, size, a.repeat)
    finally:
        server.stop()


def ray_line(name: str, local: Path, url: str, size: int, repeat: int) -> None:
    """The Ray scan of `local` and of `url` (best of `repeat`, alternating), and what the driver stages to plan."""
    import ray

    from tokscan import _core

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    tl, tr = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        rl = tokscan.scan(str(local), "kimi-k2", engine="ray")
        tl.append(time.perf_counter() - t)
        t = time.perf_counter()
        rr = tokscan.scan(url, "kimi-k2", engine="ray")
        tr.append(time.perf_counter() - t)
    assert rl.n_samples == rr.n_samples and rl.n_tokens == rr.n_tokens
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        tasks, *_ = _core.plan_scan([url], None, 8, d)
        plan_s = time.perf_counter() - t
        staged = sum(f.stat().st_blocks * 512 for f in Path(d).rglob("*") if f.is_file())
    lo, re_ = min(tl), min(tr)
    print(
        f"{name:8s} ray: local {lo:6.3f} s  s3 {re_:6.3f} s  ratio {lo / re_:.2f}x; the driver staged "
        f"{staged / 1e6:.2f} MB of {size / 1e6:.1f} MB to plan {len(tasks)} tasks ({plan_s:.2f} s)",
        flush=True,
    )


if __name__ == "__main__":
    main()
