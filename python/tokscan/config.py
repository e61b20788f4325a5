"""Project configuration: `tokscan.toml`, or `[tool.tokscan]` in `pyproject.toml`, found from the working
directory upward (in each directory `tokscan.toml` wins). Command-line flags override it.

    profile = "kimi-k2"
    tokenizer = "tokenizer/"
    paths = ["data/"]
    threads = 0
    fail_on = "error"
    draft_vocab = [16000, 32000, 64000]   # --draft-vocab

    [columns]              # role -> column name
    input_ids = "tokens"

    [policy]               # per anomaly code
    truncated = "0.5%"     # tolerated rate: fail only above 0.5 % of samples
    duplicate = 10         # tolerated count
    length_outlier = "ignore"
    repetition = "error"   # severity override

    [drift]                # thresholds for `tokscan diff` / `scan --baseline` (see tokscan.drift)
    samples = 0.2
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _core
from .errors import UsageError, did_you_mean
from .report import FAIL_ON, PolicyValue

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _codes() -> tuple[str, ...]:
    """The anomaly codes, asked of the core only when a config is read."""
    return tuple(name for name, *_ in _core.codes())


COLUMN_ROLES: tuple[str, ...] = tuple(_core.COLUMN_ROLES)
TOP_KEYS = {
    "profile",
    "tokenizer",
    "chat_template",
    "prompts",
    "paths",
    "threads",
    "fail_on",
    "draft_vocab",
    "columns",
    "policy",
    "drift",
}


@dataclass
class Config:
    source: Path | None = None
    profile: str | None = None
    tokenizer: str | None = None
    #: A Jinja chat template for pairing, when the tokenizer has none.
    chat_template: str | None = None
    #: One prompts file for the whole corpus (by default, those beside the shards).
    prompts: str | None = None
    paths: list[str] = field(default_factory=list)
    threads: int | None = None
    fail_on: str | None = None
    #: Draft-vocabulary sizes whose coverage the scan reports (`--draft-vocab`).
    draft_vocab: list[int] = field(default_factory=list)
    columns: dict[str, str] = field(default_factory=dict)
    policy: dict[str, PolicyValue] = field(default_factory=dict)
    drift: dict[str, float] = field(default_factory=dict)

    def profile_name(self, given: str | None) -> str:
        """The profile a command uses: the one it was given, else the config's, else the core's default."""
        return given if given is not None else (self.profile or _core.DEFAULT_PROFILE)


def check_policy(where: str, policy: dict[str, Any]) -> dict[str, PolicyValue]:
    """The `[policy]` table, validated by the core's policy engine (the one place that knows what a value
    means); a bad key or value is a UsageError naming the file and the key."""
    from . import _core

    try:
        _core.policy_sample_mask(policy, "error")
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None
    return dict(policy)


def from_table(table: dict[str, Any], where: str, source: Path | None = None) -> Config:
    from .report.drift import DEFAULT_THRESHOLDS

    unknown = set(table) - TOP_KEYS
    if unknown:
        raise UsageError(f"{where}: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(TOP_KEYS))})")
    cfg = Config(source=source)
    base = source.parent if source else Path.cwd()

    def typed(key: str, kind: type, value: Any) -> Any:
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise UsageError(f"{where}: {key} must be a {kind.__name__}, got {value!r}")
        return value

    if "profile" in table:
        p = typed("profile", str, table["profile"])
        cfg.profile = str(base / p) if p.endswith(".toml") else p
    if "tokenizer" in table:
        cfg.tokenizer = str(base / typed("tokenizer", str, table["tokenizer"]))
    for key in ("chat_template", "prompts"):
        if key in table:
            setattr(cfg, key, str(base / typed(key, str, table[key])))
    if "paths" in table:
        cfg.paths = [str(base / typed("paths[]", str, p)) for p in typed("paths", list, table["paths"])]
    if "threads" in table:
        cfg.threads = typed("threads", int, table["threads"])
        if cfg.threads < 0:
            raise UsageError(f"{where}: threads must be 0 (one per core) or more, got {cfg.threads}")
    if "fail_on" in table:
        cfg.fail_on = typed("fail_on", str, table["fail_on"])
        if cfg.fail_on not in FAIL_ON:
            hint = did_you_mean(cfg.fail_on, FAIL_ON)
            raise UsageError(f"{where}: fail_on must be one of {', '.join(FAIL_ON)}, got {cfg.fail_on!r}{hint}")
    if "draft_vocab" in table:
        from .vocab import parse_sizes

        try:
            cfg.draft_vocab = parse_sizes(typed("draft_vocab", list, table["draft_vocab"]))
        except UsageError as e:
            raise UsageError(f"{where}: draft_vocab: {e}") from None
    for role, name in typed("columns", dict, table.get("columns", {})).items():
        if role not in COLUMN_ROLES:
            raise UsageError(f"{where}: unknown key 'columns.{role}' (roles: {', '.join(COLUMN_ROLES)})")
        cfg.columns[role] = typed(f"columns.{role}", str, name)
    codes = _codes()
    policy = typed("policy", dict, table.get("policy", {}))
    for code in policy:
        if code not in codes:
            raise UsageError(f"{where}: unknown key 'policy.{code}' (not an anomaly code{did_you_mean(code, codes)})")
    cfg.policy = check_policy(where, policy)
    for key, value in typed("drift", dict, table.get("drift", {})).items():
        if key not in DEFAULT_THRESHOLDS:
            raise UsageError(f"{where}: unknown key 'drift.{key}' (known: {', '.join(DEFAULT_THRESHOLDS)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UsageError(f"{where}: drift.{key} must be a number, got {value!r}")
        if not float(value) >= 0:  # NaN compares false; `inf` turns a check off on purpose
            raise UsageError(f"{where}: drift.{key} must be a number >= 0 (inf: never), got {value!r}")
        cfg.drift[key] = float(value)
    return cfg


def load_file(path: Path) -> Config:
    from .files import read_text

    try:
        data = tomllib.loads(read_text(path))
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a text file (invalid TOML)") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path}: invalid TOML: {e}") from None
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        table = tool.get("tokscan") if isinstance(tool, dict) else None
        if table is None:
            raise UsageError(f"{path}: no [tool.tokscan] table")
        if not isinstance(table, dict):
            raise UsageError(f"{path}: [tool] tokscan must be a table, got {table!r}")
        return from_table(table, f"{path} [tool.tokscan]", path)
    return from_table(data, str(path), path)


def discover(start: Path | None = None) -> Config:
    """The nearest configuration from `start` (default: the working directory) upward, or an empty one."""
    d = (start or Path.cwd()).resolve()
    for folder in (d, *d.parents):
        t = folder / "tokscan.toml"
        if t.is_file():
            return load_file(t)
        py = folder / "pyproject.toml"
        if py.is_file():
            from .files import read_text

            try:
                text = read_text(py)
            except (UsageError, UnicodeDecodeError):
                text = ""
            try:
                has = "tokscan" in tomllib.loads(text).get("tool", {})
            except tomllib.TOMLDecodeError as e:
                if "[tool.tokscan" in text:  # meant for us: say why it cannot be read, never ignore it
                    raise UsageError(f"{py}: invalid TOML: {e}") from None
                has = False
            if has:
                return load_file(py)
    return Config()
