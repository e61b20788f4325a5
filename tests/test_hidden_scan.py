"""Issue 48 end to end: `tokscan scan CORPUS --hidden-states DIR [--target-model DIR]` on real dumps written by
`torch.save` and `safetensors` in each writer's layout (`tests/hidden_dumps.py`: a tiny numpy causal model that
generated its own completions and dumped its own states). Clean dumps give no finding; every defect planted is
found on its sample with its code; pairing, the norm convention and next-token agreement are checked against
the library's own account of what it wrote and a plain numpy oracle."""

from __future__ import annotations

import json
import pickle

import pytest

pytest.importorskip("torch")

import tokscan

import hidden_dumps as hd
from conftest import run_cli

N = 24
#: Where each layout's files pair with their samples from.
RULE = {"specforge": "index", "speculators": "index", "speculators_pt": "index", "modelopt": "sample_id"}
RULE["angelslim"] = "content"
#: The core's name of each layout of the library.
CORE_LAYOUT = {
    "specforge": "specforge",
    "speculators": "speculators",
    "speculators_pt": "speculators_legacy",
    "modelopt": "model_optimizer",
    "angelslim": "angelslim",
}
#: The code each defect is found as.
CODE = {
    "missing": "hidden_missing",
    "cut": "hidden_unreadable",
    "duplicate": "hidden_duplicate",
    "shape": "hidden_shape",
    "short": "hidden_length",
    "short_states": "hidden_shape",
    # One sample cut at the longest file's length is a short capture like any other: a max length is told from
    # two or more (test_truncation_at_a_max_length).
    "truncated": "hidden_length",
    "ids": "hidden_ids_mismatch",
    "mask_shift": "hidden_mask_mismatch",
    "nan": "hidden_nonfinite",
    "inf": "hidden_nonfinite",
    "zero_rows": "hidden_zero_rows",
    "prenorm": "hidden_norm",
    "other_sample": "hidden_disagree",
    "shifted_states": "hidden_disagree",
    "wrong_layer": "hidden_disagree",
}


def scan(b: hd.Built, target: bool = True, **kw) -> dict:
    report = tokscan.scan(
        str(b.corpus_dir),
        hidden_states=b.dump_dir,
        target_model=b.model_dir if target else None,
        **kw,
    )
    return report.data


def hidden_flags(report: dict) -> dict[int, set[str]]:
    return {
        f["row"]: {c for c in f["codes"] if c.startswith("hidden_")}
        for f in report["flagged"]
        if any(c.startswith("hidden_") for c in f["codes"])
    }


@pytest.mark.parametrize("layout", list(hd.LAYOUTS))
def test_a_clean_dump_of_every_layout_gives_no_finding(tmp_path, layout):
    b = hd.build(tmp_path, layout, n=N)
    r = scan(b)
    h = r["hidden_states"]
    assert hidden_flags(r) == {}
    assert {c for c, a in r["anomalies"].items() if a["count"] and c.startswith("hidden_")} == set()
    assert h["layout"] == CORE_LAYOUT[layout] and h["layout_from"] == "names and keys"
    assert h["files"] == N and h["pairing"]["rule"] == RULE[layout]
    assert h["pairing"]["by_rule"] == {RULE[layout]: N} and h["pairing"]["unpaired_count"] == 0
    assert h["positions"] == sum(len(s.ids) for s in b.samples)
    assert h["hidden_size"] == b.model.dim and h["dtype"] == "bf16"
    assert h["norm"]["convention"] == b.final_norm and h["norm"]["files_departing"] == 0
    a = h["agreement"]
    assert a["samples"] == N and a["positions"] == N * 16
    assert a["agreed"] / a["positions"] > 0.9
    assert a["norm_applied"] == (b.final_norm == "before")
    assert set(a["categories"]) == set(hd.DEFAULT_CATEGORIES)
    assert r["verdict"]["passed"]


def plantable(layout: str) -> list[str]:
    spec = hd.LAYOUTS[layout]
    return [d for d in CODE if spec.has_mask or d != "mask_shift"]


@pytest.mark.parametrize("layout", ["specforge", "speculators", "speculators_pt", "modelopt"])
def test_every_defect_is_found_on_its_sample(tmp_path, layout):
    defects = plantable(layout)
    plant = {i + 1: d for i, d in enumerate(defects)}
    plant[len(defects) + 2] = "orphan"
    b = hd.build(tmp_path, layout, n=len(defects) + 5, plant=plant)
    r = scan(b)
    got = hidden_flags(r)
    for row, d in plant.items():
        if d == "orphan":
            continue
        assert CODE[d] in got.get(row, set()), (d, got.get(row))
    # Nothing else is flagged: an extra code on a planted sample is one the defect implies.
    assert set(got) == {row for row, d in plant.items() if d != "orphan"}
    implied = {"prenorm": {"hidden_disagree"}}
    for row, codes in got.items():
        assert codes - {CODE[plant[row]]} <= implied.get(plant[row], set()), (plant[row], codes)
    h = r["hidden_states"]
    assert h["pairing"]["unpaired_count"] == 1
    assert r["anomalies"]["hidden_orphan"]["count"] == 1
    # Evidence: the file, how it paired, and what was found.
    by_row = {f["row"]: f for f in r["flagged"]}
    shift = next(row for row, d in plant.items() if d in ("mask_shift", "ids"))
    assert by_row[shift]["hidden_states"]["file"] and by_row[shift]["hidden_states"]["paired_by"] == RULE[layout]
    dup = next(row for row, d in plant.items() if d == "duplicate")
    assert len(by_row[dup]["hidden_states"]["other_files"]) == 1
    assert h["max_length"] is None
    other = next(row for row, d in plant.items() if d == "other_sample")
    a = by_row[other]["hidden_states"]["agreement"]
    assert a["positions"] == 16 and a["agreed"] / a["positions"] < 0.25 and a["disagreements"]


def test_a_mask_shifted_by_one_is_named_so(tmp_path):
    b = hd.build(tmp_path, "specforge", n=6, plant={2: "mask_shift"})
    f = next(f for f in scan(b, target=False)["flagged"] if f["row"] == 2)
    assert "shifted one position later" in f["hidden_states"]["findings"]["hidden_mask_mismatch"]


def test_data_parallel_specforge_names_pair_by_content(tmp_path):
    """SpecForge with DP=2 numbers files per rank: data_i is not row i, and a rank's last incomplete batch is
    dropped. The report pairs by content, says why, and flags the samples left without a file."""
    n = 25
    b = hd.build(tmp_path, "specforge", n=n, dp=2, batch_size=4, pad=True)
    r = scan(b)
    h = r["hidden_states"]
    assert h["pairing"]["rule"] == "content" and "not corpus rows" in h["pairing"]["note"]
    written = {f.sample for f in b.files}
    assert set(hidden_flags(r)) == set(range(n)) - written
    assert all(codes == {"hidden_missing"} for codes in hidden_flags(r).values())
    # Batch padding rows (ids 0, mask 0) are not defects; the states still predict their samples.
    assert h["agreement"]["agreed"] / h["agreement"]["positions"] > 0.9


def test_gzip_and_a_sharded_f32_target(tmp_path):
    b = hd.build(tmp_path, "specforge", n=8, compress=True, dtype="f32", shards=2)
    r = scan(b)
    h = r["hidden_states"]
    assert hidden_flags(r) == {} and h["containers"] == {"torch_zip_gz": 8} and h["dtype"] == "f32"
    assert [t.split(" ")[0] for t in h["agreement"]["read"]] == ["model.norm.weight", "lm_head.weight"]
    # f32 states agree wherever the model chose the token (all but the forced structure tokens).
    assert h["agreement"]["agreed"] / h["agreement"]["positions"] > 0.95


def test_agreement_matches_a_numpy_oracle(tmp_path):
    b = hd.build(tmp_path, "speculators", n=6, dtype="f32", plant={3: "wrong_layer"})
    r = scan(b, agreement_positions=0)
    t = hd.read_target(b.model_dir)
    by_row = {f["row"]: f for f in r["flagged"]}
    cap = hd.read_capture(b.files_of(3)[0].path, "speculators")
    s = b.samples[3]
    positions = hd.completion_positions(s) - 1
    want = hd.agreement(cap.last, s.ids, positions, t, apply_norm=True)
    a = by_row[3]["hidden_states"]["agreement"]
    assert a["positions"] == len(positions)
    assert a["agreed"] / a["positions"] == pytest.approx(want)


def test_a_dump_stored_on_the_wrong_side_of_the_norm(tmp_path):
    """speculators #313: states stored before the final norm where SpecForge's trainer applies lm_head to them
    directly. With the target: one finding for the corpus; without, the convention is not decided."""
    b = hd.build(tmp_path, "specforge", n=8, final_norm="before")
    r = scan(b)
    assert r["hidden_states"]["norm"]["convention"] == "before"
    assert r["anomalies"]["hidden_convention"]["count"] == 1 and hidden_flags(r) == {}
    r = scan(b, target=False)
    assert r["hidden_states"]["norm"]["convention"] is None and r["hidden_states"]["agreement"] is None
    assert set(r["not_checked"]) >= {"hidden_disagree", "hidden_convention"}


def test_truncation_at_a_max_length(tmp_path):
    b = hd.build(tmp_path, "speculators", n=10, max_length=120)
    r = scan(b)
    longer = {i for i, s in enumerate(b.samples) if len(s.ids) > 120}
    assert longer and r["hidden_states"]["max_length"] == 120
    assert hidden_flags(r) == {row: {"hidden_truncated"} for row in longer}
    assert r["verdict"]["passed"]


def test_a_file_that_would_run_code_is_refused_without_running(tmp_path):
    b = hd.build(tmp_path, "specforge", n=4)
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    import zipfile

    path = next(b.dump_dir.rglob("data_2.ckpt"))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("data_2/data.pkl", pickle.dumps({"input_ids": Evil()}, protocol=2))
    r = scan(b)
    f = next(f for f in r["flagged"] if f["row"] == 2)
    assert f["codes"] == ["hidden_unreadable"] and "open" in f["hidden_states"]["findings"]["hidden_unreadable"]
    assert not marker.exists()


def test_the_cli_end_to_end(tmp_path):
    b = hd.build(tmp_path, "specforge", n=10, plant={4: "other_sample", 6: "missing"})
    out, excl = tmp_path / "r.json", tmp_path / "exclude.txt"
    args = ["scan", str(b.corpus_dir), "--hidden-states", str(b.dump_dir), "--target-model", str(b.model_dir)]
    r = run_cli(*args, "--json", str(out), "--exclude", str(excl), "--no-progress")
    assert r.returncode == 1, r.stderr
    assert "hidden states" in r.stdout and "paired by index" in r.stdout and "next-token agreement" in r.stdout
    assert "hidden_disagree" in r.stdout and "hidden_missing" in r.stdout
    report = json.loads(out.read_text())
    assert set(hidden_flags(report)) == {4, 6}
    assert "s000004" in excl.read_text() and "s000006" in excl.read_text()
    html = tmp_path / "r.html"
    assert run_cli(*args, "--html", str(html), "-q").returncode == 1
    assert "id='hidden-states'" in html.read_text()


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--hidden-states", "{missing}"], "no such file or directory"),
        (["--hidden-states", "{corpus}/part-000.parquet"], "takes the dump's directory"),
        (["--hidden-states", "{empty}"], "no hidden-state file in the directory"),
        (["--target-model", "{model}"], "go with --hidden-states"),
        (["--hidden-states", "{dump}", "--target-model", "{empty}"], "config.json"),
        (["--hidden-states", "{dump}", "--hidden-layout", "nope"], "not a dump layout"),
        (["--hidden-states", "{dump}", "--agreement-min", "2"], "--agreement-min"),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path, extra, message):
    b = hd.build(tmp_path, "specforge", n=4)
    (tmp_path / "empty").mkdir()
    names = {
        "missing": tmp_path / "nope",
        "corpus": b.corpus_dir,
        "empty": tmp_path / "empty",
        "model": b.model_dir,
        "dump": b.dump_dir,
    }
    r = run_cli("scan", str(b.corpus_dir), *[e.format(**names) for e in extra], "--no-progress")
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_target_of_another_width_is_refused(tmp_path):
    b = hd.build(tmp_path / "a", "specforge", n=4)
    cfg = json.loads((b.model_dir / "config.json").read_text())
    cfg["hidden_size"] = 32
    (b.model_dir / "config.json").write_text(json.dumps(cfg))
    r = run_cli("scan", str(b.corpus_dir), "--hidden-states", str(b.dump_dir), "--target-model", str(b.model_dir), "-q")
    assert r.returncode == 2 and "model.norm.weight" in r.stderr, r.stderr


def test_show_prints_one_samples_dump(tmp_path):
    b = hd.build(tmp_path, "speculators", n=8, plant={3: "shifted_states", 5: "missing"})
    args = ["show", str(b.corpus_dir), "--hidden-states", str(b.dump_dir), "--target-model", str(b.model_dir)]
    r = run_cli(*args, "--row", "3", "--json", str(tmp_path / "s.json"))
    assert r.returncode == 0, r.stderr
    assert "hs_3.safetensors" in r.stdout and "paired by index" in r.stdout and "hidden_disagree" in r.stdout
    h = json.loads((tmp_path / "s.json").read_text())["hidden_states"]
    assert [t["name"] for t in h["tensors"]] == ["token_ids", "hidden_states"]
    assert h["convention"] == "before" and h["agreement"]["agreed"] == 0 and h["agreement"]["disagreements"]
    r = run_cli(*args, "--row", "5")
    assert r.returncode == 0 and "no file pairs with this sample" in r.stdout, r.stderr
    r = run_cli(*args, "--row", "4")
    assert not [c for c in set(CODE.values()) if c in r.stdout] and "next-token agreement" in r.stdout


def test_without_a_target_a_file_off_the_dumps_scale_is_named(tmp_path):
    """No target: the convention is not decided, but a file whose states are stored before the norm in an
    after-norm dump stands out by its row RMS (the samples are read again for their entries)."""
    b = hd.build(tmp_path, "specforge", n=12, plant={3: "prenorm", 8: "prenorm"})
    r = scan(b, target=False)
    assert hidden_flags(r) == {3: {"hidden_norm"}, 8: {"hidden_norm"}}
    by_row = {f["row"]: f for f in r["flagged"]}
    assert by_row[8]["sample_id"] == b.samples[8].sample_id and by_row[8]["hidden_states"]["file"]
    assert r["hidden_states"]["norm"]["files_departing"] == 2


def test_an_output_never_replaces_a_dump_or_model_file(tmp_path):
    b = hd.build(tmp_path, "specforge", n=4)
    victim = next(b.dump_dir.rglob("data_1.ckpt"))
    before = victim.read_bytes()
    for out in (victim, b.model_dir / "config.json"):
        r = run_cli(
            "scan", str(b.corpus_dir), "--hidden-states", str(b.dump_dir), "--target-model", str(b.model_dir),
            "--json", str(out), "-q",
        )  # fmt: skip
        assert r.returncode == 2 and "must not overlap the input" in r.stderr, r.stderr
    assert victim.read_bytes() == before


def test_hostile_dumps_are_findings_not_crashes(tmp_path):
    """From a review's hunt: a tensor of no row with an enormous width, a link back up the dump's tree, a
    short capture of the corpus's longest sample, integer states, a stray file of another layout."""
    import os

    import torch

    b = hd.build(tmp_path, "specforge", n=8)
    files = sorted(b.dump_dir.rglob("*.ckpt"))
    data = torch.load(files[2], weights_only=True)
    data["aux_hidden_state"] = torch.zeros(1, 0, 10**15, dtype=torch.bfloat16)[:, :0]
    torch.save(data, files[2])
    data = torch.load(files[4], weights_only=True)
    data["hidden_state"] = data["hidden_state"].to(torch.int64)
    torch.save(data, files[4])
    os.symlink(".", files[0].parent / "loop")
    longest = max(range(8), key=lambda i: len(b.samples[i].ids))
    data = torch.load(files[longest], weights_only=True)
    torch.save({k: (v[..., :-4, :] if v.dim() == 3 else v[:-4]) for k, v in data.items()}, files[longest])
    r = scan(b)
    got = hidden_flags(r)
    assert "hidden_shape" in got[2] and got[4] == {"hidden_shape"}
    assert got[longest] == {"hidden_length"} and r["hidden_states"]["max_length"] is None
    assert r["hidden_states"]["files"] == 8 and not r["hidden_states"]["pairing"]["unpaired"]
    assert any("symbolic link" in why for _path, why in r["hidden_states"]["skipped"])
