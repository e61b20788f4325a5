"""The test-support library of issue 48 (`tests/hidden_dumps.py`), tested on its own: every layout reads back with
torch / safetensors as its writer lays it out, the stored states are the numpy model's, the model's own
completions agree with its states under a plain numpy oracle (and stop agreeing when the states are another
sample's, shifted, of the wrong layer or the wrong norm), every planted defect is in the file as `DEFECTS` says,
and the corpus scans clean with the real CLI."""

from __future__ import annotations

import gzip
import io
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler  # noqa: E402

import hidden_dumps as hd  # noqa: E402
from conftest import run_cli  # noqa: E402

N = 24


def load(path) -> dict:
    """A dump file as its trainer loads it: safetensors, or torch.load(weights_only=True) (gzip undone)."""
    if path.suffix == ".safetensors":
        return load_file(path)
    raw = path.read_bytes()
    return torch.load(io.BytesIO(gzip.decompress(raw) if path.suffix == ".gz" else raw), weights_only=True)


def bf16(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x, dtype=np.float32)).to(torch.bfloat16)


def oracle(last: np.ndarray, ids, positions, norm_weight, lm_head, eps, apply_norm: bool) -> float:
    """Plain numpy: the share of positions t where argmax(lm_head . norm(h_t)) == ids[t+1]."""
    h = np.asarray(last, dtype=np.float32)[positions]
    if apply_norm:
        h = h / np.sqrt((h * h).mean(-1, keepdims=True) + np.float32(eps)) * norm_weight
    return float(((h @ lm_head.T).argmax(1) == np.asarray(ids)[positions + 1]).mean())


# Each layout's keys -> (shape as a function of N, D, k aux layers, dtype), in the order its writer saves them.
SCHEMA = {
    "specforge": {
        "input_ids": (lambda n, d, k: [n], torch.int64),
        "loss_mask": (lambda n, d, k: [n], torch.int64),
        "hidden_state": (lambda n, d, k: [1, n, d], torch.bfloat16),
        "aux_hidden_state": (lambda n, d, k: [1, n, k * d], torch.bfloat16),
    },
    "speculators": {
        "token_ids": (lambda n, d, k: [n], torch.int64),
        "hidden_states": (lambda n, d, k: [n, k + 1, d], torch.bfloat16),
    },
    "modelopt": {
        "input_ids": (lambda n, d, k: [n], torch.int64),
        "hidden_states": (lambda n, d, k: [n, d], torch.bfloat16),
        "aux_hidden_states": (lambda n, d, k: [n, k * d], torch.bfloat16),
        "loss_mask": (lambda n, d, k: [n], torch.int64),
    },
    "angelslim": {
        "input_ids": (lambda n, d, k: [1, n], torch.int64),
        "loss_mask": (lambda n, d, k: [1, n], torch.int64),
        "hidden_states": (lambda n, d, k: [1, n, k * d], torch.bfloat16),
        "target_hiddens": (lambda n, d, k: [1, n, d], torch.bfloat16),
    },
}
NAMES = {
    "specforge": lambda i, s: f"rows_0-2000/data_{i}.ckpt",
    "speculators": lambda i, s: f"hs_{i}.safetensors",
    "speculators_pt": lambda i, s: f"data_{i}.pt",
    "modelopt": lambda i, s: f"{s.sample_id}.pt",
    "angelslim": lambda i, s: f"rank_0/rows_0-5000/data_{i}.ckpt",
}


def stored(layout: str, d: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The last state [N, D] and the aux layers side by side [N, k*D] of a loaded file."""
    if layout in ("speculators", "speculators_pt"):
        hs = d["hidden_states"] if layout == "speculators" else torch.stack(d["hidden_states"], 1)
        return hs[:, -1], hs[:, :-1].reshape(len(hs), -1)
    if layout == "modelopt":
        return d["hidden_states"], d["aux_hidden_states"]
    if layout == "angelslim":
        return d["target_hiddens"][0], d["hidden_states"][0]
    return d["hidden_state"][0], d["aux_hidden_state"][0]


@pytest.mark.parametrize("layout", list(hd.LAYOUTS))
def test_every_layout_is_laid_out_as_its_writer_does_and_holds_the_models_states(tmp_path, layout):
    b = hd.build(tmp_path, layout, n=6)
    m, k = b.model, len(b.model.aux_layers)
    assert [f.sample for f in b.files] == list(range(6))
    for i, s in enumerate(b.samples):
        (f,) = b.files_of(i)
        assert f.path.relative_to(b.dump_dir).as_posix() == NAMES[layout](i, s)
        d, n = load(f.path), len(s.ids)
        if layout == "speculators_pt":
            assert list(d) == ["input_ids", "hidden_states", "loss_mask"]
            assert [tuple(x.shape) for x in d["hidden_states"]] == [(n, m.dim)] * (k + 1)
            assert all(x.dtype == torch.bfloat16 for x in d["hidden_states"])
        else:
            assert list(d) == list(SCHEMA[layout]) + (["conversation_id"] if layout == "modelopt" else [])
            for key, (shape, dtype) in SCHEMA[layout].items():
                assert list(d[key].shape) == shape(n, m.dim, k) and d[key].dtype == dtype, key
        ids = d.get("input_ids", d.get("token_ids")).reshape(-1)
        assert ids.tolist() == s.ids
        if "loss_mask" in d:
            assert d["loss_mask"].reshape(-1).tolist() == s.mask()
        if layout == "modelopt":
            assert d["conversation_id"] == s.sample_id
        # The states are the numpy model's, the last one before or after the final norm as the writer takes it.
        states = m.forward(s.ids)
        last = m.normed_last(s.ids) if hd.FINAL_NORM[layout] == "after" else states[-1]
        aux = np.concatenate([states[a] for a in m.aux_layers], axis=1)
        got_last, got_aux = stored(layout, d)
        assert torch.equal(got_last, bf16(last)) and torch.equal(got_aux, bf16(aux))
        c = hd.read_capture(f.path, layout)
        assert np.array_equal(c.last, bf16(last).float().numpy()) and c.aux.shape == (n, k, m.dim)
    if layout == "speculators_pt":
        config = json.loads((b.dump_dir / "data_config.json").read_text())
        assert config["hidden_states"]["layer_ids"] == [*m.aux_layers, m.n_layers] == list(b.layer_ids)
        assert config["format"]["file_pattern"] == "data_{idx}.pt"
        lengths = json.loads((b.dump_dir / "sample_lengths.json").read_text())
        assert lengths == {str(i): len(s.ids) for i, s in enumerate(b.samples)}


@pytest.mark.parametrize("shards,dtype", [(1, "bf16"), (2, "f32")])
def test_the_target_model_directory(tmp_path, shards, dtype):
    m = hd.tiny_model()
    out = hd.write_target_model(m, tmp_path, dtype=dtype, shards=shards)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert config["torch_dtype"] == {"bf16": "bfloat16", "f32": "float32"}[dtype]
    assert (config["hidden_size"], config["vocab_size"], config["num_hidden_layers"]) == (m.dim, 163840, m.n_layers)
    assert config["tie_word_embeddings"] is False and config["rms_norm_eps"] == m.eps
    if shards == 1:
        files = ["model.safetensors"]
        assert not (out / "model.safetensors.index.json").exists()
    else:
        index = json.loads((out / "model.safetensors.index.json").read_text())
        files = sorted(set(index["weight_map"].values()))
        assert files == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        assert index["weight_map"]["lm_head.weight"] != index["weight_map"]["model.norm.weight"]
        assert sum(len(load_file(out / f)) for f in files) == len(index["weight_map"])
    tensors = {k: v for f in files for k, v in load_file(out / f).items()}
    want = torch.bfloat16 if dtype == "bf16" else torch.float32
    assert {tensors[k].dtype for k in tensors} == {want}
    assert tensors["lm_head.weight"].shape == (163840, m.dim) and tensors["model.norm.weight"].shape == (m.dim,)
    assert "model.embed_tokens.weight" in tensors and "model.layers.0.self_attn.o_proj.weight" in tensors
    # The weights are bf16 values: the checkpoint is the model itself, in either dtype.
    assert np.array_equal(tensors["lm_head.weight"].float().numpy(), m.lm_head)
    assert np.array_equal(tensors["model.norm.weight"].float().numpy(), m.norm_weight)
    t = hd.read_target(out)
    assert np.array_equal(t.lm_head, m.lm_head) and t.eps == m.eps


def test_the_model_is_causal_and_wrote_its_own_completions():
    m = hd.tiny_model()
    s = hd.make_samples(N)[5]
    full = m.forward(s.ids)
    assert np.allclose(m.forward(s.ids[:40]), full[:, :40], rtol=0, atol=1e-12)
    predicted = m.predict(s.ids)
    pos = hd.completion_positions(s)
    forced = np.isin(np.asarray(s.ids)[pos + 1], [hd.UNTHINK, hd.IM_END])
    assert (predicted[pos][~forced] == np.asarray(s.ids)[pos + 1][~forced]).all()
    assert forced.sum() == 2 and max(s.completion[: s.thinking]) < hd.FIRST_SPECIAL
    assert s.completion[s.thinking] == hd.UNTHINK and s.completion[-1] == hd.IM_END


@pytest.mark.parametrize("layout", ["specforge", "speculators"])
def test_greedy_agreement_is_high_and_drops_for_wrong_states(tmp_path, layout):
    """The clean files' states predict their own completions (numpy oracle over the checkpoint's norm and
    lm_head, the norm applied to a before-norm dump); another sample's, shifted, layer L-1 or other-norm
    states do not."""
    bad = {1: "other_sample", 2: "shifted_states", 3: "wrong_layer", 4: "prenorm"}
    b = hd.build(tmp_path, layout, n=12, plant=bad)
    config = json.loads((b.model_dir / "config.json").read_text())
    weights = load_file(b.model_dir / "model.safetensors")
    norm_weight, lm_head = weights["model.norm.weight"].float().numpy(), weights["lm_head.weight"].float().numpy()
    target = hd.read_target(b.model_dir)
    by_defect: dict[str | None, list[float]] = {}
    for f in b.files:
        s, c = b.samples[f.sample], hd.read_capture(f.path, layout)
        pos = hd.completion_positions(s)
        a = oracle(c.last, c.ids, pos, norm_weight, lm_head, config["rms_norm_eps"], b.final_norm == "before")
        if f.sample < 6:  # the library's oracle is this one
            assert abs(a - hd.agreement(c.last, c.ids, pos, target, b.final_norm == "before")) <= 1 / len(pos)
        by_defect.setdefault(f.defect, []).append(a)
    assert min(by_defect[None]) > 0.9 and len(by_defect[None]) == 12 - len(bad)
    assert by_defect["other_sample"][0] < 0.05 and by_defect["shifted_states"][0] < 0.05
    assert by_defect["wrong_layer"][0] < 0.2
    assert by_defect["prenorm"][0] < (0.2 if layout == "specforge" else 0.5)


def test_f32_states_agree_everywhere_but_the_forced_tokens(tmp_path):
    b = hd.build(tmp_path, "specforge", n=12, dtype="f32")
    t = hd.read_target(b.model_dir)
    for f in b.files:
        s, c = b.samples[f.sample], hd.read_capture(f.path, "specforge")
        assert c.last.dtype == np.float32 and load(f.path)["hidden_state"].dtype == torch.float32
        assert hd.agreement(c.last, c.ids, hd.completion_positions(s), t, False) == 1 - 2 / len(s.completion)


def test_a_foreign_category_does_not_agree(tmp_path):
    ours, theirs = hd.DEFAULT_CATEGORIES
    b = hd.build(tmp_path, "modelopt", n=8, foreign=[theirs])
    t = hd.read_target(b.model_dir)
    for f in b.files:
        s = b.samples[f.sample]
        a = hd.agreement(hd.read_capture(f.path, "modelopt").last, s.ids, hd.completion_positions(s), t, False)
        assert (a > 0.9) if s.category == ours else (a < 0.05)


def test_every_defect_is_in_the_file_as_documented(tmp_path):
    plant = {i: d for i, d in enumerate(hd.DEFECTS)}
    b = hd.build(tmp_path, "specforge", n=N, plant=plant)
    m = b.model
    long_row = list(plant.values()).index("truncated")
    assert b.max_length == max(len(s.ids) for i, s in enumerate(b.samples) if i != long_row)
    for i, defect in plant.items():
        s, files = b.samples[i], b.files_of(i)
        ids, mask = np.asarray(s.ids), np.asarray(s.mask())
        if defect == "missing":
            assert files == []
            continue
        if defect == "duplicate":
            assert len(files) == 2 and files[0].path != files[1].path
            a, c = load(files[0].path), load(files[1].path)
            assert all(torch.equal(a[k], c[k]) for k in a)
            continue
        (f,) = files
        if defect == "cut":
            with pytest.raises((RuntimeError, ValueError)):  # torch's zip reader fails one way or another
                load(f.path)
            assert f.path.stat().st_size == int(f.detail.split()[0])
            continue
        d = load(f.path)
        last, aux = d["hidden_state"][0].float().numpy(), d["aux_hidden_state"][0].float().numpy()
        got_ids, got_mask = d["input_ids"].numpy(), d["loss_mask"].numpy()
        want_last = bf16(m.normed_last(s.ids)).float().numpy()
        if defect == "truncated":
            assert len(s.ids) > b.max_length == len(got_ids) == len(last) == len(aux)
            assert (got_ids == ids[: b.max_length]).all()
            continue
        if defect == "short":
            assert len(got_ids) == len(got_mask) == len(last) == len(aux) == len(ids) - hd.SHORT
            continue
        if defect == "short_states":
            assert len(got_ids) == len(ids) and len(last) == len(aux) == len(ids) - hd.SHORT
            continue
        assert len(got_ids) == len(ids) == len(last)
        changed_ids = np.flatnonzero(got_ids != ids)
        assert len(changed_ids) == (1 if defect == "ids" else 0), defect
        if defect == "ids":
            assert changed_ids[0] >= len(s.prompt) and ids[changed_ids[0]] < hd.FIRST_SPECIAL
        assert (got_mask == (np.concatenate([[0], mask[:-1]]) if defect == "mask_shift" else mask)).all()
        nan, inf = np.isnan(last), np.isinf(last)
        assert (nan.sum(), inf.sum()) == {"nan": (1, 0), "inf": (0, 1)}.get(defect, (0, 0)), defect
        assert np.isfinite(aux).all()
        zero = np.flatnonzero((last == 0).all(1) & (aux == 0).all(1))
        assert len(zero) == (hd.ZERO_ROWS if defect == "zero_rows" else 0), defect
        if defect == "zero_rows":
            assert zero.max() - zero.min() == hd.ZERO_ROWS - 1 and zero.min() >= len(s.prompt)
        if defect == "shape":
            assert aux.shape[1] == (len(m.aux_layers) - 1) * m.dim
        expected = {
            "prenorm": bf16(m.forward(s.ids)[-1]),
            "wrong_layer": bf16(m.norm(m.forward(s.ids)[-2])),
            "shifted_states": bf16(np.concatenate([m.normed_last(s.ids)[:1], m.normed_last(s.ids)[:-1]])),
        }
        if defect in expected:
            assert np.array_equal(last, expected[defect].float().numpy()), defect
        elif defect == "other_sample":
            (j,) = [k for k, o in enumerate(b.samples) if o.sample_id == f.detail.split()[-1]]
            assert j != i and len(b.samples[j].ids) >= len(ids)
            assert np.array_equal(last, bf16(m.normed_last(b.samples[j].ids)[: len(ids)]).float().numpy())
        else:  # the rest of the last state is the clean one
            keep = np.isfinite(last) & ~np.isin(np.arange(len(last)), zero)[:, None]
            assert np.array_equal(last[keep], want_last[keep]), defect
    # The orphan: an extra file whose ids are no sample's; the row it was planted at keeps its own file.
    (orphan,) = [f for f in b.files if f.sample is None]
    assert orphan.defect == "orphan" and len(b.files_of(list(plant.values()).index("orphan"))) == 1
    assert load(orphan.path)["input_ids"].tolist() not in [s.ids for s in b.samples]
    assert load(orphan.path)["input_ids"].tolist() == b.orphans[0].ids
    # The extra files take the names after the last one: the duplicate's second file, then the orphan.
    assert [(f.path.name, f.defect) for f in b.files[-2:]] == [
        (f"data_{N}.ckpt", "duplicate"),
        (f"data_{N + 1}.ckpt", "orphan"),
    ]


@pytest.mark.parametrize("layout", list(hd.LAYOUTS))
def test_every_defect_can_be_planted_in_every_layout(tmp_path, layout):
    plant = {i: d for i, d in enumerate(hd.DEFECTS) if hd.LAYOUTS[layout].has_mask or d != "mask_shift"}
    b = hd.build(tmp_path, layout, n=N, plant=plant)
    names = [f.path for f in b.files]
    assert len(set(names)) == len(names) and all(p.exists() for p in names)
    assert len(b.files) == N - 1 + 1 + 1  # one missing, one duplicate, one orphan
    for f in b.files:
        if f.defect != "cut":
            c = hd.read_capture(f.path, layout)
            assert (c.aux.shape[1] == len(b.model.aux_layers) - 1) == (f.defect == "shape")
    if layout == "modelopt":
        dup = [f for f in b.files if f.defect == "duplicate"]
        assert {load(f.path)["conversation_id"] for f in dup} == {b.samples[dup[0].sample].sample_id}


def torch_sampler_order(n: int, dp: int, batch_size: int) -> list[list[list[int]]]:
    """Rows per rank per batch, as torch's own DistributedSampler + DataLoader(drop_last=True) deal them."""
    return [
        [
            b.tolist()
            for b in DataLoader(
                range(n),
                batch_size,
                sampler=DistributedSampler(range(n), num_replicas=dp, rank=r, shuffle=False),
                drop_last=True,
            )
        ]
        for r in range(dp)
    ]


def test_specforge_data_parallel_names_and_batch_padding(tmp_path):
    n, dp, bs = 25, 2, 4
    b = hd.build(tmp_path, "specforge", n=n, dp=dp, batch_size=bs, pad=True)
    ranks = torch_sampler_order(n, dp, bs)
    want = {}
    for r, batches in enumerate(ranks):
        count = n // dp + (r < n % dp)
        start = r * count + (0 if r < n % dp else n % dp)
        rows = [row for batch in batches for row in batch]
        for k, row in enumerate(rows):
            want.setdefault(f"data_{start + k}.ckpt", row)
    assert {f.path.name: f.sample for f in b.files} == want
    assert any(f.sample != int(f.path.stem.split("_")[1]) for f in b.files)  # data_i is not row i
    assert 24 not in {f.sample for f in b.files}  # dropped with rank 0's last incomplete batch
    for f in b.files:
        s, d = b.samples[f.sample], load(f.path)
        ids, batch = d["input_ids"].numpy(), next(bt for r in ranks for bt in r if f.sample in bt)
        assert len(ids) == max(len(b.samples[row].ids) for row in batch)
        n_s = len(s.ids)
        assert ids[:n_s].tolist() == s.ids and not ids[n_s:].any() and not d["loss_mask"].numpy()[n_s:].any()
        # Causal: the sample's rows are its own states; the padding rows are the model's over token 0.
        want_last = bf16(b.model.normed_last(list(ids))).float().numpy()
        assert np.array_equal(d["hidden_state"][0].float().numpy(), want_last)


def test_specforge_compressed_and_angelslim_ranks(tmp_path):
    b = hd.build(tmp_path / "gz", "specforge", n=5, compress=True)
    assert [f.path.name for f in b.files] == [f"data_{i}.ckpt.gz" for i in range(5)]
    assert load(b.files[0].path)["input_ids"].tolist() == b.samples[0].ids
    b = hd.build(tmp_path / "as", "angelslim", n=10, dp=3)
    rel = [f.path.relative_to(b.dump_dir).as_posix() for f in b.files]
    assert rel == [f"rank_{r}/rows_0-5000/data_{k}.ckpt" for r, size in enumerate((4, 3, 3)) for k in range(size)]
    assert [f.sample for f in b.files] == list(range(10))


def test_planting_changes_only_the_planted_samples(tmp_path):
    clean = hd.build(tmp_path / "clean", "speculators", n=N)
    planted = hd.build(tmp_path / "planted", "speculators", n=N, plant={2: "truncated", 9: "nan"})
    others = [k for k in range(N) if k != 2]
    assert [clean.samples[k].ids for k in others] == [planted.samples[k].ids for k in others]
    assert clean.max_length is None and planted.max_length == max(len(clean.samples[k].ids) for k in others)
    assert len(planted.samples[2].ids) > planted.max_length
    assert (tmp_path / "clean/dump/hs_0.safetensors").read_bytes() == (
        tmp_path / "planted/dump/hs_0.safetensors"
    ).read_bytes()


@pytest.mark.parametrize(
    "layout,kwargs,message",
    [
        ("specforge", {"plant": {0: "nonsense"}}, "unknown defect"),
        ("speculators", {"plant": {0: "mask_shift"}}, "no loss mask"),
        ("modelopt", {"dp": 2}, "dp names files"),
        ("angelslim", {"compress": True}, "SpecForge options"),
        ("specforge", {"pad": True, "batch_size": 2, "plant": {1: "short"}}, "padded"),
    ],
)
def test_what_cannot_be_built_is_refused(tmp_path, layout, kwargs, message):
    with pytest.raises(ValueError, match=message):
        hd.build(tmp_path, layout, n=4, **kwargs)


def test_the_corpus_scans_clean(tmp_path):
    b = hd.build(tmp_path, "specforge", n=N)
    r = run_cli("scan", str(b.corpus_dir), "--format", "json", "--no-progress")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["n_samples"] == N and report["n_tokens"] == sum(len(s.ids) for s in b.samples)
    found = {c: a["severity"] for c, a in report["anomalies"].items() if a["count"]}
    assert not {c for c, sev in found.items() if sev in ("error", "warning")}, found
    assert {c: v["samples"] for c, v in report["categories"].items()} == dict.fromkeys(hd.DEFAULT_CATEGORIES, N // 2)
    assert report["verdict"]["passed"]
