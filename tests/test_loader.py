"""Loader integrations: HF datasets filter/annotate and the PyTorch ValidatedDataset, against the verdicts of
a scan of the same samples."""

from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest

import tokscan
from tokscan.validate import CORPUS_WIDE_CODES, REFERENCE_CODES

ERRORS = (
    {c for c, (sev, _d) in tokscan.CODE_INFO.items() if sev == "error"} - set(CORPUS_WIDE_CODES) - set(REFERENCE_CODES)
)


@pytest.fixture(scope="module")
def good_rows(layouts) -> set[int]:
    """Rows with no per-sample error in a scan of the ids + loss-mask layout."""
    report = tokscan.scan(layouts["parquet_full"], profile="kimi-k2")
    bad = {f["row"] for f in report.flagged if ERRORS.intersection(f["codes"])}
    assert bad
    return set(range(report.n_samples)) - bad


def _hf_dataset(samples, labels: bool = False):
    datasets = pytest.importorskip("datasets")
    cols = {"row": list(range(len(samples))), "input_ids": [s.ids for s in samples]}
    if labels:
        cols["labels"] = [[t if m else -100 for t, m in zip(s.ids, s.mask(), strict=True)] for s in samples]
    else:
        cols["loss_mask"] = [s.mask() for s in samples]
    return datasets.Dataset.from_dict(cols)


@pytest.mark.parametrize("labels", [False, True], ids=["loss_mask", "labels"])
@pytest.mark.parametrize("fmt", [None, "arrow", "numpy"])
def test_hf_filter_keeps_exactly_the_clean_samples(samples, good_rows, labels, fmt):
    ds = _hf_dataset(samples, labels)
    if fmt is not None:
        ds = ds.with_format(fmt)
    kept = ds.filter(tokscan.hf_filter(profile="kimi-k2"), batched=True, batch_size=64)
    rows = kept.with_format(None)["row"]
    assert set(rows) == good_rows


def test_hf_annotate_adds_the_flags_column(samples, layouts):
    ds = _hf_dataset(samples).map(tokscan.hf_annotate(profile="kimi-k2"), batched=True, batch_size=50)
    flags = np.array(ds["tokscan_flags"], dtype=np.uint64)
    report = tokscan.scan(layouts["parquet_full"], profile="kimi-k2")
    want = np.zeros(len(samples), dtype=np.uint64)
    for f in report.flagged:
        for c in f["codes"]:
            if c not in CORPUS_WIDE_CODES:
                want[f["row"]] |= np.uint64(1 << tokscan.CODES[c])
    np.testing.assert_array_equal(flags, want)


def test_hf_functions_pickle_for_fingerprints_and_workers():
    f = tokscan.hf_filter(profile="kimi-k2", policy={"truncated": "ignore"})
    g = pickle.loads(pickle.dumps(f))
    assert g.validator.fail_mask == f.validator.fail_mask
    with pytest.raises(tokscan.UsageError, match="no 'tokens' column"):
        tokscan.hf_filter(column="tokens")({"input_ids": [[1]]})


class MapStyle:
    def __init__(self, samples, torch):
        self.samples, self.torch = samples, torch

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        s = self.samples[i]
        t = self.torch
        return {"row": i, "input_ids": t.tensor(s.ids), "loss_mask": t.tensor(s.mask(), dtype=t.uint8)}


def test_validated_dataset_drops_bad_samples_with_two_workers(samples, good_rows, caplog):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from tokscan.torch import ValidatedDataset

    ds = ValidatedDataset(MapStyle(samples, torch), profile="kimi-k2", on_bad="drop", shuffle=True, seed=3)
    # Use the validator in this process first (with a thread pool): forked workers must not deadlock on it.
    ds.validator = tokscan.Validator("kimi-k2", threads=2)
    ids = np.concatenate([np.asarray(s.ids) for s in samples])
    offsets = np.concatenate([[0], np.cumsum([len(s.ids) for s in samples])])
    ds.validator.check(ids, offsets)  # hundreds of rows: the pool is built
    loader = DataLoader(ds, batch_size=None, num_workers=2, timeout=120, multiprocessing_context="fork")
    rows = [int(item["row"]) for item in loader]
    assert sorted(rows) == sorted(good_rows)  # every clean sample exactly once, no bad one
    assert rows != sorted(rows)  # shuffled
    # In-process: the counters say what was dropped.
    with caplog.at_level(logging.WARNING, logger="tokscan"):
        n = sum(1 for _ in ds)
    assert n == len(good_rows)
    assert ds.stats.seen == len(samples) and ds.stats.bad == len(samples) - len(good_rows)
    assert sum(ds.stats.codes.values()) >= ds.stats.bad
    assert "dropped" in caplog.text


def test_validated_dataset_raise_warn_and_iterable_sources(samples, good_rows):
    torch = pytest.importorskip("torch")
    from torch.utils.data import IterableDataset

    from tokscan.torch import BadSampleError, ValidatedDataset

    src = MapStyle(samples, torch)
    with pytest.raises(BadSampleError, match="sample "):
        list(ValidatedDataset(src, on_bad="raise"))
    with pytest.warns(UserWarning, match="tokscan: sample"):
        assert len(list(ValidatedDataset(src, on_bad="warn"))) == len(samples)

    class Stream(IterableDataset):
        def __iter__(self):
            for i, s in enumerate(samples):
                yield {
                    "row": i,
                    "input_ids": s.ids,
                    "labels": [t if m else -100 for t, m in zip(s.ids, s.mask(), strict=True)],
                }

    rows = {item["row"] for item in ValidatedDataset(Stream(), profile="kimi-k2")}
    assert rows == good_rows
    with pytest.raises(tokscan.UsageError, match="on_bad"):
        ValidatedDataset(src, on_bad="skip")
