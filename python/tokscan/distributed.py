"""Compatibility path: the scan on a Ray cluster lives in `tokscan.integrations.ray`.

`tokscan.distributed` keeps working for code that imports it (tests, scripts written before the move); new
code imports `tokscan.integrations.ray`.
"""

from .integrations.ray import TEST_HOLD_DIR, connect, import_ray, run_on_ray, scan_ray

__all__ = ["TEST_HOLD_DIR", "connect", "import_ray", "run_on_ray", "scan_ray"]
