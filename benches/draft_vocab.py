"""Cost of counting loss-bearing tokens (issue 23): the scan of the reference corpus (`benches/corpus.py`, the
Parquet `input_ids` + `loss_mask` layout) with and without `--draft-vocab 16000,32000,64000`, alternating,
best of `--repeat`, on one thread and on every core; for the reference corpus's uniform ids (every id alike:
the counters are touched at random, the worst case for the caches) and for the same corpus with Zipf-
distributed ids (`--ids zipf`, rank^-1.1, as token frequencies of text fall off).

    python benches/draft_vocab.py [--scale 1.0] [--repeat 3] [--ids uniform zipf] [--cache DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench import DEFAULT_CACHE

import tokscan

import corpus as corpus_mod

SIZES = [16000, 32000, 64000]


def timed(path: str, threads: int, vocab: bool) -> float:
    t0 = time.perf_counter()
    r = tokscan.scan(path, threads=threads, draft_vocab=SIZES if vocab else None)
    seconds = time.perf_counter() - t0
    assert ("draft_vocab" in r.data) == vocab
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--ids", nargs="+", choices=["uniform", "zipf"], default=["uniform", "zipf"])
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    rows = []
    for ids in a.ids:
        rows += run(a, ids)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2))


def run(a: argparse.Namespace, ids: str) -> list[dict]:
    c = corpus_mod.build(a.cache, a.scale, floors=False, ids=ids)
    path = str(c.parquet_full)
    rows = []
    for threads in (1, 0):
        best = {False: float("inf"), True: float("inf")}
        for _ in range(a.repeat):
            for vocab in (False, True):
                best[vocab] = min(best[vocab], timed(path, threads, vocab))
        row = {
            "ids": ids,
            "threads": threads,
            "samples": c.n_samples,
            "tokens": c.n_tokens,
            "scan_s": round(best[False], 3),
            "scan_draft_vocab_s": round(best[True], 3),
            "overhead": round(best[True] / best[False] - 1, 4),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    main()
