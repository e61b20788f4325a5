"""The scan on a local Ray cluster with several worker processes: the same report as a local scan on every
layout, whatever the task count, bucket count or merge fan-in; a worker killed mid-scan; the CLI; progress."""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

import tokscan
from tokscan import demo
from tokscan.distributed import TEST_HOLD_DIR, scan_ray
from tokscan.errors import UsageError

import synth
from conftest import run_cli

ray = pytest.importorskip("ray")
if not hasattr(ray, "init"):
    pytest.skip("ray is not installed", allow_module_level=True)


@pytest.fixture(scope="module")
def cluster():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(
        address="local",
        num_cpus=4,  # four worker processes on this 2-core box: tasks really run in separate processes
        include_dashboard=False,
        object_store_memory=128 * 2**20,
        log_to_driver=False,
        logging_level="ERROR",
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """Every layout, with the first shard's samples repeated in the last shard (new ids): exact duplicates
    across shards, which only meet when the keys are routed by hash."""
    # Prompts of the first shard answered again (new completions) or filed under another category in the last:
    # prompt groups, which also only meet when the keys are routed by hash.
    samples = synth.with_repeats(21)
    root = tmp_path_factory.mktemp("ray-layouts")
    return {name: writer(samples, root / name) for name, (writer, _mask) in synth.LAYOUTS.items()}


@pytest.mark.parametrize("layout", list(synth.LAYOUTS))
def test_every_layout_gives_the_local_report(cluster, corpus, layout):
    path = str(corpus[layout])
    local = tokscan.scan(path, ngram_coverage=True)
    assert local.count("duplicate") >= 40  # the planted cross-shard copies
    assert local.count("prompt_duplicate") >= 12 and local.count("prompt_cross_category") >= 4
    for n_tasks, n_buckets, fan_in in ((None, None, 8), (5, 3, 2), (1, 1, 2)):
        r = scan_ray([path], "kimi-k2", ngram_coverage=True, n_tasks=n_tasks, n_buckets=n_buckets, fan_in=fan_in)
        assert r.findings == local.findings, (layout, n_tasks, n_buckets, fan_in)
        # The n-gram coverage pass's partials merged across tasks: the same statistics, per category and overall.
        coverage = {c: s["ngram_coverage"] for c, s in r.data["categories"].items()}
        assert coverage == {c: s["ngram_coverage"] for c, s in local.data["categories"].items()}
        assert r.data["overall"]["ngram_coverage"] == local.data["overall"]["ngram_coverage"]


@pytest.mark.parametrize("layout", ["parquet_split", "numpy_mask", "jsonl_vllm_zst"])
def test_near_duplicates_give_the_local_report(cluster, tmp_path, layout):
    """The band keys meet in hash buckets, the candidates are confirmed by one task: the same clusters,
    representatives and report as the local scan, whatever the task and bucket counts."""
    writer, _mask = synth.LAYOUTS[layout]
    path = str(writer(synth.with_near_copies(), tmp_path / layout))
    local = tokscan.scan(path, near_dup=True)
    assert local.count("near_duplicate") >= 40 and local.data["near_duplicates"]["clusters"] >= 40
    for n_tasks, n_buckets in ((None, None), (7, 3), (1, 1)):
        r = scan_ray([path], "kimi-k2", near_dup=True, n_tasks=n_tasks, n_buckets=n_buckets)
        assert r.findings == local.findings, (layout, n_tasks, n_buckets)
    assert tokscan.scan(path, near_dup=True, engine="ray").findings == local.findings


def test_the_flagged_detail_limit_gives_the_local_report(cluster, corpus):
    """Each scan and resolve task keeps detail for its own first flagged samples of each code; the merge keeps
    the corpus's first, so the driver never holds every flagged sample in full and the report is the local one."""
    path = str(corpus["parquet_full"])
    local = tokscan.scan(path, flagged_detail=2)
    assert local.data["flagged_summarized"]["samples"] > 0  # the limit bites
    # on the corpus-wide codes too, which each resolve task summarizes past the limit from its own first row
    assert local.data["flagged_summarized"]["by_code"]["duplicate"] > 0
    for n_tasks, fan_in in ((None, 8), (7, 2)):
        r = scan_ray([path], "kimi-k2", flagged_detail=2, n_tasks=n_tasks, fan_in=fan_in)
        assert r.findings == local.findings, (n_tasks, fan_in)
    remote = tokscan.scan(path, engine="ray", flagged_detail=2)
    assert remote.findings == local.findings
    assert remote.run is not None and remote.run["engine"] == "ray" and remote.run["threads"] == 4  # the CPUs
    assert local.run is not None and local.run["engine"] == "local"


@pytest.mark.parametrize("layout", ["parquet_full", "jsonl"])
def test_draft_vocab_counts_merge_across_tasks_as_locally(cluster, corpus, layout, tmp_path):
    """Loss-bearing token counts, coverage, the mapping and its check merge across Ray tasks exactly as across
    local threads (the first-seen tie-break included: a mapping larger than the distinct ids pads)."""
    path = str(corpus[layout])
    fresh = tmp_path / "m.json"
    local = tokscan.scan(path, draft_vocab=[8, 64, 4096], vocab_mapping=5000, threads=2)
    from tokscan.vocab import write_mapping

    write_mapping(local.data["draft_vocab"]["mapping"], 163840, fresh)
    assert tokscan.scan(path, draft_vocab=[8, 64, 4096], vocab_mapping=5000, threads=1).findings == local.findings
    for n_tasks, fan_in in ((5, 2), (1, 2)):
        r = scan_ray(
            [path],
            "kimi-k2",
            draft_vocab=[8, 64, 4096],
            vocab_mapping=5000,
            check_vocab=fresh,
            n_tasks=n_tasks,
            fan_in=fan_in,
        )
        dv = r.data["draft_vocab"]
        assert dv["check"]["problems"] == []
        dv.pop("check")
        assert dv == local.data["draft_vocab"], (layout, n_tasks)


def test_real_tokenizer_profile_file_and_policy_on_the_workers(cluster, tmp_path):
    """A TOML profile resolved through a real tokenizer directory is loaded by every worker; the policy and
    the verdict come out as locally."""
    path, profile = demo.write_demo(tmp_path, "deepseek", seed=3)
    tok = demo.demo_tokenizer("deepseek")
    policy = {"truncated": "2%", "length_outlier": "ignore"}
    local = tokscan.scan(path, profile=profile, tokenizer=tok, policy=policy)
    remote = tokscan.scan(path, profile=profile, tokenizer=tok, policy=policy, engine="ray")
    assert remote.findings == local.findings
    assert remote.count("spelled_special") >= 1  # needs the tokenizer's vocabulary on the worker


def test_a_worker_killed_mid_scan_is_retried_and_the_report_is_unchanged(cluster, corpus, tmp_path, monkeypatch):
    path = str(corpus["parquet_full"])
    local = tokscan.scan(path)
    hold = tmp_path / "hold"
    hold.mkdir()
    monkeypatch.setenv(TEST_HOLD_DIR, str(hold))
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["report"] = scan_ray([path], "kimi-k2", n_tasks=4)
        except BaseException as e:  # re-raised below
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    pid_file = hold / "pid"
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_file.exists(), "the first scan task never started"
    pid = int(pid_file.read_text())
    assert pid != os.getpid()  # a worker process, not the driver
    os.kill(pid, signal.SIGKILL)
    t.join(120)
    assert not t.is_alive()
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    assert out["report"].findings == local.findings  # type: ignore[union-attr]


def test_progress_aggregates_the_workers(cluster, corpus):
    path = str(corpus["numpy"])
    seen: list[dict[str, int]] = []
    r = tokscan.scan(path, engine="ray", progress=seen.append)
    assert seen, "no progress reported"
    last = seen[-1]
    assert last["units_done"] == last["units_total"] >= 1
    assert last["samples"] == r.n_samples
    assert last["tokens"] == r.n_tokens
    assert all(a["samples"] <= b["samples"] for a, b in itertools.pairwise(seen))


def test_cli_joins_a_running_cluster(cluster, corpus, tmp_path):
    path = str(corpus["arrow_stream"])
    out = tmp_path / "ray.json"
    address = ray.get_runtime_context().gcs_address
    proc = run_cli("scan", path, "--ray", "--ray-address", address, "--json", str(out), "-q")
    assert proc.returncode == 1, proc.stderr  # the corpus has errors
    assert proc.stderr == ""
    assert tokscan.Report.load(out).findings == tokscan.scan(path).findings


def test_ray_address_without_ray_is_a_usage_error():
    proc = run_cli("scan", "x", "--ray-address", "auto")
    assert proc.returncode == 2
    assert "--ray-address needs --ray" in proc.stderr


def test_without_ray_installed_the_install_command_is_named(corpus, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(UsageError, match=r"-m pip install 'ray>=2\.30,<3'"):
        tokscan.scan(str(corpus["numpy"]), engine="ray")
    with pytest.raises(UsageError, match="engine must be"):
        tokscan.scan(str(corpus["numpy"]), engine="spark")
    with pytest.raises(UsageError, match="by name or TOML file"):
        tokscan.scan(str(corpus["numpy"]), profile=tokscan.load_profile("kimi-k2"), engine="ray")


def test_cli_without_ray_exits_2_with_the_install_command(corpus, tmp_path):
    shadow = tmp_path / "shadow"
    (shadow / "ray").mkdir(parents=True)
    (shadow / "ray" / "__init__.py").write_text("raise ImportError('no ray here')\n")
    env = {**os.environ, "PYTHONPATH": str(shadow)}
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "tokscan", "scan", str(corpus["numpy"]), "--ray"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"tokscan: error: --ray / engine='ray' needs Ray, which is not installed: {sys.executable} -m pip install "
        "'ray>=2.30,<3'"
    ]


def test_a_corpus_without_samples_is_the_same_usage_error(cluster, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"input_ids": pa.array([], pa.list_(pa.int32()))}), path)
    with pytest.raises(UsageError, match="no samples found") as local:
        tokscan.scan(path)
    with pytest.raises(UsageError, match="no samples found") as remote:
        tokscan.scan(path, engine="ray")
    assert str(remote.value) == str(local.value)


def test_a_ray_scan_lists_the_prompts_files_it_does_not_pair(cluster, tmp_path):
    """Pairing runs in the local engine; a cluster scan of the drafter layout names the prompts files (and every
    other file it left aside) instead of passing over them in silence."""
    samples = synth.build_corpus(n_clean=40, seed=1, anomalies_per_code=0)
    synth.write_parquet_full(samples, tmp_path / "B1_glaive", n_shards=1)
    (tmp_path / "B1_glaive" / "prompts.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    (tmp_path / "README.md").write_text("corpus\n")
    r = tokscan.scan(tmp_path, "kimi-k2", engine="ray")
    reasons = {Path(s["path"]).name: s["reason"] for s in r.data["skipped"]}
    assert "pairing runs in the local engine only" in reasons["prompts.jsonl"]
    assert reasons["README.md"].startswith("not a corpus file")
    assert "pairing" not in r.data
    local = tokscan.scan(tmp_path, "kimi-k2")
    assert local.data["pairing"][0]["category"] == "B1_glaive"


def test_tool_call_payloads_give_the_local_report(cluster, tmp_path):
    """Tool-call payloads are decoded in each task with the tokenizer's byte table: the same codes at the same
    positions as the local scan."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from test_profile_check import qwen_tiktoken_dir
    from test_tool_payloads import _qwen_sample

    from tokscan.tokenizer import load_tokenizer

    d = qwen_tiktoken_dir(tmp_path)
    tok = load_tokenizer(d, trust_remote_code=True)
    calls = [
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        '{"name": "get_weather", "arguments": {"city": "Paris"}',
        '{"name": "", "arguments": {"city": "Paris"}}',
        '{"name": "get_stock", "arguments": {"ticker": "X"}}',
    ]
    root = tmp_path / "corpus"
    root.mkdir()
    for shard in range(3):  # several units, so several tasks
        rows = [_qwen_sample(tok, c.replace("Paris", f"City{shard}"))[0] for c in calls]
        pq.write_table(pa.table({"input_ids": pa.array(rows, pa.list_(pa.int32()))}), root / f"s{shard}.parquet")
    local = tokscan.scan(root, "qwen3", tokenizer=d)
    # (The undeclared call is the same in every shard: exact duplicates across tasks as well.)
    assert {c for f in local.flagged for c in f["codes"]} >= {
        "tool_call_arguments",
        "tool_call_name",
        "tool_call_undeclared",
    }
    assert local.count("tool_call_arguments") == 3
    r = scan_ray([str(root)], "qwen3", tokenizer=str(d), n_tasks=3)
    assert r.findings == local.findings


def test_hidden_states_give_the_local_report(cluster, tmp_path):
    """Issue 48: the dump's checks run in one task of the cluster scan, on the corpus the tasks read: the same
    findings, flagged samples and hidden_states section as the local scan."""
    pytest.importorskip("torch")
    import hidden_dumps as hd

    b = hd.build(tmp_path, "specforge", n=12, plant={2: "nan", 5: "missing", 7: "other_sample"})
    kw = {"hidden_states": b.dump_dir, "target_model": b.model_dir}
    local = tokscan.scan(str(b.corpus_dir), **kw)
    assert local.count("hidden_nonfinite") == 1 and local.count("hidden_disagree") == 1
    assert local.count("hidden_missing") == 1
    remote = tokscan.scan(str(b.corpus_dir), engine="ray", **kw)
    assert remote.findings == local.findings
    assert remote.data["flagged"] == local.data["flagged"]
    assert remote.data["hidden_states"] == local.data["hidden_states"]
