"""The Makefile's virtualenv set-up on the oldest supported Python: the dependency list read from
pyproject.toml (no `tomllib` before 3.11), and the marker touched only when the recipe succeeded.

pip itself is stubbed (`PIP=:`): what is tested is what the Makefile asks it to install, not the network."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OLDEST = "3.10"


def _python(version: str) -> str | None:
    """A working `pythonX.Y`: on the PATH or installed by pyenv (whose shim on the PATH may refuse to run it)."""
    candidates = [shutil.which(f"python{version}")]
    pyenv = Path("~/.pyenv/versions").expanduser()
    candidates += sorted(str(p) for p in pyenv.glob(f"{version}.*/bin/python{version}"))
    for c in candidates:
        if c and subprocess.run([c, "-c", ""], capture_output=True).returncode == 0:
            return c
    return None


def _checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    for name in ("Makefile", "pyproject.toml", "tools/requirements.py"):
        shutil.copy(ROOT / name, repo / name)
    return repo


def _make(repo: Path, python: str, *targets: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-C", str(repo), *targets, f"PYTHON={python}", "PIP=:"],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _expected(*extras: str) -> list[str]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out: list[str] = []
    for req in [*project["dependencies"], *(r for e in extras for r in project["optional-dependencies"][e])]:
        if req not in out:
            out.append(req)
    return out


needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


@needs_make
def test_venv_recipe_reads_the_dependencies_on_the_oldest_python(tmp_path):
    python = _python(OLDEST)
    if python is None:
        pytest.skip(f"python{OLDEST} is not installed (the oldest Python pyproject.toml supports)")
    repo = _checkout(tmp_path)
    proc = _make(repo, python, ".venv/.dev")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    venv = repo / ".venv"
    version = subprocess.run([venv / "bin/python", "--version"], capture_output=True, text=True).stdout
    assert version.startswith(f"Python {OLDEST}."), version
    assert (venv / "requirements-runtime.txt").read_text().splitlines() == _expected("tokenizer")
    assert (venv / "requirements-dev.txt").read_text().splitlines() == _expected("tokenizer", "dev", "docs")
    assert (venv / ".runtime").exists() and (venv / ".dev").exists()
    assert "ModuleNotFoundError" not in proc.stderr
    proc = _make(repo, python, ".venv/.docs")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (venv / "requirements-docs.txt").read_text().splitlines() == _expected("docs")


@needs_make
def test_a_failed_venv_recipe_leaves_no_marker_and_is_redone(tmp_path):
    repo = _checkout(tmp_path)
    good = (repo / "pyproject.toml").read_text()
    (repo / "pyproject.toml").write_text(good.replace("[project.optional-dependencies]", "[project.nothing]"))
    proc = _make(repo, sys.executable, "venv")
    assert proc.returncode != 0
    assert "no extra 'tokenizer'" in proc.stderr
    assert not (repo / ".venv/.runtime").exists()
    (repo / ".venv/half-made").touch()
    (repo / "pyproject.toml").write_text(good)
    proc = _make(repo, sys.executable, "venv")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (repo / ".venv/.runtime").exists()
    assert not (repo / ".venv/half-made").exists(), "the half-made virtualenv was reused"


@needs_make
def test_a_python_older_than_supported_is_refused_by_name(tmp_path):
    python = _python("3.9")
    if python is None:
        pytest.skip("python3.9 is not installed")
    repo = _checkout(tmp_path)
    proc = _make(repo, python, "venv")
    assert proc.returncode != 0
    assert "tokscan needs Python >= 3.10" in proc.stderr
    assert not (repo / ".venv").exists()


def _features(*args: str) -> dict[str, str]:
    """`crate version -> enabled features` as cargo resolves them for `cargo tree ARGS` (no compiling)."""
    out = subprocess.run(
        ["cargo", "tree", "--prefix", "none", "-f", "{p}|{f}", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=True,
    ).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        if "|" in line:
            pkg, feats = line.removesuffix(" (*)").split("|", 1)
            found[" ".join(pkg.split()[:2])] = feats.removesuffix(" (*)")
    return found


@needs_make
@pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo is not installed")
def test_the_rust_tests_reuse_the_extension_build():
    """`make test-rust` compiles nothing `make build` compiled: every crate both builds share resolves to the same
    features (a different feature set recompiles it and everything above it: arrow, parquet, the core)."""
    dry = subprocess.run(["make", "-n", "-C", str(ROOT), "test-rust", "build"], capture_output=True, text=True)
    test_cmd = next(line for line in dry.stdout.splitlines() if line.startswith("cargo test"))
    build_cmd = next(line for line in dry.stdout.splitlines() if "maturin develop" in line)
    profile = test_cmd.split("--profile ")[1].split()[0]
    assert build_cmd.split("--profile ")[1].split()[0] == profile, (test_cmd, build_cmd)  # one profile
    packages = [a for flag, a in zip(test_cmd.split(), test_cmd.split()[1:], strict=False) if flag == "-p"]
    extension = _features("-p", "tokscan-py", "-e", "normal,build")
    tests = _features(*(x for p in packages for x in ("-p", p)), "-e", "normal,build,dev")
    differ = {k: (extension[k], tests[k]) for k in extension.keys() & tests.keys() if extension[k] != tests[k]}
    assert differ == {}
    # maturin's pip install of the dependencies stays quiet (it printed ~28 "Ignoring ...: markers" lines).
    assert "PIP_QUIET=1" in next(line for line in dry.stdout.splitlines() if "maturin develop" in line)


@needs_make
def test_help_expands_the_profile_and_lint_checks_in_the_build_profile():
    """`make help` printed `$(PROFILE)` as written; `make lint`'s clippy checked in Cargo's `dev` profile, so after
    `make build` it compiled ~274 crates again (~5 min on 2 cores) instead of reusing the `fast` profile's."""

    def make(*args: str) -> str:
        proc = subprocess.run(["make", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert "$(" not in make("-s", "help") and "(Cargo profile fast)" in make("-s", "help")
    assert "(Cargo profile release)" in make("-s", "help", "PROFILE=release")
    dry = make("-n", "lint", "build").splitlines()
    clippy = next(line for line in dry if line.startswith("cargo clippy"))
    build = next(line for line in dry if "maturin develop" in line)
    assert clippy.split("--profile ")[1].split()[0] == build.split("--profile ")[1].split()[0] == "fast", dry
    # The whole workspace, whose features resolve as the Rust tests' (test_the_rust_tests_reuse_the_extension_build).
    assert "--workspace" in clippy.split()


@needs_make
def test_docs_builds_the_site_strictly_without_building_the_extension():
    """`make docs` (run by CI after `make test`) needs only the docs extra: no cargo or maturin on its way, and
    mkdocs in strict mode, so that a broken link fails it (tests/test_docs.py plants one)."""
    proc = subprocess.run(["make", "-n", "-C", str(ROOT), "docs"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert not [line for line in lines if "cargo" in line or "maturin develop" in line], lines
    build = next(line for line in lines if "mkdocs build" in line)
    assert "--strict" in build.split()
    assert any("requirements.py docs" in line for line in lines) or (ROOT / ".venv/.docs").exists(), lines
    ci = (ROOT / ".ci/run").read_text().splitlines()
    assert ci.index("make docs") > ci.index("make test"), "CI builds the docs after the tests"
