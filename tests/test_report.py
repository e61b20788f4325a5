"""The Python Report API: a short repr, unknown codes as a UsageError that suggests the right one, write_html."""

from __future__ import annotations

import copy

import pytest

import tokscan
from tokscan import demo


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tokscan.Report:
    path, profile = demo.write_demo(tmp_path_factory.mktemp("report"), "deepseek", seed=5)
    return tokscan.scan(path, profile=profile)


@pytest.fixture
def clean(report) -> tokscan.Report:
    data = copy.deepcopy(report.data)
    data["flagged"] = []
    for a in data["anomalies"].values():
        a["count"] = 0
    return tokscan.Report(data)


def test_repr_is_one_short_line(report):
    text = repr(report)
    assert len(text) < 300 and "\n" not in text, text
    assert f"profile={report.data['profile']['name']!r}" in text and f"samples={report.n_samples:,}" in text
    assert f"flagged={len(report.flagged)}" in text and "tokens=" in text
    worst = next(iter(report.found()))
    assert f"{worst}={report.count(worst)}" in text
    assert f"+{len(report.found()) - 4} more" in text


def test_str_lists_the_codes_found(report, clean):
    text = str(report)
    assert len(text) < 1500 and len(text.splitlines()) == 2
    assert f"{report.n_samples:,} samples" in text and "profile deepseek" in text
    for code, n in report.found().items():
        assert f"{code} {n:,} ({report.anomalies[code]['severity']})" in text
    assert str(clean).endswith("no anomalies found") and "codes: none" in repr(clean)


def test_found_is_worst_first(report):
    found = report.found()
    assert set(found) == {c for c, a in report.anomalies.items() if a["count"]}
    ranks = [tokscan.report.SEVERITY_RANK[report.anomalies[c]["severity"]] for c in found]
    assert ranks == sorted(ranks, reverse=True)


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("trunc", "truncated"),
        ("truncate", "truncated"),
        ("duplicates", "duplicate"),
        ("out_of_vocabulary", "out_of_vocab"),
    ],
)
def test_unknown_code_is_a_usage_error_with_a_suggestion(report, typo, meant):
    for call in (report.count, report.flagged_rows, report.examples):
        with pytest.raises(tokscan.UsageError) as e:
            call(typo)
        msg = str(e.value)
        assert f"unknown anomaly code {typo!r}; did you mean {meant!r}?" in msg
        assert all(code in msg for code in report.anomalies)
    assert isinstance(e.value, ValueError)  # what callers catching ValueError already handle


def test_unknown_code_without_a_close_match_lists_the_codes(report):
    with pytest.raises(tokscan.UsageError) as e:
        report.count("zzz")
    message = str(e.value)
    assert "did you mean" not in message
    assert "valid codes: category_split, contaminated, departs_from_category, draft_vocab_stale" in message


def test_known_codes_still_work(report):
    assert report.count("truncated") == 1
    assert report.flagged_rows("truncated") == [f["row"] for f in report.flagged if "truncated" in f["codes"]]
    assert report.count("length_outlier") == len(report.flagged_rows("length_outlier"))


def test_write_html(report, tmp_path):
    out = tmp_path / "r.html"
    report.write_html(out, "warning", None, command="tokscan scan x", tokenizer=None, seconds=2.0)
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!doctype html>") and "tokscan scan x" in text and "2.00 s" in text
    assert "class='verdict fail'" in text and "--fail-on warning" in text
    with pytest.raises(TypeError):
        report.write_html(out, colour="blue")
    with pytest.raises(ValueError):
        report.write_html(out, "fatal")


def test_the_run_is_recorded_by_the_core_and_shown_by_a_page_written_later(tmp_path):
    """The JSON carries how the scan ran (schema 2), so an HTML page written later from it (the Python API, days
    after) dates and describes the run instead of saying "not recorded" and dating itself at writing time."""
    import json
    import re

    from conftest import run_cli

    path, profile = demo.write_demo(tmp_path / "d", "kimi", seed=1)
    out = tmp_path / "r.json"
    proc = run_cli("scan", str(path), "-p", profile, "--threads", "2", "--json", str(out), "-q")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(out.read_text())
    assert data["schema_version"] == tokscan._core.SCHEMA_VERSION == 3
    run = data["run"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", run["started"]), run
    assert run["engine"] == "local" and run["threads"] == 2 and 0 < run["seconds"] < 60
    assert run["command"][0] == "tokscan" and run["command"][1:3] == ["scan", str(path)]
    assert run["profile_source"] == str(profile) and "tokenizer" not in run
    page = tmp_path / "later.html"
    report = tokscan.Report.load(out)
    report.write_html(page)
    text = page.read_text()
    day, clock = run["started"][:10], run["started"][11:19]
    assert f"{day} {clock} UTC" in text and "not recorded" not in text
    assert "tokscan scan" in text and "local · 2 thread(s)" in text
    assert report.findings == {k: v for k, v in data.items() if k != "run"}
    # A report written before the field (schema 1) still loads; its page says what it does not know.
    old = {k: v for k, v in data.items() if k != "run"} | {"schema_version": 1}
    (tmp_path / "old.json").write_text(json.dumps(old))
    legacy = tokscan.Report.load(tmp_path / "old.json")
    assert legacy.run is None and legacy.findings == report.findings | {"schema_version": 1}
    legacy.write_html(tmp_path / "old.html")
    assert "not recorded" in (tmp_path / "old.html").read_text()
    (tmp_path / "future.json").write_text(json.dumps(old | {"schema_version": 99}))
    with pytest.raises(tokscan.ReportError, match="reads 1, 2, 3"):
        tokscan.Report.load(tmp_path / "future.json")


def test_a_report_of_the_wrong_shape_is_a_report_error_for_every_reader(tmp_path):
    """`diff`, `scan --baseline` and `clean --report` given a report whose fields are of other types than a
    scan writes (edited by hand, or nested past what JSON reading allows): one line naming the file, exit 2,
    never an internal error."""
    import json

    from conftest import run_cli

    path, profile = demo.write_demo(tmp_path / "d", "deepseek", seed=5)
    good = tmp_path / "good.json"
    tokscan.scan(path, profile=profile).write_json(good)
    data = json.loads(good.read_text())

    def edited(name, change):
        d = copy.deepcopy(data)
        change(d)
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(d))
        return p

    cat = next(iter(data["categories"]))
    bad = [
        edited("lengths", lambda d: d["categories"][cat].__setitem__("lengths", True)),
        edited("count", lambda d: d["anomalies"]["truncated"].__setitem__("count", [1])),
        edited("verdict", lambda d: d.__setitem__("verdict", "x")),
        edited("row", lambda d: d["flagged"][0].__setitem__("row", 2**70)),
    ]
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    # The fields each command reads: `clean` reads no length statistics, `diff` and `--baseline` no rows.
    unread = {("lengths", "clean"), ("row", "diff"), ("row", "scan")}
    for p in [*bad, deep]:
        for args in (
            ("diff", str(good), str(p)),
            ("scan", str(path), "-p", str(profile), "--baseline", str(p), "-q"),
            ("clean", str(path), "--report", str(p), "--out", str(tmp_path / f"out-{p.stem}")),
        ):
            proc = run_cli(*args)
            if (p.stem, args[0]) in unread:
                assert proc.returncode in (0, 1), (args, proc.stderr)
                continue
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1, (args, proc.stderr)
            assert p.name in lines[0] and "internal error" not in lines[0], (args, proc.stderr)
