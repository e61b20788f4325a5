"""Install instructions that work from this repository: no package named tokscan is published, so no hint,
line of the README or the docs, or example may say `pip install tokscan` / `'tokscan[extra]'`; each "needs ..."
error names the extra's real requirements; the example GitHub workflow installs from a checkout and its scan step
runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tokscan.errors import install_hint

import synth

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED_NAME = re.compile(r"pip install\s+['\"]?tokscan(\[|['\"\s]|$)", re.M)


def test_no_instruction_installs_an_unpublished_name():
    docs = [ROOT / "README.md", ROOT / "benches/README.md", *ROOT.glob("docs/**/*.md")]
    files = [*docs, *ROOT.glob("examples/*"), *ROOT.glob("python/tokscan/**/*.py")]
    assert ROOT / "docs/install.md" in files  # the page that says how to install is among them
    offenders = [f"{f.relative_to(ROOT)}: {m.group(0)}" for f in files for m in PUBLISHED_NAME.finditer(f.read_text())]
    assert offenders == []


@pytest.mark.parametrize("extra", ["tokenizer", "hf", "ray", "torch"])
def test_install_hints_name_the_extras_requirements(extra):
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    wanted = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][extra]
    hint = install_hint(extra)
    assert hint.startswith(f"{sys.executable} -m pip install ") or hint.startswith(f"'{sys.executable}'")
    for req in wanted:
        assert req.replace(" ", "") in hint, (req, hint)
    assert "tokscan[" not in hint


def test_the_workflow_installs_from_a_checkout_and_its_scan_step_runs(tmp_path):
    yaml = pytest.importorskip("yaml")
    flow = yaml.safe_load((ROOT / "examples/github-actions.yml").read_text())
    steps = flow["jobs"]["tokscan"]["steps"]
    install = next(s for s in steps if s.get("name") == "Install tokscan")
    checkout = next(s for s in steps if s.get("name") == "Check out tokscan")
    assert install["run"].strip() == f"pip install ./{checkout['with']['path']}"
    assert not any("download-artifact" in s.get("uses", "") for s in steps), "artifacts do not cross runs"
    scan = next(s for s in steps if s.get("name") == "Scan")

    # The scan step as written, in a corpus repository: first without a baseline, then with one.
    samples = synth.build_corpus(n_clean=40, seed=5, anomalies_per_code=0)
    synth.write_parquet_full(samples, tmp_path / "data", n_shards=1)
    (tmp_path / "tokscan.toml").write_text('profile = "kimi-k2"\npaths = ["data/"]\n')
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def step() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", scan["run"]], cwd=tmp_path, env=env, capture_output=True, text=True)

    first = step()
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "report.json").is_file() and (tmp_path / "junit.xml").is_file()
    assert "tokscan.drift" not in (tmp_path / "junit.xml").read_text()
    (tmp_path / "report.json").rename(tmp_path / "tokscan-baseline.json")
    second = step()
    assert second.returncode == 0, second.stderr
    assert "tokscan.drift" in (tmp_path / "junit.xml").read_text()
