"""One verdict everywhere: one corpus scanned under several policies and `--fail-on` levels, and every consumer
of the result asked which codes fail the run — the exit code, the JSON verdict and statuses, the Python API
with no arguments (the report carries its policy), the terminal summary, the HTML page, JUnit, GitHub
annotations, `--exclude`, `tokscan clean` (which judges a report as its scan did) and the Validator."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import tokscan

from conftest import run_cli


def error_codes() -> list[str]:
    return [c for c, (sev, _d) in tokscan.CODE_INFO.items() if sev == "error"]


def policies(samples) -> dict[str, tuple[dict[str, str | int], str]]:
    truncated_rate = 100 * sum("truncated" in s.expected for s in samples) / len(samples)
    ignore_errors: dict[str, str | int] = {c: "ignore" for c in error_codes()}
    tolerate = {c: "ignore" for c in error_codes() if c != "truncated"}
    tolerate["truncated"] = f"{truncated_rate + 1:.2f}%"
    return {
        "default": ({}, "error"),
        "ignore-every-error": (ignore_errors, "error"),
        "tolerate-truncated": ({**tolerate, "length_outlier": "ignore"}, "info"),
        "override-repetition": ({**ignore_errors, "repetition": "error"}, "error"),
        "warnings-fail": ({"duplicate": 1_000_000, "truncated": "warning"}, "warning"),
        "never": ({"truncated": "ignore"}, "never"),
    }


def write_config(path, policy) -> None:
    path.write_text("[policy]\n" + "".join(f"{c} = {json.dumps(v)}\n" for c, v in policy.items()))


def summary_statuses(stdout: str, codes) -> dict[str, str]:
    """The policy column of the terminal's anomaly table, per code."""
    out = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line) if c.strip()]
        if cells and cells[0] in codes:
            out[cells[0]] = cells[4]
    return out


@pytest.mark.parametrize(
    "name",
    ["default", "ignore-every-error", "tolerate-truncated", "override-repetition", "warnings-fail", "never"],
)
def test_every_consumer_gives_the_scans_verdict(name, samples, layouts, tmp_path):
    path = layouts["parquet_full"]
    policy, fail_on = policies(samples)[name]
    cfg = tmp_path / "tokscan.toml"
    write_config(cfg, policy)
    files = {k: tmp_path / f"out.{k}" for k in ("json", "xml", "html", "txt")}
    common = ("scan", str(path), "--config", str(cfg), "--fail-on", fail_on)
    gh = run_cli(
        *common,
        "--format",
        "github",
        "--json",
        str(files["json"]),
        "--junit",
        str(files["xml"]),
        "--html",
        str(files["html"]),
        "--exclude",
        str(files["txt"]),
    )
    assert gh.returncode in (0, 1), gh.stderr
    data = json.loads(files["json"].read_text())
    failing = set(data["verdict"]["failing"])
    found = {c for c, a in data["anomalies"].items() if a["count"]}
    assert {c for c in found if data["anomalies"][c]["status"] == "fails"} == failing
    assert gh.returncode == (1 if failing else 0) and data["verdict"]["passed"] is (not failing)
    assert data["verdict"]["fail_on"] == fail_on and data["verdict"]["policy"] == policy

    # The Python API, with no arguments: the report carries the policy and fail_on it was made with.
    for report in (tokscan.Report.load(files["json"]), tokscan.scan(path, policy=policy, fail_on=fail_on)):
        assert set(report.failures()) == failing
        assert report.exit_code() == gh.returncode
        assert report.policy == policy and report.fail_on == fail_on
        assert report.failures(fail_on, policy) == report.failures()

    # JUnit: a failure exactly for the failing codes; the others found say why they pass.
    suite = ET.parse(files["xml"]).getroot().find("testsuite")
    assert suite is not None
    junit_failing = {c.get("name") for c in suite if c.find("failure") is not None}
    assert junit_failing == failing and int(suite.get("failures", -1)) == len(failing)
    for case in suite:
        out = case.findtext("system-out")
        if out is not None:
            status = data["anomalies"][case.get("name")]["status"]
            assert ("ignored" in out) is (status == "ignored"), out
            assert "tolerated" not in out or status == "tolerated", out
        body = case.findtext("failure") or ""
        assert "None" not in body

    # GitHub: ::error for the failing codes only; ignored codes are not annotated.
    annotated = {m.group(2): m.group(1) for m in re.finditer(r"^::(\w+) .*title=tokscan (\w+)::", gh.stdout, re.M)}
    assert {c for c, level in annotated.items() if level == "error"} == failing
    ignored = {c for c in found if data["anomalies"][c]["status"] == "ignored"}
    assert set(annotated) == found - ignored

    # HTML: each found code's status, as the core decided it.
    html = files["html"].read_text()
    page = dict(re.findall(r"<tr data-code='(\w+)'>.*?<span class='status (\w+)'>", html))
    css = {"below_fail_on": "below"}
    assert page == {c: css.get(data["anomalies"][c]["status"], data["anomalies"][c]["status"]) for c in found}
    assert ("verdict fail" in html) is bool(failing)

    # --exclude and clean (without a config: it judges the report as its scan did) drop the same samples.
    chosen = [f for f in data["flagged"] if failing.intersection(f["codes"])]
    carriers = sorted(str(f["sample_id"]) for f in chosen)
    # By id, or by row when a chosen sample's id is held by another row too (a planted sample_id_duplicate).
    shared = {f["sample_id"] for f in data["flagged"] if "sample_id_duplicate" in f["codes"]}
    by_id = not shared.intersection(f["sample_id"] for f in chosen)
    listed = sorted(files["txt"].read_text().split())
    assert listed == (carriers if by_id else sorted(str(f["row"]) for f in chosen))
    cleaned = run_cli("clean", str(path), "--report", str(files["json"]), "--out", str(tmp_path / "clean"))
    assert cleaned.returncode == 0, cleaned.stderr
    manifest = json.loads((tmp_path / "clean" / "tokscan-clean.json").read_text())
    assert sorted(str(r["sample_id"]) for r in manifest["removed"]) == carriers

    # The terminal summary: each found code's policy status, and a verdict that counts codes and samples apart.
    text = run_cli(*common, "--no-progress")
    assert text.returncode == gh.returncode
    shown = summary_statuses(text.stdout, found)
    assert set(shown) == found
    for code in found:
        status = data["anomalies"][code]["status"]
        assert {"fails": "fails the run", "ignored": "ignored by policy"}.get(status, shown[code]) == shown[code]
        assert status != "tolerated" or shown[code].startswith("tolerated")
        assert status != "below_fail_on" or shown[code].startswith(("below --fail-on", "never fails"))
    verdict = next(line for line in text.stdout.splitlines() if line.startswith(("FAIL", "PASS")))
    if failing:
        assert f"{len(failing)} code(s) fail the run, in {len(carriers)} sample(s)" in verdict
    else:
        assert verdict.startswith("PASS")
    assert f"{len(data['flagged'])} sample(s) flagged in all" in text.stdout

    # The Validator, sample by sample (it cannot apply corpus-wide tolerances, so only without them).
    if not any(isinstance(v, int) or str(v).endswith("%") for v in policy.values()) and fail_on != "never":
        v = tokscan.Validator("kimi-k2", policy=policy, fail_on=fail_on)
        per_sample = [c for c in failing if tokscan._core.code_scopes()[c] == "sample"]
        result = v.check_each(
            [np.asarray(s.ids, dtype=np.int64) for s in samples], [np.asarray(s.mask(), np.uint8) for s in samples]
        )
        bad = {samples[i].sample_id for i in result.bad_rows}
        by_scan = {f["sample_id"] for f in data["flagged"] if set(per_sample).intersection(f["codes"])}
        assert by_scan <= bad


def test_the_summary_says_what_this_corpus_could_not_check(samples, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    bare = tmp_path / "bare.parquet"
    pq.write_table(pa.table({"input_ids": [s.ids for s in samples[:50]]}), bare)
    masked = tmp_path / "masked.parquet"
    pq.write_table(
        pa.table({"input_ids": [s.ids for s in samples[:50]], "loss_mask": [s.mask() for s in samples[:50]]}), masked
    )
    said = " ".join(run_cli("scan", str(bare), "--no-progress").stdout.split())  # the line wraps at 80 columns
    assert "not checked in this corpus: loss_mask_misaligned (no input has a loss mask or labels)" in said
    assert "spelled_special (needs --tokenizer DIR with a vocabulary)" in said
    assert set(tokscan.Report.from_json(run_cli("scan", str(bare), "--json", "-").stdout).not_checked()) == {
        "loss_mask_misaligned",
        "spelled_special",
        # Tool-call payloads are read through the tokenizer's byte table.
        "tool_call_arguments",
        "tool_call_name",
        "tool_call_undeclared",
    }
    out = run_cli("scan", str(masked), "--no-progress").stdout
    assert "loss_mask_misaligned (" not in out
    out = " ".join(run_cli("scan", str(bare), "-p", "plain", "--no-progress").stdout.split())
    assert "out_of_vocab (the profile has no vocabulary size)" in out
