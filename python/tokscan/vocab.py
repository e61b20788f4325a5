"""Draft-vocabulary mapping files: the options of a scan that counts loss-bearing tokens, and reading and
writing the EAGLE-3 `{"d2t", "t2d"}` mapping. The counting, ranking, padding and checking are the core's
(`tokscan_core::vocab`); this module only moves arrays between files and the core.

File formats, chosen by the suffix:

* `.pt` — `torch.save({"d2t": int64 tensor [K], "t2d": bool tensor [V]})`, what SpecForge's
  `process_token_dict_to_mappings` writes and SpecForge / speculators load. Needs PyTorch.
* `.npz` — `numpy.savez` with the arrays `d2t` (int64) and `t2d` (bool). No torch needed.
* `.json` — `{"d2t": [...], "t2d": [...]}` with `t2d` as 0/1 integers.

`d2t[i]` is the target id of draft id `i` minus `i`; `t2d[t]` is true when target id `t` is in the draft
vocabulary.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import _core
from .errors import UsageError, install_hint

# numpy is imported where arrays are read or written: a scan that only reports coverage never loads it.

SUFFIXES = (".pt", ".npz", ".json")


def parse_sizes(text: str | Iterable[int], option: str | None = None) -> list[int]:
    """`16000,32000` (or a list of ints) as draft-vocabulary sizes; a bad value is a UsageError naming `option`
    (the CLI option or API argument the sizes came from). No size may pass the largest vocabulary a draft
    vocabulary is counted over (`check_sizes` then holds them to the profile's)."""
    where = f"{option}: " if option else ""
    items: list[Any] = [s for s in text.split(",") if s.strip()] if isinstance(text, str) else list(text)
    sizes = []
    for s in items:
        if isinstance(s, (bool, float)):  # 1.5 is not a size (int() would make it 1; inf would not convert)
            raise UsageError(f"{where}draft-vocabulary sizes must be positive integers, got {s!r}")
        try:
            k = int(s)
        except (TypeError, ValueError):
            raise UsageError(f"{where}draft-vocabulary sizes must be positive integers, got {s!r}") from None
        if k <= 0:
            raise UsageError(f"{where}draft-vocabulary sizes must be positive integers, got {s!r}")
        if k > _core.MAX_COUNTED_VOCAB:
            raise UsageError(
                f"{where}draft-vocabulary size {k:,} is larger than any vocabulary tokscan counts "
                f"(at most {_core.MAX_COUNTED_VOCAB:,} ids)"
            )
        sizes.append(k)
    if not sizes:
        raise UsageError(f"{where}no draft-vocabulary size given (e.g. --draft-vocab 16000,32000)")
    return sizes


def check_sizes(
    profile: _core.Profile,
    sizes: Iterable[int],
    sizes_option: str,
    mapping: int | None = None,
    mapping_option: str = "vocab_mapping",
) -> None:
    """Refuses a draft-vocabulary size (of the coverage `sizes`, or of the `mapping` to build) larger than the
    profile's vocabulary: a draft vocabulary is a part of the target's (a mapping of more ids than it has would
    mark ids that do not exist). The error names the option the size came from."""
    vocab = profile.vocab_size
    for option, ks in ((mapping_option, [] if mapping is None else [mapping]), (sizes_option, sizes)):
        for k in ks:
            if k > vocab:
                raise UsageError(
                    f"{option}: draft-vocabulary size {k:,} is larger than the vocabulary of profile "
                    f"{profile.name} ({vocab:,} ids); a draft vocabulary is a part of it"
                )


def _suffix(path: Path, what: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise UsageError(f"{path}: {what} must end in {', '.join(SUFFIXES)} (torch.save, numpy.savez or JSON)")
    return suffix


def load_mapping(path: str | os.PathLike[str], vocab_size: int | None = None) -> tuple[list[int], list[bool]]:
    """`(d2t, t2d)` of a mapping file; a missing, unreadable or oversized file is a UsageError naming it. Neither
    array may hold more entries than `vocab_size` (the profile's vocabulary; by default the largest one a draft
    vocabulary is counted over): an `.npz` member's size is read from its `.npy` header before it is inflated,
    so a small file that inflates to hundreds of millions of entries is refused holding nothing."""
    import io

    import numpy as np

    from .files import read_bytes

    p = Path(path)
    suffix = _suffix(p, "a draft-vocabulary mapping")
    # A profile without a real vocabulary (`plain`'s 2^32 - 1) is refused by the scan; its mappings are held to
    # the largest vocabulary counted meanwhile.
    if vocab_size is not None and vocab_size <= _core.MAX_COUNTED_VOCAB:
        limit, of = vocab_size, "the profile's vocabulary"
    else:
        limit, of = _core.MAX_COUNTED_VOCAB, "the largest vocabulary tokscan counts"
    if suffix == ".pt":
        try:
            import torch
        except ImportError:
            raise UsageError(
                f"{p}: reading a .pt mapping needs PyTorch ({install_hint('torch')}), or use .npz / .json"
            ) from None
    data = read_bytes(p)  # a regular file of bounded size (a FIFO or /dev/zero is refused here)

    def refuse(name: str, n: int) -> UsageError:
        return UsageError(f"{p}: {name} has {n:,} entries, more than {of} ({limit:,} ids)")

    try:
        if suffix == ".pt":
            loaded = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
            d2t, t2d = np.asarray(loaded["d2t"].numpy()), np.asarray(loaded["t2d"].numpy())
        elif suffix == ".npz":
            for name, n in _npz_sizes(data).items():
                if n > limit:
                    raise refuse(name, n)
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                d2t, t2d = z["d2t"], z["t2d"]
        else:
            loaded = json.loads(data)
            d2t, t2d = np.asarray(loaded["d2t"]), np.asarray(loaded["t2d"])
    except UsageError:
        raise
    except Exception as e:  # any unreadable file: one line naming it
        why = (str(e).strip().splitlines() or [""])[0]  # torch's refusals run to a paragraph
        raise UsageError(f"{p}: not a draft-vocabulary mapping with d2t and t2d ({type(e).__name__}: {why})") from None
    if d2t.ndim != 1 or t2d.ndim != 1 or not np.issubdtype(d2t.dtype, np.integer):
        raise UsageError(f"{p}: d2t must be a 1-D integer array and t2d a 1-D mask")
    for name, a in (("d2t", d2t), ("t2d", t2d)):
        if a.size > limit:
            raise refuse(name, a.size)
    # d2t[i] is a target id minus i: within int64 (a uint64 array can hold more, which no mapping has).
    if d2t.size and np.issubdtype(d2t.dtype, np.unsignedinteger) and int(d2t.max()) > np.iinfo(np.int64).max:
        raise UsageError(f"{p}: d2t holds {int(d2t.max())}, not a target id minus a draft id (past int64)")
    return [int(x) for x in d2t.tolist()], [bool(x) for x in t2d.tolist()]


def _npz_sizes(data: bytes) -> dict[str, int]:
    """Entries of each array of an `.npz` (`d2t`, `t2d`, ...) as its `.npy` header declares them, read without
    inflating the arrays (a header is the first few hundred bytes of its member)."""
    import io
    import math
    import zipfile

    import numpy as np

    sizes = {}
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for info in z.infolist():
            if not info.filename.endswith(".npy"):
                continue
            with z.open(info) as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, _, _ = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, _, _ = np.lib.format.read_array_header_2_0(f)
                else:
                    raise ValueError(f"{info.filename}: .npy format version {version} (numpy.savez writes 1.0)")
            sizes[info.filename[: -len(".npy")]] = math.prod(shape)
    return sizes


def check_output(path: str | os.PathLike[str]) -> Path:
    """The mapping output path, its suffix checked before the scan runs."""
    p = Path(path)
    _suffix(p, "the mapping file")
    if p.suffix.lower() == ".pt":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise UsageError(
                f"{p}: writing a .pt mapping needs PyTorch ({install_hint('torch')}), or use .npz / .json"
            ) from None
    return p


def write_mapping(mapping: dict[str, Any], vocab_size: int, path: str | os.PathLike[str]) -> Path:
    """Writes the core's mapping (`d2t` and the chosen `target_ids`) in the format of `path`'s suffix: whole or
    not at all (a full disk is a UsageError naming the file, and no truncated mapping stays behind)."""
    import numpy as np

    p = check_output(path)
    d2t = np.asarray(mapping["d2t"], dtype=np.int64)
    t2d = np.zeros(vocab_size, dtype=bool)
    t2d[np.asarray(mapping["target_ids"], dtype=np.int64)] = True
    suffix = p.suffix.lower()
    from .outputs import replacing

    with replacing(p, "the draft-vocabulary mapping") as f:
        if suffix == ".pt":
            import torch

            torch.save({"d2t": torch.from_numpy(d2t), "t2d": torch.from_numpy(t2d)}, f)
        elif suffix == ".npz":
            np.savez(f, d2t=d2t, t2d=t2d)
        else:
            f.write(json.dumps({"d2t": d2t.tolist(), "t2d": t2d.astype(np.uint8).tolist()}).encode())
    return p


def options(
    sizes: Iterable[int] | None = None,
    mapping_size: int | None = None,
    check: str | os.PathLike[str] | None = None,
    tolerance: float | None = None,
    profile: _core.Profile | None = None,
) -> str | None:
    """The core's draft-vocabulary options as JSON, or None when nothing asks for token counts. With the scan's
    `profile`, the sizes and the checked mapping are held to its vocabulary."""
    if not sizes and mapping_size is None and check is None:
        return None
    opts: dict[str, Any] = {"sizes": parse_sizes(sizes, "draft_vocab") if sizes else []}
    if mapping_size is not None:
        opts["mapping"] = parse_sizes([mapping_size], "vocab_mapping")[0]
    if profile is not None:
        check_sizes(profile, opts["sizes"], "draft_vocab", opts.get("mapping"), "vocab_mapping")
    if check is not None:
        d2t, t2d = load_mapping(check, None if profile is None else profile.vocab_size)
        opts["check"] = {"d2t": d2t, "t2d": t2d}
    if tolerance is not None:
        if not 0 <= tolerance <= 1:
            raise UsageError(f"the mapping check's tolerance is a share between 0 and 1, got {tolerance}")
        opts["tolerance"] = tolerance
    return json.dumps(opts)
