"""Edges of the Python API a new user hits first: integer sample ids, bad `threads`, a loss mask of the wrong
length, flag masks vs bit indices, and reprs that say what an object holds."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tokscan
from tokscan.forensics import Corpus

import synth


def test_an_integer_id_column_is_found_by_its_integers(tmp_path):
    samples = synth.build_corpus(n_clean=30, seed=2, anomalies_per_code=0)
    path = tmp_path / "ints.parquet"
    ids = [100_000 + i for i in range(len(samples))]
    pq.write_table(pa.table({"input_ids": [s.ids for s in samples], "sample_id": pa.array(ids, pa.int64())}), path)
    corpus = Corpus([str(path)])
    assert corpus.find_id(100_017) == 17 and corpus.find_id("100017") == 17
    assert corpus.core.find(np.int64(100_017).item()) == 17
    assert repr(corpus).startswith(f"<Corpus {len(samples)} samples in 1 input(s): ")
    assert repr(corpus.core) == f"<Corpus {len(samples)} samples in 1 input(s): {path}>"  # the core's own


def test_negative_threads_is_a_usage_error(tmp_path):
    path = synth.write_parquet_full(synth.build_corpus(n_clean=10, seed=1, anomalies_per_code=0), tmp_path / "c")
    for bad in (-1, 1.5, True):
        with pytest.raises(tokscan.UsageError, match="threads"):
            tokscan.scan(path, threads=bad)


def test_a_loss_mask_of_the_wrong_length_is_named_before_its_dtype():
    v = tokscan.Validator("kimi-k2")
    ids = np.arange(10, dtype=np.int64)
    with pytest.raises(tokscan.UsageError, match="loss_mask has 5 values, ids have 10"):
        v.check(ids, np.array([0, 10]), loss_mask=np.ones(5))


def test_code_masks_are_masks_and_reprs_are_short():
    assert all(tokscan.CODE_MASKS[c] == 1 << bit for c, bit in tokscan.CODES.items())
    s = synth.build_corpus(n_clean=4, seed=3, anomalies_per_code=1)
    r = tokscan.Validator("kimi-k2").check_each([np.asarray(x.ids) for x in s])
    for code in r.counts():
        assert any(int(f) & tokscan.CODE_MASKS[code] for f in r.flags)
    text = repr(r)
    assert text.startswith(f"<CheckResult {len(s)} samples, ") and "array" not in text and len(text) < 400
    torch = pytest.importorskip("torch")
    from tokscan.torch import ValidatedDataset

    ds = ValidatedDataset([{"input_ids": torch.tensor(x.ids)} for x in s], profile="kimi-k2")
    assert repr(ds).startswith(f"<ValidatedDataset of {len(s)} samples, on_bad='drop', Validator(")
