"""`tokscan.Validator`: the same verdicts as `tokscan scan` for every input form, no copy of the ids, safe
from several threads."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tokscan
from tokscan.validate import CORPUS_WIDE_CODES, DUMP_CODES, REFERENCE_CODES, SOURCE_CODES

PAD = 163839  # Kimi-K2's [PAD]


def scan_flags(report: tokscan.Report) -> np.ndarray:
    """Per-row flags of a scan without the corpus-wide codes, which a batch check cannot see."""
    flags = np.zeros(report.n_samples, dtype=np.uint64)
    for f in report.flagged:
        for c in f["codes"]:
            if c not in (*CORPUS_WIDE_CODES, *SOURCE_CODES, *REFERENCE_CODES, *DUMP_CODES):
                flags[f["row"]] |= np.uint64(1 << tokscan.CODES[c])
    return flags


@pytest.fixture(scope="module")
def truth(layouts):
    """The scan of the Parquet layout (ids + loss mask): expected flags with and without the mask."""
    with_mask = scan_flags(tokscan.scan(layouts["parquet_full"], profile="kimi-k2"))
    without = scan_flags(tokscan.scan(layouts["numpy"], profile="kimi-k2"))
    return with_mask, without


def flat(samples, dtype):
    lengths = np.array([len(s.ids) for s in samples])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = np.concatenate([np.asarray(s.ids) for s in samples]).astype(dtype)
    mask = np.concatenate([np.asarray(s.mask()) for s in samples]).astype(np.uint8)
    return ids, offsets, mask


def padded(samples, pad=PAD):
    width = max(len(s.ids) for s in samples) + 5
    ids = np.full((len(samples), width), pad, dtype=np.int64)
    mask = np.zeros((len(samples), width), dtype=np.int8)
    for i, s in enumerate(samples):
        ids[i, : len(s.ids)] = s.ids
        mask[i, : len(s.ids)] = s.mask()
    return ids, mask


def codes_in(flags: np.ndarray) -> set[str]:
    any_bits = int(np.bitwise_or.reduce(flags)) if len(flags) else 0
    return {c for c, bit in tokscan.CODES.items() if any_bits >> bit & 1}


# The demo and synthetic corpora inject no tool-call payload defects yet: tests/test_tool_payloads.py has them.
TOOL_PAYLOAD_CODES = ("tool_call_arguments", "tool_call_name", "tool_call_undeclared")


def test_the_generated_corpus_has_every_per_sample_code(truth):
    # spelled_special needs a real tokenizer: see test_real_tokenizer_corpus_agrees_with_the_scan.
    assert codes_in(truth[0]) == (
        set(tokscan.CODES)
        - set(CORPUS_WIDE_CODES)
        - set(SOURCE_CODES)
        - set(REFERENCE_CODES)
        - set(DUMP_CODES)
        - {"spelled_special"}
        - set(TOOL_PAYLOAD_CODES)
    )


def test_real_tokenizer_corpus_agrees_with_the_scan(tmp_path):
    """The DeepSeek demo corpus (real text, real tokenizer) has every code, spelled_special included."""
    from tokscan import demo

    path, profile = demo.write_demo(tmp_path, "deepseek", seed=5)
    tok = demo.demo_tokenizer("deepseek")
    want = scan_flags(tokscan.scan(path, profile=profile, tokenizer=tok))
    # The DeepSeek demo plants broken tool-call arguments and an empty name; its template declares no tools.
    never = set(CORPUS_WIDE_CODES) | set(SOURCE_CODES) | set(REFERENCE_CODES) | set(DUMP_CODES)
    assert codes_in(want) == set(tokscan.CODES) - never - {"tool_call_undeclared"}
    table = pq.read_table(path)
    r = tokscan.Validator(profile, tokenizer=tok).check(table.column("input_ids"), loss_mask=table.column("loss_mask"))
    np.testing.assert_array_equal(r.flags, want)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32])
def test_flat_ids_with_offsets_agree_with_the_scan(samples, truth, dtype):
    v = tokscan.Validator("kimi-k2")
    ids, offsets, mask = flat(samples, dtype)
    r = v.check(ids, offsets)
    np.testing.assert_array_equal(r.flags, truth[1])
    np.testing.assert_array_equal(r.lengths, [len(s.ids) for s in samples])
    r = v.check(ids, offsets.astype(np.int32), mask)
    np.testing.assert_array_equal(r.flags, truth[0])


def test_padded_2d_agrees_with_the_scan(samples, truth):
    ids, mask = padded(samples)
    r = tokscan.Validator("kimi-k2").check(ids, loss_mask=mask)
    np.testing.assert_array_equal(r.flags, truth[0])
    np.testing.assert_array_equal(r.lengths, [len(s.ids) for s in samples])
    # A custom padding id (the samples with a [PAD] inside stay pad_inside).
    ids, mask = padded(samples, pad=0)
    r = tokscan.Validator("kimi-k2", pad_id=0).check(ids, loss_mask=mask)
    np.testing.assert_array_equal(r.flags, truth[0])


def test_arrow_lists_and_chunked_arrays_agree_with_the_scan(layouts, truth):
    table = pq.read_table(layouts["parquet_full"])
    assert table.column("input_ids").num_chunks > 1
    v = tokscan.Validator("kimi-k2")
    r = v.check(table.column("input_ids"), loss_mask=table.column("loss_mask"))
    np.testing.assert_array_equal(r.flags, truth[0])
    # One array, sliced (offsets not starting at 0), large_list, uint32 items.
    arr = table.column("input_ids").combine_chunks().cast(pa.large_list(pa.uint32())).slice(7, 100)
    m = table.column("loss_mask").combine_chunks().slice(7, 100)
    np.testing.assert_array_equal(v.check(arr, loss_mask=m).flags, truth[0][7:107])
    for mask_type in (pa.bool_(), pa.float32()):
        typed = m.cast(pa.list_(mask_type))
        np.testing.assert_array_equal(v.check(arr, loss_mask=typed).flags, truth[0][7:107])
    np.testing.assert_array_equal(v.check(arr).flags, truth[1][7:107])


def test_python_lists_and_labels(samples, truth):
    v = tokscan.Validator("kimi-k2")
    ids = [s.ids for s in samples]
    labels = [[t if m else -100 for t, m in zip(s.ids, s.mask(), strict=True)] for s in samples]
    np.testing.assert_array_equal(v.check(ids).flags, truth[1])
    np.testing.assert_array_equal(v.check(ids, labels=labels).flags, truth[0])
    np.testing.assert_array_equal(v.check(ids, loss_mask=[s.mask() for s in samples]).flags, truth[0])


def test_torch_tensors(samples, truth):
    torch = pytest.importorskip("torch")
    v = tokscan.Validator("kimi-k2")
    ids, offsets, mask = flat(samples, np.int64)
    r = v.check(torch.from_numpy(ids), torch.from_numpy(offsets), torch.from_numpy(mask))
    np.testing.assert_array_equal(r.flags, truth[0])
    pids, pmask = padded(samples)
    r = v.check(torch.from_numpy(pids), loss_mask=torch.from_numpy(pmask))
    np.testing.assert_array_equal(r.flags, truth[0])


def test_result_helpers_and_policy(samples, truth):
    ids, offsets, _ = flat(samples, np.int32)
    r = tokscan.Validator("kimi-k2").check(ids, offsets)
    errors = {c for c, (sev, _d) in tokscan.CODE_INFO.items() if sev == "error"}
    for i in range(len(r)):
        codes = r.codes_of(i)
        assert bool(r.ok[i]) == (not errors.intersection(codes))
    assert r.flags.dtype == np.uint64 and r.lengths.dtype == np.uint32
    assert sum(r.counts().values()) >= len(r.bad_rows) > 0
    truncated = [i for i in range(len(r)) if "truncated" in r.codes_of(i)]
    relaxed = tokscan.Validator("kimi-k2", policy={"truncated": "ignore"}).check(ids, offsets)
    assert all(relaxed.ok[i] == (r.codes_of(i) == ["truncated"] or r.ok[i]) for i in truncated)
    strict = tokscan.Validator("kimi-k2", fail_on="warning").check(ids, offsets)
    assert strict.ok.sum() < r.ok.sum()
    with pytest.raises(tokscan.UsageError, match="unknown anomaly code"):
        tokscan.Validator("kimi-k2", policy={"nope": "error"})


def test_bad_batches_raise_usage_errors():
    v = tokscan.Validator("kimi-k2")
    ids = np.arange(1000, 1010, dtype=np.int32)
    with pytest.raises(tokscan.UsageError, match="past the 10 values"):
        v.check(ids, np.array([0, 5, 11]))
    with pytest.raises(tokscan.UsageError, match="give offsets"):
        v.check(ids)
    with pytest.raises(tokscan.UsageError, match="int32, int64"):
        v.check(ids.astype(np.float64), np.array([0, 10]))
    with pytest.raises(tokscan.UsageError, match="loss_mask has 1 rows"):
        v.check(ids.reshape(2, 5), loss_mask=np.zeros((1, 5), np.uint8))
    with pytest.raises(tokscan.UsageError, match="list"):
        v.check(pa.array([1, 2, 3]))


def _vm(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    raise AssertionError(field)


def test_no_copy_of_the_ids():
    """A 400 MB batch is checked with a peak memory growth far below its size (a copy would double it)."""
    n_rows, width = 6_000, 8_192
    ids = (np.arange(n_rows * width, dtype=np.int64) % 90_000 + 1000).reshape(n_rows, width)
    ids[:, -1] = 163586  # <|im_end|>
    before = _vm("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    r = tokscan.Validator("kimi-k2").check(ids)
    grew = _vm("VmHWM:") - before
    assert len(r) == n_rows
    assert grew < ids.nbytes / 10, f"peak grew by {grew / 1e6:.0f} MB for a {ids.nbytes / 1e6:.0f} MB batch"


def test_one_validator_from_many_threads(samples):
    v = tokscan.Validator("kimi-k2", threads=2)
    ids, offsets, mask = flat(samples, np.int64)
    want = v.check(ids, offsets, mask).flags
    results: list[np.ndarray] = []

    def work() -> None:
        for _ in range(5):
            results.append(v.check(ids, offsets, mask).flags)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 20
    for got in results:
        np.testing.assert_array_equal(got, want)


def test_validator_pickles_by_profile_name():
    import pickle

    v = tokscan.Validator("qwen3", policy={"truncated": "ignore"}, fail_on="warning")
    w = pickle.loads(pickle.dumps(v))
    assert (w.profile.name, w.policy, w.fail_on, w.fail_mask) == ("qwen3", v.policy, "warning", v.fail_mask)


def test_check_each_takes_one_buffer_per_sample(samples, truth):
    v = tokscan.Validator("kimi-k2")
    ids = [np.asarray(s.ids, dtype=np.int32) for s in samples]
    np.testing.assert_array_equal(v.check_each(ids).flags, truth[1])
    masks = [np.asarray(s.mask(), dtype=bool) for s in samples]
    r = v.check_each([s.ids for s in samples], masks)
    np.testing.assert_array_equal(r.flags, truth[0])
    np.testing.assert_array_equal(r.lengths, [len(s.ids) for s in samples])
    # A mask of the wrong length is a finding, not an error.
    short = v.check_each([ids[0]], [masks[0][:-1]])
    assert "loss_mask_misaligned" in short.codes_of(0)
    with pytest.raises(tokscan.UsageError, match="2 loss masks for 1 samples"):
        v.check_each([ids[0]], [masks[0], masks[1]])


#: Run in a fresh interpreter: the forked child must inherit tokscan's state and nothing else. Forked from the
#: long-lived pytest process on Python 3.13, the child died of SIGSEGV before running any of its code (after the
#: suite had loaded torch, Ray and gRPC, whose fork handlers run in the child), which is not what this tests.
FORK_SCRIPT = """
import multiprocessing, queue, sys
import numpy as np
import tokscan

ids, offsets = np.load(sys.argv[1]), np.load(sys.argv[2])
v = tokscan.Validator("kimi-k2", threads=2)
want = v.check(ids, offsets).flags.tolist()  # the pool is built in this process


def child(q):
    q.put(v.check(ids, offsets).flags.tolist())


ctx = multiprocessing.get_context("fork")
q = ctx.Queue()
p = ctx.Process(target=child, args=(q,))
p.start()
try:
    got = q.get(timeout=60)
except queue.Empty:
    p.join(5)
    sys.exit(f"the forked child hung or died (exit code {p.exitcode})")
p.join(30)
sys.exit(0 if got == want and p.exitcode == 0 else f"child: exit code {p.exitcode}, same flags: {got == want}")
"""


def test_a_pool_built_before_fork_is_rebuilt_in_the_child(samples, tmp_path):
    """A forked DataLoader worker inherits the validator but not its pool's threads; reusing that pool would
    hang forever, so the child must build its own."""
    import subprocess
    import sys

    ids, offsets, _ = flat(samples, np.int64)  # 434 rows
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "offsets.npy", offsets)
    args = [sys.executable, "-c", FORK_SCRIPT, str(tmp_path / "ids.npy"), str(tmp_path / "offsets.npy")]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_float_ids_and_offsets_are_refused_not_truncated():
    """Issue 22: `[[1.5, 2.7]]`, fractional offsets and a float64 column used to be truncated silently
    (163586.9 -> 163586)."""
    v = tokscan.Validator("kimi-k2")
    for bad in ([[1.5, 2.7]], [np.array([163586.9, 2.0])], np.array([[1.5, 2.7]]), pa.array([[1.5, 2.7]])):
        with pytest.raises(tokscan.UsageError):
            v.check(bad)
    with pytest.raises(tokscan.UsageError, match="offsets must be integers"):
        v.check(np.array([1, 2, 3], dtype=np.int64), np.array([0.0, 1.5, 3.0]))
    with pytest.raises(tokscan.UsageError):
        v.check_each([np.array([1.5, 2.0])])
    assert v.check([[1, 2], []]).lengths.tolist() == [2, 0]  # integer lists and empty rows still pass
