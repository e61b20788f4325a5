"""Acting on a scan's findings: the exclusion list (`scan --exclude`) and a cleaned copy of the corpus
(`tokscan clean`). The source is only ever read; the copy has the same layout (Parquet files with the same
schema and codec, Arrow IPC files in the same format and codec, or NumPy corpus directories with the same
dtypes) minus the selected samples, and a
manifest of what was removed."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _core
from .errors import ReportError, UsageError, did_you_mean
from .report import Report

if TYPE_CHECKING:
    from .config import PolicyValue

MANIFEST = "tokscan-clean.json"
NUMPY_ARRAYS = ("tokens.npy", "offsets.npy", "loss_mask.npy")


def selected(
    report: Report,
    fail_on: str | None = None,
    codes: Iterable[str] = (),
    policy: Mapping[str, PolicyValue] | None = None,
) -> list[dict[str, Any]]:
    """The flagged samples to drop: those with any of `codes` when given, else those with a code that fails
    the run under `fail_on` and `policy` (each defaulting to what the scan ran with; the core's decision:
    ignored, tolerated and below-`fail_on` codes are kept, exactly as the exit code treats them)."""
    codes = list(codes)
    unknown = [c for c in codes if c not in report.anomalies]
    if unknown:
        hint = did_you_mean(unknown[0], report.anomalies)
        raise UsageError(f"unknown anomaly code(s): {', '.join(unknown)}{hint} (see `tokscan codes`)")
    if codes:
        want = set(codes)
    else:
        want = set(report.failures(fail_on, policy))
    return [f for f in report.flagged if want.intersection(f["codes"])]


def write_exclusions(entries: list[dict[str, Any]], path: Path) -> str:
    """Writes one line per sample: its sample_id when every selected sample has one, else its global row.
    Returns which of the two it wrote."""
    by_id = bool(entries) and all(f["sample_id"] is not None for f in entries)
    lines = [str(f["sample_id"]) if by_id else str(f["row"]) for f in entries]
    text = "".join(line + "\n" for line in lines)
    if str(path) == "-":
        import sys

        sys.stdout.write(text)
    else:
        path.write_text(text)
    return "sample_id" if by_id else "row"


def _common_root(given: list[str], sources: list[Path]) -> Path:
    """The folder the output directory stands for: the given directory (or the deepest folder holding all the
    given paths), so `clean DIR --out NEW` makes NEW a drop-in replacement for DIR."""
    bases = []
    for p in map(Path, given):
        if p.is_dir():
            bases.append(p.resolve())
        elif p.is_file():
            bases.append(p.resolve().parent)
        else:  # a glob
            bases = [s.parent for s in sources]
            break
    return Path(os.path.commonpath([str(b) for b in bases]))


def _same_inputs(report: Report, inputs: list[tuple[str, str, Any]], counts: list[int]) -> None:
    have = [(str(Path(p).resolve()), int(n)) for (p, _f, _c), n in zip(inputs, counts, strict=True)]
    want = [(str(Path(i["path"]).resolve()), int(i["samples"])) for i in report.data.get("inputs", [])]
    if have != want:
        raise ReportError(
            "the report does not describe these inputs (different files or sample counts): "
            "run `tokscan scan` on the same paths first"
        )


def clean(
    paths: list[str],
    report: Report,
    out: Path,
    *,
    fail_on: str | None = None,
    codes: Iterable[str] = (),
    policy: Mapping[str, PolicyValue] | None = None,
    columns: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Writes the corpus of `paths` without the selected samples under `out`; returns the manifest."""
    from .forensics import Corpus

    codes = list(codes)
    corpus = Corpus(paths, columns)
    _same_inputs(report, corpus.inputs, corpus.counts)
    out = Path(out)
    sources = [Path(p).resolve() for p, _f, _c in corpus.inputs]
    root = _common_root(paths, sources)
    out_abs = out.resolve()
    # Inside a scanned directory the copy would be scanned with it next time; around it, it would mix.
    for s in [*sources, *(Path(p).resolve() for p in paths)]:
        if out_abs == s or s in out_abs.parents or out_abs in s.parents:
            raise UsageError(f"{out}: the output must not overlap the input {s}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out}: exists and is not an empty directory")
    drop = selected(report, fail_on, codes, policy)
    drop_rows = np.array(sorted(f["row"] for f in drop), dtype=np.int64)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for k, (path, fmt, _cat) in enumerate(corpus.inputs):
        start, n = int(corpus.starts[k]), int(corpus.counts[k])
        local = drop_rows[(drop_rows >= start) & (drop_rows < start + n)] - start
        keep = np.ones(n, dtype=bool)
        keep[local] = False
        src = Path(path).resolve()
        dst = out / src.relative_to(root)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "parquet":
            _clean_parquet(src, dst, keep)
        elif fmt == "numpy":
            _clean_numpy(src, dst, keep)
        elif fmt == "arrow":
            _clean_arrow(src, dst, keep)
        elif fmt == "megatron":
            _clean_megatron(src, dst, keep)
        elif fmt == "jsonl":
            _clean_jsonl(src, dst, keep)
        elif fmt == "llmc":
            _clean_llmc(src, dst, keep, corpus, start)
        else:
            raise UsageError(f"{src}: tokscan clean cannot write the {fmt} format")
        files.append({"source": str(src), "output": str(dst), "samples": n, "kept": int(keep.sum())})
    manifest = {
        "tool": {"name": "tokscan", "version": _core.__version__},
        "selection": {"codes": sorted(set(codes))} if codes else {"fail_on": report.judged_by(fail_on, policy)[0]},
        "inputs": files,
        "kept": sum(f["kept"] for f in files),
        "removed": [{k: f[k] for k in ("row", "sample_id", "source", "category", "codes", "severity")} for f in drop],
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _clean_parquet(src: Path, dst: Path, keep: np.ndarray) -> None:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(src)
    meta = pf.metadata
    codec = meta.row_group(0).column(0).compression.lower() if meta.num_row_groups else "zstd"
    with pq.ParquetWriter(dst, pf.schema_arrow, compression=codec) as w:
        start = 0
        for g in range(meta.num_row_groups):
            t = pf.read_row_group(g)
            k = keep[start : start + t.num_rows]
            start += t.num_rows
            w.write_table(t.filter(k) if not k.all() else t, row_group_size=max(t.num_rows, 1))


def ipc_layout(path: Path) -> tuple[bool, str | None]:
    """(stream format?, compression codec or None) of an Arrow IPC file, from its first record batch: a
    compressed buffer starts with its 8-byte uncompressed length, then the LZ4 / ZSTD frame magic."""
    import pyarrow as pa

    with open(path, "rb") as f:
        stream = f.read(6) != b"ARROW1"
        f.seek(0 if stream else 8)
        reader = pa.ipc.MessageReader.open_stream(f)
        for msg in reader:
            if msg.type == "record batch" and msg.body is not None and msg.body.size >= 12:
                magic = msg.body.to_pybytes()[8:12]
                if magic == b"\x04\x22\x4d\x18":
                    return stream, "lz4"
                if magic == b"\x28\xb5\x2f\xfd":
                    return stream, "zstd"
                return stream, None
    return stream, None


def _clean_arrow(src: Path, dst: Path, keep: np.ndarray) -> None:
    """The same IPC format (file or stream), schema (with its metadata, e.g. `datasets` features), codec and
    record-batch boundaries, minus the dropped rows. A `save_to_disk` directory's other files are copied."""
    import pyarrow as pa

    stream, codec = ipc_layout(src)
    source = pa.memory_map(str(src))
    reader = pa.ipc.open_stream(source) if stream else pa.ipc.open_file(source)
    batches = reader if stream else (reader.get_batch(i) for i in range(reader.num_record_batches))
    opts = pa.ipc.IpcWriteOptions(compression=codec)
    with (pa.ipc.new_stream if stream else pa.ipc.new_file)(dst, reader.schema, options=opts) as w:
        start = 0
        for b in batches:
            k = keep[start : start + b.num_rows]
            start += b.num_rows
            w.write_batch(b.filter(pa.array(k)) if not k.all() else b)
    for name in ("dataset_info.json", "state.json"):
        side = src.parent / name
        if side.is_file() and not (dst.parent / name).exists():
            shutil.copy2(side, dst.parent / name)


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


def read_megatron_index(idx: Path) -> tuple[type, np.ndarray, np.ndarray, np.ndarray | None]:
    """(dtype, sequence lengths, document indices, sequence modes or None) of a Megatron `.idx`."""
    raw = np.memmap(idx, mode="r", dtype=np.uint8)
    head = bytes(raw[:34])
    if head[:9] != MEGATRON_MAGIC:
        raise UsageError(f"{idx}: not a Megatron .idx")
    code = head[17]
    s, d = (int.from_bytes(head[18:26], "little"), int.from_bytes(head[26:34], "little"))
    lengths = np.frombuffer(raw, dtype=np.int32, count=s, offset=34)
    docs = np.frombuffer(raw, dtype=np.int64, count=d, offset=34 + 12 * s)
    rest = len(raw) - (34 + 12 * s + 8 * d)
    modes = np.frombuffer(raw, dtype=np.int8, count=s, offset=34 + 12 * s + 8 * d) if rest == s and s else None
    return MEGATRON_DTYPES[code], lengths, docs, modes


def write_megatron_index(
    idx: Path, dtype: type, lengths: np.ndarray, docs: np.ndarray, modes: np.ndarray | None = None
) -> None:
    """Writes an `.idx` exactly as megatron-core's `_IndexWriter` does: magic, version 1, dtype code, counts,
    int32 sequence lengths, int64 byte pointers, int64 document indices (and the int8 modes when multimodal)."""
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


def _clean_megatron(src: Path, dst: Path, keep: np.ndarray) -> None:
    """A valid `.bin` + `.idx` pair holding the kept documents, each with its own sequences and dtype."""
    dtype, lengths, docs, modes = read_megatron_index(src.with_suffix(".idx"))
    starts = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    tokens = np.memmap(src, mode="r", dtype=dtype) if starts[-1] else np.zeros(0, dtype=dtype)
    new_lengths, new_docs, new_modes = [], [0], []
    with open(dst, "wb") as out:
        for d in np.flatnonzero(keep):
            a, b = int(docs[d]), int(docs[d + 1])
            out.write(np.ascontiguousarray(tokens[starts[a] : starts[b]]).tobytes())
            new_lengths.append(lengths[a:b])
            if modes is not None:
                new_modes.append(modes[a:b])
            new_docs.append(new_docs[-1] + (b - a))
    cat = np.concatenate(new_lengths) if new_lengths else np.zeros(0, np.int32)
    kept_modes = (np.concatenate(new_modes) if new_modes else np.zeros(0, np.int8)) if modes is not None else None
    write_megatron_index(dst.with_suffix(".idx"), dtype, cat, np.array(new_docs, dtype=np.int64), kept_modes)


#: llm.c's `dev/data/data_common.py`: a header of 256 little-endian int32 (magic, version, token count).
LLMC_HEADER_INTS = 256
LLMC_DTYPE = {1: "<u2", 2: "<u4"}
#: Samples read through the core at a time.
LLMC_CHUNK = 4096


def _clean_llmc(src: Path, dst: Path, keep: np.ndarray, corpus: Any, start: int) -> None:
    """The shard's header with the new token count, then each kept sample's tokens (its leading delimiter
    included, so every document still starts with one). The samples, split where the core splits them, are
    read through the core chunk by chunk."""
    header = np.fromfile(src, dtype="<i4", count=LLMC_HEADER_INTS)
    dtype = LLMC_DTYPE[int(header[1])]  # the core opened this file, so the version is one of these
    written = 0
    with open(dst, "wb") as out:
        out.write(header.tobytes())
        for a in range(0, len(keep), LLMC_CHUNK):
            b = min(len(keep), a + LLMC_CHUNK)
            if not keep[a:b].any():
                continue
            for s, k in zip(corpus.fetch_range(start + a, start + b), keep[a:b], strict=True):
                if k:
                    ids = np.asarray(s.ids).astype(dtype, copy=False)
                    out.write(ids.tobytes())
                    written += len(ids)
        header[2] = written
        out.seek(0)
        out.write(header.tobytes())


def _jsonl_codec(path: Path) -> str | None:
    name = path.name
    return "gzip" if name.endswith(".gz") else "zstd" if name.endswith((".zst", ".zstd")) else None


def _clean_jsonl(src: Path, dst: Path, keep: np.ndarray) -> None:
    """The same lines, byte for byte, without the dropped samples' lines (a sample is a non-blank line, as the
    scan counts them); a compressed file is written with the same codec."""
    import pyarrow as pa

    codec = _jsonl_codec(src)
    if codec is None:
        data = src.read_bytes()
    else:
        with pa.CompressedInputStream(str(src), codec) as f:
            data = f.read()
    lines = data.split(b"\n")
    out, row = [], 0
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        if line.rstrip(b"\r").strip():
            drop = not keep[row]
            row += 1
            if drop:
                continue
        if not (last and line == b""):
            out.append(line + (b"" if last else b"\n"))
    text = b"".join(out)
    if codec is None:
        dst.write_bytes(text)
    else:
        with pa.CompressedOutputStream(str(dst), codec) as f:
            f.write(text)


def _clean_numpy(src: Path, dst: Path, keep: np.ndarray) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    offsets = np.load(src / "offsets.npy", mmap_mode="r")
    lengths = np.diff(offsets)
    new_offsets = np.zeros(int(keep.sum()) + 1, dtype=offsets.dtype)
    np.cumsum(lengths[keep], out=new_offsets[1:])
    np.save(dst / "offsets.npy", new_offsets)
    # Runs of kept samples are contiguous in the token arrays: copy them run by run.
    edges = np.flatnonzero(np.diff(np.concatenate([[0], keep.astype(np.int8), [0]])))
    runs = list(zip(edges[::2], edges[1::2], strict=True))
    for name in ("tokens.npy", "loss_mask.npy"):
        if not (src / name).is_file():
            continue
        a = np.load(src / name, mmap_mode="r")
        b = np.lib.format.open_memmap(dst / name, mode="w+", dtype=a.dtype, shape=(int(new_offsets[-1]),))
        at = 0
        for s, e in runs:
            lo, hi = int(offsets[s]), int(offsets[e])
            b[at : at + hi - lo] = a[lo:hi]
            at += hi - lo
        b.flush()
        del b
    if (src / "meta.parquet").is_file():
        import pyarrow.parquet as pq

        meta = pq.read_table(src / "meta.parquet")
        pq.write_table(meta.filter(keep), dst / "meta.parquet")
    for f in src.iterdir():
        if f.is_file() and f.name not in (*NUMPY_ARRAYS, "meta.parquet"):
            shutil.copy2(f, dst / f.name)
