"""CI integration: configuration discovery and override order, fail policies, drift, JUnit and GitHub output."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import tokscan
from tokscan.drift import compare

import synth
from conftest import run_cli


@pytest.fixture(scope="module")
def truncated_corpus(tmp_path_factory) -> Path:
    """200 clean samples, 2 of them truncated (1 %)."""
    samples = synth.build_corpus(n_clean=200, seed=13, anomalies_per_code=0)
    g = synth.Generator(99)
    for row in (50, 150):
        samples[row] = g.anomalous("truncated", samples[row].sample_id, samples[row].category, samples[:row])
    return synth.write_parquet_full(samples, tmp_path_factory.mktemp("trunc") / "data", n_shards=1)


def write_config(folder: Path, body: str, name: str = "tokscan.toml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_text(body)
    return p


@pytest.mark.parametrize(
    ("policy", "fail_on", "code"),
    [
        ("", None, 1),
        ('truncated = "1%"', None, 0),
        ('truncated = "0.5%"', None, 1),
        ("truncated = 2", None, 0),
        ("truncated = 1", None, 1),
        ('truncated = "ignore"', None, 0),
        ('truncated = "info"', None, 0),
        ('truncated = "info"', "info", 1),
        ('truncated = "warning"', "warning", 1),
    ],
)
def test_policy_forms_change_the_exit_code(truncated_corpus, tmp_path, policy, fail_on, code):
    cfg = write_config(tmp_path / "proj", f"[policy]\n{policy}\n")
    args = ["scan", str(truncated_corpus), "-q", "--config", str(cfg)]
    if fail_on:
        args += ["--fail-on", fail_on]
    proc = run_cli(*args)
    assert proc.returncode == code, proc.stderr


def test_config_discovery_and_override_order(truncated_corpus, tmp_path):
    root = tmp_path / "repo"
    write_config(root, f'[tool.tokscan]\npaths = ["{truncated_corpus}"]\nfail_on = "never"\n', "pyproject.toml")
    sub = root / "a" / "b"
    sub.mkdir(parents=True)
    assert run_cli("scan", "-q", cwd=sub).returncode == 0  # paths and fail_on from pyproject.toml upward
    assert run_cli("scan", "-q", "--fail-on", "error", cwd=sub).returncode == 1  # the flag wins
    write_config(root / "a", '[policy]\nlength_outlier = "ignore"\n')  # nearer tokscan.toml wins: no paths now
    proc = run_cli("scan", "-q", cwd=sub)
    assert proc.returncode == 2 and "no input paths" in proc.stderr


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("colour = 1\n", "'colour'"),
        ("[policy]\nnot_a_code = 1\n", "policy.not_a_code"),
        ('[policy]\ntruncated = "lots"\n', "policy.truncated"),
        ('[policy]\ntruncated = "150%"\n', "policy.truncated"),
        ("[drift]\nsamplez = 0.1\n", "drift.samplez"),
        ('[columns]\ntokens = "x"\n', "columns.tokens"),
        ('fail_on = "sometimes"\n', "fail_on"),
        ("threads = 'two'\n", "threads"),
        ("[policy\n", "invalid TOML"),
    ],
)
def test_invalid_config_is_a_usage_error_naming_the_key(truncated_corpus, tmp_path, body, needle):
    cfg = write_config(tmp_path, body)
    proc = run_cli("scan", str(truncated_corpus), "--config", str(cfg))
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and needle in line and str(cfg) in line, line


def shorten_responses(samples: list[synth.Sample], keep: float) -> None:
    for s in samples:
        if synth.UNTHINK in s.completion and s.completion[-1] == synth.IM_END:
            i = s.completion.index(synth.UNTHINK)
            resp = s.completion[i + 1 : -1]
            n = int(len(resp) * keep)
            s.completion = [*s.completion[: i + 1], *resp[:n], synth.IM_END]


@pytest.fixture(scope="module")
def drift_reports(tmp_path_factory):
    root = tmp_path_factory.mktemp("drift")
    base = synth.build_corpus(n_clean=800, seed=17, anomalies_per_code=0)
    new = synth.build_corpus(n_clean=800, seed=17, anomalies_per_code=0)
    b3 = [i for i, s in enumerate(new) if s.category == "B3_magicoder"]
    drop = set(b3[::2])  # B3 loses half its samples
    new = [s for i, s in enumerate(new) if i not in drop]
    shorten_responses(new, 0.6)  # completions 40 % shorter responses
    rb = tokscan.scan(synth.write_parquet_full(base, root / "base", n_shards=2))
    rn = tokscan.scan(synth.write_parquet_full(new, root / "new", n_shards=2))
    rb.write_json(root / "base.json")
    rn.write_json(root / "new.json")
    return root, rb, rn


def test_diff_reports_exactly_the_injected_drift(drift_reports):
    _root, rb, rn = drift_reports
    assert compare(rb, rb) == []
    drifts = compare(rb, rn)
    counts = {(d.check, d.category) for d in drifts if d.check in ("samples", "tokens")}
    assert counts == {("samples", "B3_magicoder"), ("tokens", "B3_magicoder")}
    assert {d.subject for d in drifts if d.check in ("median", "ks")} == {"response"}
    assert ("median", "all") in {(d.check, d.category) for d in drifts}
    assert {d.check for d in drifts} <= {"samples", "tokens", "median", "ks"}


def test_diff_cli_and_baseline(drift_reports):
    root, _rb, _rn = drift_reports
    same = run_cli("diff", str(root / "base.json"), str(root / "base.json"))
    assert same.returncode == 0 and "No drift" in same.stdout
    proc = run_cli("diff", str(root / "base.json"), str(root / "new.json"), "--json", "-")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert any(d["check"] == "samples" and d["category"] == "B3_magicoder" for d in doc["drift"])
    proc = run_cli("scan", str(root / "new"), "--baseline", str(root / "base.json"), "--fail-on", "never")
    assert proc.returncode == 1 and "Drift from" in proc.stdout
    proc = run_cli("scan", str(root / "base"), "--baseline", str(root / "base.json"))
    assert proc.returncode == 0 and "No drift" in proc.stdout


def test_a_drifted_baseline_fails_the_json_html_and_terminal_verdicts_too(drift_reports, tmp_path):
    """With --baseline the exit code, JUnit and GitHub output said the run failed while the JSON's verdict said
    it passed, held no drift, and the HTML and terminal said PASS."""
    root, _rb, _rn = drift_reports
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    args = ("scan", str(root / "new"), "--baseline", str(root / "base.json"), "--fail-on", "never")
    proc = run_cli(*args, "--json", str(out), "--html", str(page))
    assert proc.returncode == 1, proc.stderr
    assert "FAIL (--baseline):" in proc.stdout and "PASS" not in proc.stdout
    doc = json.loads(out.read_text())
    n = len(doc["drift"]["drifted"])
    assert n and doc["verdict"]["passed"] is False and doc["verdict"]["drift"] == n
    assert doc["drift"]["baseline"] == str(root / "base.json")
    assert {"samples", "median"} <= {d["check"] for d in doc["drift"]["drifted"]}
    assert "verdict fail" in page.read_text() and "drift check(s)" in page.read_text()
    report = tokscan.Report.load(out)
    assert report.exit_code() == 1 and report.drifted() == n
    # The same corpus as its baseline: the comparison is recorded, nothing drifted, the verdict is the scan's.
    proc = run_cli("scan", str(root / "base"), "--baseline", str(root / "base.json"), "--json", str(out))
    doc = json.loads(out.read_text())
    assert proc.returncode == 0 and doc["drift"]["drifted"] == [] and doc["verdict"]["passed"] is True
    assert "drift" not in doc["verdict"]


def test_diff_rejects_unknown_schema_version(drift_reports, tmp_path):
    root, _rb, _rn = drift_reports
    future = tmp_path / "future.json"
    now = f'"schema_version": {tokscan._core.SCHEMA_VERSION}'
    future.write_text((root / "base.json").read_text().replace(now, '"schema_version": 7'))
    proc = run_cli("diff", str(root / "base.json"), str(future))
    assert proc.returncode == 2 and "schema_version 7" in proc.stderr


def test_junit_output_parses_and_carries_counts_and_examples(truncated_corpus, drift_reports, tmp_path):
    out = tmp_path / "junit.xml"
    proc = run_cli("scan", str(truncated_corpus), "-q", "--junit", str(out))
    assert proc.returncode == 1
    tree = ET.parse(out).getroot()
    assert tree.tag == "testsuites"
    suite = tree.find("testsuite[@name='tokscan.anomalies']")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == set(tokscan.CODES)
    assert suite.get("tests") == str(len(tokscan.CODES)) and suite.get("failures") == "1"
    failure = cases["truncated"].find("failure")
    assert failure is not None and "2 sample(s)" in failure.get("message") and "s000050" in failure.get("message")
    assert cases["duplicate"].find("failure") is None
    root, _rb, _rn = drift_reports
    out2 = tmp_path / "drift.xml"
    run_cli("diff", str(root / "base.json"), str(root / "new.json"), "--junit", str(out2))
    d = ET.parse(out2).getroot().find("testsuite[@name='tokscan.drift']")
    failed = {c.get("name") for c in d.findall("testcase") if c.find("failure") is not None}
    assert failed == {"samples", "tokens", "median", "ks"}


def test_github_annotations(truncated_corpus):
    proc = run_cli("scan", str(truncated_corpus), "--format", "github")
    assert proc.returncode == 1
    lines = proc.stdout.strip().splitlines()
    err = [line for line in lines if "title=tokscan truncated" in line]
    assert len(err) == 1 and err[0].startswith("::error file=")
    assert "::2 sample(s) (1.00%25) flagged truncated" in err[0]  # % is escaped in workflow commands
    assert all(line.startswith(("::error ", "::warning ", "::notice ")) for line in lines)
    proc = run_cli("scan", str(truncated_corpus), "--format", "json")
    assert json.loads(proc.stdout)["n_samples"] == 200
