"""Broken and hostile inputs: each is an input error (exit 2, one line naming the file, a named exception)
or, when the file is sound but a sample is not, a per-sample anomaly. Never a panic, a hang or a traceback.
Inputs are never modified."""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tokscan

import synth
from conftest import run_cli


def assert_input_error(path: Path, exc: type[Exception], *needles: str, cli_path: Path | None = None) -> None:
    with pytest.raises(exc) as info:
        tokscan.scan(cli_path or path)
    for n in needles:
        assert n in str(info.value), str(info.value)
    proc = run_cli("scan", str(cli_path or path))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(path) in lines[0], lines[0]


@pytest.fixture
def good(tmp_path) -> list[synth.Sample]:
    return synth.build_corpus(n_clean=30, seed=5, anomalies_per_code=0)


def write_good_parquet(samples, path: Path) -> Path:
    pq.write_table(pa.table({"input_ids": [s.ids for s in samples]}), path, compression="zstd")
    return path


# --- Parquet -----------------------------------------------------------------------------------------


def test_parquet_truncated_mid_file(tmp_path, good):
    p = write_good_parquet(good, tmp_path / "t.parquet")
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    assert_input_error(p, tokscan.InputError, "Parquet")


def test_parquet_bad_footer_magic(tmp_path, good):
    p = write_good_parquet(good, tmp_path / "m.parquet")
    data = bytearray(p.read_bytes())
    data[-4:] = b"XXXX"
    p.write_bytes(bytes(data))
    assert_input_error(p, tokscan.InputError, "Parquet")


def test_parquet_empty_file_and_not_parquet(tmp_path):
    e = tmp_path / "empty.parquet"
    e.write_bytes(b"")
    assert_input_error(e, tokscan.InputError, "empty file")
    n = tmp_path / "n.parquet"
    n.write_bytes(b"PAR1" + os.urandom(200))
    assert_input_error(n, tokscan.InputError, "Parquet")


def test_null_elements_inside_a_list_are_an_input_error(tmp_path):
    p = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"input_ids": pa.array([[1, None, 3]], type=pa.list_(pa.int32()))}), p)
    assert_input_error(p, tokscan.InputError, "null elements")


def test_null_token_list_is_a_per_sample_anomaly(tmp_path, good):
    p = tmp_path / "nullrow.parquet"
    rows = [s.ids for s in good]
    rows[4] = None
    pq.write_table(pa.table({"input_ids": pa.array(rows, type=pa.list_(pa.int32()))}), p)
    r = tokscan.scan(p)
    assert r.n_samples == len(good)
    assert r.flagged_rows("empty_completion") == [4]


def test_zero_row_file_contributes_nothing_and_no_samples_at_all_is_an_error(tmp_path, good):
    z = tmp_path / "zero.parquet"
    pq.write_table(pa.table({"input_ids": pa.array([], type=pa.list_(pa.int32()))}), z)
    write_good_parquet(good, tmp_path / "good.parquet")
    assert tokscan.scan(tmp_path).n_samples == len(good)
    with pytest.raises(tokscan.UsageError, match="no samples"):
        tokscan.scan(z)
    proc = run_cli("scan", str(z))
    assert proc.returncode == 2 and "no samples" in proc.stderr


# --- NumPy -------------------------------------------------------------------------------------------


@pytest.fixture
def npdir(tmp_path, good) -> Path:
    return synth.write_numpy(good, tmp_path / "np", with_mask=True)


def test_numpy_bad_magic(npdir):
    t = npdir / "tokens.npy"
    t.write_bytes(b"\x93NUMPX" + t.read_bytes()[6:])
    assert_input_error(t, tokscan.InputError, "bad magic", cli_path=npdir)


def test_numpy_truncated_header_and_data(npdir):
    t = npdir / "tokens.npy"
    data = t.read_bytes()
    t.write_bytes(data[:40])
    assert_input_error(t, tokscan.InputError, "truncated", cli_path=npdir)
    t.write_bytes(data[:-8])
    assert_input_error(t, tokscan.InputError, "truncated", cli_path=npdir)


def test_numpy_fortran_2d_float(npdir):
    t = npdir / "tokens.npy"
    np.save(t, np.asfortranarray(np.zeros((3, 4), dtype=np.int32)))
    assert_input_error(t, tokscan.InputError, "fortran", cli_path=npdir)
    np.save(t, np.zeros((3, 4), dtype=np.int32))
    assert_input_error(t, tokscan.InputError, "1-D", cli_path=npdir)
    np.save(t, np.zeros(10, dtype=np.float32))
    assert_input_error(t, tokscan.InputError, "token ids must be", cli_path=npdir)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda o: o[::-1].copy(), "decrease"),
        (lambda o: o - 5, "negative"),
        (lambda o: np.concatenate([o[:-1], [o[-1] + 10]]), "exceeds"),
    ],
    ids=["decreasing", "negative", "past-the-end"],
)
def test_numpy_bad_offsets(npdir, change, needle):
    o = npdir / "offsets.npy"
    np.save(o, change(np.load(o)))
    assert_input_error(o, tokscan.InputError, needle, cli_path=npdir)


def test_numpy_meta_count_and_mask_length(npdir, good):
    meta = npdir / "meta.parquet"
    pq.write_table(pa.table({"sample_id": [s.sample_id for s in good[:-1]]}), meta)
    assert_input_error(meta, tokscan.InputError, "rows", cli_path=npdir)
    meta.unlink()
    m = npdir / "loss_mask.npy"
    np.save(m, np.load(m)[:-1])
    assert_input_error(m, tokscan.InputError, "entries", cli_path=npdir)


def test_parquet_mask_of_wrong_length_is_a_per_sample_anomaly(tmp_path, good):
    p = tmp_path / "m.parquet"
    masks = [s.mask() for s in good]
    masks[2] = masks[2][:-1]
    pq.write_table(pa.table({"input_ids": [s.ids for s in good], "loss_mask": masks}), p)
    r = tokscan.scan(p)
    assert r.flagged_rows("loss_mask_misaligned") == [2]


def test_single_ten_million_token_sample(tmp_path, good):
    d = tmp_path / "big"
    d.mkdir()
    s = good[0]
    body = np.random.default_rng(0).integers(1000, 160000, size=10_000_000, dtype=np.int32)
    tokens = np.concatenate([np.array(s.prompt, np.int32), body, np.array([synth.UNTHINK, 5, synth.IM_END], np.int32)])
    np.save(d / "tokens.npy", tokens)
    np.save(d / "offsets.npy", np.array([0, len(tokens)], dtype=np.int64))
    r = tokscan.scan(d)
    assert r.n_tokens == len(tokens)
    assert r.data["overall"]["lengths"]["thinking"]["max"] == 10_000_000
    assert r.flagged == []


# --- Paths -------------------------------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() == 0, reason="running as root: file permissions are not enforced")
def test_unreadable_file(tmp_path, good):
    p = write_good_parquet(good, tmp_path / "secret.parquet")
    p.chmod(0)
    assert_input_error(p, tokscan.InputError, "ermission")


def test_directory_with_unrelated_files(tmp_path, good):
    (tmp_path / "README.txt").write_text("hello")
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(tokscan.InputError, match="no corpus found"):
        tokscan.scan(tmp_path)
    write_good_parquet(good, tmp_path / "x.parquet")
    assert tokscan.scan(tmp_path).n_samples == len(good)


def test_symlink_loop(tmp_path, good):
    write_good_parquet(good, tmp_path / "x.parquet")
    (tmp_path / "loop").symlink_to(tmp_path, target_is_directory=True)
    assert tokscan.scan(tmp_path).n_samples == len(good)


def test_missing_path(tmp_path):
    assert_input_error(tmp_path / "nope", tokscan.InputNotFoundError, "no such file")


# --- Panics, read-only ---------------------------------------------------------------------------------


def test_a_panic_in_a_worker_becomes_an_exception(tmp_path, good):
    p = write_good_parquet(good, tmp_path / "x.parquet")
    code = (
        "import tokscan, sys\n"
        "try:\n    tokscan.scan(sys.argv[1])\n"
        "except tokscan.InternalError as e:\n    print('caught', e)\n"
    )
    env = {**os.environ, "TOKSCAN_TEST_PANIC": "1"}
    proc = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "caught internal error" in proc.stdout and "deliberate panic" in proc.stdout
    cli = subprocess.run([sys.executable, "-m", "tokscan", "scan", str(p)], capture_output=True, text=True, env=env)
    assert cli.returncode == 2 and "Traceback" not in cli.stderr
    assert "internal error" in cli.stderr.strip().splitlines()[-1]


def fingerprint(root: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_inputs_are_never_modified(layouts):
    root = next(iter(layouts.values())).parent
    before = fingerprint(root)
    for path in layouts.values():
        tokscan.scan(path, threads=2)
    assert fingerprint(root) == before


def test_numpy_header_version_2(tmp_path, good):
    d = synth.write_numpy(good, tmp_path / "v2")
    t = d / "tokens.npy"
    arr = np.load(t)
    header = b"{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }" % len(arr)
    pad = 64 - (12 + len(header) + 1) % 64
    header = header + b" " * pad + b"\n"
    t.write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", len(header)) + header + arr.tobytes())
    assert tokscan.scan(d).n_samples == len(good)


def test_the_error_reported_is_the_first_bad_input_in_path_order(tmp_path, good):
    for name in ("b.parquet", "c.parquet", "d.parquet"):
        (tmp_path / name).write_text("not parquet")
    write_good_parquet(good, tmp_path / "a.parquet")
    for threads in (1, 2, 8, 8, 8):
        with pytest.raises(tokscan.InputError, match=r"b\.parquet"):
            tokscan.scan(tmp_path, threads=threads)


# --- Arrow IPC ---------------------------------------------------------------------------------------


@pytest.fixture(params=["file", "stream"])
def ipc_path(request, tmp_path, good) -> Path:
    import pyarrow.ipc as ipc

    t = pa.table({"input_ids": pa.array([s.ids for s in good], type=pa.list_(pa.int32()))})
    p = tmp_path / "x.arrow"
    with (ipc.new_file if request.param == "file" else ipc.new_stream)(p, t.schema) as w:
        for b in t.to_batches(max_chunksize=7):
            w.write_batch(b)
    return p


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.999])
def test_arrow_truncated(ipc_path, keep):
    data = ipc_path.read_bytes()
    ipc_path.write_bytes(data[: int(len(data) * keep)])
    assert_input_error(ipc_path, tokscan.InputError, "Arrow IPC")


def test_arrow_bad_magic_and_empty(ipc_path):
    data = bytearray(ipc_path.read_bytes())
    data[:6] = b"ARROWX" if data[:6] == b"ARROW1" else b"\x00\x00\x00\x00\x10\x00"
    ipc_path.write_bytes(bytes(data))
    assert_input_error(ipc_path, tokscan.InputError, "Arrow IPC")
    ipc_path.write_bytes(b"")
    assert_input_error(ipc_path, tokscan.InputError, "empty file")


def test_arrow_corrupt_bytes_never_panic(ipc_path):
    data = ipc_path.read_bytes()
    rng = np.random.default_rng(3)
    for _ in range(30):
        d = bytearray(data)
        for at in rng.integers(0, len(d), size=4):
            d[at] ^= 0xA5
        ipc_path.write_bytes(bytes(d))
        try:
            tokscan.scan(ipc_path)
        except (tokscan.InputError, tokscan.ColumnError, tokscan.UsageError):
            pass


# --- nanoGPT / llm.c token files -----------------------------------------------------------------------


def write_llmc(path: Path, tokens: list[int], version: int = 1) -> Path:
    """A token file as llm.c's `write_datafile` writes it: 256 int32 (magic, version, count), then the tokens."""
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, version, len(tokens)]
    path.write_bytes(header.tobytes() + np.asarray(tokens, dtype="<u2" if version == 1 else "<u4").tobytes())
    return path


@pytest.fixture
def llmc_path(tmp_path) -> Path:
    docs = [[50256, *range(100 + k, 120 + k)] for k in range(10)]
    return write_llmc(tmp_path / "shard_000000.bin", [t for d in docs for t in d])


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        (lambda b: b"\x00\x00\x00\x00" + b[4:], "bad magic"),
        (lambda b: b[:4] + struct.pack("<i", 3) + b[8:], "unsupported version 3"),
        (lambda b: b[:500], "truncated header"),
        (lambda b: b[:-6], "truncated"),
        (lambda b: b + b"\x00\x00", "size mismatch"),
        (lambda b: b[:8] + struct.pack("<i", -5) + b[12:], "negative"),
        (lambda b: b"", "bad magic"),
    ],
    ids=["magic", "version", "short-header", "short-data", "extra-bytes", "negative-count", "empty"],
)
def test_llmc_bad_header_or_size(llmc_path, damage, needle):
    llmc_path.write_bytes(damage(llmc_path.read_bytes()))
    assert_input_error(llmc_path, tokscan.InputError, needle)


def test_llmc_other_bin_files_in_a_directory_are_not_inputs(tmp_path, llmc_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x02" + os.urandom(100))
    r = tokscan.scan(tmp_path, profile="plain")
    assert [(Path(i["path"]).name, i["format"]) for i in r.data["inputs"]] == [("shard_000000.bin", "llmc")]
    assert r.n_samples == 10
    llmc_path.unlink()
    with pytest.raises(tokscan.InputError, match="no corpus found"):
        tokscan.scan(tmp_path, profile="plain")


# --- issue 22: wrong categories and layouts, inputs wrongly refused ------------------------------------------


def test_a_jsonl_file_mixing_layouts_is_refused_naming_both_lines(tmp_path, good):
    lines = [json.dumps({"input_ids": s.ids}) for s in good[:3]]
    lines.insert(2, json.dumps({"prompt_ids": good[3].prompt, "output_ids": good[3].completion}))
    p = tmp_path / "mixed.jsonl"
    p.write_text("\n".join(lines) + "\n")
    assert_input_error(p, tokscan.InputError, "mixed layouts", "line 1 holds input_ids", "line 3 holds prompt_ids")


def test_an_arrow_stream_that_replaces_its_category_dictionary(tmp_path):
    """Each record batch is read with the dictionaries in force where it stands, not the last one."""
    schema = pa.schema([("input_ids", pa.list_(pa.int64())), ("category", pa.dictionary(pa.int32(), pa.string()))])
    p = tmp_path / "d.arrow"
    with pa.ipc.new_stream(p, schema) as w:
        for cat in ("math", "code", "chat"):
            cats = pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int32()), pa.array([cat]))
            w.write_batch(pa.record_batch([pa.array([[1, 2], [3]]), cats], schema=schema))
    want = [c for c in ("math", "code", "chat") for _ in range(2)]
    assert pa.ipc.open_stream(p).read_all().column("category").to_pylist() == want  # pyarrow's reading
    r = tokscan.scan(p, profile="plain")
    assert {c: v["samples"] for c, v in r.categories.items()} == {"math": 2, "code": 2, "chat": 2}
    corpus = tokscan._core.Corpus([str(p)])
    assert [corpus.sample(i)["category"] for i in range(6)] == want
    assert [s["category"] for s in corpus.samples(1, 5)] == want[1:5]


@pytest.mark.parametrize("codec", ["brotli", "gzip", "lz4", "snappy", "zstd", "none"])
def test_parquet_in_every_codec_is_read(tmp_path, good, codec):
    p = tmp_path / f"{codec}.parquet"
    pq.write_table(pa.table({"input_ids": [s.ids for s in good]}), p, compression=codec)
    assert tokscan.scan(p).n_samples == len(good)


def test_a_megatron_prefix_with_a_dot(tmp_path):
    prefix = tmp_path / "c4.en_text_document"
    docs = [[1, 2, 3], [4, 5]]
    Path(str(prefix) + ".bin").write_bytes(np.array([t for d in docs for t in d], dtype=np.int32).tobytes())
    synth.write_megatron_index(Path(str(prefix) + ".idx"), np.int32, np.array([3, 2]), np.arange(3))
    r = tokscan.scan(str(prefix), profile="plain")
    assert r.n_samples == 2 and r.data["inputs"][0]["format"] == "megatron"


# --- issue 22 item 13: every error is a one-line error ---------------------------------------------------------


def one_line_usage_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "internal error" not in lines[0], lines[0]
    for n in needles:
        assert n in lines[0], lines[0]


def test_show_rows_out_of_range_are_usage_errors(tmp_path, good):
    p = write_good_parquet(good, tmp_path / "a.parquet")
    for row in ("-1", str(2**70), str(len(good))):
        one_line_usage_error(run_cli("show", str(p), "--row", row), "out of range")


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("tokscan.toml", b"threads = -1\n", "threads"),
        ("tokscan.toml", b"\xff\xfe\x00binary\x81", "tokscan.toml"),
        ("pyproject.toml", b"[tool]\ntokscan = 5\n", "tokscan must be a table"),
        ("pyproject.toml", b"[tool.tokscan]\nthreads = = 2\n", "invalid TOML"),
        ("tokscan.toml", b"[drift]\nks = nan\n", "drift.ks must be a number >= 0 (inf: never)"),
        ("tokscan.toml", b"[drift]\nmedian = -1\n", "drift.median must be a number >= 0 (inf: never)"),
        ("tokscan.toml", b"draft_vocab = [1.5]\n", "draft-vocabulary sizes must be positive integers, got 1.5"),
        ("tokscan.toml", b"draft_vocab = [inf]\n", "draft-vocabulary sizes must be positive integers, got inf"),
    ],
)
def test_broken_configs_are_one_line_usage_errors(tmp_path, good, name, content, needle):
    write_good_parquet(good, tmp_path / "a.parquet")
    (tmp_path / name).write_bytes(content)
    one_line_usage_error(run_cli("scan", "a.parquet", "-q", cwd=tmp_path), needle)


def test_a_clean_report_naming_rows_that_do_not_exist_is_refused(tmp_path, good):
    p = write_good_parquet(good, tmp_path / "a.parquet")
    r = tmp_path / "r.json"
    assert run_cli("scan", str(p), "--json", str(r), "-q", "--fail-on", "never").returncode == 0
    data = json.loads(r.read_text())
    for row in (10**9, -1):
        data["flagged"] = [
            {
                "row": row,
                "sample_id": None,
                "source": str(p),
                "category": "default",
                "codes": ["truncated"],
                "severity": "error",
            }
        ]
        r.write_text(json.dumps(data))
        proc = run_cli("clean", str(p), "--report", str(r), "--out", str(tmp_path / f"out{row}"), "--code", "truncated")
        one_line_usage_error(proc, "row")


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        (lambda d: b"\xff\xfe\x00\x81binary", "not UTF-8"),
        (lambda d: json.dumps({k: v for k, v in d.items() if k != "anomalies"}).encode(), "anomalies"),
        (lambda d: json.dumps({**d, "flagged": [{"row": "x", "codes": []}]}).encode(), "flagged[0].row"),
        (lambda d: json.dumps({**d, "inputs": 5}).encode(), "inputs"),
    ],
)
def test_a_broken_report_is_a_one_line_report_error(tmp_path, good, damage, needle):
    p = write_good_parquet(good, tmp_path / "a.parquet")
    r = tmp_path / "r.json"
    assert run_cli("scan", str(p), "--json", str(r), "-q", "--fail-on", "never").returncode == 0
    r.write_bytes(damage(json.loads(r.read_text())))
    with pytest.raises(tokscan.ReportError, match=needle.replace("[", r"\[")):
        tokscan.Report.load(r)
    one_line_usage_error(run_cli("diff", str(r), str(r)), needle)
    one_line_usage_error(run_cli("clean", str(p), "--report", str(r), "--out", str(tmp_path / "o")), needle)
    one_line_usage_error(run_cli("scan", str(p), "--baseline", str(r), "-q"), needle)


def test_sample_ids_with_control_characters_stay_on_one_line_and_valid_xml(tmp_path):
    import xml.etree.ElementTree as ET

    # A control character and the text that spells its escape (`c\x01d`: backslash, x, 0, 1) were written
    # alike; a backslash is escaped too, so each line reads back to its id (the README's line of Python).
    ids = ["a\nb", "c\x01d", "c\\x01d", "e\\f", "g\u2028h"]
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4], [5], [6], [7]], "sample_id": ids}), p)
    excl, junit = tmp_path / "x.txt", tmp_path / "j.xml"
    proc = run_cli("scan", str(p), "--exclude", str(excl), "--junit", str(junit), "-q")
    assert proc.returncode == 1, proc.stderr
    lines = excl.read_text(encoding="utf-8").splitlines()
    assert lines == ["a\\x0ab", "c\\x01d", "c\\\\x01d", "e\\\\f", "g\\u2028h"]
    back = [
        re.sub(r"\\(\\|x[0-9a-f]{2}|u[0-9a-f]{4})", lambda m: "\\" if m[1] == "\\" else chr(int(m[1][1:], 16)), line)
        for line in lines
    ]
    assert back == ids
    ET.parse(junit)  # valid XML


@pytest.mark.parametrize("args", [["--threads", "abc"], ["--fail-on", "bogus"], ["--nope"]])
def test_cli_usage_errors_are_one_line(tmp_path, good, args):
    p = write_good_parquet(good, tmp_path / "a.parquet")
    one_line_usage_error(run_cli("scan", str(p), *args), "tokscan: error:")


def test_an_arrow_stream_without_its_end_marker_reads_with_a_warning(tmp_path):
    schema = pa.schema([("input_ids", pa.list_(pa.int64()))])
    whole = tmp_path / "whole.arrow"
    with pa.ipc.new_stream(whole, schema) as w:
        for _ in range(3):
            w.write_batch(pa.record_batch([pa.array([[1, 2], [3]])], schema=schema))
    data = whole.read_bytes()
    assert data.endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00")
    cut = tmp_path / "cut.arrow"
    cut.write_bytes(data[:-8])  # cut cleanly before the end-of-stream marker
    assert "warning" not in tokscan.scan(whole, profile="plain").data["inputs"][0]
    r = tokscan.scan(cut, profile="plain")
    assert r.n_samples == 6 and "end-of-stream marker" in r.data["inputs"][0]["warning"]
    proc = run_cli("scan", str(cut), "--profile", "plain", "--fail-on", "never")
    assert proc.returncode == 0 and f"warning: {cut}" in " ".join(proc.stderr.split()), proc.stderr


@pytest.mark.parametrize(
    ("content", "needle", "core"),
    [
        (b"", "no prompt records", "empty prompts file"),
        (b"\n \n", "no prompt records", "empty prompts file"),
        (b"\xff\x81\x00", "UTF-8", "not UTF-8"),
    ],
)
def test_align_with_an_empty_or_binary_prompts_file_is_an_input_error(tmp_path, content, needle, core):
    from tokscan.align import read_records

    p = tmp_path / "prompts.jsonl"
    p.write_bytes(content)
    with pytest.raises(tokscan.InputError, match=needle):
        read_records(p)  # the Python oracle
    # The core's pairing, which `align` and `scan --prompts` use: one line, exit 2.
    corpus = write_good_parquet(synth.build_corpus(n_clean=5, seed=3, anomalies_per_code=0), tmp_path / "a.parquet")
    proc = run_cli("scan", str(corpus), "--prompts", str(p), "-q")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and str(p) in lines[0] and core in lines[0], proc.stderr


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def test_a_parquet_footer_that_lies_about_its_row_count(tmp_path):
    """The footer's row counts (file and row group, thrift field 3 after an i64/list field: `0x16` + zigzag
    varint) rewritten to 2**61: every command refuses the file in one line (`show` said "capacity overflow")."""
    rows = 240
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2, 3]] * rows, "sample_id": [f"s{i}" for i in range(rows)]}), good)
    data = good.read_bytes()
    (flen,) = struct.unpack("<I", data[-8:-4])
    footer = data[-8 - flen : -8]
    pattern = b"\x16" + _varint(2 * rows)
    assert footer.count(pattern) >= 2
    lying = footer.replace(pattern, b"\x16" + _varint(2 * (1 << 61)))
    p = tmp_path / "lie.parquet"
    p.write_bytes(data[: -8 - flen] + lying + struct.pack("<I", len(lying)) + b"PAR1")
    assert pq.ParquetFile(p).metadata.num_rows == 1 << 61
    assert_input_error(p, tokscan.InputError, "corrupt footer", "row group 0")
    for args in (["show", str(p), "--sample-id", "s3"], ["show", str(p), "--row", "3"]):
        proc = run_cli(*args)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "corrupt footer" in lines[0] and str(p) in lines[0], proc.stderr


@pytest.mark.parametrize("where", ["option", "config"])
def test_an_absurd_thread_count_is_capped_with_a_note(tmp_path, good, where):
    """`--threads 99999999999` (or in the config) spawned threads without end: capped at 4 × the cores."""
    p = write_good_parquet(good, tmp_path / "a.parquet")
    cfg = tmp_path / "tokscan.toml"
    cfg.write_text("threads = 99999999999\n")
    args = ["--threads", "99999999999"] if where == "option" else ["--config", str(cfg)]
    proc = subprocess.run(
        [sys.executable, "-m", "tokscan", "scan", str(p), "--no-progress", "--json", str(tmp_path / "r.json"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode in (0, 1), proc.stderr
    cap = tokscan._core.max_threads()
    assert cap >= 4 and cap % 4 == 0
    assert f"using {cap} (at most 4 × the cores)" in proc.stderr, proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["n_samples"] == len(good)


def test_a_gzip_bomb_of_newlines_is_refused_in_one_line(tmp_path):
    """1 MiB of gzip that inflates to 1 GiB of newlines reached 2.1 GB: the inflation is capped (256 MiB or
    100 × the compressed size) with a one-line error, and the cap is configurable."""
    import gzip

    p = tmp_path / "bomb.jsonl.gz"
    # One line, then 1024 gzip members of 1 MiB of newlines each (a valid gzip file, like `cat a.gz b.gz`),
    # compressed once: deflating the whole GiB took ~3 s.
    member = gzip.compress(b"\n" * (1 << 20), compresslevel=9)
    p.write_bytes(gzip.compress(b'{"input_ids": [1, 2, 3]}\n') + member * 1024)
    assert p.stat().st_size < 2 << 20
    code = (
        "import sys, tokscan\n"
        "try:\n    tokscan.scan(sys.argv[1], profile='plain')\n"
        "except tokscan.InputError as e:\n    print(e)\n"
        # VmHWM is this process image's own peak; ru_maxrss also counts the forking parent's size (the full
        # suite's pytest process reaches ~1.4 GB, which is what this test once measured).
        "print(next(int(x.split()[1]) // 1024 for x in open('/proc/self/status') if x.startswith('VmHWM:')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=120)
    message, rss_mb = proc.stdout.strip().splitlines()
    assert "compression bomb" in message and "TOKSCAN_MAX_DECOMPRESSED_BYTES" in message, proc.stdout
    assert int(rss_mb) < 400, rss_mb  # 2.1 GB before the cap; ~64-100 MB (the interpreter and numpy) with it
    # Past 16x the compressed size the rest is only counted: with the cap raised to 1 GiB the bomb (1 GiB + one
    # line) is still refused having held ~16 MiB; an implementation that keeps what it inflates up to the cap
    # (as this one did) peaks above 1 GB here.
    env = {**os.environ, "TOKSCAN_MAX_DECOMPRESSED_BYTES": str(1 << 30)}
    proc = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=120, env=env)
    message, rss_mb = proc.stdout.strip().splitlines()
    assert "inflates to more than 1073741824 bytes" in message, proc.stdout
    assert int(rss_mb) < 400, rss_mb
    assert_input_error(p, tokscan.InputError, "inflates to more than")
    # A file far more compressible than 16x but within the cap is read whole (decompressed a second time).
    dense = tmp_path / "dense.jsonl.gz"
    with gzip.open(dense, "wb", compresslevel=9) as f:
        f.write(b'{"input_ids": [5, 6, 7, 8]}\n' * 200_000)
    assert dense.stat().st_size * 16 < 200_000 * 28
    report = tokscan.scan(dense, profile="plain")
    assert report.n_samples == 200_000 and report.n_tokens == 800_000
    # A file within the cap (set lower to keep the test small) reads; the cap also applies to zstd.
    small = tmp_path / "s.jsonl.gz"
    with gzip.open(small, "wb") as f:
        f.write(b'{"input_ids": [1, 2, 3]}\n' * 10)
    env = {**os.environ, "TOKSCAN_MAX_DECOMPRESSED_BYTES": "100"}
    proc = subprocess.run(
        [sys.executable, "-m", "tokscan", "scan", str(small), "-p", "plain", "-q"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2 and "inflates to more than 100 bytes" in proc.stderr, proc.stderr
    env["TOKSCAN_MAX_DECOMPRESSED_BYTES"] = "1000"
    proc = subprocess.run(
        [sys.executable, "-m", "tokscan", "scan", str(small), "-p", "plain", "-q"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr


def test_a_jsonl_line_longer_than_the_limit_is_refused_naming_it(tmp_path):
    p = tmp_path / "long.jsonl"
    p.write_text('{"input_ids": [1, 2]}\n\n{"input_ids": [' + ", ".join(["7"] * 100) + "]}\n")
    env = {**os.environ, "TOKSCAN_MAX_LINE_BYTES": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "tokscan", "scan", str(p), "-q"], capture_output=True, text=True, env=env
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert str(p) in lines[0] and "line 3 is 315 bytes, more than the 200-byte limit" in lines[0], lines[0]
    env["TOKSCAN_MAX_LINE_BYTES"] = "400"
    proc = subprocess.run(
        [sys.executable, "-m", "tokscan", "scan", str(p), "-q"], capture_output=True, text=True, env=env
    )
    assert proc.returncode in (0, 1), proc.stderr


def _mapped_inputs(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    """One input of each memory-mapped format, ~800 KB of tokens: (the path to open, the mapped file to cut)."""
    rng = np.random.default_rng(3)
    docs = [rng.integers(1, 30_000, size=1000).tolist() for _ in range(200)]
    flat = [t for d in docs for t in d]
    npd = tmp_path / "np"
    npd.mkdir()
    np.save(npd / "tokens.npy", np.asarray(flat, dtype=np.int32))
    np.save(npd / "offsets.npy", np.arange(0, len(flat) + 1, 1000, dtype=np.int64))
    llmc = write_llmc(tmp_path / "shard_000000.bin", [t for d in docs for t in (50256, *d)])
    meg = tmp_path / "meg"
    np.asarray(flat, dtype=np.int32).tofile(meg.with_suffix(".bin"))
    synth.write_megatron_index(meg.with_suffix(".idx"), np.int32, np.full(200, 1000), np.arange(201))
    arrow = tmp_path / "a.arrow"
    with pa.ipc.new_file(arrow, pa.schema([("input_ids", pa.list_(pa.int32()))])) as w:
        for d in docs:
            w.write_batch(pa.record_batch([pa.array([d], pa.list_(pa.int32()))], names=["input_ids"]))
    return {
        "numpy": (npd, npd / "tokens.npy"),
        "llmc": (llmc, llmc),
        "megatron": (meg.with_suffix(".bin"), meg.with_suffix(".bin")),
        "arrow": (arrow, arrow),
    }


@pytest.mark.parametrize("fmt", ["numpy", "llmc", "megatron", "arrow"])
def test_a_mapped_input_cut_after_opening_is_an_input_error_not_sigbus(tmp_path, fmt):
    """Reading the pages of a memory map beyond a file's new end killed the process with SIGBUS: every read
    re-checks the mapped file's length first. (Run in a child: before the fix it died of the signal.)"""
    path, mapped = _mapped_inputs(tmp_path)[fmt]
    assert len(tokscan._core.Corpus([str(path)])) == 200
    code = (
        "import os, sys, tokscan\n"
        "c = tokscan._core.Corpus([sys.argv[1]])\n"
        "os.truncate(sys.argv[2], 8192)\n"
        "try:\n    c.samples(0, len(c))\n"
        "except tokscan.InputError as e:\n    print(e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path), str(mapped)], capture_output=True, text=True)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert str(mapped) in proc.stdout and "shrank from" in proc.stdout and "to 8192 bytes" in proc.stdout, proc.stdout


def test_a_parquet_file_cut_after_its_footer_was_read_is_named_as_cut(tmp_path):
    """The scan maps each Parquet file when it reads a row group: one found shorter than when its footer was read
    is the same input error as a mapped input cut during a scan, not what decoding the missing pages says."""
    path = tmp_path / "shard.parquet"
    tokens = np.arange(200_000, dtype=np.int32) % 30_000 + 1
    ids = pa.ListArray.from_arrays(pa.array(np.arange(0, 200_001, 500, dtype=np.int32)), tokens)
    pq.write_table(pa.table({"input_ids": ids}), path, row_group_size=100, compression="none")
    from tokscan.forensics import Corpus

    corpus = Corpus([str(path)])
    full = path.stat().st_size
    os.truncate(path, full // 2)
    with pytest.raises(tokscan.InputError, match=f"shrank from {full} to {full // 2} bytes") as e:
        tokscan.scan(corpus, "plain")
    assert str(path) in str(e.value)


CUT_DURING_SCAN = """
import os, shutil, sys, threading, time, random
import tokscan
pristine, corpus, name, before = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
shutil.copytree(pristine, corpus)
target = os.path.join(corpus, name)
t0 = time.perf_counter()
tokscan.scan(corpus, "plain", threads=2)
took = time.perf_counter() - t0
rng, seen = random.Random(7), []
for i in range(16):
    shutil.copy(os.path.join(pristine, name), target)
    cut = threading.Timer(rng.uniform(0, took), lambda: open(target, "r+b").truncate(4096))
    cut.start()
    try:
        tokscan.scan(corpus, "plain", threads=2)
        seen.append("scanned")
    except tokscan.InputError as e:
        msg = str(e)
        # Cut after the scan opened it: "shrank from"; cut before (a loaded machine): what opening the shorter
        # file says. Anything else, or an error not naming the file, is printed whole and fails the test.
        seen.append("shrank" if "shrank from" in msg else "before" if before in msg else msg)
        seen[-1] = seen[-1] if name in msg else msg
    cut.join()
print(" ".join(seen))
"""


@pytest.mark.parametrize("fmt", ["numpy", "parquet"])
def test_a_mapped_input_cut_while_its_pages_are_read_is_an_input_error(tmp_path, fmt):
    """Cut while a unit of work reads its pages (not between units, where the size checks catch it), the map's
    lost pages raised SIGBUS and killed the process. Truncated at random moments of 16 scans: each one either
    finished before the cut or ended with the input error; the process never dies of the signal. (Parquet row
    groups are read from a map of the file too.)"""
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    n_docs, doc = 40_000, 500  # 20M int32 tokens: 80 MB, tens of milliseconds of scan
    tokens = np.random.default_rng(5).integers(1, 30_000, n_docs * doc, dtype=np.int32)
    if fmt == "numpy":
        name, before = "tokens.npy", "the file holds fewer"
        np.save(pristine / name, tokens)
        np.save(pristine / "offsets.npy", np.arange(0, n_docs * doc + 1, doc, dtype=np.int64))
    else:
        name, before = "shard.parquet", "Corrupt footer"
        ids = pa.ListArray.from_arrays(pa.array(np.arange(0, n_docs * doc + 1, doc, dtype=np.int32)), tokens)
        pq.write_table(pa.table({"input_ids": ids}), pristine / name, row_group_size=2_000, compression="none")
    proc = subprocess.run(
        [sys.executable, "-c", CUT_DURING_SCAN, str(pristine), str(tmp_path / "corpus"), name, before],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # -7: killed by SIGBUS
    seen = proc.stdout.split()
    assert len(seen) == 16 and set(seen) <= {"scanned", "shrank", "before"}, proc.stdout
    assert "shrank" in seen, proc.stdout


@pytest.mark.parametrize("option", ["--json", "--html", "--junit", "--exclude"])
def test_writing_to_a_full_device_names_the_file(tmp_path, option):
    p = write_good_parquet(synth.build_corpus(n_clean=30, seed=5, anomalies_per_code=1), tmp_path / "a.parquet")
    proc = run_cli("scan", str(p), "-q", "--fail-on", "info", option, "/dev/full")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "/dev/full" in lines[0] and "No space left on device" in lines[0], lines[0]
    assert "not a JSON document" not in lines[0]
    assert Path("/dev/full").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_disk_leaves_no_half_written_output(tmp_path, good):
    """On a 64 KiB tmpfs the reports do not fit: one line naming the file, and no partial file left behind."""
    p = write_good_parquet(synth.build_corpus(n_clean=300, seed=6, anomalies_per_code=10), tmp_path / "a.parquet")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        for option, name in (("--json", "r.json"), ("--html", "r.html")):
            proc = run_cli("scan", str(p), "-q", "--fail-on", "never", option, str(mnt / name))
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1, proc.stderr
            assert str(mnt / name) in lines[0] and "No space left on device" in lines[0], lines[0]
            assert not (mnt / name).exists()
    finally:
        subprocess.run(["umount", str(mnt)])


def test_a_shard_whose_name_is_not_utf8_is_read_and_named_escaped(tmp_path, good):
    """A directory scan read `a.parquet` and skipped `b\\xff.parquet`; naming it on the command line was an
    internal UnicodeEncodeError. Now the directory scan reads it (named with a `\\xff` escape) and a path given
    explicitly is refused in one line."""
    d = tmp_path / "d"
    d.mkdir()
    write_good_parquet(good, d / "a.parquet")
    odd = os.fsdecode(os.fsencode(str(d)) + b"/b\xff.parquet")
    os.rename(write_good_parquet(good, tmp_path / "b.parquet"), os.fsencode(odd))
    r = tokscan.scan(d, profile="plain")
    assert r.n_samples == 2 * len(good)
    names = sorted(Path(i["path"]).name for i in r.data["inputs"])
    assert names == ["a.parquet", "b\\xff.parquet"], names
    assert not r.data.get("skipped"), r.data.get("skipped")
    with pytest.raises(tokscan.UsageError, match="not valid UTF-8"):
        tokscan.scan(odd)
    proc = subprocess.run(
        [sys.executable, "-m", "tokscan", "scan", os.fsencode(odd)], capture_output=True, text=True, timeout=60
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "b\\xff.parquet: the path is not valid UTF-8" in lines[0] and "internal" not in lines[0], lines[0]


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
@pytest.mark.parametrize("repeated", ["input_ids", "loss_mask", "category"])
def test_a_column_the_file_holds_twice_is_refused_not_read_by_its_first(tmp_path, fmt, repeated):
    """pyarrow writes a table with two columns of one name; tokscan took the first by name and never said that
    the other was left unread. A column it would read that is repeated is now refused, naming the file."""
    import pyarrow.feather as feather

    cols = {
        "input_ids": pa.array([[1, 2, 3], [4, 5]]),
        "loss_mask": pa.array([[0, 1, 1], [0, 1]], pa.list_(pa.int8())),
        "category": pa.array(["a", "b"]),
    }
    arrays, names = list(cols.values()), list(cols)
    arrays.append(cols[repeated])
    names.append(repeated)
    table = pa.Table.from_arrays(arrays, names=names)
    path = tmp_path / f"dup.{fmt}"
    pq.write_table(table, path) if fmt == "parquet" else feather.write_feather(table, path)
    proc = run_cli("scan", str(path), "-p", "plain", "-q", "--fail-on", "never")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert str(path) in lines[0] and f'column "{repeated}" appears 2 times' in lines[0], lines[0]
    # A repeated column tokscan does not read is no reason to refuse the file.
    other = pa.Table.from_arrays([*cols.values(), pa.array([1, 2]), pa.array([3, 4])], [*cols, "x", "x"])
    pq.write_table(other, tmp_path / "other.parquet")
    assert run_cli("scan", str(tmp_path / "other.parquet"), "-p", "plain", "-q", "--fail-on", "never").returncode == 0


@pytest.mark.parametrize(
    "meta",
    [
        pa.table({"sample_id": pa.array([[1], [2]])}),
        pa.table({"category": pa.array([[1.5], [2.5]])}),
        pa.Table.from_arrays([pa.array(["a", "b"]), pa.array(["c", "d"])], names=["category", "category"]),
    ],
    ids=["list-ids", "list-categories", "repeated"],
)
def test_a_numpy_meta_label_column_is_checked_as_a_shards_would_be(tmp_path, meta):
    """A `meta.parquet` `sample_id` of type list<int> read as the text "[2]"; Parquet shards refuse that type."""
    d = tmp_path / "np"
    d.mkdir()
    np.save(d / "tokens.npy", np.arange(1, 11, dtype=np.int32))
    np.save(d / "offsets.npy", np.array([0, 4, 10], dtype=np.int64))
    pq.write_table(meta, d / "meta.parquet")
    proc = run_cli("scan", str(d), "-p", "plain", "-q", "--fail-on", "never")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert str(d / "meta.parquet") in lines[0], lines[0]
    assert "expected an integer or string" in lines[0] or "appears 2 times" in lines[0], lines[0]


@pytest.mark.parametrize(
    "ids", [pa.array([[5, 7], [2**64 - 1, 7]], pa.list_(pa.uint64())), pa.array([[5, 7], [-1, 7]])], ids=["u64", "-1"]
)
def test_convert_refuses_an_id_it_cannot_copy_as_it_is(tmp_path, ids):
    """A uint64 id past 2^63 - 1 (or a Megatron float id that is not a whole number) is read as -1, out of the
    vocabulary for the scan; convert wrote that -1 in its place and exited 0."""
    src = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"input_ids": ids}), src)
    for to in ("parquet", "numpy"):
        proc = run_cli("convert", str(src), "--to", to, "--out", str(tmp_path / to), "-q")
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert str(src) in lines[0] and "sample 1 (row 1) holds the id -1" in lines[0], lines[0]
        assert not (tmp_path / to).exists()
    # Any other negative id is copied as it is.
    pq.write_table(pa.table({"input_ids": pa.array([[5, 7], [-100, 7]])}), tmp_path / "neg.parquet")
    assert (
        run_cli("convert", str(tmp_path / "neg.parquet"), "--to", "numpy", "--out", str(tmp_path / "n")).returncode == 0
    )
    assert np.load(tmp_path / "n" / "tokens.npy").tolist() == [5, 7, -100, 7]


def test_a_malformed_line_is_only_that_in_the_statistics_and_corpus_checks(tmp_path):
    """A JSONL line that is not a sample was counted as a sample of 0 tokens: `length_outlier` besides
    `malformed_line`, a minimum length of 0, and a vote in its category's majorities (which hid a real
    `departs_from_category`). It is counted as a row and nothing else."""
    rng = np.random.default_rng(3)
    lines = [json.dumps({"sample_id": f"s{i}", "input_ids": rng.integers(5, 90, 200 + i).tolist()}) for i in range(30)]
    lines.insert(11, '{"sample_id": "bad", "prompt_ids": [1, 2, "x"], "output_ids": [3]}')
    path = tmp_path / "gen.jsonl"
    path.write_text("\n".join(lines) + "\n")
    (tmp_path / "v100.toml").write_text('base = "plain"\nname = "v100"\nvocab_size = 100\n')
    r = tokscan.scan(str(path), profile=str(tmp_path / "v100.toml"))
    assert [(f["row"], f["codes"]) for f in r.flagged] == [(11, ["malformed_line"])]
    assert r.n_samples == 31 and r.data["categories"]["default"]["samples"] == 31
    total = r.data["overall"]["lengths"]["total"]
    assert total["min"] == 200 and total["max"] == 229


def test_a_byte_order_mark_before_the_first_jsonl_line_is_not_part_of_it(tmp_path):
    """Some Windows tools open a text file with a UTF-8 byte-order mark: the first sample was `malformed_line`,
    and a prompts file so opened was not recognised as one."""
    path = tmp_path / "data" / "gen.jsonl"
    path.parent.mkdir()
    path.write_bytes(b'\xef\xbb\xbf{"id": "a", "input_ids": [1, 2, 3]}\n{"id": "b", "input_ids": [4, 5]}\n')
    blank = tmp_path / "blank.jsonl"  # a first line holding only the mark is blank
    blank.write_bytes(b'\xef\xbb\xbf\n{"id": "a", "input_ids": [1, 2, 3]}\n')
    assert tokscan.scan(str(blank), profile="plain").n_samples == 1
    msg = [{"role": "user", "content": "hi"}]
    prompts = "".join(json.dumps({"id": i, "messages": msg}) + "\n" for i in "ab")
    (tmp_path / "data" / "prompts.jsonl").write_bytes(b"\xef\xbb\xbf" + prompts.encode())
    r = tokscan.scan(str(tmp_path / "data"), profile="plain")
    assert r.n_samples == 2 and r.count("malformed_line") == 0
    assert [p["paired"] for p in r.data["pairing"]] == [2]
