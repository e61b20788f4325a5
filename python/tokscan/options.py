"""One scan's options: built once by `tokscan.scan` from its arguments (after checking them), then carried as
they are to the core (`_core.Scan`), to every Ray task (`_core.TaskScan`) and to the Ray driver's last step
(`_core.finish_report`), so the local and cluster engines read the same options the same way."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from . import _core


@dataclass(frozen=True)
class ScanOptions:
    """What a scan is asked to do beyond its inputs and profile (see `tokscan.scan` for each one)."""

    #: Role -> column name overrides (`input_ids`, `loss_mask`, ...).
    columns: dict[str, str] = field(default_factory=dict)
    #: Worker threads of the core; 0: one per core (a Ray task: 1).
    threads: int = 0
    #: Code -> severity shorthand, merged into `policy`.
    severities: dict[str, str] = field(default_factory=dict)
    #: The `[policy]` table: code -> severity, "ignore", a tolerated count or a rate ("0.5%").
    policy: dict[str, str | int] = field(default_factory=dict)
    #: The severity that fails the run ("never": nothing does).
    fail_on: str = "error"
    ngram_coverage: bool = False
    #: One prompts file for the whole corpus (else the prompts files beside the shards).
    prompts: list[str] | None = None
    #: The tokenizer directory the scan was given (the profile resolves through it, prompts and benchmark text
    #: are rendered and tokenized with it; the report's `run` names it), and a chat template's text overriding
    #: its own.
    tokenizer: str | None = None
    chat_template: str | None = None
    #: `(benchmark files, n, share, tokenizer directory or None)`.
    contamination: tuple[list[str], int, float, str | None] | None = None
    #: `(n, bands, rows, threshold)` of the near-duplicate search.
    near_dup: tuple[int, int, int, float] | None = None
    #: The draft-vocabulary options as the core reads them (JSON, `tokscan.vocab.options`).
    draft_vocab: str | None = None
    #: `(dump directory, layout or None, target model directory or None, agreement positions, agreement minimum)`
    #: of the hidden-state dump checked against the corpus.
    hidden_states: tuple[str, str | None, str | None, int, float] | None = None
    flagged_detail: int = _core.FLAGGED_DETAIL
    #: For the report's `run`: the command line and where the profile came from.
    command: list[str] | None = None
    profile_source: str | None = None

    def to_core(self) -> dict[str, Any]:
        """The dict the core's `Scan`, `TaskScan` and `finish_report` take (every field, by name)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def replace(self, **changes: Any) -> ScanOptions:
        return dataclasses.replace(self, **changes)
