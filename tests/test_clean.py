"""Acting on findings: `scan --exclude` and `tokscan clean` (same layout, clean samples byte-identical, the
source untouched, the copy re-scans with no errors)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import tokscan

from conftest import run_cli

ERRORS = {c for c, (sev, _d) in tokscan.CODE_INFO.items() if sev == "error"}


def digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def samples_of(path: Path) -> list[tuple[str, list[int], list[int] | None]]:
    """(sample_id, ids, mask) of every sample, in scan order, read with plain pyarrow / numpy."""
    out = []
    for f in sorted(path.rglob("*.parquet")):
        if f.name == "meta.parquet":
            continue
        t = pq.read_table(f).to_pylist()
        for r in t:
            ids = r.get("input_ids") or (r["prompt_ids"] + r["output_ids"])
            out.append((r["sample_id"], ids, r.get("loss_mask")))
    for d in sorted({p.parent for p in path.rglob("tokens.npy")}):
        tok, off = np.load(d / "tokens.npy"), np.load(d / "offsets.npy")
        mask = np.load(d / "loss_mask.npy") if (d / "loss_mask.npy").is_file() else None
        ids = pq.read_table(d / "meta.parquet").column("sample_id").to_pylist()
        for i, sid in enumerate(ids):
            a, b = off[i], off[i + 1]
            out.append((sid, tok[a:b].tolist(), None if mask is None else mask[a:b].tolist()))
    return out


@pytest.mark.parametrize("layout", ["parquet_full", "parquet_split", "numpy_mask"])
def test_clean_copy_rescans_without_errors_and_keeps_clean_samples_identical(layouts, layout, tmp_path):
    src = layouts[layout]
    before = digest(src)
    report_path = tmp_path / "report.json"
    proc = run_cli("scan", str(src), "--json", str(report_path), "-q")
    assert proc.returncode == 1, proc.stderr
    report = tokscan.Report.load(report_path)
    dropped = {f["row"] for f in report.flagged if ERRORS.intersection(f["codes"])}
    assert dropped

    out = tmp_path / "clean"
    proc = run_cli("clean", str(src), "--report", str(report_path), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert f"({len(dropped)} removed)" in proc.stdout
    assert digest(src) == before  # the source is untouched

    again = tokscan.scan(out, profile="kimi-k2")
    assert again.failures("error") == {}
    assert again.n_samples == report.n_samples - len(dropped)
    # Same layout: same files, same schema / dtypes.
    assert sorted(p.relative_to(out) for p in out.rglob("*") if p.name != "tokscan-clean.json") == sorted(
        p.relative_to(src) for p in src.rglob("*")
    )
    for f in src.rglob("*.parquet"):
        assert pq.read_schema(out / f.relative_to(src)) == pq.read_schema(f)
    for f in src.rglob("*.npy"):
        assert np.load(out / f.relative_to(src), mmap_mode="r").dtype == np.load(f, mmap_mode="r").dtype
    # Every kept sample identical, in order, and exactly the others removed.
    orig = [s for row, s in enumerate(samples_of(src)) if row not in dropped]
    assert samples_of(out) == orig

    manifest = json.loads((out / "tokscan-clean.json").read_text())
    assert {r["row"] for r in manifest["removed"]} == dropped
    assert manifest["kept"] == len(orig) and manifest["selection"] == {"fail_on": "error"}

    # Refuses to write into a non-empty directory or over the source.
    proc = run_cli("clean", str(src), "--report", str(report_path), "--out", str(out))
    assert proc.returncode == 2 and "not an empty directory" in proc.stderr
    proc = run_cli("clean", str(src), "--report", str(report_path), "--out", str(src / "x"))
    assert proc.returncode == 2 and "must not overlap" in proc.stderr


def test_clean_by_code_and_a_mismatched_report(layouts, tmp_path):
    src = layouts["numpy"]
    report = tokscan.scan(src, profile="kimi-k2")
    report.write_json(tmp_path / "r.json")
    out = tmp_path / "only-truncated"
    proc = run_cli("clean", str(src), "--report", str(tmp_path / "r.json"), "--out", str(out), "--code", "truncated")
    assert proc.returncode == 0, proc.stderr
    assert tokscan.scan(out, profile="kimi-k2").count("truncated") == 0
    assert tokscan.scan(out).n_samples == report.n_samples - report.count("truncated")

    other = tokscan.scan(layouts["parquet_full"])
    other.write_json(tmp_path / "other.json")
    proc = run_cli("clean", str(src), "--report", str(tmp_path / "other.json"), "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and "does not describe these inputs" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_scan_exclude_lists_ids_by_severity_or_code(layouts, tmp_path):
    src = layouts["parquet_full"]
    report = tokscan.scan(src, profile="kimi-k2")
    excl = tmp_path / "exclude.txt"
    proc = run_cli("scan", str(src), "--exclude", str(excl), "-q")
    assert proc.returncode == 1, proc.stderr
    want = [f["sample_id"] for f in report.flagged if ERRORS.intersection(f["codes"])]
    assert excl.read_text().splitlines() == want

    proc = run_cli(
        "scan", str(src), "--exclude", str(excl), "--exclude-code", "repetition", "--exclude-code", "duplicate"
    )
    assert proc.returncode == 1, proc.stderr
    want = [f["sample_id"] for f in report.flagged if {"repetition", "duplicate"} & set(f["codes"])]
    assert excl.read_text().splitlines() == want and want
    assert f"exclusion list: {len(want)} sample(s) by sample_id" in proc.stdout

    # Without sample ids: global rows.
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("tokens.npy", "offsets.npy"):
        (bare / name).write_bytes((layouts["numpy"] / name).read_bytes())
    proc = run_cli("scan", str(bare), "--exclude", str(excl), "-q")
    assert proc.returncode == 1, proc.stderr
    rows = [str(f["row"]) for f in tokscan.scan(bare).flagged if ERRORS.intersection(f["codes"])]
    assert excl.read_text().splitlines() == rows and rows

    proc = run_cli("scan", str(src), "--exclude-code", "nope", "--exclude", str(excl))
    assert proc.returncode == 2 and "unknown anomaly code" in proc.stderr


def test_selection_follows_severity_floor_and_ignored_codes(layouts):
    from tokscan.clean import selected

    report = tokscan.scan(layouts["parquet_full"])
    rank = {"info": 0, "warning": 1, "error": 2}
    sev = {c: a["severity"] for c, a in report.anomalies.items()}

    def oracle(floor: int, ignored: set[str]) -> list[int]:
        return [f["row"] for f in report.flagged if any(rank[sev[c]] >= floor and c not in ignored for c in f["codes"])]

    for fail_on, floor in (("error", 2), ("warning", 1), ("info", 0)):
        assert [f["row"] for f in selected(report, fail_on)] == oracle(floor, set())
    assert selected(report, "never") == []
    # An ignored code and a tolerated one select no samples: the run does not fail on them, so nothing is
    # dropped for them (the same decision as the exit code's).
    found = [c for c, a in report.anomalies.items() if a["count"] and sev[c] == "error"]
    ignored, tolerated = found[0], found[1]
    policy = {ignored: "ignore", tolerated: 10**9}
    assert [f["row"] for f in selected(report, "error", policy=policy)] == oracle(2, {ignored, tolerated})
    assert oracle(2, {ignored}) != oracle(2, set())
