"""Loading a tokenizer the way users have it on disk: a Hugging Face model directory (tokenizer.json and/or
tokenizer_config.json, a chat_template.jinja beside them, or a tokenizer class shipped as code in the
directory, like Kimi-K2's tokenization_kimi.py + tiktoken.model), or a lone tokenizer.json file. Always
offline, from local files only."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import _core
from ..errors import InputError, UsageError, install_hint

CONFIG = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"
# Tokenizer classes that are tokenizer.json and nothing else: a directory naming one loads through
# PreTrainedTokenizerFast directly. AutoTokenizer would give the same object but first imports the model-config
# machinery, and with it torch (~1.4 s of a CLI call that only decodes).
GENERIC_CLASSES = frozenset({"PreTrainedTokenizerFast", "TokenizersBackend"})


def _quiet_offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def read_config(directory: Path) -> dict[str, Any]:
    """tokenizer_config.json of `directory` ({} when there is none)."""
    path = directory / CONFIG
    if not path.is_file():
        return {}
    from ..files import read_text

    try:
        cfg = json.loads(read_text(path, InputError))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(cfg, dict):
        raise InputError(f"{path}: not a JSON object")
    return cfg


def remote_code_class(cfg: dict[str, Any]) -> str | None:
    """The tokenizer class a config names as code in its own directory (`auto_map.AutoTokenizer`), if any."""
    auto_map = cfg.get("auto_map")
    entry: Any = None
    if isinstance(auto_map, dict):
        entry = auto_map.get("AutoTokenizer")
    elif isinstance(auto_map, list):  # the oldest format: a bare [slow, fast] pair
        entry = auto_map
    if isinstance(entry, str):
        return entry
    if isinstance(entry, list):  # [slow, fast]: AutoTokenizer takes the fast class when there is one
        return next((e for e in reversed(entry) if isinstance(e, str)), None)
    return None


def _legacy_import_paths() -> None:
    """Tokenizer code written for transformers 4.x (Kimi-K2's tokenization_kimi.py among it) imports
    `bytes_to_unicode` from transformers.models.gpt2.tokenization_gpt2, which transformers 5 moved to
    transformers.convert_slow_tokenizer. Make the old path resolve again; nothing else is touched."""
    try:
        import transformers.models.gpt2.tokenization_gpt2 as gpt2
    except ImportError:  # pragma: no cover
        return
    if not hasattr(gpt2, "bytes_to_unicode"):
        try:
            from transformers.convert_slow_tokenizer import bytes_to_unicode
        except ImportError:  # pragma: no cover
            return
        gpt2.bytes_to_unicode = bytes_to_unicode  # type: ignore[attr-defined]


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def load_tokenizer(path: str | os.PathLike[str], trust_remote_code: bool = False) -> Any:
    """A transformers tokenizer from a local directory or a tokenizer.json file, never touching the network.

    A directory loads through `AutoTokenizer`, so tokenizer_config.json is honoured (chat template, BOS / EOS /
    PAD, added and special tokens) and so is a separate chat_template.jinja. A directory whose tokenizer class is
    code in the directory (`auto_map` in tokenizer_config.json, e.g. Kimi-K2's tokenization_kimi.py) loads only
    with `trust_remote_code=True`, which runs that code; without it this raises `UsageError` naming
    `--trust-remote-code`. A file path loads that tokenizer.json alone (with the tokenizer_config.json beside
    it when the file is named tokenizer.json, as the profile resolution reads it)."""
    _quiet_offline()
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file or directory")
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:  # pragma: no cover
        raise UsageError(f"loading a tokenizer needs transformers ({install_hint('tokenizer')})") from None
    if p.is_file():
        if p.name == "tokenizer.json" and (p.parent / CONFIG).is_file():
            p = p.parent
        else:
            try:
                return PreTrainedTokenizerFast(tokenizer_file=str(p))
            except Exception as e:  # tokenizers raises plain Exceptions for a bad file
                raise InputError(f"{p}: not a tokenizer.json file ({_one_line(e)})") from None
    cfg = read_config(p)
    custom = remote_code_class(cfg)
    if custom is not None and not trust_remote_code:
        module = custom.split(".")[0] + ".py"
        raise UsageError(
            f"{p}: the tokenizer class is code shipped in the directory ({module}, auto_map in {CONFIG}); "
            "pass --trust-remote-code to run it (only for a directory you trust)"
        )
    if not any((p / name).is_file() for name in ("tokenizer.json", CONFIG)) and custom is None:
        raise InputError(f"{p}: no tokenizer.json or {CONFIG} in this directory")
    if custom is not None:
        _legacy_import_paths()
    named = cfg.get("tokenizer_class")
    # Without a class in the config, AutoTokenizer would pick one from the model's config.json.
    generic = custom is None and (p / "tokenizer.json").is_file()
    generic = generic and (named in GENERIC_CLASSES or (named is None and not (p / "config.json").is_file()))
    try:
        if generic:
            tok = PreTrainedTokenizerFast.from_pretrained(str(p), local_files_only=True)
        elif custom is not None:
            # What AutoTokenizer does with an auto_map, without importing AutoTokenizer (and torch with it).
            from transformers.dynamic_module_utils import get_class_from_dynamic_module

            cls = get_class_from_dynamic_module(custom, str(p), local_files_only=True)
            tok = cls.from_pretrained(str(p), local_files_only=True, trust_remote_code=True)
        else:
            from transformers import AutoTokenizer  # imports torch when it is installed

            tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True, trust_remote_code=trust_remote_code)
    except Exception as e:  # transformers (and the directory's own code) raise many types here
        raise InputError(f"{p}: cannot load the tokenizer ({_one_line(e)})") from None
    template = p / TEMPLATE_FILE
    if getattr(tok, "chat_template", None) is None and template.is_file():
        # Older transformers (and custom classes that drop it) ignore chat_template.jinja.
        tok.chat_template = read_chat_template(template)
    return tok


def read_chat_template(path: str | os.PathLike[str]) -> str:
    """The text of a Jinja chat template file (`--chat-template`, a tokenizer's `chat_template.jinja`); one
    UsageError naming it when it cannot be read or is not UTF-8 text."""
    from ..files import read_text

    try:
        return read_text(path)
    except UnicodeDecodeError as e:
        raise UsageError(f"{os.fspath(path)}: not a chat template (not UTF-8 text at byte {e.start})") from None


def encode(tok: Any, text: str) -> list[int]:
    """Ids of `text` exactly as written: special tokens spelled in it become their ids, and nothing is added
    around it (no BOS/EOS from the tokenizer's post-processor: a chat template emits what it wants)."""
    return list(tok(text, add_special_tokens=False)["input_ids"])


def render(
    tok: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    **template_kwargs: Any,
) -> tuple[str, list[int]]:
    """The chat template's text for a conversation and its ids (see `encode`)."""
    text = tok.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False, **template_kwargs
    )
    return text, encode(tok, text)


def vocabulary(tok: Any) -> dict[str, int]:
    """Every token string of a loaded tokenizer with its id (the model vocabulary and the added tokens)."""
    vocab = {str(k): int(v) for k, v in tok.get_vocab().items()}
    for i, t in getattr(tok, "added_tokens_decoder", {}).items():
        vocab.setdefault(str(getattr(t, "content", t)), int(i))
    return vocab


@contextmanager
def vocabulary_dir(tok: Any) -> Iterator[str]:
    """A temporary directory holding the tokenizer's vocabulary as a minimal tokenizer.json (`model.vocab` only),
    for resolving a profile's token strings (`_core.Profile.load(name, dir)`) through a tokenizer that has no
    tokenizer.json of its own, such as a tiktoken-based class shipped as code."""
    with tempfile.TemporaryDirectory(prefix="tokscan-vocab-") as d:
        spec = {"model": {"vocab": vocabulary(tok)}, "added_tokens": []}
        (Path(d) / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
        yield d


@contextmanager
def profile_vocabulary(path: str | os.PathLike[str], trust_remote_code: bool = False) -> Iterator[str]:
    """A path through which `_core.Profile.load(profile, path)` resolves a profile's token strings: the path
    itself when it is a tokenizer.json or a directory with one or with a tiktoken vocabulary (`tiktoken.model`,
    `*.tiktoken`: the core reads those directly, and takes the bytes of every token from them for
    `spelled_special`), otherwise the whole vocabulary of the loaded tokenizer (`vocabulary_dir`), so ordinary
    tokens such as the role name "system" resolve through any tokenizer class shipped as code too."""
    p = Path(path)
    if _core.reads_tokenizer_vocabulary(p):
        yield str(p)
        return
    with vocabulary_dir(load_tokenizer(p, trust_remote_code)) as d:
        yield d
