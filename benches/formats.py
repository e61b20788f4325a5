"""Throughput of the readers added for issue 14 on the same corpus: Arrow IPC (file, uncompressed and zstd;
stream, as `datasets` writes it) and Megatron `.bin`/`.idx` against the memory-mapped NumPy path, and JSONL
(tokscan's parallel Rust parser) against orjson and DuckDB `read_json` reading the same file.

    .venv/bin/python benches/formats.py [--tokens 40e6] [--repeat 3]

Prints one line per reader (best of `--repeat`); numbers are recorded in benches/README.md."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

import tokscan

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
import synth  # the test-suite's corpora
from synth import write_megatron_index


def best(f, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=float, default=40e6)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    g = synth.Generator(seed=1, scale=8)  # ~2,300 tokens per sample, like the main benchmark's corpus
    base = [g.clean(f"s{i}", synth.CATEGORIES[i % 8]) for i in range(300)]
    per = int(np.mean([len(s.ids) for s in base]))
    n = int(a.tokens // per)
    samples = []
    for i, k in enumerate(rng.integers(0, len(base), size=n)):
        b = base[k]
        # A unique first reasoning token per sample, so the corpus is not one big set of duplicates.
        completion = [1000 + i % 150_000, *b.completion[1:]]
        samples.append(synth.Sample(f"s{i:07d}", b.category, b.prompt, completion, b.thinking, b.response))
    lengths = np.array([len(s.ids) for s in samples], dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.concatenate([np.array(s.ids, dtype=np.int32) for s in samples])
    total = int(offsets[-1])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        npd = root / "np"
        npd.mkdir()
        np.save(npd / "tokens.npy", tokens)
        np.save(npd / "offsets.npy", offsets)
        ids = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(tokens))
        table = pa.table({"input_ids": ids})
        for name, stream, codec in [("file", False, None), ("file-zstd", False, "zstd"), ("stream", True, None)]:
            with (ipc.new_stream if stream else ipc.new_file)(
                root / f"{name}.arrow", table.schema, options=ipc.IpcWriteOptions(compression=codec)
            ) as w:
                for b in table.to_batches(max_chunksize=1000):
                    w.write_batch(b)
        tokens.tofile(root / "m.bin")
        write_megatron_index(root / "m.idx", np.int32, lengths, np.arange(n + 1, dtype=np.int64))
        with open(root / "g.jsonl", "w") as f:
            for s in samples:
                f.write(json.dumps(synth.jsonl_record(s)) + "\n")
        size = (root / "g.jsonl").stat().st_size
        print(f"{n} samples, {total / 1e6:.1f}M tokens; JSONL {size / 1e6:.0f} MB")
        rows = {}
        for name, path in [
            ("numpy (memory-mapped)", npd),
            ("arrow file", root / "file.arrow"),
            ("arrow file, zstd", root / "file-zstd.arrow"),
            ("arrow stream (datasets)", root / "stream.arrow"),
            ("megatron .bin/.idx", root / "m.bin"),
            ("jsonl (tokscan)", root / "g.jsonl"),
        ]:
            rows[name] = best(lambda p=path: tokscan.scan(p), a.repeat)
        try:
            import orjson

            def parse_orjson() -> int:
                c = 0
                with open(root / "g.jsonl", "rb") as f:
                    for line in f:
                        r = orjson.loads(line)
                        c += len(r["prompt_ids"]) + len(r["output_ids"])
                return c

            rows["jsonl parse only: orjson (1 thread)"] = best(parse_orjson, a.repeat)
        except ImportError:
            pass
        try:
            import duckdb

            q = (
                f"select sum(len(prompt_ids) + len(output_ids)) from read_json('{root / 'g.jsonl'}', "
                "columns={prompt_ids: 'BIGINT[]', output_ids: 'BIGINT[]'})"
            )
            rows["jsonl parse only: duckdb read_json"] = best(lambda: duckdb.sql(q).fetchall(), a.repeat)
        except ImportError:
            pass
        ref = rows["numpy (memory-mapped)"]
        for name, t in rows.items():
            print(f"{name:40s} {t:7.3f} s  {total / t / 1e6:8.0f} Mtok/s  {ref / t:5.2f}x numpy")


if __name__ == "__main__":
    main()
