"""Type stubs of the compiled core (`tokscan._core`)."""

import os
from collections.abc import Callable
from typing import Any, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "AGREEMENT_MIN",
    "AGREEMENT_POSITIONS",
    "COLUMN_ROLES",
    "CONTAMINATION_N",
    "DEFAULT_PROFILE",
    "FAIL_ON_LEVELS",
    "FLAGGED_DETAIL",
    "MAX_COUNTED_VOCAB",
    "NEAR_DUP_DEFAULTS",
    "READABLE_SCHEMAS",
    "SCHEMA_VERSION",
    "SEGMENT_KINDS",
    "SEVERITIES",
    "Corpus",
    "Profile",
    "Scan",
    "TaskScan",
    "Validator",
    "__version__",
    "builtin_profiles",
    "check_chat_template",
    "check_one",
    "code_scopes",
    "codes",
    "codes_markdown",
    "discover_inputs",
    "encode_prompts",
    "fetch_objects",
    "fill_row",
    "find_repeats",
    "finish_report",
    "formats",
    "hidden_state_header",
    "hidden_state_sample",
    "hidden_states_task",
    "is_object_url",
    "max_threads",
    "merge_partials",
    "near_duplicates",
    "near_pairs",
    "not_checked",
    "paired_record",
    "plan_scan",
    "policy_sample_mask",
    "policy_statuses",
    "pretty_json",
    "profile_aliases",
    "profile_toml",
    "read_file",
    "reads_tokenizer_vocabulary",
    "render_prompts",
    "report_fields",
    "report_schema_markdown",
    "resolution",
    "resolve_flagged",
    "upload_objects",
    "write_json",
]
__version__: str
SCHEMA_VERSION: int  # the report schema this build writes
READABLE_SCHEMAS: list[int]  # the report schemas it reads
COLUMN_ROLES: list[str]  # the roles a column can be given (`columns=`, `[columns]`)
DEFAULT_PROFILE: str  # the profile a scan uses when none is named
FLAGGED_DETAIL: int  # the default of a scan's flagged_detail
CONTAMINATION_N: int  # the default n-gram length of --contamination
NEAR_DUP_DEFAULTS: tuple[int, int, int, float]  # (n, bands, rows, threshold) of --near-dup
AGREEMENT_POSITIONS: int  # the default of --agreement-positions
AGREEMENT_MIN: float  # the default of --agreement-min
MAX_COUNTED_VOCAB: int  # the largest vocabulary a draft vocabulary is counted over
FAIL_ON_LEVELS: list[str]  # what --fail-on / fail_on accept: the severities, then "never"
SEVERITIES: list[str]  # a finding's severities, most severe first
SEGMENT_KINDS: list[str]  # the kinds of a sample's segments (`Corpus.sample(...)["segments"]`)

@final
class Profile:
    @staticmethod
    def load(name_or_path: str, tokenizer: str | None = None) -> Profile: ...
    @property
    def name(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def special_tokens(self) -> list[tuple[str, int]]: ...
    @property
    def declared_ids(self) -> list[tuple[str, int]]: ...
    @property
    def pad_id(self) -> int | None: ...
    @property
    def source(self) -> str: ...
    def describe_json(self) -> str: ...
    @property
    def spelled(self) -> list[str]: ...

@final
class Scan:
    def __new__(
        cls,
        paths: list[str] | Corpus,
        profile: Profile,
        options: dict[str, Any] | None = None,  # tokscan.options.ScanOptions.to_core()
        timed_from_open: bool = False,  # with an opened Corpus: the report's run starts at its opening
    ) -> Scan: ...
    def run(self) -> str: ...
    @property
    def corpus(self) -> Corpus | None: ...
    def progress(self) -> dict[str, int]: ...
    def cancel(self) -> None: ...

@final
class Corpus:
    def __new__(cls, paths: list[str], columns: dict[str, str] | None = None, threads: int = 0) -> Corpus: ...
    def __len__(self) -> int: ...
    @property
    def inputs(self) -> list[tuple[str, str, str, int, int, str | None]]: ...
    @property
    def side_files(self) -> list[str]: ...
    def sample(self, row: int) -> dict[str, Any]: ...
    def check_row(self, profile: Profile, row: int) -> tuple[dict[str, Any], dict[str, Any]]: ...
    def check_ids(self, profile: Profile, start: int, end: int) -> list[int]: ...
    def samples(self, start: int, end: int) -> list[dict[str, Any]]: ...
    def find(self, sample_id: str | int) -> int | None: ...
    def find_rows(self, sample_id: str | int, limit: int) -> list[int]: ...
    def sample_ids(self) -> list[str | int | None]: ...
    def sample_ids_at(self, rows: list[int]) -> list[str | int | None]: ...
    def content_keys_at(self, rows: list[int]) -> list[int]: ...
    def content_digest_at(self, rows: list[int]) -> int: ...
    def convert(
        self, to: str, out: str | os.PathLike[str], progress: Callable[[int, int], object] | None = None
    ) -> tuple[int, int, list[str]]: ...
    def write_filtered(
        self, index: int, keep: npt.NDArray[np.bool_], out: str | os.PathLike[str]
    ) -> tuple[int, list[str], str | None]: ...

@final
class Validator:
    def __new__(cls, profile: Profile, pad_id: int | None = None, threads: int = 1) -> Validator: ...
    @property
    def pad_id(self) -> int | None: ...
    def check_numpy(
        self,
        ids: npt.NDArray[Any],
        offsets: npt.NDArray[np.int32] | npt.NDArray[np.int64] | None = None,
        loss_mask: npt.NDArray[Any] | None = None,
        mask_offsets: npt.NDArray[np.int32] | npt.NDArray[np.int64] | None = None,
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]: ...
    def check_each(
        self, ids: list[npt.NDArray[Any]], masks: list[npt.NDArray[Any] | None] | None = None
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]: ...
    def check_arrow(self, ids: Any, loss_mask: Any = None) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]: ...

def codes() -> list[tuple[str, int, str, str]]: ...
def max_threads() -> int: ...
def fetch_objects(
    url: str, dest: str, footers: bool = False
) -> tuple[str, str, str, int, int, list[tuple[str, str, str, str | None, str | None]]]: ...
def fill_row(
    paths: list[str],
    row: int,
    sparse: list[tuple[str, str, str, str | None, str | None]],
    columns: dict[str, str] | None = None,
) -> int: ...
def is_object_url(s: str) -> bool: ...
def upload_objects(dir: str, url: str, last: str | None = None) -> tuple[int, int]: ...
def builtin_profiles() -> list[str]: ...
def profile_toml(spec_json: str, header: str) -> str: ...
def profile_aliases() -> list[tuple[str, str]]: ...
def pretty_json(text: str) -> str: ...
def policy_statuses(
    counts: dict[str, int], n_samples: int, policy: dict[str, str | int] | None = None, fail_on: str = "error"
) -> dict[str, str]: ...
def policy_sample_mask(policy: dict[str, str | int] | None = None, fail_on: str = "error") -> int: ...
def write_json(path: str | os.PathLike[str], text: str) -> None: ...

# keys: codes, positions, lengths, completion, thinking, turns, events, and segments `[(kind, start, end)]` that
# tile the sample (the core's parser: check/parse.rs)
def check_one(
    profile: Profile, ids: list[int], prompt_len: int | None = None, mask: list[int] | None = None
) -> dict: ...
def discover_inputs(paths: list[str]) -> list[tuple[str, str, str | None]]: ...
def paired_record(
    paths: list[str],
    profile: Profile,
    row: int,
    columns: dict[str, str] | None = None,
    prompts: str | os.PathLike[str] | None = None,
    tokenizer: str | os.PathLike[str] | None = None,
    chat_template: str | None = None,
) -> str | None: ...
def code_scopes() -> dict[str, str]: ...
def codes_markdown() -> str: ...
def formats() -> list[tuple[str, str]]: ...
def report_schema_markdown() -> str: ...
def report_fields() -> list[tuple[list[str], bool]]: ...
def reads_tokenizer_vocabulary(path: str | os.PathLike[str]) -> bool: ...
def read_file(path: str | os.PathLike[str]) -> bytes: ...
def hidden_state_header(path: str | os.PathLike[str]) -> str: ...

# hidden: (dump directory, layout or None, target model directory or None, agreement positions, agreement minimum)
def hidden_state_sample(
    paths: list[str],
    profile: Profile,
    row: int,
    hidden: tuple[str | os.PathLike[str], str | None, str | os.PathLike[str] | None, int, float],
    columns: dict[str, str] | None = None,
) -> str: ...
def not_checked(profile: Profile, layouts: list[str]) -> dict[str, str]: ...
def encode_prompts(
    tokenizer_dir: str | os.PathLike[str], records: list[str], template: str | None = None
) -> list[list[int]]: ...
def check_chat_template(source: str, origin: str | os.PathLike[str]) -> None: ...
def render_prompts(
    tokenizer_dir: str | os.PathLike[str], records: list[str], template: str | None = None
) -> list[str]: ...

# A scan spread over processes (tokscan.distributed): every result crosses processes as opaque bytes.
def plan_scan(
    paths: list[str],
    columns: dict[str, str] | None = None,
    n_tasks: int = 1,
    staging: str | None = None,
) -> tuple[list[bytes], str, int, int, int, list[tuple[str, str]], bytes]: ...

@final
class TaskScan:
    def __new__(
        cls,
        task: bytes,
        profile: Profile,
        options: dict[str, Any] | None = None,  # tokscan.options.ScanOptions.to_core()
        n_buckets: int = 1,
    ) -> TaskScan: ...
    def run(self) -> tuple[bytes, list[bytes], bytes]: ...
    def rows(self) -> int: ...
    def progress(self) -> dict[str, int]: ...
    def cancel(self) -> None: ...

def merge_partials(parts: list[bytes], options: dict[str, Any] | None = None) -> bytes: ...
def find_repeats(buckets: list[bytes]) -> bytes: ...
def resolution(partial: bytes, summarize: bool) -> bytes: ...
def near_pairs(buckets: list[bytes]) -> bytes: ...
def near_duplicates(
    sources: bytes,  # plan_scan's last value: every input in the plan's order
    profile: Profile,
    pairs: list[bytes],
    partial: bytes,
    near_dup: tuple[int, int, int, float],
    columns: dict[str, str] | None = None,
    threads: int = 0,
) -> bytes: ...
def hidden_states_task(
    sources: bytes,  # plan_scan's last value
    profile: Profile,
    hidden: tuple[str | os.PathLike[str], str | None, str | os.PathLike[str] | None, int, float],
    columns: dict[str, str] | None = None,
    threads: int = 0,
) -> bytes: ...
def resolve_flagged(records: bytes, repeats: list[bytes], resolution: bytes) -> bytes: ...
def finish_report(
    partial: bytes,
    flagged: list[bytes],
    profile: Profile,
    inputs: str,
    options: dict[str, Any] | None = None,  # tokscan.options.ScanOptions.to_core()
    run: str | None = None,
    passes: list[bytes] = ...,  # the findings of the corpus-wide passes that ran in tasks
) -> str: ...
