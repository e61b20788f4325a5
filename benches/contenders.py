"""What is timed: tokscan (CLI and API, full catalogue) and the same *core* scan written idiomatically in
DuckDB, polars and numpy+pyarrow, plus the floors (zstd decompression of the same token bytes; a plain pass
over the memory-mapped NumPy tokens).

The core scan: per sample length, count of `</think>`, first `</think>`, last token is `<|im_end|>`, ids out of
range, system-turn count; per category the median and p99 of the length.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

END_THINK, IM_END, IM_SYSTEM, VOCAB = 163607, 163586, 163594, 163840


def tokscan_api(path: Path, threads: int = 0) -> dict:
    import tokscan

    r = tokscan.scan(path, profile="kimi-k2", threads=threads)
    return {"samples": r.n_samples, "tokens": r.n_tokens}


def _run_cli(args: list[str]) -> None:
    """`python -m tokscan ARGS` as an installed tokscan runs: with its bytecode cached. A development shell
    may set PYTHONDONTWRITEBYTECODE, which would recompile tokscan's modules on every start (~20 ms)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run([sys.executable, "-m", "tokscan", *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)


def tokscan_cli(path: Path, threads: int = 0) -> dict:
    _run_cli(["scan", str(path), "-q", "--fail-on", "never", "--threads", str(threads)])
    return {}


def _json_out(path: Path) -> Path:
    return Path(os.environ.get("TMPDIR", "/tmp")) / f"tokscan-bench-{os.getpid()}.json"


def tokscan_api_json(path: Path, threads: int = 0) -> dict:
    """The API scan plus writing the JSON report: what `scan --json` must not be much slower than."""
    import tokscan

    out = _json_out(path)
    tokscan.scan(path, profile="kimi-k2", threads=threads).write_json(out)
    out.unlink()
    return {}


def tokscan_cli_json(path: Path, threads: int = 0) -> dict:
    """`tokscan scan PATH --json FILE` as a user runs it (interpreter start-up and imports included)."""
    out = _json_out(path)
    _run_cli(["scan", str(path), "-q", "--fail-on", "never", "--threads", str(threads), "--json", str(out)])
    out.unlink()
    return {}


def duckdb_core(path: Path, threads: int = 0) -> dict:
    import duckdb

    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {threads}")
    rows = con.execute(
        f"""
        WITH s AS (
          SELECT category, len(input_ids) AS n,
                 len(list_filter(input_ids, lambda x: x = {END_THINK})) AS n_end_think,
                 list_position(input_ids, {END_THINK}) AS first_end_think,
                 input_ids[-1] = {IM_END} AS ends_ok,
                 len(list_filter(input_ids, lambda x: x < 0 OR x >= {VOCAB})) AS oov,
                 len(list_filter(input_ids, lambda x: x = {IM_SYSTEM})) AS n_system
          FROM read_parquet('{path}/*.parquet'))
        SELECT category, count(*), sum(n), median(n), quantile_cont(n, 0.99), sum(n_end_think),
               min(first_end_think), sum(ends_ok::INT), sum(oov), sum(n_system)
        FROM s GROUP BY category ORDER BY category
        """
    ).fetchall()
    return {"samples": sum(r[1] for r in rows), "tokens": int(sum(r[2] for r in rows))}


def polars_core(path: Path, threads: int = 0) -> dict:
    import polars as pl

    ids = pl.col("input_ids")
    df = (
        pl.scan_parquet(f"{path}/*.parquet")
        .select(
            "category",
            ids.list.len().alias("n"),
            ids.list.eval(pl.element() == END_THINK).list.sum().alias("n_end_think"),
            ids.list.last().eq(IM_END).alias("ends_ok"),
            ids.list.eval((pl.element() < 0) | (pl.element() >= VOCAB)).list.sum().alias("oov"),
            ids.list.eval(pl.element() == IM_SYSTEM).list.sum().alias("n_system"),
        )
        .group_by("category")
        .agg(
            pl.len(),
            pl.col("n").sum().alias("tokens"),
            pl.col("n").median().alias("median"),
            pl.col("n").quantile(0.99, "linear").alias("p99"),
            pl.col("n_end_think").sum(),
            pl.col("ends_ok").sum(),
            pl.col("oov").sum(),
            pl.col("n_system").sum(),
        )
        .collect()
    )
    return {"samples": int(df["len"].sum()), "tokens": int(df["tokens"].sum())}


def numpy_core(path: Path, threads: int = 0) -> dict:
    import pyarrow.parquet as pq

    samples = tokens = 0
    per_cat: dict[str, list[np.ndarray]] = {}
    for f in sorted(Path(path).glob("*.parquet")):
        t = pq.read_table(f, columns=["input_ids", "category"])
        col = t.column("input_ids").combine_chunks()
        offs = col.offsets.to_numpy().astype(np.int64)
        vals = col.values.to_numpy()
        lens = np.diff(offs)
        starts = offs[:-1]
        nonempty = lens > 0
        is_end = vals == END_THINK
        n_end = np.add.reduceat(is_end, starts[nonempty]) if nonempty.any() else np.zeros(0)
        cum = np.cumsum(is_end)
        _ = (n_end, cum)
        _ends_ok = vals[offs[1:][nonempty] - 1] == IM_END
        _oov = np.add.reduceat((vals < 0) | (vals >= VOCAB), starts[nonempty])
        _sys = np.add.reduceat(vals == IM_SYSTEM, starts[nonempty])
        cats = t.column("category").to_numpy()
        for c in np.unique(cats):
            per_cat.setdefault(c, []).append(lens[cats == c])
        samples += len(lens)
        tokens += int(offs[-1] - offs[0])
    for v in per_cat.values():
        a = np.concatenate(v)
        np.median(a), np.percentile(a, 99)
    return {"samples": samples, "tokens": tokens}


def zstd_floor(path: Path, threads: int = 0) -> dict:
    """Single-threaded decompression of the same token bytes (1 MiB zstd frames)."""
    import zstandard

    d = zstandard.ZstdDecompressor()
    total = 0
    with Path(path).open("rb") as f:
        while head := f.read(4):
            frame = f.read(int.from_bytes(head, "little"))
            total += len(d.decompress(frame))
    return {"tokens": total // 4}


def mmap_floor(path: Path, threads: int = 0) -> dict:
    """A plain pass over the memory-mapped tokens (one numpy comparison + count)."""
    tokens = np.load(Path(path) / "tokens.npy", mmap_mode="r")
    return {"tokens": len(tokens), "end_think": int(np.count_nonzero(tokens == END_THINK))}


CONTENDERS = {
    "tokscan_cli": tokscan_cli,
    "tokscan_api": tokscan_api,
    "tokscan_cli_json": tokscan_cli_json,
    "tokscan_api_json": tokscan_api_json,
    "duckdb_core": duckdb_core,
    "polars_core": polars_core,
    "numpy_pyarrow_core": numpy_core,
    "zstd_floor": zstd_floor,
    "mmap_floor": mmap_floor,
}
