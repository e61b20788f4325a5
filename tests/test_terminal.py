"""The CLI as a person runs it: in a real pseudo-terminal (so rich draws its progress bar and sizes tables to
the window), at 80 and 160 columns. Piped output hides a whole class of crashes; this harness does not."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from dataclasses import dataclass
from pathlib import Path

import pytest

from tokscan import demo
from tokscan.api import default_tokenizer_dir

TOK = str(default_tokenizer_dir())
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
WIDTHS = (80, 160)


@dataclass
class TermRun:
    code: int
    raw: str  # every byte the program wrote, escape codes included
    text: str  # the characters written, escape codes removed; a redrawn line is kept once per redraw

    @property
    def segments(self) -> list[str]:
        """Every run of characters drawn between two carriage returns / newlines: each must fit the window."""
        return re.split(r"[\r\n]", self.text)


def run_in_terminal(args: list[str], cols: int, rows: int = 60, cwd: Path | None = None, timeout: float = 300):
    """Runs `tokscan ARGS` with stdin/stdout/stderr on a new pseudo-terminal of `cols` x `rows`."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "TERM")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokscan", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    os.close(slave)
    chunks: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                proc.kill()
                raise TimeoutError(f"tokscan {' '.join(args)} produced nothing for {timeout} s")
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    code = proc.wait(timeout=timeout)
    raw = b"".join(chunks).decode("utf-8", errors="replace")
    return TermRun(code, raw, ANSI.sub("", raw).replace("\r\n", "\n"))


def assert_clean(run: TermRun, cols: int, expect: int) -> None:
    assert "Traceback" not in run.text, run.text
    assert run.code == expect, run.text
    for seg in run.segments:
        assert len(seg) <= cols, f"line wider than {cols} columns: {seg!r}"


@pytest.fixture(scope="module")
def demo_corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("terminal")
    path, profile = demo.write_demo(root, "deepseek", seed=5)
    return root, path, profile


@pytest.mark.parametrize("cols", WIDTHS)
def test_scan_in_a_terminal_draws_progress_and_fits(demo_corpus, tmp_path, cols):
    _root, path, profile = demo_corpus
    report = tmp_path / "r.json"
    run = run_in_terminal(["scan", str(path), "-p", profile, "--tokenizer", TOK, "--json", str(report)], cols)
    assert_clean(run, cols, expect=1)
    assert "scanning" in run.raw, "the progress bar was never drawn"
    assert "Per category" in run.text and "FAIL" in run.text
    # The header and the verdict break only between their parts: no value is split across lines.
    lines = run.text.splitlines()
    assert any(re.search(r"(^| · )[\d,]+ samples · [\d.]+[kMB]? tokens( · |$)", line) for line in lines), run.text
    assert any(re.match(r"FAIL \(--fail-on error\): \d+ code\(s\) fail the run, in \d+ sample\(s\)$", x) for x in lines)
    # Nothing is cut: every category name and every p99 value appears whole.
    data = json.loads(report.read_text())
    assert "…" not in run.text, run.text
    for name, c in data["categories"].items():
        assert name in run.text
        p99 = c["lengths"]["total"]["p99"]
        assert f"{p99:,.0f}" in run.text or f"{p99 / 1000:.1f}k" in run.text


@pytest.mark.parametrize("cols", WIDTHS)
def test_show_diff_clean_align_in_a_terminal(demo_corpus, tmp_path, cols):
    root, path, profile = demo_corpus
    r1 = tmp_path / "r1.json"
    scan = run_in_terminal(["scan", str(path), "-p", profile, "--json", str(r1), "-q"], cols)
    assert_clean(scan, cols, expect=1)
    flagged = json.loads(r1.read_text())["flagged"][0]

    show = run_in_terminal(["show", str(path), "-p", profile, "--row", str(flagged["row"])], cols)
    assert_clean(show, cols, expect=0)
    assert flagged["codes"][0] in show.text or "no per-sample anomalies" in show.text

    diff = run_in_terminal(["diff", str(r1), str(r1)], cols)
    assert_clean(diff, cols, expect=0)
    assert "No drift" in diff.text

    clean = run_in_terminal(["clean", str(path), "--report", str(r1), "--out", str(tmp_path / "clean")], cols)
    assert_clean(clean, cols, expect=0)
    assert "kept" in clean.text

    template = root / "deepseek-chat-template.jinja"
    align = run_in_terminal(
        ["align", str(path), "--prompts", str(root / "prompts.jsonl"), "--tokenizer", TOK, "--chat-template",
         str(template)],
        cols,
    )  # fmt: skip
    assert "Traceback" not in align.text and align.code in (0, 1), align.text
    assert "ALIGNED" in align.text or "MISALIGNED" in align.text


def test_show_elides_a_long_sample_in_a_terminal(tmp_path):
    """A 33,000-token response without a tokenizer: every id would be ~190 KB in one box. The terminal view keeps
    each long segment's ends and says how many tokens it left out; `--full` (piped here, so not paged) and the
    JSON keep every token."""
    import synth

    s = synth.build_corpus(n_clean=3, seed=1, anomalies_per_code=0)[0]
    s.completion = s.completion[:-1] + [1000 + i % 7919 for i in range(33_000)] + s.completion[-1:]
    path = synth.write_numpy([s], tmp_path / "long")
    for cols in WIDTHS:
        run = run_in_terminal(["show", str(path), "--row", "0"], cols)
        assert_clean(run, cols, expect=0)
        assert re.search(r"…[\s│]+3[0-9],[0-9]{3}[\s│]+tokens[\s│]+…", run.text), run.text[-2000:]
        assert "--full shows every token" in run.text
        assert len(run.text) < 40_000, len(run.text)
    full = subprocess.run(
        [sys.executable, "-m", "tokscan", "show", str(path), "--row", "0", "--full"], capture_output=True, text=True
    )
    assert full.returncode == 0 and "tokens …" not in full.stdout and len(full.stdout) > 150_000
    doc = json.loads(
        subprocess.run(
            [sys.executable, "-m", "tokscan", "show", str(path), "--row", "0", "--json", "-"],
            capture_output=True,
            text=True,
        ).stdout
    )
    assert sum(seg["end"] - seg["start"] for seg in doc["segments"]) == len(s.ids)
    assert all("elided" not in seg for seg in doc["segments"])


def test_errors_in_a_terminal_are_one_line(demo_corpus, tmp_path):
    _root, path, profile = demo_corpus
    run = run_in_terminal(["scan", str(path), "-p", profile, "--json", str(tmp_path / "nope" / "r.json")], 80)
    assert run.code == 2 and "Traceback" not in run.text
    lines = [line for line in run.text.splitlines() if line.strip()]
    assert len(lines) == 1 and "does not exist" in lines[0], run.text
    assert "scanning" not in run.raw, "the output path must be checked before the scan starts"
