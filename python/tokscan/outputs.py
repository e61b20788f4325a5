"""Where a command may write: never over, or inside, one of its inputs. One check for every command and every
output option (`scan --json/--html/--junit/--exclude`, `convert --out`, `clean --out`)."""

from __future__ import annotations

import glob
import os
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from .errors import UsageError

#: How the user names stdout for an output.
STDOUT = "-"


def utf8_paths(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """The paths as strings for the core, which takes UTF-8: a path named on the command line or in the API whose
    name is not valid UTF-8 is a one-line UsageError (the core reads such files found in a directory and names
    them with `\\xNN` escapes)."""
    out = [os.fspath(p) for p in paths]
    for p in out:
        try:
            p.encode("utf-8")
        except UnicodeEncodeError:
            shown = os.fsencode(p).decode("utf-8", "backslashreplace")
            raise UsageError(
                f"{shown}: the path is not valid UTF-8; pass its directory (which reads it) or rename it"
            ) from None
    return out


def write_file(path: str | os.PathLike[str], text: str | Iterable[str], what: str) -> None:
    """Writes `text` (a string, or its pieces in order) to the file `path`. A failure (a full disk, no
    permission) is one UsageError naming the file and `what` it was, and a regular file left half-written is
    removed: no partial output stays behind looking complete."""
    try:
        with open(path, "w", encoding="utf-8") as f:
            if isinstance(text, str):
                f.write(text)
            else:
                for piece in text:
                    f.write(piece)
    except OSError as e:
        if os.path.isfile(path):
            os.unlink(path)
        raise UsageError(f"{os.fspath(path)}: cannot write {what} ({e.strerror or e})") from None


@contextmanager
def replacing(path: str | os.PathLike[str], what: str) -> Iterator[BinaryIO]:
    """A binary file to write `what` into, that becomes `path` only when the block ends without error: it is
    written beside `path` under a temporary name and renamed over it, so a failure (a full disk, a writer that
    raises) leaves `path` as it was and nothing half-written. The failure is one UsageError naming `path`. A
    `path` that exists and is not a regular file (`/dev/null`, a FIFO) is written in place."""
    target = os.path.realpath(path)  # a symlink's target is replaced, not the link
    if os.path.exists(target) and not os.path.isfile(target):
        tmp = None
    else:
        folder, name = os.path.split(target)
        tmp = os.path.join(folder, f".{name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        # O_EXCL: never another file of that name; mode 0o666 under the umask, as `open` would create `path`.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666) if tmp else os.open(target, os.O_WRONLY)
        with os.fdopen(fd, "wb") as f:
            yield f
        if tmp:
            os.replace(tmp, target)
    except Exception as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else (str(e).strip().splitlines() or [""])[0]
        raise UsageError(f"{os.fspath(path)}: cannot write {what} ({why or type(e).__name__})") from None
    finally:  # after a failure, or Ctrl-C; after the rename there is no such file
        if tmp and os.path.lexists(tmp):
            os.unlink(tmp)


def input_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The resolved paths the inputs `paths` stand for: each path (a file or a directory), a glob's matches, a
    Megatron prefix's or file's `.bin` and `.idx`."""
    found: list[Path] = []
    for p in map(os.fspath, paths):
        path = Path(p)
        names = [p]
        if not path.exists() and any(c in p for c in "*?["):
            names = glob.glob(p)
        elif not path.exists() or path.suffix in (".bin", ".idx"):
            base = p[: -len(path.suffix)] if path.suffix in (".bin", ".idx") else p
            names = [p, base + ".bin", base + ".idx"]
        for n in names:
            found.append(Path(n).resolve())
            if Path(n).is_symlink() or Path(n).is_dir():
                found.append(Path(os.path.abspath(n)))
    return found


Output = tuple[str, "str | os.PathLike[str] | None"]


def refuse_clobbering(
    outputs: Iterable[Output],
    corpus: Iterable[str | os.PathLike[str]] = (),
    reads: Iterable[str | os.PathLike[str] | None] = (),
) -> None:
    """Every output of a command, checked before any work: none is, or is inside, its `corpus` (a new file there
    would join the corpus), none replaces another file it `reads` (a baseline, prompts, a profile or config
    file, a chat template, a mapping, a benchmark, or a file of a tokenizer directory; a new file beside them is
    fine), none is a hard link to any of them, and no two outputs are the same file. `outputs` are
    `(option, path)` pairs; '-' (stdout) is always fine."""
    given = [(option, out) for option, out in outputs if out is not None and os.fspath(out) != STDOUT]
    inputs = input_paths(corpus)
    read = [Path(r).resolve() for r in reads if r is not None and Path(r).exists()]
    for option, out in given:
        refuse_overlap(out, option, inputs)
        o = Path(out).resolve()
        for r in read:
            if o == r or (r.is_dir() and r in o.parents and o.exists()):
                raise UsageError(f"{option} {out}: the output must not overlap the input {r}")
    _refuse_hard_links(given, inputs + read)
    seen: dict[object, str] = {}
    for option, out in given:
        try:
            st = os.stat(out)
            key: object = (st.st_dev, st.st_ino)  # two names of one file
        except OSError:
            key = Path(out).resolve()
        if key in seen:
            raise UsageError(f"{option} {out}: {seen[key]} writes the same file; give each output its own path")
        seen[key] = option


def profile_file(name: str | None) -> str | None:
    """The profile a command was given, when it is a file that is read (a built-in name is resolved first, so a
    file or folder of that name is never read)."""
    from . import _core

    if name is None or name in _core.builtin_profiles() or not Path(name).is_file():
        return None
    return name


def _refuse_hard_links(outputs: list[Output], inputs: list[Path]) -> None:
    """An existing output with more than one link may be another name of an input file: compared by device and
    inode with every file of the inputs (only then are the input directories walked)."""
    linked = {}
    for option, out in outputs:
        try:
            st = os.stat(out)  # type: ignore[arg-type]
        except OSError:
            continue
        if st.st_nlink > 1:
            linked[(st.st_dev, st.st_ino)] = (option, out)
    if not linked:
        return

    def files(p: Path) -> Iterable[Path]:
        if p.is_dir():
            for root, _dirs, names in os.walk(p):
                yield from (Path(root) / n for n in names)
        else:
            yield p

    for i in inputs:
        for f in files(i):
            try:
                st = os.stat(f)
            except OSError:
                continue
            hit = linked.get((st.st_dev, st.st_ino))
            if hit is not None:
                raise UsageError(f"{hit[0]} {hit[1]}: the output is another name (a hard link) of the input {f}")


def refuse_overlap(out: str | os.PathLike[str] | None, option: str, inputs: Iterable[Path]) -> None:
    """A usage error when `out` is, or is inside, an input (so a report or a copy never replaces or joins the
    corpus); for a directory output also when an input is inside it. '-' (stdout) is always fine."""
    if out is None or os.fspath(out) == STDOUT:
        return
    o = Path(out).resolve()
    is_dir_out = option in ("--out",)
    for i in inputs:
        if o == i or i in o.parents or (is_dir_out and o in i.parents):
            raise UsageError(f"{option} {out}: the output must not overlap the input {i}")
