"""MkDocs hook of the docs site (mkdocs.yml `hooks:`): table cells keep GitHub's Markdown.

GitHub ends a table cell at every unescaped `|`, inside backticks too, so the tables (the generated ones of
`tokscan codes` among them) write `<\\|im_end\\|>`. Python-Markdown already keeps a `|` inside backticks in its
cell and shows the backslash of `\\|` there, so on a table row the escape is dropped inside code spans."""

from __future__ import annotations

import re
from typing import Any

CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def _unescape_code(m: re.Match[str]) -> str:
    return m.group(1) + m.group(2).replace("\\|", "|") + m.group(1)


def unescape_table_code(markdown: str) -> str:
    """`markdown` with `\\|` read as `|` inside the code spans of table rows (lines starting with `|`)."""
    lines = markdown.split("\n")
    fence = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and line.startswith("|"):
            lines[i] = CODE_SPAN.sub(_unescape_code, line)
    return "\n".join(lines)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return unescape_table_code(markdown)
