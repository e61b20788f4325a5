"""A corpus whose columns are not called input_ids / loss_mask / sample_id / category reads the same in every
command — `scan`, `--exclude`, `--decode`, `show`, `align`, `clean` — given the column options or `[columns]` in
tokscan.toml, because all of them read through the core's one corpus reader."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tokscan import demo
from tokscan.api import default_tokenizer_dir

from conftest import run_cli

TOK = str(default_tokenizer_dir())
RENAME = {"input_ids": "tokens", "loss_mask": "mask", "sample_id": "uid", "category": "topic"}
FLAGS = ["--ids-column", "tokens", "--mask-column", "mask", "--id-column", "uid", "--category-column", "topic"]


@pytest.fixture(scope="module")
def renamed(tmp_path_factory):
    root = tmp_path_factory.mktemp("renamed")
    path, profile = demo.write_demo(root / "orig", "deepseek", seed=6)
    src = next(path.glob("*.parquet"))
    table = pq.read_table(src)
    out = root / "corpus"
    out.mkdir()
    pq.write_table(table.rename_columns([RENAME.get(n, n) for n in table.column_names]), out / "renamed.parquet")
    config = root / "tokscan.toml"
    config.write_text("[columns]\n" + "".join(f'{role} = "{name}"\n' for role, name in RENAME.items()))
    return root, path, out, profile, config


def scan_json(*args: str) -> dict:
    proc = run_cli("scan", *args, "--json", "-", "-q")
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def test_scan_and_exclude_match_the_original(renamed, tmp_path):
    _root, orig, out, profile, config = renamed
    want = scan_json(str(orig), "-p", profile)
    for how in (FLAGS, ["--config", str(config)]):
        got = scan_json(str(out), "-p", profile, *how)
        assert [(f["sample_id"], f["codes"], f["category"]) for f in got["flagged"]] == [
            (f["sample_id"], f["codes"], f["category"]) for f in want["flagged"]
        ]
        drop = tmp_path / "drop.txt"
        proc = run_cli("scan", str(out), "-p", profile, *how, "--exclude", str(drop), "-q")
        assert proc.returncode == 1, proc.stderr
        failing = set(want["verdict"]["failing"])
        chosen = [f for f in want["flagged"] if failing & set(f["codes"])]
        # Rows when a chosen sample's id is held by another row too (the planted sample_id_duplicate).
        shared = {f["sample_id"] for f in want["flagged"] if "sample_id_duplicate" in f["codes"]}
        by_id = not shared & {f["sample_id"] for f in chosen}
        assert drop.read_text().split() == [f["sample_id"] if by_id else str(f["row"]) for f in chosen]


def test_decode_and_show_read_renamed_columns(renamed):
    _root, _orig, out, profile, config = renamed
    data = scan_json(str(out), "-p", profile, *FLAGS, "--decode", "1")
    entry = data["decoded"]["truncated"][0]
    assert entry["sample_id"] is not None and entry["first"]
    sid = entry["sample_id"]
    for how in (FLAGS, ["--config", str(config)]):
        proc = run_cli("show", str(out), "-p", profile, "--sample-id", sid, *how, "--json", "-")
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["sample_id"] == sid and "truncated" in doc["codes"] and doc["category"] != "default"
    # Without them the corpus has no token column, and the error says which file and what it needs.
    proc = run_cli("show", str(out), "-p", profile, "--sample-id", sid)
    assert proc.returncode == 2 and "renamed.parquet" in proc.stderr and "input_ids" in proc.stderr, proc.stderr


def test_align_reads_renamed_columns(renamed):
    root, _orig, out, _profile, config = renamed
    template = root / "orig" / "deepseek-chat-template.jinja"
    prompts = root / "orig" / "prompts.jsonl"
    args = ["align", str(out), "--prompts", str(prompts), "--tokenizer", TOK, "--chat-template", str(template)]
    for how in (FLAGS, ["--config", str(config)]):
        proc = run_cli(*args, *how, "--json", "-")
        assert proc.returncode in (0, 1), proc.stderr
        r = json.loads(proc.stdout)
        assert "sample_id" in r["matched_by"] and r["missing"] == []
        assert r["aligned"] >= r["n_samples"] - 1  # the demo repeats one sample id on purpose


def test_clean_reads_renamed_columns(renamed, tmp_path):
    _root, _orig, out, profile, config = renamed
    report = tmp_path / "r.json"
    assert run_cli("scan", str(out), "-p", profile, *FLAGS, "--json", str(report), "-q").returncode == 1
    for k, how in enumerate((FLAGS, ["--config", str(config)])):
        dst = tmp_path / f"clean{k}"
        proc = run_cli("clean", str(out), "--report", str(report), "--out", str(dst), *how)
        assert proc.returncode == 0, proc.stderr
        manifest = json.loads((dst / "tokscan-clean.json").read_text())
        assert manifest["removed"] and all(r["sample_id"] for r in manifest["removed"])
        again = scan_json(str(dst), "-p", profile, *how)
        assert again["verdict"]["passed"], again["verdict"]
