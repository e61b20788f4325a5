"""`tokscan convert`: any readable corpus (every format the scan reads, with the same column overrides) written
as Parquet or as a NumPy corpus directory. The core writes it (`tokscan_core::convert`) from the reader that numbers
the rows for the scan: ids, the loss mask, sample ids and categories are kept; a prompt stored apart stays apart in
Parquet (`prompt_ids` + `output_ids`) and is joined to the completion in NumPy (one sequence per sample)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from . import _core
from .errors import UsageError
from .outputs import input_paths, refuse_overlap, utf8_paths


def convert(
    paths: list[str],
    to: str,
    out: Path,
    columns: Mapping[str, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Writes the corpus of `paths` as `to` ("parquet" or "numpy") into `out`, a new or empty directory;
    `progress(done, total)` is called while it runs. On error nothing is left behind."""
    if to not in ("parquet", "numpy"):
        raise UsageError(f"--to must be parquet or numpy, not {to!r}")
    out = Path(out)
    refuse_overlap(out, "--out", input_paths(paths))
    corpus = _core.Corpus(utf8_paths(paths), dict(columns or {}))
    samples, tokens, _files = corpus.convert(to, str(out), progress)
    return {"samples": samples, "tokens": tokens, "format": to, "output": str(out)}
