"""The Typer application and what every command shares: the consoles, error handling (exit 2 with one line,
never a traceback), output-path checks made before any work starts, and the common options."""

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperArgument

from .. import _core
from ..errors import TokscanError, UsageError
from ..outputs import STDOUT, write_file

if TYPE_CHECKING:
    from rich.console import Console

# Typer prints an argument's Python annotation (`<list[str]>`) after the name in `--help`. Every tokscan
# argument names its value with a metavar (PATHS, BASE, ...), so show that alone.
if hasattr(TyperArgument, "display_type_rich"):
    _argument_type = TyperArgument.display_type_rich
    TyperArgument.display_type_rich = lambda self, ctx: None if self.metavar else _argument_type(self, ctx)  # type: ignore[method-assign]

app = typer.Typer(
    name="tokscan",
    help="Scan token-id training corpora for chat-structure anomalies before you train on them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class LazyConsole:
    """A rich Console made on first use. Importing rich.console is a noticeable part of a command's start-up,
    and `scan -q --json F` (the CI and benchmark case) never prints. It forwards attribute reads only (`.print`,
    `.width`, `.is_terminal`); give rich APIs that take a console (Progress, `with console:`) `.console`, the
    real object."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr

    @cached_property
    def console(self) -> "Console":
        from rich.console import Console

        if self._stderr:
            return Console(stderr=True)
        if sys.stdout.isatty():
            return Console()
        # Wide enough for the category table when output goes to a file or a CI log, without the padding rich
        # puts after a table's title (lines that end in spaces make diffs and logs noisy).
        return Console(width=120, file=_TrimmedLines(sys.stdout))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.console, name)


class _TrimmedLines:
    """A text stream that writes each complete line without its trailing spaces (piped output only; rich ends
    every print with a newline, so nothing waits in the buffer between prints)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._pending = ""

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", None) or "utf-8"

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._stream.fileno()

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        if lines:
            self._stream.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._stream.write(self._pending)
            self._pending = ""
        self._stream.flush()


out: "Console" = LazyConsole()  # type: ignore[assignment]
err: "Console" = LazyConsole(stderr=True)  # type: ignore[assignment]


#: `--fail-on`'s choices: the core's levels.
FailOn = Enum("FailOn", {level: level for level in _core.FAIL_ON_LEVELS}, type=str)  # type: ignore[misc]


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    github = "github"


# Options shared by several commands: one definition each, so names, metavars and help never drift apart.
ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        "-p",
        metavar="NAME|FILE",
        help=f"Built-in profile or a TOML profile file [{_core.DEFAULT_PROFILE}].",
    ),
]
TokenizerOpt = Annotated[
    Path | None,
    typer.Option(
        metavar="DIR",
        help="Tokenizer directory (tokenizer.json, or tiktoken.model / *.tiktoken, + tokenizer_config.json); "
        "also looks for special tokens written as text (spelled_special).",
    ),
]
TrustRemoteCodeOpt = Annotated[
    bool,
    typer.Option(
        "--trust-remote-code",
        help="Run a tokenizer class shipped as code in the --tokenizer directory (auto_map, e.g. Kimi-K2's "
        "tokenization_kimi.py). Only for directories you trust.",
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", metavar="FILE", help="Config file (default: tokscan.toml / pyproject.toml upward)."),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing but errors; the exit code tells.")]
HtmlOpt = Annotated[Path | None, typer.Option("--html", metavar="FILE", help="Write a self-contained HTML report.")]
HiddenLayoutOpt = Annotated[
    str | None,
    typer.Option(
        metavar="LAYOUT",
        help="With --hidden-states: the dump's writer when its names and keys do not say (specforge, "
        "angelslim, speculators, speculators_legacy, model_optimizer).",
    ),
]
TargetModelOpt = Annotated[
    Path | None,
    typer.Option(
        metavar="DIR",
        help="With --hidden-states: the target model's Hugging Face checkpoint directory (config.json + "
        "safetensors; only the final norm and lm_head are read): decides the dump's norm convention and checks "
        "next-token agreement of the stored states (hidden_disagree).",
    ),
]


def check_hidden_options(hidden_states: Path | None, hidden_layout: str | None, target_model: Path | None) -> None:
    """`--hidden-layout` and `--target-model` go with `--hidden-states` (scan and show)."""
    if hidden_states is None and (hidden_layout is not None or target_model is not None):
        raise UsageError("--hidden-layout and --target-model go with --hidden-states DIR (the dump's directory)")


PromptsOpt = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE",
        help="A prompts.jsonl to pair with the whole corpus (by default, each category folder's own "
        "prompts file pairs with the shards beside it).",
    ),
]
ChatTemplateOpt = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE", help="A Jinja chat template to render prompt records with, when --tokenizer has none."
    ),
]


IdsColumnOpt = Annotated[
    str | None, typer.Option("--ids-column", metavar="NAME", help="Column with the whole sequence [input_ids].")
]
PromptColumnOpt = Annotated[
    str | None, typer.Option("--prompt-column", metavar="NAME", help="Column with prompt ids [prompt_ids].")
]
OutputColumnOpt = Annotated[
    str | None, typer.Option("--output-column", metavar="NAME", help="Column with completion ids [output_ids].")
]
MaskColumnOpt = Annotated[
    str | None, typer.Option("--mask-column", metavar="NAME", help="Column with the loss mask [loss_mask].")
]
IdColumnOpt = Annotated[
    str | None, typer.Option("--id-column", metavar="NAME", help="Column with sample ids [sample_id].")
]
CategoryColumnOpt = Annotated[
    str | None, typer.Option("--category-column", metavar="NAME", help="Column with categories [category].")
]


def JsonOpt(what: str) -> object:
    return typer.Option("--json", metavar="FILE|-", help=f"Write {what} as JSON to FILE ('-': stdout).")


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        out.print(f"tokscan {__version__}", highlight=False)
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Scan token-id training corpora for chat-structure anomalies before you train on them."""


@contextmanager
def user_errors() -> Iterator[None]:
    """Turns tokscan errors (and I/O errors writing outputs) into one line on stderr and exit code 2; Ctrl-C
    into exit code 130."""
    try:
        yield
    except TokscanError as e:
        fail(str(e))
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        fail(f"{where}{e.strerror or e}")
    except KeyboardInterrupt:
        err.print("tokscan: interrupted")
        raise typer.Exit(130) from None
    except Exception as e:  # a bug: still one line, unless asked for the traceback
        if os.environ.get("TOKSCAN_DEBUG"):
            raise
        fail(f"internal error: {type(e).__name__}: {e} (a bug; TOKSCAN_DEBUG=1 shows the traceback)")


def one_line(message: str) -> str:
    """`message` with its control characters escaped (a newline in a file name is `\\n`): an error is one line,
    and no file name can start a line of its own (a `::error::` workflow command in CI logs)."""
    return "".join(c if c.isprintable() or c == "\t" else repr(c)[1:-1] for c in message)


def fail(message: str) -> None:
    from rich.markup import escape

    # The message is plain text: `[ray]` in an install command or `[columns]` in a config hint is not markup.
    err.print(f"[bold red]tokscan: error:[/] {escape(one_line(message))}", highlight=False, soft_wrap=True, markup=True)
    raise typer.Exit(2) from None


def warn(message: str) -> None:
    """One warning line on stderr, as `fail` words an error (control characters escaped, no markup)."""
    from rich.markup import escape

    err.print(f"[bold yellow]warning:[/] {escape(one_line(message))}", highlight=False, soft_wrap=True)


def refuse_shared_stdout(outputs: list[tuple[str, Path | None]], fmt: OutputFormat, json_out: Path | None) -> list[str]:
    """The outputs that write to stdout (`(option, path)` pairs given '-', and `--format json|github`); a
    UsageError when more than one would. Returns them (none: the terminal summary may use stdout)."""
    to_stdout = [f"{option} -" for option, path in outputs if stdout_taken(path)]
    if fmt is OutputFormat.github or (fmt is OutputFormat.json and json_out is None):
        to_stdout.append(f"--format {fmt.value}")
    if len(to_stdout) > 1:
        raise UsageError(f"{' and '.join(to_stdout)} all write to stdout; give all but one a file")
    return to_stdout


def check_output(path: Path | None, option: str) -> None:
    """Fails before any work when `path` cannot be written: a missing or unwritable parent directory, or a
    directory in its place. '-' (stdout) is always fine."""
    if path is None or str(path) == STDOUT:
        return
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{option} {path}: not writable")


def write_output(path: Path, text: str) -> None:
    """Writes `text` to `path`, or to stdout when it is '-'."""
    if str(path) == STDOUT:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        write_file(path, text if text.endswith("\n") else text + "\n", "the output")


def stdout_taken(*paths: Path | None) -> bool:
    return any(p is not None and str(p) == STDOUT for p in paths)


def columns_from(**roles: str | None) -> dict[str, str]:
    return {role: name for role, name in roles.items() if name}


def corpus_columns(
    config: Path | None,
    ids: str | None,
    prompt: str | None,
    output: str | None,
    mask: str | None,
    sample_id: str | None,
    category: str | None,
) -> dict[str, str]:
    """Column roles for reading the corpus: the config's `[columns]`, overridden by the command's options —
    the same for every command, so a corpus with renamed columns reads the same in `scan`, `show`, `align`
    and `clean`."""
    from ..config import discover, load_file

    cfg = load_file(config) if config is not None else discover()
    flags = columns_from(
        input_ids=ids, prompt_ids=prompt, output_ids=output, loss_mask=mask, sample_id=sample_id, category=category
    )
    return {**cfg.columns, **flags}
