"""The same scan on a Ray cluster: `tokscan.scan(paths, engine="ray")`, `tokscan scan PATHS --ray [ADDRESS]`.

The driver plans the scan from file metadata (the core opens every input's headers once) and submits:

1. one *scan* task per group of units (contiguous rows; each calls the Rust core with the GIL released) that
   returns a partial summary, its sample records, and the keys of the corpus-wide checks split into buckets
   by hash;
2. a tree of *merge* tasks over the partial summaries (`fan_in` at a time), never all of them at once on the
   driver;
3. one *repeats* task per bucket (equal completions, sample ids and prompts meet in the bucket their hash
   selects; a scan task sends one key a group of its rows);
4. one *resolve* task per scan task: its records with every bucket's repeats and the length-outlier fences of
   the merged summary give the samples the corpus-wide checks flag (in full up to the detail limit counted
   from the task's first row, summarized past it);
5. with `near_dup`, one *near_pairs* task per bucket (the band keys of the near-duplicate signatures meet in
   the bucket their hash selects, so each bucket's candidate pairs are final) and one *near* task that reads
   the candidate rows again from the planned corpus (never discovered again: its rows are the pairs'),
   confirms the pairs by exact Jaccard and clusters them (the core's near-duplicate pass, `passes::near_dup::task`).

The driver holds only the merged summary and the flagged samples (in full up to the detail limit per code and
task, 24 bytes each past it), so its memory grows with flagged samples only; sample records and keys stay in
the workers' object stores. The report is the core's, built
from the same pieces as a local scan: identical JSON whatever the number of workers or the order tasks
finish in. A task whose worker dies is retried by Ray (`max_retries`); tasks are pure functions of files,
so a retry gives the same result.

Inputs are on a path every node sees (a shared filesystem), or in an object store (`s3://`, `gs://`, `az://`
URLs). The driver then plans from what opening the corpus reads: each large Parquet object's footer, each NumPy
array's and Megatron `.bin`'s head (ranged reads), the small objects (offsets, indexes, JSONL shards) whole
(`_core.plan_scan` with a staging directory). Each scan task stages, itself, the objects its inputs read at the
versions the driver listed (`RemoteSource` in the core's plan), then the column chunks of its row groups or the
token ranges of its units, so the data never passes through the driver; the *near* task fetches the planned
objects whole. Every worker needs the store's credentials in its environment, as the driver does.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import _core
from ..errors import TokscanError, UsageError, install_hint
from ..options import ScanOptions
from ..report import Report

#: Environment variable (read on the driver) a test sets to hold the first attempt of the first scan task until
#: its worker is killed (tests/test_ray.py): proves that a task whose worker dies is retried and the report is
#: unchanged.
TEST_HOLD_DIR = "TOKSCAN_TEST_RAY_HOLD_DIR"


def import_ray() -> Any:
    """Ray, or a UsageError naming the install command."""
    try:
        import ray
    except ImportError as e:
        raise UsageError(f"--ray / engine='ray' needs Ray, which is not installed: {install_hint('ray')}") from e
    if not hasattr(ray, "init"):  # a stray `ray/` folder (e.g. Ray's temp dir) on sys.path
        raise UsageError(f"--ray / engine='ray' needs Ray, which is not installed: {install_hint('ray')}")
    return ray


def connect(ray: Any, address: str | None) -> bool:
    """Joins the cluster at `address` (or `RAY_ADDRESS`), or starts a local one. True when this call started
    Ray, so the caller shuts it down after the scan."""
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    quiet = {"log_to_driver": False, "logging_level": "ERROR"}
    target = address or os.environ.get("RAY_ADDRESS")
    if target:
        _reachable(target)
    try:
        if target:
            ray.init(address=target, **quiet)
        else:
            ray.init(address="local", include_dashboard=False, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"the Ray cluster at {target}" if target else "a local Ray cluster"
        raise UsageError(f"cannot connect to {where}: {e}") from e
    return True


def _reachable(target: str) -> None:
    """A UsageError within seconds when `target` cannot be a running cluster: `auto` with no cluster started on
    this machine, or a host:port nothing listens on. Ray itself retries such addresses for ~20 s and prints its
    C++ client's log lines meanwhile."""
    import socket

    if target == "auto":
        # Where `ray start` records the running cluster's address (Ray's own lookup for "auto").
        temp = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
        current = Path(temp) / "ray" / "ray_current_cluster"
        if not current.is_file():
            raise UsageError("cannot connect to a Ray cluster at 'auto': none is running on this machine (ray start)")
        return
    if "://" in target:
        return  # ray:// client addresses and the like: Ray says what is wrong
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"cannot connect to the Ray cluster at {target}: expected HOST:PORT, 'auto' or ray://...")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise UsageError(f"cannot connect to the Ray cluster at {target}: {e.strerror or e}") from None


@functools.lru_cache(maxsize=4)
def _profile(spec: str, tokenizer: str | None, trust_remote_code: bool) -> _core.Profile:
    """The profile, loaded once per worker process."""
    from ..profiles import load_profile

    return load_profile(spec, tokenizer, trust_remote_code)


def _hold_for_test(hold: str | None, index: int) -> None:
    if not hold or index != 0:
        return
    marker = os.path.join(hold, "held")
    if os.path.exists(marker):
        return  # the retry
    open(marker, "w").close()
    pid_file = os.path.join(hold, "pid")
    with open(pid_file + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(pid_file + ".tmp", pid_file)
    time.sleep(120)  # killed by the test long before


@functools.cache
def _remote_functions(ray: Any) -> dict[str, Any]:
    """The remote functions, defined once per driver process (Ray exports each definition to the cluster)."""

    @ray.remote(max_retries=3)
    def scan_task(
        index: int,
        hold: str | None,
        task: bytes,
        profile: tuple[str, str | None, bool],
        options: dict[str, Any],
        n_buckets: int,
        counter: Any,
    ) -> tuple[bytes, ...]:
        _hold_for_test(hold, index)
        job = _core.TaskScan(task, _profile(*profile), options, n_buckets)
        if counter is None:
            partial, buckets, records = job.run()
            return (partial, records, *buckets)
        done = threading.Event()
        sent = {"samples": 0, "tokens": 0}

        def report_progress() -> None:
            while not done.wait(0.5):
                p = job.progress()
                counter.add.remote(0, p["samples"] - sent["samples"], p["tokens"] - sent["tokens"])
                sent.update(samples=p["samples"], tokens=p["tokens"])

        t = threading.Thread(target=report_progress, daemon=True)
        t.start()
        try:
            partial, buckets, records = job.run()
        finally:
            done.set()
            t.join()
        p = job.progress()
        ray.get(counter.add.remote(1, p["samples"] - sent["samples"], p["tokens"] - sent["tokens"]))
        return (partial, records, *buckets)

    @ray.remote(max_retries=3)
    def merge(options: dict[str, Any], *parts: bytes) -> bytes:
        return _core.merge_partials(list(parts), options)

    @ray.remote(max_retries=3)
    def repeats(*buckets: bytes) -> bytes:
        return _core.find_repeats(list(buckets))

    @ray.remote(max_retries=3)
    def near_pairs(*buckets: bytes) -> bytes:
        return _core.near_pairs(list(buckets))

    @ray.remote(max_retries=3)
    def near(
        sources: bytes,
        profile: tuple[str, str | None, bool],
        columns: dict[str, str],
        threads: int,
        params: tuple[int, int, int, float],
        partial: bytes,
        *pairs: bytes,
    ) -> bytes:
        return _core.near_duplicates(sources, _profile(*profile), list(pairs), partial, params, columns, threads)

    @ray.remote(max_retries=3)
    def hidden(
        sources: bytes,
        profile: tuple[str, str | None, bool],
        columns: dict[str, str],
        threads: int,
        params: tuple[str, str | None, str | None, int, float],
    ) -> bytes:
        return _core.hidden_states_task(sources, _profile(*profile), params, columns, threads)

    @ray.remote(max_retries=3)
    def resolution(partial: bytes, summarize: bool) -> bytes:
        return _core.resolution(partial, summarize)

    @ray.remote(max_retries=3)
    def resolve(records: bytes, resolution: bytes, *reps: bytes) -> bytes:
        return _core.resolve_flagged(records, list(reps), resolution)

    @ray.remote(num_cpus=0)
    class Counter:
        def __init__(self) -> None:
            self.units = self.samples = self.tokens = 0

        def add(self, units: int, samples: int, tokens: int) -> None:
            self.units += units
            self.samples += samples
            self.tokens += tokens

        def get(self) -> tuple[int, int, int]:
            return self.units, self.samples, self.tokens

    return {
        "scan_task": scan_task,
        "merge": merge,
        "repeats": repeats,
        "resolution": resolution,
        "resolve": resolve,
        "near_pairs": near_pairs,
        "near": near,
        "hidden": hidden,
        "Counter": Counter,
    }


def _unwrap(ray: Any, e: BaseException) -> BaseException:
    """The tokscan error a task raised (Ray wraps it), so the CLI prints one line and exits 2."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, TokscanError):
        return cause
    if isinstance(e, ray.exceptions.RayError):
        return TokscanError(f"the Ray cluster failed the scan: {str(e).splitlines()[0] if str(e) else e}")
    return e


def run_on_ray(
    paths: list[str],
    profile: str,
    options: ScanOptions,
    *,
    trust_remote_code: bool = False,
    address: str | None = None,
    n_tasks: int | None = None,
    n_buckets: int | None = None,
    fan_in: int = 8,
    progress: Callable[[dict[str, int]], None] | None = None,
    poll_interval: float = 0.2,
) -> Report:
    """The Ray engine of `tokscan.scan(engine="ray")`, with the scan's options as it built them (one `ScanOptions`,
    handed to every task and to the driver's last step as they are)."""
    ray = import_ray()
    profile_args = (str(profile), options.tokenizer, trust_remote_code)
    prof = _profile(*profile_args)  # errors in the profile surface before anything is submitted
    run = {
        "started": time.time(),
        "command": options.command,
        "profile_source": options.profile_source,
        "tokenizer": options.tokenizer,
    }
    # Ray runs one task per CPU: a task's core uses one thread unless told otherwise.
    options = options.replace(threads=options.threads or 1)
    started = connect(ray, address)
    try:
        return _run(run, ray, paths, prof, profile_args, options, n_tasks, n_buckets, fan_in, progress, poll_interval)
    finally:
        if started:
            ray.shutdown()


def _run(
    run: dict[str, Any],
    ray: Any,
    paths: list[str],
    prof: _core.Profile,
    profile_args: tuple[str, str | None, bool],
    options: ScanOptions,
    n_tasks: int | None,
    n_buckets: int | None,
    fan_in: int,
    progress: Callable[[dict[str, int]], None] | None,
    poll_interval: float,
) -> Report:
    import tempfile

    from ..remote import any_url, relabel

    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    # Object-store inputs: planned from their footers and headers staged here; the tasks fetch their own parts.
    with tempfile.TemporaryDirectory(prefix="tokscan-plan-") as staging:
        tasks, inputs, rows, _units, _tokens, staged, sources = _core.plan_scan(
            paths, options.columns, n_tasks or 4 * cpus, staging if any_url(paths) else None
        )
        bases = [(local + os.sep, url) for local, url in staged]
        if not tasks:  # no sample anywhere: the core's usage error, naming the inputs
            try:
                _core.finish_report(_core.merge_partials([]), [], prof, inputs)
            except TokscanError as e:
                raise type(e)(relabel(str(e), bases)) from None
    report = _run_tasks(
        run,
        ray,
        sources,
        prof,
        profile_args,
        options,
        tasks,
        inputs,
        rows,
        cpus,
        n_buckets,
        fan_in,
        progress,
        poll_interval,
    )
    return Report(relabel(report.data, bases)) if bases else report


def _run_tasks(
    run: dict[str, Any],
    ray: Any,
    sources: bytes,
    prof: _core.Profile,
    profile_args: tuple[str, str | None, bool],
    options: ScanOptions,
    tasks: list[bytes],
    inputs: str,
    rows: int,
    cpus: int,
    n_buckets: int | None,
    fan_in: int,
    progress: Callable[[dict[str, int]], None] | None,
    poll_interval: float,
) -> Report:
    columns, core_options = options.columns, options.to_core()
    # One copy in the object store for every task (a mapping to check carries a flag per vocabulary id).
    shared_options = ray.put(core_options)
    buckets = max(1, n_buckets or cpus)
    fn = _remote_functions(ray)
    # The progress actor is a process of its own (about a second to start): only when someone watches.
    counter = fn["Counter"].remote() if progress is not None else None
    hold = os.environ.get(TEST_HOLD_DIR)
    maps = [
        fn["scan_task"]
        .options(num_returns=2 + buckets)
        .remote(i, hold, t, profile_args, shared_options, buckets, counter)
        for i, t in enumerate(tasks)
    ]
    try:
        pending = [m[0] for m in maps]
        while pending:
            _ready, pending = ray.wait(pending, num_returns=len(pending), timeout=poll_interval)
            if progress is not None and counter is not None:
                done, samples, tokens = ray.get(counter.get.remote())
                progress(
                    {
                        "units_total": len(tasks),
                        "units_done": min(done, len(tasks)),
                        # A retried task's first attempt may have counted some samples already.
                        "samples": min(samples, rows),
                        "tokens": tokens,
                    }
                )
        # Merge tree over the partial summaries.
        level = [m[0] for m in maps]
        width = max(2, fan_in)
        while len(level) > 1:
            level = [fn["merge"].remote(shared_options, *level[i : i + width]) for i in range(0, len(level), width)]
        merged = level[0]
        reps = [fn["repeats"].remote(*(m[2 + b] for m in maps)) for b in range(buckets)]
        # Past the detail limit the resolve tasks summarize (24 bytes a sample: a corpus of copies does not
        # reach the driver in full); near duplicates join the same rows later, so with them every row is full.
        res = fn["resolution"].remote(merged, options.near_dup is None)
        flagged = [fn["resolve"].remote(m[1], res, *reps) for m in maps]
        near = None
        if options.near_dup is not None:
            pairs = [fn["near_pairs"].remote(*(m[2 + b] for m in maps)) for b in range(buckets)]
            near = fn["near"].remote(sources, profile_args, columns, options.threads, options.near_dup, merged, *pairs)
        # The hidden-state checks in one task (the dump's directory must be readable on its node), beside the
        # resolve tasks.
        hidden = None
        if options.hidden_states is not None:
            hidden = fn["hidden"].remote(sources, profile_args, columns, options.threads, options.hidden_states)
        partial, resolved = ray.get(merged), ray.get(flagged)
        # The findings of the corpus-wide passes that ran in tasks; the driver finishes the others.
        passes = [ray.get(t) for t in (near, hidden) if t is not None]
        run = {**run, "seconds": time.time() - run["started"], "threads": cpus}
        text = _core.finish_report(partial, resolved, prof, inputs, core_options, json.dumps(run), passes)
    except KeyboardInterrupt:
        for m in maps:
            ray.cancel(m[0], force=True)
        raise
    except Exception as e:
        raise _unwrap(ray, e) from e
    finally:
        if counter is not None:
            ray.kill(counter)
    return Report._from_core(text)
