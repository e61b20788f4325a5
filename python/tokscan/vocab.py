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

from .errors import UsageError

# numpy is imported where arrays are read or written: a scan that only reports coverage never loads it.

SUFFIXES = (".pt", ".npz", ".json")


def parse_sizes(text: str | Iterable[int]) -> list[int]:
    """`16000,32000` (or a list of ints) as draft-vocabulary sizes; a bad value is a UsageError."""
    items: list[Any] = [s for s in text.split(",") if s.strip()] if isinstance(text, str) else list(text)
    sizes = []
    for s in items:
        if isinstance(s, (bool, float)):  # 1.5 is not a size (int() would make it 1; inf would not convert)
            raise UsageError(f"draft-vocabulary sizes must be positive integers, got {s!r}")
        try:
            k = int(s)
        except (TypeError, ValueError):
            raise UsageError(f"draft-vocabulary sizes must be positive integers, got {s!r}") from None
        if k <= 0:
            raise UsageError(f"draft-vocabulary sizes must be positive integers, got {s!r}")
        sizes.append(k)
    if not sizes:
        raise UsageError("no draft-vocabulary size given (e.g. --draft-vocab 16000,32000)")
    return sizes


def _suffix(path: Path, what: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise UsageError(f"{path}: {what} must end in {', '.join(SUFFIXES)} (torch.save, numpy.savez or JSON)")
    return suffix


def load_mapping(path: str | os.PathLike[str]) -> tuple[list[int], list[bool]]:
    """`(d2t, t2d)` of a mapping file; a missing or unreadable file is a UsageError naming it."""
    import numpy as np

    p = Path(path)
    suffix = _suffix(p, "a draft-vocabulary mapping")
    if not p.is_file():
        raise UsageError(f"{p}: no such mapping file")
    try:
        if suffix == ".pt":
            try:
                import torch
            except ImportError:
                raise UsageError(f"{p}: reading a .pt mapping needs PyTorch (or use .npz / .json)") from None
            data = torch.load(p, map_location="cpu", weights_only=True)
            d2t, t2d = np.asarray(data["d2t"].numpy()), np.asarray(data["t2d"].numpy())
        elif suffix == ".npz":
            with np.load(p, allow_pickle=False) as z:
                d2t, t2d = z["d2t"], z["t2d"]
        else:
            data = json.loads(p.read_text())
            d2t, t2d = np.asarray(data["d2t"]), np.asarray(data["t2d"])
    except UsageError:
        raise
    except Exception as e:  # any unreadable file: one line naming it
        why = (str(e).strip().splitlines() or [""])[0]  # torch's refusals run to a paragraph
        raise UsageError(f"{p}: not a draft-vocabulary mapping with d2t and t2d ({type(e).__name__}: {why})") from None
    if d2t.ndim != 1 or t2d.ndim != 1 or not np.issubdtype(d2t.dtype, np.integer):
        raise UsageError(f"{p}: d2t must be a 1-D integer array and t2d a 1-D mask")
    return [int(x) for x in d2t.tolist()], [bool(x) for x in t2d.tolist()]


def check_output(path: str | os.PathLike[str]) -> Path:
    """The mapping output path, its suffix checked before the scan runs."""
    p = Path(path)
    _suffix(p, "the mapping file")
    if p.suffix.lower() == ".pt":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise UsageError(f"{p}: writing a .pt mapping needs PyTorch (or use .npz / .json)") from None
    return p


def write_mapping(mapping: dict[str, Any], vocab_size: int, path: str | os.PathLike[str]) -> Path:
    """Writes the core's mapping (`d2t` and the chosen `target_ids`) in the format of `path`'s suffix."""
    import numpy as np

    p = check_output(path)
    d2t = np.asarray(mapping["d2t"], dtype=np.int64)
    t2d = np.zeros(vocab_size, dtype=bool)
    t2d[np.asarray(mapping["target_ids"], dtype=np.int64)] = True
    suffix = p.suffix.lower()
    if suffix == ".pt":
        import torch

        torch.save({"d2t": torch.from_numpy(d2t), "t2d": torch.from_numpy(t2d)}, p)
    elif suffix == ".npz":
        with p.open("wb") as f:
            np.savez(f, d2t=d2t, t2d=t2d)
    else:
        p.write_text(json.dumps({"d2t": d2t.tolist(), "t2d": t2d.astype(np.uint8).tolist()}))
    return p


def options(
    sizes: Iterable[int] | None = None,
    mapping_size: int | None = None,
    check: str | os.PathLike[str] | None = None,
    tolerance: float | None = None,
) -> str | None:
    """The core's draft-vocabulary options as JSON, or None when nothing asks for token counts."""
    if not sizes and mapping_size is None and check is None:
        return None
    opts: dict[str, Any] = {"sizes": parse_sizes(sizes) if sizes else []}
    if mapping_size is not None:
        opts["mapping"] = parse_sizes([mapping_size])[0]
    if check is not None:
        d2t, t2d = load_mapping(check)
        opts["check"] = {"d2t": d2t, "t2d": t2d}
    if tolerance is not None:
        if not 0 <= tolerance <= 1:
            raise UsageError(f"the mapping check's tolerance is a share between 0 and 1, got {tolerance}")
        opts["tolerance"] = tolerance
    return json.dumps(opts)
