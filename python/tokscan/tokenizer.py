"""Compatibility path: loading tokenizers lives in `tokscan.samples.tokenizer`.

`tokscan.tokenizer` keeps working for code that imports it (tests, benches); new code imports
`tokscan.samples.tokenizer`. Like that module, this one imports no transformers until a tokenizer is loaded.
"""

from .samples.tokenizer import (
    CONFIG,
    GENERIC_CLASSES,
    TEMPLATE_FILE,
    encode,
    load_tokenizer,
    profile_vocabulary,
    read_config,
    remote_code_class,
    render,
    vocabulary,
    vocabulary_dir,
)

__all__ = [
    "CONFIG",
    "GENERIC_CLASSES",
    "TEMPLATE_FILE",
    "encode",
    "load_tokenizer",
    "profile_vocabulary",
    "read_config",
    "remote_code_class",
    "render",
    "vocabulary",
    "vocabulary_dir",
]
