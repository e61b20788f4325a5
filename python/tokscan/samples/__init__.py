"""Samples: reading flagged samples back from a corpus (corpus.py), tokenizers (tokenizer.py), the
transformers re-rendering of prompts (align.py) and the profile hints drawn from a scan's samples (hints.py).

Empty on purpose: importing one of these modules loads only what it needs (corpus.py pulls in numpy)."""
