"""One policy (ignores + a rate tolerance + a severity override) gives the same decisions everywhere: the exit
code, the JSON report's statuses and verdict, `--exclude`, `tokscan clean`, the Python API and the Validator.
The core's policy engine decides all of them."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tokscan

from conftest import run_cli


@pytest.fixture(scope="module")
def corpus(samples, layouts):
    return layouts["parquet_full"], samples


def error_codes() -> list[str]:
    return [c for c, (sev, _d) in tokscan.CODE_INFO.items() if sev == "error"]


def write_config(path, policy: dict[str, str | int]) -> None:
    lines = ["[policy]"] + [f"{c} = {json.dumps(v)}" for c, v in policy.items()]
    path.write_text("\n".join(lines) + "\n")


def run(corpus_path, tmp_path, policy, name):
    cfg = tmp_path / f"{name}.toml"
    write_config(cfg, policy)
    report, drop = tmp_path / f"{name}.json", tmp_path / f"{name}.txt"
    proc = run_cli("scan", str(corpus_path), "--config", str(cfg), "--json", str(report), "--exclude", str(drop), "-q")
    assert proc.returncode in (0, 1), proc.stderr
    out = tmp_path / f"{name}-clean"
    cleaned = run_cli("clean", str(corpus_path), "--report", str(report), "--out", str(out), "--config", str(cfg))
    assert cleaned.returncode == 0, cleaned.stderr
    manifest = json.loads((out / "tokscan-clean.json").read_text())
    return proc.returncode, json.loads(report.read_text()), drop.read_text().split(), manifest


def test_ignored_and_tolerated_codes_pass_everywhere(corpus, tmp_path):
    path, samples = corpus
    truncated_rate = 100 * sum("truncated" in s.expected for s in samples) / len(samples)
    policy: dict[str, str | int] = {c: "ignore" for c in error_codes() if c != "truncated"}
    policy["truncated"] = f"{truncated_rate + 1:.2f}%"
    code, data, drop, manifest = run(path, tmp_path, policy, "pass")
    assert code == 0
    assert data["verdict"] == {"fail_on": "error", "policy": policy, "passed": True, "failing": {}}
    assert data["anomalies"]["truncated"]["status"] == "tolerated"
    for c in error_codes():
        if c != "truncated" and data["anomalies"][c]["count"]:
            assert data["anomalies"][c]["status"] == "ignored", c
    assert drop == [] and manifest["removed"] == []
    report = tokscan.Report.load(tmp_path / "pass.json")
    assert report.failures("error", policy) == {} and report.exit_code("error", policy) == 0


def test_a_severity_override_fails_the_run_and_selects_exactly_its_samples(corpus, tmp_path):
    path, samples = corpus
    policy: dict[str, str | int] = {c: "ignore" for c in error_codes()}
    policy["repetition"] = "error"  # a warning by default
    code, data, drop, manifest = run(path, tmp_path, policy, "override")
    rep = data["anomalies"]["repetition"]
    assert code == 1 and rep["severity"] == "error" and rep["status"] == "fails"
    assert data["verdict"]["passed"] is False and data["verdict"]["failing"] == {"repetition": rep["count"]}
    want = sorted(str(f["sample_id"]) for f in data["flagged"] if "repetition" in f["codes"])
    assert sorted(drop) == want and len(want) == rep["count"] > 0
    assert sorted(str(r["sample_id"]) for r in manifest["removed"]) == want
    # The Validator decides each sample as the scan does: bad exactly when it has a failing code.
    v = tokscan.Validator("kimi-k2", policy=policy)
    result = v.check_each([np.asarray(s.prompt + s.completion, dtype=np.int64) for s in samples])
    bad = {samples[i].sample_id for i in result.bad_rows}
    by_scan = {f["sample_id"] for f in data["flagged"] if "repetition" in f["codes"]}
    assert bad == by_scan


def test_bad_policy_values_are_one_named_error_everywhere(corpus, tmp_path):
    path, _ = corpus
    for value in ("5", "120%", "fatal", -1, True):
        cfg = tmp_path / "bad.toml"
        write_config(cfg, {"truncated": value})
        proc = run_cli("scan", str(path), "--config", str(cfg))
        assert proc.returncode == 2 and "policy.truncated" in proc.stderr and "Traceback" not in proc.stderr
        with pytest.raises(tokscan.UsageError, match=r"policy\.truncated"):
            tokscan.Validator("kimi-k2", policy={"truncated": value})
        with pytest.raises(tokscan.UsageError, match=r"policy\.truncated"):
            tokscan.scan(path, policy={"truncated": value})
    for bad_fail_on in ("fatal", ""):
        with pytest.raises(tokscan.UsageError, match="fail_on"):
            tokscan.Validator("kimi-k2", fail_on=bad_fail_on)
        with pytest.raises(tokscan.UsageError, match="fail_on"):
            tokscan.scan(path, fail_on=bad_fail_on)


def test_statuses_agree_with_a_plain_python_oracle(corpus):
    """The core's decisions against the rules written out in Python, for every fail_on."""
    path, _ = corpus
    report = tokscan.scan(path)
    rank = {"info": 0, "warning": 1, "error": 2}
    n = report.n_samples
    found = [c for c, a in report.anomalies.items() if a["count"]]
    policy: dict[str, str | int] = {found[0]: "ignore", found[1]: 1, found[2]: "0.1%", found[3]: "info"}
    for fail_on in ("error", "warning", "info", "never"):
        got = report.statuses(fail_on, policy)
        for c, a in report.anomalies.items():
            rule = policy.get(c)
            sev = rule if rule in rank else tokscan.CODE_INFO[c][0]
            count = a["count"]
            if count == 0:
                want = "clean"
            elif rule == "ignore":
                want = "ignored"
            elif fail_on == "never" or rank[sev] < rank[fail_on]:
                want = "below_fail_on"
            elif isinstance(rule, int) and count <= rule:
                want = "tolerated"
            elif isinstance(rule, str) and rule.endswith("%") and 100 * count / n <= float(rule[:-1]):
                want = "tolerated"
            else:
                want = "fails"
            assert got[c] == want, (fail_on, c, rule, count)
