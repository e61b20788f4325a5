"""Acting on findings: `scan --exclude` and `tokscan clean` (same layout, clean samples byte-identical, the
source untouched, the copy re-scans with no errors)."""

from __future__ import annotations

import hashlib
import json
import os
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
    # The planted `sample_id_duplicate` rows are selected, and their ids are held by earlier rows too: by id,
    # a loader would drop those as well, so the list is of rows.
    shared = {f["sample_id"] for f in report.flagged if "sample_id_duplicate" in f["codes"]}
    want = [f for f in report.flagged if ERRORS.intersection(f["codes"])]
    assert shared & {f["sample_id"] for f in want}
    assert excl.read_text().splitlines() == [str(f["row"]) for f in want]

    # Codes none of whose samples holds a repeated id: by id.
    codes = {"repetition", "empty_completion"}
    want = [f for f in report.flagged if codes & set(f["codes"])]
    assert want and not shared & {f["sample_id"] for f in want}
    proc = run_cli("scan", str(src), "--exclude", str(excl), *(f"--exclude-code={c}" for c in sorted(codes)))
    assert proc.returncode == 1, proc.stderr
    assert excl.read_text().splitlines() == [f["sample_id"] for f in want]
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


# --- issue 22: nothing lost -----------------------------------------------------------------------------------


def scan_json(src: Path, report_path: Path, *extra: str) -> tokscan.Report:
    proc = run_cli("scan", str(src), "--json", str(report_path), "-q", *extra)
    assert proc.returncode in (0, 1), proc.stderr
    return tokscan.Report.load(report_path)


def test_clean_drops_the_flagged_jsonl_lines_whatever_the_line_endings(samples, tmp_path):
    """A line holding only `\\x0b` is a (malformed) sample to the reader; `clean` once split lines its own way,
    removed the samples after each flagged one and kept the flagged ones."""
    import synth

    src = tmp_path / "gen"
    src.mkdir()
    lines = [json.dumps(synth.jsonl_record(s)) for s in samples[:60]]
    text = "".join(line + ("\n\x0b\n" if i % 7 == 3 else "\r\n" if i % 2 else "\n") for i, line in enumerate(lines))
    (src / "a.jsonl").write_bytes(text.encode())
    before = digest(src)
    report = scan_json(src, tmp_path / "r.json")
    flagged = {f["row"] for f in report.flagged if ERRORS.intersection(f["codes"])}
    assert any("malformed_line" in f["codes"] for f in report.flagged)
    out = tmp_path / "clean"
    proc = run_cli("clean", str(src), "--report", str(tmp_path / "r.json"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert digest(src) == before
    again = tokscan.scan(out)
    assert again.failures("error") == {}
    assert again.n_samples == report.n_samples - len(flagged)
    ids = tokscan._core.Corpus([str(out)]).sample_ids()
    orig = tokscan._core.Corpus([str(src)]).sample_ids()
    assert ids == [sid for row, sid in enumerate(orig) if row not in flagged]
    # The kept lines are byte-identical: every line of the copy is a line of the source.
    src_lines = set(text.encode().split(b"\n"))
    assert all(line in src_lines for line in (out / "a.jsonl").read_bytes().split(b"\n"))


def test_clean_writes_each_input_once_when_a_symlink_names_another(layouts, tmp_path):
    """`b.parquet -> a.parquet`: the copy of one name used to overwrite the other's (0 rows). Whether the
    scan reads the file once or twice, every output holds exactly the rows its manifest entry says."""
    src = tmp_path / "src"
    src.mkdir()
    a = next(iter(sorted(layouts["parquet_full"].rglob("*.parquet"))))
    (src / "a.parquet").write_bytes(a.read_bytes())
    (src / "b.parquet").symlink_to(src / "a.parquet")
    report = scan_json(src, tmp_path / "r.json")
    out = tmp_path / "clean"
    proc = run_cli("clean", str(src), "--report", str(tmp_path / "r.json"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "tokscan-clean.json").read_text())
    outputs = [f["output"] for f in manifest["inputs"]]
    assert len(set(outputs)) == len(outputs)
    for f in manifest["inputs"]:  # b's rows repeat a's sample ids: all flagged, an empty copy
        assert pq.read_metadata(f["output"]).num_rows == f["kept"]
    # The scan reads the file once (under its first name) and lists the other name as skipped.
    assert [Path(f["source"]).name for f in manifest["inputs"]] == ["a.parquet"]
    (skipped,) = report.data["skipped"]
    assert skipped["path"].endswith("b.parquet") and skipped["reason"].startswith("the same file as")
    assert tokscan.scan(out).n_samples == manifest["kept"] == report.n_samples - len(manifest["removed"])


def test_clean_follows_a_symlink_to_a_shard_outside_the_scanned_folder(layouts, tmp_path):
    src, elsewhere = tmp_path / "src", tmp_path / "elsewhere"
    src.mkdir()
    elsewhere.mkdir()
    a = next(iter(sorted(layouts["parquet_full"].rglob("*.parquet"))))
    (elsewhere / "a.parquet").write_bytes(a.read_bytes())
    (src / "linked.parquet").symlink_to(elsewhere / "a.parquet")
    report = scan_json(src, tmp_path / "r.json")
    out = tmp_path / "clean"
    proc = run_cli("clean", str(src), "--report", str(tmp_path / "r.json"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "linked.parquet").is_file() and not (out / "linked.parquet").is_symlink()
    assert tokscan.scan(out).n_samples == report.n_samples - len(json.loads((out / MANIFEST).read_text())["removed"])


MANIFEST = "tokscan-clean.json"


def test_a_jsonl_shard_whose_every_sample_is_dropped_is_omitted_and_listed(samples, tmp_path):
    """An empty JSONL file is not an input (the re-scan refused the 0-byte copy): the copy is left out and the
    manifest says so."""
    import synth

    src = tmp_path / "gen"
    src.mkdir()
    cut = [s for s in samples if s.expected == {"truncated"}][:3]
    clean = [s for s in samples if not s.expected][:5]
    assert cut and clean
    (src / "bad.jsonl").write_text("".join(json.dumps(synth.jsonl_record(s)) + "\n" for s in cut))
    (src / "good.jsonl").write_text("".join(json.dumps(synth.jsonl_record(s)) + "\n" for s in clean))
    scan_json(src, tmp_path / "r.json")
    out = tmp_path / "clean"
    proc = run_cli("clean", str(src), "--report", str(tmp_path / "r.json"), "--out", str(out), "--code", "truncated")
    assert proc.returncode == 0, proc.stderr
    entries = {Path(f["source"]).name: f for f in json.loads((out / MANIFEST).read_text())["inputs"]}
    assert (
        entries["bad.jsonl"]["output"] is None and entries["bad.jsonl"]["kept"] == 0 and entries["bad.jsonl"]["omitted"]
    )
    assert not (out / "bad.jsonl").exists()
    assert run_cli("scan", str(out), "-q").returncode == 0
    assert tokscan.scan(out).n_samples == len(clean)


@pytest.mark.parametrize("layout", ["parquet_full", "numpy_mask", "arrow_file", "arrow_stream"])
def test_a_shard_whose_every_sample_is_dropped_is_an_empty_file_that_rescans(layouts, tmp_path, layout):
    src = layouts[layout]
    scan_json(src, tmp_path / "r.json")
    report = tokscan.Report.load(tmp_path / "r.json")
    # Drop everything with --fail-on info plus a code every sample of a small copy has: simplest, all rows.
    from tokscan.clean import write_copy
    from tokscan.forensics import Corpus

    corpus = Corpus([str(src)])
    first = corpus.counts[0]
    out = tmp_path / "clean"
    files = write_copy(corpus, [str(src)], range(first), out)
    assert files[0]["kept"] == 0 and files[0]["output"] is not None
    assert len(tokscan._core.Corpus([str(out)])) == report.n_samples - first  # the empty copy opens
    if len(corpus.counts) > 1:
        assert tokscan.scan(out).n_samples == report.n_samples - first


def test_outputs_that_are_or_are_inside_an_input_are_refused(layouts, tmp_path):
    src = tmp_path / "corpus"
    src.mkdir()
    shard = src / "a.parquet"
    shard.write_bytes(next(iter(sorted(layouts["parquet_full"].rglob("*.parquet")))).read_bytes())
    before = digest(src)
    for option in ("--json", "--html", "--junit", "--exclude"):
        for target in (shard, src / f"report{option[2:]}.out"):
            proc = run_cli("scan", str(src if target != shard else shard), option, str(target), "-q")
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1 and "must not overlap" in lines[0], (option, proc.stderr)
    proc = run_cli("scan", str(shard), "--json", str(shard), "-q")
    assert proc.returncode == 2 and "must not overlap" in proc.stderr
    for to in ("numpy", "parquet"):
        proc = run_cli("convert", str(src), "--to", to, "--out", str(src / "x"))
        assert proc.returncode == 2 and "must not overlap" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = run_cli("convert", str(shard), "--to", "numpy", "--out", str(shard))
    assert proc.returncode == 2 and "must not overlap" in proc.stderr
    assert digest(src) == before
    with pytest.raises(tokscan.UsageError, match="must not overlap"):
        from tokscan.convert import convert

        convert([str(src)], "numpy", src / "y")


def test_no_output_replaces_any_file_a_command_reads(layouts, tmp_path):
    """Besides the corpus, every file a command was given (a baseline, prompts, a profile, a tokenizer directory,
    a benchmark, a mapping, the reports `diff` compares) is refused as an output, as is a hard link to a shard and
    two outputs naming one file; nothing given is changed."""
    src = tmp_path / "corpus"
    src.mkdir()
    shard = src / "a.parquet"
    shard.write_bytes(next(iter(sorted(layouts["parquet_full"].rglob("*.parquet")))).read_bytes())
    base = tmp_path / "base.json"
    assert run_cli("scan", str(src), "--json", str(base), "-q", "--fail-on", "never").returncode == 0
    profile = tmp_path / "p.toml"
    profile.write_text('base = "kimi-k2"\nname = "mine"\n')
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "x", "messages": [{"role": "user", "content": "hi"}]}\n')
    bench = tmp_path / "bench.jsonl"
    bench.write_text('{"prompt": "what is two and two"}\n')
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer_config.json").write_text("{}")
    linked = tmp_path / "linked.json"
    linked.hardlink_to(shard)
    given = {p: p.read_bytes() for p in (shard, base, profile, prompts, bench, tok / "tokenizer_config.json")}
    cases = [
        ("scan", str(src), "--baseline", str(base), "--json", str(base)),
        ("scan", str(src), "--baseline", str(base), "--junit", str(base)),
        ("scan", str(src), "-p", str(profile), "--html", str(profile)),
        ("scan", str(src), "--prompts", str(prompts), "--json", str(prompts)),
        ("scan", str(src), "--contamination", str(bench), "--json", str(bench)),
        ("scan", str(src), "--tokenizer", str(tok), "--json", str(tok / "tokenizer_config.json")),
        ("scan", str(src), "--check-vocab", str(base), "--exclude", str(base)),
        ("show", str(src), "--row", "0", "--json", str(shard)),
        ("show", str(src), "--row", "0", "--prompts", str(prompts), "--json", str(prompts)),
        ("diff", str(base), str(base), "--json", str(base)),
        ("align", str(src), "--prompts", str(prompts), "--tokenizer", str(tok), "--json", str(prompts)),
        ("profiles", "check", str(profile), "--tokenizer", str(tok), "--json", str(profile)),
        ("profiles", "infer", "--tokenizer", str(tok), "--out", str(tok / "tokenizer_config.json")),
    ]
    for args in cases:
        proc = run_cli(*args, "-q")
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "must not overlap" in lines[0], (args, proc.stderr)
    proc = run_cli("scan", str(src), "--json", str(linked), "-q")
    assert proc.returncode == 2 and "hard link" in proc.stderr and str(shard) in proc.stderr, proc.stderr
    for a, b in (("--json", "--html"), ("--json", "--exclude"), ("--html", "--junit")):
        out = tmp_path / "same.out"
        proc = run_cli("scan", str(src), a, str(out), b, str(out), "-q")
        assert proc.returncode == 2 and "writes the same file" in proc.stderr and not out.exists(), proc.stderr
    assert all(p.read_bytes() == data for p, data in given.items())
    # Reading a file is not owning its folder: a new report in a tokenizer directory, or in a folder named like
    # a built-in profile (which is resolved by name, never read from there), is fine.
    (tmp_path / "kimi-k2").mkdir()
    for args in (("--json", str(tok / "new-report.json")), ("--json", "kimi-k2/r.json")):
        proc = run_cli("scan", str(src), "--tokenizer", str(tok), *args, "-q", "--fail-on", "never", cwd=tmp_path)
        assert proc.returncode != 2 or "overlap" not in proc.stderr, (args, proc.stderr)
    out = tmp_path / "a.out"
    out.write_text("x")
    (tmp_path / "b.out").hardlink_to(out)
    proc = run_cli("scan", str(src), "--json", str(out), "--html", str(tmp_path / "b.out"), "-q")
    assert proc.returncode == 2 and "writes the same file" in proc.stderr, proc.stderr
    # '-' is stdout for every report; only one output may take it.
    proc = run_cli("scan", str(src), "--html", "-", "--fail-on", "never", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("<!doctype html>") and not (tmp_path / "-").exists()
    proc = run_cli("scan", str(src), "--json", "-", "--exclude", "-")
    assert proc.returncode == 2 and "all write to stdout" in proc.stderr
    proc = run_cli("diff", str(base), str(base), "--junit", "-", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("<?xml") and not (tmp_path / "-").exists(), proc.stdout


def test_every_row_is_kept_removed_or_counted_as_not_copied(tmp_path):
    """A JSONL file left with malformed lines only is not written (no sample line: not an input); its lines are
    counted, so kept + removed + not copied is the corpus. A report listing a row twice removes it once."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_text('{"input_ids": [1, 2, 3]}\n{"input_ids": [7, 8]}\n')
    (src / "b.jsonl").write_text('{"input_ids": [1, 2, 3]}\n{"input_ids": [4,\n')
    report = tmp_path / "r.json"
    assert run_cli("scan", str(src), "-p", "plain", "--json", str(report), "-q").returncode == 1
    proc = run_cli("clean", str(src), "--report", str(report), "--out", str(tmp_path / "out"), "--code", "duplicate")
    assert proc.returncode == 0, proc.stderr
    assert "kept 2 of 4 samples (1 removed, 1 malformed line(s) left out with a file" in proc.stdout, proc.stdout
    m = json.loads((tmp_path / "out" / "tokscan-clean.json").read_text())
    assert (m["samples"], m["kept"], len(m["removed"]), m["not_copied"]) == (4, 2, 1, 1)
    doubled = json.loads(report.read_text())
    doubled["flagged"] = doubled["flagged"] + doubled["flagged"]
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps(doubled))
    proc = run_cli("clean", str(src), "--report", str(twice), "--out", str(tmp_path / "out2"), "--code", "duplicate")
    assert proc.returncode == 0 and "kept 2 of 4 samples (1 removed, 1 malformed" in proc.stdout, proc.stdout
    assert len(json.loads((tmp_path / "out2" / "tokscan-clean.json").read_text())["removed"]) == 1
    # A mistyped code is the user's, not the report's.
    proc = run_cli("clean", str(src), "--report", str(report), "--out", str(tmp_path / "o3"), "--code", "duplicat")
    assert proc.returncode == 2 and proc.stderr.startswith("tokscan: error: unknown anomaly code"), proc.stderr


V100 = 'base = "plain"\nname = "v100"\nvocab_size = 100\n'


def _lines(*rows: tuple[str, list[int]]) -> str:
    return "".join(json.dumps({"id": i, "input_ids": ids}) + "\n" for i, ids in rows)


def test_a_report_whose_rows_now_hold_other_samples_is_refused(tmp_path):
    """A shard rewritten in another order after the scan, with as many samples: the paths and counts matched, so
    `clean` dropped the sample now at the flagged row (a clean one) and kept the flagged one, exit 0."""
    (tmp_path / "v100.toml").write_text(V100)
    data = tmp_path / "data"
    data.mkdir()
    rows = [("a", [1, 2, 3]), ("b", [4, 500, 6]), ("c", [7, 8, 9]), ("d", [10, 11, 12])]
    (data / "x.jsonl").write_text(_lines(*rows))
    report = tmp_path / "report.json"
    assert run_cli("scan", str(data), "-p", str(tmp_path / "v100.toml"), "-q", "--json", str(report)).returncode == 1
    (data / "x.jsonl").write_text(_lines(*rows[::-1]))
    res = run_cli("clean", str(data), "--report", str(report), "--out", str(tmp_path / "out"))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert str(report) in lines[0] and "row 1 is sample 'b' in the report but 'c' in the corpus" in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("detail", ["1000", "1"])
def test_a_report_whose_rows_now_hold_other_samples_is_refused_without_ids(tmp_path, detail):
    """Issue 45: a JSONL corpus without ids whose lines were reordered after the scan (same size, same count)
    was cleaned with exit 0, the flagged samples kept and clean ones removed; the same with a Megatron pair
    rewritten in reverse order. The report keeps a key of each flagged row's tokens (of the rows it lists in
    full and of those past `--flagged-detail`), and `clean` reads each row again before it writes anything."""
    import synth

    def write_megatron(prefix: Path, rs: list[list[int]]) -> None:
        Path(f"{prefix}.bin").write_bytes(np.concatenate([np.asarray(r, np.int32) for r in rs]).tobytes())
        lengths = np.array([len(r) for r in rs])
        synth.write_megatron_index(Path(f"{prefix}.idx"), np.int32, lengths, np.arange(len(rs) + 1))

    (tmp_path / "v100.toml").write_text(V100)
    profile = str(tmp_path / "v100.toml")
    rows = [[1, 2, 3], [4, 500, 6], [7, 8, 9], [10, 11, 12], [13, 600, 15], [16, 17, 18]]

    def write(data: Path, layout: str, rs: list[list[int]]) -> None:
        if layout == "jsonl":
            (data / "x.jsonl").write_text("".join(json.dumps({"input_ids": r}) + "\n" for r in rs))
        else:
            write_megatron(data / "corpus", rs)

    for layout in ("jsonl", "megatron"):
        data = tmp_path / layout
        data.mkdir()
        write(data, layout, rows)
        report = tmp_path / f"{layout}.json"
        proc = run_cli("scan", str(data), "-p", profile, "-q", "--json", str(report), "--flagged-detail", detail)
        assert proc.returncode == 1, proc.stderr
        doc = json.loads(report.read_text())
        assert all(len(f["content"]) == 16 for f in doc["flagged"])
        # Rotated by one: each flagged row now holds a clean sample (the flagged ones would be kept).
        write(data, layout, rows[1:] + rows[:1])
        res = run_cli("clean", str(data), "--report", str(report), "--out", str(tmp_path / f"out-{layout}"))
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, (layout, res.stderr)
        assert "hold other samples than" in lines[0] or "holds another sample than" in lines[0], lines[0]
        assert ("past --flagged-detail" in lines[0]) == (detail == "1"), lines[0]
        assert not (tmp_path / f"out-{layout}").exists()
        # Unchanged, the same report cleans.
        write(data, layout, rows)
        res = run_cli("clean", str(data), "--report", str(report), "--out", str(tmp_path / f"ok-{layout}"))
        assert res.returncode == 0, res.stderr


def test_a_report_of_other_inputs_names_itself_and_the_input(tmp_path):
    """Run from another directory, the report's relative paths name other files: the error said neither which
    report nor which input."""
    data = tmp_path / "data.jsonl"
    data.write_text(_lines(("a", [1, 2, 3]), ("b", [1, 2, 3])))
    assert run_cli("scan", "data.jsonl", "-p", "plain", "-q", "--json", "r.json", cwd=tmp_path).returncode == 0
    (tmp_path / "ci").mkdir()
    res = run_cli("clean", "../data.jsonl", "--report", "../r.json", "--out", "../c", cwd=tmp_path / "ci")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith("tokscan: error: ../r.json: does not describe these inputs"), lines[0]
    assert f"where the paths given hold {data}" in lines[0] and "from the same directory" in lines[0], lines[0]
    data.write_text(_lines(("a", [1, 2, 3])))
    res = run_cli("clean", "data.jsonl", "--report", "r.json", "--out", "c", cwd=tmp_path)
    assert res.returncode == 2 and "it lists data.jsonl with 2 samples where" in res.stderr, res.stderr


def test_a_shard_named_like_the_manifest_is_refused_not_replaced_by_it(tmp_path):
    """An Arrow shard named `tokscan-clean.json` was copied, then overwritten by the manifest: the kept samples
    were gone and clean said it kept them."""
    import pyarrow as pa
    import pyarrow.feather as feather

    shard = tmp_path / "tokscan-clean.json"
    feather.write_feather(pa.table({"input_ids": [[1, 2, 3], [4, 5, 6], [1, 2, 3]]}), shard)
    report = tmp_path / "r.json"
    run_cli("scan", str(shard), "-p", "plain", "-q", "--json", str(report), "--fail-on", "warning")
    res = run_cli("clean", str(shard), "--report", str(report), "--out", str(tmp_path / "out"), "--fail-on", "warning")
    assert res.returncode == 2 and "where the manifest goes" in res.stderr, res.stderr


def test_a_numpy_copy_is_written_into_an_empty_directory_behind_a_symlink(tmp_path):
    """The NumPy writer wanted a new directory, so clean removed the empty `--out` first: a symlink to an empty
    directory ("Not a directory") or a mount point ("Device or resource busy") was refused."""
    src = tmp_path / "np"
    src.mkdir()
    np.save(src / "tokens.npy", np.array([1, 2, 3, 1, 2, 3, 4], np.int32))
    np.save(src / "offsets.npy", np.array([0, 3, 6, 7]))
    report = tmp_path / "r.json"
    run_cli("scan", str(src), "-p", "plain", "-q", "--json", str(report), "--fail-on", "warning")
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    res = run_cli("clean", str(src), "--report", str(report), "--out", str(tmp_path / "link"), "--fail-on", "warning")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "link").is_symlink()
    assert np.load(tmp_path / "target" / "tokens.npy").tolist() == [1, 2, 3, 4]
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    res = run_cli("clean", str(src), "--report", str(report), "--out", str(tmp_path / "full"), "--fail-on", "warning")
    assert res.returncode == 2 and "not an empty directory" in res.stderr, res.stderr


def test_the_exclusion_list_is_of_rows_when_a_selected_id_is_held_by_another_row(tmp_path):
    """Row 2 repeats row 0's id (`sample_id_duplicate`): the list said `x`, and a loader dropping by id dropped
    row 0 too, which `clean` keeps. Rows now; a corpus whose selected ids are each held once still gets ids."""
    data = tmp_path / "data.jsonl"
    data.write_text(_lines(("x", [1, 2, 3]), ("y", [4, 5, 6]), ("x", [7, 8, 9])))
    drop = tmp_path / "drop.txt"
    res = run_cli("scan", str(data), "-p", "plain", "-q", "--json", str(tmp_path / "r.json"), "--exclude", str(drop))
    assert res.returncode == 1, res.stderr
    assert drop.read_text() == "2\n"
    (tmp_path / "v100.toml").write_text(V100)
    data.write_text(_lines(("x", [1, 2, 3]), ("y", [4, 500, 6]), ("z", [7, 8, 9])))
    res = run_cli("scan", str(data), "-p", str(tmp_path / "v100.toml"), "-q", "--exclude", str(drop))
    assert res.returncode == 1 and drop.read_text() == "y\n", (res.stderr, drop.read_text())


def test_the_copy_keeps_the_files_beside_the_inputs(tmp_path):
    """The prompts files (which name the categories and pair the samples) and a DatasetDict's
    dataset_dict.json were not copied: the cleaned drafter corpus had one category, `default`, and no pairing,
    and `datasets.load_from_disk` refused the cleaned DatasetDict."""
    import pyarrow as pa

    data = tmp_path / "data"
    for cat, base in (("B1_glaive", 10), ("B2_code", 50)):
        (data / cat).mkdir(parents=True)
        ids = [f"{cat}-{i}" for i in range(4)]
        pq.write_table(
            pa.table({"sample_id": ids, "input_ids": [[base + i, 2, 3] for i in range(3)] + [[base, 2, 3]]}),
            data / cat / "shard-0.parquet",
        )
        msg = [{"role": "user", "content": "hi"}]
        (data / cat / "prompts.jsonl").write_text("".join(json.dumps({"id": i, "messages": msg}) + "\n" for i in ids))
    (data / "README.md").write_text("how this corpus was made\n")
    report = tmp_path / "r.json"
    run_cli("scan", str(data), "-p", "plain", "-q", "--json", str(report), "--fail-on", "warning")
    out = tmp_path / "out"
    res = run_cli("clean", str(data), "--report", str(report), "--out", str(out), "--fail-on", "warning")
    assert res.returncode == 0 and "3 other file(s) copied as they are" in res.stdout, (res.stdout, res.stderr)
    for rel in ("B1_glaive/prompts.jsonl", "B2_code/prompts.jsonl", "README.md"):
        assert (out / rel).read_bytes() == (data / rel).read_bytes(), rel
    manifest = json.loads((out / "tokscan-clean.json").read_text())
    assert len(manifest["copied"]) == 3 and manifest["kept"] == 6 and "warnings" not in manifest
    again = tokscan.scan(str(out), profile="plain")
    assert set(again.categories) == {"B1_glaive", "B2_code"}
    assert [p["paired"] for p in again.data["pairing"]] == [3, 3]


def test_a_cleaned_datasetdict_loads_with_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {"input_ids": [[1, 2, 3 + i] for i in range(5)] + [[1, 2, 3]]}
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict(rows), "test": datasets.Dataset.from_dict(rows)}
    ).save_to_disk(str(tmp_path / "dd"))
    report = tmp_path / "r.json"
    run_cli("scan", str(tmp_path / "dd"), "-p", "plain", "-q", "--json", str(report), "--fail-on", "warning")
    args = ("--report", str(report), "--out", str(tmp_path / "out"), "--fail-on", "warning")
    assert run_cli("clean", str(tmp_path / "dd"), *args).returncode == 0
    loaded = datasets.load_from_disk(str(tmp_path / "out"))
    # `test` is read first, so each of `train`'s rows repeats one of its (`duplicate`).
    assert {k: v.num_rows for k, v in loaded.items()} == {"test": 5, "train": 0}


def test_a_prompts_file_paired_by_line_is_copied_with_a_warning_when_samples_go(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "gen.jsonl").write_text(_lines(("a", [1, 2, 3]), ("b", [4, 5, 6]), ("c", [1, 2, 3])))
    msg = [{"role": "user", "content": "hi"}]
    (data / "prompts.jsonl").write_text("".join(json.dumps({"messages": msg}) + "\n" for _ in range(3)))
    report = tmp_path / "r.json"
    run_cli("scan", "data", "-p", "plain", "-q", "--json", str(report), "--fail-on", "warning", cwd=tmp_path)
    assert json.loads(report.read_text())["pairing"][0]["matched_by"] == "line"
    res = run_cli("clean", "data", "--report", str(report), "--out", "out", "--fail-on", "warning", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "warning:" in res.stderr and "pairs its samples by line" in res.stderr, res.stderr
    assert (tmp_path / "out" / "prompts.jsonl").read_bytes() == (data / "prompts.jsonl").read_bytes()
    # Paths in the manifest are all of one style (the removed samples' sources were the report's relative ones).
    m = json.loads((tmp_path / "out" / "tokscan-clean.json").read_text())
    assert m["removed"][0]["source"] == m["inputs"][0]["source"] == str(data / "gen.jsonl")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_clean_that_fails_part_way_leaves_nothing_and_can_be_run_again(tmp_path):
    """On a full disk clean left a finished shard, a half-written one and no manifest, and a second run was
    refused (`exists and is not an empty directory`)."""
    import subprocess

    import pyarrow as pa
    import pyarrow.feather as feather

    g = np.random.default_rng(0)
    shards = []
    for k in range(3):
        rows = [g.integers(0, 50000, 400).tolist() for _ in range(60)] + [[1, 2, 3], [1, 2, 3]]
        shards.append(tmp_path / f"shard{k}.arrow")
        feather.write_feather(pa.table({"input_ids": rows}), shards[-1], compression="uncompressed")
    report = tmp_path / "r.json"
    run_cli("scan", *map(str, shards), "-p", "plain", "-q", "--json", str(report), "--fail-on", "warning")
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(small)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        for out in (small / "clean", small):  # a new directory, and an empty one that exists
            for _ in range(2):
                res = run_cli(
                    "clean", *map(str, shards), "--report", str(report), "--out", str(out), "--fail-on", "warning"
                )
                lines = res.stderr.strip().splitlines()
                assert res.returncode == 2 and len(lines) == 1 and "No space left on device" in lines[0], res.stderr
                assert not any(small.iterdir()), list(small.iterdir())
    finally:
        subprocess.run(["umount", str(small)])


def test_a_parquet_copy_keeps_each_columns_codec(tmp_path):
    """A file that compresses its columns differently was rewritten with the first column's codec for all."""
    import pyarrow as pa

    src = tmp_path / "mixed.parquet"
    table = pa.table({"category": ["a", "b", "a"], "input_ids": [[1, 2, 3], [4, 5, 6], [1, 2, 3]]})
    pq.write_table(table, src, compression={"category": "NONE", "input_ids.list.element": "ZSTD"})
    report = tmp_path / "r.json"
    run_cli("scan", str(src), "-p", "plain", "-q", "--json", str(report), "--fail-on", "warning")
    res = run_cli("clean", str(src), "--report", str(report), "--out", str(tmp_path / "out"), "--fail-on", "warning")
    assert res.returncode == 0, res.stderr

    def codecs(p):
        rg = pq.read_metadata(p).row_group(0)
        return {rg.column(i).path_in_schema: rg.column(i).compression for i in range(rg.num_columns)}

    assert (
        codecs(tmp_path / "out" / "mixed.parquet")
        == codecs(src)
        == {"category": "UNCOMPRESSED", "input_ids.list.element": "ZSTD"}
    )


def test_no_data_the_scan_did_not_read_is_copied_beside_the_inputs(tmp_path):
    """Only prompts files and files of no known format are copied: a `datasets` cache `.arrow` (all the rows,
    the removed ones too), a hidden file or a refused shard is not data the scan saw."""
    datasets = pytest.importorskip("datasets")
    rows = {"input_ids": [[1, 2, 3], [4, 5, 6], [1, 2, 3]]}
    root = tmp_path / "corpus"
    datasets.Dataset.from_dict(rows).save_to_disk(str(root / "hf"))
    ds = datasets.load_from_disk(str(root / "hf")).map(lambda r: r)  # writes hf/cache-*.arrow
    assert ds.cache_files and list((root / "hf").glob("cache-*.arrow"))
    (root / ".secret").write_text("x")
    (root / "notes.txt").write_text("made by hand\n")
    report = tmp_path / "r.json"
    run_cli("scan", str(root), "-p", "plain", "-q", "--json", str(report), "--fail-on", "warning")
    res = run_cli("clean", str(root), "--report", str(report), "--out", str(tmp_path / "out"), "--fail-on", "warning")
    assert res.returncode == 0, res.stderr
    names = {p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*")}
    assert "notes.txt" in names and ".secret" not in names, names
    assert not any("cache-" in n for n in names), names


def test_a_report_made_with_an_id_column_option_cleans_without_it(tmp_path):
    """The scan read ids from `--id-column uid`; a clean without the option reads none: that is no reason to
    call the inputs changed."""
    import pyarrow as pa

    src = tmp_path / "d.parquet"
    pq.write_table(pa.table({"uid": ["a", "b", "c"], "input_ids": [[1, 2], [3, 4], [1, 2]]}), src)
    report = tmp_path / "r.json"
    run_cli("scan", str(src), "-p", "plain", "--id-column", "uid", "-q", "--json", str(report), "--fail-on", "warning")
    res = run_cli("clean", str(src), "--report", str(report), "--out", str(tmp_path / "out"), "--fail-on", "warning")
    assert res.returncode == 0, res.stderr


def test_a_prompts_file_outside_the_copy_is_not_said_to_be_copied(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "gen.jsonl").write_text(_lines(("a", [1, 2, 3]), ("b", [4, 5, 6]), ("c", [1, 2, 3])))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n" for _ in "abc"))
    report = tmp_path / "r.json"
    run_cli(
        "scan", str(data), "--prompts", str(prompts), "-p", "plain", "-q", "--json", str(report), "--fail-on", "warning"
    )
    res = run_cli("clean", str(data), "--report", str(report), "--out", str(tmp_path / "out"), "--fail-on", "warning")
    assert res.returncode == 0 and "warning" not in res.stderr, res.stderr
