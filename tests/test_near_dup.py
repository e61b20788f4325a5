"""Near-duplicate completions (`--near-dup`): planted near-copies (scattered edits of 1–5 %, reordered
sentences, a changed number) and hard negatives (the same template with other content) among a few thousand
samples, in every layout, for 1 and 2 threads, against the exact clusters (brute force over an inverted index of
n-grams), and datasketch's MinHash LSH with the same n-grams and bands finds a subset of them."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

import tokscan

import synth

datasketch = pytest.importorskip("datasketch")
N, BANDS, ROWS, THRESHOLD = 5, 16, 8, 0.8


def shingles(ids: list[int]) -> set[bytes]:
    a = np.asarray(ids, dtype="<u4")
    return {a[j : j + N].tobytes() for j in range(len(a) - N + 1)}


def clusters_of(pairs: list[tuple[int, int]]) -> dict[int, int]:
    """row -> representative (the lowest row of its connected pairs) for every member but the representative."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = find(a), find(b)
        parent[max(ra, rb)] = min(ra, rb)
    return {r: find(r) for r in parent if find(r) != r}


def exact(samples: list[synth.Sample]) -> dict[int, int]:
    """Brute force: every pair of completions sharing an n-gram (an inverted index), exact Jaccard."""
    sets = [shingles(s.completion) for s in samples]
    index: dict[bytes, list[int]] = defaultdict(list)
    for row, sh in enumerate(sets):
        for x in sh:
            index[x].append(row)
    shared: dict[tuple[int, int], int] = defaultdict(int)
    for rows in index.values():
        for i, a in enumerate(rows):
            for b in rows[i + 1 :]:
                shared[(a, b)] += 1
    pairs = [(a, b) for (a, b), k in shared.items() if k / (len(sets[a]) + len(sets[b]) - k) >= THRESHOLD]
    return clusters_of(pairs)


def oracle(samples: list[synth.Sample]) -> dict[int, int]:
    """datasketch: MinHash LSH candidates with the same n-grams and bands, exact Jaccard >= THRESHOLD, clusters."""
    sets = [shingles(s.completion) for s in samples]
    lsh = datasketch.MinHashLSH(num_perm=BANDS * ROWS, params=(BANDS, ROWS))
    hashes = []
    for row, s in enumerate(sets):
        if not s:
            hashes.append(None)
            continue
        m = datasketch.MinHash(num_perm=BANDS * ROWS)
        m.update_batch(sorted(s))
        hashes.append(m)
        lsh.insert(row, m)
    pairs = []
    for row, m in enumerate(hashes):
        if m is None:
            continue
        for other in lsh.query(m):
            if other > row and len(sets[row] & sets[other]) / len(sets[row] | sets[other]) >= THRESHOLD:
                pairs.append((row, other))
    return clusters_of(pairs)


@pytest.fixture(scope="module")
def samples() -> list[synth.Sample]:
    return synth.with_near_copies()


@pytest.fixture(scope="module")
def want(samples) -> dict[int, int]:
    return exact(samples)


def test_datasketch_finds_what_brute_force_finds_but_for_lsh_misses(samples, want):
    """datasketch's clusters are a subset of the exact ones (its misses are pairs its LSH did not propose)."""
    ds = oracle(samples)
    assert set(ds) <= set(want) and len(ds) >= len(want) - 3


@pytest.fixture(scope="module")
def written(samples, tmp_path_factory):
    root = tmp_path_factory.mktemp("near-dup")
    return {name: writer(samples, root / name) for name, (writer, _mask) in synth.LAYOUTS.items()}


def test_the_plants_are_near_duplicates_and_the_negatives_are_not(samples, want):
    rows = {s.sample_id: r for r, s in enumerate(samples)}
    swapped_or_renumbered = [rows[f"near{i:03d}"] for i in range(120) if i % 4 in (1, 2)]
    # A swap in a short completion changes enough 5-grams to fall just below 0.8 (one of 60 here).
    assert sum(r in want for r in swapped_or_renumbered) >= len(swapped_or_renumbered) - 2
    edited = [rows[f"near{i:03d}"] for i in range(0, 120, 4)]
    assert 5 <= sum(r in want for r in edited) < len(edited)  # 5 % scattered edits fall below 0.8 on 5-grams
    negatives = [rows[f"near{i:03d}"] for i in range(3, 120, 4)]
    assert not set(negatives) & set(want)


@pytest.mark.parametrize("layout", list(synth.LAYOUTS))
@pytest.mark.parametrize("threads", [1, 2])
def test_every_layout_finds_the_oracles_clusters(samples, want, written, layout, threads):
    r = tokscan.scan(str(written[layout]), "kimi-k2", threads=threads, near_dup=True)
    got = {f["row"]: f["near_duplicate_of"]["row"] for f in r.flagged if "near_duplicate" in f["codes"]}
    assert got == want
    nd = r.data["near_duplicates"]
    assert (nd["n"], nd["bands"], nd["rows"], nd["threshold"]) == (N, BANDS, ROWS, THRESHOLD)
    assert abs(nd["implied_threshold"] - (1 / BANDS) ** (1 / ROWS)) < 1e-12
    assert nd["clusters"] == len(set(want.values())) and nd["samples"] == len(want) + len(set(want.values()))
    by_cat: dict[str, int] = defaultdict(int)
    for row in want:
        by_cat[samples[row].category] += 1
    for cat, c in nd["categories"].items():
        assert c["near_duplicates"] == by_cat[cat] == r.categories[cat]["anomalies"]["near_duplicate"]
        assert c["rate"] == pytest.approx(by_cat[cat] / c["samples"])
    sizes: dict[int, int] = defaultdict(lambda: 1)
    for rep in want.values():
        sizes[rep] += 1
    assert nd["largest"][0]["size"] == max(sizes.values())


def test_terminal_html_and_bad_parameters(written):
    from rich.console import Console

    from tokscan.report.terminal import print_summary

    path = str(written["parquet_full"])
    r = tokscan.scan(path, "kimi-k2", near_dup=True)
    console = Console(record=True, width=160)
    print_summary(r, console)
    assert "near duplicates" in console.export_text()
    assert "id='near-duplicates'" in r.to_html()
    with pytest.raises(tokscan.UsageError, match="bands"):
        tokscan.scan(path, "kimi-k2", near_dup=True, near_dup_bands=0)


def test_decode_shows_the_largest_clusters(written, tmp_path):
    """`--decode N` shows the N largest clusters (not the first flagged rows): each one's first member beside its
    representative, the start of both completions, in the JSON, the terminal and the HTML."""
    import json

    from conftest import run_cli

    out, page = tmp_path / "r.json", tmp_path / "r.html"
    path = str(written["parquet_split"])
    proc = run_cli("scan", path, "--near-dup", "--decode", "2", "--json", str(out), "--html", str(page))
    assert proc.returncode == 1, proc.stderr
    data = json.loads(out.read_text())
    largest = data["near_duplicates"]["largest"]
    entries = data["decoded"]["near_duplicate"]
    assert [e["row"] for e in entries] == [c["members"][0] for c in largest[:2]]
    for e, c in zip(entries, largest, strict=False):
        assert e["near_duplicate_of"] == c["representative"] and e["cluster"]["size"] == c["size"]
        assert e["cluster"]["completion"] and e["cluster"]["representative_completion"]
    assert proc.stdout.count("(cluster of ") == 2 and "representative:" in proc.stdout
    assert page.read_text().count("near copy of") == 2
