"""Draft vocabulary: loss-bearing token counts against numpy over every layout and thread count, coverage
against a numpy reference, the EAGLE-3 mapping against SpecForge's rules (re-stated below), loaded with
torch, and `--check-vocab` passing a fresh mapping and failing a stale or wrong-size one."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import tokscan
from tokscan.vocab import load_mapping

import synth
from conftest import run_cli

VOCAB = 163840  # kimi-k2
PAD = synth.PAD


def loss_ids(s: synth.Sample, with_mask: bool) -> np.ndarray:
    """The sample's loss-bearing ids: mask 1, or (no mask) the completion without trailing padding."""
    ids = np.asarray(s.ids, dtype=np.int64)
    if with_mask:
        m = np.asarray(s.mask(), dtype=bool)[: len(ids)]
        out = ids[: len(m)][m]
    else:
        c = list(s.completion)
        while c and c[-1] == PAD:
            c.pop()
        out = np.asarray(c, dtype=np.int64)
    return out[(out >= 0) & (out < VOCAB)]


def reference(samples: list[synth.Sample], with_mask: bool):
    """numpy counts per category and overall, and SpecForge's ranking: an insertion-ordered Counter fed each
    sample's sorted unique ids in row order, then a stable sort by count."""
    per_cat: dict[str, np.ndarray] = {}
    order: dict[int, None] = {}
    for s in samples:
        ids = loss_ids(s, with_mask)
        per_cat.setdefault(s.category, np.zeros(VOCAB, dtype=np.int64))
        per_cat[s.category] += np.bincount(ids, minlength=VOCAB)
        for i in np.unique(ids).tolist():
            order.setdefault(i, None)
    total = sum(per_cat.values())
    ranked = sorted(order, key=lambda i: -total[i])  # stable: ties keep first-insertion order
    return per_cat, total, ranked


def coverage(counts: np.ndarray, ranked: list[int], k: int) -> float:
    n = counts.sum()
    return float(counts[ranked[:k]].sum() / n) if n else 0.0


def specforge_mapping(counter: Counter, k: int, vocab: int) -> tuple[list[int], list[bool]]:
    """SpecForge's `process_token_dict_to_mappings`, re-stated from its documented rules (not copied): pad with
    the lowest ids of range(k) not counted (count 0) until k ids; `most_common(k)`; sort the ids; d2t = id - i;
    t2d = membership over the target vocabulary."""
    c = Counter(counter)
    if len(c) < k:
        for i in range(k):
            if len(c) >= k:
                break
            if i not in c:
                c[i] = 0
    used = sorted(i for i, _ in c.most_common(k))
    used_set = set(used)
    return [t - i for i, t in enumerate(used)], [i in used_set for i in range(vocab)]


@pytest.fixture(scope="module")
def samples():
    return synth.build_corpus(n_clean=240, seed=5, anomalies_per_code=1)


@pytest.fixture(scope="module")
def clean():
    return synth.build_corpus(n_clean=200, seed=9, anomalies_per_code=0)


def check_report(dv: dict, samples, with_mask: bool) -> None:
    per_cat, total, ranked = reference(samples, with_mask)
    assert dv["overall"]["loss_tokens"] == int(total.sum())
    assert dv["overall"]["distinct"] == int((total > 0).sum())
    assert dv["top_ids"] == [[i, int(total[i])] for i in ranked[:20]]
    for k, got in zip(dv["curve_sizes"], dv["overall"]["curve"], strict=True):
        assert got == pytest.approx(coverage(total, ranked, k), abs=1e-12)
    for name, counts in per_cat.items():
        c = dv["categories"][name]
        assert c["loss_tokens"] == int(counts.sum())
        assert c["distinct"] == int((counts > 0).sum())
        for k, got in zip(dv["curve_sizes"], c["curve"], strict=True):
            assert got == pytest.approx(coverage(counts, ranked, k), abs=1e-12), (name, k)
        for k, got in c["coverage"].items():
            assert got == pytest.approx(coverage(counts, ranked, int(k)), abs=1e-12)


MASKED = [name for name, (_, m) in synth.LAYOUTS.items() if m]
UNMASKED = [name for name, (_, m) in synth.LAYOUTS.items() if not m]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("layout", MASKED)
def test_masked_counts_equal_numpy(tmp_path, samples, layout, threads):
    writer, _ = synth.LAYOUTS[layout]
    path = writer(samples, tmp_path / layout)
    r = tokscan.scan(str(path), threads=threads, draft_vocab=[64, 1000])
    check_report(r.data["draft_vocab"], samples, with_mask=True)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("layout", UNMASKED)
def test_completion_counts_equal_numpy_without_a_mask(tmp_path, clean, layout, threads):
    writer, _ = synth.LAYOUTS[layout]
    path = writer(clean, tmp_path / layout)
    r = tokscan.scan(str(path), threads=threads, draft_vocab=[64, 1000])
    check_report(r.data["draft_vocab"], clean, with_mask=False)


def test_no_counting_without_the_option(tmp_path, clean):
    path = synth.write_parquet_full(clean[:20], tmp_path / "p")
    assert "draft_vocab" not in tokscan.scan(str(path)).data


@pytest.mark.parametrize("k", [5, 300, 60000])
def test_mapping_follows_specforge_and_loads_with_torch(tmp_path, samples, k):
    torch = pytest.importorskip("torch")
    path = synth.write_parquet_full(samples, tmp_path / "p")
    out = tmp_path / "m.pt"
    res = run_cli("vocab", str(path), "--size", str(k), "--out", str(out), "--fail-on", "never", "-q")
    assert res.returncode == 0, res.stderr
    m = torch.load(out, weights_only=True)
    assert m["d2t"].dtype == torch.int64 and m["t2d"].dtype == torch.bool
    counter: Counter = Counter()
    for s in samples:  # SpecForge's counting loop: one sample at a time, unique ids in ascending order
        ids, n = np.unique(loss_ids(s, True), return_counts=True)
        counter.update(dict(zip(ids.tolist(), n.tolist(), strict=True)))
    if k == 60000:
        assert len(counter) < k  # the corpus has fewer distinct ids than K: padding
    d2t, t2d = specforge_mapping(counter, k, VOCAB)
    assert m["d2t"].tolist() == d2t
    assert m["t2d"].tolist() == t2d


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_plain_formats_hold_the_same_mapping(tmp_path, samples, suffix):
    torch = pytest.importorskip("torch")
    path = synth.write_parquet_full(samples, tmp_path / "p")
    for name in ("m.pt", f"m{suffix}"):
        res = run_cli("vocab", str(path), "--size", "100", "--out", str(tmp_path / name), "--fail-on", "never", "-q")
        assert res.returncode == 0, res.stderr
    m = torch.load(tmp_path / "m.pt", weights_only=True)
    d2t, t2d = load_mapping(tmp_path / f"m{suffix}")
    assert d2t == m["d2t"].tolist() and t2d == m["t2d"].tolist()


def test_check_vocab_passes_fresh_and_fails_stale_or_wrong_size(tmp_path, samples):
    a = synth.write_parquet_full(samples, tmp_path / "a")
    other = synth.build_corpus(n_clean=240, seed=77, anomalies_per_code=0)
    # Another corpus: shift every plain-text id so its top ids are not this corpus's.
    for s in other:
        s.completion = [t + 30000 if 1000 <= t < 100000 else t for t in s.completion]
    b = synth.write_parquet_full(other, tmp_path / "b")
    fresh, stale, small = tmp_path / "fresh.npz", tmp_path / "stale.npz", tmp_path / "small.json"
    for corpus, out in ((a, fresh), (b, stale)):
        res = run_cli("vocab", str(corpus), "--size", "200", "--out", str(out), "--fail-on", "never", "-q")
        assert res.returncode == 0, res.stderr
    d2t, t2d = load_mapping(fresh)
    small.write_text(json.dumps({"d2t": d2t, "t2d": [int(x) for x in t2d[:100000]]}))

    base = ["scan", str(a), "--check-vocab"]
    policy = ["--config", str(write_config(tmp_path))]
    ok = run_cli(*base, str(fresh), "--format", "json", *policy)
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr
    check = json.loads(ok.stdout)["draft_vocab"]["check"]
    assert check["problems"] == [] and check["coverage"] == check["best_coverage"]

    bad = run_cli(*base, str(stale), "--format", "json", *policy)
    assert bad.returncode == 1
    rep = json.loads(bad.stdout)
    assert rep["anomalies"]["draft_vocab_stale"]["count"] == 1
    assert rep["verdict"]["failing"] == {"draft_vocab_stale": 1}
    check = rep["draft_vocab"]["check"]
    assert check["coverage"] < check["best_coverage"] - 0.01
    # The ids it misses: the corpus's most frequent ids outside the stale mapping, in rank order.
    d2t_stale, _ = load_mapping(stale)
    targets = {d + i for i, d in enumerate(d2t_stale)}
    outside = [pair for pair in rep["draft_vocab"]["top_ids"] if pair[0] not in targets]
    assert outside and check["missed"][: len(outside)] == outside

    wrong = run_cli(*base, str(small), *policy)
    assert wrong.returncode == 1
    assert "draft_vocab_stale" in wrong.stdout

    broken = tmp_path / "broken.json"
    broken.write_text("{")
    res = run_cli(*base, str(broken))
    assert res.returncode == 2 and "broken.json" in res.stderr and "Traceback" not in res.stderr


def write_config(tmp_path: Path) -> Path:
    """A policy that leaves only the mapping check able to fail the run (the corpus has planted anomalies)."""
    import tokscan._core as core

    codes = [name for name, *_ in core.codes() if name != "draft_vocab_stale"]
    cfg = tmp_path / "tokscan.toml"
    cfg.write_text("[policy]\n" + "".join(f'{c} = "ignore"\n' for c in codes))
    return cfg


def test_bad_sizes_and_config_key(tmp_path, clean):
    path = synth.write_parquet_full(clean[:30], tmp_path / "p")
    res = run_cli("scan", str(path), "--draft-vocab", "16000,abc")
    assert res.returncode == 2 and "abc" in res.stderr
    cfg = tmp_path / "tokscan.toml"
    cfg.write_text("draft_vocab = [16, 128]\n")
    res = run_cli("scan", str(path), "--config", str(cfg), "--format", "json", "--fail-on", "never")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["draft_vocab"]["sizes"] == [16, 128]


def test_a_profile_without_a_vocabulary_is_refused_before_any_counting(tmp_path, clean):
    """`plain` names no vocabulary (every id below 2^32 - 1 is in it): counting its ids asked for 17 GB and the
    kernel killed the process (or, under a memory limit, a Rust abort). Refused in one line; a profile file
    that gives `plain` the tokenizer's vocab_size counts."""
    path = synth.write_parquet_full(clean[:20], tmp_path / "p")
    for args in (
        ("scan", str(path), "-p", "plain", "--draft-vocab", "16"),
        ("vocab", str(path), "-p", "plain", "--size", "16", "--out", str(tmp_path / "m.npz")),
    ):
        res = run_cli(*args)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert "profile plain has vocab_size 4294967295" in lines[0], lines[0]
    assert not (tmp_path / "m.npz").exists()
    with pytest.raises(tokscan.UsageError, match="vocab_size"):
        tokscan.scan(str(path), profile="plain", draft_vocab=[16])
    prof = tmp_path / "plain-kimi.toml"
    prof.write_text('base = "plain"\nname = "plain-kimi"\nvocab_size = 163840\n')
    r = tokscan.scan(str(path), profile=str(prof), draft_vocab=[16])
    assert r.data["draft_vocab"]["vocab_size"] == 163840


def test_vocab_takes_the_scans_prompts_template_and_html_options(tmp_path, clean):
    """`tokscan vocab` is the same scan with the mapping written: it refused --prompts, --chat-template and
    --html, so its pairing could not render records and it wrote no page."""
    path = synth.write_parquet_full(clean[:20], tmp_path / "p")
    prompts = tmp_path / "prompts.jsonl"
    msg = [{"role": "user", "content": "hi"}]
    prompts.write_text("".join(json.dumps({"messages": msg}) + "\n" for _ in range(20)))
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    out, page, report = tmp_path / "m.npz", tmp_path / "r.html", tmp_path / "r.json"
    res = run_cli(
        "vocab", str(path), "--size", "64", "--out", str(out), "--prompts", str(prompts),
        "--chat-template", str(template), "--html", str(page), "--json", str(report), "--fail-on", "never", "-q",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert out.is_file() and "draft" in page.read_text().lower()
    doc = json.loads(report.read_text())
    assert doc["pairing"][0]["path"] == str(prompts) and doc["draft_vocab"]["sizes"] == [64]


def one_line_usage_error(res, *needles: str) -> str:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_sizes_beyond_the_vocabulary_are_refused_naming_the_option(tmp_path, clean):
    """`--size` one past the vocabulary was "internal error: IndexError" (t2d has no such id); `--size 1000000000`
    built a mapping of a billion ids until memory ran out; `--draft-vocab 5000000000` was serde's "invalid value:
    integer ..., expected u32" naming no option. Each is refused before the scan, naming the option."""
    path = synth.write_parquet_full(clean[:20], tmp_path / "p")
    out = tmp_path / "m.npz"
    for args, needles in (
        (("vocab", "--size", str(VOCAB + 1)), ("--size", f"{VOCAB + 1:,}", "kimi-k2", f"{VOCAB:,} ids")),
        (("vocab", "--size", "1000000000"), ("--size", "1,000,000,000", "larger than any vocabulary")),
        (("vocab", "--size", "64", "--draft-vocab", "64,5000000000"), ("--draft-vocab", "5,000,000,000")),
        (("scan", "--draft-vocab", "5000000000"), ("--draft-vocab", "5,000,000,000")),
        (("scan", "--draft-vocab", str(VOCAB + 1)), ("--draft-vocab", f"{VOCAB:,} ids")),
    ):
        command, *rest = args
        extra = ["--out", str(out)] if command == "vocab" else []
        one_line_usage_error(run_cli(command, str(path), *rest, *extra, "-q"), *needles)
    assert not out.exists()
    cfg = tmp_path / "tokscan.toml"
    cfg.write_text(f"draft_vocab = [{VOCAB + 1}]\n")
    one_line_usage_error(run_cli("scan", str(path), "--config", str(cfg), "-q"), f"draft_vocab in {cfg}")
    with pytest.raises(tokscan.UsageError, match="vocab_mapping: draft-vocabulary size"):
        tokscan.scan(str(path), vocab_mapping=VOCAB + 1)
    with pytest.raises(tokscan.UsageError, match="draft_vocab: draft-vocabulary size"):
        tokscan.scan(str(path), draft_vocab=[2**40])
    # The whole vocabulary is a size like any other.
    res = run_cli("vocab", str(path), "--size", str(VOCAB), "--out", str(out), "--fail-on", "never", "-q")
    assert res.returncode == 0, res.stderr
    d2t, t2d = load_mapping(out)
    assert len(d2t) == VOCAB and all(t2d)


def test_a_mapping_that_does_not_fit_is_refused_naming_the_file(tmp_path, clean):
    """A `uint64` d2t was serde's "invalid value: integer 18446744073709551615, expected i64"; an `.npz` whose t2d
    inflates to 300M entries (292 KB on disk) took 36 s and 6.3 GB. The sizes in each member's `.npy` header are
    held to the profile's vocabulary before anything is inflated."""
    import time
    import zipfile

    path = synth.write_parquet_full(clean[:20], tmp_path / "p")
    wide = tmp_path / "wide.npz"
    np.savez(wide, d2t=np.array([2**64 - 1, 0], dtype=np.uint64), t2d=np.zeros(VOCAB, dtype=bool))
    one_line_usage_error(run_cli("scan", str(path), "--check-vocab", str(wide), "-q"), str(wide), "d2t", "int64")

    # A real (small) bomb: 20M entries inflated from ~20 KB.
    bomb = tmp_path / "bomb.npz"
    np.savez_compressed(bomb, d2t=np.arange(3, dtype=np.int64) * 0, t2d=np.zeros(20_000_000, dtype=bool))
    assert bomb.stat().st_size < 100_000
    line = one_line_usage_error(run_cli("scan", str(path), "--check-vocab", str(bomb), "-q"), str(bomb))
    assert f"t2d has 20,000,000 entries, more than the profile's vocabulary ({VOCAB:,} ids)" in line

    # A header that claims 300M entries with ten bytes behind it: refused by its header, never inflated (reading
    # the array would fail on its missing data with another message).
    claims = tmp_path / "claims.npz"
    header = {"descr": "|b1", "fortran_order": False, "shape": (300_000_000,)}
    with zipfile.ZipFile(claims, "w", zipfile.ZIP_DEFLATED) as z:
        for name, head in (("d2t", {"descr": "<i8", "fortran_order": False, "shape": (1,)}), ("t2d", header)):
            with z.open(f"{name}.npy", "w") as f:
                np.lib.format.write_array_header_1_0(f, head)
                f.write(b"\0" * (8 if name == "d2t" else 10))
    t0 = time.perf_counter()
    with pytest.raises(tokscan.UsageError, match="t2d has 300,000,000 entries"):
        load_mapping(claims, VOCAB)
    assert time.perf_counter() - t0 < 1.0
    with pytest.raises(tokscan.UsageError, match="more than the largest vocabulary tokscan counts"):
        load_mapping(claims)


def test_a_full_disk_names_the_mapping_and_leaves_no_partial_file(tmp_path, clean):
    """`vocab --out` on a full disk said only "No space left on device" and left a truncated file. It names the
    file, and the mapping is written beside it under a temporary name and renamed only when complete: a failed
    write leaves no file (or the earlier mapping untouched)."""
    import resource
    import signal
    import subprocess
    import sys

    path = synth.write_parquet_full(clean[:20], tmp_path / "p")
    full = tmp_path / "full.npz"
    full.symlink_to("/dev/full")
    base = ["vocab", str(path), "--size", "2000", "--fail-on", "never", "-q"]
    one_line_usage_error(run_cli(*base, "--out", str(full)), str(full), "No space left on device")

    def small_files() -> None:  # writes past 20 KB fail (EFBIG), as on a disk that fills up mid-file
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    out_dir = tmp_path / "out"
    out_dir.mkdir()
    earlier = out_dir / "kept.npz"
    earlier.write_bytes(b"the earlier mapping")
    for name in ("m.npz", "m.json", "kept.npz"):
        out = out_dir / name
        res = subprocess.run(
            [sys.executable, "-m", "tokscan", *base, "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=small_files,
        )
        one_line_usage_error(res, str(out), "cannot write the draft-vocabulary mapping")
    assert sorted(p.name for p in out_dir.iterdir()) == ["kept.npz"]  # no partial file, no temporary one
    assert earlier.read_bytes() == b"the earlier mapping"


def test_the_pt_format_without_torch_names_the_install_command(tmp_path, monkeypatch):
    import sys

    from tokscan.vocab import check_output

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    for call in (lambda: check_output(tmp_path / "m.pt"), lambda: load_mapping(tmp_path / "m.pt")):
        with pytest.raises(tokscan.UsageError, match=r"needs PyTorch \(.* -m pip install 'torch>=2\.1'\)"):
            call()
