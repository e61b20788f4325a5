"""The report is identical for any thread count and any order (or repetition) of the input paths."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tokscan


@pytest.fixture(scope="module")
def shards(layouts):
    files = sorted(str(p) for p in layouts["parquet_full"].glob("*.parquet"))
    reference = tokscan.scan(files, threads=1).findings
    return files, reference


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_thread_count_and_path_order_give_the_same_report(shards, data):
    files, reference = shards
    order = data.draw(st.permutations(files))
    repeat = data.draw(st.lists(st.sampled_from(files), max_size=2))  # a path given twice counts once
    threads = data.draw(st.sampled_from([1, 2, 8]))
    assert tokscan.scan([*order, *repeat], threads=threads).findings == reference
