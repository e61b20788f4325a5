"""PyTorch integration: `ValidatedDataset` checks every sample on its way to the training step.

    ds = tokscan.torch.ValidatedDataset(my_dataset, profile="kimi-k2", on_bad="drop", shuffle=True)
    loader = DataLoader(ds, batch_size=8, num_workers=4)

The wrapped dataset is map-style (`__getitem__` + `__len__`) or iterable, and yields dicts with `input_ids`
(a tensor or a list; `loss_mask` or `labels` are checked too when present). `ValidatedDataset` is an
`IterableDataset`: dropped samples simply never appear, so batches stay full and no special `collate_fn` is
needed. For a map-style source it does the index work itself — `shuffle`/`seed`/`set_epoch`, a share of the
indices per DataLoader worker and per `torch.distributed` rank. Each worker process checks its own samples on
its own thread (no thread pool survives a fork), and `stats` / the `tokscan` logger report what was dropped.

Needs PyTorch (the `torch` extra; see docs/install.md).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as e:  # pragma: no cover - exercised only without torch
    from ..errors import install_hint

    raise ImportError(f"tokscan.torch needs PyTorch: {install_hint('torch')}") from e


from .. import _core
from ..errors import TokscanError, UsageError
from .validate import Validator

log = logging.getLogger("tokscan")

ON_BAD = ("drop", "raise", "warn")


class BadSampleError(TokscanError):
    """Raised by `ValidatedDataset(on_bad="raise")` for the first bad sample."""


@dataclass
class DropStats:
    """What one process's iteration saw."""

    seen: int = 0
    bad: int = 0
    codes: Counter[str] = field(default_factory=Counter)

    def __str__(self) -> str:
        codes = ", ".join(f"{c}: {n}" for c, n in self.codes.most_common())
        return f"{self.bad} of {self.seen} samples" + (f" ({codes})" if codes else "")


class ValidatedDataset(IterableDataset):
    """Wraps a map-style or iterable dataset of dicts with `input_ids`; `on_bad` is `drop` (skip the
    sample), `raise` (`BadSampleError`) or `warn` (a warning, and the sample is kept). Samples are checked
    `window` at a time in one call, each from its own buffer (no concatenation)."""

    def __init__(
        self,
        dataset: Any,
        profile: str | os.PathLike[str] = _core.DEFAULT_PROFILE,
        *,
        on_bad: str = "drop",
        validator: Validator | None = None,
        policy: Mapping[str, str] | None = None,
        fail_on: str = "error",
        tokenizer: str | os.PathLike[str] | None = None,
        key: str = "input_ids",
        shuffle: bool = False,
        seed: int = 0,
        window: int = 64,
    ) -> None:
        if on_bad not in ON_BAD:
            raise UsageError(f"on_bad must be one of {', '.join(ON_BAD)}, not {on_bad!r}")
        self.dataset = dataset
        self.validator = validator or Validator(profile, tokenizer=tokenizer, policy=policy, fail_on=fail_on)
        self.on_bad = on_bad
        self.key = key
        self.shuffle = shuffle
        self.seed = seed
        if window < 1:
            raise UsageError("window must be at least 1")
        #: Samples collected before one check call (amortises the call; the order is kept).
        self.window = window
        self.epoch = 0
        self.map_style = hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
        if not self.map_style and not hasattr(dataset, "__iter__"):
            raise UsageError("dataset must be map-style (__getitem__ and __len__) or iterable")
        #: Counters of the iterations run in this process (with workers: see the `tokscan` log).
        self.stats = DropStats()

    def set_epoch(self, epoch: int) -> None:
        """Reshuffles map-style sources differently each epoch (like `DistributedSampler.set_epoch`)."""
        self.epoch = epoch

    def __len__(self) -> int:
        """Samples before validation (an upper bound of what one epoch yields)."""
        if not self.map_style:
            raise TypeError("the wrapped iterable dataset has no length")
        return len(self.dataset)

    def _indices(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = range(n)
        shards, shard = 1, 0
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            shards, shard = torch.distributed.get_world_size(), torch.distributed.get_rank()
        info = get_worker_info()
        if info is not None:
            shard = shard * info.num_workers + info.id
            shards *= info.num_workers
        return iter(order[shard::shards])

    def _items(self) -> Iterator[Any]:
        if self.map_style:
            for i in self._indices():
                yield i, self.dataset[i]
        else:
            yield from enumerate(self.dataset)

    def _arrays(self, item: Any) -> tuple[Any, Any]:
        if not isinstance(item, Mapping) or self.key not in item:
            raise UsageError(f"dataset items must be dicts with {self.key!r}, got {type(item).__name__}")
        ids = item[self.key]
        if "loss_mask" in item:
            return ids, item["loss_mask"]
        if "labels" in item:
            labels = item["labels"]
            labels = labels if isinstance(labels, torch.Tensor) else torch.as_tensor(labels)
            return ids, labels != -100
        return ids, None

    def check_items(self, items: list[Any]) -> list[list[str]]:
        """The failing codes of each item (empty when it is fine), checked in one call."""
        if not items:
            return []
        ids, masks = zip(*(self._arrays(item) for item in items), strict=True)
        has_mask = any(m is not None for m in masks)
        r = self.validator.check_each(ids, masks if has_mask else None)
        return [[] if ok else r.failing_codes_of(i) for i, ok in enumerate(r.ok)]

    def __repr__(self) -> str:
        size = f"{len(self.dataset):,} samples" if self.map_style else type(self.dataset).__name__
        return f"<ValidatedDataset of {size}, on_bad={self.on_bad!r}, {self.validator!r}>"

    def __iter__(self) -> Iterator[Any]:
        stats = DropStats()
        try:
            window: list[tuple[int, Any]] = []
            for pair in self._items():
                window.append(pair)
                if len(window) == self.window:
                    yield from self._settle(window, stats)
                    window = []
            yield from self._settle(window, stats)
        finally:
            self.stats.seen += stats.seen
            self.stats.bad += stats.bad
            self.stats.codes.update(stats.codes)
            if stats.bad:
                info = get_worker_info()
                who = f"worker {info.id}" if info is not None else "main process"
                verb = "dropped" if self.on_bad == "drop" else "flagged"
                log.warning("tokscan (%s): %s %s", who, verb, stats)

    def _settle(self, window: list[tuple[int, Any]], stats: DropStats) -> Iterator[Any]:
        verdicts = self.check_items([item for _i, item in window])
        for (index, item), failing in zip(window, verdicts, strict=True):
            stats.seen += 1
            if not failing:
                yield item
                continue
            stats.bad += 1
            stats.codes.update(failing)
            where = f"sample {index}"
            if self.on_bad == "raise":
                raise BadSampleError(f"{where}: {', '.join(failing)}")
            if self.on_bad == "warn":
                warnings.warn(f"tokscan: {where}: {', '.join(failing)}", stacklevel=3)
                yield item
