"""The samples a demo corpus is made of, and the seeded synthetic Kimi-K2.5 corpus with a known set of injected
anomalies that `tokscan demo --layout kimi` writes as Parquet.

Every sample carries the codes it must be flagged with and its expected prompt / thinking / response lengths.
The test-suite builds on this generator: `tests/synth.py` writes the same samples in every supported layout.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import _core

# Kimi-K2's ids, from the built-in profile (one home: profiles/kimi-k2.toml).
_KIMI = _core.Profile.load("kimi-k2")
_ID = dict(_KIMI.special_tokens)
BOS, EOS, IM_END, IM_MIDDLE = _ID["[BOS]"], _ID["[EOS]"], _ID["<|im_end|>"], _ID["<|im_middle|>"]
IM_SYSTEM, IM_USER, IM_ASSISTANT = _ID["<|im_system|>"], _ID["<|im_user|>"], _ID["<|im_assistant|>"]
SECTION, SECTION_END = _ID["<|tool_calls_section_begin|>"], _ID["<|tool_calls_section_end|>"]
CALL, ARG, CALL_END = _ID["<|tool_call_begin|>"], _ID["<|tool_call_argument_begin|>"], _ID["<|tool_call_end|>"]
THINK, UNTHINK, PAD = _ID["<think>"], _ID["</think>"], _ID["[PAD]"]
VOCAB = _KIMI.vocab_size
# The role names after a role token are ordinary text: "system" (the one the profile checks), "user", "assistant".
SYSTEM_NAME, USER_NAME, ASSISTANT_NAME = 14062, 2482, 69702

CATEGORIES = (
    "B1_glaive",
    "B2_opencodeinstruct",
    "B3_magicoder",
    "B4_mixturethoughts",
    "B5_openthoughts",
    "B6_ultrachat",
    "B7_sharegpt",
    "B8_sweagent",
)

INJECTED = (
    "missing_system",
    "missing_user",
    "unterminated_thinking",
    "empty_response",
    "multiple_think_end",
    "truncated",
    "trailing_tokens",
    "empty_completion",
    "out_of_vocab",
    "stray_special",
    "pad_inside",
    "unbalanced_tool_call",
    "repetition",
    "duplicate",
    "sample_id_duplicate",
    "loss_mask_misaligned",
    "length_outlier",
    "special_in_prompt",
)


@dataclass
class Sample:
    sample_id: str
    category: str
    prompt: list[int]
    completion: list[int]
    thinking: int
    response: int
    expected: set[str] = field(default_factory=set)
    #: Loss-mask shift (tokens to the right) to inject; 0 = aligned.
    mask_shift: int = 0
    #: The prompt messages the sample was rendered from, when known.
    messages: list[dict[str, str]] = field(default_factory=list)

    @property
    def ids(self) -> list[int]:
        return self.prompt + self.completion

    def mask(self) -> list[int]:
        m = [0] * len(self.prompt) + [1] * len(self.completion)
        if self.mask_shift:
            s = self.mask_shift
            m = [0] * s + m[:-s]
        return m


class Generator:
    """Builds Kimi-K2.5-shaped samples from random text ids (below the special-token range)."""

    def __init__(self, seed: int = 0, scale: int = 1):
        self.rng = np.random.default_rng(seed)
        self.scale = scale

    def text(self, n: int) -> list[int]:
        return self.rng.integers(1000, 160000, size=n).tolist()

    def length(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo * self.scale, hi * self.scale + 1))

    def turn(self, role: int, name: int, body: list[int]) -> list[int]:
        return [role, name, IM_MIDDLE, *body, IM_END]

    def prompt(self, system: bool = True, user: bool = True) -> list[int]:
        p: list[int] = []
        if system:
            p += self.turn(IM_SYSTEM, SYSTEM_NAME, self.text(self.length(10, 40)))
        if user:
            p += self.turn(IM_USER, USER_NAME, self.text(self.length(20, 120)))
        return [*p, IM_ASSISTANT, ASSISTANT_NAME, IM_MIDDLE, THINK]

    def clean(self, sid: str, category: str) -> Sample:
        th, rs = self.length(40, 200), self.length(20, 100)
        completion = [*self.text(th), UNTHINK, *self.text(rs), IM_END]
        return Sample(sid, category, self.prompt(), completion, th, rs)

    def tool_call(self, sid: str, category: str) -> Sample:
        """Reasoning that runs straight into a tool-call section (legal in K2.5)."""
        th = self.length(40, 200)
        call = [CALL, *self.text(4), ARG, *self.text(self.length(10, 30)), CALL_END]
        completion = [*self.text(th), SECTION, *call, SECTION_END, IM_END]
        return Sample(sid, category, self.prompt(), completion, th, len(call) + 2)

    def anomalous(self, code: str, sid: str, category: str, earlier: list[Sample]) -> Sample:
        s = self.clean(sid, category)
        th = self.text(s.thinking)
        rs = self.text(s.response)
        if code == "missing_system":
            s.prompt = self.prompt(system=False)
        elif code == "missing_user":
            s.prompt = self.prompt(user=False)
        elif code == "unterminated_thinking":
            s.completion, s.response = [*th, IM_END], 0
        elif code == "empty_response":
            s.completion, s.response = [*th, UNTHINK, IM_END], 0
        elif code == "multiple_think_end":
            extra = self.text(7)
            s.completion = [*th, UNTHINK, *rs, UNTHINK, *extra, IM_END]
            s.response = len(rs) + 1 + len(extra)
        elif code == "truncated":
            keep = len(rs) // 2
            s.completion, s.response = [*th, UNTHINK, *rs[:keep]], keep
        elif code == "trailing_tokens":
            s.completion = [*th, UNTHINK, *rs, IM_END, IM_USER, USER_NAME, IM_MIDDLE, *self.text(5)]
        elif code == "empty_completion":
            s.completion, s.thinking, s.response = [], 0, 0
        elif code == "out_of_vocab":
            rs[len(rs) // 2] = VOCAB + 1
            s.completion = [*th, UNTHINK, *rs, IM_END]
        elif code == "stray_special":
            half = len(rs) // 2
            s.completion = [
                *th,
                UNTHINK,
                *rs[:half],
                IM_ASSISTANT,
                ASSISTANT_NAME,
                IM_MIDDLE,
                *rs[half:],
                IM_END,
            ]
            s.response += 3
        elif code == "pad_inside":
            s.completion = [*th, UNTHINK, *rs[:3], PAD, *rs[3:], IM_END]
            s.response += 1
        elif code == "unbalanced_tool_call":
            body = [SECTION, CALL, *self.text(3), ARG, *self.text(6), SECTION_END]  # call never closed
            s.completion, s.response = [*th, UNTHINK, *body, IM_END], len(body)
        elif code == "repetition":
            loop = self.text(3) * 30
            s.completion = [*th, UNTHINK, *rs, *loop, IM_END]
            s.response = len(rs) + len(loop)
        elif code == "duplicate":
            src = next(e for e in reversed(earlier) if not e.expected and e.completion)
            s.completion, s.thinking, s.response = list(src.completion), src.thinking, src.response
        elif code == "sample_id_duplicate":
            s.sample_id = next(e for e in earlier if not e.expected).sample_id
        elif code == "loss_mask_misaligned":
            s.mask_shift = 3
        elif code == "special_in_prompt":
            # A user message quoting a log that held "</think>", encoded as the real token.
            body = self.text(self.length(20, 120))
            body.insert(len(body) // 2, UNTHINK)
            s.prompt = [
                *self.turn(IM_SYSTEM, SYSTEM_NAME, self.text(self.length(10, 40))),
                *self.turn(IM_USER, USER_NAME, body),
                IM_ASSISTANT,
                ASSISTANT_NAME,
                IM_MIDDLE,
                THINK,
            ]
        elif code == "length_outlier":
            big = self.length(12000, 12000)
            s.completion = [*th, UNTHINK, *self.text(big), IM_END]
            s.response = big
        else:
            raise ValueError(f"no injector for {code}")
        s.expected = {code}
        return s


def build_corpus(n_clean: int = 400, seed: int = 0, anomalies_per_code: int = 2) -> list[Sample]:
    """Clean samples across the 8 categories with `anomalies_per_code` samples of each injected code,
    spread through the corpus so that anomalies land in different shards."""
    g = Generator(seed)
    samples: list[Sample] = []
    plan = [c for c in INJECTED for _ in range(anomalies_per_code)]
    order = g.rng.permutation(len(plan)).tolist()
    every = max(2, n_clean // max(1, len(plan)))
    k = 0
    for i in range(n_clean + len(plan)):
        sid = f"s{i:06d}"
        cat = CATEGORIES[i % len(CATEGORIES)]
        if i >= 10 and k < len(plan) and (i % every == 0 or i >= n_clean):
            s = g.anomalous(plan[order[k]], sid, cat, samples)
            k += 1
        elif cat == "B1_glaive" and i % 2:
            s = g.tool_call(sid, cat)
        else:
            s = g.clean(sid, cat)
        samples.append(s)
    return samples


def shard_bounds(n: int, n_shards: int) -> list[tuple[int, int]]:
    """`n` rows cut into at most `n_shards` contiguous, non-empty `(start, end)` ranges."""
    bounds = np.linspace(0, n, n_shards + 1).astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds) if b > a]


def write_parquet_shards(
    samples: list[Sample], out: Path, n_shards: int, row_group_size: int, stem: str, columns
) -> Path:
    """Writes `samples` as zstd Parquet shards; `columns(part)` gives the token columns of one shard."""
    out.mkdir(parents=True, exist_ok=True)
    for k, (a, b) in enumerate(shard_bounds(len(samples), n_shards)):
        part = samples[a:b]
        table = pa.table(
            {
                "sample_id": [s.sample_id for s in part],
                "category": [s.category for s in part],
                **columns(part),
            }
        )
        pq.write_table(table, out / f"{stem}-{k:03d}.parquet", compression="zstd", row_group_size=row_group_size)
    return out


def write_parquet_full(samples: list[Sample], out: Path, n_shards: int = 3, row_group_size: int = 64) -> Path:
    """`input_ids` + `loss_mask` (SpecForge style), zstd, several shards and row groups."""
    return write_parquet_shards(
        samples,
        out,
        n_shards,
        row_group_size,
        "part",
        lambda part: {
            "input_ids": pa.array([s.ids for s in part], type=pa.list_(pa.int32())),
            "loss_mask": pa.array([s.mask() for s in part], type=pa.list_(pa.int8())),
        },
    )
