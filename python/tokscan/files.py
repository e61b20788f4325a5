"""Files tokscan reads whole on the Python side (a config, a report, a draft-vocabulary mapping, a tokenizer's
JSON, a prompts file for `align`): read by the core's one reader (`tokscan_core::files`), which takes only a
regular file — a FIFO would block the read forever and `/dev/zero` fill memory — of at most
`TOKSCAN_MAX_FILE_BYTES` bytes (default 4 GiB). A file that is not one is one line naming it, raised as the
error the caller's command gives for its files."""

from __future__ import annotations

import os

from . import _core
from .errors import InputError, TokscanError, UsageError


def read_bytes(path: str | os.PathLike[str], error: type[TokscanError] = UsageError) -> bytes:
    """The bytes of the regular file `path`; a missing, special or too large file is an `error` naming it."""
    try:
        return _core.read_file(os.fspath(path))
    except InputError as e:  # the core's one line: "PATH: a FIFO (named pipe), not a regular file"
        if error is InputError:
            raise
        raise error(str(e)) from None


def read_text(path: str | os.PathLike[str], error: type[TokscanError] = UsageError) -> str:
    """The UTF-8 text of the regular file `path` (see `read_bytes`); bytes that are not UTF-8 raise
    `UnicodeDecodeError`, which each caller words for its kind of file."""
    return read_bytes(path, error).decode("utf-8")
