"""Types of the JSON report (`Report.data`), for the code that reads it: the terminal summary, the HTML page, the CI
formats, `clean`, `diff` and users' own scripts. The fields and what they hold are documented once, in the core
(`tokscan codes --report-schema`, the table of docs/reference/report-schema.md); a test holds the top-level keys
here, and which are always present, against the core's table. Nested sections that only the renderers walk stay
`dict[str, Any]`."""

from __future__ import annotations

from typing import Any, TypedDict

#: A sample id in its column's type: a number for an integer id column, else a string; None when there is none.
SampleId = int | str | None


class Tool(TypedDict):
    name: str
    version: str


class _RunRequired(TypedDict):
    started: str
    seconds: float
    engine: str
    threads: int


class RunInfo(_RunRequired, total=False):
    """How the scan ran (`run`), recorded by the core at scan time."""

    command: list[str]
    profile_source: str
    tokenizer: str


class _InputRequired(TypedDict):
    path: str
    format: str
    layout: str
    samples: int
    tokens: int


class InputInfo(_InputRequired, total=False):
    """One input (`inputs[i]`)."""

    warning: str


class AnomalySummary(TypedDict):
    """One code (`anomalies[code]`): its severity after the policy, count, description and policy status."""

    severity: str
    count: int
    description: str
    status: str


class _VerdictRequired(TypedDict):
    fail_on: str
    policy: dict[str, str | int]
    passed: bool
    failing: dict[str, int]


class Verdict(_VerdictRequired, total=False):
    drift: int  # with --baseline, when anything drifted: how many checks did


class DriftRecord(TypedDict):
    baseline: str
    drifted: list[dict[str, Any]]


class FirstSeen(TypedDict):
    row: int
    sample_id: SampleId


class Boundary(TypedDict):
    pos: int
    token: str


class _FlaggedRequired(TypedDict):
    sample_id: SampleId
    row: int
    source: str
    category: str
    codes: list[str]
    severity: str
    positions: dict[str, int]
    lengths: dict[str, int]
    completion: list[int]
    boundaries: list[Boundary]


class FlaggedSample(_FlaggedRequired, total=False):
    """One flagged sample listed in full (`flagged[i]`)."""

    duplicate_of: FirstSeen
    prompt_of: dict[str, Any]
    contamination: dict[str, Any]
    near_duplicate_of: FirstSeen
    hidden_states: dict[str, Any]
    departs: dict[str, dict[str, str]]
    repetition: dict[str, int]
    cut_in: str


class _ReportRequired(TypedDict):
    schema_version: int
    tool: Tool
    run: RunInfo
    profile: dict[str, Any]
    inputs: list[InputInfo]
    n_samples: int
    n_tokens: int
    overall: dict[str, Any]
    categories: dict[str, dict[str, Any]]
    anomalies: dict[str, AnomalySummary]
    verdict: Verdict
    flagged: list[FlaggedSample]


class ReportDoc(_ReportRequired, total=False):
    """The JSON report, `schema_version` 3 (`run` is absent from reports of schema 1)."""

    decoded: dict[str, list[dict[str, Any]]]
    drift: DriftRecord
    skipped: list[dict[str, str]]
    not_checked: dict[str, str]
    pairing: list[dict[str, Any]]
    prompt_groups: dict[str, Any]
    contamination: dict[str, Any]
    near_duplicates: dict[str, Any]
    draft_vocab: dict[str, Any]
    hidden_states: dict[str, Any]
    flagged_summarized: dict[str, Any]
