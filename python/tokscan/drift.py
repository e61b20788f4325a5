"""Compatibility path: the drift checks between two reports live in `tokscan.report.drift`.

`tokscan.drift` keeps working for code that imports it; new code imports `tokscan.report.drift`.
"""

from .report.drift import DEFAULT_THRESHOLDS, PARTS, Drift, compare, ks_distance, to_json

__all__ = ["DEFAULT_THRESHOLDS", "PARTS", "Drift", "compare", "ks_distance", "to_json"]
