"""Hidden-state dump files as their writers write them (issue 48, the reader): a `torch.save` zip as SpecForge,
AngelSlim, Model-Optimizer and the older speculators write it, its gzip (SpecForge `--compress`), and safetensors
as speculators writes it, each read by the core without torch and without running anything in the file, checked
against `torch.load` / `safetensors` reading the same bytes."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

import tokscan
from tokscan import _core

torch = pytest.importorskip("torch")


def header(path: Path) -> dict:
    return json.loads(_core.hidden_state_header(path))


def tensor_bytes(path: Path, t: dict, raw: bytes | None = None) -> bytes:
    data = raw if raw is not None else path.read_bytes()
    return data[t["offset"] : t["offset"] + t["bytes"]]


def as_bytes(x) -> bytes:
    if x.dtype == torch.bfloat16:
        return x.contiguous().view(torch.int16).numpy().tobytes()
    return x.contiguous().numpy().tobytes()


def specforge(n: int, d: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.arange(n, dtype=torch.int64) + 7,
        "loss_mask": (torch.arange(n) >= n // 2).to(torch.int64),
        "hidden_state": torch.randn(1, n, d, generator=g).to(torch.bfloat16),
        "aux_hidden_state": torch.randn(1, n, 3 * d, generator=g).to(torch.bfloat16),
    }


@pytest.mark.parametrize("compress", [False, True])
def test_a_specforge_file_is_read_as_torch_reads_it(tmp_path, compress):
    saved = specforge(37, 16)
    path = tmp_path / ("data_0.ckpt.gz" if compress else "data_0.ckpt")
    if compress:
        import io

        buf = io.BytesIO()
        torch.save(saved, buf)
        path.write_bytes(gzip.compress(buf.getvalue()))
        raw = buf.getvalue()
    else:
        torch.save(saved, path)
        raw = None
    h = header(path)
    assert h["container"] == ("torch_zip_gz" if compress else "torch_zip")
    assert [t["name"] for t in h["tensors"]] == list(saved)
    want = {"input_ids": "i64", "loss_mask": "i64", "hidden_state": "bf16", "aux_hidden_state": "bf16"}
    for t in h["tensors"]:
        x = saved[t["name"]]
        assert t["dtype"] == want[t["name"]] and t["shape"] == list(x.shape)
        # The bytes the header points at are the tensor's, as torch.load reads them.
        assert tensor_bytes(path, t, raw) == as_bytes(x), t["name"]


def test_model_optimizer_and_older_speculators_files(tmp_path):
    """Model-Optimizer's `{conversation_id}.pt` holds a string beside its tensors; the older speculators'
    `data_{i}.pt` holds a list of per-layer tensors (named `hidden_states.0` ...)."""
    n, d = 11, 8
    mo = {
        "input_ids": torch.arange(n),
        "hidden_states": torch.randn(n, d).to(torch.bfloat16),
        "aux_hidden_states": torch.randn(n, 3 * d).to(torch.bfloat16),
        "loss_mask": torch.ones(n, dtype=torch.int64),
        "conversation_id": "conv-42",
    }
    torch.save(mo, tmp_path / "conv-42.pt")
    h = header(tmp_path / "conv-42.pt")
    assert [t["name"] for t in h["tensors"]] == ["input_ids", "hidden_states", "aux_hidden_states", "loss_mask"]
    old = {"input_ids": torch.arange(n), "hidden_states": [torch.randn(n, d).to(torch.bfloat16) for _ in range(4)]}
    torch.save(old, tmp_path / "data_3.pt")
    h = header(tmp_path / "data_3.pt")
    names = [t["name"] for t in h["tensors"]]
    assert names == ["input_ids", *(f"hidden_states.{i}" for i in range(4))]
    for t, x in zip(h["tensors"][1:], old["hidden_states"], strict=True):
        assert tensor_bytes(tmp_path / "data_3.pt", t) == as_bytes(x)


def test_a_speculators_safetensors_file(tmp_path):
    from safetensors.torch import save_file

    n, layers, d = 23, 4, 8
    saved = {"token_ids": torch.arange(n), "hidden_states": torch.randn(n, layers, d).to(torch.bfloat16)}
    path = tmp_path / "hs_0.safetensors"
    save_file(saved, path)
    h = header(path)
    assert h["container"] == "safetensors"
    assert {t["name"]: (t["dtype"], t["shape"]) for t in h["tensors"]} == {
        "token_ids": ("i64", [n]),
        "hidden_states": ("bf16", [n, layers, d]),
    }
    for t in h["tensors"]:
        assert tensor_bytes(path, t) == as_bytes(saved[t["name"]])


class Evil:
    def __reduce__(self):
        import os

        return (os.system, ("touch " + str(Evil.marker),))


def test_a_pickle_that_would_run_code_is_refused_without_running_it(tmp_path):
    """A `.pt` whose pickle calls `os.system` (torch.save of an object with `__reduce__`): refused with one line
    naming the file and the global, and the command never runs."""
    Evil.marker = tmp_path / "ran"
    path = tmp_path / "data_0.ckpt"
    torch.save({"input_ids": torch.arange(3), "x": Evil()}, path)
    with pytest.raises(tokscan.InputError) as e:
        header(path)
    msg = str(e.value)
    assert str(path) in msg and ("posix.system" in msg or "os.system" in msg), msg
    assert "\n" not in msg and not Evil.marker.exists()
    # A plain pickle file is not a torch.save zip either.
    raw = tmp_path / "raw.pt"
    raw.write_bytes(pickle.dumps(Evil(), protocol=2))
    with pytest.raises(tokscan.InputError):
        header(raw)
    assert not Evil.marker.exists()


def test_cut_and_damaged_files_are_one_line_errors(tmp_path):
    path = tmp_path / "data_0.ckpt"
    torch.save(specforge(50, 16), path)
    data = path.read_bytes()
    for name, blob in [
        ("cut.ckpt", data[: len(data) // 2]),
        ("empty.ckpt", b""),
        ("noise.ckpt", np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()),
        ("cut.safetensors", b'\x10\x00\x00\x00\x00\x00\x00\x00{"a":'),
    ]:
        p = tmp_path / name
        p.write_bytes(blob)
        with pytest.raises(tokscan.InputError) as e:
            header(p)
        assert name in str(e.value) and "\n" not in str(e.value), (name, str(e.value))
