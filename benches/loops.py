"""Planted-loop recall: how many degenerate loops the `repetition` check finds, by period.

    python benches/loops.py [--samples 400] [--min-period 3] [--max-period 400] [--out DIR] [--json FILE]

Writes (seeded) a Kimi-K2.5-shaped Parquet corpus in which every sample's response loops on a block of
`min-period..max-period` random tokens: half of them until the length limit (a completion cut mid-repeat, no end
of turn), half for 4-12 repeats (more for short blocks, to reach 64 tokens) and then end normally. Every planted
loop has at least 4 repeats and 64 tokens.
Prints how many were flagged, and with the planted period, per period bucket.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from pathlib import Path

import numpy as np

import tokscan
from tokscan import demo_corpus as kimi

LENGTH_LIMIT = 8192  # completion tokens


def build(n: int, lo: int, hi: int, seed: int = 0) -> tuple[list[kimi.Sample], list[int]]:
    g = kimi.Generator(seed)
    samples, periods = [], []
    for i in range(n):
        s = g.clean(f"loop-{i:05d}", kimi.CATEGORIES[i % len(kimi.CATEGORIES)])
        period = int(g.rng.integers(lo, hi + 1))
        unit = g.text(period)
        head = [*g.text(s.thinking), kimi.UNTHINK, *g.text(s.response)]
        if i % 2:  # loops until the length limit
            reps = max(4, (LENGTH_LIMIT - len(head)) // period + 1)
            body = (unit * (reps + 1))[: max(LENGTH_LIMIT - len(head), 4 * period, 64)]
            s.completion = [*head, *body]
        else:
            least = max(4, -(-64 // period))  # 4 repeats and 64 tokens
            reps = int(g.rng.integers(least, least + 9))
            s.completion = [*head, *(unit * reps), kimi.IM_END]
        samples.append(s)
        periods.append(period)
    return samples, periods


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--min-period", type=int, default=3)
    ap.add_argument("--max-period", type=int, default=400)
    ap.add_argument("--out", type=Path, default=None, help="corpus directory (default: a temporary one)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    samples, periods = build(a.samples, a.min_period, a.max_period)
    with tempfile.TemporaryDirectory() as tmp:
        out = kimi.write_parquet_full(samples, (a.out or Path(tmp)) / "loops")
        report = tokscan.scan(out, threads=0)
    found = {f["row"]: f.get("repetition", {}).get("period") for f in report.flagged if "repetition" in f["codes"]}
    edges = [1, 9, 65, 257, 1025, 1 << 30]
    rows = []
    for lo, hi in itertools.pairwise(edges):
        idx = [i for i, p in enumerate(periods) if lo <= p < hi]
        if idx:
            hit = sum(1 for i in idx if i in found)
            exact = sum(1 for i in idx if found.get(i) == periods[i])
            rows.append({"periods": f"{lo}-{hi - 1}", "planted": len(idx), "found": hit, "exact_period": exact})
    total = {"planted": len(periods), "found": len(found), "exact_period": sum(rows_["exact_period"] for rows_ in rows)}
    for r in rows:
        bucket, hit, planted, exact = r["periods"], r["found"], r["planted"], r["exact_period"]
        print(f"periods {bucket:>10}: {hit:4d} of {planted:4d} found, {exact:4d} with the period")
    print(
        f"all: {total['found']} of {total['planted']} found ({np.round(100 * total['found'] / total['planted'], 1)} %)"
    )
    if a.json:
        a.json.write_text(json.dumps({"buckets": rows, "total": total}, indent=2))


if __name__ == "__main__":
    main()
