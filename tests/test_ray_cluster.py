"""The scan on a simulated multi-node Ray cluster (three nodes on this machine, one CPU each): tasks,
merges and buckets spread over nodes, and the report equals a local scan's, duplicates across shards
included."""

from __future__ import annotations

import dataclasses
import os

import pytest

import tokscan
from tokscan.distributed import scan_ray

import synth

ray = pytest.importorskip("ray")
if not hasattr(ray, "init"):
    pytest.skip("ray is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def nodes():
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False, "object_store_memory": 80 * 2**20},
    )
    for _ in range(2):
        c.add_node(num_cpus=1, object_store_memory=80 * 2**20)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False, logging_level="ERROR")
    yield c
    ray.shutdown()
    c.shutdown()


@ray.remote(num_cpus=1)
def _node_of_task() -> str:
    return ray.get_runtime_context().get_node_id()


def test_three_nodes_give_the_local_report(nodes, tmp_path):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    assert len(alive) == 3
    # every node runs tasks (pinned, so the check does not depend on how Ray happens to spread them)
    pinned = [_node_of_task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)) for n in alive]
    assert ray.get([task.remote() for task in pinned]) == alive
    samples = synth.build_corpus(n_clean=200, seed=5, anomalies_per_code=2)
    samples += [dataclasses.replace(s, sample_id=f"again-{s.sample_id}", expected=set()) for s in samples[:30]]
    for layout in ("parquet_full", "numpy_mask", "jsonl"):
        writer, _mask = synth.LAYOUTS[layout]
        path = str(writer(samples, tmp_path / layout))
        local = tokscan.scan(path)
        assert local.count("duplicate") >= 30
        assert scan_ray([path], "kimi-k2", n_tasks=6, n_buckets=3, fan_in=2).findings == local.findings, layout
