"""Looking at individual samples: fetch one from the corpus without scanning it, explain its structure with
the Rust checker, and decode it (or an excerpt) with the model's tokenizer. The tokenizer is slow, so it only
ever sees the samples asked for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Protocol

import numpy as np

from .. import _core
from ..errors import UsageError
from ..outputs import utf8_paths
from .tokenizer import load_tokenizer  # noqa: F401  (re-exported: the one tokenizer loader)

EXCERPT_RADIUS = 12
EDGE_TOKENS = 12
OOV = "⟨oov {}⟩"  # an id outside the vocabulary, wherever ids are shown as text


class Decoder(Protocol):
    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str: ...


class IdDecoder:
    """Stands in for a tokenizer when there is none: special tokens by the profile's name (`<|im_end|>`), ids
    outside the vocabulary as `⟨oov N⟩`, every other token as its id; tokens separated by spaces."""

    separator = " "

    def __init__(self, profile: _core.Profile | None = None) -> None:
        self.names: dict[int, str] = {i: name for name, i in profile.special_tokens} if profile is not None else {}
        self.vocab_size: int | None = profile.vocab_size if profile is not None else None

    def token(self, i: int) -> str:
        if i < 0 or (self.vocab_size is not None and i >= self.vocab_size):
            return OOV.format(i)
        return self.names.get(i, str(i))

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return " ".join(self.token(int(i)) for i in ids)


def vocab_size_of(tok: Decoder | None, profile: _core.Profile | None = None) -> int | None:
    """The vocabulary size that bounds valid ids: the profile's, else the tokenizer's (`len(tok)`), else None."""
    if profile is not None:
        return profile.vocab_size
    return len(tok) if tok is not None and hasattr(tok, "__len__") else None  # type: ignore[arg-type]


def decode_text(tok: Decoder, ids: list[int], vocab_size: int | None = None) -> str:
    """`tok.decode(ids)`, except that ids outside the vocabulary (negative, or >= `vocab_size`) show as
    `⟨oov N⟩` where they are instead of vanishing (or crashing the tokenizer, for negative ids). One decode
    call when every id is valid."""
    bad = [k for k, i in enumerate(ids) if i < 0 or (vocab_size is not None and i >= vocab_size)]
    if not bad or isinstance(tok, IdDecoder):
        return tok.decode(ids, skip_special_tokens=False)
    pieces: list[str] = []
    start = 0
    for k in bad:
        if k > start:
            pieces.append(tok.decode(ids[start:k], skip_special_tokens=False))
        pieces.append(OOV.format(ids[k]))
        start = k + 1
    if start < len(ids):
        pieces.append(tok.decode(ids[start:], skip_special_tokens=False))
    return "".join(pieces)


@dataclass
class Sample:
    source: str
    row: int  # global row in scan order
    local_row: int
    sample_id: str | int | None
    category: str | None
    ids: np.ndarray
    prompt_len: int | None = None
    mask: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)
    profile: _core.Profile | None = None  # set by `explain`: names the special tokens when there is no tokenizer


class Corpus:
    """The inputs of `paths` in scan order, read through the core (`tokscan._core.Corpus`): every format the
    scan reads, with the same column overrides. Only the rows asked for are decoded."""

    def __init__(self, paths: list[str], columns: Mapping[str, str] | None = None):
        self._wrap(_core.Corpus(utf8_paths(paths), dict(columns or {})), columns)

    @classmethod
    def of(cls, core: _core.Corpus, columns: Mapping[str, str] | None = None) -> Corpus:
        """A view over a corpus the core has open already (the one a scan read: `Report.corpus`), opened with
        `columns`."""
        corpus = cls.__new__(cls)
        corpus._wrap(core, columns)
        return corpus

    def _wrap(self, core: _core.Corpus, columns: Mapping[str, str] | None) -> None:
        self.columns = dict(columns or {})
        self.core = core
        described = self.core.inputs
        #: `(path, format, hive category)` per input, in scan order.
        self.inputs = [(path, fmt, hive) for path, fmt, _layout, _rows, _first, hive in described]
        self.layouts = [layout for _p, _f, layout, _r, _s, _h in described]
        self.counts = [rows for _p, _f, _l, rows, _s, _h in described]
        self.starts = np.array([first for *_x, first, _h in described] + [len(self.core)], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.core)

    def __repr__(self) -> str:
        paths = ", ".join(p for p, *_ in self.inputs[:3]) + (", …" if len(self.inputs) > 3 else "")
        return f"<Corpus {len(self):,} samples in {len(self.inputs)} input(s): {paths}>"

    def find_id(self, sample_id: str | int) -> int:
        """Global row of `sample_id`, given as text or as the id column's integer (reads only the id columns)."""
        return self.rows_of_id(sample_id, 1)[0]

    def rows_of_id(self, sample_id: str | int, limit: int) -> list[int]:
        """Global rows of the first `limit` samples with `sample_id`, in row order (more than one when the corpus
        repeats the id); a usage error when none has it."""
        rows = self.core.find_rows(sample_id, limit)
        if not rows:
            raise UsageError(f"no sample with sample_id {sample_id!r} in {', '.join(p for p, _f, _c in self.inputs)}")
        return [int(r) for r in rows]

    def fetch(self, row: int) -> Sample:
        self._in_range(row)
        return _sample(self.core.sample(int(row)))

    def fetch_explained(self, row: int, profile: _core.Profile) -> Sample:
        """The sample at `row`, read once, with `info` as the scan checks its row (`_core.Corpus.check_row`: with
        what its source found about it, such as a malformed line or a finish reason the tokens contradict)."""
        self._in_range(row)
        d, info = self.core.check_row(profile, int(row))
        sample = _sample(d)
        sample.info, sample.profile = info, profile
        return sample

    def _in_range(self, row: int) -> None:
        if not 0 <= int(row) < len(self.core):
            raise UsageError(f"row {row} is out of range (the corpus has {len(self.core)} samples)")

    def fetch_range(self, start: int, end: int) -> list[Sample]:
        """Global rows `[start, end)` in one pass."""
        return [_sample(d) for d in self.core.samples(int(start), int(end))]


def _sample(d: dict[str, Any]) -> Sample:
    return Sample(
        d["source"], d["row"], d["local_row"], d["sample_id"], d["category"], d["ids"], d["prompt_len"], d["mask"]
    )


def explain(sample: Sample, profile: _core.Profile) -> dict[str, Any]:
    mask = None if sample.mask is None else sample.mask.tolist()
    sample.info = _core.check_one(profile, sample.ids.tolist(), sample.prompt_len, mask)
    sample.profile = profile
    return sample.info


def segments(sample: Sample) -> list[tuple[int, int, str]]:
    """The core's segments of the sample (`explain` first), as `(start, end, kind)`: consecutive token ranges
    that tile it, of kind header / system / user / tool_declaration / tool / assistant / prefill / thinking /
    response / tool_call / arguments / end_of_turn / trailing / padding / other."""
    return [(start, end, kind) for kind, start, end in sample.info["segments"]]


def excerpt(
    ids: np.ndarray, pos: int, tok: Decoder | None, radius: int = EXCERPT_RADIUS, vocab_size: int | None = None
) -> dict[str, Any]:
    """The ids around `pos` (`ids_before`, `id_at`, `ids_after`) and, with a decoder, their text (`before`,
    `at`, `after`). The token at `pos` is decoded alone, so it can be highlighted exactly."""
    a, b = max(0, pos - radius), min(len(ids), pos + radius + 1)
    at = min(max(pos, 0), max(len(ids) - 1, 0))
    part: dict[str, Any] = {
        "position": pos,
        "ids_before": ids[a:at].tolist(),
        "id_at": int(ids[at]) if len(ids) else None,
        "ids_after": ids[at + 1 : b].tolist(),
    }
    if tok is not None:
        sep = getattr(tok, "separator", "")
        before = decode_text(tok, ids[a:at].tolist(), vocab_size)
        text = decode_text(tok, ids[at : at + 1].tolist(), vocab_size) if len(ids) else ""
        after = decode_text(tok, ids[at + 1 : b].tolist(), vocab_size)
        part["before"] = before + sep if before else before
        part["at"] = text or (f"⟨id {int(ids[at])}⟩" if len(ids) else "")  # ids that decode to nothing stay visible
        part["after"] = sep + after if after else after
    return part


#: `tokscan show` in the terminal: a segment longer than ELIDE_ABOVE tokens shows its first and last ELIDE_KEEP
#: tokens around a count (`… 31,804 tokens …`) unless `--full`; the JSON always has every token.
ELIDE_ABOVE = 400
ELIDE_KEEP = 100


def describe(sample: Sample, tok: Decoder | None, raw: bool = False, elide: bool = False) -> dict[str, Any]:
    """The JSON form of `tokscan show`. Without a tokenizer the text is the ids, special tokens by name (from
    the profile `explain` used) and `decoder` is "ids". With `elide` (the terminal view), long segments keep
    their first and last `ELIDE_KEEP` tokens and say how many were left out (`elided`)."""
    info = sample.info
    dec: Decoder = tok if tok is not None else IdDecoder(sample.profile)
    vocab = vocab_size_of(tok, sample.profile)
    segs = []
    for a, b, kind in segments(sample):
        seg: dict[str, Any] = {"kind": kind, "start": a, "end": b}
        if elide and b - a > ELIDE_ABOVE:
            head, tail = sample.ids[a : a + ELIDE_KEEP].tolist(), sample.ids[b - ELIDE_KEEP : b].tolist()
            seg["elided"] = b - a - 2 * ELIDE_KEEP
            seg["text"] = (
                decode_text(dec, head, vocab) + f" … {seg['elided']:,} tokens … " + decode_text(dec, tail, vocab)
            )
            if raw or tok is None:
                seg["ids"] = [*head, "…", *tail]
        else:
            seg["text"] = decode_text(dec, sample.ids[a:b].tolist(), vocab)
            if raw or tok is None:
                seg["ids"] = sample.ids[a:b].tolist()
        segs.append(seg)
    return {
        "source": sample.source,
        "row": sample.row,
        "sample_id": sample.sample_id,
        "category": sample.category,
        "decoder": "tokenizer" if tok is not None else "ids",
        "lengths": info["lengths"],
        "codes": info["codes"],
        "positions": info["positions"],
        "cut_in": info.get("cut_in"),
        "completion": list(info["completion"]),
        "thinking": list(info["thinking"]),
        "segments": segs,
        "excerpts": {code: excerpt(sample.ids, pos, dec, vocab_size=vocab) for code, pos in info["positions"].items()},
        "loss_mask": mask_summary(sample.mask, info["completion"]),
    }


def mask_summary(mask: np.ndarray | None, completion: list[int] | tuple[int, int]) -> dict[str, Any] | None:
    """Where a sample's loss mask trains, against its completion `[start, end)`: the runs of 1s, where the
    first starts and the last ends relative to the completion's start and end (`start_offset` 3: three tokens
    late; -2: two early, in the prompt), and the mask itself. `None` without a mask."""
    if mask is None:
        return None
    m = np.asarray(mask).astype(bool, copy=False).ravel()
    edges = np.flatnonzero(np.diff(np.concatenate(([False], m, [False])).astype(np.int8)))
    spans = [[int(a), int(b)] for a, b in zip(edges[0::2], edges[1::2], strict=True)]
    cs, ce = int(completion[0]), int(completion[1])
    return {
        "length": int(m.size),
        "trained": int(m.sum()),
        "spans": spans,
        "completion": [cs, ce],
        "start_offset": spans[0][0] - cs if spans else None,
        "end_offset": spans[-1][1] - ce if spans else None,
        "values": m.astype(np.int8).tolist(),
    }


def mask_line(summary: dict[str, Any]) -> str:
    """One line saying where the loss mask trains against the completion (the terminal view of `show`)."""
    cs, ce = summary["completion"]
    if not summary["spans"]:
        return f"loss mask: no token trained ({summary['length']} tokens); completion [{cs}, {ce})"

    def off(n: int, what: str, edge: str, late: str, early: str) -> str:
        if n == 0:
            return f"{what} at the completion's {edge}"
        return f"{what} {abs(n)} token(s) {late if n > 0 else early} the completion's {edge}"

    spans = summary["spans"]
    shown = ", ".join(f"[{a}, {b})" for a, b in spans[:6]) + (f" and {len(spans) - 6} more" if len(spans) > 6 else "")
    return (
        f"loss mask: trains {summary['trained']} of {summary['length']} tokens in {shown}; completion [{cs}, {ce}): "
        f"{off(summary['start_offset'], 'starts', 'start', 'after', 'before')}, "
        f"{off(summary['end_offset'], 'ends', 'end', 'after', 'before')}"
    )


def _window_segments(sample: Sample, dec: Decoder, pos: int, vocab: int | None, with_ids: bool) -> list[dict[str, Any]]:
    """The segments of the excerpt window around `pos`, cut so the token at `pos` is a piece of its own."""
    ids = sample.ids
    a, b = max(0, pos - EXCERPT_RADIUS), min(len(ids), pos + EXCERPT_RADIUS + 1)
    out = []
    for s0, s1, kind in segments(sample):
        lo, hi = max(s0, a), min(s1, b)
        if lo >= hi:
            continue
        cuts = sorted({lo, hi, *(c for c in (pos, pos + 1) if lo < c < hi)})
        for x, y in pairwise(cuts):
            seg: dict[str, Any] = {"kind": kind, "start": x, "end": y}
            seg["text"] = decode_text(dec, ids[x:y].tolist(), vocab)
            if with_ids:
                seg["ids"] = ids[x:y].tolist()
            out.append(seg)
    return out


def _entry(
    sample: Sample, sample_id: Any, category: Any, codes: list[str], pos: int | None, dec: Decoder, vocab: int | None
) -> dict[str, Any]:
    """What every decoded sample carries: who it is, the excerpt at `pos`, its first and last tokens."""
    ids = sample.ids
    return {
        "row": sample.row,
        "sample_id": sample_id,
        "category": category,
        "codes": list(codes),
        "decoder": "ids" if isinstance(dec, IdDecoder) else "tokenizer",
        "position": pos,
        "excerpt": excerpt(ids, pos, dec, vocab_size=vocab) if pos is not None else None,
        "first": decode_text(dec, ids[:EDGE_TOKENS].tolist(), vocab),
        "last": decode_text(dec, ids[-EDGE_TOKENS:].tolist(), vocab),
        "length": len(ids),
    }


#: Tokens of a benchmark match decoded for a `contaminated` sample.
MATCHED_TOKENS = 400

#: Tokens of a completion's start shown for a near-duplicate and its representative.
COMPLETION_TOKENS = 48


def _completion_start(sample: Sample, profile: _core.Profile | None, dec: Decoder, vocab: int | None) -> str:
    """The first tokens of the sample's completion (of the whole sequence without a profile)."""
    start = 0
    if profile is not None:
        start = int((sample.info or explain(sample, profile))["completion"][0])
    return decode_text(dec, sample.ids[start : start + COMPLETION_TOKENS].tolist(), vocab)


def _near_clusters(
    report: Any,
    corpus: Corpus,
    dec: Decoder,
    vocab: int | None,
    per_code: int,
    profile: _core.Profile | None,
    cache: dict[int, Sample],
) -> list[dict[str, Any]]:
    """The largest near-duplicate clusters (`per_code` of them): each one's first member decoded beside its
    representative, the start of both completions."""
    nd = report.data.get("near_duplicates") or {}
    by_row = {f["row"]: f for f in report.flagged}
    out = []
    for c in (nd.get("largest") or [])[:per_code]:
        if not c["members"]:
            continue
        rep_row, row = c["representative"]["row"], c["members"][0]
        for r in (rep_row, row):
            if r not in cache:
                cache[r] = corpus.fetch(r)
        member, rep = cache[row], cache[rep_row]
        codes = by_row[row]["codes"] if row in by_row else ["near_duplicate"]
        entry = _entry(member, member.sample_id, member.category, codes, None, dec, vocab)
        entry["near_duplicate_of"] = c["representative"]
        entry["cluster"] = {
            "size": c["size"],
            "completion": _completion_start(member, profile, dec, vocab),
            "representative_completion": _completion_start(rep, profile, dec, vocab),
        }
        out.append(entry)
    return out


def opened(corpus: Corpus | list[str], columns: Mapping[str, str] | None = None) -> Corpus:
    """`corpus` when it is an open `Corpus` (the one a scan kept), else the corpus of the paths it is."""
    return corpus if isinstance(corpus, Corpus) else Corpus(corpus, columns)


def decode_flagged(
    report: Any,
    paths: list[str] | Corpus,
    tok: Decoder | None,
    per_code: int,
    columns: Mapping[str, str] | None = None,
    profile: _core.Profile | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Up to `per_code` flagged samples per anomaly code, decoded around the anomaly position plus the
    sample's first and last tokens; with `profile`, the excerpt window also comes as coloured segments (as in
    `tokscan show`), the flagged token a segment of its own. Only those samples are read and decoded.

    Without a tokenizer (`tok=None`) the excerpts are ids, special tokens by name when `profile` is given
    (`decoder` is then "ids" and segments carry their `ids`). Ids outside the vocabulary show as `⟨oov N⟩`.
    `paths` is the open corpus the scan read (`report.corpus`), or its paths."""
    corpus = opened(paths, columns)
    dec: Decoder = tok if tok is not None else IdDecoder(profile)
    vocab = vocab_size_of(tok, profile)
    cache: dict[int, Sample] = {}
    out: dict[str, list[dict[str, Any]]] = {}
    clusters = _near_clusters(report, corpus, dec, vocab, per_code, profile, cache)
    if clusters:
        out["near_duplicate"] = clusters
    for f in report.flagged:
        for code in f["codes"]:
            if code == "near_duplicate" and clusters:
                continue  # the largest clusters instead
            entries = out.setdefault(code, [])
            if len(entries) >= per_code:
                continue
            row = f["row"]
            if row not in cache:
                cache[row] = corpus.fetch(row)
            sample = cache[row]
            pos = f["positions"].get(code)
            entry = _entry(sample, f["sample_id"], f.get("category"), f["codes"], pos, dec, vocab)
            if f.get("duplicate_of") is not None:
                entry["duplicate_of"] = f["duplicate_of"]
            if f.get("prompt_of") is not None:
                entry["prompt_of"] = f["prompt_of"]
            if f.get("near_duplicate_of") is not None:
                entry["near_duplicate_of"] = f["near_duplicate_of"]
            if f.get("contamination") is not None:
                entry["contamination"] = f["contamination"]
                a, b = (f["contamination"].get("span") or [0, 0])[:2]
                if b > a:
                    # The text the sample shares with the benchmark item, so a person can judge the match.
                    shown = sample.ids[a : min(b, a + MATCHED_TOKENS)].tolist()
                    more = f" … ({b - a - MATCHED_TOKENS:,} more tokens)" if b - a > MATCHED_TOKENS else ""
                    entry["contamination"] = {**entry["contamination"], "text": decode_text(dec, shown, vocab) + more}
            if pos is not None and profile is not None:
                if not sample.info:
                    explain(sample, profile)
                entry["segments"] = _window_segments(sample, dec, pos, vocab, tok is None)
            entries.append(entry)
    return {code: v for code, v in out.items() if v}
