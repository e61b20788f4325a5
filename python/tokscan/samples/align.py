"""Prompt alignment: is every sample's prompt exactly the tokenizer's chat-template rendering of its prompt
record? Records match samples by an id field when they have one, otherwise by line number. Rendering is done
once per record (Jinja, across processes) and tokenized in one batch (the fast tokenizer is parallel)."""

from __future__ import annotations

import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, UsageError, install_hint
from .corpus import Corpus
from .tokenizer import load_tokenizer, read_chat_template

SHIFT_WINDOW = 3
MIN_SHIFT_RUN = 2


@dataclass
class AlignResult:
    n_samples: int
    n_records: int
    matched_by: str
    aligned: int
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    shifts: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.missing

    def to_json(self) -> dict[str, Any]:
        return {
            "n_samples": self.n_samples,
            "n_records": self.n_records,
            "matched_by": self.matched_by,
            "aligned": self.aligned,
            "mismatches": self.mismatches,
            "shifts": self.shifts,
            "missing": self.missing,
        }


def read_records(path: Path) -> list[dict[str, Any]]:
    out = []
    from ..files import read_text

    try:
        lines = read_text(path, InputError).splitlines()
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a JSONL prompts file (not UTF-8 text)") from None
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}: line {n} is not JSON ({e.msg})") from None
            if not isinstance(rec, dict) or not isinstance(rec.get("messages"), list):
                raise InputError(f"{path}: line {n} has no 'messages' list")
            out.append(rec)
    if not out:
        raise InputError(f'{path}: no prompt records (one {{"messages": [...]}} object per line)')
    return out


_TOKENIZER: Any = None


def _init(tokenizer_dir: str, template: str | None, trust_remote_code: bool = False) -> None:
    global _TOKENIZER
    _TOKENIZER = load_tokenizer(tokenizer_dir, trust_remote_code)
    if template is not None:
        _TOKENIZER.chat_template = template


def _render(records: list[dict[str, Any]]) -> list[str]:
    return [
        _TOKENIZER.apply_chat_template(r["messages"], tools=r.get("tools"), add_generation_prompt=True, tokenize=False)
        for r in records
    ]


def render_prompts(
    records: list[dict[str, Any]],
    tokenizer_dir: str,
    template: str | None,
    workers: int,
    trust_remote_code: bool = False,
) -> tuple[list[list[int]], Any]:
    """Token ids of every record's rendering, and the tokenizer. The text the template renders is tokenized as
    it is (`add_special_tokens=False`): a BOS the template emits appears once, and none is added when it emits
    none."""
    global _TOKENIZER
    tok = load_tokenizer(tokenizer_dir, trust_remote_code)
    if template is not None:
        tok.chat_template = template
    _require_template(tok, tokenizer_dir)
    if workers > 1 and len(records) > 2000:
        chunks = [records[i::workers] for i in range(workers)]
        # Spawned, not forked: this process runs threads (pyarrow's, the tokenizers crate's, the scan's), and a
        # forked worker can inherit one of their locks held forever (a worker died so on Python 3.13). Each worker
        # loads the tokenizer itself (`_init`), as it did after a fork.
        with ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init,
            initargs=(tokenizer_dir, template, trust_remote_code),
        ) as pool:
            parts = list(pool.map(_render, chunks))
        texts = [""] * len(records)
        for i, part in enumerate(parts):
            texts[i::workers] = part
    else:
        _TOKENIZER = tok
        texts = _render(records)
    return tok(texts, add_special_tokens=False)["input_ids"], tok


def _require_template(tok: Any, where: object) -> None:
    try:
        import jinja2  # noqa: F401  (apply_chat_template needs it)
    except ImportError:
        raise UsageError(f"rendering prompts needs jinja2 ({install_hint('tokenizer')})") from None
    if getattr(tok, "chat_template", None) is None:
        raise UsageError(f"{where}: the tokenizer has no chat template; pass --chat-template FILE")


def render_with(tok: Any, records: list[dict[str, Any]]) -> list[list[int]]:
    """Token ids of each record's generation prompt, rendered and tokenized exactly as `align` does."""
    texts = [
        tok.apply_chat_template(r["messages"], tools=r.get("tools"), add_generation_prompt=True, tokenize=False)
        for r in records
    ]
    return tok(texts, add_special_tokens=False)["input_ids"]


def sample_prompts(corpus: Corpus) -> tuple[list[np.ndarray], list[int | None], list[str | None]]:
    """Each sample's token ids (the prompt alone for prompt_ids + output_ids layouts), its prompt length when
    stored apart, and its sample id — read through the core, in one pass per input."""
    samples = corpus.fetch_range(0, len(corpus))
    seqs = [s.ids if s.prompt_len is None else s.ids[: s.prompt_len] for s in samples]
    return seqs, [s.prompt_len for s in samples], [s.sample_id for s in samples]


def _matches(seq: np.ndarray, plen: int | None, rendered: list[int]) -> bool:
    n = len(rendered)
    if plen is not None and plen != n:
        return False
    return len(seq) >= n and np.array_equal(np.asarray(seq[:n]), rendered)


def first_difference(seq: np.ndarray, plen: int | None, rendered: list[int]) -> int:
    """Index of the first token where the sample's prompt and the rendering differ (one of them may end
    first). `seq` is the whole sample, or the prompt alone when `plen` (its stored length) is given."""
    head = np.asarray(seq[: len(rendered)] if plen is None else seq)
    n = min(len(head), len(rendered))
    diff = np.flatnonzero(head[:n] != np.asarray(rendered[:n], dtype=head.dtype if n else np.int64))
    return int(diff[0]) if len(diff) else n


def check_record(
    seq: np.ndarray, plen: int | None, record: dict[str, Any], tok: Any, radius: int = 8
) -> dict[str, Any]:
    """Whether one sample's prompt is the chat-template rendering of `record` (as `align` decides it), with the
    first difference decoded on both sides."""
    _require_template(tok, "the tokenizer")
    rendered = render_with(tok, [record])[0]
    if _matches(seq, plen, rendered):
        return {"matches": True, "rendered_tokens": len(rendered)}
    diff = first_difference(seq, plen, rendered)
    head = np.asarray(seq[: len(rendered)] if plen is None else seq)
    a, b = max(0, diff - radius), diff + radius
    return {
        "matches": False,
        "rendered_tokens": len(rendered),
        "first_difference": diff,
        "sample_text": tok.decode(head[a:b].tolist(), skip_special_tokens=False),
        "rendered_text": tok.decode(list(rendered[a:b]), skip_special_tokens=False),
    }


def align(
    paths: list[str],
    prompts: Path,
    tokenizer_dir: str,
    chat_template: Path | None = None,
    workers: int | None = None,
    decode_radius: int = 8,
    trust_remote_code: bool = False,
    columns: dict[str, str] | None = None,
) -> AlignResult:
    corpus = Corpus(paths, columns)
    records = read_records(prompts)
    seqs, plens, sample_ids = sample_prompts(corpus)
    template = read_chat_template(chat_template) if chat_template is not None else None
    rendered, tok = render_prompts(records, tokenizer_dir, template, workers or os.cpu_count() or 1, trust_remote_code)
    id_field = next((f for f in ("sample_id", "id") if records and f in records[0]), None)
    if id_field is not None and any(s is not None for s in sample_ids):
        index: dict[str, int] = {}
        for j, r in enumerate(records):
            index.setdefault(str(r.get(id_field)), j)
        target = [index.get(s) if s is not None else None for s in sample_ids]
        matched_by = f"record field {id_field!r} = sample_id"
    else:
        target = [i if i < len(records) else None for i in range(len(seqs))]
        matched_by = "line number (the records have no id field)"
    result = AlignResult(len(seqs), len(records), matched_by, 0)
    offsets: list[int | None] = []
    for i, (seq, plen, j) in enumerate(zip(seqs, plens, target, strict=True)):
        who = sample_ids[i] if sample_ids[i] is not None else f"#{i}"
        if j is None:
            result.missing.append(who)
            offsets.append(None)
            continue
        r = rendered[j]
        if _matches(seq, plen, r):
            result.aligned += 1
            offsets.append(0)
            continue
        found = None
        for k in range(1, SHIFT_WINDOW + 1):
            for cand in (j + k, j - k):
                if 0 <= cand < len(rendered) and _matches(seq, plen, rendered[cand]):
                    found = cand - j
                    break
            if found is not None:
                break
        offsets.append(found)
        head = np.asarray(seq[: len(r)] if plen is None else seq)
        diff = first_difference(seq, plen, r)
        a, b = max(0, diff - decode_radius), diff + decode_radius
        result.mismatches.append(
            {
                "row": i,
                "sample_id": sample_ids[i],
                "record": j,
                "first_difference": diff,
                "sample_text": tok.decode(head[a:b].tolist(), skip_special_tokens=False),
                "rendered_text": tok.decode(list(r[a:b]), skip_special_tokens=False),
                "matches_record_at_offset": found,
            }
        )
    # Runs of at least MIN_SHIFT_RUN rows that match a neighbouring record at the same offset: the prompts file
    # is out of order (a single row matching a neighbour is more likely two identical prompts).
    i = 0
    while i < len(offsets):
        k = offsets[i]
        if k:
            j = i
            while j + 1 < len(offsets) and offsets[j + 1] == k:
                j += 1
            first = sample_ids[i] if sample_ids[i] is not None else f"#{i}"
            if j - i + 1 < MIN_SHIFT_RUN:
                i = j + 1
                continue
            result.shifts.append(
                {
                    "offset": k,
                    "from_row": i,
                    "to_row": j,
                    "from_sample": first,
                    "message": f"rows are shifted by {k:+d} from sample {first} on (rows {i}-{j}): "
                    f"sample i matches prompt record i{k:+d}",
                }
            )
            i = j + 1
        else:
            i += 1
    return result
