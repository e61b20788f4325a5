"""Where the length limit cut a `truncated` sample: inside its reasoning, inside a tool call or inside the
response. The core decides it (the completion's open tool-call section, else its open reasoning); the JSON, the
terminal summary and `show` say it. Samples are Kimi-K2 token ids from `../shared/reference/chat-formats.md`."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import tokscan

from conftest import run_cli

SYS, USER, ASST, MID, END = 163594, 163587, 163588, 163601, 163586
THINK, UNTHINK = 163606, 163607
SEC, CALL, ARG, CALL_END, SEC_END = 163595, 163597, 163598, 163599, 163596
SYSTEM_NAME, USER_NAME, ASSISTANT_NAME = 14062, 2482, 69702


def text(n: int, seed: int) -> list[int]:
    return [1000 + (i * 7919 + seed * 104729) % 90000 for i in range(n)]


def prompt(seed: int) -> list[int]:
    return [SYS, SYSTEM_NAME, MID, *text(12, seed), END, USER, USER_NAME, MID, *text(20, seed + 1), END,
            ASST, ASSISTANT_NAME, MID, THINK]  # fmt: skip


def corpus(tmp_path: Path) -> Path:
    clean = [*text(30, 3), UNTHINK, *text(20, 4), END]
    in_reasoning = text(40, 5)
    in_call = [*text(25, 6), SEC, CALL, *text(4, 7), ARG, *text(9, 8)]
    in_response = [*text(30, 9), UNTHINK, *text(25, 10)]
    called = [*text(25, 6), SEC, CALL, *text(4, 7), ARG, *text(9, 8), CALL_END, SEC_END, *text(3, 11)]
    rows = [clean, in_reasoning, in_call, in_response, called]
    path = tmp_path / "kimi.parquet"
    pq.write_table(
        pa.table({"input_ids": [prompt(i) + c for i, c in enumerate(rows)], "sample_id": [f"s{i}" for i in range(5)]}),
        path,
    )
    return path


def test_the_json_summary_and_show_say_where_a_sample_was_cut(tmp_path):
    path = corpus(tmp_path)
    r = tokscan.scan(path, "kimi-k2")
    assert r.flagged_rows("truncated") == [1, 2, 3, 4]
    cut = {f["row"]: f.get("cut_in") for f in r.flagged if "truncated" in f["codes"]}
    # Row 4 closed its tool call and went on answering: cut in the response.
    assert cut == {1: "reasoning", 2: "tool_call", 3: "response", 4: "response"}
    assert r.data["overall"]["truncated_in"] == {"reasoning": 1, "tool_call": 1, "response": 2}
    proc = run_cli("scan", str(path), "-p", "kimi-k2")
    said = " ".join(proc.stdout.split())
    assert "truncated samples were cut in the reasoning 1 · in a tool call 1 · in the response 2" in said, said
    proc = run_cli("show", str(path), "-p", "kimi-k2", "--row", "2", "--json", "-")
    doc = json.loads(proc.stdout)
    assert doc["cut_in"] == "tool_call"
    # What this scan could not check is the core's, in the JSON, the summary and `show` alike: no loss mask,
    # no tokenizer vocabulary.
    assert r.not_checked() == r.data["not_checked"] == doc["not_checked"]
    assert set(r.not_checked()) == {
        "loss_mask_misaligned", "spelled_special", "tool_call_arguments", "tool_call_name", "tool_call_undeclared"
    }  # fmt: skip
    assert "not checked in this corpus: loss_mask_misaligned (no input has a loss mask or labels)" in said
    proc = run_cli("show", str(path), "-p", "kimi-k2", "--row", "1")
    assert "truncated at token" in proc.stdout and "(cut inside the reasoning)" in " ".join(proc.stdout.split())
    # A corpus with nothing cut carries no breakdown.
    clean = tmp_path / "clean.parquet"
    pq.write_table(pq.read_table(path).slice(0, 1), clean)
    assert "truncated_in" not in tokscan.scan(clean, "kimi-k2").data["overall"]
