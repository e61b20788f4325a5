"""Synthetic corpora for the test-suite and the benches: the seeded Kimi-K2.5 samples of `tokscan.demo_corpus`
(re-exported here; `tokscan demo` ships that generator) written in every supported layout: Parquet `input_ids` +
`loss_mask`, Parquet `prompt_ids` + `output_ids`, NumPy tokens + offsets, Arrow IPC file and stream formats,
generator JSONL.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from tokscan.demo_corpus import (
    CATEGORIES,
    IM_ASSISTANT,
    IM_END,
    IM_MIDDLE,
    PAD,
    SECTION,
    UNTHINK,
    Generator,
    Sample,
    build_corpus,
    shard_bounds,
    write_parquet_full,
    write_parquet_shards,
)

__all__ = [
    "CATEGORIES",
    "IM_ASSISTANT",
    "IM_END",
    "IM_MIDDLE",
    "LAYOUTS",
    "MASK_ONLY",
    "PAD",
    "SECTION",
    "UNTHINK",
    "Generator",
    "Sample",
    "build_corpus",
    "expected_in",
    "jsonl_record",
    "labels",
    "with_repeats",
    "write_arrow_file",
    "write_arrow_stream",
    "write_jsonl",
    "write_megatron_index",
    "write_numpy",
    "write_parquet_full",
    "write_parquet_pages",
    "write_parquet_split",
]

#: Anomalies that only a loss mask can show.
MASK_ONLY = frozenset({"loss_mask_misaligned"})


def expected_in(s: Sample, with_mask: bool) -> set[str]:
    """The codes `s` must be flagged with in a layout with (or without) a loss mask."""
    return set(s.expected) if with_mask else s.expected - MASK_ONLY


def write_parquet_split(samples: list[Sample], out: Path, n_shards: int = 2, row_group_size: int = 100) -> Path:
    """`prompt_ids` + `output_ids` (SGLang capture style), int64 large lists."""
    return write_parquet_shards(
        samples,
        out,
        n_shards,
        row_group_size,
        "capture",
        lambda part: {
            "prompt_ids": pa.array([s.prompt for s in part], type=pa.large_list(pa.int64())),
            "output_ids": pa.array([s.completion for s in part], type=pa.large_list(pa.int64())),
        },
    )


def write_parquet_pages(samples: list[Sample], out: Path, v2: bool) -> Path:
    """`input_ids` + `loss_mask` as pyarrow writes them with page options users set: many small pages (rows
    across pages), data pages v2 with plain `int64` ids and a boolean mask, or v1 pages whose dictionary
    overflows so that a column chunk goes on in plain pages (`uint8` mask)."""
    out.mkdir(parents=True, exist_ok=True)
    for k, (a, b) in enumerate(shard_bounds(len(samples), 2)):
        part = samples[a:b]
        ids = pa.array([s.ids for s in part], type=pa.large_list(pa.int64()) if v2 else pa.list_(pa.int32()))
        mask = [s.mask() for s in part]
        table = pa.table(
            {
                "sample_id": [s.sample_id for s in part],
                "category": [s.category for s in part],
                "input_ids": ids,
                "loss_mask": pa.array([[m != 0 for m in x] for x in mask], type=pa.list_(pa.bool_()))
                if v2
                else pa.array(mask, type=pa.list_(pa.uint8())),
            }
        )
        options = (
            {"data_page_version": "2.0", "use_dictionary": False, "compression": "snappy"}
            if v2
            else {"dictionary_pagesize_limit": 512, "compression": "none"}
        )
        pq.write_table(
            table,
            out / f"pages-{k:03d}.parquet",
            row_group_size=70,
            data_page_size=2048,
            write_batch_size=128,
            **options,
        )
    return out


def write_numpy(samples: list[Sample], out: Path, with_mask: bool = False, dtype: str = "int32") -> Path:
    """`tokens.npy` + `offsets.npy` (+ `loss_mask.npy`) + `meta.parquet`."""
    out.mkdir(parents=True, exist_ok=True)
    lengths = np.array([len(s.ids) for s in samples], dtype=np.int64)
    offsets = np.zeros(len(samples) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.fromiter((t for s in samples for t in s.ids), dtype=np.int64, count=int(offsets[-1]))
    np.save(out / "tokens.npy", tokens.astype(dtype))
    np.save(out / "offsets.npy", offsets)
    if with_mask:
        mask = np.fromiter((m for s in samples for m in s.mask()), dtype=np.uint8, count=int(offsets[-1]))
        np.save(out / "loss_mask.npy", mask)
    meta = pa.table({"sample_id": [s.sample_id for s in samples], "category": [s.category for s in samples]})
    pq.write_table(meta, out / "meta.parquet")
    return out


def labels(s: Sample) -> list[int]:
    """Hugging Face `labels`: the ids where the mask is 1, -100 elsewhere."""
    return [t if m else -100 for t, m in zip(s.ids, s.mask(), strict=True)]


def _ipc_shards(samples, out: Path, n_shards: int, rows_per_batch: int, stem: str, stream: bool, codec, columns):
    out.mkdir(parents=True, exist_ok=True)
    for k, (a, b) in enumerate(shard_bounds(len(samples), n_shards)):
        part = samples[a:b]
        table = pa.table(
            {"sample_id": [s.sample_id for s in part], "category": [s.category for s in part], **columns(part)}
        )
        opts = ipc.IpcWriteOptions(compression=codec)
        path = out / f"{stem}-{k:05d}.arrow"
        with (ipc.new_stream if stream else ipc.new_file)(path, table.schema, options=opts) as w:
            for batch in table.to_batches(max_chunksize=rows_per_batch):
                w.write_batch(batch)
    return out


def write_arrow_file(samples: list[Sample], out: Path, n_shards: int = 2, rows_per_batch: int = 64) -> Path:
    """Arrow IPC file format (Feather v2), zstd: `input_ids` int32 + `loss_mask` int8."""
    return _ipc_shards(
        samples,
        out,
        n_shards,
        rows_per_batch,
        "part",
        False,
        "zstd",
        lambda part: {
            "input_ids": pa.array([s.ids for s in part], type=pa.list_(pa.int32())),
            "loss_mask": pa.array([s.mask() for s in part], type=pa.list_(pa.int8())),
        },
    )


def write_arrow_stream(samples: list[Sample], out: Path, n_shards: int = 3, rows_per_batch: int = 100) -> Path:
    """Arrow IPC stream format, lz4, as a trainer's `datasets.map` leaves it: `input_ids` and `labels` (-100 where
    the loss is masked) int64, each row a batch of one (`[[...]]`)."""
    return _ipc_shards(
        samples,
        out,
        n_shards,
        rows_per_batch,
        "data",
        True,
        "lz4",
        lambda part: {
            "input_ids": pa.array([[s.ids] for s in part], type=pa.list_(pa.list_(pa.int64()))),
            "labels": pa.array([[labels(s)] for s in part], type=pa.list_(pa.list_(pa.int64()))),
        },
    )


def jsonl_record(s: Sample, style: str = "sglang") -> dict:
    """One generator output line: SGLang (`prompt_ids`, `output_ids`, `meta_info`) or vLLM (`prompt_token_ids`,
    `outputs[0].token_ids`, `finish_reason`). The finish reason says `length` exactly when the sample was cut."""
    finish = "length" if "truncated" in s.expected else "stop"
    if style == "vllm":
        return {
            "request_id": s.sample_id,
            "id": s.sample_id,
            "category": s.category,
            "prompt_token_ids": s.prompt,
            "outputs": [{"index": 0, "token_ids": s.completion, "finish_reason": finish}],
        }
    return {
        "id": s.sample_id,
        "category": s.category,
        "prompt_ids": s.prompt,
        "output_ids": s.completion,
        "meta_info": {
            "finish_reason": {"type": finish} if finish == "length" else {"type": "stop", "matched": IM_END},
            "prompt_tokens": len(s.prompt),
            "completion_tokens": len(s.completion),
        },
    }


def write_jsonl(
    samples: list[Sample], out: Path, n_shards: int = 2, style: str = "sglang", compression: str | None = None
) -> Path:
    """Generator outputs as JSONL shards (`.jsonl`, `.jsonl.gz` or `.jsonl.zst`)."""
    out.mkdir(parents=True, exist_ok=True)
    suffix = {None: "", "gzip": ".gz", "zstd": ".zst"}[compression]
    for k, (a, b) in enumerate(shard_bounds(len(samples), n_shards)):
        text = "".join(json.dumps(jsonl_record(s, style)) + "\n" for s in samples[a:b]).encode()
        path = out / f"gen-{k:03d}.jsonl{suffix}"
        if compression is None:
            path.write_bytes(text)
        else:
            with pa.CompressedOutputStream(str(path), compression) as f:
                f.write(text)
    return out


#: Layout name -> (writer, has a loss mask).
LAYOUTS = {
    "parquet_full": (write_parquet_full, True),
    "parquet_split": (write_parquet_split, False),
    "parquet_v2_pages": (lambda s, o: write_parquet_pages(s, o, v2=True), True),
    "parquet_dict_fallback": (lambda s, o: write_parquet_pages(s, o, v2=False), True),
    "numpy": (write_numpy, False),
    "numpy_mask": (lambda s, o: write_numpy(s, o, with_mask=True, dtype="uint32"), True),
    "arrow_file": (write_arrow_file, True),
    "arrow_stream": (write_arrow_stream, True),
    "jsonl": (write_jsonl, False),
    "jsonl_vllm_zst": (lambda s, o: write_jsonl(s, o, n_shards=3, style="vllm", compression="zstd"), False),
}


MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
#: megatron-core's `DType` codes.
MEGATRON_DTYPES = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}


def write_megatron_index(
    idx: Path, dtype: type, lengths: np.ndarray, docs: np.ndarray, modes: np.ndarray | None = None
) -> None:
    """Writes an `.idx` exactly as megatron-core's `_IndexWriter` does (a fixture writer, independent of the
    core's): magic, version 1, dtype code, counts, int32 sequence lengths, int64 byte pointers, int64 document
    indices (and the int8 modes when multimodal)."""
    code = next(c for c, t in MEGATRON_DTYPES.items() if np.dtype(t) == np.dtype(dtype))
    lengths = np.asarray(lengths, dtype=np.int32)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths):
        np.cumsum(lengths[:-1].astype(np.int64) * np.dtype(dtype).itemsize, out=pointers[1:])
    with open(idx, "wb") as f:
        f.write(MEGATRON_MAGIC)
        f.write((1).to_bytes(8, "little"))
        f.write(bytes([code]))
        f.write(len(lengths).to_bytes(8, "little"))
        f.write(len(docs).to_bytes(8, "little"))
        f.write(lengths.tobytes())
        f.write(pointers.tobytes())
        f.write(np.asarray(docs, dtype=np.int64).tobytes())
        if modes is not None:
            f.write(np.asarray(modes, dtype=np.int8).tobytes())


def with_repeats(seed: int, same_ids: int = 0) -> list[Sample]:
    """A corpus (`build_corpus(n_clean=300, seed)`) followed by samples that repeat its first ones, so that
    they meet only across units, tasks or key buckets: 40 exact copies under new ids, `same_ids` copies under
    their own ids (`sample_id_duplicate`), and prompts of the first samples answered again with new completions
    or filed under the next category (`prompt_duplicate`, `prompt_cross_category`)."""
    import dataclasses

    samples = build_corpus(n_clean=300, seed=seed, anomalies_per_code=2)
    copies = [dataclasses.replace(s, sample_id=f"copy-{s.sample_id}", expected=set()) for s in samples[:40]]
    same_id = [dataclasses.replace(s, expected=set()) for s in samples[60 : 60 + same_ids]]
    g = Generator(seed + 1)
    regen = [
        dataclasses.replace(
            g.clean(f"regen-{s.sample_id}", s.category),
            prompt=list(s.prompt),
            category=s.category if i % 3 else CATEGORIES[(CATEGORIES.index(s.category) + 1) % len(CATEGORIES)],
        )
        for i, s in enumerate(samples[40:52])
        if s.prompt
    ]
    return samples + copies + same_id + regen


def with_near_copies(seed: int = 9) -> list[Sample]:
    """1,800 clean samples and 120 planted after their sources: near-copies (scattered edits of 1–5 %, two
    sentences swapped, a changed number) and hard negatives (one shared 40-token template, then other content);
    `sample_id` `near000`…`near119`, the kind being `i % 4` in that order."""
    g = Generator(seed)
    rng = np.random.default_rng(seed)
    cats = CATEGORIES
    out = [g.clean(f"s{i:05d}", cats[i % len(cats)]) for i in range(1800)]
    template = g.text(40)

    def variant(src: Sample, sid: str, completion: list[int]) -> Sample:
        return dataclasses.replace(src, sample_id=sid, prompt=g.prompt(), completion=completion)

    for i, k in enumerate(rng.choice(1500, size=120, replace=False).tolist()):
        src = out[k]
        body = list(src.completion[:-1])
        kind = i % 4
        if kind == 0:  # scattered edits, 1–5 % of the tokens
            for j in rng.choice(len(body), size=max(1, int(len(body) * rng.uniform(0.01, 0.05))), replace=False):
                body[j] = int(rng.integers(1000, 160000))
        elif kind == 1:  # two sentences swapped
            q = len(body) // 4
            body = body[:q] + body[2 * q : 3 * q] + body[q : 2 * q] + body[3 * q :]
        elif kind == 2:  # a changed number
            body[len(body) // 2] = int(rng.integers(1000, 160000))
        else:  # hard negative: the same 40-token template as the other negatives, then other content
            body = template + g.text(len(body))
        out.insert(int(rng.integers(k + 1, len(out) + 1)), variant(src, f"near{i:03d}", [*body, IM_END]))
    return out
