"""The README and the docs site (issue 47, item 5): the README stays a short entry whose first commands are the
set-up, its links into docs/ reach pages that exist, the site's build fails on a broken internal link or anchor
(mkdocs.yml's strict validation: what `make docs` relies on in CI), and the generated tables can be written again
by `tools/reference.py`. That the generated tables are the core's is tests/test_cli_conventions.py's."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _tool(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_starts_with_the_two_set_up_commands_and_stays_short():
    first_block = README.split("```", 2)[1]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()[1:] if line.strip()]
    assert commands[:2] == ["make demo", "make test"], commands
    assert README.count("\n") <= 200, "the README is the entry: move details into docs/ (issue 47: ~150 lines)"


def test_the_readmes_links_reach_files_that_exist():
    """MkDocs checks the links between pages; the README is outside docs/, so its links are checked here."""
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    local = [link.split("#")[0] for link in links if "://" not in link and not link.startswith("#")]
    assert any(link.startswith("docs/") for link in local)
    missing = [link for link in local if not (ROOT / link).exists()]
    assert missing == [], f"README.md links to files that do not exist: {missing}"


def test_every_page_of_the_nav_exists_and_every_page_is_in_it():
    """The same as the strict build's nav validation, without mkdocs installed."""
    nav = re.findall(r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    pages = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(nav) == pages


def _site(tmp_path: Path) -> Path:
    """A copy of what the site is built from."""
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    shutil.copy(ROOT / "mkdocs.yml", repo / "mkdocs.yml")
    shutil.copy(ROOT / "tools/mkdocs_hooks.py", repo / "tools/mkdocs_hooks.py")
    shutil.copytree(ROOT / "docs", repo / "docs")
    return repo


def _build(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(repo / "site")],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_site_builds_and_a_broken_link_or_anchor_fails_it(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (make docs installs it)")
    repo = _site(tmp_path)
    proc = _build(repo)
    assert proc.returncode == 0, proc.stderr
    codes = (repo / "site/reference/codes.html").read_text(encoding="utf-8")
    assert "&lt;|im_start|&gt;assistant" in codes, "the hook drops GitHub's \\| escape inside table code spans"
    page = repo / "docs/guide/ray.md"
    text = page.read_text(encoding="utf-8")
    for broken, named in [
        ("[x](no-such-page.md)", "no-such-page.md"),
        ("[x](cli.md#no-such-anchor)", "no-such-anchor"),
        ("[x](#no-such-section)", "no-such-section"),
    ]:
        page.write_text(f"{text}\n{broken}\n", encoding="utf-8")
        proc = _build(repo)
        assert proc.returncode != 0, f"{broken} did not fail the build"
        assert named in proc.stderr, proc.stderr
    page.write_text(text, encoding="utf-8")
    (repo / "docs/guide/orphan.md").write_text("# Not in the nav\n", encoding="utf-8")
    proc = _build(repo)
    assert proc.returncode != 0 and "orphan.md" in proc.stderr, proc.stderr


def test_the_generated_tables_sit_between_markers_the_tool_rewrites():
    reference = _tool("reference")
    for rel, flag in reference.PAGES.items():
        page = (ROOT / rel).read_text(encoding="utf-8")
        begin = reference.BEGIN.format(flag=flag)
        table = page[page.index(begin) + len(begin) : page.index(reference.END)]
        assert table.startswith("| ") and table.endswith("|\n"), rel
        assert reference.regenerate(page, flag, table) == page
        stale = reference.regenerate(page, flag, "| new |\n|---|\n")
        assert "| new |\n|---|\n" + reference.END in stale and table not in stale
    with pytest.raises(ValueError, match="no generated-table markers"):
        reference.regenerate("# a page without markers\n", "--markdown", "| t |\n")


def test_the_hook_unescapes_pipes_only_inside_code_spans_of_table_rows():
    hooks = _tool("mkdocs_hooks")
    text = "| `<\\|im_end\\|>` and a\\|b |\n`<\\|x\\|>` in text\n```\n| `<\\|code\\|>` |\n```\n"
    assert (
        hooks.unescape_table_code(text)
        == "| `<|im_end|>` and a\\|b |\n`<\\|x\\|>` in text\n```\n| `<\\|code\\|>` |\n```\n"
    )
