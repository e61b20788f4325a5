"""Closed vocabularies answer a typo with the nearest valid word, a file that is no corpus says so, and a scan
says where it wrote each file."""

from __future__ import annotations

import pytest

import tokscan

from conftest import run_cli


def one_line_error(proc, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_typos_get_the_nearest_word(layouts, tmp_path):
    path = str(layouts["parquet_full"])
    one_line_error(
        run_cli("scan", path, "--exclude", str(tmp_path / "x.txt"), "--exclude-code", "truncatd"),
        "truncatd",
        "did you mean 'truncated'?",
    )
    one_line_error(run_cli("scan", path, "-p", "deepsek"), "did you mean 'deepseek'?")
    cfg = tmp_path / "tokscan.toml"
    cfg.write_text('[policy]\nrepetiton = "ignore"\n')
    one_line_error(run_cli("scan", path, "--config", str(cfg)), "policy.repetiton", "did you mean 'repetition'?")
    cfg.write_text('fail_on = "eror"\n')
    one_line_error(run_cli("scan", path, "--config", str(cfg)), "did you mean 'error'?")
    with pytest.raises(tokscan.UsageError, match=r"did you mean \"truncated\"\?"):
        tokscan.scan(path, policy={"truncatd": "ignore"})
    with pytest.raises(tokscan.UsageError, match=r"did you mean \"warning\"\?"):
        tokscan.scan(path, fail_on="warnng")


def test_a_file_of_no_known_format_is_not_called_corrupt_parquet(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# not a corpus\n")
    one_line_error(run_cli("scan", str(readme)), "README.md", "not a corpus file (no known format")


def test_scan_says_where_it_wrote_each_file(layouts, tmp_path):
    outs = {k: tmp_path / f"r.{k}" for k in ("json", "html", "xml", "txt")}
    proc = run_cli(
        "scan",
        str(layouts["parquet_full"]),
        "--no-progress",
        "--json",
        str(outs["json"]),
        "--html",
        str(outs["html"]),
        "--junit",
        str(outs["xml"]),
        "--exclude",
        str(outs["txt"]),
    )
    assert proc.returncode == 1, proc.stderr
    for what, key in (("JSON report", "json"), ("HTML report", "html"), ("JUnit XML", "xml")):
        assert f"wrote {what} -> {outs[key]}" in proc.stdout
    assert "wrote exclusion list: " in proc.stdout and f"-> {outs['txt']}" in proc.stdout
    quiet = run_cli("scan", str(layouts["parquet_full"]), "-q", "--json", str(outs["json"]))
    assert quiet.stdout == ""
