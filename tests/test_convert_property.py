"""`convert` as a property: random corpora (a prompt stored apart or not, a loss mask or not, sample ids or not,
several categories, ids up to int64) written by pyarrow, converted by the core to Parquet and to NumPy. The copy
reads back (through the scan's reader) as exactly the samples written — ids, mask, sample ids, categories — in
order, the NumPy ids in the narrowest type that holds them; the input is left byte-identical, and a failed
conversion leaves nothing behind."""

from __future__ import annotations

import hashlib
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
from tokscan.convert import convert

sample_st = st.fixed_dictionaries(
    {
        "prompt": st.lists(st.integers(0, 2**40), max_size=5),
        "output": st.lists(st.integers(0, 2**40), max_size=5),
        "mask_bits": st.integers(0, 2**10 - 1),
        "category": st.sampled_from(["B1_glaive", "B2_code", "chat"]),
    }
)
corpus_st = st.tuples(
    st.lists(sample_st, min_size=1, max_size=12),
    st.booleans(),  # prompt stored apart
    st.booleans(),  # loss mask
    st.booleans(),  # sample ids
    st.booleans(),  # ids fit int32
)


def write_input(where: Path, samples: list[dict], split: bool, masked: bool, ids: bool, small: bool) -> Path:
    """The corpus as a Parquet file written by pyarrow (never by the core)."""
    for s in samples:
        if small:
            s["prompt"] = [t % 2**31 for t in s["prompt"]]
            s["output"] = [t % 2**31 for t in s["output"]]
        n = len(s["prompt"]) + len(s["output"])
        s["mask"] = [(s["mask_bits"] >> (i % 10)) & 1 for i in range(n)]
    cols: dict[str, pa.Array] = {"category": pa.array([s["category"] for s in samples])}
    if ids:
        cols["sample_id"] = pa.array([f"s-{i}" for i in range(len(samples))])
    if split:
        cols["prompt_ids"] = pa.array([s["prompt"] for s in samples], pa.list_(pa.int64()))
        cols["output_ids"] = pa.array([s["output"] for s in samples], pa.list_(pa.int64()))
    else:
        cols["input_ids"] = pa.array([s["prompt"] + s["output"] for s in samples], pa.list_(pa.int64()))
    if masked:
        cols["loss_mask"] = pa.array([s["mask"] for s in samples], pa.list_(pa.uint8()))
    path = where / "in.parquet"
    pq.write_table(pa.table(cols), path, row_group_size=5)
    return path


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpus_st, st.sampled_from(["parquet", "numpy"]))
def test_converted_corpus_reads_back_as_the_samples_written(case, to):
    samples, split, masked, ids, small = case
    with tempfile.TemporaryDirectory() as tmp:
        src = write_input(Path(tmp), samples, split, masked, ids, small)
        digest = hashlib.sha256(src.read_bytes()).hexdigest()
        out = Path(tmp) / "out"
        calls: list[tuple[int, int]] = []
        result = convert([str(src)], to, out, progress=lambda done, n: calls.append((done, n)))
        n_tokens = sum(len(s["prompt"]) + len(s["output"]) for s in samples)
        assert (result["samples"], result["tokens"]) == (len(samples), n_tokens)
        assert calls and calls[-1] == (len(samples), len(samples))
        back = _core.Corpus([str(out)]).samples(0, len(samples))
        assert len(back) == len(samples)
        for i, (s, b) in enumerate(zip(samples, back, strict=True)):
            assert list(b["ids"]) == s["prompt"] + s["output"], i
            assert b["category"] == s["category"]
            assert b["sample_id"] == (f"s-{i}" if ids else None)
            if masked:
                assert list(b["mask"]) == s["mask"]
            else:
                assert b["mask"] is None
            if to == "parquet" and split:
                assert b["prompt_len"] == len(s["prompt"])
        if to == "numpy":
            tokens = np.load(out / "tokens.npy")
            widest = max((t for s in samples for t in s["prompt"] + s["output"]), default=0)
            assert tokens.dtype == (np.int32 if widest < 2**31 else np.int64)
            assert sorted(p.name for p in out.iterdir()) == sorted(
                ["tokens.npy", "offsets.npy", "meta.parquet", *(["loss_mask.npy"] if masked else [])]
            )
        assert hashlib.sha256(src.read_bytes()).hexdigest() == digest


def test_numpy_ids_take_the_narrowest_type(tmp_path):
    for big, want in ((2**31 - 1, np.int32), (2**31, np.int64)):
        src = tmp_path / f"in-{big}.parquet"
        pq.write_table(pa.table({"input_ids": pa.array([[1, big], [3]], pa.list_(pa.int64()))}), src)
        out = tmp_path / f"out-{big}"
        convert([str(src)], "numpy", out)
        tokens = np.load(out / "tokens.npy")
        assert tokens.dtype == want and tokens.tolist() == [1, big, 3]
        assert np.load(out / "offsets.npy").tolist() == [0, 2, 3]


def test_a_failed_conversion_leaves_nothing_behind(tmp_path):
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"input_ids": pa.array([[1, 2], [3]], pa.list_(pa.int64()))}), src)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(tokscan.UsageError, match="not an empty directory"):
        convert([str(src)], "numpy", busy)
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]
    # A shard whose second row group does not decode: the error names it, and what was written is removed.
    bad = tmp_path / "bad.parquet"
    rng = np.random.default_rng(0)
    rows = [rng.integers(0, 50_000, 3000).tolist() for _ in range(4)]
    pq.write_table(pa.table({"input_ids": pa.array(rows, pa.list_(pa.int64()))}), bad, row_group_size=2)
    data = bytearray(bad.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little")
    body_end = len(data) - 8 - footer
    for k in range(body_end * 3 // 4, body_end * 3 // 4 + 64):
        data[k] ^= 0x5A
    bad.write_bytes(bytes(data))
    for out in (tmp_path / "new", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        with pytest.raises(tokscan.InputError, match=r"bad\.parquet"):
            convert([str(bad)], "parquet", out)
        assert (not out.exists()) if out.name == "new" else list(out.iterdir()) == []
