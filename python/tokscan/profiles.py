"""Loading a chat-format profile: a built-in by name or a TOML file, its token strings resolved through a
tokenizer when one is given. The scan (`tokscan.api`), the Ray workers (`tokscan.integrations.ray`) and the CLI
load profiles here."""

from __future__ import annotations

import os

from . import _core
from .errors import ProfileError, did_you_mean


def load_profile(
    profile: str | os.PathLike[str] = _core.DEFAULT_PROFILE,
    tokenizer: str | os.PathLike[str] | None = None,
    trust_remote_code: bool = False,
):
    """A built-in profile by name (`kimi-k2`, `deepseek`, `qwen3`) or a TOML profile file; with `tokenizer`
    (a tokenizer directory as downloaded: tokenizer.json, or a tiktoken vocabulary such as `tiktoken.model`,
    and/or tokenizer_config.json; or a tokenizer.json) its token strings resolve through it — a directory with
    neither tokenizer.json nor a tiktoken file whose tokenizer class ships as code needs `trust_remote_code` —
    and when the directory has a vocabulary the scan also looks for special tokens written as text
    (`spelled_special`: every ordinary token's bytes are searched, so a tag BPE merged with its neighbours is
    found too)."""
    try:
        if tokenizer is None:
            return _core.Profile.load(str(profile), None)
        from .samples.tokenizer import profile_vocabulary

        with profile_vocabulary(tokenizer, trust_remote_code) as vocab:
            return _core.Profile.load(str(profile), vocab)
    except ProfileError as e:
        hint = did_you_mean(str(profile), _core.builtin_profiles()) if "unknown profile" in str(e) else ""
        if not hint:
            raise
        raise ProfileError(f"{e}{hint}") from None
