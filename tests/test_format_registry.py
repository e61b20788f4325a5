"""The corrupt-input suite over the core's format registry (`_core.formats()`): every registered format has a
builder here, reads back as that format, and any truncation or flipped byte of any of its files is either read
or refused as an input error naming the file (exit 2 in one line from the CLI), never another exception.
A format added to the registry without a builder fails `test_every_registered_format_has_a_builder`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import tokscan
from tokscan import _core

import synth
from conftest import run_cli


def write_megatron(samples: list[synth.Sample], out: Path) -> Path:
    """An int32 Megatron pair (the `.idx` as megatron-core's `_IndexWriter` writes it), one document each."""
    out.mkdir(parents=True)
    ids = [np.asarray(s.ids, dtype=np.int32) for s in samples]
    (out / "corpus.bin").write_bytes(b"".join(a.tobytes() for a in ids))
    lengths = np.array([len(a) for a in ids])
    synth.write_megatron_index(out / "corpus.idx", np.int32, lengths, np.arange(len(ids) + 1))
    return out


def write_llmc(samples: list[synth.Sample], out: Path) -> Path:
    """A version-2 (uint32) llm.c shard: the 256 x int32 header, then each sample after the delimiter."""
    out.mkdir(parents=True)
    toks = [t for s in samples for t in (100257, *s.ids)]
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 2, len(toks)]
    (out / "shard_000.bin").write_bytes(header.tobytes() + np.asarray(toks, dtype=np.uint32).tobytes())
    return out


#: Registered format name -> a writer of `samples` into a new folder `out` (returns the path to scan).
BUILDERS: dict[str, Callable[[list[synth.Sample], Path], Path]] = {
    "parquet": lambda s, o: synth.write_parquet_full(s, o),
    "arrow": lambda s, o: synth.write_arrow_stream(s, o, n_shards=1),
    "megatron": write_megatron,
    "llmc": write_llmc,
    "jsonl": lambda s, o: synth.write_jsonl(s, o, n_shards=1),
    "numpy": lambda s, o: synth.write_numpy(s, o, with_mask=True),
}

FORMATS = [name for name, _ in _core.formats()]


def test_every_registered_format_has_a_builder():
    assert set(BUILDERS) == set(FORMATS)


def test_a_file_of_no_known_format_lists_every_registered_one(tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\n")
    with pytest.raises(tokscan.InputError) as e:
        tokscan.scan(junk)
    for _, shown in _core.formats():
        assert shown in str(e.value)


@pytest.fixture(scope="module")
def samples() -> list[synth.Sample]:
    return synth.build_corpus(n_clean=40, seed=23, anomalies_per_code=0)


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("name", FORMATS)
def test_every_cut_and_flipped_byte_is_read_or_refused_naming_the_file(samples, tmp_path, name):
    root = BUILDERS[name](samples, tmp_path / name)
    report = tokscan.scan(root, profile="plain")
    assert {i["format"] for i in report.data["inputs"]} == {name}
    assert report.n_samples > 0
    rng = np.random.default_rng(len(name))
    for path in files_of(root):
        data = path.read_bytes()
        damaged = [data[:cut] for cut in sorted({0, 1, 8, len(data) // 3, len(data) - 1}) if cut < len(data)]
        for at in rng.integers(0, len(data), size=6):
            flipped = bytearray(data)
            flipped[at] ^= 0xFF
            damaged.append(bytes(flipped))
        for bad in damaged:
            path.write_bytes(bad)
            try:
                tokscan.scan(root, profile="plain", threads=1)
            except tokscan.InputError as e:
                assert path.name in str(e) or path.parent.name in str(e), (path, str(e))
        path.write_bytes(data)
    cut = max(files_of(root), key=lambda p: p.stat().st_size)
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    proc = run_cli("scan", str(root), "--profile", "plain", "-q")
    assert proc.returncode in (0, 1, 2), proc.stderr
    assert "Traceback" not in proc.stderr and "panicked" not in proc.stderr, proc.stderr
    if proc.returncode == 2:
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
