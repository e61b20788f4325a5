"""Acting on a scan's findings: the exclusion list (`scan --exclude`) and a cleaned copy of the corpus
(`tokscan clean`). Python picks the samples and writes the manifest; each input's format writes its own
filtered copy in the core (`_core.Corpus.write_filtered`), so the rows a scan numbers and the rows a copy
drops come from the same reader. The source is only ever read."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _core
from .errors import ReportError, UsageError, did_you_mean
from .outputs import write_file
from .report import Report, read_as_report

if TYPE_CHECKING:
    from .report import PolicyValue
    from .report.schema import FlaggedSample

MANIFEST = "tokscan-clean.json"


def selected(
    report: Report,
    fail_on: str | None = None,
    codes: Iterable[str] = (),
    policy: Mapping[str, PolicyValue] | None = None,
) -> list[FlaggedSample]:
    """The flagged samples to drop that the report lists in full: those with any of `codes` when given, else
    those with a code that fails the run under `fail_on` and `policy` (each defaulting to what the scan ran
    with; the core's decision: ignored, tolerated and below-`fail_on` codes are kept, exactly as the exit code
    treats them). `selected_summarized` gives the rows of the others (past the scan's detail limit)."""
    want = _wanted(report, fail_on, codes, policy)
    return [f for f in report.flagged if want.intersection(f["codes"])]


def selected_summarized(
    report: Report,
    fail_on: str | None = None,
    codes: Iterable[str] = (),
    policy: Mapping[str, PolicyValue] | None = None,
) -> np.ndarray:
    """The rows (ascending) of the samples to drop that the report keeps without detail
    (`flagged_summarized`), chosen as `selected` chooses."""
    return report.summarized_rows(_wanted(report, fail_on, codes, policy))


def _wanted(
    report: Report, fail_on: str | None, codes: Iterable[str], policy: Mapping[str, PolicyValue] | None
) -> set[str]:
    codes = list(codes)
    unknown = [c for c in codes if c not in report.anomalies]
    if unknown:
        hint = did_you_mean(unknown[0], report.anomalies)
        raise UsageError(f"unknown anomaly code(s): {', '.join(unknown)}{hint} (see `tokscan codes`)")
    return set(codes) if codes else set(report.failures(fail_on, policy))


def _one_line(sample_id: str) -> str:
    """A sample id on one line, written so that every line reads back to one id: a backslash as `\\\\`, a
    control character (a newline above all; C0, DEL, C1) as `\\xNN`, a line or paragraph separator (U+2028,
    U+2029: `str.splitlines` breaks there) as `\\uNNNN`, every other character as it is
    (docs/guide/acting-on-findings.md has the line of Python that reads one back)."""
    return _UNSAFE.sub(_escaped, sample_id)


#: What `_one_line` escapes: a backslash, C0 and C1 control characters and DEL, U+2028 and U+2029.
_UNSAFE = re.compile(r"[\\\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escaped(m: re.Match[str]) -> str:
    c = m.group()
    if c == "\\":
        return "\\\\"
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def repeated_ids(report: Report) -> set[str] | None:
    """The sample ids more than one row of the corpus holds, as `str`: those of the rows flagged
    `sample_id_duplicate` (the first holder of each is not flagged, and has the same id). None when the report
    kept some of those rows without detail, whose ids it does not give."""
    summarized = report.data.get("flagged_summarized", {}).get("by_code", {})
    if summarized.get("sample_id_duplicate"):
        return None
    return {str(f["sample_id"]) for f in report.flagged if "sample_id_duplicate" in f["codes"]}


def write_exclusions(
    entries: Sequence[Mapping[str, Any]],
    path: Path,
    more_rows: np.ndarray | None = None,
    shared: Collection[str] | None = (),
) -> str:
    """Writes one line per sample: its sample_id when every selected sample has one that no other row holds
    (`shared`: the corpus's repeated ids, see `repeated_ids`; None when unknown) and the report listed each in
    full, else its global row, in row order: a loader that drops by id would also drop the other holders of a
    repeated id. `more_rows` are the selected samples the report kept without detail (their ids are not in the
    report, so they make the list one of rows). Returns which of the two it wrote."""
    extra = more_rows if more_rows is not None else np.zeros(0, np.int64)
    by_id = (
        bool(entries)
        and not len(extra)
        and shared is not None
        and all(f["sample_id"] is not None and str(f["sample_id"]) not in shared for f in entries)
    )
    text: Iterable[str]
    if by_id:
        text = ["".join(_one_line(str(f["sample_id"])) + "\n" for f in entries)]
    else:
        # The rows listed in full and the summarized ones are disjoint and each ascending: one merge, no sort.
        listed = np.unique(np.array([f["row"] for f in entries], dtype=np.int64))
        rows = np.insert(extra.astype(np.int64, copy=False), np.searchsorted(extra, listed), listed)
        # Written a chunk at a time: ten million rows as one string (or a list of Python ints) would cost more
        # than the rows themselves.
        text = ("".join(f"{r}\n" for r in rows[i : i + (1 << 18)].tolist()) for i in range(0, len(rows), 1 << 18))
    if str(path) == "-":
        import sys

        for piece in text:
            sys.stdout.write(piece)
    else:
        write_file(path, text, "the exclusion list")
    return "sample_id" if by_id else "row"


def _common_root(given: list[str], sources: list[str]) -> Path:
    """The folder the output directory stands for: the given directory (or the deepest folder holding all the
    given paths), so `clean DIR --out NEW` makes NEW a drop-in replacement for DIR. Paths are made absolute
    without following symlinks, so a symlink keeps its own name and place in the copy."""
    bases = []
    for p in given:
        if os.path.isdir(p):
            bases.append(os.path.abspath(p))
        elif os.path.isfile(p):
            bases.append(os.path.dirname(os.path.abspath(p)))
        else:  # a glob or a Megatron prefix
            bases = [os.path.dirname(os.path.abspath(s)) for s in sources]
            break
    bases += [os.path.dirname(os.path.abspath(s)) for s in sources if not os.path.isdir(s)]
    bases += [os.path.abspath(s) for s in sources if os.path.isdir(s)]
    return Path(os.path.commonpath(bases))


def _same_inputs(report: Report, inputs: list[tuple[str, str, Any]], counts: list[int]) -> None:
    """Refuses a report of other inputs: other files (paths as the scan named them, resolved from here) or
    other sample counts, naming the report and the first input that differs."""
    have = [(str(Path(p).resolve()), int(n)) for (p, _f, _c), n in zip(inputs, counts, strict=True)]
    listed = report.data.get("inputs", [])
    want = [(str(Path(i["path"]).resolve()), int(i["samples"])) for i in listed]
    if have == want:
        return
    origin = report.origin or "the report"
    if len(have) != len(want):
        why = f"it lists {len(want)} input(s), the paths given hold {len(have)}"
    else:
        k = next(k for k, (h, w) in enumerate(zip(have, want, strict=True)) if h != w)
        named, (path, n) = listed[k]["path"], have[k]
        why = (
            f"it lists {named} with {want[k][1]} samples where the paths given hold {path} with {n}"
            if want[k][0] == path
            else f"it lists {named} (from here: {want[k][0]}) where the paths given hold {path}"
        )
    raise ReportError(
        f"{origin}: does not describe these inputs ({why}); run `tokscan scan` on the same paths, from the same "
        "directory, first"
    )


def _same_samples(report_origin: str, corpus: Any, drop: Sequence[Mapping[str, Any]]) -> None:
    """Refuses a report whose rows now hold other samples (a shard rewritten in another order since the scan,
    with as many samples): every sample id the report gives a removed row must be the id read at that row. (A
    row read without an id — the scan named the id column, this command does not — is not compared.)"""
    named = sorted((int(f["row"]), f["sample_id"]) for f in drop if f["sample_id"] is not None)
    if not named:
        return
    ids = corpus.core.sample_ids_at([row for row, _ in named])
    for (row, want), have in zip(named, ids, strict=True):
        if have is not None and str(have) != str(want):
            raise ReportError(
                f"{report_origin}: row {row} is sample {want!r} in the report but {have!r} in the corpus: "
                "the inputs changed since the scan; scan them again"
            )


def _same_content(report: Report, corpus: Any, drop: Sequence[Mapping[str, Any]]) -> None:
    """Refuses a report whose rows to remove now hold other samples, by their content: the scan recorded a key of
    each flagged row's ids (`content`; one key of all the rows past the detail limit, `content_digest`), and the
    rows are read again and compared before anything is written (a corpus without ids whose lines were reordered
    since the scan: `_same_samples` has no id to compare). A report written before keys were recorded is not
    compared."""
    origin = report.origin or "the report"
    rows, keys = [], []
    for f in drop:
        key = f.get("content")
        if key:
            try:
                keys.append(int(key, 16))
            except (TypeError, ValueError):
                raise ReportError(f"{origin}: row {f['row']}: content {key!r} is not a content key") from None
            rows.append(int(f["row"]))
    digest = report.summarized_content_digest()
    if digest is not None:
        # The rows past the detail limit have one key between them: every one is read again (whether or not
        # this clean removes it), one batch at a time.
        listed, _masks, _codes = report.summarized()
        if corpus.core.content_digest_at(listed.tolist()) != digest:
            raise ReportError(
                f"{origin}: the rows it lists past --flagged-detail hold other samples than the ones the scan "
                "flagged there (their tokens differ): the inputs changed since the scan; scan them again"
            )
    if not rows:
        return
    order = np.argsort(np.array(rows, dtype=np.int64), kind="stable")
    rows = [rows[i] for i in order]
    keys = [keys[i] for i in order]
    have = corpus.core.content_keys_at(rows)
    for row, want, got in zip(rows, keys, have, strict=True):
        if want != got:
            raise ReportError(
                f"{origin}: row {row} holds another sample than the one the scan flagged there (its tokens differ): "
                "the inputs changed since the scan; scan them again"
            )


def _check_out(out: Path, paths: list[str], sources: list[str]) -> None:
    """Refuses an output directory that overlaps an input (inside a scanned directory the copy would be
    scanned with it next time; around it, it would mix) or that is not new or empty."""
    from .outputs import input_paths, refuse_overlap

    refuse_overlap(out, "--out", input_paths([*paths, *sources]))
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out}: exists and is not an empty directory")


def _made_dirs(d: Path, made: list[Path]) -> None:
    """Creates the directory `d` and its missing parents, recording each one it creates in `made`."""
    missing = []
    while not d.exists():
        missing.append(d)
        d = d.parent
    for m in reversed(missing):
        m.mkdir(exist_ok=True)
        made.append(m)


def write_copy(
    corpus: Any, paths: list[str], drop_rows: Iterable[int], out: Path, made: list[Path] | None = None
) -> list[dict[str, Any]]:
    """Writes every input of `corpus` (a `tokscan.forensics.Corpus` of `paths`) under `out` without the global rows
    `drop_rows`, each through the core's writer of its format (the reader that numbered the rows), at the
    same place relative to the inputs' common folder. Returns one manifest entry per input: `source`,
    `output`, `samples`, `kept` (rows written); when the format has no valid file for what is kept (JSONL with
    no sample line) `output` is None, `kept` 0 and `omitted` says why. Every file and folder it creates is
    appended to `made` as it goes (what a failure removes)."""
    made = made if made is not None else []
    sources = [p for p, _f, _c in corpus.inputs]
    root = _common_root(paths, sources)
    rows = np.unique(np.fromiter(drop_rows, dtype=np.int64))
    n_all = int(corpus.starts[-1])
    if len(rows) and (rows[0] < 0 or rows[-1] >= n_all):
        bad = int(rows[0] if rows[0] < 0 else rows[-1])
        raise ReportError(f"the report names row {bad}, but the corpus has {n_all} samples")
    targets = [out / Path(os.path.abspath(p)).relative_to(root) for p in sources]
    seen: dict[Path, str] = {}
    for src, dst in zip(sources, targets, strict=True):
        if dst in seen:  # never write one output twice
            raise UsageError(f"{src} and {seen[dst]} would both be written to {dst}")
        seen[dst] = src
    if out / MANIFEST in seen:
        raise UsageError(f"{seen[out / MANIFEST]} would be written to {out / MANIFEST}, where the manifest goes")
    # The files beside the inputs that no input is read from (prompts files, which name the categories and pair
    # the samples; a DatasetDict's dataset_dict.json; notes): copied as they are, so that the copy stands in for
    # the source. Those outside the copied folder, or where an input's copy goes, are left.
    sides = []
    for side in corpus.core.side_files:
        rel = os.path.relpath(os.path.abspath(side), root)
        dst = out / rel
        if rel == os.pardir or rel.startswith(os.pardir + os.sep) or dst in seen or dst == out / MANIFEST:
            continue
        sides.append((side, dst))
    files = []
    for k, (src, dst) in enumerate(zip(sources, targets, strict=True)):
        start, n = int(corpus.starts[k]), int(corpus.counts[k])
        keep = np.ones(n, dtype=bool)
        keep[rows[(rows >= start) & (rows < start + n)] - start] = False
        _made_dirs(dst.parent, made)
        in_place = dst.is_dir()  # a NumPy folder given as `out`, which exists empty (`_check_out`)
        if not os.path.lexists(dst):
            made.append(dst)
        try:
            kept, written, omitted = corpus.core.write_filtered(k, keep, dst)
        finally:
            if in_place:
                made.extend(dst.iterdir())  # it was empty: all it holds now is this write's
        entry: dict[str, Any] = {"source": os.path.abspath(src), "output": str(dst) if written else None}
        entry.update(samples=n, kept=int(kept))
        if omitted is not None:
            entry["omitted"] = omitted
        files.append(entry)
    _made_dirs(out, made)
    for side, dst in sides:
        _made_dirs(dst.parent, made)
        try:
            with open(side, "rb") as src, open(dst, "xb") as w:
                made.append(dst)
                shutil.copyfileobj(src, w)
        except FileExistsError:
            continue  # written by an input's writer (a NumPy folder copies its own other files)
        except OSError as e:
            raise UsageError(f"{dst}: cannot copy {side} ({e.strerror or e})") from None
        files.append({"source": os.path.abspath(side), "output": str(dst), "copied": True})
    return files


def clean(
    paths: list[str],
    report: Report,
    out: Path | str,
    *,
    fail_on: str | None = None,
    codes: Iterable[str] = (),
    policy: Mapping[str, PolicyValue] | None = None,
    columns: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Writes the corpus of `paths` without the selected samples under `out` (a new or empty directory, or an
    object-store prefix that holds no object yet); returns the manifest. The selection and the manifest are
    Python's; every byte of the copy is written by the core's writer of each input's format."""
    from .remote import is_url

    kw: dict[str, Any] = dict(fail_on=fail_on, codes=codes, policy=policy, columns=columns)
    if isinstance(out, str) and is_url(out):
        return _clean_to_url(paths, report, out, **kw)
    return _clean(paths, report, Path(out), **kw)


def _clean_to_url(paths: list[str], report: Report, url: str, **kw: Any) -> dict[str, Any]:
    """`clean` into a local staging directory, uploaded to the prefix `url` by the core (then deleted); every
    path of the manifest is the object's URL. A prefix that overlaps an input URL or holds an object already
    is refused before anything is read or written."""
    import tempfile

    from .remote import is_url

    target = url.rstrip("/") + "/"
    for p in paths:
        if is_url(p) and (target.startswith(p.rstrip("/") + "/") or (p.rstrip("/") + "/").startswith(target)):
            raise UsageError(f"{url}: --out overlaps the input {p}")
    with tempfile.TemporaryDirectory(prefix="tokscan-clean-") as d:
        _core.upload_objects(d, url)  # nothing yet: refused here when the prefix holds an object
        local = Path(d) / "out"
        manifest = _clean(paths, report, local, out_url=target, **kw)
        # The manifest last: a prefix without it is an interrupted copy.
        _core.upload_objects(str(local), url, MANIFEST)
    return manifest


def _clean(
    paths: list[str],
    report: Report,
    out: Path,
    *,
    fail_on: str | None = None,
    codes: Iterable[str] = (),
    policy: Mapping[str, PolicyValue] | None = None,
    columns: Mapping[str, str] | None = None,
    out_url: str | None = None,
) -> dict[str, Any]:
    from .remote import relabel, staged
    from .samples.corpus import Corpus

    codes = list(codes)
    undo = ExitStack()
    # Object-store URLs are fetched to a temporary directory, read there and named by their URLs.
    with undo, staged(list(paths)) as (local, bases):
        corpus = Corpus(local, columns)
        _same_inputs(report, [(relabel(p, bases), f, c) for p, f, c in corpus.inputs], corpus.counts)
        _check_out(out, local, [p for p, _f, _c in corpus.inputs])
        made = undo.enter_context(_removed_on_failure(out))
        with read_as_report(report.origin or "the report"):
            # One entry a row, however often a (hand-edited or merged) report lists it.
            drop = list({int(f["row"]): f for f in selected(report, fail_on, codes, policy)}.values())
            more = selected_summarized(report, fail_on, codes, policy)
            rows = np.union1d(np.array([int(f["row"]) for f in drop], dtype=np.int64), more)
            _same_samples(report.origin or "the report", corpus, drop)
            _same_content(report, corpus, drop)
        # The copy's paths, as the bucket will name them when it goes to one.
        out_bases = [(str(out) + os.sep, out_url)] if out_url else []
        entries = relabel(write_copy(corpus, local, rows, out, made), [*bases, *out_bases])
        manifest = _manifest(report, entries, drop, more, rows, codes, fail_on, policy)
        made.append(out / MANIFEST)
        write_file(out / MANIFEST, json.dumps(manifest, indent=2) + "\n", "the manifest")
    return manifest


def _absolute(source: str) -> str:
    """A report's input path as the manifest's `inputs` give theirs (absolute; a URL as it is)."""
    from .remote import is_url

    return source if is_url(source) else os.path.abspath(source)


@contextmanager
def _removed_on_failure(out: Path) -> Iterator[list[Path]]:
    """Yields the list a copy into `out` records what it creates in (files, folders, a NumPy folder the core
    writes whole), and removes exactly those when the copy fails part-way (a full disk, Ctrl-C): no half-written
    shards without a manifest stay behind, running it again is not refused, and nothing it did not create is
    touched."""
    made: list[Path] = []
    try:
        yield made
    except BaseException:
        for p in reversed(made):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with suppress(OSError):
                    p.unlink()
        raise


def _manifest(
    report: Report,
    entries: list[dict[str, Any]],
    drop: list[Any],
    more: np.ndarray,
    rows: np.ndarray,
    codes: list[str],
    fail_on: str | None,
    policy: Mapping[str, PolicyValue] | None,
) -> dict[str, Any]:
    files = [f for f in entries if "copied" not in f]
    copied = [{"source": f["source"], "output": f["output"]} for f in entries if "copied" in f]
    manifest = {
        "tool": {"name": "tokscan", "version": _core.__version__},
        "selection": {"codes": sorted(set(codes))} if codes else {"fail_on": report.judged_by(fail_on, policy)[0]},
        "inputs": files,
        "samples": sum(f["samples"] for f in files),
        "kept": sum(f["kept"] for f in files),
        "removed": [
            {
                **{k: f[k] for k in ("row", "sample_id", "category", "codes", "severity")},
                "source": _absolute(f["source"]),
            }
            for f in drop
        ],
    }
    if copied:
        manifest["copied"] = copied
    # A prompts file paired by line pairs the k-th sample of its folder with its k-th record: copied whole into
    # a copy with samples removed, it pairs the later ones with other records. (Said of every such file copied
    # when any sample goes: a category column may file a folder's samples under other names.)
    copied_from = {c["source"] for c in copied}
    shifted = [
        p["path"]
        for p in report.data.get("pairing", [])
        if p.get("matched_by") == "line" and _absolute(p["path"]) in copied_from
    ]
    if shifted and len(rows):
        manifest["warnings"] = [
            f"{path}: pairs its samples by line and was copied whole; with samples removed, the copy pairs its later "
            "samples with other records (give the records an `id` to pair by id)"
            for path in shifted
        ]
    if len(more):
        # The samples the report kept without detail: counted, not listed one by one.
        manifest["removed_summarized"] = len(np.setdiff1d(more, [int(f["row"]) for f in drop]))
    # Rows neither kept nor removed: lines that are no sample (malformed JSONL), left out with a file that kept
    # no sample line (`omitted` in its entry). Said, so that every row is accounted for.
    not_copied = manifest["samples"] - manifest["kept"] - len(rows)
    if not_copied:
        manifest["not_copied"] = not_copied
    return manifest
