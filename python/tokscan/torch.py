"""Compatibility path: the PyTorch integration lives in `tokscan.integrations.torch`.

`tokscan.torch.ValidatedDataset` is the documented name (docs/guide/data-loader.md) and keeps working; importing this
module without PyTorch raises the same ImportError as that one.
"""

from .integrations.torch import ON_BAD, BadSampleError, DropStats, ValidatedDataset

__all__ = ["ON_BAD", "BadSampleError", "DropStats", "ValidatedDataset"]
