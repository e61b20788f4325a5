"""Prompts answered more than once (`prompt_duplicate`) and filed under two categories
(`prompt_cross_category`): planted regenerations, cross-category filings, plain repeats and hard negatives in
every layout, for 1 and 2 threads, against a Python dict of prompt tuples."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np
import pytest

import tokscan

import synth

PREFILL = 4  # IM_ASSISTANT, ASSISTANT_NAME, IM_MIDDLE, THINK: the generation prompt, not part of the prompt


def planted_corpus(seed: int = 5) -> list[synth.Sample]:
    g = synth.Generator(seed)
    rng = np.random.default_rng(seed + 1)
    cats = synth.CATEGORIES
    out = [g.clean(f"s{i:05d}", cats[i % len(cats)]) for i in range(260)]

    def later(kind: str, i: int, src: synth.Sample, category: str, completion: synth.Sample | None = None):
        s = g.clean(f"{kind}{i:03d}", category) if completion is None else completion
        s = dataclasses.replace(s, sample_id=f"{kind}{i:03d}", category=category, prompt=list(src.prompt))
        out.insert(int(rng.integers(out.index(src) + 1, len(out) + 1)), s)

    picks = [out[k] for k in rng.choice(200, size=40, replace=False).tolist()]  # sources, before any insert
    for i, src in enumerate(picks[:14]):  # regenerated: same prompt, a new sampled completion
        later("regen", i, src, src.category)
    for i, src in enumerate(picks[14:20]):  # the same prompt filed under another category
        other = cats[(cats.index(src.category) + 3) % len(cats)]
        later("cross", i, src, other)
    for i, src in enumerate(picks[20:23]):  # filed twice with the same completion: cross-category only
        other = cats[(cats.index(src.category) + 1) % len(cats)]
        later("crossdup", i, src, other, completion=dataclasses.replace(src))
    for i, src in enumerate(picks[23:28]):  # plain repeats: same prompt, completion, category (duplicate only)
        later("repeat", i, src, src.category, completion=dataclasses.replace(src))
    for j in range(3):  # one prompt answered four times
        later("many", j, picks[28], picks[28].category)
    for i, src in enumerate(picks[29:35]):  # hard negatives: the same user turn under another system prompt,
        # or the same system prompt with another user turn
        s = g.clean(f"neg{i:03d}", src.category)
        sys_end = src.prompt.index(synth.IM_END) + 1
        if i % 2:
            s.prompt = s.prompt[: s.prompt.index(synth.IM_END) + 1] + src.prompt[sys_end:]
        else:
            s.prompt = src.prompt[:sys_end] + s.prompt[s.prompt.index(synth.IM_END) + 1 :]
        out.insert(int(rng.integers(out.index(src) + 1, len(out) + 1)), s)
    return out


def oracle(samples: list[synth.Sample]) -> dict[str, object]:
    """The rows each code flags, and each later row's group first, from a dict of prompt tuples."""
    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for row, s in enumerate(samples):
        groups[tuple(s.prompt[:-PREFILL])].append(row)
    dup: set[int] = set()
    cross: set[int] = set()
    first_of: dict[int, int] = {}
    for rows in groups.values():
        head = samples[rows[0]]
        d = {r for r in rows[1:] if samples[r].completion != head.completion}
        c = {r for r in rows[1:] if samples[r].category != head.category}
        if d or c:
            dup |= d
            cross |= c
            first_of.update((r, rows[0]) for r in rows[1:])
    return {"prompt_duplicate": dup, "prompt_cross_category": cross, "first_of": first_of}


@pytest.fixture(scope="module")
def samples() -> list[synth.Sample]:
    return planted_corpus()


@pytest.fixture(scope="module")
def written(samples, tmp_path_factory):
    root = tmp_path_factory.mktemp("prompt-groups")
    return {name: writer(samples, root / name) for name, (writer, _mask) in synth.LAYOUTS.items()}


def test_the_plants_are_what_the_oracle_sees(samples):
    want = oracle(samples)
    assert len(want["prompt_duplicate"]) == 14 + 6 + 3
    assert len(want["prompt_cross_category"]) == 6 + 3
    assert len(want["first_of"]) == 14 + 6 + 3 + 3  # plain repeats stay out of the groups


@pytest.mark.parametrize("layout", list(synth.LAYOUTS))
@pytest.mark.parametrize("threads", [1, 2])
def test_every_layout_finds_exactly_the_oracles_groups(samples, written, layout, threads):
    report = tokscan.scan(str(written[layout]), profile="kimi-k2", threads=threads)
    want = oracle(samples)
    for code in ("prompt_duplicate", "prompt_cross_category"):
        assert set(report.flagged_rows(code)) == want[code], (layout, code)
        assert report.anomalies[code]["severity"] == "warning"
        per_cat = {c: v["anomalies"][code] for c, v in report.categories.items()}
        assert per_cat == {c: sum(1 for r in want[code] if samples[r].category == c) for c in report.categories}, code
    got_first = {f["row"]: f["prompt_of"]["row"] for f in report.flagged if f.get("prompt_of")}
    assert got_first == want["first_of"]
    for f in report.flagged:
        if f.get("prompt_of"):
            assert f["prompt_of"]["category"] == samples[f["prompt_of"]["row"]].category
            assert f["prompt_of"]["sample_id"] == samples[f["prompt_of"]["row"]].sample_id
    groups = report.data["prompt_groups"]
    firsts = set(want["first_of"].values())
    assert groups["groups"] == len(firsts)
    assert groups["samples"] == len(firsts) + len(want["first_of"])
    assert groups["cross_category"] == len({want["first_of"][r] for r in want["prompt_cross_category"]})
    assert groups["largest"][0]["size"] == 4 and groups["largest"][0]["differing"] == 3
    # A plain repeat is a duplicate and no prompt group; the hard negatives are nothing.
    repeats = {r for r, s in enumerate(samples) if s.sample_id.startswith("repeat")}
    assert repeats <= set(report.flagged_rows("duplicate"))
    negatives = {r for r, s in enumerate(samples) if s.sample_id.startswith("neg")}
    assert not negatives & {f["row"] for f in report.flagged}


def test_without_shared_prompts_there_is_no_section(tmp_path):
    path = synth.write_parquet_full(synth.build_corpus(n_clean=60, seed=2, anomalies_per_code=0), tmp_path / "c")
    report = tokscan.scan(str(path), profile="kimi-k2")
    assert "prompt_groups" not in report.data
    assert report.count("prompt_duplicate") == report.count("prompt_cross_category") == 0


def test_terminal_html_exclude_and_policy(samples, written, tmp_path):
    from rich.console import Console

    from tokscan.report.terminal import print_summary

    path = str(written["parquet_full"])
    report = tokscan.scan(path, profile="kimi-k2", policy={"prompt_duplicate": "error"})
    console = Console(record=True, width=160)
    print_summary(report, console)
    text = console.export_text()
    assert "prompt groups" in text and "prompt_duplicate" in text
    html = report.to_html()
    assert "id='prompt-groups'" in html and "same prompt as" in html
    assert report.anomalies["prompt_duplicate"]["severity"] == "error"
    assert "prompt_duplicate" in report.failures()
    relaxed = tokscan.scan(path, profile="kimi-k2", policy={"prompt_duplicate": "ignore"})
    assert relaxed.anomalies["prompt_duplicate"]["status"] == "ignored"
