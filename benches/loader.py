"""Loader-overhead benchmark (issue: embedding in the training data loader).

    python benches/loader.py [--rows 64] [--tokens 8192] [--batches 200] [--json out.json]

1. `Validator.check` throughput on one thread: batches of `--rows` Kimi-shaped samples of about `--tokens`
   tokens (system + user prompt, reasoning, answer), flat ids + offsets and 2-D padded, against a plain NumPy
   pass over the same ids (`np.max`, the floor of anything that reads every token once).
2. `tokscan.torch.ValidatedDataset` on a DataLoader loop versus the bare dataset: a map-style dataset that
   reads each sample from a memory-mapped NumPy corpus, padded into batches of 8 by the collate function,
   with 0 and 2 workers; bare (the data path alone: the worst case) and with an emulated training step
   (`--step-ms` of sleep per batch: the accelerator's share, during which the CPU is idle). Reported as the
   wall-time overhead of the wrapped loop and the added microseconds per sample.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

import tokscan
from tokscan import demo_corpus as kimi


def kimi_rows(n: int, tokens: int, seed: int = 0) -> list[list[int]]:
    """Clean Kimi-K2.5 samples whose mean length is about `tokens`."""
    scale = max(1, round(tokens / 280))  # the generator's clean samples average ~280 tokens at scale 1
    g = kimi.Generator(seed, scale=scale)
    return [g.clean(f"s{i}", kimi.CATEGORIES[i % len(kimi.CATEGORIES)]).ids for i in range(n)]


def best_of(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def validator_throughput(rows: int, tokens: int, batches: int) -> dict:
    samples = kimi_rows(rows, tokens)
    lengths = np.array([len(s) for s in samples])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = np.concatenate([np.asarray(s) for s in samples]).astype(np.int32)
    width = int(lengths.max())
    padded = np.full((rows, width), 163839, dtype=np.int32)
    for i, s in enumerate(samples):
        padded[i, : len(s)] = s
    v = tokscan.Validator("kimi-k2", threads=1)
    n_tok = int(offsets[-1])
    assert v.check(ids, offsets).ok.all()

    def loop(f):
        return lambda: [f() for _ in range(batches)]

    out = {"rows": rows, "mean_tokens": float(lengths.mean()), "batch_tokens": n_tok}
    for name, f in {
        "flat": lambda: v.check(ids, offsets),
        "padded": lambda: v.check(padded),
        "numpy_max_floor": lambda: ids.max(),
    }.items():
        s = best_of(loop(f)) / batches
        out[name] = {"ms_per_batch": s * 1e3, "mtok_s": n_tok / s / 1e6}
    return out


class MmapDataset:
    """Map-style: sample i read from a memory-mapped tokens.npy, as a dict of tensors."""

    def __init__(self, root: Path):
        self.root = root
        self.tokens = None
        self.offsets = np.load(root / "offsets.npy")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int):
        import torch

        if self.tokens is None:  # opened lazily, once per worker process
            self.tokens = np.load(self.root / "tokens.npy", mmap_mode="r")
        a, b = self.offsets[i], self.offsets[i + 1]
        ids = torch.from_numpy(np.array(self.tokens[a:b], dtype=np.int64))
        return {"input_ids": ids}


def pad_collate(items):
    import torch

    width = max(len(x["input_ids"]) for x in items)
    out = torch.full((len(items), width), 163839, dtype=torch.int64)
    for i, x in enumerate(items):
        out[i, : len(x["input_ids"])] = x["input_ids"]
    return out


def dataloader_overhead(n: int, tokens: int, step: float) -> dict:
    import torch
    from torch.utils.data import DataLoader

    from tokscan.torch import ValidatedDataset

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        samples = kimi_rows(n, tokens, seed=1)
        lengths = np.array([len(s) for s in samples])
        np.save(root / "offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        np.save(root / "tokens.npy", np.concatenate([np.asarray(s) for s in samples]).astype(np.int32))
        out = {"samples": n, "mean_tokens": float(lengths.mean())}
        for workers, step_ms in ((0, 0.0), (2, 0.0), (0, step), (2, step)):

            def epoch(ds, workers=workers, step_ms=step_ms):
                kw = {"num_workers": workers, "multiprocessing_context": "fork"} if workers else {}
                n = 0
                for _batch in DataLoader(ds, batch_size=8, collate_fn=pad_collate, **kw):
                    if step_ms:
                        time.sleep(step_ms / 1e3)  # the accelerator's share of a step: the CPU is idle
                    n += 1
                return n

            bare = MmapDataset(root)
            wrapped = ValidatedDataset(MmapDataset(root), profile="kimi-k2")
            # The wrapped one is an IterableDataset over the same indices: same batches, same count.
            assert epoch(bare) == epoch(wrapped)
            t_bare, t_wrapped = [], []
            for _ in range(5):  # alternate, so both see the same machine state
                t_bare.append(best_of(lambda b=bare: epoch(b), 1))
                t_wrapped.append(best_of(lambda w=wrapped: epoch(w), 1))
            b, w = min(t_bare), min(t_wrapped)
            out[f"workers_{workers}_step_{step_ms:g}ms"] = {
                "bare_s": b,
                "validated_s": w,
                "overhead_pct": (w / b - 1) * 100,
                "us_per_sample": (w - b) / n * 1e6,
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--samples", type=int, default=2000, help="dataset size of the DataLoader measurement")
    ap.add_argument("--step-ms", type=float, default=20.0, help="emulated accelerator time per batch")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    res = {"validator": validator_throughput(args.rows, args.tokens, args.batches)}
    v = res["validator"]
    shape = f"{v['rows']} rows x {v['mean_tokens']:.0f} tokens ({v['batch_tokens']} per batch)"
    print(f"Validator.check, 1 thread, {shape}")
    for k in ("flat", "padded", "numpy_max_floor"):
        print(f"  {k:<16} {v[k]['ms_per_batch']:8.3f} ms/batch  {v[k]['mtok_s']:8.0f} Mtok/s")
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch not installed: DataLoader overhead skipped")
    else:
        res["dataloader"] = d = dataloader_overhead(args.samples, args.tokens, args.step_ms)
        print(f"DataLoader, {d['samples']} samples x {d['mean_tokens']:.0f} tokens, batches of 8")
        for key, r in d.items():
            if not key.startswith("workers_"):
                continue
            w, step = key.split("_")[1], key.split("_")[3]
            print(
                f"  workers={w} step={step:<6} bare {r['bare_s']:.3f} s  validated {r['validated_s']:.3f} s  "
                f"overhead {r['overhead_pct']:+.1f} %  ({r['us_per_sample']:.1f} us/sample)"
            )
    if args.json:
        args.json.write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
