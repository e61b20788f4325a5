"""Hidden-state dumps (issue 48, "Speed and scale"): the three rates the issue asks `benches/` to record, in one run.

1. **Inventory + header checks** of a SpecForge dump of many small files (`--files`): the `--hidden-states` stage of
   `tokscan.scan` (the scan with it minus the same scan without it, by the report's `run.seconds`, within each
   repetition; every thread), and the core's header reader alone (`_core.hidden_state_header`, one file after the
   other from Python: no tensor byte read), against SpecForge's own validation path (list the files, then
   `torch.load(path, weights_only=True)` of each and its four keys checked, serially).
2. **Tensor scan GB/s** on a dump of wide states (`--width`, bf16, about `--wide-gb` GB of states): the stage's
   `bytes_checked` over its time (every thread, and one), against one numpy pass over the same memory-mapped bytes
   (bf16 -> f32 by `uint16 << 16`, `isfinite`, all-zero rows, the last state's row RMS) and a read floor (one
   `max` over the mapped bytes as `uint64`).
3. **Agreement positions per second** with `--target-model`: the tiny numpy model of `tests/hidden_dumps.py`
   (V = 163,840, D = 16) over its own greedy completions, and a synthetic bf16 head (`--head-vocab` x `--width`)
   over the wide dump. The cost per position is the slope between two position budgets (`--positions`,
   `--wide-positions`); from its MAC/s the cost on Kimi-K2.5's head (163,840 x 7,168 bf16) is extrapolated. A
   numpy argmax (bf16 -> f32 blocks of the head, BLAS `@`) over the same head is the reference.

    python benches/bench_hidden_states.py [--files 20000] [--wide-gb 1.5] [--width 4096] [--head-vocab 32000]
        [--parts inventory values agreement] [--repeat 3] [--cache DIR] [--json out.json]

Dumps are written once and kept in the bench cache (`~/.cache/tokscan-bench`, or `TOKSCAN_BENCH_CACHE`, or
`--cache`). Everything runs in this process, every file read once before the first timing (warm in the page cache);
contenders alternate within each repetition and the median of `--repeat` is reported (benches/README.md)."""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))

from bench import DEFAULT_CACHE

import tokscan
from tokscan import _core
from tokscan.demo_corpus import write_parquet_full

import hidden_dumps as hd

#: SpecForge's keys, the four its validation checks (`_OFFLINE_EAGLE3_KEYS`).
SPECFORGE_KEYS = ("input_ids", "loss_mask", "hidden_state", "aux_hidden_state")
#: Kimi-K2.5's output head: vocabulary x hidden size.
KIMI_HEAD = (163_840, 7_168)
#: Mean tokens per sample of `hidden_dumps.make_samples` (prompt + 36-104 completion tokens).
MEAN_TOKENS = 180


# ---- the dumps ------------------------------------------------------------------------------------------------


def _cached(root: Path) -> bool:
    """True when `root` holds a finished build; otherwise empties it for one."""
    if (root / "built.json").is_file():
        return True
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return False


def _write_specforge(dump: Path, samples: list, captures) -> None:
    """One `rows_*/data_{i}.ckpt` per sample, as `hidden_dumps.LAYOUTS["specforge"]` names and writes them;
    `captures(i, sample)` gives the sample's `hd.Capture`."""
    spec = hd.LAYOUTS["specforge"]
    for slot in spec.slots(samples, 1, 1):
        s = samples[slot.sample]
        path = dump / slot.rel
        path.parent.mkdir(parents=True, exist_ok=True)
        spec.save(spec.payload(captures(slot.sample, s), torch.bfloat16, s.sample_id), path, False)


def many_files(cache: Path, n: int, seed: int = 0) -> Path:
    """`n` samples in the Kimi-K2.5 layout with random-text completions (`foreign`: no greedy generation, which
    costs ~20 ms a sample), their Parquet corpus and a SpecForge dump of the tiny model's real states over them
    (D = 16: ~28 KB a file, so that the per-file work is what is timed)."""
    root = cache / f"hidden-specforge-n{n}-s{seed}"
    if _cached(root):
        return root
    t0 = time.perf_counter()
    samples = hd.make_samples(n, seed, foreign=hd.DEFAULT_CATEGORIES)
    write_parquet_full(samples, root / "corpus")
    model = hd.tiny_model(seed)

    def capture(_i: int, s) -> hd.Capture:
        states = model.forward(s.ids)
        return hd.Capture(
            np.asarray(s.ids, dtype=np.int64),
            np.asarray(s.mask(), dtype=np.int64),
            model.norm(states[-1]).astype(np.float32),
            np.stack([states[a] for a in model.aux_layers], axis=1).astype(np.float32),
            len(s.ids),
        )

    _write_specforge(root / "dump", samples, capture)
    meta = {"samples": n, "tokens": sum(len(s.ids) for s in samples), "build_s": time.perf_counter() - t0}
    (root / "built.json").write_text(json.dumps(meta))
    return root


def wide_dump(cache: Path, gb: float, width: int, seed: int = 0) -> Path:
    """Samples as in `many_files` with random bf16 states of `width` (SpecForge: last [1,N,D], aux [1,N,3D]):
    about `gb` GB of states."""
    n = max(4, math.ceil(gb * 1e9 / (MEAN_TOKENS * 4 * width * 2)))
    root = cache / f"hidden-wide-d{width}-n{n}-s{seed}"
    if _cached(root):
        return root
    t0 = time.perf_counter()
    samples = hd.make_samples(n, seed, foreign=hd.DEFAULT_CATEGORIES)
    write_parquet_full(samples, root / "corpus")
    rng = np.random.default_rng([seed, 4096])

    def capture(_i: int, s) -> hd.Capture:
        k = len(s.ids)
        return hd.Capture(
            np.asarray(s.ids, dtype=np.int64),
            np.asarray(s.mask(), dtype=np.int64),
            rng.standard_normal((k, width), dtype=np.float32),
            rng.standard_normal((k, 3, width), dtype=np.float32),
            k,
        )

    _write_specforge(root / "dump", samples, capture)
    meta = {"samples": n, "tokens": sum(len(s.ids) for s in samples), "build_s": time.perf_counter() - t0}
    (root / "built.json").write_text(json.dumps(meta))
    return root


def wide_head(cache: Path, vocab: int, width: int, seed: int = 0) -> Path:
    """A checkpoint directory holding only what `--target-model` reads: `config.json` and a `model.safetensors`
    with `model.norm.weight` (ones) and `lm_head.weight` (random, bf16)."""
    root = cache / f"hidden-head-v{vocab}-d{width}-s{seed}"
    if _cached(root):
        return root
    g = torch.Generator().manual_seed(seed)
    head = torch.empty(vocab, width, dtype=torch.bfloat16)
    for a in range(0, vocab, 4096):  # in blocks: a Kimi-sized head is 2.35 GB in bf16, 4.7 GB in f32
        b = min(a + 4096, vocab)
        head[a:b] = (torch.randn(b - a, width, generator=g) / math.sqrt(width)).to(torch.bfloat16)
    tensors = {"model.norm.weight": torch.ones(width, dtype=torch.bfloat16), "lm_head.weight": head}
    save_file(tensors, root / "model.safetensors", metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": width,
        "vocab_size": vocab,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (root / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (root / "built.json").write_text("{}")
    return root


def agreement_dump(cache: Path, n: int, seed: int = 0) -> Path:
    """`hidden_dumps.build`: the tiny model's own greedy completions, their SpecForge dump and its checkpoint."""
    root = cache / f"hidden-agree-n{n}-s{seed}"
    if not _cached(root):
        hd.build(root, "specforge", n=n, seed=seed)
        (root / "built.json").write_text("{}")
    return root


# ---- the contenders -------------------------------------------------------------------------------------------


def warm(*dirs: Path) -> None:
    """Every file under `dirs` read once, so that the first timed contender does not pay for the page cache."""
    for d in dirs:
        for path in d.rglob("*"):
            if path.is_file():
                with open(path, "rb") as f:
                    while f.read(1 << 23):
                        pass


def list_files(dump: Path) -> list[str]:
    """SpecForge's `list_feature_files`: every `.ckpt` under the directory, sorted."""
    out = []
    for d, _dirs, names in os.walk(dump):
        out += [os.path.join(d, x) for x in names if x.endswith((".ckpt", ".ckpt.gz"))]
    out.sort()
    return out


def torch_validation(dump: Path) -> int:
    """SpecForge's eager validation (`SPECFORGE_VALIDATE_OFFLINE_FEATURES=1`): each file loaded, its keys and
    tensors checked, one after the other."""
    n = 0
    for path in list_files(dump):
        raw = torch.load(path, weights_only=True)
        missing = [k for k in SPECFORGE_KEYS if k not in raw]
        if missing:
            raise KeyError(f"{path} missing {missing}")
        for k in SPECFORGE_KEYS:
            if not hasattr(raw[k], "shape") or not hasattr(raw[k], "dtype"):
                raise TypeError(f"{path}: {k} is not a tensor")
        n += 1
    return n


def core_headers(dump: Path) -> int:
    """The core's header reader, file after file from Python: the zip's central directory and the restricted
    pickle, no tensor byte; then the same four keys checked."""
    n = 0
    for path in list_files(dump):
        names = {t["name"] for t in json.loads(_core.hidden_state_header(path))["tensors"]}
        if not names.issuperset(SPECFORGE_KEYS):
            raise KeyError(f"{path} missing {set(SPECFORGE_KEYS) - names}")
        n += 1
    return n


def state_tensors(dump: Path) -> list[tuple[str, list[dict]]]:
    """Each file with the offsets of its bf16 state tensors (read with the core's header reader, untimed)."""
    out = []
    for path in list_files(dump):
        tensors = json.loads(_core.hidden_state_header(path))["tensors"]
        out.append((path, [t for t in tensors if t["dtype"] == "bf16"]))
    return out


def numpy_pass(files: list[tuple[str, list[dict]]]) -> dict:
    """One numpy pass over the mapped state bytes: bf16 -> f32, non-finite values, all-zero rows, and the row RMS
    of the last state (`hidden_state`), as the core checks them."""
    nonfinite = zero = nbytes = 0
    rms = []
    for path, tensors in files:
        m = np.memmap(path, dtype=np.uint8, mode="r")
        for t in tensors:
            u = np.frombuffer(m, dtype=np.uint16, count=t["bytes"] // 2, offset=t["offset"])
            x = (u.astype(np.uint32) << 16).view(np.float32).reshape(-1, t["shape"][-1])
            nonfinite += int(x.size - np.count_nonzero(np.isfinite(x)))
            zero += int(x.shape[0] - np.count_nonzero(x.any(axis=1)))
            if t["name"] == "hidden_state":
                rms.append(np.sqrt(np.einsum("ij,ij->i", x, x) / x.shape[1]))
            nbytes += t["bytes"]
        del m
    return {
        "bytes": nbytes,
        "nonfinite": nonfinite,
        "zero_rows": zero,
        "median_rms": float(np.median(np.concatenate(rms))),
    }


def read_floor(files: list[tuple[str, list[dict]]]) -> int:
    """Every mapped state byte read once (a `max` over them as `uint64`)."""
    nbytes = 0
    for path, tensors in files:
        m = np.memmap(path, dtype=np.uint8, mode="r")
        for t in tensors:
            np.frombuffer(m, dtype=np.uint64, count=t["bytes"] // 8, offset=t["offset"]).max()
            nbytes += t["bytes"]
        del m
    return nbytes


def numpy_argmax(head_dir: Path, positions: int, block: int = 4096) -> np.ndarray:
    """argmax(lm_head . x) of `positions` states with numpy: the head's bf16 rows converted to f32 a block at a
    time, one BLAS product per block."""
    path = head_dir / "model.safetensors"
    t = next(t for t in json.loads(_core.hidden_state_header(path))["tensors"] if t["name"] == "lm_head.weight")
    vocab, width = t["shape"]
    x = np.random.default_rng(0).standard_normal((positions, width), dtype=np.float32)
    head = np.memmap(path, dtype=np.uint16, mode="r", offset=t["offset"], shape=(vocab, width))
    best = np.full(positions, -np.inf, dtype=np.float32)
    arg = np.zeros(positions, dtype=np.int64)
    for a in range(0, vocab, block):
        w = (head[a : a + block].astype(np.uint32) << 16).view(np.float32)
        s = x @ w.T
        k = s.argmax(1)
        v = s[np.arange(positions), k]
        better = v > best
        best[better], arg[better] = v[better], k[better] + a
    return arg


# ---- timing ---------------------------------------------------------------------------------------------------


def cpu_seconds() -> float:
    """User + system CPU seconds of this process, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def scan(corpus: Path, **kw) -> tuple[float, float, tokscan.Report]:
    """`tokscan.scan`: the core's own seconds (`run.seconds`: opening the inputs to the report), the call's CPU
    seconds (every thread), the report."""
    c = cpu_seconds()
    r = tokscan.scan(corpus, **kw)
    return r.data["run"]["seconds"], cpu_seconds() - c, r


def clock(f) -> tuple[float, float, object]:
    """Wall and CPU seconds of `f()`, and what it returned."""
    t, c = time.perf_counter(), cpu_seconds()
    out = f()
    return time.perf_counter() - t, cpu_seconds() - c, out


def med(v: list[float]) -> float:
    return statistics.median(v)


def rate(amount: float, seconds: float) -> float | None:
    """`amount / seconds`, or None when a difference of timings came out at or below zero (tiny inputs)."""
    return amount / seconds if seconds > 0 else None


def emit(out: dict, key: str, row: dict) -> None:
    out[key] = row
    print(json.dumps({key: row}), flush=True)


# ---- the three parts ------------------------------------------------------------------------------------------


def _summary(wall: dict[str, list[float]], cpu: dict[str, list[float]]) -> dict:
    """Median wall and CPU seconds of each contender, and every run's wall seconds."""
    return {
        "seconds": {k: round(med(v), 4) for k, v in wall.items()},
        "cpu_seconds": {k: round(med(v), 4) for k, v in cpu.items()},
        "runs": {k: [round(x, 4) for x in v] for k, v in wall.items()},
    }


def inventory(a: argparse.Namespace, out: dict) -> None:
    root = many_files(a.cache, a.files)
    corpus, dump = root / "corpus", root / "dump"
    meta = json.loads((root / "built.json").read_text())
    warm(corpus, dump)
    names = ("scan", "scan_hidden", "stage", "core_headers", "torch_load")
    wall: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(a.repeat):
        base, base_cpu, _ = scan(corpus)
        with_h, with_cpu, r = scan(corpus, hidden_states=dump)
        h = r.data["hidden_states"]
        assert h["files"] == a.files and h["pairing"]["by_rule"] == {"index": a.files}, h["pairing"]
        assert not [f for f in r.flagged if any(c.startswith("hidden_") for c in f["codes"])]
        del r
        for k, w, c in (("scan", base, base_cpu), ("scan_hidden", with_h, with_cpu)):
            wall[k].append(w)
            cpu[k].append(c)
        wall["stage"].append(with_h - base)
        cpu["stage"].append(with_cpu - base_cpu)
        for k, f in (("core_headers", core_headers), ("torch_load", torch_validation)):
            w, c, n = clock(lambda f=f: f(dump))
            assert n == a.files
            wall[k].append(w)
            cpu[k].append(c)
    m = {k: med(v) for k, v in wall.items()}
    fps = {
        "tokscan_stage": rate(a.files, m["stage"]),
        "core_headers_1_thread": rate(a.files, m["core_headers"]),
        "torch_load_1_thread": rate(a.files, m["torch_load"]),
    }
    emit(
        out,
        "inventory",
        {
            "files": a.files,
            "dump_bytes": h["bytes"],
            "state_bytes_checked": h["bytes_checked"],
            "corpus_tokens": meta["tokens"],
            "build_s": round(meta["build_s"], 1),
            "files_per_s": {k: v and round(v) for k, v in fps.items()},
            "stage_files_per_cpu_s": (v := rate(a.files, med(cpu["stage"]))) and round(v),
            "torch_over_stage": (v := rate(m["torch_load"], m["stage"])) and round(v, 2),
            "torch_over_core_headers": round(m["torch_load"] / m["core_headers"], 2),
            "stage_s_at_100k_files": fps["tokscan_stage"] and round(100_000 / fps["tokscan_stage"], 2),
            **_summary(wall, cpu),
        },
    )


def values(a: argparse.Namespace, out: dict) -> None:
    root = wide_dump(a.cache, a.wide_gb, a.width)
    corpus, dump = root / "corpus", root / "dump"
    files = state_tensors(dump)
    warm(corpus, dump)
    names = ("stage_threads_all", "stage_threads_1", "numpy_pass", "read_floor")
    wall: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(a.repeat):
        for threads, key in ((0, "stage_threads_all"), (1, "stage_threads_1")):
            base, base_cpu, _ = scan(corpus, threads=threads)
            with_h, with_cpu, r = scan(corpus, hidden_states=dump, threads=threads)
            h = r.data["hidden_states"]
            del r
            wall[key].append(with_h - base)
            cpu[key].append(with_cpu - base_cpu)
        for k, f in (("numpy_pass", numpy_pass), ("read_floor", read_floor)):
            w, c, res = clock(lambda f=f: f(files))
            wall[k].append(w)
            cpu[k].append(c)
            if k == "numpy_pass":
                np_out = res
    assert h["bytes_checked"] == np_out["bytes"], (h["bytes_checked"], np_out["bytes"])
    assert np_out["nonfinite"] == 0 and np_out["zero_rows"] == 0
    gb = np_out["bytes"] / 1e9
    gbs = {k: (v := rate(gb, med(wall[k]))) and round(v, 3) for k in names}
    emit(
        out,
        "values",
        {
            "files": h["files"],
            "width": a.width,
            "positions": h["positions"],
            "state_bytes": np_out["bytes"],
            "dump_bytes": h["bytes"],
            "gb_per_s": gbs,
            "gb_per_cpu_s": {k: (v := rate(gb, med(cpu[k]))) and round(v, 3) for k in names},
            "stage_over_numpy": (v := rate(gbs["stage_threads_all"] or 0, gbs["numpy_pass"])) and round(v, 2),
            **_summary(wall, cpu),
        },
    )


def _agreement_costs(corpus: Path, dump: Path, model: Path, budgets: list[int], repeat: int) -> dict:
    """The stage with `--target-model` at each position budget minus the same stage without it, per repetition;
    the positions the report sampled."""
    warm(corpus, dump, model)
    costs: dict[int, list[float]] = {b: [] for b in budgets}
    cpu: dict[int, list[float]] = {b: [] for b in budgets}
    positions: dict[int, tuple[int, int]] = {}
    for _ in range(repeat):
        base, base_cpu, _ = scan(corpus, hidden_states=dump)
        for b in budgets:
            s, c, r = scan(corpus, hidden_states=dump, target_model=model, agreement_positions=b)
            ag = r.data["hidden_states"]["agreement"]
            positions[b] = (ag["positions"], ag["agreed"])
            costs[b].append(s - base)
            cpu[b].append(c - base_cpu)
    return {"costs": costs, "cpu": cpu, "positions": positions}


def _per_position(res: dict, macs_per_position: int) -> dict:
    """Cost per position as the slope between the smallest and largest budget; the rest is fixed (the head's
    bf16 -> f32 conversion, the sampled rows' norm check)."""
    budgets = sorted(res["costs"])
    cost = {b: med(res["costs"][b]) for b in budgets}
    lo, hi = budgets[0], budgets[-1]
    (p_lo, _), (p_hi, _) = res["positions"][lo], res["positions"][hi]
    slope = (cost[hi] - cost[lo]) / (p_hi - p_lo) if p_hi > p_lo else None
    slope = slope if slope and slope > 0 else None
    fixed = cost[lo] - slope * p_lo if slope else None
    cpu = {b: med(res["cpu"][b]) for b in budgets}
    cpu_slope = (cpu[hi] - cpu[lo]) / (p_hi - p_lo) if p_hi > p_lo else None
    cpu_slope = cpu_slope if cpu_slope and cpu_slope > 0 else None
    return {
        "budgets": {
            str(b): {
                "positions": res["positions"][b][0],
                "agreed": res["positions"][b][1],
                "cost_s": round(cost[b], 4),
                "cost_cpu_s": round(med(res["cpu"][b]), 4),
                "positions_per_s": (v := rate(res["positions"][b][0], cost[b])) and round(v, 1),
                "runs": [round(x, 4) for x in res["costs"][b]],
            }
            for b in budgets
        },
        "s_per_position": slope,
        "positions_per_s_marginal": slope and round(1 / slope, 1),
        "gmac_per_s": slope and round(macs_per_position / slope / 1e9, 3),
        "gmac_per_cpu_s": cpu_slope and round(macs_per_position / cpu_slope / 1e9, 3),
        "fixed_s": fixed and round(fixed, 4),
    }


def agreement(a: argparse.Namespace, out: dict) -> None:
    tiny = agreement_dump(a.cache, a.agree_samples)
    model = hd.tiny_model(0)
    res = _agreement_costs(tiny / "corpus", tiny / "dump", tiny / "model", a.positions, a.repeat)
    row = {"vocab": model.vocab_size, "width": model.dim, "samples": a.agree_samples}
    row |= _per_position(res, model.vocab_size * model.dim)
    emit(out, "agreement_tiny", row)

    wide = wide_dump(a.cache, a.wide_gb, a.width)
    head = wide_head(a.cache, a.head_vocab, a.width)
    res = _agreement_costs(wide / "corpus", wide / "dump", head, a.wide_positions, a.repeat)
    row = {"vocab": a.head_vocab, "width": a.width} | _per_position(res, a.head_vocab * a.width)
    p = res["positions"][max(a.wide_positions)][0]
    numpy_argmax(head, p)  # warm
    # OpenBLAS uses every core (unless OPENBLAS_NUM_THREADS says otherwise), as the core's pool does.
    runs = [clock(lambda: numpy_argmax(head, p)) for _ in range(a.repeat)]
    s = med([w for w, _c, _ in runs])
    row["numpy_blas"] = {
        "positions": p,
        "seconds": round(s, 4),
        "cpu_seconds": round(med([c for _w, c, _ in runs]), 4),
        "positions_per_s": round(p / s, 1),
        "gmac_per_s": round(p * a.head_vocab * a.width / s / 1e9, 3),
    }
    kimi = KIMI_HEAD[0] * KIMI_HEAD[1]
    scale = kimi / (a.head_vocab * a.width)
    if row["gmac_per_s"]:
        per = kimi / (row["gmac_per_s"] * 1e9)
        fixed = max(row["fixed_s"] or 0.0, 0.0) * scale
        row["kimi_k2.5_head"] = {
            "s_per_position": round(per, 4),
            "fixed_s": round(fixed, 3),
            "default_1024_positions_s": round(fixed + 1024 * per, 1),
            "cpu_s_per_position": row["gmac_per_cpu_s"] and round(kimi / (row["gmac_per_cpu_s"] * 1e9), 4),
            "numpy_blas_s_per_position": round(kimi / (row["numpy_blas"]["gmac_per_s"] * 1e9), 4),
        }
    emit(out, "agreement_wide", row)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=20_000, help="files of the many-files dump (part 1)")
    ap.add_argument("--wide-gb", type=float, default=1.5, help="GB of states in the wide dump (parts 2, 3)")
    ap.add_argument("--width", type=int, default=4096, help="hidden size D of the wide dump and head")
    ap.add_argument("--head-vocab", type=int, default=32_000, help="vocabulary of the synthetic wide head")
    ap.add_argument("--agree-samples", type=int, default=256, help="samples of the tiny model's own dump")
    ap.add_argument("--positions", type=int, nargs=2, default=[1024, 4096], help="budgets, tiny model")
    ap.add_argument("--wide-positions", type=int, nargs=2, default=[64, 256], help="budgets, wide head")
    ap.add_argument("--parts", nargs="+", choices=["inventory", "values", "agreement"], default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    parts = a.parts or ["inventory", "values", "agreement"]
    out: dict = {"threads": os.cpu_count(), "repeat": a.repeat}
    for name, part in (("inventory", inventory), ("values", values), ("agreement", agreement)):
        if name in parts:
            part(a, out)
    if a.json:
        a.json.write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
