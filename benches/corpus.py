"""The benchmark reference corpus: Kimi-K2.5-shaped samples with realistic per-category length
distributions, generated vectorised (seeded) and written as zstd Parquet and NumPy."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tokscan.demo_corpus import (
    ASSISTANT_NAME,
    CATEGORIES,
    IM_ASSISTANT,
    IM_END,
    IM_MIDDLE,
    IM_SYSTEM,
    IM_USER,
    SYSTEM_NAME,
    THINK,
    UNTHINK,
    USER_NAME,
)

#: (system, user, thinking, response) median lengths per category; lognormal around them.
MEDIANS = {
    "B1_glaive": (300, 120, 400, 150),
    "B2_opencodeinstruct": (40, 250, 1500, 600),
    "B3_magicoder": (40, 300, 1200, 700),
    "B4_mixturethoughts": (40, 120, 2600, 300),
    "B5_openthoughts": (40, 150, 3000, 350),
    "B6_ultrachat": (40, 200, 500, 450),
    "B7_sharegpt": (40, 250, 600, 500),
    "B8_sweagent": (900, 2500, 800, 300),
}
SEED_SAMPLES = 88_000
TRUNCATED_RATE = 0.01


@dataclass
class Corpus:
    root: Path
    n_samples: int
    n_tokens: int

    @property
    def parquet_full(self) -> Path:
        return self.root / "parquet_full"

    @property
    def parquet_split(self) -> Path:
        return self.root / "parquet_split"

    @property
    def numpy(self) -> Path:
        return self.root / "numpy"

    @property
    def zstd_chunks(self) -> Path:
        return self.root / "tokens.zst-chunks"


#: Exponent of the Zipf draw (`ids="zipf"`): natural-language token frequencies fall off about as rank^-1.1.
ZIPF_EXPONENT = 1.1


def zipf_ids(rng: np.random.Generator, size: int, lo: int = 1000, hi: int = 160000) -> np.ndarray:
    """`size` ids in `[lo, hi)` with Zipf frequencies (rank^-ZIPF_EXPONENT), the ranks spread over the range by
    a fixed permutation (frequent ids are not neighbours, as in a real vocabulary)."""
    ranks = np.arange(1, hi - lo + 1, dtype=np.float64)
    cdf = np.cumsum(ranks**-ZIPF_EXPONENT)
    cdf /= cdf[-1]
    perm = (lo + np.random.default_rng(12345).permutation(hi - lo)).astype(np.int32)
    out = np.empty(size, dtype=np.int32)
    step = 1 << 24
    for a in range(0, size, step):
        b = min(size, a + step)
        out[a:b] = perm[np.minimum(np.searchsorted(cdf, rng.random(b - a)), hi - lo - 1)]
    return out


def generate(n: int, seed: int = 0, ids: str = "uniform"):
    """Flat tokens, offsets, prompt lengths and categories of `n` samples; `ids` "uniform" (every id of
    1000..160000 alike: the reference corpus) or "zipf" (see `zipf_ids`)."""
    rng = np.random.default_rng(seed)
    cat_idx = rng.integers(0, len(CATEGORIES), size=n)
    med = np.array([MEDIANS[c] for c in CATEGORIES], dtype=np.float64)[cat_idx]
    lens = np.maximum(1, rng.lognormal(np.log(med), 0.6)).astype(np.int64)
    lens = np.minimum(lens, 16000)
    s, u, t, r = lens.T
    prompt = 3 + s + 1 + 3 + u + 1 + 4  # system turn, user turn, assistant header + pre-filled <think>
    completion = t + 1 + r + 1
    truncated = rng.random(n) < TRUNCATED_RATE
    completion = completion - truncated  # the last token (<|im_end|>) cut off
    total = prompt + completion
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(total, out=offsets[1:])
    if ids == "zipf":
        tokens = zipf_ids(rng, int(offsets[-1]))
    else:
        tokens = rng.integers(1000, 160000, size=int(offsets[-1]), dtype=np.int32)
    o = offsets[:-1]

    def put(pos, value):
        tokens[pos] = value

    put(o, IM_SYSTEM), put(o + 1, SYSTEM_NAME), put(o + 2, IM_MIDDLE)
    e = o + 3 + s
    put(e, IM_END), put(e + 1, IM_USER), put(e + 2, USER_NAME), put(e + 3, IM_MIDDLE)
    e = e + 4 + u
    put(e, IM_END), put(e + 1, IM_ASSISTANT), put(e + 2, ASSISTANT_NAME), put(e + 3, IM_MIDDLE), put(e + 4, THINK)
    c = o + prompt
    put(c + t, UNTHINK)
    ok = ~truncated
    put((c + completion - 1)[ok], IM_END)
    return tokens, offsets, prompt, cat_idx


def _list(offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))


def build(
    root: Path,
    scale: float = 1.0,
    seed: int = 0,
    shards: int = 23,
    row_group_rows: int = 512,
    floors: bool = True,
    ids: str = "uniform",
) -> Corpus:
    """Writes (or reuses, when already cached) the corpus at `scale` x the seed size under `root`; `ids` as in
    `generate` (the reference corpus is "uniform")."""
    n = max(100, int(SEED_SAMPLES * scale))
    root = root / (f"kimi-n{n}-s{seed}" + ("" if ids == "uniform" else f"-{ids}"))
    meta_file = root / "corpus.json"
    if meta_file.is_file():
        m = json.loads(meta_file.read_text())
        return Corpus(root, m["n_samples"], m["n_tokens"])
    tokens, offsets, prompt, cat_idx = generate(n, seed, ids)
    cats = np.array(CATEGORIES)[cat_idx]
    root.mkdir(parents=True, exist_ok=True)
    for d in ("parquet_full", "parquet_split", "numpy"):
        (root / d).mkdir(exist_ok=True)
    bounds = np.linspace(0, n, shards + 1).astype(int)
    for k in range(shards):
        a, b = int(bounds[k]), int(bounds[k + 1])
        base = offsets[a]
        offs = offsets[a : b + 1] - base
        vals = tokens[base : offsets[b]]
        is_completion = np.zeros(len(vals), dtype=np.int8)
        starts = offs[:-1] + prompt[a:b]
        # mask = 1 from each completion start to its sample end (cumsum of +1 at starts, -1 at ends)
        delta = np.zeros(len(vals) + 1, dtype=np.int32)
        np.add.at(delta, starts, 1)
        np.add.at(delta, offs[1:], -1)
        is_completion[:] = np.cumsum(delta[:-1]).astype(np.int8)
        full = pa.table(
            {
                "sample_id": pa.array(np.arange(a, b)),
                "category": pa.array(cats[a:b]),
                "input_ids": _list(offs, vals),
                "loss_mask": _list(offs, is_completion),
            }
        )
        pq.write_table(
            full, root / "parquet_full" / f"part-{k:03d}.parquet", compression="zstd", row_group_size=row_group_rows
        )
        p_offs = np.zeros(b - a + 1, dtype=np.int64)
        np.cumsum(prompt[a:b], out=p_offs[1:])
        p_idx = np.concatenate([np.arange(s, s + p) for s, p in zip(offs[:-1], prompt[a:b], strict=True)])
        c_mask = np.ones(len(vals), dtype=bool)
        c_mask[p_idx] = False
        c_offs = offs - p_offs
        split = pa.table(
            {
                "sample_id": pa.array(np.arange(a, b)),
                "category": pa.array(cats[a:b]),
                "prompt_ids": _list(p_offs, vals[~c_mask]),
                "output_ids": _list(c_offs, vals[c_mask]),
            }
        )
        pq.write_table(
            split, root / "parquet_split" / f"part-{k:03d}.parquet", compression="zstd", row_group_size=row_group_rows
        )
    np.save(root / "numpy" / "tokens.npy", tokens)
    np.save(root / "numpy" / "offsets.npy", offsets)
    pq.write_table(pa.table({"sample_id": np.arange(n), "category": cats}), root / "numpy" / "meta.parquet")
    if floors:
        _write_zstd_chunks(tokens, root / "tokens.zst-chunks")
    meta_file.write_text(json.dumps({"n_samples": n, "n_tokens": int(offsets[-1])}))
    return Corpus(root, n, int(offsets[-1]))


def _write_zstd_chunks(tokens: np.ndarray, path: Path, chunk_bytes: int = 1 << 20) -> None:
    """The same token bytes as 1 MiB zstd frames (level 3, like Parquet's default): the decompression floor."""
    import zstandard

    c = zstandard.ZstdCompressor(level=3)
    raw = tokens.tobytes()
    with path.open("wb") as f:
        for i in range(0, len(raw), chunk_bytes):
            frame = c.compress(raw[i : i + chunk_bytes])
            f.write(len(frame).to_bytes(4, "little"))
            f.write(frame)
