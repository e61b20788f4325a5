"""The scan report: a thin typed view over the JSON document the core produces."""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from .. import _core
from ..errors import ReportError, UsageError, did_you_mean

if TYPE_CHECKING:
    import numpy as np

    from .schema import FlaggedSample, ReportDoc

#: One `[policy]` value as written: a severity ("error"), "ignore", a tolerated count (10) or rate ("0.5%").
#: The core's policy engine parses and applies it; Python only carries it.
PolicyValue = str | int

#: The report schema this tokscan writes, and the ones it reads: the core's (2 added `run`, 3 typed ids).
SCHEMA_VERSION: int = _core.SCHEMA_VERSION
READABLE_SCHEMAS: tuple[int, ...] = tuple(_core.READABLE_SCHEMAS)
#: A finding's severities, most severe first, and what `--fail-on` accepts (the severities, then "never").
SEVERITIES: tuple[str, ...] = tuple(_core.SEVERITIES)
SEVERITY_RANK = {s: len(SEVERITIES) - 1 - i for i, s in enumerate(SEVERITIES)}  # higher is worse
FAIL_ON: tuple[str, ...] = tuple(_core.FAIL_ON_LEVELS)


def _short(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


class Report:
    """A scan report. `data` is exactly the JSON document (docs/reference/report-schema.md has its schema).

    A report from a scan wraps the JSON text the core wrote and parses it on first use of `data`, so
    `write_json` right after a scan (what `tokscan scan -q --json F` does) never builds the Python objects."""

    __slots__ = ("__weakref__", "_columns", "_core_corpus", "_corpus", "_data", "_text", "origin")

    def __init__(self, data: dict[str, Any]) -> None:
        self._data: dict[str, Any] | None = data
        self._text: str | None = None
        #: The file a loaded report was read from (errors about its fields name it); None for a scan's own.
        self.origin: str | None = None
        self._core_corpus: _core.Corpus | None = None
        self._columns: dict[str, str] = {}
        self._corpus: Any = None

    @classmethod
    def _from_core(
        cls, text: str, corpus: _core.Corpus | None = None, columns: Mapping[str, str] | None = None
    ) -> Report:
        """The report the core just produced: its compact JSON text, parsed lazily, and the corpus it read
        (opened with `columns`)."""
        report = cls.__new__(cls)
        report._data, report._text, report._corpus = None, text, None
        report._core_corpus, report._columns = corpus, dict(columns or {})
        report.origin = None
        return report

    def __reduce__(self) -> tuple[Any, ...]:
        # The open corpus stays in this process: a pickled report is its JSON document.
        return (Report, (self.data,))

    @property
    def corpus(self) -> Any:
        """The corpus this scan read, still open (a `tokscan.forensics.Corpus`): flagged samples are fetched
        from it without discovering and opening the inputs again. None for a report loaded from JSON, a Ray
        scan, or a scan of object-store URLs (their local copies are gone). Its inputs stay open (mapped) as
        long as the report is referenced."""
        if self._corpus is None and self._core_corpus is not None:
            from ..samples.corpus import Corpus  # numpy: only when samples are asked for

            self._corpus = Corpus.of(self._core_corpus, self._columns)
        return self._corpus

    @property
    def data(self) -> ReportDoc:
        """The JSON document (typed by `tokscan.report.schema.ReportDoc`; every field is in
        docs/reference/report-schema.md)."""
        if self._data is None:
            # One assignment of a fully parsed dict, so a concurrent reader sees either nothing or all of it.
            data = json.loads(self._text)  # type: ignore[arg-type]
            self._data = data
        return cast("ReportDoc", self._data)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Report):
            return NotImplemented
        return self.data == other.data

    def found(self) -> dict[str, int]:
        """The codes found (count > 0) with their counts, worst severity first, then most frequent."""
        rows = sorted(
            ((c, a) for c, a in self.anomalies.items() if a["count"]),
            key=lambda ca: (-SEVERITY_RANK[ca[1]["severity"]], -ca[1]["count"], ca[0]),
        )
        return {c: int(a["count"]) for c, a in rows}

    def __repr__(self) -> str:
        found = self.found()
        shown = ", ".join(f"{c}={n}" for c, n in list(found.items())[:4])
        more = f", +{len(found) - 4} more" if len(found) > 4 else ""
        return (
            f"<Report profile={self.data['profile']['name']!r} samples={self.n_samples:,} "
            f"tokens={_short(self.n_tokens)} flagged={self.n_flagged:,} codes: {shown or 'none'}{more}>"
        )

    def __str__(self) -> str:
        found = self.found()
        head = (
            f"tokscan report · profile {self.data['profile']['name']} · {len(self.data['inputs'])} input(s) · "
            f"{self.n_samples:,} samples · {_short(self.n_tokens)} tokens · {self.n_flagged:,} flagged"
        )
        if not found:
            return head + "\nno anomalies found"
        codes = ", ".join(f"{c} {n:,} ({self.anomalies[c]['severity']})" for c, n in found.items())
        return f"{head}\ncodes found: {codes}"

    def _code(self, code: str) -> str:
        """`code` when it is an anomaly code; otherwise a UsageError naming it, the closest code and all codes."""
        if code in self.anomalies:
            return code
        valid = sorted(self.anomalies)
        hint = did_you_mean(code, valid)
        raise UsageError(f"unknown anomaly code {code!r}{hint} (valid codes: {', '.join(valid)})")

    @property
    def run(self) -> dict[str, Any] | None:
        """How the scan ran (`started`, `seconds`, `engine`, `threads`, and when known `command`,
        `profile_source`, `tokenizer`), as the core recorded it; None for a report of schema 1."""
        run = self.data.get("run")
        return dict(run) if isinstance(run, dict) else None

    @property
    def findings(self) -> dict[str, Any]:
        """The report without `run`: what was found, equal for the same corpus and options whatever the date,
        engine or thread count (compare two scans with it)."""
        return {k: v for k, v in self.data.items() if k != "run"}

    @property
    def n_samples(self) -> int:
        return int(self.data["n_samples"])

    @property
    def n_tokens(self) -> int:
        return int(self.data["n_tokens"])

    @property
    def categories(self) -> dict[str, Any]:
        return self.data["categories"]

    @property
    def anomalies(self) -> dict[str, Any]:
        return self.data["anomalies"]

    @property
    def flagged(self) -> list[FlaggedSample]:
        return self.data["flagged"]

    @property
    def n_flagged(self) -> int:
        """Flagged samples in all: those `flagged` lists in full and those `flagged_summarized` packs."""
        return len(self.flagged) + int(self.data.get("flagged_summarized", {}).get("samples", 0))

    def flagged_by_category(self) -> dict[str, int]:
        """Flagged samples per category, the summarized ones included."""
        out: dict[str, int] = {}
        for f in self.flagged:
            out[f["category"]] = out.get(f["category"], 0) + 1
        for cat, n in self.data.get("flagged_summarized", {}).get("by_category", {}).items():
            out[cat] = out.get(cat, 0) + int(n)
        return out

    def summarized(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """The flagged samples past the scan's detail limit (`flagged_summarized`; none when absent): their rows
        (ascending, int64), their codes as bit masks (uint64) and the code each bit stands for."""
        import numpy as np

        s = self.data.get("flagged_summarized")
        if not s:
            return np.zeros(0, np.int64), np.zeros(0, np.uint64), []
        try:
            deltas = np.frombuffer(zlib.decompress(base64.b64decode(s["rows"], validate=True)), "<u8")
            masks = np.frombuffer(zlib.decompress(base64.b64decode(s["masks"], validate=True)), "<u8")
            codes = [str(c) for c in s["codes"]]
            n = int(s["samples"])
        except (KeyError, TypeError, ValueError, zlib.error) as e:
            raise ReportError(f"the report's flagged_summarized does not decode: {e}") from None
        if len(deltas) != n or len(masks) != n or len(codes) > 64:
            raise ReportError(f"the report's flagged_summarized lists {len(deltas)} rows for {n} samples")
        # In place of copies: ten million rows are 80 MB per array.
        return np.cumsum(deltas, dtype=np.uint64).view(np.int64), masks, codes

    def summarized_content_digest(self) -> int | None:
        """The key of the summarized flagged samples' contents (`flagged_summarized.content_digest`); None when
        there are none or the report was written before it was recorded."""
        s = self.data.get("flagged_summarized")
        digest = (s or {}).get("content_digest")
        if not digest:
            return None
        try:
            return int(digest, 16)
        except (TypeError, ValueError):
            raise ReportError(f"the report's flagged_summarized.content_digest {digest!r} is not a key") from None

    def summarized_rows(self, codes: set[str] | None = None) -> np.ndarray:
        """Rows of the summarized flagged samples (those with one of `codes` when given), ascending."""
        import numpy as np

        rows, masks, names = self.summarized()
        if codes is None:
            return rows
        want = np.uint64(sum(1 << i for i, c in enumerate(names) if c in codes))
        return rows[(masks & want) != 0]

    def flags_samples(self, code: str) -> bool:
        """Whether `code`'s findings here are samples (listed in `flagged`, or past the detail limit), not a
        category or the corpus (`category_split`, `draft_vocab_stale` flag no sample)."""
        return any(code in f["codes"] for f in self.flagged) or self.n_summarized({code}) > 0

    def n_summarized(self, codes: set[str] | None = None) -> int:
        """How many summarized flagged samples there are (those with one of `codes` when given); numpy is
        imported only when the report has some."""
        if not self.data.get("flagged_summarized"):
            return 0
        return len(self.summarized_rows(codes))

    def not_checked(self) -> dict[str, str]:
        """Codes this scan could not check, with why (the core's `not_checked`: no input had a loss mask or
        labels, no tokenizer vocabulary for `spelled_special` and the `tool_call_*` payload checks, no
        vocabulary size for `out_of_vocab`). Their count of 0 means nothing. Empty for a report of schema 1,
        which did not record it."""
        return {str(k): str(v) for k, v in (self.data.get("not_checked") or {}).items()}

    def count(self, code: str) -> int:
        """Number of samples flagged with `code` (a UsageError for an unknown code)."""
        return int(self.anomalies[self._code(code)]["count"])

    def flagged_rows(self, code: str) -> list[int]:
        """Rows of the samples flagged with `code`, in scan order (a UsageError for an unknown code)."""
        self._code(code)
        listed = [f["row"] for f in self.flagged if code in f["codes"]]
        rest = self.summarized_rows({code})
        if not len(rest):
            return listed
        return sorted([*listed, *(int(r) for r in rest)])

    @property
    def fail_on(self) -> str:
        """The `--fail-on` level the scan ran with."""
        return str(self.data["verdict"]["fail_on"])

    @property
    def policy(self) -> dict[str, PolicyValue]:
        """The `[policy]` table the scan ran with (code -> severity, "ignore", a count or a rate)."""
        return dict(self.data["verdict"].get("policy", {}))

    def judged_by(
        self, fail_on: str | None = None, policy: Mapping[str, PolicyValue] | None = None
    ) -> tuple[str, dict[str, PolicyValue]]:
        """The `(fail_on, policy)` a question about this report is answered under: the given ones, each
        defaulting to what the scan ran with."""
        return (self.fail_on if fail_on is None else fail_on, self.policy if policy is None else dict(policy))

    def status_words(
        self, fail_on: str | None = None, policy: Mapping[str, PolicyValue] | None = None
    ) -> dict[str, tuple[str, str]]:
        """Each found code's `(status, words)`: how it bears on the verdict, in the words every output uses
        ("fails the run", "tolerated: policy allows ≤ 0.5%", "ignored by policy", "below --fail-on error", "never
        fails (--fail-on never)")."""
        level, table = self.judged_by(fail_on, policy)
        out = {}
        for code, status in self.statuses(fail_on, policy).items():
            if status == "clean":
                continue
            value = table.get(code)
            if status == "fails":
                words = "fails the run"
            elif status == "ignored":
                words = "ignored by policy"
            elif status == "below_fail_on":
                words = "never fails (--fail-on never)" if level == "never" else f"below --fail-on {level}"
            elif isinstance(value, int):
                words = f"tolerated: policy allows ≤ {value:,}"
            elif isinstance(value, str) and value.strip().endswith("%"):
                words = f"tolerated: policy allows ≤ {value.strip()}"
            else:
                words = "tolerated by policy"
            out[code] = (status, words)
        return out

    def statuses(self, fail_on: str | None = None, policy: Mapping[str, PolicyValue] | None = None) -> dict[str, str]:
        """What the policy and `fail_on` make of each code's findings: `clean`, `fails`, `below_fail_on`,
        `tolerated` or `ignored`. Without arguments, the scan's own decisions (its `--fail-on` and `[policy]`,
        recorded in the report); either argument judges the findings again, the other one defaulting to the
        scan's. Decided by the core's policy engine, the same that set the report's own `status` fields."""
        if fail_on is None and policy is None:
            return {code: str(a["status"]) for code, a in self.anomalies.items()}
        from .. import _core

        counts = {code: int(a["count"]) for code, a in self.anomalies.items()}
        level, table = self.judged_by(fail_on, policy)
        return _core.policy_statuses(counts, self.n_samples, table, level)

    def failures(self, fail_on: str | None = None, policy: Mapping[str, PolicyValue] | None = None) -> dict[str, int]:
        """Codes whose findings fail the run, with their counts: the scan's own verdict without arguments,
        else under `fail_on` and `policy` (see `statuses`)."""
        return {c: self.count(c) for c, s in self.statuses(fail_on, policy).items() if s == "fails"}

    def exit_code(self, fail_on: str | None = None, policy: Mapping[str, PolicyValue] | None = None) -> int:
        """0 when nothing fails the run (the scan's own verdict without arguments, see `statuses`) and nothing
        drifted from a baseline (`drifted`), else 1: what `tokscan scan` exits with."""
        return 1 if self.failures(fail_on, policy) or self.drifted() else 0

    def drifted(self) -> int:
        """How many drift checks went past their thresholds against the baseline of `attach_drift` (0 without
        one): any fails the run, whatever `fail_on`."""
        drift = self.data.get("drift")
        found = drift.get("drifted") if isinstance(drift, dict) else None
        return len(found) if isinstance(found, list) else 0

    def attach_drift(self, baseline: str | Path, drifts: Sequence[Any]) -> None:
        """Records the comparison with a baseline report (`report.drift.compare`'s findings) in the report:
        `drift` {`baseline`, `drifted`}, and a failed `verdict` (with `verdict.drift`, their count) when
        anything drifted, so that the JSON, the HTML, the terminal and the exit code agree."""
        from .drift import to_json

        data = self.data
        data["drift"] = {"baseline": str(baseline), "drifted": to_json(list(drifts))}
        if drifts:
            data["verdict"]["passed"] = False
            data["verdict"]["drift"] = len(drifts)

    def examples(self, code: str, limit: int = 3) -> list[str]:
        """The first sample ids (or `#row`) flagged with `code`."""
        self._code(code)
        out = []
        for f in self.flagged:
            if code in f["codes"]:
                out.append(str(f["sample_id"]) if f["sample_id"] is not None else f"#{f['row']}")
                if len(out) == limit:
                    break
        return out

    def _compact(self) -> str:
        # The core's text while nothing has been parsed; once `data` exists it may have been changed in place
        # (`data["decoded"]`), so serialise from it.
        if self._data is None and self._text is not None:
            return self._text
        # The C encoder; an `indent` would switch json to its pure-Python encoder, ~4x slower on big reports.
        return json.dumps(self.data, separators=(",", ":"), ensure_ascii=False)

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON text: compact with `indent=None`, else indented (2: by the core, fast)."""
        if indent is None:
            return self._compact()
        if indent == 2:
            from .. import _core

            return _core.pretty_json(self._compact())
        return json.dumps(self.data, indent=indent, ensure_ascii=False)

    def write_json(self, path: str | Path) -> None:
        """Writes the report to `path`, indented by two spaces; the core formats and writes the file."""
        from .. import _core

        _core.write_json(Path(path), self._compact())

    def to_html(
        self, fail_on: str | None = None, policy: Mapping[str, PolicyValue] | None = None, **run_info: Any
    ) -> str:
        """The self-contained HTML report (see `tokscan.report.html.render` for `run_info`: command, tokenizer,
        started, seconds, max_rows)."""
        from .html import render

        return render(self, fail_on, policy, **run_info)

    def write_html(
        self,
        path: str | Path,
        fail_on: str | None = None,
        policy: Mapping[str, PolicyValue] | None = None,
        **run_info: Any,
    ) -> None:
        """Write the self-contained HTML report to `path` (what `tokscan scan --html` writes)."""
        text = self.to_html(fail_on, policy, **run_info)
        from ..outputs import write_file

        write_file(path, text, "the HTML report")

    @classmethod
    def from_json(cls, text: str, origin: str = "<report>") -> Report:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ReportError(f"{origin}: not a JSON report ({e})") from None
        except RecursionError:
            raise ReportError(f"{origin}: not a tokscan report (JSON nested too deeply to read)") from None
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version not in READABLE_SCHEMAS:
            readable = ", ".join(map(str, READABLE_SCHEMAS))
            raise ReportError(
                f"{origin}: report schema_version {version!r} is not supported (this tokscan reads {readable})"
            )
        _check_shape(data, origin)
        return cls(data)

    @classmethod
    def load(cls, path: str | Path) -> Report:
        from ..files import read_text

        p = Path(path)
        try:
            text = read_text(p, ReportError)
        except UnicodeDecodeError:
            raise ReportError(f"{p}: not a JSON report (not UTF-8 text)") from None
        report = cls.from_json(text, str(p))
        report.origin = str(p)
        return report


@contextmanager
def read_as_report(origin: object) -> Iterator[None]:
    """Reading a loaded report's fields (`diff`, `--baseline`, `clean --report`): a field of another type or
    value than a scan writes (a report edited by hand, or of a tool that only looks like this one) is a
    ReportError naming the file, not an internal error. `_check_shape` vouches for the fields every consumer
    needs; this covers the rest."""
    from ..errors import TokscanError

    try:
        yield
    except TokscanError:
        raise  # tokscan's own errors (a mistyped --code is a UsageError, itself a ValueError) say what they mean
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, ZeroDivisionError, RecursionError) as e:
        why = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        raise ReportError(f"{origin}: not a tokscan report this version can read ({why})") from None


def _check_shape(data: dict[str, Any], origin: str) -> None:
    """The fields every consumer (`diff`, `--baseline`, `clean --report`) reads, with their types: a report
    edited by hand or cut short is a `ReportError` naming the field, not a KeyError or TypeError later."""

    def need(where: dict[str, Any], key: str, kind: type | tuple[type, ...], path: str) -> Any:
        value = where.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ReportError(f"{origin}: not a tokscan report: {path} is missing or not {_kind(kind)}")
        return value

    for key, kind in (("n_samples", int), ("anomalies", dict), ("categories", dict), ("inputs", list)):
        need(data, key, kind, key)
    need(data, "flagged", list, "flagged")
    for code, a in data["anomalies"].items():
        if not isinstance(a, dict):
            raise ReportError(f"{origin}: not a tokscan report: anomalies.{code} is not an object")
        need(a, "count", int, f"anomalies.{code}.count")
    for name, c in data["categories"].items():
        if not isinstance(c, dict):
            raise ReportError(f"{origin}: not a tokscan report: categories.{name} is not an object")
    if "verdict" in data:
        need(data, "verdict", dict, "verdict")
    for i, f in enumerate(data["flagged"]):
        if not isinstance(f, dict):
            raise ReportError(f"{origin}: not a tokscan report: flagged[{i}] is not an object")
        need(f, "row", int, f"flagged[{i}].row")
        need(f, "codes", list, f"flagged[{i}].codes")
    for i, f in enumerate(data["inputs"]):
        if not isinstance(f, dict):
            raise ReportError(f"{origin}: not a tokscan report: inputs[{i}] is not an object")
        need(f, "path", str, f"inputs[{i}].path")
        need(f, "samples", int, f"inputs[{i}].samples")


def _kind(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object"}
    return " or ".join(names.get(k, k.__name__) for k in (kind if isinstance(kind, tuple) else (kind,)))
