"""Corpora where they live: each format written by the library that really writes it (Hugging Face `datasets`,
pyarrow's IPC writers), scanned, shown, cleaned and compared with the Parquet layout of the same samples."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet
import pytest

import tokscan

import synth
from conftest import run_cli


def ipc_layout(path: Path) -> tuple[bool, str | None]:
    """(stream format?, compression codec or None) of an Arrow IPC file, an oracle independent of the core: a
    compressed buffer holds an LZ4 / ZSTD frame, whose magic then appears in the file (a writer may store a
    buffer that does not shrink uncompressed, so any buffer counts)."""
    data = path.read_bytes()
    for magic, codec in ((b"\x04\x22\x4d\x18", "lz4"), (b"\x28\xb5\x2f\xfd", "zstd")):
        if magic in data:
            return data[:6] != b"ARROW1", codec
    return data[:6] != b"ARROW1", None


@pytest.fixture(scope="module")
def corpus() -> list[synth.Sample]:
    return synth.build_corpus(n_clean=160, seed=11, anomalies_per_code=1)


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory) -> tokscan.Report:
    """The Parquet layout (`input_ids` + `loss_mask`) of the same samples."""
    return tokscan.scan(synth.write_parquet_full(corpus, tmp_path_factory.mktemp("ref") / "pq"))


def flagged(report: tokscan.Report) -> dict[int, tuple[str, ...]]:
    return {f["row"]: tuple(f["codes"]) for f in report.flagged}


def hf_columns(samples: list[synth.Sample], nested: bool = False) -> dict[str, list]:
    wrap = (lambda v: [v]) if nested else (lambda v: v)
    return {
        "sample_id": [s.sample_id for s in samples],
        "category": [s.category for s in samples],
        "input_ids": [wrap(s.ids) for s in samples],
        "labels": [wrap(synth.labels(s)) for s in samples],
    }


# --- Hugging Face datasets ------------------------------------------------------------------------------


def test_save_to_disk_directory_finds_what_parquet_finds(corpus, reference, tmp_path):
    datasets = pytest.importorskip("datasets")
    d = tmp_path / "hf"
    datasets.Dataset.from_dict(hf_columns(corpus)).save_to_disk(str(d), max_shard_size="200KB")
    assert len(list(d.glob("data-*.arrow"))) > 1 and (d / "state.json").is_file()
    r = tokscan.scan(d)
    assert {i["format"] for i in r.data["inputs"]} == {"arrow"}
    assert all(i["layout"] == "input_ids+labels" for i in r.data["inputs"])
    assert r.n_samples == len(corpus)
    assert flagged(r) == flagged(reference)
    assert "loss_mask_misaligned" in {c for codes in flagged(r).values() for c in codes}


def test_datasets_map_cache_file_with_batch_of_one_rows(corpus, reference, tmp_path):
    """A trainer's map function returning `[[...]]` per row; the `cache-*.arrow` file it leaves is scanned
    (by content, whatever its name) and reads the inner list as the sequence."""
    datasets = pytest.importorskip("datasets")
    src = datasets.Dataset.from_dict(
        {"sample_id": [s.sample_id for s in corpus], "category": [s.category for s in corpus]}
    )
    cache = tmp_path / "cache-0123456789abcdef.arrow"

    # Keyed by index: the sample_id_duplicate rows share an id.
    def tokenize_at(row, idx):
        s = corpus[idx]
        assert row["sample_id"] == s.sample_id
        return {"input_ids": [s.ids], "labels": [synth.labels(s)]}

    ds = src.map(tokenize_at, with_indices=True, cache_file_name=str(cache), writer_batch_size=50)
    assert cache.is_file() and len(ds) == len(corpus)
    renamed = tmp_path / "cache-file-without-extension"
    renamed.write_bytes(cache.read_bytes())
    for path in (cache, renamed):
        r = tokscan.scan(path)
        assert r.data["inputs"][0]["format"] == "arrow"
        assert flagged(r) == flagged(reference)


def test_several_sequences_in_one_row_is_an_input_error(tmp_path):
    import pyarrow.ipc as ipc

    p = tmp_path / "two.arrow"
    t = pa.table({"input_ids": pa.array([[[1, 2], [3]]], type=pa.list_(pa.list_(pa.int64())))})
    with ipc.new_stream(p, t.schema) as w:
        w.write_table(t)
    with pytest.raises(tokscan.InputError, match="only a batch of one"):
        tokscan.scan(p)


# --- pyarrow IPC writers --------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
@pytest.mark.parametrize("codec", [None, "lz4", "zstd"])
def test_pyarrow_ipc_formats_and_codecs(corpus, reference, tmp_path, stream, codec):
    import pyarrow.ipc as ipc

    t = pa.table(
        {
            "sample_id": [s.sample_id for s in corpus],
            "category": [s.category for s in corpus],
            "input_ids": pa.array([s.ids for s in corpus], type=pa.list_(pa.uint32())),
            "loss_mask": pa.array([[bool(m) for m in s.mask()] for s in corpus], type=pa.list_(pa.bool_())),
        }
    )
    p = tmp_path / ("x.arrows" if stream else "x.feather")
    opts = ipc.IpcWriteOptions(compression=codec)
    with (ipc.new_stream if stream else ipc.new_file)(p, t.schema, options=opts) as w:
        for b in t.to_batches(max_chunksize=37):
            w.write_batch(b)
    assert ipc_layout(p) == (stream, codec)
    r = tokscan.scan(p, threads=2)
    assert flagged(r) == flagged(reference)
    assert r.n_tokens == reference.n_tokens


# --- show, clean, --exclude -----------------------------------------------------------------------------


def test_show_clean_and_rescan_round_trip(layouts, samples, tmp_path):
    for layout in ("arrow_file", "arrow_stream"):
        src = layouts[layout]
        sid = samples[17].sample_id
        proc = run_cli("show", str(src), "--sample-id", sid, "--json", "-")
        assert proc.returncode == 0, proc.stderr
        shown = json.loads(proc.stdout)
        assert shown["row"] == 17 and shown["lengths"]["total"] == len(samples[17].ids)
        assert [t for seg in shown["segments"] for t in seg["ids"]] == samples[17].ids
        report_path = tmp_path / f"{layout}.json"
        assert run_cli("scan", str(src), "--json", str(report_path), "-q").returncode == 1
        out = tmp_path / f"{layout}-clean"
        proc = run_cli("clean", str(src), "--report", str(report_path), "--out", str(out))
        assert proc.returncode == 0, proc.stderr
        for f in sorted(src.glob("*.arrow")):
            assert ipc_layout(out / f.name) == ipc_layout(f)
            with pa.memory_map(str(f)) as a, pa.memory_map(str(out / f.name)) as b:
                reader = pa.ipc.open_file if ipc_layout(f)[0] is False else pa.ipc.open_stream
                assert reader(a).schema == reader(b).schema
        again = tokscan.scan(out)
        assert again.exit_code("error") == 0
        report = tokscan.Report.load(report_path)
        dropped = {f["row"] for f in report.flagged if f["severity"] == "error"}
        kept = [s for row, s in enumerate(samples) if row not in dropped]
        assert again.n_samples == len(kept)
        assert again.n_tokens == sum(len(s.ids) for s in kept)


def test_show_reads_the_sample_from_an_arrow_stream(layouts, samples):
    row = 5
    proc = run_cli("show", str(layouts["arrow_stream"]), "--row", str(row), "--json", "-")
    assert proc.returncode in (0, 1), proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["sample_id"] == samples[row].sample_id
    core = tokscan._core.Corpus([str(layouts["arrow_stream"])], {})
    got = core.sample(row)
    assert list(got["ids"]) == samples[row].ids
    assert list(got["mask"]) == samples[row].mask()


def test_a_directory_of_arrow_and_unrelated_files(tmp_path, corpus):
    synth.write_arrow_file(corpus, tmp_path / "a")
    (tmp_path / "a" / "notes.txt").write_text("hi")
    assert tokscan.scan(tmp_path / "a").n_samples == len(corpus)


# --- Megatron-LM indexed datasets -----------------------------------------------------------------------


def megatron_write(samples: list[synth.Sample], prefix: Path, dtype, split: bool = False) -> Path:
    """Written with megatron-core's own `IndexedDatasetBuilder`; with `split`, each document is two sequences
    (prompt and completion, as `add_document` with two lengths)."""
    torch = pytest.importorskip("torch")
    indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    b = indexed.IndexedDatasetBuilder(str(prefix) + ".bin", dtype=dtype)
    for s in samples:
        if split:
            b.add_document(torch.tensor(s.ids), [len(s.prompt), len(s.completion)])
        else:
            b.add_item(torch.tensor(s.ids))
            b.end_document()
    b.finalize(str(prefix) + ".idx")
    return prefix


@pytest.fixture(scope="module")
def plain_reference(corpus, tmp_path_factory) -> tokscan.Report:
    """The same samples as Parquet with only `input_ids` (Megatron keeps no ids, categories or masks)."""
    p = tmp_path_factory.mktemp("plain") / "ids.parquet"
    pa.parquet.write_table(pa.table({"input_ids": [s.ids for s in corpus]}), p)
    return tokscan.scan(p)


@pytest.mark.parametrize(
    ("dtype", "split"), [(np.int32, False), (np.int64, True), (np.float32, False)], ids=["int32", "int64-split", "f32"]
)
def test_megatron_builder_output_finds_what_parquet_finds(corpus, plain_reference, tmp_path, dtype, split):
    prefix = megatron_write(corpus, tmp_path / "data_text_document", dtype, split)
    for given in (prefix, Path(str(prefix) + ".bin"), Path(str(prefix) + ".idx"), tmp_path):
        r = tokscan.scan(given)
        assert r.data["inputs"][0]["format"] == "megatron"
        assert r.data["inputs"][0]["path"] == str(prefix) + ".bin"
        assert r.n_samples == len(corpus) and r.n_tokens == plain_reference.n_tokens
        assert flagged(r) == flagged(plain_reference)


def test_megatron_every_dtype_code_reads_back(tmp_path):
    indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    docs = [[1, 2, 3], [], [4, 5, 100, 7]]
    for code, dtype in indexed.DType.__members__.items():
        prefix = tmp_path / code
        megatron_write([synth.Sample("x", "c", d, [], 0, 0) for d in docs], prefix, getattr(np, code))
        core = tokscan._core.Corpus([str(prefix)], {})
        assert [list(core.sample(i)["ids"]) for i in range(len(docs))] == docs, dtype


def test_megatron_clean_writes_a_valid_pair_megatron_reads(corpus, plain_reference, tmp_path):
    indexed = pytest.importorskip("megatron.core.datasets.indexed_dataset")
    src = tmp_path / "src"
    src.mkdir()
    prefix = megatron_write(corpus, src / "corpus", np.int32, split=True)
    report_path = tmp_path / "r.json"
    assert run_cli("scan", str(src), "--json", str(report_path), "-q").returncode == 1
    out = tmp_path / "clean"
    proc = run_cli("clean", str(src), "--report", str(report_path), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    dropped = {f["row"] for f in tokscan.Report.load(report_path).flagged if f["severity"] == "error"}
    kept = [s for i, s in enumerate(corpus) if i not in dropped]
    ds = indexed.IndexedDataset(str(out / "corpus"))
    assert len(ds) == 2 * len(kept)  # two sequences per document, as written
    assert list(ds.document_indices) == list(range(0, 2 * len(kept) + 1, 2))
    for k, s in enumerate(kept):
        assert np.concatenate([ds[2 * k], ds[2 * k + 1]]).tolist() == s.ids
    assert tokscan.scan(out).exit_code("error") == 0
    assert Path(str(prefix) + ".bin").stat().st_size > (out / "corpus.bin").stat().st_size


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        (lambda idx, bin_: idx.write_bytes(b"XXIDIDX\x00\x00" + idx.read_bytes()[9:]), "bad magic"),
        (lambda idx, bin_: idx.write_bytes(idx.read_bytes()[:-5]), "truncated"),
        (lambda idx, bin_: bin_.write_bytes(bin_.read_bytes()[:-4]), "the .bin holds"),
        (lambda idx, bin_: idx.write_bytes(idx.read_bytes()[:17] + b"\x09" + idx.read_bytes()[18:]), "dtype code"),
        (lambda idx, bin_: idx.write_bytes(idx.read_bytes()[:9] + b"\x02" + idx.read_bytes()[10:]), "version"),
    ],
    ids=["magic", "truncated-idx", "short-bin", "dtype", "version"],
)
def test_megatron_corrupt_pairs_are_input_errors(corpus, tmp_path, damage, needle):
    prefix = megatron_write(corpus[:20], tmp_path / "d", np.int32)
    idx, bin_ = Path(str(prefix) + ".idx"), Path(str(prefix) + ".bin")
    damage(idx, bin_)
    with pytest.raises(tokscan.InputError, match=needle):
        tokscan.scan(bin_)
    proc = run_cli("scan", str(bin_))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "d.idx" in lines[0] or "d.bin" in lines[0]


# --- JSONL ----------------------------------------------------------------------------------------------


def test_jsonl_generator_metadata_is_cross_checked(corpus, tmp_path):
    """SGLang and vLLM lines whose finish reason or token counts disagree with the ids are flagged."""
    recs = [synth.jsonl_record(s) for s in corpus[:30]]
    clean_row = next(i for i, s in enumerate(corpus[:30]) if not s.expected)
    cut_row = next(i for i, s in enumerate(corpus) if "truncated" in s.expected)
    recs[clean_row]["meta_info"]["finish_reason"] = {"type": "length"}  # ended properly, says length
    cut = synth.jsonl_record(corpus[cut_row])
    cut["meta_info"]["finish_reason"] = {"type": "stop"}  # cut, says stop
    recs.append(cut)
    recs[3]["meta_info"]["completion_tokens"] += 1
    vllm = synth.jsonl_record(corpus[cut_row], "vllm")
    vllm["outputs"][0]["finish_reason"] = "stop"
    recs.append(vllm)
    p = tmp_path / "gen.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = tokscan.scan(p)
    assert r.flagged_rows("finish_reason_mismatch") == [clean_row, 30, 31]
    assert r.flagged_rows("token_count_mismatch") == [3]
    assert r.anomalies["finish_reason_mismatch"]["severity"] == "error"


def test_malformed_lines_are_findings_with_line_numbers(corpus, tmp_path):
    lines = [json.dumps(synth.jsonl_record(s)) for s in corpus[:10]]
    lines[2] = "[1, 2, 3]"  # not an object
    lines[5] = lines[5].replace('"output_ids": [', '"output_ids": ["x", ', 1)  # a non-integer token
    lines[7] = lines[7][:40]  # cut mid-line
    p = tmp_path / "gen.jsonl"
    p.write_text("\n".join(lines[:4]) + "\n\n" + "\n".join(lines[4:]) + "\n")
    r = tokscan.scan(p)
    assert r.n_samples == 10
    bad = [f for f in r.flagged if "malformed_line" in f["codes"]]
    assert [f["row"] for f in bad] == [2, 5, 7]
    assert [f["positions"]["malformed_line"] for f in bad] == [3, 7, 9]  # 1-based, the blank line counted
    assert all(f["codes"] == ["malformed_line"] for f in bad)
    assert all(f["source"] == str(p) for f in bad)


def test_a_file_that_is_not_jsonl_is_an_input_error(tmp_path):
    p = tmp_path / "notes.jsonl"
    p.write_text("hello world\nthis is text\n")
    with pytest.raises(tokscan.InputError, match="not JSONL"):
        tokscan.scan(p)
    proc = run_cli("scan", str(p))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and str(p) in lines[0], proc.stderr
    z = tmp_path / "broken.jsonl.zst"
    z.write_bytes(b"\x28\xb5\x2f\xfd" + b"garbage" * 10)
    proc = run_cli("scan", str(z))
    assert proc.returncode == 2 and "zstd" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("layout", ["jsonl", "jsonl_vllm_zst"])
def test_jsonl_clean_filters_lines_byte_identically(layouts, samples, tmp_path, layout):
    src = layouts[layout]
    report_path = tmp_path / "r.json"
    assert run_cli("scan", str(src), "--json", str(report_path), "-q").returncode == 1
    out = tmp_path / "clean"
    proc = run_cli("clean", str(src), "--report", str(report_path), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    dropped = {f["row"] for f in tokscan.Report.load(report_path).flagged if f["severity"] == "error"}

    def lines_of(d):
        out = []
        for f in sorted(d.glob("*.jsonl*")):
            codec = "zstd" if f.name.endswith(".zst") else None
            data = pa.CompressedInputStream(str(f), codec).read() if codec else f.read_bytes()
            out += data.splitlines(keepends=True)
        return out

    before, after = lines_of(src), lines_of(out)
    assert after == [line for i, line in enumerate(before) if i not in dropped]
    assert tokscan.scan(out).exit_code("error") == 0


def test_megatron_with_the_plain_profile(corpus, tmp_path):
    """Pre-training documents: no chat rules; loops and duplicates are still found."""
    docs = [*corpus, corpus[3]]  # a whole document repeated
    prefix = megatron_write(docs, tmp_path / "pretrain", np.int32)
    r = tokscan.scan(prefix, profile="plain")
    codes = {c for f in r.flagged for c in f["codes"]}
    assert r.flagged_rows("duplicate") == [len(corpus)]
    assert codes <= {"repetition", "duplicate", "length_outlier"}
    loops = {i for i, s in enumerate(corpus) if "repetition" in s.expected}
    assert loops <= set(r.flagged_rows("repetition"))


# --- nanoGPT / llm.c token files ------------------------------------------------------------------------

LLMC_DELIMITER = {1: 50256, 2: 128000}


def llmc_write(docs: list[list[int]], path: Path, version: int, head: list[int] | None = None) -> Path:
    """A shard as llm.c's `dev/data/data_common.py` `write_datafile` writes it: a 256 x int32 header (magic
    20240520, version, token count), then the tokens, each document after its delimiter (llm.c's `tokenize`);
    `head` is the tail of a document cut at the previous shard's end."""
    toks = [*(head or []), *(t for d in docs for t in (LLMC_DELIMITER[version], *d))]
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, version, len(toks)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.write(header.tobytes())
        f.write(np.array(toks, dtype=np.uint16 if version == 1 else np.uint32).tobytes())
    return path


@pytest.fixture(scope="module")
def pretraining_docs() -> list[list[int]]:
    """GPT-2-sized text documents: clean ones, a loop, a repeated document, an id beyond GPT-2's vocabulary."""
    rng = np.random.default_rng(4)
    docs = [rng.integers(0, 50000, size=int(n)).tolist() for n in rng.integers(80, 400, size=60)]
    docs[10] = docs[10][:30] + [777, 778, 779, 780, 781, 782, 783, 784] * 20 + docs[10][30:]
    docs[20][7] = 60000
    docs.append(list(docs[5]))
    return docs


@pytest.mark.parametrize("version", [1, 2])
def test_llmc_shards_split_at_the_delimiter_and_find_what_parquet_finds(pretraining_docs, tmp_path, version):
    delim = LLMC_DELIMITER[version]
    docs = pretraining_docs
    d = tmp_path / "fineweb"
    half = len(docs) // 2
    llmc_write(docs[:half], d / "fineweb_train_000000.bin", version)
    # The second shard opens with the cut tail of a document: a sample of its own, with no delimiter.
    llmc_write(docs[half:], d / "fineweb_train_000001.bin", version, head=[5, 6, 7])
    (d / "pytorch_model.bin").write_bytes(b"\x80\x02 not tokens")
    rows = [[delim, *doc] for doc in docs[:half]] + [[5, 6, 7]] + [[delim, *doc] for doc in docs[half:]]
    ref = tmp_path / "ref.parquet"
    pa.parquet.write_table(pa.table({"input_ids": rows}), ref)
    profile = tmp_path / "gpt2.toml"
    profile.write_text(f'base = "plain"\nname = "pretrain"\nvocab_size = {50257 if version == 1 else 128256}\n')

    r = tokscan.scan(d, profile=profile)
    dtype = "uint16" if version == 1 else "uint32"
    assert [(i["format"], i["layout"]) for i in r.data["inputs"]] == [
        ("llmc", f"v{version} {dtype}, samples start at {delim}")
    ] * 2
    assert r.n_samples == len(rows) and r.n_tokens == sum(map(len, rows))
    assert flagged(r) == flagged(tokscan.scan(ref, profile=profile))
    assert r.flagged_rows("duplicate") == [len(rows) - 1]
    assert 10 in r.flagged_rows("repetition")
    assert r.flagged_rows("out_of_vocab") == ([20] if version == 1 else [])
    core = tokscan._core.Corpus([str(d)], {})
    assert list(core.sample(half)["ids"]) == [5, 6, 7]
    assert list(core.sample(half + 1)["ids"]) == rows[half + 1]


@pytest.mark.parametrize("version", [1, 2])
def test_llmc_clean_writes_shards_llmc_reads_without_the_dropped_documents(pretraining_docs, tmp_path, version):
    d = tmp_path / "web"
    half = len(pretraining_docs) // 2
    llmc_write(pretraining_docs[:half], d / "web_000000.bin", version)
    llmc_write(pretraining_docs[half:], d / "web_000001.bin", version, head=[5, 6, 7])
    vocab = 50257 if version == 1 else 128256
    (tmp_path / "tokscan.toml").write_text(f'profile = "{tmp_path / "p.toml"}"\nfail_on = "warning"\n')
    (tmp_path / "p.toml").write_text(f'base = "plain"\nname = "pretrain"\nvocab_size = {vocab}\n')
    report_path = tmp_path / "report.json"
    assert run_cli("scan", str(d), "--json", str(report_path), "-q", cwd=tmp_path).returncode == 1
    report = tokscan.Report.load(report_path)
    dropped = {f["row"] for f in report.flagged if f["severity"] in ("warning", "error")}
    assert {report.flagged_rows("duplicate")[0], 10} <= dropped

    out = tmp_path / "clean"
    proc = run_cli("clean", str(d), "--report", str(report_path), "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.glob("*.bin")) == ["web_000000.bin", "web_000001.bin"]
    before, after = tokscan._core.Corpus([str(d)], {}), tokscan._core.Corpus([str(out)], {})
    kept = [before.sample(i)["ids"].tolist() for i in range(len(before)) if i not in dropped]
    assert [after.sample(i)["ids"].tolist() for i in range(len(after))] == kept
    # Each shard keeps llm.c's header (magic, version) with the new token count; the core checks it at open.
    for p in out.glob("*.bin"):
        magic, ver, count = np.fromfile(p, dtype="<i4", count=3)
        assert (magic, ver) == (20240520, version) and count == (p.stat().st_size - 1024) // (2 * version)
    again = tokscan.scan(out, profile=tmp_path / "p.toml")
    assert again.failures("warning") == {} and again.n_samples == len(kept)


def test_llmc_category_folders_and_explicit_files(pretraining_docs, tmp_path):
    a = llmc_write(pretraining_docs[:30], tmp_path / "category=web" / "a.bin", 1)
    b = llmc_write(pretraining_docs[30:], tmp_path / "category=code" / "b.bin", 2)
    r = tokscan.scan(tmp_path, profile="plain")
    assert r.categories.keys() == {"web", "code"}
    assert r.categories["web"]["samples"] == 30
    assert tokscan.scan(b, profile="plain").n_samples == len(pretraining_docs) - 30
    proc = run_cli("scan", str(a), "--profile", "plain", "-q")
    assert proc.returncode == 0, proc.stderr


# --- convert --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["arrow_stream", "arrow_file", "jsonl", "jsonl_vllm_zst"])
@pytest.mark.parametrize("to", ["parquet", "numpy"])
def test_convert_keeps_what_the_scan_sees(layouts, tmp_path, layout, to):
    src = layouts[layout]
    before = tokscan.scan(src)
    out = tmp_path / f"{layout}-{to}"
    proc = run_cli("convert", str(src), "--to", to, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    after = tokscan.scan(out)
    assert after.data["inputs"][0]["format"] == to
    assert (after.n_samples, after.n_tokens) == (before.n_samples, before.n_tokens)
    assert flagged(after) == flagged(before)
    assert [f["sample_id"] for f in after.flagged] == [f["sample_id"] for f in before.flagged]
    assert after.categories.keys() == before.categories.keys()


def test_convert_of_masked_and_split_shards_keeps_the_split_as_the_mask(tmp_path):
    """A corpus of masked `input_ids` shards and `prompt_ids` + `output_ids` shards: the split samples got a
    mask of ones in the Parquet copy (their prompts trained: `loss_mask_misaligned`, exit 1, where the source
    passed); in a masked NumPy copy they had zeros. Both now carry the completion as the mask."""
    data = tmp_path / "data"
    data.mkdir()
    prompt, done = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198], [9707, 0, 151645]
    pyarrow.parquet.write_table(
        pa.table({"sample_id": ["m0"], "input_ids": [prompt + done], "loss_mask": [[0] * 9 + [1] * 3]}),
        data / "masked.parquet",
    )
    pyarrow.parquet.write_table(
        pa.table({"sample_id": ["s0", "s1"], "prompt_ids": [prompt, prompt], "output_ids": [done, [9707, 3, 151645]]}),
        data / "split.parquet",
    )
    assert run_cli("scan", str(data), "-p", "qwen3", "-q").returncode == 0
    for to, src in (("parquet", data), ("numpy", data)):
        out = tmp_path / f"{to}-{src.name}"
        assert run_cli("convert", str(src), "--to", to, "--out", str(out), "-q").returncode == 0
        proc = run_cli("scan", str(out), "-p", "qwen3", "-q")
        assert proc.returncode == 0, (to, src, proc.stdout, proc.stderr)
        masks = {
            s["sample_id"]: s["mask"] for s in tokscan._core.Corpus([str(out)]).samples(0, 3 if src == data else 2)
        }
        assert list(masks["s0"]) == [0] * 9 + [1] * 3


def test_a_numpy_copy_of_split_and_plain_shards_scans_as_the_source(tmp_path):
    """A NumPy copy whose first sample is split but others have no mask and no split: no mask file is written
    (one of zeros for the others flagged them loss_mask_misaligned)."""
    data = tmp_path / "d"
    data.mkdir()
    (data / "a.jsonl").write_text(
        "".join(json.dumps({"prompt_ids": [1, 2], "output_ids": [3, 4]}) + "\n" for _ in range(3))
    )
    (data / "b.jsonl").write_text("".join(json.dumps({"input_ids": [5 + i, 6, 7]}) + "\n" for i in range(3)))
    before = tokscan.scan(str(data), profile="plain")
    out = tmp_path / "np"
    assert run_cli("convert", str(data), "--to", "numpy", "--out", str(out), "-q").returncode == 0
    assert not (out / "loss_mask.npy").exists()
    assert flagged(tokscan.scan(str(out), profile="plain")) == flagged(before)


def test_convert_megatron_and_refusals(corpus, tmp_path):
    prefix = megatron_write(corpus[:50], tmp_path / "m", np.int32)
    out = tmp_path / "np"
    assert run_cli("convert", str(prefix), "--to", "numpy", "--out", str(out)).returncode == 0
    assert np.load(out / "tokens.npy").tolist() == [t for s in corpus[:50] for t in s.ids]
    proc = run_cli("convert", str(prefix), "--to", "numpy", "--out", str(out))
    assert proc.returncode == 2 and "not an empty directory" in proc.stderr
    proc = run_cli("convert", str(prefix), "--to", "csv", "--out", str(tmp_path / "csv"))
    assert proc.returncode == 2 and "parquet or numpy" in proc.stderr


def test_scan_takes_a_datasets_dataset_through_its_arrow_files(corpus, tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {"input_ids": [s.ids for s in corpus], "sample_id": [s.sample_id for s in corpus]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "saved"))
    ds = datasets.load_from_disk(str(tmp_path / "saved"))

    def flagged(r):  # the same findings; `source` names the file they were read from
        return [{k: v for k, v in f.items() if k != "source"} for f in r.data["flagged"]]

    want = tokscan.scan(tmp_path / "saved")
    assert tokscan.scan(ds).findings == want.findings
    assert flagged(want)
    mapped = ds.map(lambda b: b, batched=True, cache_file_name=str(tmp_path / "cache-x.arrow"))
    assert flagged(tokscan.scan(mapped)) == flagged(want)
    both = datasets.DatasetDict({"train": ds, "test": mapped})  # two splits, two files
    assert tokscan.scan(both).n_samples == 2 * len(corpus)
    with pytest.raises(tokscan.UsageError, match="indices mapping"):
        tokscan.scan(ds.shuffle(seed=0))
    with pytest.raises(tokscan.UsageError, match="lives in memory"):
        tokscan.scan(datasets.Dataset.from_dict(rows))


@pytest.mark.parametrize("offsets", [[0, 10, 50], [5, 10, 100], [5, 60]])
def test_numpy_tokens_outside_every_sample_are_counted_in_a_warning(tmp_path, offsets):
    """Offsets that start past 0 or stop short of `tokens.npy` leave tokens in no sample: the report says how
    many (the scan reads the samples the offsets describe, as before)."""
    d = tmp_path / "npd"
    d.mkdir()
    np.save(d / "tokens.npy", np.arange(1, 101, dtype=np.int32))
    np.save(d / "offsets.npy", np.array(offsets, dtype=np.int64))
    r = tokscan.scan(d, profile="plain")
    outside = offsets[0] + 100 - offsets[-1]
    assert r.n_tokens == offsets[-1] - offsets[0]
    assert r.data["inputs"][0]["warning"].startswith(f"{outside} of the 100 tokens of tokens.npy are in no sample")
    proc = run_cli("scan", str(d), "-p", "plain")
    assert proc.returncode == 0 and f"{outside} of the 100 tokens" in proc.stderr
    np.save(d / "offsets.npy", np.array([0, 40, 100], dtype=np.int64))
    assert tokscan.scan(d, profile="plain").data["inputs"][0].get("warning") is None


def test_convert_refuses_a_line_that_is_not_a_sample(tmp_path):
    """A malformed JSONL line is no sample: converted, it would become an empty one and its finding would be
    gone. convert names the line and writes nothing; clean drops such lines, and its copy converts."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "f.jsonl").write_text('{"input_ids": [4, 5]}\n{"input_ids": [1, 2.0, 3]}\n{"input_ids": [6]}\n')
    proc = run_cli("convert", str(src), "--to", "parquet", "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "f.jsonl" in proc.stderr and "line 2 is not a sample (malformed_line)" in proc.stderr
    assert not (tmp_path / "out").exists()
    report = tmp_path / "r.json"
    assert run_cli("scan", str(src), "-p", "plain", "--json", str(report), "-q").returncode == 1
    cleaned = tmp_path / "clean"
    proc = run_cli("clean", str(src), "--report", str(report), "--out", str(cleaned), "--code", "malformed_line")
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("convert", str(cleaned), "--to", "parquet", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert tokscan._core.Corpus([str(tmp_path / "out")]).sample(1)["ids"].tolist() == [6]


def test_a_megatron_prefix_with_a_damaged_index_names_the_index(tmp_path):
    """`scan PREFIX` where `PREFIX.idx` exists but is not an index: the index's own error, not "no such file"."""
    (tmp_path / "mg.idx").write_bytes(b"X" * 64)
    (tmp_path / "mg.bin").write_bytes(b"\0" * 8)
    proc = run_cli("scan", str(tmp_path / "mg"), "-q")
    assert proc.returncode == 2 and "mg.idx: not a Megatron .idx (bad magic" in proc.stderr, proc.stderr
    proc = run_cli("scan", str(tmp_path / "other"), "-q")
    assert proc.returncode == 2 and "other: no such file or directory" in proc.stderr


def test_files_a_format_folder_does_not_read_are_listed_as_skipped(tmp_path):
    """A `datasets` folder is read through its state.json and a NumPy folder through its arrays: any other file
    in them is listed as skipped with the reason, never passed over in silence."""
    datasets = pytest.importorskip("datasets")
    hf = tmp_path / "hf"
    datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]] * 10}).save_to_disk(str(hf))
    stray = hf / "data-00001-of-00002.arrow"
    stray.write_bytes((hf / "data-00000-of-00001.arrow").read_bytes())
    r = tokscan.scan(hf, profile="plain")
    assert r.n_samples == 10
    assert [(s["path"], "state.json" in s["reason"]) for s in r.data["skipped"]] == [(str(stray), True)]
    npd = tmp_path / "npd"
    npd.mkdir()
    np.save(npd / "tokens.npy", np.arange(1, 11, dtype=np.int32))
    np.save(npd / "offsets.npy", np.array([0, 4, 10]))
    (npd / "notes.txt").write_text("hello")
    (npd / ".hidden").write_text("x")
    # A category folder that is itself a NumPy corpus pairs with its prompts file, as any other folder does.
    record = {"messages": [{"role": "user", "content": "hi"}]}
    (npd / "prompts.jsonl").write_text(json.dumps(record) + "\n" + json.dumps(record) + "\n")
    r = tokscan.scan(npd, profile="plain")
    skipped = {s["path"]: s["reason"] for s in r.data["skipped"]}
    assert r.n_samples == 2 and sorted(skipped) == [str(npd / ".hidden"), str(npd / "notes.txt")]
    assert "hidden" in skipped[str(npd / ".hidden")]
    assert [p["path"] for p in r.data["pairing"]] == [str(npd / "prompts.jsonl")]


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_both_token_layouts_in_one_file_say_which_was_read(tmp_path, suffix):
    """A file with `input_ids` and `prompt_ids` + `output_ids` is read through `input_ids`, and the report says so
    (naming the options that read the others); naming the columns reads those, without the warning."""
    from pyarrow import feather

    table = pa.table({"input_ids": [[1, 2, 3, 4]], "prompt_ids": [[1, 2]], "output_ids": [[3, 4, 5]]})
    f = tmp_path / f"both{suffix}"
    (pyarrow.parquet.write_table if suffix == ".parquet" else feather.write_feather)(table, f)
    r = tokscan.scan(f, profile="plain")
    assert r.n_tokens == 4
    warning = r.data["inputs"][0]["warning"]
    assert 'reading "input_ids"' in warning and "--prompt-column / --output-column" in warning
    r = tokscan.scan(f, profile="plain", columns={"prompt_ids": "prompt_ids", "output_ids": "output_ids"})
    assert r.n_tokens == 5 and r.data["inputs"][0].get("warning") is None
