"""Compatibility path: reading flagged samples back from a corpus lives in `tokscan.samples.corpus`.

`tokscan.forensics.Corpus` is the documented name (docs/guide/python-api.md) and keeps working; new code imports
`tokscan.samples.corpus`. Importing this module costs what importing that one does (numpy).
"""

from .samples.corpus import (
    COMPLETION_TOKENS,
    EDGE_TOKENS,
    ELIDE_ABOVE,
    ELIDE_KEEP,
    EXCERPT_RADIUS,
    OOV,
    Corpus,
    Decoder,
    IdDecoder,
    Sample,
    decode_flagged,
    decode_text,
    describe,
    excerpt,
    explain,
    load_tokenizer,
    opened,
    segments,
    vocab_size_of,
)

__all__ = [
    "COMPLETION_TOKENS",
    "EDGE_TOKENS",
    "ELIDE_ABOVE",
    "ELIDE_KEEP",
    "EXCERPT_RADIUS",
    "OOV",
    "Corpus",
    "Decoder",
    "IdDecoder",
    "Sample",
    "decode_flagged",
    "decode_text",
    "describe",
    "excerpt",
    "explain",
    "load_tokenizer",
    "opened",
    "segments",
    "vocab_size_of",
]
