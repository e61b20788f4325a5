"""`tokscan convert`: any readable corpus (every format the scan reads, with the same column overrides) written
as Parquet or as a NumPy corpus directory, through `tokscan._core.Corpus` in chunks of samples. Ids, the loss
mask, sample ids and categories are kept; a prompt stored apart stays apart in Parquet (`prompt_ids` +
`output_ids`) and is joined to the completion in NumPy (which has one sequence per sample)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from . import _core
from .errors import UsageError
from .outputs import input_paths, refuse_overlap, utf8_paths

CHUNK = 4096


def _id_type(max_id: int, min_id: int) -> Any:
    if min_id >= 0 and max_id < 2**31:
        return np.int32
    return np.int64


def convert(
    paths: list[str],
    to: str,
    out: Path,
    columns: Mapping[str, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Writes the corpus of `paths` as `to` ("parquet" or "numpy") into the new directory `out`."""
    if to not in ("parquet", "numpy"):
        raise UsageError(f"--to must be parquet or numpy, not {to!r}")
    out = Path(out)
    refuse_overlap(out, "--out", input_paths(paths))
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out}: exists and is not an empty directory")
    corpus = _core.Corpus(utf8_paths(paths), dict(columns or {}))
    n = len(corpus)
    if n == 0:
        raise UsageError("no samples found: nothing to convert")
    out.mkdir(parents=True, exist_ok=True)
    writer = _ParquetOut(out) if to == "parquet" else _NumpyOut(out)
    done = 0
    try:
        for start in range(0, n, CHUNK):
            chunk = corpus.samples(start, min(n, start + CHUNK))
            writer.add(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, n)
        writer.close()
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    return {"samples": done, "tokens": writer.tokens, "format": to, "output": str(out)}


class _ParquetOut:
    """One Parquet file, a row group per chunk; the columns follow the first chunk's shape."""

    def __init__(self, out: Path):
        self.path = out / "part-00000.parquet"
        self.writer: Any = None
        self.tokens = 0

    def add(self, chunk: list[dict[str, Any]]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.writer is None:
            # The first chunk decides the columns (a corpus mixing layouts is written in the first one's).
            self.split = chunk[0]["prompt_len"] is not None
            self.masked = chunk[0]["mask"] is not None
        cols: dict[str, Any] = {
            "sample_id": pa.array([s["sample_id"] for s in chunk], type=pa.string()),
            "category": pa.array([s["category"] for s in chunk], type=pa.string()),
        }
        if self.split:
            cut = [s["prompt_len"] or 0 for s in chunk]
            cols["prompt_ids"] = _lists([s["ids"][:c] for s, c in zip(chunk, cut, strict=True)])
            cols["output_ids"] = _lists([s["ids"][c:] for s, c in zip(chunk, cut, strict=True)])
        else:
            cols["input_ids"] = _lists([s["ids"] for s in chunk])
        if self.masked:
            masks = [np.ones(len(s["ids"]), np.uint8) if s["mask"] is None else s["mask"] for s in chunk]
            cols["loss_mask"] = _lists(masks, pa.uint8())
        self.tokens += sum(len(s["ids"]) for s in chunk)
        table = pa.table(cols)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, table.schema, compression="zstd")
        self.writer.write_table(table, row_group_size=len(chunk))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _lists(rows: list[np.ndarray], typ: Any = None) -> Any:
    import pyarrow as pa

    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    values = pa.array(flat, type=typ or pa.int64())
    return pa.LargeListArray.from_arrays(pa.array(offsets), values)


class _NumpyOut:
    """`tokens.npy` (int64 spooled to a raw file, then written with the narrowest type that holds every id),
    `offsets.npy`, `loss_mask.npy` (when the corpus has a mask) and `meta.parquet`."""

    def __init__(self, out: Path):
        self.out = out
        self.raw = tempfile.TemporaryFile(dir=out)
        self.mask_raw = tempfile.TemporaryFile(dir=out)
        self.lengths: list[int] = []
        self.ids: list[str | None] = []
        self.cats: list[str] = []
        self.has_mask: bool | None = None
        self.tokens = 0
        self.lo, self.hi = 0, 0

    def add(self, chunk: list[dict[str, Any]]) -> None:
        for s in chunk:
            ids = np.asarray(s["ids"], dtype=np.int64)
            self.raw.write(ids.tobytes())
            if len(ids):
                self.lo, self.hi = min(self.lo, int(ids.min())), max(self.hi, int(ids.max()))
            if self.has_mask is None:
                self.has_mask = s["mask"] is not None
            if self.has_mask:
                m = np.zeros(len(ids), np.uint8) if s["mask"] is None else np.asarray(s["mask"], np.uint8)
                self.mask_raw.write(m[: len(ids)].tobytes() + bytes(max(0, len(ids) - len(m))))
            self.lengths.append(len(ids))
            self.ids.append(s["sample_id"])
            self.cats.append(s["category"])
            self.tokens += len(ids)

    def close(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        offsets = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=offsets[1:])
        np.save(self.out / "offsets.npy", offsets)
        dtype = _id_type(self.hi, self.lo)
        self._spill(self.raw, "tokens.npy", np.int64, dtype)
        if self.has_mask:
            self._spill(self.mask_raw, "loss_mask.npy", np.uint8, np.uint8)
        meta: dict[str, Any] = {"category": self.cats}
        if any(i is not None for i in self.ids):
            meta = {"sample_id": self.ids, **meta}
        pq.write_table(pa.table(meta), self.out / "meta.parquet")

    def _spill(self, raw: Any, name: str, src: Any, dst: Any) -> None:
        raw.flush()
        count = raw.seek(0, os.SEEK_END) // np.dtype(src).itemsize
        raw.seek(0)
        arr = np.lib.format.open_memmap(self.out / name, mode="w+", dtype=dst, shape=(count,))
        at = 0
        while at < count:
            block = np.frombuffer(raw.read(8 << 20), dtype=src)
            arr[at : at + len(block)] = block
            at += len(block)
        arr.flush()
        del arr
        raw.close()
