"""Edges of the Python API a new user hits first: integer sample ids, bad `threads`, a loss mask of the wrong
length, flag masks vs bit indices, and reprs that say what an object holds."""

from __future__ import annotations

import json

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


def test_ids_keep_their_column_type_end_to_end(tmp_path):
    """An int64 id column gives ints in samples, in the JSON report (flagged samples and what they repeat),
    in the exclusion list and in a converted copy; a string column stays strings; JSONL integers stay ints."""
    import json

    from conftest import run_cli

    samples = synth.build_corpus(n_clean=40, seed=5, anomalies_per_code=1)
    ints = tmp_path / "ints.parquet"
    ids = [100_000 + i for i in range(len(samples))]
    ids[-1] = ids[0]  # a sample_id_duplicate
    pq.write_table(pa.table({"input_ids": [s.ids for s in samples], "sample_id": pa.array(ids, pa.int64())}), ints)
    assert Corpus([str(ints)]).fetch(3).sample_id == 100_003
    report = tokscan.scan(ints)
    assert report.flagged and all(type(f["sample_id"]) is int for f in report.flagged)
    dup = next(f for f in report.flagged if "sample_id_duplicate" in f["codes"])
    assert dup["duplicate_of"]["sample_id"] == 100_000 and dup["sample_id"] == 100_000
    assert json.loads(report.to_json())["flagged"][0]["sample_id"] == report.flagged[0]["sample_id"]
    # The copy keeps an int64 column; the exclusion list is the ids' decimal text.
    out = tmp_path / "copy"
    proc = run_cli("convert", str(ints), "--to", "parquet", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(out / "part-00000.parquet").schema.field("sample_id").type == pa.int64()
    key = [(f["row"], f["sample_id"], f["codes"]) for f in report.flagged]
    assert [(f["row"], f["sample_id"], f["codes"]) for f in tokscan.scan(out).flagged] == key
    excl = tmp_path / "drop.txt"
    proc = run_cli("scan", str(ints), "--exclude", str(excl), "--exclude-code", "missing_system", "-q")
    assert proc.returncode == 1, proc.stderr
    want = [f["sample_id"] for f in report.flagged if "missing_system" in f["codes"]]
    assert 100_000 not in want  # the repeated id would make the list one of rows
    assert excl.read_text().split() == [str(i) for i in want] != []
    # The terminal summary, the decoded examples and the HTML page name samples by their integer ids (an
    # integer id with no position, as `missing_system` has, crashed the summary's examples column).
    assert any(f["codes"] == ["missing_system"] for f in report.flagged)
    page = tmp_path / "r.html"
    proc = run_cli("scan", str(ints), "--decode", "1", "--html", str(page))
    assert proc.returncode == 1 and "error" not in proc.stderr, proc.stderr
    assert "missing_system" in proc.stdout and str(dup["sample_id"]) in proc.stdout and page.is_file()
    # Text ids stay text, even when they look like numbers; JSONL integers stay ints.
    text = tmp_path / "text.parquet"
    pq.write_table(pa.table({"input_ids": [s.ids for s in samples], "sample_id": [str(i) for i in ids]}), text)
    assert all(type(f["sample_id"]) is str for f in tokscan.scan(text).flagged)
    jsonl = tmp_path / "dump.jsonl"
    jsonl.write_text(
        "".join(json.dumps({"id": i, "input_ids": s.ids}) + "\n" for i, s in zip(ids, samples, strict=True))
    )
    assert all(type(f["sample_id"]) is int for f in tokscan.scan(jsonl).flagged)


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


def test_one_options_object_reaches_the_core_whole(tmp_path):
    """Issue 21: a scan's options travel as one `ScanOptions` to the local scan, every Ray task and the Ray
    driver's last step; the core reads each field of it and refuses a key it does not know, so a field added on
    one side only fails here."""
    from tokscan import _core
    from tokscan.options import ScanOptions

    path = tmp_path / "c"
    synth.write_numpy(synth.build_corpus(n_clean=30, seed=2, anomalies_per_code=0), path)
    prof = tokscan.load_profile("kimi-k2")
    opts = ScanOptions(threads=1, policy={"truncated": "ignore"}, fail_on="warning", flagged_detail=3)
    report = json.loads(_core.Scan([str(path)], prof, opts.to_core()).run())
    assert report["verdict"]["fail_on"] == "warning" and report["verdict"]["policy"] == {"truncated": "ignore"}
    assert report["run"]["threads"] == 1
    with pytest.raises(tokscan.UsageError, match='unknown scan option "bogus"') as e:
        _core.Scan([str(path)], prof, {**opts.to_core(), "bogus": 1})
    known = str(e.value).split("(known: ")[1].rstrip(")").split(", ")
    assert sorted(known) == sorted(opts.to_core())
    with pytest.raises(tokscan.UsageError, match="scan option threads"):
        _core.TaskScan(b"", prof, {"threads": "two"})


def test_a_scan_timed_from_the_opening_counts_it(tmp_path):
    """The CLI opens the corpus for its hint and hands it to the scan: the report's `run` then starts when the
    corpus began to open (as a scan of the paths does), not when the scan was handed it."""
    import time

    from tokscan import _core

    path = tmp_path / "c"
    synth.write_numpy(synth.build_corpus(n_clean=20, seed=3, anomalies_per_code=0), path)
    prof = tokscan.load_profile("kimi-k2")
    corpus = _core.Corpus([str(path)])
    time.sleep(1.0)
    timed = json.loads(_core.Scan(corpus, prof, {"threads": 1}, True).run())["run"]
    plain = json.loads(_core.Scan(corpus, prof, {"threads": 1}).run())["run"]
    # A 20-sample scan takes milliseconds (well under the second slept, even on a loaded machine).
    assert timed["seconds"] >= 1.0 and plain["seconds"] < timed["seconds"] - 0.5
    assert timed["started"] <= plain["started"]
