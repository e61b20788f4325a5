"""`tokscan scan`: the whole pass before a training run. `execute` is the orchestration (config, scan,
outputs, verdict) and is what the tests call in-process; the Typer command only parses options."""

import sys
import time
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .. import _core
from ..api import scan as run_scan
from ..errors import UsageError
from .app import (
    CategoryColumnOpt,
    ChatTemplateOpt,
    ConfigOpt,
    FailOn,
    HiddenLayoutOpt,
    HtmlOpt,
    IdColumnOpt,
    IdsColumnOpt,
    JsonOpt,
    MaskColumnOpt,
    OutputColumnOpt,
    OutputFormat,
    ProfileOpt,
    PromptColumnOpt,
    PromptsOpt,
    QuietOpt,
    TargetModelOpt,
    TokenizerOpt,
    TrustRemoteCodeOpt,
    app,
    check_hidden_options,
    check_output,
    columns_from,
    err,
    out,
    refuse_shared_stdout,
    stdout_taken,
    user_errors,
    warn,
    write_output,
)

if TYPE_CHECKING:
    from ..report import Report

#: `--ray` without `--ray-address`: RAY_ADDRESS, else a local cluster. (`--ray-address auto` is Ray's "the
#: cluster running on this machine", and fails when there is none.)
RAY_DEFAULT = ""


def scan_with_progress(paths: list[str] | _core.Corpus, show_progress: bool, **kwargs):
    if not (show_progress and err.is_terminal):
        # Still poll from this thread, so Ctrl-C cancels the scan promptly.
        # A Ray scan without a bar needs no progress actor; Ctrl-C stops either scan.
        return run_scan(paths, progress=None if kwargs.get("engine") == "ray" else (lambda _p: None), **kwargs)
    # rich.progress is imported only when a bar is drawn (a terminal): it is a large part of start-up.
    from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
    from rich.text import Text

    class PartsColumn(ProgressColumn):
        """`done/total parts · N samples`; the total is unknown (None) until the inputs are planned."""

        def render(self, task: Task) -> Text:
            total = "?" if task.total is None else f"{task.total:,.0f}"
            return Text(f"{task.completed:,.0f}/{total} parts · {task.fields.get('samples', 0):,} samples")

    ray = kwargs.get("engine") == "ray"
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        PartsColumn(),
        TimeElapsedColumn(),
        console=err.console,  # type: ignore[attr-defined]
        transient=True,
    ) as bar:
        # A Ray scan first connects to (or starts) a cluster: the bar says so instead of sitting at 0/?.
        task = bar.add_task("starting Ray…" if ray else "scanning", total=None, samples=0)

        def update(p: dict[str, int]) -> None:
            bar.update(
                task,
                description="scanning",
                total=p["units_total"] or None,
                completed=p["units_done"],
                samples=p["samples"],
            )

        return run_scan(paths, progress=update, **kwargs)


@dataclass
class ScanArgs:
    paths: list[str] = field(default_factory=list)
    profile: str | None = None
    tokenizer: Path | None = None
    trust_remote_code: bool = False
    json_out: Path | None = None
    threads: int | None = None
    fail_on: str | None = None
    config: Path | None = None
    baseline: Path | None = None
    junit_out: Path | None = None
    html_out: Path | None = None
    exclude: Path | None = None
    exclude_code: list[str] = field(default_factory=list)
    fmt: OutputFormat = OutputFormat.text
    columns: dict[str, str] = field(default_factory=dict)
    decode: int = 0
    quiet: bool = False
    progress: bool = True
    hint: bool = True
    ngram_coverage: bool = False
    contamination: list[Path] = field(default_factory=list)
    contamination_n: int = _core.CONTAMINATION_N
    contamination_share: float = 0.0
    near_dup: bool = False
    near_dup_n: int = _core.NEAR_DUP_DEFAULTS[0]
    near_dup_bands: int = _core.NEAR_DUP_DEFAULTS[1]
    near_dup_rows: int = _core.NEAR_DUP_DEFAULTS[2]
    near_dup_threshold: float = _core.NEAR_DUP_DEFAULTS[3]
    hidden_states: Path | None = None
    hidden_layout: str | None = None
    target_model: Path | None = None
    agreement_positions: int = _core.AGREEMENT_POSITIONS
    agreement_min: float = _core.AGREEMENT_MIN
    flagged_detail: int = _core.FLAGGED_DETAIL
    draft_vocab: str | None = None
    vocab_size: int | None = None
    vocab_out: Path | None = None
    check_vocab: Path | None = None
    prompts: Path | None = None
    chat_template: Path | None = None
    ray: str | None = None
    argv: list[str] | None = None


def _json(report: "Report", path: Path, _a: ScanArgs, _drifts: Any) -> str:
    if stdout_taken(path):
        write_output(path, report.to_json())
    else:
        report.write_json(path)  # indented and written by the core
    return "JSON report"


def _html(report: "Report", path: Path, _a: ScanArgs, _drifts: Any) -> str:
    if stdout_taken(path):
        write_output(path, report.to_html())
    else:
        report.write_html(path)  # the run as the core recorded it (`run`)
    return "HTML report"


def _junit(report: "Report", path: Path, _a: ScanArgs, drifts: Any) -> str:
    from ..outputs import write_file
    from ..report import ci

    text = ci.junit(report, drifts=drifts)
    if stdout_taken(path):
        write_output(path, text)
    else:
        write_file(path, text, "the JUnit report")
    return "JUnit XML"


def _exclude(report: "Report", path: Path, a: ScanArgs, _drifts: Any) -> str:
    from ..clean import repeated_ids, selected, selected_summarized, write_exclusions

    drop = selected(report, codes=a.exclude_code)
    more = selected_summarized(report, codes=a.exclude_code)
    kind = write_exclusions(drop, path, more, repeated_ids(report))
    return f"exclusion list: {len(drop) + len(more)} sample(s) by {kind}"


@dataclass(frozen=True)
class Output:
    """A file `tokscan scan` writes from its report: the option naming it, the `ScanArgs` field holding its path
    ('-': stdout), and the function that writes it and says what it wrote (said after the summary as "what ->
    path", unless the path is stdout). Every output's path is checked before the scan, and none may replace an
    input (`execute`)."""

    option: str
    field: str
    write: "Callable[[Report, Path, ScanArgs, Any], str]"


#: The outputs, in the order they are checked and written.
OUTPUTS: tuple[Output, ...] = (
    Output("--json", "json_out", _json),
    Output("--junit", "junit_out", _junit),
    Output("--html", "html_out", _html),
    Output("--exclude", "exclude", _exclude),
)


def execute(a: ScanArgs) -> int:
    """Runs a scan as the CLI does and returns its exit code (0 pass, 1 fail or drift). Raises TokscanError on
    bad usage or input; every output path is checked before the scan starts."""
    with ExitStack() as command:
        return _execute(a, command)


def _execute(a: ScanArgs, command: ExitStack) -> int:
    """`execute`; `command` holds what lasts as long as the command (the local copies of object-store inputs)."""
    from ..api import load_profile
    from ..config import discover, load_file
    from ..outputs import profile_file, refuse_clobbering
    from ..report import Report, read_as_report
    from ..report.drift import compare

    cfg = load_file(a.config) if a.config is not None else discover()
    paths = a.paths or cfg.paths
    if not paths:
        raise UsageError("no input paths given (pass PATHS or set `paths` in tokscan.toml)")
    if a.decode:
        from ..remote import refuse

        refuse(list(paths), "--decode")
    if a.exclude_code and a.exclude is None:
        raise UsageError("--exclude-code needs --exclude FILE")
    if stdout_taken(a.json_out) and a.fmt is OutputFormat.github:
        raise UsageError("--format github and --json - both write to stdout; write the JSON to a file")
    outputs = [(o.option, getattr(a, o.field)) for o in OUTPUTS] + [("--out", a.vocab_out)]
    for option, path in outputs:
        check_output(path, option)
    if a.vocab_out is not None:
        from ..vocab import check_output as check_mapping_output

        check_mapping_output(a.vocab_out)
    # Besides the corpus, every file the scan reads: none may be replaced by a report.
    reads = [
        a.config or cfg.source,
        a.baseline,
        profile_file(cfg.profile_name(a.profile)),
        a.tokenizer or cfg.tokenizer,
    ]
    reads += [a.prompts or cfg.prompts, a.chat_template or cfg.chat_template, a.check_vocab, *a.contamination]
    reads += [a.hidden_states, a.target_model]
    refuse_clobbering(outputs, paths, reads)
    check_hidden_options(a.hidden_states, a.hidden_layout, a.target_model)
    from ..vocab import check_sizes, parse_sizes

    if a.vocab_size is not None:
        parse_sizes([a.vocab_size], "--size")  # `tokscan vocab`'s size, also its --draft-vocab by default
    sizes = parse_sizes(a.draft_vocab, "--draft-vocab") if a.draft_vocab is not None else cfg.draft_vocab
    columns = {**cfg.columns, **a.columns}
    profile = cfg.profile_name(a.profile)
    tok_dir = a.tokenizer or cfg.tokenizer
    prof = None
    if sizes or a.vocab_size is not None:
        # Sizes beyond the profile's vocabulary are refused naming their option, before the scan (the profile
        # loaded for it is the scan's, except on Ray, whose workers load their own).
        vocab_prof = load_profile(profile, tok_dir, a.trust_remote_code)
        sizes_from = "--draft-vocab" if a.draft_vocab is not None else f"draft_vocab in {cfg.source}"
        check_sizes(vocab_prof, sizes or [], sizes_from, a.vocab_size, "--size")
        if a.ray is None:
            prof = vocab_prof
    fail_level = a.fail_on or cfg.fail_on or "error"
    base = Report.load(a.baseline) if a.baseline is not None else None
    if base is not None:
        with read_as_report(a.baseline):  # a baseline that cannot be compared is said before the scan, not after
            compare(base, base, cfg.drift)
    to_stdout = refuse_shared_stdout(outputs, a.fmt, a.json_out)
    text_out = not a.quiet and a.fmt is OutputFormat.text and not to_stdout
    threads = a.threads if a.threads is not None else (cfg.threads or 0)
    if threads > (cap := _core.max_threads()):
        if not a.quiet:
            err.print(f"note: {threads:,} threads asked for; using {cap} (at most 4 × the cores)", highlight=False)
        threads = cap
    early = corpus = None
    from ..remote import Bases, any_url, relabel, staged

    # A local scan (not Ray, whose workers load the profile and open their inputs) opens the corpus once: the hint
    # before the scan opens it, and hands it to the scan, which reads it within --threads and its progress bar and
    # keeps it for --decode and the hint after it. The profile is loaded once, for both. Object-store URLs are
    # fetched first, here, to local copies that last as long as the command (the scan, the hints and errors name
    # the URLs). The time said after the summary is the fetch, the opening and the scan, as before.
    local = a.ray is None
    hinting = a.hint and not a.quiet and local
    if hinting and prof is None:
        prof = load_profile(profile, tok_dir, a.trust_remote_code)  # first: a bad profile fails before any fetch
    t0 = time.perf_counter()
    scanned: list[str] = list(paths)
    bases: Bases = []
    if local and any_url(scanned):
        fetching = a.progress and text_out and err.is_terminal
        with err.console.status("fetching objects…") if fetching else nullcontext():  # type: ignore[attr-defined]
            scanned, bases = command.enter_context(staged(scanned))
    if hinting and prof is not None:
        from ..outputs import utf8_paths
        from ..samples.hints import preflight_hint

        corpus = _core.Corpus(utf8_paths(scanned), dict(columns), threads)  # within --threads, as the scan
        # Before the scan: with the wrong profile every sample is flagged, and a long scan would only say so
        # at its end.
        t_hint = time.perf_counter()
        early = preflight_hint(prof, corpus)
        if early is not None:
            err.print(f"[bold yellow]hint:[/] {early.message}", highlight=False, soft_wrap=True)
        t0 += time.perf_counter() - t_hint
    report = scan_with_progress(
        corpus if corpus is not None else scanned,
        a.progress and text_out,
        profile=prof if prof is not None else profile,
        keep_corpus=local and bool(a.decode),  # (a corpus handed to the scan is kept)
        tokenizer=tok_dir,
        columns=columns,
        threads=threads,
        policy=cfg.policy,
        fail_on=fail_level,
        ngram_coverage=a.ngram_coverage,
        contamination=a.contamination or None,
        contamination_n=a.contamination_n,
        contamination_share=a.contamination_share,
        near_dup=a.near_dup,
        near_dup_n=a.near_dup_n,
        near_dup_bands=a.near_dup_bands,
        near_dup_rows=a.near_dup_rows,
        near_dup_threshold=a.near_dup_threshold,
        hidden_states=a.hidden_states,
        hidden_layout=a.hidden_layout,
        target_model=a.target_model,
        agreement_positions=a.agreement_positions,
        agreement_min=a.agreement_min,
        flagged_detail=a.flagged_detail,
        command=a.argv,
        draft_vocab=sizes or None,
        vocab_mapping=a.vocab_size,
        check_vocab=a.check_vocab,
        prompts=a.prompts or cfg.prompts,
        chat_template=a.chat_template or cfg.chat_template,
        trust_remote_code=a.trust_remote_code,
        engine="local" if a.ray is None else "ray",
        address=None if a.ray in (None, RAY_DEFAULT) else a.ray,
        _timed_from_open=corpus is not None,  # the run is the opening and the scan, as for paths
    )
    seconds = time.perf_counter() - t0
    if bases:
        report = Report(relabel(report.data, bases))  # every local copy's path written as its URL
    if a.decode:
        from ..samples.corpus import decode_flagged
        from ..samples.tokenizer import load_tokenizer

        tok = load_tokenizer(tok_dir, a.trust_remote_code) if tok_dir is not None else None
        report.data["decoded"] = decode_flagged(
            report,
            report.corpus if report.corpus is not None else paths,
            tok,
            a.decode,
            columns,
            prof if prof is not None else load_profile(profile, tok_dir, a.trust_remote_code),
        )
    drifts = None
    if base is not None:
        with read_as_report(a.baseline):
            drifts = compare(base, report, cfg.drift)
        report.attach_drift(a.baseline, drifts)
    written: list[str] = []  # "what -> where", said after the summary
    # The mapping leaves the report (it is its own file). Only then is the core's JSON text parsed before it is
    # written: parsing and re-encoding a report of many flagged samples is tens of milliseconds.
    mapping = (report.data.get("draft_vocab") or {}).pop("mapping", None) if a.vocab_size is not None else None
    if mapping is not None and a.vocab_out is not None:
        from ..vocab import write_mapping

        write_mapping(mapping, report.data["draft_vocab"]["vocab_size"], a.vocab_out)
        pad = f", padded: {mapping['distinct']:,} distinct ids seen" if mapping["distinct"] < mapping["size"] else ""
        written.append(f"draft-vocabulary mapping ({mapping['size']:,} ids{pad}) -> {a.vocab_out}")
    for o in OUTPUTS:
        path = getattr(a, o.field)
        if path is not None:
            said = o.write(report, path, a, drifts)
            if said is not None and not stdout_taken(path):
                written.append(f"{said} -> {path}")
    if a.fmt is OutputFormat.json and a.json_out is None:
        write_output(Path("-"), report.to_json())
    elif a.fmt is OutputFormat.github:
        from ..report import ci

        sys.stdout.write(ci.github(report, drifts=drifts))
    if text_out:
        from ..report.terminal import print_decoded, print_drift, print_summary

        print_summary(report, out, seconds=seconds)
        if "decoded" in report.data:
            print_decoded(report.data["decoded"], out)
        if drifts is not None:
            print_drift(drifts, out, a.baseline)
        for line in written:
            out.print(f"wrote {line}", highlight=False, soft_wrap=not out.is_terminal)
    if not a.quiet:
        for i in report.data.get("inputs", []):
            if i.get("warning"):
                warn(f"{i['path']}: {i['warning']}")
    if a.hint and not a.quiet and early is None:
        from ..samples.hints import profile_hint

        hint = profile_hint(report, corpus if corpus is not None else paths, columns)
        if hint is not None:
            err.print(f"[bold yellow]hint:[/] {hint.message}", highlight=False, soft_wrap=True)
    code = report.exit_code()
    return 1 if code or drifts else 0


@app.command()
def scan(
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="PATHS",
            help="Parquet, Arrow IPC / Feather (Hugging Face datasets), Megatron .bin/.idx, nanoGPT / llm.c .bin "
            "and JSONL files, NumPy corpus directories, directories of any of these (recursive), globs "
            "[config: paths].",
        ),
    ] = None,
    profile: ProfileOpt = None,
    tokenizer: TokenizerOpt = None,
    trust_remote_code: TrustRemoteCodeOpt = False,
    json_out: Annotated[Path | None, JsonOpt("the report")] = None,
    threads: Annotated[int | None, typer.Option(metavar="N", help="Worker threads (0 = one per core).", min=0)] = None,
    fail_on: Annotated[
        FailOn | None, typer.Option(help="Exit 1 when anything at or above this severity is found [error].")
    ] = None,
    config_file: ConfigOpt = None,
    baseline: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="A previous JSON report: drift from it fails the run (see `tokscan diff`)."),
    ] = None,
    junit_out: Annotated[Path | None, typer.Option("--junit", metavar="FILE", help="Write a JUnit XML report.")] = None,
    html_out: HtmlOpt = None,
    exclude: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Write the samples to drop here, one per line: sample ids (rows when a sample has none). "
            "Selected by --fail-on severity, or by --exclude-code.",
        ),
    ] = None,
    exclude_code: Annotated[
        list[str] | None,
        typer.Option(metavar="CODE", help="With --exclude: drop the samples with this code (repeatable)."),
    ] = None,
    fmt: Annotated[
        OutputFormat, typer.Option("--format", help="text summary, JSON report, or GitHub annotations on stdout.")
    ] = OutputFormat.text,
    ids_column: IdsColumnOpt = None,
    prompt_column: PromptColumnOpt = None,
    output_column: OutputColumnOpt = None,
    mask_column: MaskColumnOpt = None,
    id_column: IdColumnOpt = None,
    category_column: CategoryColumnOpt = None,
    decode: Annotated[
        int,
        typer.Option(
            metavar="N",
            help="Show up to N flagged samples per code: decoded with --tokenizer, else as ids with token names.",
            min=0,
        ),
    ] = 0,
    flagged_detail: Annotated[
        int,
        typer.Option(
            metavar="N",
            help="Full detail for the first N flagged samples of each code; the rest as row and codes only "
            "(still in --exclude and clean). 0: every one in full.",
            min=0,
        ),
    ] = _core.FLAGGED_DETAIL,
    ngram_coverage: Annotated[
        bool,
        typer.Option(
            "--ngram-coverage", help="Also measure each completion's repeated 10-gram coverage (~20 % slower)."
        ),
    ] = False,
    contamination: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="FILE",
            help="A benchmark file (JSONL or Parquet; repeat for several): flag samples sharing a token n-gram "
            "with one of its items (text fields tokenized with --tokenizer, lists of ints taken as token ids).",
        ),
    ] = None,
    contamination_n: Annotated[
        int, typer.Option(metavar="N", min=1, help="With --contamination: the n-gram length in tokens.")
    ] = _core.CONTAMINATION_N,
    contamination_share: Annotated[
        float,
        typer.Option(
            metavar="FRACTION",
            min=0.0,
            max=1.0,
            help="With --contamination: flag only when this share of a prompt's or completion's n-grams match "
            "(0: any one).",
        ),
    ] = 0.0,
    near_dup: Annotated[
        bool,
        typer.Option(
            "--near-dup",
            help="Find near-duplicate completions (MinHash LSH over token n-grams, confirmed by exact Jaccard).",
        ),
    ] = False,
    near_dup_n: Annotated[
        int, typer.Option(metavar="N", min=1, help="With --near-dup: n-gram length.")
    ] = _core.NEAR_DUP_DEFAULTS[0],
    near_dup_bands: Annotated[
        int, typer.Option(metavar="B", min=1, help="With --near-dup: LSH bands.")
    ] = _core.NEAR_DUP_DEFAULTS[1],
    near_dup_rows: Annotated[
        int, typer.Option(metavar="R", min=1, help="With --near-dup: rows per band.")
    ] = _core.NEAR_DUP_DEFAULTS[2],
    near_dup_threshold: Annotated[
        float,
        typer.Option(metavar="J", min=0.0, max=1.0, help="With --near-dup: the exact Jaccard that confirms a pair."),
    ] = _core.NEAR_DUP_DEFAULTS[3],
    hidden_states: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="Check the EAGLE-3 hidden-state dump made from this corpus (SpecForge .ckpt, speculators "
            ".safetensors, Model-Optimizer / AngelSlim .pt): every file paired with its sample, shapes, ids, loss "
            "mask, NaN / zero rows, norm scale (hidden_* codes, the report's hidden_states section).",
        ),
    ] = None,
    hidden_layout: HiddenLayoutOpt = None,
    target_model: TargetModelOpt = None,
    agreement_positions: Annotated[
        int,
        typer.Option(
            metavar="N",
            min=0,
            help="With --target-model: completion positions checked for agreement over the whole dump, 16 per "
            "sample (0: every position of every sample, as far as 1 GiB of held states allows; each position "
            "costs a pass over lm_head's rows on CPU).",
        ),
    ] = _core.AGREEMENT_POSITIONS,
    agreement_min: Annotated[
        float,
        typer.Option(
            metavar="RATE",
            min=0.0,
            max=1.0,
            help="With --target-model: a sample whose sampled positions agree less than this is hidden_disagree.",
        ),
    ] = _core.AGREEMENT_MIN,
    draft_vocab: Annotated[
        str | None,
        typer.Option(
            metavar="K,K,...",
            help="Report the share of loss-bearing tokens the corpus's top-K ids cover, per category and overall, "
            "for each draft-vocabulary size K [config: draft_vocab].",
        ),
    ] = None,
    check_vocab: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="Check an EAGLE-3 d2t/t2d mapping (.pt, .npz or .json) against this corpus: draft_vocab_stale "
            "when it does not fit (see `tokscan vocab`).",
        ),
    ] = None,
    prompts: PromptsOpt = None,
    chat_template: ChatTemplateOpt = None,
    quiet: QuietOpt = False,
    progress: Annotated[bool, typer.Option(help="Progress bar on stderr (terminals only).")] = True,
    ray: Annotated[
        bool,
        typer.Option(
            "--ray",
            help="Run the scan on a Ray cluster (--ray-address, else RAY_ADDRESS, else a local one started for "
            "the scan): the same report as a local scan. Needs Ray (the `ray` extra).",
        ),
    ] = False,
    ray_address: Annotated[
        str | None,
        typer.Option(metavar="ADDRESS", help="With --ray: the cluster to join (host:port, or 'auto')."),
    ] = None,
) -> None:
    """Scan a corpus: per-category statistics, boundary-token counts and every anomalous sample."""
    with user_errors():
        if ray_address is not None and not ray:
            raise UsageError("--ray-address needs --ray")
        code = execute(
            ScanArgs(
                paths=paths or [],
                profile=profile,
                tokenizer=tokenizer,
                trust_remote_code=trust_remote_code,
                json_out=json_out,
                threads=threads,
                fail_on=fail_on.value if fail_on else None,
                config=config_file,
                baseline=baseline,
                junit_out=junit_out,
                html_out=html_out,
                exclude=exclude,
                exclude_code=exclude_code or [],
                fmt=fmt,
                columns=columns_from(
                    input_ids=ids_column,
                    prompt_ids=prompt_column,
                    output_ids=output_column,
                    loss_mask=mask_column,
                    sample_id=id_column,
                    category=category_column,
                ),
                decode=decode,
                quiet=quiet,
                progress=progress,
                ngram_coverage=ngram_coverage,
                contamination=contamination or [],
                contamination_n=contamination_n,
                contamination_share=contamination_share,
                near_dup=near_dup,
                near_dup_n=near_dup_n,
                near_dup_bands=near_dup_bands,
                near_dup_rows=near_dup_rows,
                near_dup_threshold=near_dup_threshold,
                hidden_states=hidden_states,
                hidden_layout=hidden_layout,
                target_model=target_model,
                agreement_positions=agreement_positions,
                agreement_min=agreement_min,
                flagged_detail=flagged_detail,
                draft_vocab=draft_vocab,
                check_vocab=check_vocab,
                prompts=prompts,
                chat_template=chat_template,
                ray=(ray_address or RAY_DEFAULT) if ray else None,
                argv=["tokscan", *sys.argv[1:]],
            )
        )
    raise typer.Exit(code)
