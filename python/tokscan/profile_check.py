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
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _core
from .errors import ProfileError, UsageError, install_hint
from .samples.tokenizer import encode, load_tokenizer, read_chat_template, vocabulary, vocabulary_dir

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
    "reasoning_content": "An easy one: Paris.",
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


def token_problems(profile_name: str, prof: _core.Profile, tok: Any) -> list[str]:
    """Every profile token whose id disagrees with the tokenizer's id for the same string."""
    vocab = vocabulary(tok)
    problems: list[str] = []
    named = dict(prof.special_tokens)
    named.update(prof.declared_ids)
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
        a, b = whole["completion"]
        if (a, b) != want:
            found = f"without the prompt length the completion is found at tokens {a}..{b}, not {want[0]}..{want[1]}"
            prefills = {tuple(p) for p in json.loads(prof.describe_json()).get("prefills", [])}
            if a < plen and b == len(full):
                prefill = _visible(tok.decode(ids[a:plen], skip_special_tokens=False))
                notes.append(
                    f"{found} ('{prefill}' is pre-filled by the generation prompt, which a sequence alone cannot tell)"
                )
            elif a > plen and b == len(full) and tuple(ids[plen:a]) in prefills:
                opening = _visible(tok.decode(ids[plen:a], skip_special_tokens=False))
                notes.append(
                    f"{found}: the completion opens with '{opening}', one of the profile's generation-prompt "
                    "pre-fills (another template of the family pre-fills it), which a sequence alone cannot tell"
                )
            else:
                problems.append(found)
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


def templated_tokenizer(tokenizer: str, chat_template: Path | None, trust_remote_code: bool) -> Any:
    """The tokenizer with the chat template the probes render through (its own, or `chat_template`)."""
    tok = load_tokenizer(tokenizer, trust_remote_code)
    if chat_template is not None:
        tok.chat_template = read_chat_template(chat_template)
    if getattr(tok, "chat_template", None) is None:
        raise UsageError(f"{tokenizer}: the tokenizer has no chat template; pass --chat-template FILE")
    try:
        import jinja2  # noqa: F401  (apply_chat_template needs it)
    except ImportError:  # pragma: no cover
        raise UsageError(f"rendering probes needs jinja2 ({install_hint('tokenizer')})") from None
    return tok


def check(
    profile: str,
    tokenizer: str,
    chat_template: Path | None = None,
    trust_remote_code: bool = False,
) -> CheckResult:
    """Renders every probe through the tokenizer's chat template (or `chat_template`) and checks it with the
    profile as loaded by `scan` without --tokenizer (its own ids)."""
    _core.Profile.load(profile)  # an unknown profile fails before the (slow) tokenizer loads
    tok = templated_tokenizer(tokenizer, chat_template, trust_remote_code)
    template = str(chat_template) if chat_template is not None else "the tokenizer's own"
    return check_loaded(profile, tok, str(tokenizer), template)


def check_loaded(profile: str, tok: Any, tokenizer: str, template: str) -> CheckResult:
    prof = _core.Profile.load(profile)
    result = CheckResult(profile=prof.name, tokenizer=tokenizer, template=template)
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


# --- profiles infer: a draft profile from the same probes --------------------------------------------------------


@dataclass
class Draft:
    name: str
    toml: str
    guesses: list[str]
    check: CheckResult


def _special_ids(tok: Any) -> set[int]:
    ids = {int(i) for i in getattr(tok, "all_special_ids", [])}
    ids |= {int(i) for i in getattr(tok, "added_tokens_decoder", {})}
    return ids


def _render_ids(tok: Any, messages: list[dict[str, Any]], tools: Any, gen: bool, **kw: Any) -> list[int]:
    return encode(tok, tok.apply_chat_template(messages, tools=tools, add_generation_prompt=gen, tokenize=False, **kw))


def _common_prefix(a: list[int], b: list[int]) -> int:
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def _content_token(tok: Any, ids: list[int], message: dict[str, Any]) -> int | None:
    needle = _locate(message)
    if needle is None:
        return None
    at = tok.decode(ids, skip_special_tokens=False).rfind(needle)
    return None if at < 0 else token_at(tok, ids, at)


def _single_token(tok: Any, vocab: dict[str, int], text: str) -> int | None:
    i = vocab.get(text)
    return i if i is not None and encode(tok, text) == [i] else None


def infer_spec(tok: Any, name: str) -> tuple[dict[str, Any], list[str]]:
    """A profile spec (as the TOML would hold it, token strings + an [ids] table) read off the template's
    renderings of the probes, and the list of things that had to be guessed."""
    specials = _special_ids(tok)
    vocab = vocabulary(tok)
    name_of: dict[int, str] = {}
    guesses: list[str] = []

    def nm(i: int) -> str:
        name_of[i] = str(tok.convert_ids_to_tokens(int(i)))
        return name_of[i]

    think_start = _single_token(tok, vocab, "<think>")
    think_end = _single_token(tok, vocab, "</think>")
    multi = PROBES[2]
    prompt = _render_ids(tok, multi.messages, None, True)
    no_gen = _render_ids(tok, multi.messages, None, False)
    full = _render_ids(tok, [*multi.messages, multi.answer], None, False)
    header = prompt[_common_prefix(prompt, no_gen) :]
    completion = full[len(prompt) :] if full[: len(prompt)] == prompt and len(full) > len(prompt) else None
    spec: dict[str, Any] = {"name": name, "vocab_size": len(tok)}
    guesses.append(f"vocab_size: the tokenizer's {len(tok)} tokens; the model's embedding table may be larger")
    rules: dict[str, bool] = {}
    # end of turn: the last special token of the rendered answer
    eot: int | None = None
    trailing: list[int] = []
    if completion is not None:
        marks = [k for k, i in enumerate(completion) if i in specials and i not in (think_start, think_end)]
        if marks:
            eot = completion[marks[-1]]
            trailing = completion[marks[-1] + 1 :]
    if eot is None and getattr(tok, "eos_token_id", None) is not None:
        eot = int(tok.eos_token_id)
        guesses.append(f"end_of_turn: the template renders no answer to read it from; guessed the EOS {nm(eot)!r}")
    if eot is None:
        raise UsageError("cannot infer the end-of-turn token: the template renders no answer and there is no EOS")
    spec["end_of_turn"] = [nm(eot)]
    if trailing:
        spec["trailing_allowed"] = [nm(i) for i in dict.fromkeys(trailing)]
    bos = getattr(tok, "bos_token_id", None)
    if bos is not None and full and full[0] == bos:
        spec["bos"] = nm(bos)
    eos = getattr(tok, "eos_token_id", None)
    if eos is not None:
        spec["eos"] = nm(eos)
    pad = getattr(tok, "pad_token_id", None)
    if pad is not None and pad not in (eos, eot):
        spec["pad"] = nm(pad)
    elif pad is not None:
        guesses.append(f"pad: the tokenizer's PAD {nm(pad)!r} is also its EOS / end of turn; left out")
    # the assistant header: what the generation prompt appends (minus a pre-filled reasoning opener)
    h = list(header)
    if think_start is not None and think_start in h:
        rules["think_prefilled"] = True
        h = h[: h.index(think_start)]
    if not h or h[0] not in specials:
        raise UsageError("cannot infer the roles: the generation prompt does not start with a special token")
    separator = h[-1] if len(h) > 1 and h[-1] in specials and h[-1] != h[0] else None
    if separator is not None:
        spec["separator"] = nm(separator)
    openers: dict[int, list[tuple[str, list[int]]]] = {h[0]: [("assistant", h[1 : len(h) - (separator is not None)])]}

    def opener_before(ids: list[int], t: int) -> tuple[int, list[int]] | None:
        """The role token a message's content follows and the ordinary tokens between (name, header suffix)."""
        j = t - 1
        while j >= 0 and (ids[j] not in specials or ids[j] in (think_start, think_end)):
            j -= 1
        if j < 0:
            return None
        if separator is not None and ids[j] == separator:
            k = j - 1
            while k >= 0 and ids[k] not in specials:
                k -= 1
            return (ids[k], ids[k + 1 : j]) if k >= 0 else None
        return ids[j], ids[j + 1 : t]

    for m in (multi.messages[0], multi.messages[1]):  # system, user
        t = _content_token(tok, full, m)
        found = opener_before(full, t) if t is not None else None
        if found is None:
            continue
        token, mid = found
        if m["role"] == "system" and token == bos and not mid:
            rules["system_implicit"] = True
            continue
        openers.setdefault(token, []).append((m["role"], mid))
    # tool results: under a known role token with another name (Kimi), in a user turn (ChatML), or in no turn
    tool_probe = PROBES[5]
    tool_ids = _render_ids(tok, tool_probe.messages, tool_probe.tools, True)
    t = _content_token(tok, tool_ids, tool_probe.messages[-1])
    tool_named: dict[int, list[int]] = {}
    if t is not None:
        j = t - 1
        while j >= 0 and tool_ids[j] not in openers and tool_ids[j] != eot:
            j -= 1
        if j >= 0 and tool_ids[j] in openers:
            after = tool_ids[j + 1 : t]
            if not any(after[: len(mid)] == mid and mid for _r, mid in openers[tool_ids[j]]):
                tool_named[tool_ids[j]] = after
    # the header suffix: what every named role's tokens end with (ChatML "\n")
    suffix: list[int] = []
    named = [
        mid for token, entries in openers.items() for _r, mid in entries if len(entries) > 1 or token in tool_named
    ]
    if named and separator is None:
        suffix = named[0]
        for mid in named[1:]:
            k = 0
            while k < min(len(suffix), len(mid)) and suffix[-1 - k] == mid[-1 - k]:
                k += 1
            suffix = suffix[len(suffix) - k :] if k else []
        suffix = [i for i in suffix if i not in specials]
    if suffix:
        spec["header_suffix"] = [nm(i) for i in suffix]
    roles = []
    for token, entries in openers.items():
        if len(entries) == 1 and token not in tool_named:
            roles.append({"token": nm(token), "role": entries[0][0]})
        else:
            names = []
            for role, mid in entries:
                tokens = mid[: len(mid) - len(suffix)] if suffix and mid[-len(suffix) :] == suffix else mid
                names.append({"role": role, "ids": [nm(i) for i in tokens]})
            roles.append({"token": nm(token), "other": "tool", "names": names})
    spec["roles"] = roles
    if think_start is not None and think_end is not None:
        spec["think_start"], spec["think_end"] = nm(think_start), nm(think_end)
    # tool-call tokens, in the order the answer uses them
    call_probe = PROBES[4]
    cp = _render_ids(tok, call_probe.messages, call_probe.tools, True)
    cf = _render_ids(tok, [*call_probe.messages, call_probe.answer], call_probe.tools, False)
    tool_call: dict[str, str] = {}
    if cf[: len(cp)] == cp and len(cf) > len(cp):
        answer = cf[len(cp) :]
        used = [i for i in dict.fromkeys(answer) if i in specials and i not in (think_start, think_end, eot, eos)]
        fields = {
            2: ("call_begin", "call_end"),
            3: ("call_begin", "call_argument", "call_end"),
            4: ("section_begin", "call_begin", "call_end", "section_end"),
            5: ("section_begin", "call_begin", "call_argument", "call_end", "section_end"),
        }.get(len(used))
        if fields is None and used:
            guesses.append(
                f"tool_call: {len(used)} special tokens in a tool call ({[nm(i) for i in used]}); not mapped"
            )
        for f, i in zip(fields or (), used, strict=False):
            tool_call[f] = nm(i)
        if used and think_end is not None:
            first_tool = min(answer.index(i) for i in used)
            if think_end not in answer[:first_tool]:
                rules["think_may_end_at_tool_call"] = True
    else:
        guesses.append("tool_call: the template renders no tool-call answer to read the tokens from")
    if tool_call:
        spec["tool_call"] = tool_call
    # Reasoning and tool-call tokens the template itself writes into a prompt turn's text (Qwen3's tool
    # instructions name <tool_call></tool_call> in the system turn) are the template's, not special_in_prompt.
    in_text = {i for i in (think_start, think_end) if i is not None} | {vocab[n] for n in tool_call.values()}
    allowed: dict[str, list[str]] = {}
    for ids in (cp, tool_ids):
        for k, i in enumerate(ids[: len(ids) - len(header)]):
            if i not in in_text:
                continue
            j = k - 1
            while j >= 0 and ids[j] not in openers:
                j -= 1
            entries = openers.get(ids[j], []) if j >= 0 else [("system", [])]
            role = next((r for r, mid in entries if ids[j + 1 : j + 1 + len(mid)] == mid), None)
            if role in ("system", "user", "tool") and nm(i) not in allowed.get(role, []):
                allowed.setdefault(role, []).append(nm(i))
    if allowed:
        spec["content_allowed"] = allowed
    # system required when the template adds a system turn on its own (Kimi's default system prompt)
    bare = _render_ids(tok, PROBES[1].messages, None, True)
    sys_entries = [(token, mid) for token, es in openers.items() for r, mid in es if r == "system"]
    rules["system_required"] = any(
        bare[k] == token and bare[k + 1 : k + 1 + len(mid)] == mid
        for token, mid in sys_entries
        for k in range(len(bare))
    )
    spec["rules"] = rules
    # every other special token the renderings use is counted
    seen: set[int] = set()
    for ids in (full, tool_ids, cf):
        seen |= {i for i in ids if i in specials}
    assigned = set(name_of.values())
    counted = [nm(i) for i in sorted(seen) if str(tok.convert_ids_to_tokens(i)) not in assigned]
    if counted:
        spec["counted"] = counted
    spec["ids"] = {s: int(vocab.get(s, i)) for i, s in sorted(name_of.items())}
    return spec, guesses


def to_toml(spec: dict[str, Any], header: str) -> str:
    """The draft as a profile file, written by the core from its profile schema (and refused there when it
    would not load): `header` as comment lines, then the TOML."""
    return _core.profile_toml(json.dumps(spec), header)


def infer(
    tokenizer: str,
    chat_template: Path | None = None,
    trust_remote_code: bool = False,
    name: str | None = None,
) -> Draft:
    """Drafts a TOML profile from the probes' renderings, then checks the draft like `profiles check` does."""
    tok = templated_tokenizer(tokenizer, chat_template, trust_remote_code)
    template = str(chat_template) if chat_template is not None else "the tokenizer's own"
    name = name or Path(tokenizer).name or "drafted"
    spec, guesses = infer_spec(tok, name)
    spec["description"] = f"drafted by `tokscan profiles infer` from {tokenizer} ({template} chat template)"
    header = (
        f"Drafted by `tokscan profiles infer` from {tokenizer}\n"
        f"(chat template: {template}). Review it: the ids are the tokenizer's, the layout is what the\n"
        "probe renderings showed.\n" + "".join(f"guessed: {g}\n" for g in guesses)
    )
    text = to_toml(spec, header)
    with tempfile.TemporaryDirectory(prefix="tokscan-infer-") as d:
        path = Path(d) / f"{name}.toml"
        path.write_text(text, encoding="utf-8")
        result = check_loaded(str(path), tok, str(tokenizer), template)
    return Draft(name, text, guesses, result)
