"""Bounded memory for flagged samples (issue 22, item 9): with `--flagged-detail N` the report lists the first N
flagged samples of each code in full and packs the others (row and codes) into `flagged_summarized`; every
flagged sample is still reached by `Report.flagged_rows`, `scan --exclude` and `tokscan clean`, exactly as with
no limit (the oracle: the same scan with `--flagged-detail 0`)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import tokscan

from conftest import run_cli


def digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "tokscan-clean.json"
    }


@pytest.fixture(scope="module")
def all_flagged(tmp_path_factory) -> Path:
    """300 three-token samples the default profile cannot parse: every one is flagged."""
    d = tmp_path_factory.mktemp("all-flagged") / "corpus"
    d.mkdir()
    rng = np.random.default_rng(3)
    np.save(d / "tokens.npy", rng.integers(1000, 50_000, size=900, dtype=np.int32))
    np.save(d / "offsets.npy", np.arange(0, 901, 3, dtype=np.int64))
    return d


def test_only_the_first_samples_of_each_code_are_listed_and_the_rest_are_counted(all_flagged):
    full = tokscan.scan(all_flagged, flagged_detail=0)
    small = tokscan.scan(all_flagged, flagged_detail=5)
    assert "flagged_summarized" not in full.data and len(full.flagged) == 300
    s = small.data["flagged_summarized"]
    # Oracle: a sample is listed when one of its codes has fewer than 5 listed-or-summarized samples before it.
    seen: Counter[str] = Counter()
    listed = []
    for f in full.flagged:
        if any(seen[c] < 5 for c in f["codes"]):
            listed.append(f["row"])
        seen.update(f["codes"])
    assert [f["row"] for f in small.flagged] == listed
    assert small.flagged == [f for f in full.flagged if f["row"] in set(listed)]
    assert s["detail_limit"] == 5 and s["samples"] == 300 - len(listed) == small.n_flagged - len(listed)
    assert s["by_code"] == dict(Counter(c for f in full.flagged if f["row"] not in listed for c in f["codes"]))
    assert s["by_category"] == {"default": 300 - len(listed)}
    assert small.anomalies == full.anomalies and small.n_flagged == full.n_flagged == 300
    for code in full.found():
        assert small.flagged_rows(code) == full.flagged_rows(code)
    rows, masks, codes = small.summarized()
    assert rows.tolist() == sorted(set(range(300)) - set(listed))
    by_row = {f["row"]: set(f["codes"]) for f in full.flagged}
    for r, m in zip(rows.tolist(), masks.tolist(), strict=True):
        assert {c for i, c in enumerate(codes) if m >> i & 1} == by_row[r]
    # The report round-trips through its JSON file.
    assert tokscan.Report(json.loads(json.dumps(small.data))).summarized_rows().tolist() == rows.tolist()


def test_a_report_under_the_limit_is_unchanged(layouts):
    src = layouts["parquet_split"]
    assert tokscan.scan(src, flagged_detail=1000).findings == tokscan.scan(src, flagged_detail=0).findings


@pytest.mark.parametrize("layout", ["parquet_split", "numpy_mask"])
def test_exclude_and_clean_reach_every_flagged_sample_past_the_limit(layouts, layout, tmp_path):
    src = layouts[layout]
    out = {}
    for limit in ("0", "1"):
        d = tmp_path / limit
        d.mkdir()
        proc = run_cli(
            "scan", str(src), "--flagged-detail", limit, "--json", str(d / "r.json"), "--exclude", str(d / "x.txt"),
            "-q",
        )  # fmt: skip
        assert proc.returncode == 1, proc.stderr
        report = tokscan.Report.load(d / "r.json")
        proc = run_cli("clean", str(src), "--report", str(d / "r.json"), "--out", str(d / "clean"))
        assert proc.returncode == 0, proc.stderr
        manifest = json.loads((d / "clean" / "tokscan-clean.json").read_text())
        out[limit] = (report, (d / "x.txt").read_text().split("\n")[:-1], digest(d / "clean"), manifest, proc.stdout)
    full, small = out["0"][0], out["1"][0]
    assert small.data["flagged_summarized"]["samples"] > 0
    assert len(small.flagged) < len(full.flagged) and small.n_flagged == full.n_flagged
    dropped = sorted(f["row"] for f in full.flagged if set(full.failures()).intersection(f["codes"]))
    # Past the limit the exclusion list is by row (the summarized samples carry no id), and lists every one.
    assert [int(x) for x in out["1"][1]] == dropped
    if out["0"][1] and not out["0"][1][0].isdigit():
        ids = {f["row"]: f["sample_id"] for f in full.flagged}
        assert out["0"][1] == [ids[r] for r in dropped]
    # The cleaned copies are byte-identical, and say they removed as many samples.
    assert out["1"][2] == out["0"][2]
    m0, m1 = out["0"][3], out["1"][3]
    assert m1["kept"] == m0["kept"] and len(m1["removed"]) + m1["removed_summarized"] == len(m0["removed"])
    assert out["1"][4].split("->")[0] == out["0"][4].split("->")[0]


def test_the_summaries_count_the_summarized_samples(all_flagged, tmp_path):
    from tokscan.report.html import render
    from tokscan.report.terminal import verdict_lines

    small = tokscan.scan(all_flagged, flagged_detail=2)
    assert small.flagged_by_category() == {"default": 300}
    assert "300 sample(s) flagged in all" in "\n".join(verdict_lines(small))
    assert "300 flagged" in str(small)
    page = render(small)
    assert "flagged_summarized" in page and "of 300</b> flagged" in page


def test_flagged_detail_must_be_a_count(all_flagged):
    with pytest.raises(tokscan.UsageError, match="flagged_detail"):
        tokscan.scan(all_flagged, flagged_detail=-1)
    proc = run_cli("scan", str(all_flagged), "--flagged-detail", "-3")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("layout", ["parquet_split", "arrow_stream", "jsonl_vllm_zst"])
def test_the_listed_samples_do_not_depend_on_the_thread_count(layouts, layout):
    one = tokscan.scan(layouts[layout], threads=1, flagged_detail=1)
    two = tokscan.scan(layouts[layout], threads=2, flagged_detail=1)
    assert one.data["flagged_summarized"]["samples"] > 0
    assert one.findings == two.findings


def test_junit_says_how_many_samples_it_does_not_list(all_flagged):
    from tokscan.report.ci import junit

    text = junit(tokscan.scan(all_flagged, flagged_detail=2), fail_on="info")
    assert text.count("298 more sample(s) without detail") == 3
