"""`tokscan profiles check`: does a chat-format profile fit a model's real tokenizer and chat template?

Probe conversations (with and without a system prompt, multi-turn, thinking on and off, a tool call, a tool
result) are rendered through the tokenizer's own template: the prompt with the generation prompt, and the whole
conversation with the assistant's answer. Each rendering is checked with the profile as `scan` would check a
sample, and every disagreement is reported:

- a token string whose id in the profile differs from the tokenizer's id (or that the tokenizer lacks);
- any finding on a probe (they are well-formed by construction), with and without a trainer-style loss mask
  (ones on the assistant spans);
- a message whose content lands in a parsed turn of another role;
- a completion span other than what the template appended after the generation prompt.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _core
from .errors import ProfileError, UsageError
from .tokenizer import encode, load_tokenizer, vocabulary, vocabulary_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City name"}},
                "required": ["city"],
            },
        },
    }
]

SYSTEM = {"role": "system", "content": "You are a careful assistant. Answer briefly."}
ASK = {"role": "user", "content": "What is the capital of France?"}
ANSWER = {
    "role": "assistant",
    "reasoning_content": "The capital of France is Paris.",
    "content": "The capital of France is Paris.",
}
FOLLOW_UP = {"role": "user", "content": "And the capital of Italy?"}
FINAL = {
    "role": "assistant",
    "reasoning_content": "Italy's capital is Rome, I am sure of it.",
    "content": "It is Rome.",
}
FINAL_NO_THINKING = {"role": "assistant", "content": "It is Rome."}
ASK_WEATHER = {"role": "user", "content": "How warm is it in Lyon right now?"}
CALL = {
    "role": "assistant",
    "reasoning_content": "I should call the weather tool for Lyon.",
    "content": "",
    "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Lyon"}}}
    ],
}
RESULT = {"role": "tool", "tool_call_id": "call_0", "name": "get_weather", "content": '{"celsius": 17}'}
AFTER_TOOL = {
    "role": "assistant",
    "reasoning_content": "The tool says 17 degrees Celsius.",
    "content": "It is 17 degrees Celsius in Lyon.",
}

#: Findings that are about the completion, when a template renders no completion to check (prompt-only probe).
COMPLETION_CODES = {"empty_completion", "truncated", "unterminated_thinking", "empty_response"}


@dataclass
class Probe:
    name: str
    description: str
    messages: list[dict[str, Any]]
    answer: dict[str, Any]
    tools: list[dict[str, Any]] | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)


PROBES = [
    Probe("system", "a system prompt and one user turn, thinking on", [SYSTEM, ASK], FINAL),
    Probe("no-system", "one user turn without a system prompt", [ASK], FINAL),
    Probe(
        "multi-turn",
        "system, user, assistant, user: an earlier answer in the history",
        [SYSTEM, ASK, ANSWER, FOLLOW_UP],
        FINAL,
    ),
    Probe(
        "thinking-off",
        "thinking off: enable_thinking=False (Qwen3) and thinking=False (DeepSeek-V3.1) for templates that know them",
        [SYSTEM, ASK],
        FINAL_NO_THINKING,
        template_kwargs={"enable_thinking": False, "thinking": False},
    ),
    Probe("tool-call", "tools declared; the answer is a tool call", [SYSTEM, ASK_WEATHER], CALL, TOOLS),
    Probe(
        "tool-result",
        "tools declared; a tool call and its result in the history",
        [SYSTEM, ASK_WEATHER, CALL, RESULT],
        AFTER_TOOL,
        TOOLS,
    ),
]

ROLE_OK = {
    "system": {"system"},
    "user": {"user"},
    "assistant": {"assistant"},
    # ChatML templates (Qwen) wrap tool results in user turns; Kimi opens them with its system token.
    "tool": {"tool", "user"},
}


@dataclass
class CheckResult:
    profile: str
    tokenizer: str
    template: str
    token_problems: list[str] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.token_problems and all(p["ok"] for p in self.probes)

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "tokenizer": self.tokenizer,
            "template": self.template,
            "ok": self.ok,
            "token_problems": self.token_problems,
            "probes": self.probes,
        }


def _resolve_through(profile: str, tok: Any) -> str | None:
    """The error resolving the profile's token strings through the tokenizer's vocabulary (what
    `scan --tokenizer` does), or None when every string resolves."""
    with vocabulary_dir(tok) as d:
        try:
            _core.Profile.load(profile, d)
        except ProfileError as e:
            return str(e)
    return None


def _declared_ids(profile: str) -> dict[str, int]:
    """The `[ids]` table of a TOML profile file ({} for built-ins, whose ids show as their special tokens)."""
    path = Path(profile)
    if not path.is_file():
        return {}
    try:
        spec = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}  # Profile.load reports it
    ids = spec.get("ids", {})
    return {str(k): int(v) for k, v in ids.items() if isinstance(v, int)} if isinstance(ids, dict) else {}


def token_problems(profile_name: str, prof: _core.Profile, tok: Any) -> list[str]:
    """Every profile token whose id disagrees with the tokenizer's id for the same string."""
    vocab = vocabulary(tok)
    problems: list[str] = []
    named = dict(prof.special_tokens)
    named.update(_declared_ids(profile_name))
    for name, pid in sorted(named.items(), key=lambda kv: kv[1]):
        tid = vocab.get(name)
        if tid is None:
            pieces = encode(tok, name)
            problems.append(
                f"{name!r}: the profile has id {pid}; the tokenizer has no such token (it encodes the "
                f"string as {len(pieces)} pieces {pieces[:8]})"
            )
        elif tid != pid:
            problems.append(f"{name!r}: the profile has id {pid}, the tokenizer {tid}")
    n = len(tok)
    if prof.vocab_size < n:
        problems.append(
            f"vocab_size: the profile says {prof.vocab_size}, the tokenizer has {n} tokens "
            "(its highest ids would be flagged out_of_vocab)"
        )
    error = _resolve_through(profile_name, tok)
    if error is not None:
        problems.append(f"resolving the profile's token strings through the tokenizer fails: {error}")
    return problems


def _decoded_len(tok: Any, ids: list[int], k: int) -> int:
    return len(tok.decode(ids[:k], skip_special_tokens=False))


def token_at(tok: Any, ids: list[int], char: int) -> int:
    """Index of the token whose decoded text covers character `char` of `tok.decode(ids)`."""
    lo, hi = 0, len(ids)
    while lo < hi:  # smallest k with decoded_len(k) > char
        mid = (lo + hi) // 2
        if _decoded_len(tok, ids, mid) > char:
            hi = mid
        else:
            lo = mid + 1
    return max(0, lo - 1)


def _locate(message: dict[str, Any]) -> str | None:
    """A string of the message that the template must render verbatim."""
    content = message.get("content")
    if isinstance(content, str) and content.strip():
        return content.strip()
    for call in message.get("tool_calls") or []:
        return str(call.get("function", call).get("name"))
    return None


def _excerpt(tok: Any, ids: list[int], pos: int | None, radius: int = 6) -> str:
    if pos is None:
        return ""
    a, b = max(0, pos - radius), min(len(ids), pos + radius + 1)
    before = tok.decode(ids[a:pos], skip_special_tokens=False)
    at = tok.decode(ids[pos : pos + 1], skip_special_tokens=False) if pos < len(ids) else "∅"
    after = tok.decode(ids[pos + 1 : b], skip_special_tokens=False)
    return _visible(f"…{before}⟦{at}⟧{after}…")


def _visible(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def trainer_mask(tok: Any, ids: list[int], prompt_len: int, header: list[int]) -> list[int]:
    """A loss mask as SFT / EAGLE trainers build it: ones on the final completion and on each earlier assistant
    turn, from after its header (what the generation prompt appends) through the end-of-turn token that the
    final completion ends with; zeros elsewhere."""
    mask = [0] * prompt_len + [1] * (len(ids) - prompt_len)
    specials = set(getattr(tok, "all_special_ids", [])) | {int(i) for i in getattr(tok, "added_tokens_decoder", {})}
    completion = ids[prompt_len:]
    ends = [t for t in completion if t in specials]
    if not header or not ends:
        return mask
    end = ends[-1]
    k = 0
    while k + len(header) <= prompt_len:
        if ids[k : k + len(header)] == header:
            j = k + len(header)
            while j < prompt_len and ids[j] != end:
                mask[j] = 1
                j += 1
            if j < prompt_len:
                mask[j] = 1
            k = j
        k += 1
    return mask


def _header(tok: Any, probe: Probe) -> list[int]:
    """The tokens `add_generation_prompt` appends (thinking on): an assistant turn's header."""
    with_gen = encode(
        tok, tok.apply_chat_template(probe.messages, tools=probe.tools, add_generation_prompt=True, tokenize=False)
    )
    without = encode(
        tok, tok.apply_chat_template(probe.messages, tools=probe.tools, add_generation_prompt=False, tokenize=False)
    )
    k = 0
    while k < min(len(with_gen), len(without)) and with_gen[k] == without[k]:
        k += 1
    return with_gen[k:]


def run_probe(prof: _core.Profile, tok: Any, probe: Probe) -> dict[str, Any]:
    kw = probe.template_kwargs
    prompt_text = tok.apply_chat_template(
        probe.messages, tools=probe.tools, add_generation_prompt=True, tokenize=False, **kw
    )
    full_text = tok.apply_chat_template(
        [*probe.messages, probe.answer], tools=probe.tools, add_generation_prompt=False, tokenize=False, **kw
    )
    prompt, full = encode(tok, prompt_text), encode(tok, full_text)
    problems: list[str] = []
    notes: list[str] = []
    has_completion = len(full) > len(prompt) and full[: len(prompt)] == prompt
    if has_completion:
        ids = full
    else:
        ids = prompt
        notes.append(
            "the template does not render the assistant's answer after its generation prompt "
            "(it renders no assistant turns, or renders them otherwise): only the prompt is checked"
        )
    plen = len(prompt)
    result = _core.check_one(prof, ids, plen, None)
    ignored = set() if has_completion else COMPLETION_CODES
    for code in result["codes"]:
        if code in ignored:
            continue
        pos = result["positions"].get(code)
        where = f" at token {pos}: {_excerpt(tok, ids, pos)}" if pos is not None else ""
        problems.append(f"finding {code}{where}")
    if has_completion:
        got = tuple(result["completion"])
        want = (plen, len(full))
        if got != want:
            problems.append(
                f"completion parsed as tokens {got[0]}..{got[1]}; the template appended tokens {want[0]}..{want[1]} "
                f"after the generation prompt ('{_visible(tok.decode(full[plen:], skip_special_tokens=False))}')"
            )
        mask = trainer_mask(tok, ids, plen, _header(tok, probe))
        masked = _core.check_one(prof, ids, plen, mask)
        for code in masked["codes"]:
            if code not in result["codes"]:
                pos = masked["positions"].get(code)
                where = f" at token {pos}: {_excerpt(tok, ids, pos)}" if pos is not None else ""
                problems.append(f"with a trainer-style loss mask (ones on assistant spans): finding {code}{where}")
        # The input_ids + loss_mask layout: no prompt length, the checker finds the completion itself.
        whole = _core.check_one(prof, ids, None, mask)
        for code in whole["codes"]:
            if code not in result["codes"] and code not in masked["codes"]:
                pos = whole["positions"].get(code)
                where = f" at token {pos}: {_excerpt(tok, ids, pos)}" if pos is not None else ""
                problems.append(f"as one input_ids sequence with that mask (no prompt length): finding {code}{where}")
        if tuple(whole["completion"]) != want:
            a, b = whole["completion"]
            notes.append(
                f"without the prompt length the completion is found at tokens {a}..{b}, not {want[0]}..{want[1]} "
                f"('{_visible(tok.decode(ids[min(a, plen) : max(a, plen)], skip_special_tokens=False))}' is "
                "pre-filled by the generation prompt, which a sequence alone cannot tell)"
            )
    turns = [(role, start, content_start, end) for role, start, content_start, end, _clean in result["turns"]]
    text = tok.decode(ids, skip_special_tokens=False)
    rules = json.loads(prof.describe_json()).get("rules", {})
    search_from = 0
    messages = [*probe.messages, probe.answer] if has_completion else probe.messages
    for m in messages:
        needle = _locate(m)
        role = m["role"]
        if needle is None:
            continue
        at = text.find(needle, search_from)
        if at < 0:
            at = text.find(needle)
        if at < 0:
            notes.append(f"the template does not render the {role} message {needle[:40]!r}")
            continue
        search_from = at + len(needle)
        t = token_at(tok, ids, at)
        turn = next((tr for tr in turns if tr[1] <= t < max(tr[3], tr[1] + 1)), None)
        if turn is None:
            first = min((tr[1] for tr in turns), default=len(ids))
            if role == "system" and rules.get("system_implicit") and t < first:
                continue
            if role == "tool":
                notes.append(
                    f"the tool result (token {t}: {_excerpt(tok, ids, t)}) is in no parsed turn: the template gives it "
                    "no role token of its own"
                )
                continue
            problems.append(f"the {role} message (token {t}: {_excerpt(tok, ids, t)}) is in no parsed turn")
        elif turn[0] not in ROLE_OK.get(role, {role}):
            problems.append(
                f"the {role} message (token {t}: {_excerpt(tok, ids, t)}) is parsed as part of a {turn[0]} turn "
                f"(tokens {turn[1]}..{turn[3]})"
            )
        if m is probe.answer and has_completion and not plen <= t < len(full):
            problems.append(f"the answer (token {t}) is outside the completion {plen}..{len(full)}")
    return {
        "name": probe.name,
        "description": probe.description,
        "ok": not problems,
        "problems": problems,
        "notes": notes,
        "prompt_tokens": plen,
        "completion_tokens": len(full) - plen if has_completion else None,
        "codes": result["codes"],
        "turns": [{"role": r, "start": s, "content_start": c, "end": e} for r, s, c, e in turns],
        "completion": list(result["completion"]),
        "text": text,
    }


def check(
    profile: str,
    tokenizer: str,
    chat_template: Path | None = None,
    trust_remote_code: bool = False,
) -> CheckResult:
    """Renders every probe through the tokenizer's chat template (or `chat_template`) and checks it with the
    profile as loaded by `scan` without --tokenizer (its own ids)."""
    prof = _core.Profile.load(profile)  # an unknown profile fails before the (slow) tokenizer loads
    tok = load_tokenizer(tokenizer, trust_remote_code)
    if chat_template is not None:
        tok.chat_template = chat_template.read_text(encoding="utf-8")
    if getattr(tok, "chat_template", None) is None:
        raise UsageError(f"{tokenizer}: the tokenizer has no chat template; pass --chat-template FILE")
    try:
        import jinja2  # noqa: F401  (apply_chat_template needs it)
    except ImportError:  # pragma: no cover
        raise UsageError("rendering probes needs jinja2 (pip install 'tokscan[tokenizer]')") from None
    result = CheckResult(
        profile=prof.name,
        tokenizer=str(tokenizer),
        template=str(chat_template) if chat_template is not None else "the tokenizer's own",
    )
    result.token_problems = token_problems(profile, prof, tok)
    for probe in PROBES:
        try:
            result.probes.append(run_probe(prof, tok, probe))
        except Exception as e:  # the template itself may fail on a probe (e.g. no tool support)
            if isinstance(e, (UsageError, ProfileError)):
                raise
            result.probes.append(
                {
                    "name": probe.name,
                    "description": probe.description,
                    "ok": True,
                    "problems": [],
                    "notes": [
                        f"the template cannot render this probe ({type(e).__name__}: {' '.join(str(e).split())})"
                    ],
                }
            )
    return result
