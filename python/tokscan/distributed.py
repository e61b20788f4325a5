"""The scan on a Ray cluster with the shape of the job given: `scan_ray` (tests and scripts size the tasks,
buckets and merge tree with it); the engine itself is `tokscan.integrations.ray`, reached by
`tokscan.scan(engine="ray")` and `tokscan scan --ray`.
"""

from __future__ import annotations

from typing import Any

from .integrations.ray import TEST_HOLD_DIR, connect, import_ray, run_on_ray
from .report import Report

__all__ = ["TEST_HOLD_DIR", "connect", "import_ray", "run_on_ray", "scan_ray"]


def scan_ray(
    paths: list[str],
    profile: str,
    *,
    n_tasks: int | None = None,
    n_buckets: int | None = None,
    fan_in: int = 8,
    **options: Any,
) -> Report:
    """Scans `paths` on a Ray cluster (see the module docs); the report equals a local scan's.

    `options` are `tokscan.scan`'s (`address`, `threads`, `policy`, `near_dup`, `draft_vocab`, `hidden_states`,
    ...): this is `tokscan.scan(paths, profile, engine="ray", ...)`, with the shape of the job. `n_tasks`
    defaults to 4 per CPU of the cluster (at most one per unit of work), `n_buckets` to one per CPU; `fan_in`
    partial summaries are merged at a time. `threads` is the core's thread count inside each task; 0 means 1,
    since Ray already runs one task per CPU. `poll_interval` is at least 0.2 s on Ray (as `tokscan.scan`'s).
    """
    from .api import scan

    return scan(paths, profile, engine="ray", ray_tasks=(n_tasks, n_buckets, fan_in), **options)
