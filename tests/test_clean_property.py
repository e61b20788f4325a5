"""`clean` as a property (issue 22): random corpora in every format the core writes — hostile JSONL line
endings (`\\r\\n`, blank and whitespace lines, a line holding only `\\x0b`), empty shards, a shard reached by a
symlink from outside the scanned folder — cleaned with random exclusions. The copy holds exactly the kept rows
in order (as the core's reader numbers them, the numbering `scan` reports), re-scans without an error, and the
input is left byte-identical."""

from __future__ import annotations

import gzip
import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokscan
from tokscan import _core
from tokscan.clean import write_copy
from tokscan.forensics import Corpus

import synth

FORMATS = ["parquet", "numpy", "arrow_file", "arrow_stream", "megatron", "jsonl", "jsonl_gz", "jsonl_zst", "llmc"]
LLMC_DELIMITER = 50256
#: What may stand between two JSONL sample lines (the `\x0b` line is a sample of its own: malformed).
SEPARATORS = ["\n", "\r\n", "\n\n", "\n \t\n", "\n\x0b\n", "\n\x0c\n", "\r\n\r\n"]

ids_st = st.lists(st.integers(0, 50000), min_size=0, max_size=6)
shard_st = st.lists(ids_st, min_size=0, max_size=6)


def write_shard(fmt: str, docs: list[list[int]], where: Path, name: str, seps: list[str]) -> Path:
    """One shard of `docs` (sample ids `name-i`) in `fmt`, written with pyarrow / numpy / by hand — never by
    the core's writers."""
    sid = [f"{name}-{i}" for i in range(len(docs))]
    if fmt == "parquet":
        t = pa.table({"input_ids": pa.array(docs, pa.list_(pa.int32())), "sample_id": pa.array(sid, pa.string())})
        p = where / f"{name}.parquet"
        pq.write_table(t, p, row_group_size=max(1, len(docs) // 2), compression="zstd")
        return p
    if fmt == "numpy":
        d = where / name
        d.mkdir()
        lengths = [len(x) for x in docs]
        np.save(d / "tokens.npy", np.array([t for x in docs for t in x], dtype=np.int32))
        np.save(d / "offsets.npy", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        pq.write_table(pa.table({"sample_id": pa.array(sid, pa.string())}), d / "meta.parquet")
        (d / "README.txt").write_text("side file\n")
        return d
    if fmt.startswith("arrow"):
        schema = pa.schema([("input_ids", pa.list_(pa.int64())), ("sample_id", pa.string())])
        p = where / f"{name}.arrow"
        new = pa.ipc.new_stream if fmt == "arrow_stream" else pa.ipc.new_file
        with new(p, schema, options=pa.ipc.IpcWriteOptions(compression="zstd" if len(docs) % 2 else None)) as w:
            for a in range(0, len(docs), 2):
                w.write_batch(pa.record_batch([pa.array(docs[a : a + 2]), pa.array(sid[a : a + 2])], schema=schema))
        return p
    if fmt == "megatron":
        p = where / f"{name}.bin"
        p.write_bytes(np.array([t for x in docs for t in x], dtype=np.int32).tobytes())
        lengths = np.array([len(x) for x in docs], dtype=np.int32)
        synth.write_megatron_index(p.with_suffix(".idx"), np.int32, lengths, np.arange(len(docs) + 1))
        return p
    if fmt.startswith("jsonl"):
        lines = [json.dumps({"input_ids": x, "sample_id": s}) for x, s in zip(docs, sid, strict=True)]
        text = "".join(line + seps[i % len(seps)] for i, line in enumerate(lines)).encode()
        if fmt == "jsonl_gz":
            p = where / f"{name}.jsonl.gz"
            p.write_bytes(gzip.compress(text))
        elif fmt == "jsonl_zst":
            p = where / f"{name}.jsonl.zst"
            with pa.CompressedOutputStream(str(p), "zstd") as f:
                f.write(text)
        else:
            p = where / f"{name}.jsonl"
            p.write_bytes(text)
        return p
    assert fmt == "llmc"
    toks = [t for x in docs for t in (LLMC_DELIMITER, *x)]
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(toks)]
    p = where / f"{name}.bin"
    p.write_bytes(header.tobytes() + np.array(toks, dtype="<u2").tobytes())
    return p


def digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def rows_of(corpus: Corpus) -> list[tuple[str, list[int], str | None, str, list[int] | None]]:
    """(file name, ids, sample id, category, mask) of every row, as the core's reader numbers them."""
    out = []
    for d in corpus.core.samples(0, len(corpus)):
        mask = None if d["mask"] is None else d["mask"].tolist()
        out.append((Path(d["source"]).name, d["ids"].tolist(), d["sample_id"], d["category"], mask))
    return out


@pytest.mark.parametrize("fmt", FORMATS)
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    shards=st.lists(shard_st, min_size=1, max_size=3),
    seps=st.lists(st.sampled_from(SEPARATORS), min_size=1, max_size=4),
    drop_seed=st.integers(0, 2**32 - 1),
    drop_share=st.sampled_from([0.0, 0.3, 0.7, 1.0]),
    outside=st.booleans(),
)
def test_clean_keeps_exactly_the_kept_rows_in_every_format(fmt, shards, seps, drop_seed, drop_share, outside):
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        src, elsewhere = tmp_path / "corpus", tmp_path / "elsewhere"
        (src / "category=web").mkdir(parents=True)
        elsewhere.mkdir()
        for k, docs in enumerate(shards):
            if fmt.startswith("jsonl") and not docs:
                docs = [[7]]  # a JSONL file with no sample line is not an input
            where = src / "category=web" if k % 2 else src  # the copy keeps the hive folder (the category)
            if outside and k == 0 and fmt not in ("numpy", "megatron"):
                target = write_shard(fmt, docs, elsewhere, f"s{k}", seps)
                (where / target.name).symlink_to(target)  # a shard reached by a symlink from outside
            else:
                write_shard(fmt, docs, where, f"s{k}", seps)
        before = digest(tmp_path)
        corpus = Corpus([str(src)])
        rows = rows_of(corpus)
        rng = np.random.default_rng(drop_seed)
        drop = {r for r in range(len(rows)) if rng.random() < drop_share}

        out = tmp_path / "clean"
        files = write_copy(corpus, [str(src)], drop, out)

        assert digest(tmp_path / "corpus") == {
            k[len("corpus/") :]: v for k, v in before.items() if k.startswith("corpus/")
        }
        assert digest(elsewhere) == {k[len("elsewhere/") :]: v for k, v in before.items() if k.startswith("elsewhere/")}
        outputs = [f["output"] for f in files if f["output"] is not None]
        assert len(set(outputs)) == len(outputs)  # no output written twice
        left_out = set()
        for k, f in enumerate(files):
            # Only JSONL, which has no empty file, leaves a copy out: when no kept line is a sample (none kept,
            # or malformed lines alone); every other empty copy is a valid file.
            if f["output"] is None:
                assert fmt.startswith("jsonl") and f["kept"] == 0 and f["omitted"]
                a, b = int(corpus.starts[k]), int(corpus.starts[k + 1])
                assert all(rows[i][1] == [] and rows[i][2] is None for i in range(a, b) if i not in drop)
                left_out.update(range(a, b))
        kept = [r for i, r in enumerate(rows) if i not in drop and i not in left_out]
        assert sum(f["kept"] for f in files) == len(kept)
        if not outputs:
            return
        again = Corpus([str(out)])
        assert rows_of(again) == kept
        if kept:
            report = tokscan.scan(out, profile="plain")
            assert report.n_samples == len(kept)
        else:
            with pytest.raises(tokscan.UsageError, match="no samples"):
                tokscan.scan(out, profile="plain")
        # The core refuses to write an existing output (never twice).
        with pytest.raises(tokscan.UsageError, match="already exists"):
            corpus.core.write_filtered(0, np.ones(corpus.counts[0], dtype=bool), outputs[0])


def test_the_core_writer_checks_its_arguments(tmp_path):
    p = write_shard("parquet", [[1, 2], [3]], tmp_path, "a", ["\n"])
    c = _core.Corpus([str(p)])
    with pytest.raises(tokscan.UsageError, match="keep flags"):
        c.write_filtered(0, np.ones(3, dtype=bool), tmp_path / "x.parquet")
    with pytest.raises(tokscan.UsageError, match="out of range"):
        c.write_filtered(5, np.ones(2, dtype=bool), tmp_path / "x.parquet")
