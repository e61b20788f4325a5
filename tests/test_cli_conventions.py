"""What a new user runs into first: help and version, option placeholders, output paths checked before the
scan, the wrong profile, `show --prompts` against a record that does not match, and the in-process scan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tokscan
from tokscan import demo
from tokscan.api import default_tokenizer_dir
from tokscan.cli import ScanArgs, execute
from tokscan.errors import ProfileError, UsageError

from conftest import run_cli

TOK = str(default_tokenizer_dir())
COMMANDS = ("scan", "show", "align", "diff", "clean", "demo", "profiles", "codes")


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    root = tmp_path_factory.mktemp("conventions")
    path, profile = demo.write_demo(root, "deepseek", seed=4)
    return root, path, profile


def one_line_error(proc, *needles: str) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_help_short_flag_version_and_placeholders():
    top = run_cli("-h")
    assert top.returncode == 0 and "scan" in top.stdout and "--version" in top.stdout
    v = run_cli("--version")
    assert v.returncode == 0 and v.stdout.strip() == f"tokscan {tokscan.__version__}"
    for cmd in COMMANDS:
        proc = run_cli(cmd, "-h")
        assert proc.returncode == 0, (cmd, proc.stderr)
        assert "<list[str]>" not in proc.stdout and "<int range>" not in proc.stdout and "<path>" not in proc.stdout
        assert "<text>" not in proc.stdout, (cmd, proc.stdout)
    for cmd in ("scan", "show", "align", "diff"):
        assert "--json FILE|-" in run_cli(cmd, "-h").stdout, cmd
    for cmd in ("scan", "show", "align", "diff", "clean"):
        assert "-q, --quiet" in run_cli(cmd, "-h").stdout, cmd


@pytest.mark.parametrize("option", ["--json", "--html", "--junit", "--exclude"])
def test_output_paths_are_checked_before_the_scan(ds, tmp_path, option):
    _root, path, profile = ds
    target = tmp_path / "missing-dir" / "out.file"
    proc = run_cli("scan", str(path), "-p", profile, option, str(target))
    one_line_error(proc, option, "does not exist")
    assert proc.stdout == "", "nothing is scanned or printed before the error"
    proc = run_cli("scan", str(path), "-p", profile, option, str(tmp_path))
    one_line_error(proc, "is a directory")


def test_github_format_and_json_on_stdout_conflict(ds):
    _root, path, profile = ds
    one_line_error(run_cli("scan", str(path), "-p", profile, "--format", "github", "--json", "-"), "stdout")


def test_quiet_everywhere(ds, tmp_path):
    _root, path, profile = ds
    r = tmp_path / "r.json"
    assert run_cli("scan", str(path), "-p", profile, "--json", str(r), "-q").stdout == ""
    d = run_cli("diff", str(r), str(r), "-q")
    assert d.returncode == 0 and d.stdout == ""
    c = run_cli("clean", str(path), "--report", str(r), "--out", str(tmp_path / "c"), "-q")
    assert c.returncode == 0 and c.stdout == "" and (tmp_path / "c" / "tokscan-clean.json").is_file()
    s = run_cli("show", str(path), "-p", profile, "--row", "0", "-q", "--json", str(tmp_path / "s.json"))
    assert s.returncode == 0 and s.stdout == "" and json.loads((tmp_path / "s.json").read_text())["row"] == 0


def test_wrong_profile_gets_a_hint(ds):
    _root, path, _profile = ds
    proc = run_cli("scan", str(path))  # the default kimi-k2 on DeepSeek data
    assert proc.returncode == 1
    hint = [line for line in proc.stderr.splitlines() if line.startswith("hint:")]
    assert len(hint) == 1, proc.stderr
    # Given before the scan (from the corpus's first samples), so a long scan with the wrong profile is not
    # waited out to learn it; the hint after the scan is then not repeated.
    assert "100 % of the first 64 samples have no user turn for profile kimi-k2" in hint[0]
    assert "try --profile deepseek" in hint[0]
    right = run_cli("scan", str(path), "-p", "deepseek")
    assert "hint:" not in right.stderr
    from tokscan.samples.hints import preflight_hint

    early = preflight_hint(tokscan.load_profile("kimi-k2"), [str(path)])
    assert early is not None and early.better == "deepseek" and early.first == 64
    assert preflight_hint(tokscan.load_profile("deepseek"), [str(path)]) is None


def test_profile_names_aliases_and_files(ds, tmp_path):
    _root, path, _profile = ds
    listing = run_cli("profiles")
    assert listing.returncode == 0
    for name, target in tokscan._core.profile_aliases():
        assert name in listing.stdout and target in listing.stdout
    assert tokscan.load_profile("kimi-k2.5").name == tokscan.load_profile("kimi-k2").name
    one_line_error(run_cli("scan", str(path), "-p", str(tmp_path / "mine.toml")), "no such profile file")
    one_line_error(run_cli("scan", str(path), "-p", ""), "unknown profile")
    with pytest.raises(ProfileError, match="unknown profile"):
        tokscan.load_profile("kimi-k3")


def test_scan_in_process_matches_the_cli(ds, tmp_path, capsys):
    _root, path, profile = ds
    out = tmp_path / "r.json"
    code = execute(ScanArgs(paths=[str(path)], profile=profile, json_out=out, quiet=True, hint=False))
    assert code == 1
    cli = tmp_path / "cli.json"
    assert run_cli("scan", str(path), "-p", profile, "--json", str(cli), "-q").returncode == 1
    a, b = json.loads(out.read_text()), json.loads(cli.read_text())
    assert a["flagged"] == b["flagged"] and a["anomalies"] == b["anomalies"]
    with pytest.raises(UsageError, match="--exclude-code needs --exclude"):
        execute(ScanArgs(paths=[str(path)], profile=profile, exclude_code=["truncated"]))


def _shifted_prompts(root: Path) -> Path:
    lines = (root / "prompts.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for r in records:
        r.pop("id", None)
    rotated = root / "rotated.jsonl"
    rotated.write_text("".join(json.dumps(r) + "\n" for r in records[1:] + records[:1]))
    return rotated


def test_show_prompts_says_whether_the_record_matches(ds):
    root, path, profile = ds
    template = root / "deepseek-chat-template.jinja"
    base = ["show", str(path), "-p", profile, "--tokenizer", TOK, "--chat-template", str(template), "--row", "5"]
    good = run_cli(*base, "--prompts", str(root / "prompts.jsonl"), "--json", "-")
    assert good.returncode == 0, good.stderr
    check = json.loads(good.stdout)["prompt_record"]["rendering"]
    assert check["status"] == "match", check
    bad = run_cli(*base, "--prompts", str(_shifted_prompts(root)), "--json", "-")
    check = json.loads(bad.stdout)["prompt_record"]["rendering"]
    assert check["status"] == "mismatch" and check["first_difference"] >= 1, check
    text = run_cli(*base, "--prompts", str(_shifted_prompts(root)))
    assert "does NOT match the sample's prompt" in text.stdout and "first difference at token" in text.stdout
    unchecked = run_cli("show", str(path), "-p", profile, "--row", "5", "--prompts", str(root / "prompts.jsonl"))
    said = " ".join(unchecked.stdout.split())
    assert "tokens not compared: give --tokenizer DIR with a chat template" in said, unchecked.stdout


def test_a_quiet_json_scan_imports_no_terminal_or_validation_library(ds, tmp_path):
    """`scan -q --json F` (CI, benchmarks) prints nothing, so it must not pay for rich (~35 ms) or pydantic (typer
    0.29 pulled it in: ~0.2 s); the JSON it writes is the core's. A structural guard, not a timing test."""
    import subprocess
    import sys

    _root, path, profile = ds
    out = tmp_path / "r.json"
    code = (
        "import sys\n"
        "from tokscan.cli import main\n"
        f"sys.argv = ['tokscan', 'scan', {str(path)!r}, '--profile', {profile!r}, '-q', '--json', {str(out)!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    rc = e.code\n"
        "print(rc, sorted({m.split('.')[0] for m in sys.modules} & {'rich', 'pydantic', 'numpy', 'pyarrow'}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["1", "[]"], (proc.stdout, proc.stderr)
    assert json.loads(out.read_text())["n_samples"] == 240


def test_a_scan_with_its_hints_and_summary_imports_no_numpy(ds, tmp_path):
    """The default `scan` (the pre-scan profile hint, the summary, the verdict) stays without numpy (~60 ms of a
    CLI run): the hint's probe is checked in the core (`Corpus.check_ids`), and numpy is imported only when a
    hint fires or the report has summarized samples. A structural guard, not a timing test."""
    import subprocess
    import sys

    _root, path, profile = ds
    code = (
        "import sys\n"
        "from tokscan.cli import main\n"
        f"sys.argv = ['tokscan', 'scan', {str(path)!r}, '-p', {profile!r}, '--json', {str(tmp_path / 'r.json')!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    rc = e.code\n"
        "print(rc, 'numpy' in sys.modules, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stderr.split()[-2:] == ["1", "False"], proc.stderr
    assert "Anomalies" in proc.stdout and "FAIL" in proc.stdout


def test_the_hint_probe_checks_rows_as_the_validator_checks_their_ids(ds):
    _root, path, _profile = ds
    core = tokscan._core.Corpus([str(path)])
    for name in ("kimi-k2", "deepseek"):
        profile = tokscan.load_profile(name)
        ids = [s["ids"] for s in core.samples(0, 50)]
        flags, _ = tokscan._core.Validator(profile).check_each(ids)
        assert core.check_ids(profile, 0, 50) == [int(f) for f in flags]
        assert core.check_ids(profile, 45, 10**9) == [
            int(f)
            for f in tokscan._core.Validator(profile).check_each([s["ids"] for s in core.samples(45, len(core))])[0]
        ]
    assert any(core.check_ids(tokscan.load_profile("kimi-k2"), 0, 50))  # the wrong profile flags its rows


DOCS = Path(__file__).resolve().parent.parent / "docs"
REGENERATE = "run `make reference` (or `python tools/reference.py` with the extension built) to write it again"


def test_the_docs_code_table_is_the_cores():
    """Issue 21: the docs' table of codes (docs/reference/codes.md) is `tokscan codes --markdown`, generated from
    the core's catalogue (name, severity, scope, meaning in one row per code); editing either alone fails here."""
    page = (DOCS / "reference/codes.md").read_text(encoding="utf-8")
    table = run_cli("codes", "--markdown").stdout
    assert table.count("\n") == 2 + len(tokscan._core.codes())
    assert table in page, f"docs/reference/codes.md's table differs from `tokscan codes --markdown`: {REGENERATE}"


def test_the_docs_report_fields_are_the_cores(ds, tmp_path):
    """Issue 21: the docs' table of the JSON report's fields (docs/reference/report-schema.md) is `tokscan codes
    --report-schema`, generated from the core's; and a report of a scan with the optional sections on has every
    always-present field and no field the table does not document."""
    page = (DOCS / "reference/report-schema.md").read_text(encoding="utf-8")
    table = run_cli("codes", "--report-schema").stdout
    assert table in page, (
        f"docs/reference/report-schema.md's table differs from `tokscan codes --report-schema`: {REGENERATE}"
    )
    documented = {n for names, _always in tokscan._core.report_fields() for n in names}
    always = {n for names, a in tokscan._core.report_fields() if a for n in names}
    _root, path, profile = ds
    out = tmp_path / "r.json"
    args = ["--near-dup", "--draft-vocab", "1000", "--flagged-detail", "1", "--decode", "1", "--json", str(out)]
    assert run_cli("scan", str(path), "-p", profile, "-q", *args).returncode == 1
    keys = set(json.loads(out.read_text()))
    assert always <= keys, always - keys
    assert keys <= documented, keys - documented
    assert {"near_duplicates", "draft_vocab", "flagged_summarized", "decoded"} <= keys
    from tokscan.report.schema import ReportDoc

    assert set(ReportDoc.__annotations__) == documented
    assert set(ReportDoc.__required_keys__) == always


def test_a_scan_keeps_the_corpus_it_read(ds, tmp_path):
    """With `keep_corpus`, the report of a local scan holds the corpus the scan opened: its samples are fetched
    without opening the inputs again; a corpus given to the scan is kept; a report read back from JSON, or
    pickled, has none, and nor has a scan that did not ask (a JSONL corpus holds its parsed ids)."""
    import pickle

    _root, path, profile = ds
    assert tokscan.scan(path, profile).corpus is None
    report = tokscan.scan(path, profile, keep_corpus=True)
    corpus = report.corpus
    assert corpus is not None and len(corpus) == report.n_samples
    row = report.flagged[0]["row"]
    from tokscan.forensics import Corpus

    assert list(corpus.fetch(row).ids) == list(Corpus([str(path)]).fetch(row).ids)
    again_opened = tokscan.scan(corpus, profile)
    assert again_opened.findings == report.findings and again_opened.corpus.inputs == corpus.inputs
    with pytest.raises(UsageError, match="not an opened corpus"):
        tokscan.scan(corpus, profile, engine="ray")
    report.write_json(tmp_path / "r.json")
    assert tokscan.Report.load(tmp_path / "r.json").corpus is None
    again = pickle.loads(pickle.dumps(report))
    assert again.corpus is None and again.data == report.data


def test_the_cli_opens_the_corpus_and_loads_the_profile_once(ds, tmp_path, monkeypatch):
    """Issue 47: `scan --decode` with the wrong profile opens the corpus once and loads the profile once: the hint
    before the scan opens the corpus and hands it to the scan (a JSONL corpus is parsed once), which keeps it for the
    decoded excerpts; the profile is shared by the hint, the scan and the excerpts."""
    from tokscan import _core, api

    _root, path, _profile = ds
    opened, loaded, scanned = [], [], []
    real_corpus, real_load, real_scan = _core.Corpus, api.load_profile, _core.Scan

    class Counted(type):
        def __instancecheck__(cls, obj: object) -> bool:
            return isinstance(obj, real_corpus)

    class CountedCorpus(metaclass=Counted):
        def __new__(cls, *a, **k):
            corpus = real_corpus(*a, **k)
            opened.append(corpus)
            return corpus

    monkeypatch.setattr(_core, "Corpus", CountedCorpus)
    monkeypatch.setattr(_core, "Scan", lambda inputs, *a: scanned.append(inputs) or real_scan(inputs, *a))
    monkeypatch.setattr(api, "load_profile", lambda *a, **k: loaded.append(a) or real_load(*a, **k))
    code = execute(ScanArgs(paths=[str(path)], profile="kimi-k2", decode=1, json_out=tmp_path / "r.json"))
    assert code == 1
    assert len(opened) == 1 and len(loaded) == 1, (opened, loaded)
    assert len(scanned) == 1 and scanned[0] is opened[0], "the scan reads the corpus the hint opened"
    decoded = json.loads((tmp_path / "r.json").read_text())["decoded"]
    assert decoded and all(entries for entries in decoded.values())
    assert json.loads((tmp_path / "r.json").read_text())["run"]["profile_source"] == "kimi-k2"
    # Without the hint (-q), the scan opens the paths itself (within --threads), still once.
    opened.clear()
    scanned.clear()
    assert execute(ScanArgs(paths=[str(path)], profile="kimi-k2", quiet=True, json_out=tmp_path / "q.json")) == 1
    assert opened == [] and scanned == [[str(path)]]


def test_the_cli_report_is_the_scan_of_the_paths(ds, tmp_path):
    """The scan of the corpus the hint opened reports what a scan of the paths reports (but the run's timing)."""
    _root, path, profile = ds
    for p in ("kimi-k2", profile):
        hinted, quiet = tmp_path / "hinted.json", tmp_path / "quiet.json"
        assert execute(ScanArgs(paths=[str(path)], profile=p, json_out=hinted, progress=False)) == 1
        assert execute(ScanArgs(paths=[str(path)], profile=p, json_out=quiet, quiet=True)) == 1
        a, b = json.loads(hinted.read_text()), json.loads(quiet.read_text())
        for d in (a, b):
            del d["run"]["started"], d["run"]["seconds"]
        assert a == b


@pytest.mark.parametrize(
    "command", [["scan"], ["scan", "--draft-vocab", "64"], ["vocab", "--size", "64", "--out", "m.npz"]]
)
def test_scan_json_writes_the_core_text_unparsed_unless_a_mapping_leaves_it(ds, tmp_path, monkeypatch, command):
    """`scan --json F` writes the core's JSON text as it came (parsing and re-encoding a report of many flagged
    samples costs tens of milliseconds of every CLI run); only a mapping, which leaves the report for a file of
    its own, needs the parsed document. Either way the file is the same report, without the mapping."""
    from tokscan.cli import main
    from tokscan.report import Report

    _root, path, profile = ds
    parsed_before_write = []
    write = Report.write_json

    def spy(self, p):
        parsed_before_write.append(self._data is not None)
        write(self, p)

    monkeypatch.setattr(Report, "write_json", spy)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "r.json"
    argv = [
        "tokscan",
        command[0],
        str(path),
        *command[1:],
        "-p",
        profile,
        "-q",
        "--fail-on",
        "never",
        "--json",
        str(out),
    ]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as e:
        main()
    assert e.value.code == 0
    assert parsed_before_write == [command[0] == "vocab"]
    doc = json.loads(out.read_text())
    assert doc["n_samples"] > 0
    assert "mapping" not in (doc.get("draft_vocab") or {})
    assert ("draft_vocab" in doc) == (len(command) > 1)
    assert (tmp_path / "m.npz").exists() == (command[0] == "vocab")


def test_an_error_stays_one_line_whatever_the_file_is_named(tmp_path):
    """A newline in a file name is escaped: the error is one line, and no name can begin a line of the log (a
    `::error::` workflow command in GitHub Actions)."""
    d = tmp_path / "nl"
    d.mkdir()
    (d / "a\n::error::injected.parquet").write_bytes(b"PAR1junk")
    proc = run_cli("scan", str(d), "-q", "-p", "plain")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "a\\n::error::injected.parquet" in lines[0] and not any(x.startswith("::") for x in lines)
