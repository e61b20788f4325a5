"""Prints the pip requirements of this checkout, one per line: `[project] dependencies` of pyproject.toml plus
the optional-dependency groups named on the command line (`python tools/requirements.py tokenizer dev`).

The Makefile's one reader of the dependency list. It runs on every supported Python without installing
anything: `tomllib` from 3.11, else `tomli`, else the copy of tomli that pip vendors (present in every pip
since 21.2, so in any virtualenv made by `python -m venv`). Exits 1 with a one-line message when it cannot read
the file or an extra does not exist, so a `make` recipe stops instead of installing nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def _toml() -> ModuleType:
    try:
        import tomllib

        return tomllib
    except ImportError:
        pass
    try:
        import tomli

        return tomli
    except ImportError:
        pass
    try:
        from pip._vendor import tomli  # type: ignore[no-redef]

        return tomli
    except ImportError:
        sys.exit(f"tools/requirements.py: no TOML parser on Python {sys.version.split()[0]} (pip install tomli)")


def requirements(extras: list[str], pyproject: Path = PYPROJECT) -> list[str]:
    project = _toml().loads(pyproject.read_text(encoding="utf-8"))["project"]
    groups = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in groups]
    if unknown:
        sys.exit(f"tools/requirements.py: no extra {unknown[0]!r} in {pyproject} (extras: {', '.join(groups)})")
    out: list[str] = []
    for req in [*project["dependencies"], *(r for e in extras for r in groups[e])]:
        if req not in out:
            out.append(req)
    return out


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1:])))
