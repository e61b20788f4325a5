"""Forensics with the real DeepSeek-V4 tokenizer: `tokscan show`, `scan --decode`, prompt records."""

from __future__ import annotations

import json

import pytest

import tokscan
from tokscan import demo, forensics
from tokscan.api import default_tokenizer_dir

import synth
from conftest import run_cli

TOK = default_tokenizer_dir()


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    root = tmp_path_factory.mktemp("forensics")
    path, _profile = demo.write_demo(root, "deepseek", seed=11)
    samples = demo._deepseek_samples(11)
    prompts = root / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"id": s.sample_id, "messages": [{"role": "user", "content": f"question of {s.sample_id}"}]})
            + "\n"
            for s in samples
        )
    )
    return path, samples, prompts


def row_of(samples, code):
    return next(i for i, s in enumerate(samples) if code in s.expected)


def show(path, *args):
    proc = run_cli("show", str(path), "-p", "deepseek", "--tokenizer", str(TOK), "--json", "-", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_show_clean_sample_segments_and_text(ds):
    path, samples, _ = ds
    row = next(i for i, s in enumerate(samples) if not s.expected and i > 20)
    doc = show(path, "--row", str(row))
    assert doc["row"] == row and doc["sample_id"] == samples[row].sample_id and doc["codes"] == []
    kinds = [seg["kind"] for seg in doc["segments"]]
    for kind in ("system", "user", "thinking", "response"):
        assert kind in kinds, kinds
    text = {seg["kind"]: seg["text"] for seg in doc["segments"]}
    assert text["system"] in demo.SYSTEMS
    assert "Quick sanity check" in text["thinking"]
    tokenizer = forensics.load_tokenizer(TOK)
    assert "".join(seg["text"] for seg in doc["segments"]) == tokenizer.decode(samples[row].ids)
    assert doc["lengths"]["total"] == len(samples[row].ids)


def test_show_flagged_sample_by_id_marks_the_anomaly(ds):
    path, samples, prompts = ds
    row = row_of(samples, "trailing_tokens")
    doc = show(path, "--sample-id", samples[row].sample_id, "--prompts", str(prompts))
    assert doc["codes"] == ["trailing_tokens"]
    ex = doc["excerpts"]["trailing_tokens"]
    assert ex["at"] == "<｜User｜>" and "Fahrenheit" in ex["after"]
    assert doc["prompt_record"]["match"].endswith(f"{prompts} line {row + 1} (paired by id)")
    assert doc["prompt_record"]["record"]["messages"][0]["content"] == f"question of {samples[row].sample_id}"
    terminal = run_cli("show", str(path), "-p", "deepseek", "--tokenizer", str(TOK), "--row", str(row))
    assert terminal.returncode == 0 and "trailing_tokens at token" in terminal.stdout


def test_show_of_a_repeated_sample_id_names_its_other_rows(ds):
    path, samples, _ = ds
    copy = row_of(samples, "sample_id_duplicate")
    first = next(i for i, s in enumerate(samples) if s.sample_id == samples[copy].sample_id)
    assert first < copy
    proc = run_cli("show", str(path), "-p", "deepseek", "--sample-id", samples[copy].sample_id, "--json", "-")
    assert proc.returncode == 0 and json.loads(proc.stdout)["row"] == first
    assert f"showing row {first}, the first; it is also row {copy} (--row N shows one)" in proc.stderr
    quiet = run_cli("show", str(path), "-p", "deepseek", "--sample-id", samples[copy].sample_id, "-q")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_show_of_a_record_nested_too_deeply_is_one_line(ds, tmp_path):
    path, samples, _ = ds
    deep = tmp_path / "deep.jsonl"
    record = json.dumps({"id": samples[0].sample_id, "messages": [{"role": "user", "content": "x"}]})
    deep.write_text(record[:-1] + ', "extra": ' + "[" * 50_000 + "]" * 50_000 + "}\n")
    proc = run_cli("show", str(path), "-p", "deepseek", "--row", "0", "--prompts", str(deep), "-q")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"tokscan: error: {deep} line 1: the prompt record is nested too deeply to show"
    ]


def test_show_without_tokenizer_prints_ids_and_errors_are_one_line(ds):
    path, samples, _ = ds
    proc = run_cli("show", str(path), "-p", "deepseek", "--row", "3", "--json", "-")
    doc = json.loads(proc.stdout)
    assert sum(len(s["ids"]) for s in doc["segments"]) == len(samples[3].ids)
    proc = run_cli("show", str(path), "-p", "deepseek", "--sample-id", "nope")
    assert proc.returncode == 2 and "nope" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("layout", ["parquet_split", "numpy_mask"])
def test_fetch_by_row_in_every_layout(layout, layouts, samples):
    corpus = forensics.Corpus([str(layouts[layout])])
    for row in (0, 137, len(samples) - 1):
        s = corpus.fetch(row)
        assert s.ids.tolist() == samples[row].ids and s.sample_id == samples[row].sample_id
        if layout == "parquet_split":
            assert s.prompt_len == len(samples[row].prompt)
    assert corpus.find_id(samples[200].sample_id) == 200


class CountingTokenizer:
    def __init__(self, inner):
        self.inner, self.calls, self.tokens = inner, 0, 0

    def decode(self, ids, skip_special_tokens=False):
        self.calls += 1
        self.tokens += len(ids)
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens)


def test_decode_touches_only_flagged_samples(ds):
    path, samples, _ = ds
    report = tokscan.scan(path, profile="deepseek")
    tok = CountingTokenizer(forensics.load_tokenizer(TOK))
    decoded = forensics.decode_flagged(report, [str(path)], tok, per_code=1)
    entries = [e for v in decoded.values() for e in v]
    assert set(decoded) == {c for f in report.flagged for c in f["codes"]}
    expected_calls = sum(5 if e["excerpt"] is not None else 2 for e in entries)
    assert tok.calls == expected_calls
    assert tok.tokens <= len(entries) * (2 * forensics.EDGE_TOKENS + 2 * forensics.EXCERPT_RADIUS + 1)
    rep = decoded["repetition"][0]
    assert rep["row"] == row_of(samples, "repetition") and "I think so." in rep["excerpt"]["after"]


def test_scan_decode_cli(ds, tmp_path):
    path, _samples, _ = ds
    out = tmp_path / "r.json"
    proc = run_cli("scan", str(path), "-p", "deepseek", "--decode", "2", "--tokenizer", str(TOK), "--json", str(out))
    assert proc.returncode == 1 and "Decoded examples" in proc.stdout
    data = json.loads(out.read_text())
    assert data["decoded"]["truncated"][0]["last"]
    # Without a tokenizer: id excerpts, special tokens by name.
    ids_out = tmp_path / "ids.json"
    proc = run_cli("scan", str(path), "-p", "deepseek", "--decode", "2", "--json", str(ids_out))
    assert proc.returncode == 1 and "Decoded examples" in proc.stdout, proc.stderr
    entry = json.loads(ids_out.read_text())["decoded"]["truncated"][0]
    assert entry["decoder"] == "ids"
    assert "<｜begin▁of▁sentence｜>" in entry["first"], entry["first"]


def test_show_json_segments_are_the_cores(ds):
    """`show --json` segments are exactly `_core.check_one`'s, with the decoded text of each range."""
    path, samples, _ = ds
    profile = tokscan.load_profile("deepseek")
    tokenizer = forensics.load_tokenizer(TOK)
    rows = [3, row_of(samples, "trailing_tokens"), row_of(samples, "truncated")]
    for row in rows:
        doc = show(path, "--row", str(row))
        ids = samples[row].ids
        core = tokscan._core.check_one(profile, list(ids), None, samples[row].mask())["segments"]
        assert [(s["kind"], s["start"], s["end"]) for s in doc["segments"]] == core, row
        assert core[0][1] == 0 and core[-1][2] == len(ids)
        for s in doc["segments"]:
            assert s["text"] == tokenizer.decode(ids[s["start"] : s["end"]]), s
    trailing = show(path, "--row", str(rows[1]))
    assert "trailing" in [s["kind"] for s in trailing["segments"]]


def test_kimi_layout_rows_map_to_samples(layouts, samples):
    profile = tokscan.load_profile("kimi-k2")
    corpus = forensics.Corpus([str(layouts["parquet_full"])])
    row = next(i for i, s in enumerate(samples) if "stray_special" in s.expected)
    s = corpus.fetch(row)
    info = forensics.explain(s, profile)
    assert info["codes"] == ["stray_special"]
    kinds = {k for _a, _b, k in forensics.segments(s)}
    assert {"system", "user", "thinking", "response", "header"} <= kinds
    assert synth.IM_ASSISTANT in s.ids.tolist()


def test_spelled_special_found_where_think_end_was_retokenized_as_text(tmp_path):
    import json as _json

    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    samples = demo._deepseek_samples(5)
    clean = [s for s in samples if not s.expected][:40]
    spec = _json.loads((TOK / "tokenizer.json").read_text())
    spec["added_tokens"] = []
    plain = Tokenizer.from_str(_json.dumps(spec))
    bad = clean[7]
    cut = bad.completion.index(128822)  # </think>, re-tokenized as text as a broken template renderer would
    bad.completion = [
        *bad.completion[:cut],
        *plain.encode("</think>", add_special_tokens=False).ids,
        *bad.completion[cut + 1 :],
    ]
    path = tmp_path / "spelled.parquet"
    pq.write_table(pa.table({"input_ids": [s.ids for s in clean]}), path)
    with_tok = tokscan.scan(path, profile="deepseek", tokenizer=TOK)
    assert with_tok.flagged_rows("spelled_special") == [7]
    assert with_tok.flagged[0]["positions"]["spelled_special"] == len(bad.prompt) + cut
    assert tokscan.scan(path, profile="deepseek").count("spelled_special") == 0  # needs the tokenizer


def test_show_says_what_the_source_found_about_the_row(tmp_path):
    """A cut JSONL line was shown as a valid empty sample (`empty_completion`, or with kimi-k2 `missing_system`,
    `missing_user`), and a sample whose generator's token count disagrees with its ids as "no per-sample
    anomalies": `show` checked the ids alone. It now checks the row as the scan does."""
    x = tmp_path / "x.jsonl"
    x.write_text('{"id":"a","input_ids":[1,2,3]}\n{"id":"b","input_ids":[1,2,\n{"id":"e","input_ids":[4,5]}\n')
    y = tmp_path / "y.jsonl"
    y.write_text(
        '{"id":"c","prompt_ids":[1],"output_ids":[5,6],"meta_info":{"prompt_tokens":1,"completion_tokens":9}}\n'
    )
    for profile in ("plain", "kimi-k2"):
        res = run_cli("show", str(x), "--row", "1", "-p", profile, "--json", "-")
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["codes"] == ["malformed_line"] and doc["positions"]["malformed_line"] == 2, doc
    res = run_cli("show", str(x), "--row", "1", "-p", "plain")
    assert "malformed_line at line 2" in res.stdout, res.stdout
    res = run_cli("show", str(y), "--sample-id", "c", "-p", "plain", "--json", "-")
    assert "token_count_mismatch" in json.loads(res.stdout)["codes"], res.stdout
    scanned = tokscan.scan(str(y), profile="plain")
    assert scanned.flagged[0]["codes"] == json.loads(res.stdout)["codes"]


def test_show_places_the_loss_mask_against_the_completion(ds):
    """Issue 45: for `loss_mask_misaligned` (the demo's mask starts 3 tokens late), `show` says where the mask
    starts and ends against the completion, and `--json` carries the mask itself."""
    path, samples, _ = ds
    row = row_of(samples, "loss_mask_misaligned")
    doc = show(path, "--row", str(row))
    m = doc["loss_mask"]
    cs, ce = doc["completion"]
    assert m["completion"] == [cs, ce] and m["start_offset"] == 3 and m["spans"][0][0] == cs + 3
    assert len(m["values"]) == m["length"] == doc["lengths"]["total"] and sum(m["values"]) == m["trained"]
    assert m["values"][cs : cs + 3] == [0, 0, 0] and m["values"][cs + 3] == 1
    terminal = run_cli("show", str(path), "-p", "deepseek", "--row", str(row))
    assert terminal.returncode == 0, terminal.stderr
    text = " ".join(terminal.stdout.split())
    assert "loss mask: trains" in text and "starts 3 token(s) after the completion's start" in text, text
    # A clean sample's mask starts at the completion.
    clean = next(i for i, s in enumerate(samples) if not s.expected and i > 20)
    assert show(path, "--row", str(clean))["loss_mask"]["start_offset"] == 0
