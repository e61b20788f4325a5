"""Object-store URLs among the inputs (`s3://bucket/prefix/`, `s3://bucket/key.parquet`, `gs://`, `az://`).

The core fetches what each URL names (`_core.fetch_objects`, the `object_store` crate: credentials and endpoint
from the standard environment variables, bounded retries) into a temporary directory that lives as long as the
command; the ordinary readers scan it there, and every path of the report is written back as its URL."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import _core
from .errors import TokscanError, UsageError

#: `(local base, URL base)`: `local base` + `/` in a path stands for `URL base`.
Bases = list[tuple[str, str]]
#: `(local file, object URL, object key, ETag, version)` of an object staged with only its footer.
Sparse = tuple[str, str, str, str | None, str | None]


def is_url(p: str | os.PathLike[str]) -> bool:
    """Whether `p` is an object-store URL (a path whose name is not valid UTF-8 is a path, never a URL)."""
    return isinstance(p, str) and _is_utf8(p) and _core.is_object_url(p)


def _is_utf8(p: str) -> bool:
    try:
        p.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def any_url(paths: list[str]) -> bool:
    return any(is_url(p) for p in paths)


@contextmanager
def staged(paths: list[str]) -> Iterator[tuple[list[str], Bases]]:
    """`paths` with every object-store URL replaced by its local copy, and the bases to write them back; the
    copies are deleted on exit. Without URLs, `paths` as they are and no bases (nothing is fetched)."""
    with staged_footers(paths, footers=False) as (out, bases, _sparse):
        yield out, bases


@contextmanager
def staged_footers(paths: list[str], footers: bool = True) -> Iterator[tuple[list[str], Bases, list[Sparse]]]:
    """`staged`, with large Parquet objects staged with only their footer and NumPy arrays and Megatron `.bin`s
    with only their head (`footers`): the third value lists them, for `_core.fill_row` to fetch what one sample
    needs (`show --row`). A tokscan error raised in the block that names a staged copy is raised again naming
    its URL. (A Ray scan stages in the core: `_core.plan_scan` with a staging directory.)"""
    if not any_url(paths):
        yield paths, [], []
        return
    with tempfile.TemporaryDirectory(prefix="tokscan-objects-") as d:
        root = Path(d).resolve()
        out: list[str] = []
        bases: Bases = []
        sparse: list[Sparse] = []
        for i, p in enumerate(paths):
            if is_url(p):
                local, base, url_base, _objects, _bytes, partial = _core.fetch_objects(p, str(root / str(i)), footers)
                out.append(local)
                bases.append((base + os.sep, url_base))
                sparse.extend(partial)
            else:
                out.append(p)
        try:
            yield out, bases, sparse
        except TokscanError as e:
            # An error naming a staged copy (a corrupt object) names the object's URL.
            named = relabel(str(e), bases)
            if named == str(e):
                raise
            raise type(e)(named) from None


def relabel(data: Any, bases: Bases) -> Any:
    """`data` (JSON-shaped) with every local copy's path, in keys and in text, written as its URL."""
    if not bases:
        return data
    if isinstance(data, str):
        for local, url in bases:
            if data == local[:-1]:
                return url
            if local in data:
                data = data.replace(local, url)
        return data
    if isinstance(data, list):
        return [relabel(x, bases) for x in data]
    if isinstance(data, dict):
        return {relabel(k, bases): relabel(v, bases) for k, v in data.items()}
    return data


def refuse(paths: list[str], what: str) -> None:
    """A usage error naming `what` when `paths` hold an object-store URL (a feature that reads local files)."""
    if any_url(paths):
        raise UsageError(f"{what} does not read object-store URLs yet; copy the objects to a local directory first")
