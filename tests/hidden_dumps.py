"""Real hidden-state dumps for the tests of `tokscan scan CORPUS --hidden-states DIR --target-model DIR` (issue 48).

A tiny causal language model in numpy (`TinyLM`, seeded) writes its own completions greedily in the Kimi-K2.5
layout of `tokscan.demo_corpus`, then runs over every sample once and dumps its own states exactly as the
offline EAGLE-3 writers lay them out (as read in their code, Dec 2026): SpecForge `prepare_hidden_states.py`,
vLLM speculators `data_generation_offline.py` (current and older), NVIDIA Model-Optimizer `collect_hidden_states`,
Tencent AngelSlim `generate_hidden_for_draft_model.py`. Beside the dump: the corpus as Parquet
(`input_ids` + `loss_mask` + `sample_id` + `category`) and the model as a Hugging Face checkpoint directory
(`config.json` + safetensors), so that argmax(lm_head(norm(h_t))) == ids[t+1] at every completion position but
the forced ones (`</think>`, `<|im_end|>`).

One call builds all three, with defects planted by sample index::

    built = build(tmp_path, layout="specforge", n=24, plant={3: "nan", 7: "other_sample"})
    built.corpus_dir, built.dump_dir, built.model_dir   # what `tokscan scan` is given
    built.files                                         # every file written: path, sample, defect, positions

`DEFECTS` names every plantable defect and says what it does to the file. `read_capture` reads any dump file
back (torch / safetensors, not tokscan), `read_target` the checkpoint's final norm and `lm_head`, and
`agreement` is the plain numpy oracle of next-token agreement the scanner's figure must equal.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from tokscan import _core
from tokscan.demo_corpus import (
    CATEGORIES,
    IM_END,
    UNTHINK,
    VOCAB,
    Generator,
    Sample,
    write_parquet_full,
)

__all__ = [
    "DEFAULT_CATEGORIES",
    "DEFECTS",
    "FINAL_NORM",
    "FIRST_SPECIAL",
    "LAYOUTS",
    "Built",
    "Capture",
    "DumpFile",
    "Target",
    "TinyLM",
    "agreement",
    "build",
    "completion_positions",
    "make_samples",
    "read_capture",
    "read_target",
    "rms_norm",
    "tiny_model",
    "write_target_model",
]

#: Every id from here up is a special or reserved token of the Kimi-K2 profile; the model never writes one.
FIRST_SPECIAL = min(dict(_core.Profile.load("kimi-k2").special_tokens).values())
#: Two categories of the demo corpus: every other sample in each.
DEFAULT_CATEGORIES = (CATEGORIES[3], CATEGORIES[5])
#: Positions a "short" capture lacks at its end.
SHORT = 4
#: Rows a "zero_rows" defect zeroes.
ZERO_ROWS = 3

#: Defect name -> what it does to the planted sample's file(s) (the sample in the corpus is never touched).
DEFECTS = {
    "missing": "no file for the sample",
    "cut": "the file written whole, then cut to half its bytes (a write stopped by preemption)",
    "duplicate": "a second, identical file for the sample under the next free name of the layout",
    "orphan": "the sample keeps its file; an extra file (next free name) holds a model-written sample that is "
    "not in the corpus",
    "shape": "one aux layer fewer: aux width (k-1)*D, speculators k layers instead of k+1",
    "short": f"every tensor (ids, mask, states) lacks the sample's last {SHORT} positions",
    "short_states": f"ids and mask whole; the state tensors lack the last {SHORT} positions",
    "truncated": "the capture cut at max_length (every tensor), as the writers' --max-length does; the sample "
    "is made longer than max_length (default: the longest other sample, so that only planted ones are cut)",
    "ids": "one ordinary id in the middle of the completion replaced by its neighbour id (+1)",
    "mask_shift": "loss mask shifted right by one position (mask[t] = true mask[t-1])",
    "nan": "a NaN in one element of the last state, mid-completion",
    "inf": "+Inf in one element of the last state, mid-completion",
    "zero_rows": f"{ZERO_ROWS} rows of every state tensor zeroed, mid-completion",
    "prenorm": "the last state in the other norm convention: before the final norm in an after-norm dump, "
    "after it in a before-norm dump",
    "other_sample": "ids and mask right; every state tensor from another sample (the next one, cyclically, at "
    "least as long; its first N rows)",
    "shifted_states": "every state tensor shifted one position later: row t holds the state of t-1 (row 0 kept)",
    "wrong_layer": "the last state taken from layer L-1 (in the dump's norm convention)",
}


def _bf16(x: np.ndarray) -> np.ndarray:
    """`x` rounded to bfloat16, returned as float32."""
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16).float().numpy()


def rms_norm(h: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Llama's RMSNorm over the last axis: h / sqrt(mean(h^2) + eps) * weight."""
    return h / np.sqrt((h * h).mean(-1, keepdims=True) + eps) * weight


class TinyLM:
    """A causal LM small enough for numpy and with Kimi-K2's vocabulary: embedding E[V,D], `n_layers` residual
    layers h += gain_l * tanh(h @ mlp_l + mean_{s<=t}(h_s) @ attn_l) (position t mixes only positions <= t), a
    final RMSNorm (weight `norm_weight`, `eps`) and an untied `lm_head` [V,D] with unit-norm rows (rows of special
    ids 20x shorter, so the full-vocabulary argmax almost never lands on one). Weights are bfloat16 values held in
    float32: a bf16 checkpoint is the model itself. The last layer's gain is larger, so that layer L-1 predicts
    badly; the norm weight is far from uniform, so that a wrong norm convention predicts badly."""

    def __init__(self, seed: int = 0, dim: int = 16, n_layers: int = 8, eps: float = 1e-5):
        rng = np.random.default_rng([seed, 48])
        self.seed = seed
        self.vocab_size, self.dim, self.n_layers, self.eps = VOCAB, dim, n_layers, eps
        self.embed = _bf16(rng.standard_normal((VOCAB, dim)) * 1.5)
        self.attn = _bf16(rng.standard_normal((n_layers, dim, dim)) * 1.5 / math.sqrt(dim))
        self.mlp = _bf16(rng.standard_normal((n_layers, dim, dim)) * 1.5 / math.sqrt(dim))
        self.gains = (2.0,) * (n_layers - 1) + (4.0,)
        self.norm_weight = _bf16(np.exp(rng.standard_normal(dim) * 0.6))
        head = rng.standard_normal((VOCAB, dim))
        head *= 2.0 / np.linalg.norm(head, axis=1, keepdims=True)
        head[FIRST_SPECIAL:] *= 0.05
        self.lm_head = _bf16(head)
        self._ordinary_head_t = np.ascontiguousarray(self.lm_head[:FIRST_SPECIAL].T)
        #: The three EAGLE-3 aux layers as indices into `forward`'s first axis (0 = embeddings), the writers'
        #: default for L layers: outputs of layers 2, L/2 and L-3.
        self.aux_layers = (2, n_layers // 2, n_layers - 3)

    def _layer(self, i: int, h: np.ndarray, mean: np.ndarray) -> np.ndarray:
        return h + self.gains[i] * np.tanh(h @ self.mlp[i] + mean @ self.attn[i])

    def forward(self, ids: Sequence[int]) -> np.ndarray:
        """Per-layer states [L+1, N, D] (float64): the embeddings, then each layer's output; the last one is
        before the final norm."""
        h = self.embed[np.asarray(ids, dtype=np.int64)].astype(np.float64)
        count = np.arange(1, len(h) + 1, dtype=np.float64)[:, None]
        out = [h]
        for i in range(self.n_layers):
            h = self._layer(i, h, np.cumsum(h, axis=0) / count)
            out.append(h)
        return np.stack(out)

    def norm(self, h: np.ndarray) -> np.ndarray:
        """The final RMSNorm."""
        return rms_norm(h, self.norm_weight, self.eps)

    def normed_last(self, ids: Sequence[int]) -> np.ndarray:
        """The last layer's states after the final norm [N, D]: what `lm_head` is applied to."""
        return self.norm(self.forward(ids)[-1])

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """Logits [N, V] (float32; 0.65 MB per position)."""
        return self.normed_last(ids).astype(np.float32) @ self.lm_head.T

    def predict(self, ids: Sequence[int]) -> np.ndarray:
        """argmax over the whole vocabulary at every position [N]: the next token the model would write."""
        x = self.normed_last(ids).astype(np.float32)
        return np.concatenate([(x[a : a + 64] @ self.lm_head.T).argmax(1) for a in range(0, len(x), 64)])

    def complete(self, prompts: Sequence[Sequence[int]], plans: Sequence[Sequence[int | None]]) -> list[list[int]]:
        """Each prompt's completion, slot by slot: None = the model's greedy token (argmax over ordinary ids),
        an id = that token forced. All prompts advance in lockstep, one `lm_head` product per step."""
        m, layers = len(prompts), self.n_layers
        sums = np.zeros((layers, m, self.dim))
        counts = np.array([len(p) for p in prompts], dtype=np.float64)
        last = np.zeros((m, self.dim))
        for k, p in enumerate(prompts):
            states = self.forward(p)
            sums[:, k] = np.cumsum(states[:layers], axis=1)[:, -1]
            last[k] = states[layers, -1]
        out: list[list[int]] = [[] for _ in range(m)]
        chosen: dict[int, int] = {}
        for step in range(max((len(p) for p in plans), default=0)):
            active = np.array([k for k in range(m) if step < len(plans[k])], dtype=np.int64)
            greedy = [int(k) for k in active if plans[k][step] is None]
            if greedy:
                x = self.norm(last[greedy]).astype(np.float32)
                chosen = dict(zip(greedy, (x @ self._ordinary_head_t).argmax(1).tolist(), strict=True))
            tokens = [chosen[k] if plans[k][step] is None else int(plans[k][step]) for k in active]
            for k, t in zip(active, tokens, strict=True):
                out[k].append(t)
            h = self.embed[np.array(tokens)].astype(np.float64)
            counts[active] += 1
            for i in range(layers):
                sums[i, active] += h
                h = self._layer(i, h, sums[i, active] / counts[active, None])
            last[active] = h
        return out


@functools.lru_cache(maxsize=4)
def tiny_model(seed: int = 0, dim: int = 16, n_layers: int = 8) -> TinyLM:
    """The model for `seed`, built once per session (its tables are 2 x 10 MB)."""
    return TinyLM(seed, dim, n_layers)


# ---- samples --------------------------------------------------------------------------------------------------


def completion_positions(s: Sample) -> np.ndarray:
    """Positions t whose next token ids[t+1] is a completion token (the last prompt position included)."""
    return np.arange(len(s.prompt) - 1, len(s.ids) - 1)


_COMPLETIONS: dict[tuple, list[int]] = {}


def _complete_cached(model: TinyLM, key: tuple, prompts, plans) -> list[list[int]]:
    """`model.complete`, remembered per (model and corpus `key`, prompt, plan) for the session."""
    keys = [(key, tuple(p), tuple(q)) for p, q in zip(prompts, plans, strict=True)]
    todo = [k for k, kk in enumerate(keys) if kk not in _COMPLETIONS]
    if todo:
        done = model.complete([prompts[k] for k in todo], [plans[k] for k in todo])
        for k, c in zip(todo, done, strict=True):
            _COMPLETIONS[keys[k]] = c
    return [list(_COMPLETIONS[kk]) for kk in keys]


def make_samples(
    n: int,
    seed: int = 0,
    model: TinyLM | None = None,
    categories: Sequence[str] = DEFAULT_CATEGORIES,
    foreign: Sequence[str] = (),
    min_length: dict[int, int] | None = None,
    id_prefix: str = "s",
) -> list[Sample]:
    """`n` clean Kimi-K2.5 samples (`demo_corpus.Sample`): a system + user prompt of random text ending in the
    assistant pre-fill `<think>`, then the model's greedy reasoning, `</think>`, its greedy response and
    `<|im_end|>`. Category i % len(categories). Samples of a `foreign` category get random text instead of the
    model's (as if another model wrote them: agreement near zero, a property of the data, not a defect).
    `min_length[i]` lengthens sample i's reasoning so that the sample has at least that many tokens; the other
    samples are the same with or without it."""
    model = model or tiny_model(seed)
    g = Generator(seed)
    min_length = min_length or {}
    plans = []
    for i in range(n):
        prompt = g.prompt()
        th, rs = g.length(24, 64), g.length(12, 40)
        th = max(th, min_length.get(i, 0) - len(prompt) - rs - 2)
        plans.append((f"{id_prefix}{i:06d}", categories[i % len(categories)], prompt, th, rs))
    ours = [k for k, p in enumerate(plans) if p[1] not in foreign]
    slots = [[None] * th + [UNTHINK] + [None] * rs + [IM_END] for _sid, _c, _p, th, rs in plans]
    written = _complete_cached(
        model, (model.seed, model.dim, model.n_layers, seed), [plans[k][2] for k in ours], [slots[k] for k in ours]
    )
    completions = dict(zip(ours, written, strict=True))
    out = []
    for k, (sid, cat, prompt, th, rs) in enumerate(plans):
        if k not in completions:
            text = Generator([seed, 7, k])  # type: ignore[arg-type]  # any numpy seed
            completions[k] = [*text.text(th), UNTHINK, *text.text(rs), IM_END]
        out.append(Sample(sid, cat, prompt, completions[k], th, rs))
    return out


# ---- the target model directory -------------------------------------------------------------------------------


def write_target_model(model: TinyLM, out: Path, dtype: str = "bf16", shards: int = 1) -> Path:
    """`model` as Hugging Face writes a Llama checkpoint: `config.json` + `model.safetensors`, or with `shards=2`
    `model-00001-of-00002.safetensors` (embeddings, layers, final norm) + `model-00002-of-00002.safetensors`
    (`lm_head.weight`) + `model.safetensors.index.json`. Names as Llama's: `model.embed_tokens.weight`,
    `model.norm.weight`, `lm_head.weight`; each layer's context mix as `model.layers.{i}.self_attn.o_proj.weight`
    and its local mix as `model.layers.{i}.mlp.down_proj.weight` ([out, in], as nn.Linear stores them). Only the
    final norm and lm_head are meant to be read: the layers do not load in transformers."""
    if shards not in (1, 2):
        raise ValueError(f"shards must be 1 or 2, not {shards}")
    tdtype = {"bf16": torch.bfloat16, "f32": torch.float32}[dtype]
    out.mkdir(parents=True, exist_ok=True)

    def t(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(tdtype)

    body = {"model.embed_tokens.weight": t(model.embed)}
    for i in range(model.n_layers):
        body[f"model.layers.{i}.self_attn.o_proj.weight"] = t(model.attn[i].T)
        body[f"model.layers.{i}.mlp.down_proj.weight"] = t(model.mlp[i].T)
    body["model.norm.weight"] = t(model.norm_weight)
    head = {"lm_head.weight": t(model.lm_head)}
    if shards == 1:
        save_file({**body, **head}, out / "model.safetensors", metadata={"format": "pt"})
    else:
        names = [f"model-{k:05d}-of-{shards:05d}.safetensors" for k in (1, 2)]
        weight_map = {}
        for name, part in zip(names, (body, head), strict=True):
            save_file(part, out / name, metadata={"format": "pt"})
            weight_map |= dict.fromkeys(part, name)
        total = sum(x.numel() * x.element_size() for x in (*body.values(), *head.values()))
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": model.dim,
        "intermediate_size": model.dim,
        "num_hidden_layers": model.n_layers,
        "num_attention_heads": 1,
        "num_key_value_heads": 1,
        "head_dim": model.dim,
        "vocab_size": model.vocab_size,
        "rms_norm_eps": model.eps,
        "tie_word_embeddings": False,
        "torch_dtype": {"bf16": "bfloat16", "f32": "float32"}[dtype],
        "bos_token_id": FIRST_SPECIAL,  # [BOS]
        "eos_token_id": IM_END,
        "max_position_embeddings": 4096,
        "tinylm": {"layer_gains": list(model.gains), "aux_layers": list(model.aux_layers)},
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


@dataclass
class Target:
    """What the scanner reads of a checkpoint: the final norm, lm_head and eps (float32 numpy)."""

    norm_weight: np.ndarray
    lm_head: np.ndarray
    eps: float


def read_target(model_dir: Path) -> Target:
    """The final norm and lm_head of a checkpoint directory, sharded or not (with safetensors, not tokscan)."""
    config = json.loads((model_dir / "config.json").read_text())
    index = model_dir / "model.safetensors.index.json"
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    )
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors |= load_file(model_dir / f)
    return Target(
        tensors["model.norm.weight"].float().numpy(),
        tensors["lm_head.weight"].float().numpy(),
        float(config["rms_norm_eps"]),
    )


def agreement(last: np.ndarray, ids: Sequence[int], positions: np.ndarray, target: Target, apply_norm: bool) -> float:
    """The numpy oracle of next-token agreement: the share of `positions` t (t+1 < len(ids), t < len(last)) where
    argmax(lm_head . norm(last[t])) == ids[t+1], the norm applied only when `apply_norm` (a before-norm dump)."""
    ids = np.asarray(ids)
    positions = np.asarray([t for t in positions if t + 1 < len(ids) and t < len(last)], dtype=np.int64)
    if not len(positions):
        return float("nan")
    h = np.asarray(last, dtype=np.float32)[positions]
    if apply_norm:
        h = rms_norm(h, target.norm_weight, target.eps).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        predicted = (h @ target.lm_head.T).argmax(1)
    return float((predicted == ids[positions + 1]).mean())


# ---- one sample's capture and the defects ---------------------------------------------------------------------


@dataclass
class Capture:
    """One file's content before a layout lays it out: ids [N], mask [N], the last state [N, D] in the dump's
    norm convention and the k aux layers [N, k, D] (float32). `n_sample`: how many rows are the sample's own
    (the rest is batch padding)."""

    ids: np.ndarray
    mask: np.ndarray | None
    last: np.ndarray
    aux: np.ndarray
    n_sample: int


def _capture(model: TinyLM, s: Sample, after: bool, max_length: int | None, pad_to: int = 0) -> Capture:
    ids, mask = np.asarray(s.ids, dtype=np.int64), np.asarray(s.mask(), dtype=np.int64)
    if max_length is not None:
        ids, mask = ids[:max_length], mask[:max_length]
    n = len(ids)
    if pad_to > n:
        ids = np.concatenate([ids, np.zeros(pad_to - n, dtype=np.int64)])
        mask = np.concatenate([mask, np.zeros(pad_to - n, dtype=np.int64)])
    states = model.forward(ids)
    last = model.norm(states[-1]) if after else states[-1]
    aux = np.stack([states[a] for a in model.aux_layers], axis=1)
    return Capture(ids, mask, last.astype(np.float32), aux.astype(np.float32), n)


def _spot(s: Sample, c: Capture, width: int = 1) -> int:
    """A position in the middle of the captured completion holding an ordinary id, room for `width` rows."""
    lo = min(len(s.prompt), c.n_sample - 1)
    p = lo + (c.n_sample - lo) // 2
    while p + 1 < c.n_sample - width and c.ids[p] >= FIRST_SPECIAL:
        p += 1
    return max(0, min(p, c.n_sample - width))


def _plant(
    defect: str, c: Capture, s: Sample, model: TinyLM, after: bool, other: tuple[str, Capture] | None
) -> tuple[Capture, str]:
    """`c` with `defect` applied (those that change the capture), and a note for `DumpFile.detail`;
    `other` = (sample id, clean capture) of the sample whose states "other_sample" takes."""
    c = replace(c, ids=c.ids.copy(), mask=c.mask.copy(), last=c.last.copy(), aux=c.aux.copy())
    if defect == "shape":
        c.aux = c.aux[:, :-1]
        return c, f"{c.aux.shape[1]} aux layers"
    if defect == "short":
        k = c.n_sample - SHORT
        return replace(c, ids=c.ids[:k], mask=c.mask[:k], last=c.last[:k], aux=c.aux[:k], n_sample=k), f"N={k}"
    if defect == "short_states":
        k = c.n_sample - SHORT
        return replace(c, last=c.last[:k], aux=c.aux[:k]), f"states N={k}"
    if defect == "ids":
        p = _spot(s, c)
        c.ids[p] = c.ids[p] + 1 if c.ids[p] + 1 < FIRST_SPECIAL else c.ids[p] - 1
        return c, f"position {p}"
    if defect == "mask_shift":
        c.mask = np.concatenate([[0], c.mask[:-1]])
        return c, "mask shifted right by 1"
    if defect in ("nan", "inf"):
        p = _spot(s, c)
        c.last[p, 3] = np.nan if defect == "nan" else np.inf
        return c, f"position {p}"
    if defect == "zero_rows":
        p = _spot(s, c, ZERO_ROWS)
        c.last[p : p + ZERO_ROWS] = 0
        c.aux[p : p + ZERO_ROWS] = 0
        return c, f"positions {p}..{p + ZERO_ROWS - 1}"
    if defect == "prenorm":
        raw = model.forward(c.ids)[-1]
        c.last = (raw if after else model.norm(raw)).astype(np.float32)
        return c, "before the final norm" if after else "after the final norm"
    if defect == "wrong_layer":
        prev = model.forward(c.ids)[-2]
        c.last = (model.norm(prev) if after else prev).astype(np.float32)
        return c, f"layer {model.n_layers - 1}"
    if defect == "shifted_states":
        c.last = np.concatenate([c.last[:1], c.last[:-1]])
        c.aux = np.concatenate([c.aux[:1], c.aux[:-1]])
        return c, "row t = state of t-1"
    if defect == "other_sample":
        sid, o = other
        rows = np.arange(len(c.ids)) % len(o.ids)
        return replace(c, last=o.last[rows], aux=o.aux[rows]), f"states of {sid}"
    return c, ""


# ---- layouts --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """A file to write: its path under the dump, the corpus row it captures, the batch it ran in (padding)."""

    rel: str
    sample: int
    batch: tuple = ()


@dataclass(frozen=True)
class Layout:
    """One writer's layout: where each sample's file goes (`slots(samples, dp, batch_size)`), the name of the
    j-th extra file (`extra(slots, j, sample_id, defect)`), the tensors of one capture (`payload(capture, dtype,
    sample_id)`) and how a file is written (`save(obj, path, compress)`)."""

    name: str
    final_norm: str
    slots: Callable[[list[Sample], int, int], list[Slot]]
    extra: Callable[[list[Slot], int, str, str], str]
    payload: Callable[[Capture, torch.dtype, str], dict]
    save: Callable[[dict, Path, bool], None]
    has_mask: bool = True


def _group(idx: int, size: int) -> str:
    g = idx // size * size
    return f"rows_{g}-{g + size}"


def _specforge_slots(samples: list[Sample], dp: int, batch_size: int) -> list[Slot]:
    """SpecForge's `prepare_hidden_states.py` with `dp` data-parallel ranks: a `DistributedSampler` (no shuffle,
    padded to a multiple of dp by repeating the first rows) deals rows r, r+dp, ... to rank r; its DataLoader
    drops the last incomplete batch; rank r names its k-th file `data_{start_r + k}` from a contiguous start
    (n // dp per rank, the first n % dp ranks one more), in `rows_{g}-{g+2000}` folders. A name two ranks both
    reach is written by the first in time (the writer skips existing files); a tie goes to the lower rank."""
    n = len(samples)
    per = math.ceil(n / dp)
    order = list(range(n))
    while len(order) < per * dp:
        order += order[: per * dp - len(order)]
    rem = n % dp
    timed = []
    for r in range(dp):
        mine = order[r : per * dp : dp]
        mine = mine[: len(mine) // batch_size * batch_size]
        count = n // dp + (1 if r < rem else 0)
        start = r * count if r < rem else r * count + rem
        for k, row in enumerate(mine):
            b = k // batch_size
            timed.append((b, r, Slot(f"{_group(start + k, 2000)}/data_{start + k}.ckpt", row, (r, b))))
    seen: set[str] = set()
    out = []
    for _b, _r, slot in sorted(timed, key=lambda x: x[:2]):
        if slot.rel not in seen:
            seen.add(slot.rel)
            out.append(slot)
    return out


def _index_of(rel: str) -> int:
    """The index in a file name: `.../data_12.ckpt` -> 12, `hs_3.safetensors` -> 3."""
    return int(Path(rel).name.rsplit("_", 1)[1].split(".")[0])


def _specforge_extra(slots: list[Slot], j: int, _sid: str, _defect: str) -> str:
    idx = max((_index_of(s.rel) for s in slots), default=-1) + 1 + j
    return f"{_group(idx, 2000)}/data_{idx}.ckpt"


def _angelslim_slots(samples: list[Sample], dp: int, _batch: int) -> list[Slot]:
    """AngelSlim's `generate_hidden_for_draft_model.py`: rank r takes the contiguous slice from start_r (n // dp
    rows each, the first n % dp one more) and names its k-th row `rank_{r}/rows_{s}-{s+5000}/data_{k}.ckpt`."""
    n = len(samples)
    out, per, rem = [], n // dp, n % dp
    for r in range(dp):
        start = r * per + min(r, rem)
        out += [Slot(f"rank_{r}/{_group(k, 5000)}/data_{k}.ckpt", start + k) for k in range(per + (r < rem))]
    return out


def _angelslim_extra(slots: list[Slot], j: int, _sid: str, _defect: str) -> str:
    """Past the end of the last rank's slice."""
    rank = max(int(s.rel.split("/")[0][len("rank_") :]) for s in slots)
    k = sum(1 for s in slots if s.rel.startswith(f"rank_{rank}/")) + j
    return f"rank_{rank}/{_group(k, 5000)}/data_{k}.ckpt"


def _row_slots(pattern: str) -> Callable[[list[Sample], int, int], list[Slot]]:
    """File i = corpus row i."""
    return lambda samples, _dp, _b: [Slot(pattern.format(i=i), i) for i in range(len(samples))]


def _row_extra(pattern: str) -> Callable[[list[Slot], int, str, str], str]:
    return lambda slots, j, _sid, _defect: pattern.format(i=max(_index_of(s.rel) for s in slots) + 1 + j)


def _modelopt_slots(samples: list[Sample], _dp: int, _b: int) -> list[Slot]:
    """`{conversation_id}.pt`, the conversation id being the corpus's `sample_id`."""
    return [Slot(f"{s.sample_id}.pt", i) for i, s in enumerate(samples)]


def _modelopt_extra(_slots: list[Slot], _j: int, sid: str, defect: str) -> str:
    """A duplicate as `{id}_1.pt` (its `conversation_id` still the sample's); an orphan under its own id."""
    return f"{sid}_1.pt" if defect == "duplicate" else f"{sid}.pt"


def _flat_aux(c: Capture) -> np.ndarray:
    return c.aux.reshape(len(c.aux), -1)


def _torch_save(obj: dict, path: Path, compress: bool = False) -> None:
    """`torch.save`; gzip around it for SpecForge's `--compress`."""
    if compress:
        buf = io.BytesIO()
        torch.save(obj, buf)
        path.write_bytes(gzip.compress(buf.getvalue(), mtime=0))
    else:
        torch.save(obj, path)


def _t(x: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(dtype)


def _i64(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.int64))


LAYOUTS: dict[str, Layout] = {
    # SpecForge scripts/prepare_hidden_states.py: asdict(DataPoint(input_ids, loss_mask, hidden_state,
    # aux_hidden_state)); the last state after the final norm (the trainer applies lm_head directly).
    "specforge": Layout(
        "specforge",
        "after",
        _specforge_slots,
        _specforge_extra,
        lambda c, dt, _sid: {
            "input_ids": _i64(c.ids),
            "loss_mask": _i64(c.mask),
            "hidden_state": _t(c.last, dt)[None],
            "aux_hidden_state": _t(_flat_aux(c), dt)[None],
        },
        _torch_save,
    ),
    # vLLM speculators scripts/data_generation_offline.py (current): hs_{row}.safetensors, token_ids +
    # hidden_states [N, k+1, D], the last layer before the final norm; the mask stays in the dataset.
    "speculators": Layout(
        "speculators",
        "before",
        _row_slots("hs_{i}.safetensors"),
        _row_extra("hs_{i}.safetensors"),
        lambda c, dt, _sid: {
            "token_ids": _i64(c.ids),
            "hidden_states": _t(np.concatenate([c.aux, c.last[:, None]], axis=1), dt),
        },
        lambda obj, path, _gz: save_file(obj, path),
        has_mask=False,
    ),
    # speculators (older): data_{i}.pt = input_ids, hidden_states (a list of k+1 [N, D]), loss_mask, beside
    # data_config.json (its layer_ids) and sample_lengths.json.
    "speculators_pt": Layout(
        "speculators_pt",
        "before",
        _row_slots("data_{i}.pt"),
        _row_extra("data_{i}.pt"),
        lambda c, dt, _sid: {
            "input_ids": _i64(c.ids),
            "hidden_states": [_t(c.aux[:, k], dt) for k in range(c.aux.shape[1])] + [_t(c.last, dt)],
            "loss_mask": _i64(c.mask),
        },
        _torch_save,
    ),
    # NVIDIA Model-Optimizer collect_hidden_states, HF path (the last state after the final norm).
    "modelopt": Layout(
        "modelopt",
        "after",
        _modelopt_slots,
        _modelopt_extra,
        lambda c, dt, sid: {
            "input_ids": _i64(c.ids),
            "hidden_states": _t(c.last, dt),
            "aux_hidden_states": _t(_flat_aux(c), dt),
            "loss_mask": _i64(c.mask),
            "conversation_id": sid,
        },
        _torch_save,
    ),
    # Tencent AngelSlim tools/generate_hidden_for_draft_model.py: a batch of one, [1, N, ...].
    "angelslim": Layout(
        "angelslim",
        "after",
        _angelslim_slots,
        _angelslim_extra,
        lambda c, dt, _sid: {
            "input_ids": _i64(c.ids)[None],
            "loss_mask": _i64(c.mask)[None],
            "hidden_states": _t(_flat_aux(c), dt)[None],
            "target_hiddens": _t(c.last, dt)[None],
        },
        _torch_save,
    ),
}
#: Layout -> "after" or "before": where its writer takes the stored last state, relative to the final norm.
FINAL_NORM = {name: layout.final_norm for name, layout in LAYOUTS.items()}


def read_capture(path: Path, layout: str) -> Capture:
    """A dump file read back with `torch.load(weights_only=True)` (gzip undone) or safetensors, as a `Capture`
    (states float32; `mask` None for speculators, whose files hold none; `n_sample` = N)."""
    if layout == "speculators":
        d = load_file(path)
        hs, ids = d["hidden_states"].float().numpy(), d["token_ids"].numpy()
        return Capture(ids, None, hs[:, -1], hs[:, :-1], len(ids))
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    d = torch.load(io.BytesIO(raw), weights_only=True)
    if layout == "specforge":
        last, aux, ids, mask = d["hidden_state"][0], d["aux_hidden_state"][0], d["input_ids"], d["loss_mask"]
    elif layout == "speculators_pt":
        hs = d["hidden_states"]
        last, aux, ids, mask = hs[-1], torch.stack(hs[:-1], 1), d["input_ids"], d["loss_mask"]
    elif layout == "modelopt":
        last, aux, ids, mask = d["hidden_states"], d["aux_hidden_states"], d["input_ids"], d["loss_mask"]
    elif layout == "angelslim":
        last, aux, ids, mask = d["target_hiddens"][0], d["hidden_states"][0], d["input_ids"][0], d["loss_mask"][0]
    else:
        raise ValueError(f"unknown layout {layout!r}")
    aux = aux.float().numpy().reshape(len(aux), -1, last.shape[-1])
    return Capture(ids.numpy(), mask.numpy(), last.float().numpy(), aux, len(ids))


# ---- build ----------------------------------------------------------------------------------------------------


@dataclass
class DumpFile:
    """One file written: its path, the corpus row it captures (None: an orphan), its defect (None: clean), the
    positions its ids hold, and a note (where the defect sits, whose states it holds, ...)."""

    path: Path
    sample: int | None
    defect: str | None
    n: int
    detail: str = ""


@dataclass
class Built:
    """A corpus, its dump and the model that wrote both.

    - `corpus_dir`: Parquet shards `part-00k.parquet` (`sample_id`, `category`, `input_ids` int32, `loss_mask`
      int8), rows in `samples` order; `dump_dir`: the dump; `model_dir`: the checkpoint.
    - `samples`: the corpus (`demo_corpus.Sample`: sample_id, category, prompt, completion, ids, mask());
      `orphans`: the samples written only to orphan files.
    - `model`: the numpy `TinyLM`; `files`: every file written (`DumpFile`), in write order; `plant`: the defects
      asked for; `max_length`: the cut applied to every capture (None: none); `final_norm`: "after" / "before",
      the dump's convention; `dtype`: of the states ("bf16" / "f32"); `layer_ids`: the layers stored, aux ones
      then the last (indices into `TinyLM.forward`'s first axis, 0 = embeddings)."""

    layout: str
    corpus_dir: Path
    dump_dir: Path
    model_dir: Path
    samples: list[Sample]
    model: TinyLM
    files: list[DumpFile]
    plant: dict[int, str]
    max_length: int | None
    final_norm: str
    dtype: str
    layer_ids: tuple[int, ...]
    orphans: list[Sample] = field(default_factory=list)

    def files_of(self, i: int) -> list[DumpFile]:
        """The files written for corpus row `i` (none when missing; two when duplicated)."""
        return [f for f in self.files if f.sample == i]

    def expected_last(self, i: int) -> np.ndarray:
        """Sample i's clean last state [N, D] in the dump's convention (float64, before the dtype rounding, not
        cut at max_length)."""
        states = self.model.forward(self.samples[i].ids)[-1]
        return self.model.norm(states) if self.final_norm == "after" else states


def build(
    root: Path,
    layout: str = "specforge",
    n: int = 24,
    plant: dict[int, str] | None = None,
    *,
    dp: int = 1,
    batch_size: int = 1,
    pad: bool = False,
    compress: bool = False,
    dtype: str = "bf16",
    model_dtype: str | None = None,
    shards: int = 1,
    max_length: int | None = None,
    final_norm: str | None = None,
    categories: Sequence[str] = DEFAULT_CATEGORIES,
    foreign: Sequence[str] = (),
    seed: int = 0,
) -> Built:
    """Writes `root/corpus` (Parquet), `root/dump` (the hidden-state dump in `layout`, one of `LAYOUTS`) and
    `root/model` (the checkpoint) for `n` samples of `tiny_model(seed)`, with `plant` = {corpus row: defect}
    (see `DEFECTS`; the corpus itself is never planted).

    - `dp`: data-parallel ranks. SpecForge: interleaved sampler, rank-local names, so data_i is not row i (see
      `_specforge_slots`); AngelSlim: `rank_{r}` folders over contiguous slices. `batch_size`: SpecForge's
      per-rank batch (its DataLoader drops each rank's last incomplete batch). `pad`: SpecForge captures padded
      to their batch's longest (ids 0, mask 0, the model's own states over the padding). `compress`: SpecForge's
      `.ckpt.gz`.
    - `dtype`: of the dumped states, "bf16" or "f32"; `model_dtype`: of the checkpoint (default: `dtype`);
      `shards`: 1 or 2 checkpoint files.
    - `max_length`: every capture cut to its first `max_length` positions (the writers' --max-length).
    - `final_norm`: "after" / "before" overrides the layout's convention (Model-Optimizer's vLLM path: "before").
    - `categories`, `foreign`, `seed`: see `make_samples`."""
    plant = dict(plant or {})
    spec = LAYOUTS[layout]
    for i, d in plant.items():
        if d not in DEFECTS:
            raise ValueError(f"unknown defect {d!r} (one of {', '.join(DEFECTS)})")
        if not 0 <= i < n:
            raise ValueError(f"plant index {i} outside the corpus of {n}")
    if dp != 1 and layout not in ("specforge", "angelslim"):
        raise ValueError("dp names files only in the specforge and angelslim layouts")
    if (pad or batch_size != 1 or compress) and layout != "specforge":
        raise ValueError("pad, batch_size and compress are SpecForge options")
    if not spec.has_mask and "mask_shift" in plant.values():
        raise ValueError(f"{layout} files hold no loss mask: mask_shift cannot be planted")
    if pad and {"short", "short_states"} & set(plant.values()):
        raise ValueError("short captures are not planted in padded batches")
    after = (final_norm or spec.final_norm) == "after"
    tdtype = {"bf16": torch.bfloat16, "f32": torch.float32}[dtype]
    model = tiny_model(seed)

    # The corpus: samples planted "truncated" are made longer than the max length.
    long_rows = [i for i, d in plant.items() if d == "truncated"]
    if long_rows and max_length is None:
        clean_samples = make_samples(n, seed, model, categories, foreign)
        others = [len(s.ids) for k, s in enumerate(clean_samples) if k not in long_rows]
        if not others:
            raise ValueError("a corpus planted truncated everywhere needs max_length")
        max_length = max(others)
    samples = make_samples(n, seed, model, categories, foreign, {i: max_length + 16 for i in long_rows})
    corpus_dir = write_parquet_full(samples, root / "corpus")
    model_dir = write_target_model(model, root / "model", model_dtype or dtype, shards)
    dump_dir = root / "dump"
    dump_dir.mkdir(parents=True, exist_ok=True)

    def captured(i: int) -> int:
        return len(samples[i].ids) if max_length is None else min(max_length, len(samples[i].ids))

    slots = spec.slots(samples, dp, batch_size)
    pad_to: dict[tuple, int] = {}
    if pad:
        for slot in slots:
            pad_to[slot.batch] = max(pad_to.get(slot.batch, 0), captured(slot.sample))

    @functools.cache
    def clean(i: int, padded: int = 0) -> Capture:
        return _capture(model, samples[i], after, max_length, padded)

    def other(i: int, need: int) -> tuple[str, Capture]:
        """The next sample (cyclically) at least `need` long, else the longest."""
        order = [(i + j) % n for j in range(1, n)] or [i]
        j = next((j for j in order if captured(j) >= need), max(order, key=captured))
        return samples[j].sample_id, clean(j)

    files: list[DumpFile] = []
    suffix = ".gz" if compress else ""

    def write(rel: str, c: Capture, sid: str, row: int | None, defect: str | None, detail: str) -> None:
        path = dump_dir / (rel + suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        spec.save(spec.payload(c, tdtype, sid), path, compress)
        if defect == "cut":
            data = path.read_bytes()
            path.write_bytes(data[: len(data) // 2])
            detail = f"{len(data) // 2} of {len(data)} bytes"
        files.append(DumpFile(path, row, defect, len(c.ids), detail))

    extras: dict[int, tuple[str, Capture]] = {}  # row -> (defect, its capture) for duplicates and orphans
    for slot in slots:
        i, s = slot.sample, samples[slot.sample]
        defect, detail = plant.get(i), ""
        if defect == "missing":
            continue
        c = clean(i, pad_to.get(slot.batch, 0))
        if defect:
            c, detail = _plant(defect, c, s, model, after, other(i, len(c.ids)) if defect == "other_sample" else None)
        write(slot.rel, c, s.sample_id, i, defect, detail)
        if defect in ("duplicate", "orphan"):
            extras.setdefault(i, (defect, c))
    orphans: list[Sample] = []
    for j, (i, (defect, c)) in enumerate(extras.items()):
        if defect == "duplicate":
            s, row, detail = samples[i], i, "second file"
        else:
            s = make_samples(len(orphans) + 1, seed + 1000, model, categories, foreign, id_prefix="orphan")[-1]
            c, row, detail = _capture(model, s, after, max_length), None, f"for row {i}; not in the corpus"
            orphans.append(s)
        write(spec.extra(slots, j, s.sample_id, defect), c, s.sample_id, row, defect, detail)

    layer_ids = (*model.aux_layers, model.n_layers)
    if layout == "speculators_pt":
        _write_speculators_config(dump_dir, model, model_dir, len(samples), files, layer_ids, max_length)
    return Built(
        layout,
        corpus_dir,
        dump_dir,
        model_dir,
        samples,
        model,
        files,
        plant,
        max_length,
        "after" if after else "before",
        dtype,
        layer_ids,
        orphans,
    )


def _write_speculators_config(
    dump_dir: Path,
    model: TinyLM,
    model_dir: Path,
    n: int,
    files: list[DumpFile],
    layer_ids: tuple[int, ...],
    max_length: int | None,
) -> None:
    """The older speculators' `data_config.json` (its DataGenerationConfig, version 2.0) and
    `sample_lengths.json` (file index -> positions)."""
    seq = max_length or 4096
    schema = {
        "input_ids": {"dtype": "torch.long", "shape": "[seq_len]", "description": "Tokenized input sequence"},
        "hidden_states": {
            "dtype": "list[torch.bfloat16]",
            "shape": f"list of [seq_len, {model.dim}]",
            "num_tensors": len(layer_ids),
            "description": f"Hidden states from {len(layer_ids)} layers",
        },
        "loss_mask": {
            "dtype": "torch.long",
            "shape": "[seq_len]",
            "description": "1 for assistant tokens to train on, 0 elsewhere",
        },
    }
    config = {
        "version": "2.0",
        "generated_at": "2026-01-01T00:00:00+00:00",
        "speculators_version": "0.2.0",
        "model": {
            "target_model_path": str(model_dir),
            "tensor_parallel_size": 1,
            "max_model_len": seq,
            "gpu_memory_utilization": 0.8,
            "hidden_size": model.dim,
        },
        "data": {"train_data_path": "corpus", "seq_length": seq, "max_samples": None, "num_samples": n, "seed": 0},
        "hidden_states": {
            "layer_ids": list(layer_ids),
            "description": "Layers selected for EAGLE3 fusion and target logits",
        },
        "generation": {"cache_dir": "cache"},
        "format": {"file_pattern": "data_{idx}.pt", "schema": schema},
    }
    (dump_dir / "data_config.json").write_text(json.dumps(config, indent=2) + "\n")
    lengths = {str(_index_of(f.path.name)): f.n for f in files}
    (dump_dir / "sample_lengths.json").write_text(json.dumps(lengths) + "\n")
