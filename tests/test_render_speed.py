"""The summary line's throughput reads sensibly at any corpus size and scan time."""

from __future__ import annotations

import io

from rich.console import Console

import tokscan
from tokscan.report.terminal import print_summary


def test_speed_uses_a_unit_that_fits(layouts):
    report = tokscan.scan(next(iter(layouts.values())), profile="kimi-k2")
    n = report.n_tokens
    cases = {
        n / 2_000: "2.0k tok/s",  # a tiny corpus with the tokenizer load in the wall time: not "0 Mtok/s"
        n / 3_500_000: "3.5M tok/s",
        n / 1_300_000_000: "1.3B tok/s",
    }
    for seconds, want in cases.items():
        buf = io.StringIO()
        print_summary(report, Console(file=buf, width=300), seconds=seconds)
        first = buf.getvalue().splitlines()[0]
        assert f"({want})" in first, first
