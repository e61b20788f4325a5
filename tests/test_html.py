"""The HTML report is self-contained and renders in a real browser (headless Chromium)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tokscan import demo
from tokscan.api import default_tokenizer_dir

from conftest import run_cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture(scope="module")
def html_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("html")
    path, profile = demo.write_demo(root, "deepseek", seed=3)
    out = root / "report.html"
    proc = run_cli(
        "scan",
        str(path),
        "-p",
        profile,
        "--html",
        str(out),
        "--decode",
        "1",
        "--tokenizer",
        str(default_tokenizer_dir()),
        "-q",
    )
    assert proc.returncode == 1, proc.stderr
    return out


def test_html_is_self_contained(html_report):
    text = html_report.read_text()
    assert "<table id='anomalies'>" in text and text.count('<svg class="hist"') == 8
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), "no external assets"
    assert "<script" not in text
    assert "Decoded excerpts" in text and 'class="seg mark"' in text


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
def test_html_renders_in_headless_chromium(html_report, tmp_path):
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
    url = html_report.resolve().as_uri()
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count('class="hist"') == 8
    assert 'id="anomalies"' in dom.stdout and "unterminated_thinking" in dom.stdout
    shot = tmp_path / "report.png"
    subprocess.run(
        [*base, f"--screenshot={shot}", "--window-size=1200,1600", url], capture_output=True, timeout=120, check=True
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a real, non-blank page
