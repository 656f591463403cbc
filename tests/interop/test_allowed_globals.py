"""Training checkpoints carry more than tensors: argparse.Namespace, numpy
scalars, dataclasses.  Refused by default (as torch.load(weights_only=True)
refuses them), each names the option that allows it; once allowed, a global
rebuilds its object from its state and is never called."""
import argparse
import dataclasses
import os
import pickle
import subprocess

import numpy as np
import pytest
import safetensors.torch
import torch

import ckpt
from ckptlib import BIN_PATH

NUMPY_SCALARS = ["numpy._core.multiarray.scalar", "numpy.dtype"]


@dataclasses.dataclass
class TrainConfig:  # pickled as tests.interop...TrainConfig: a global only the caller can allow
    lr: float = 3e-4
    warmup: int = 100


def training_checkpoint(path):
    torch.save({"model": {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)},
                "args": argparse.Namespace(lr=0.1, name="run-7", layers=[1, 2]),
                "config": TrainConfig(),
                "loss": np.float64(0.25), "step": np.int64(-7), "ok": np.bool_(True), "eps": np.float32(1e-5)},
               path)


@pytest.fixture()
def train_pt(tmp_path):
    path = tmp_path / "train.pt"
    training_checkpoint(path)
    return path


def config_global():
    return f"{TrainConfig.__module__}.TrainConfig"


def test_refused_by_default_naming_the_option(train_pt):
    with pytest.raises(ckpt.Error) as e:
        ckpt.open(train_pt)
    message = str(e.value)
    assert "global 'argparse.Namespace' is not allowed" in message
    assert "--allow-global argparse.Namespace" in message and 'allowed_globals=["argparse.Namespace"]' in message
    # torch itself refuses the same file without its safe globals
    with pytest.raises(pickle.UnpicklingError):
        torch.load(train_pt, weights_only=True)


def test_allowed_globals_give_the_objects_state_and_numbers(train_pt):
    allowed = ["argparse.Namespace", config_global(), *NUMPY_SCALARS]
    with ckpt.open(train_pt, allowed_globals=allowed) as c:
        assert list(c.keys()) == ["model.w"]
        tree = c.tree()
    assert tree["loss"] == 0.25 and tree["step"] == -7 and tree["ok"] is True
    assert tree["eps"] == float(np.float32(1e-5))
    assert tree["args"].name == "argparse.Namespace" and tree["args"].state == {"lr": 0.1, "name": "run-7", "layers": [1, 2]}
    assert tree["config"].name == config_global() and tree["config"].state == {"lr": 3e-4, "warmup": 100}
    loaded = ckpt.load(train_pt, allowed_globals=allowed, nested=True)
    assert torch.equal(loaded["model"]["w"], torch.arange(6, dtype=torch.float32).reshape(2, 3))
    assert loaded["step"] == -7 and loaded["args"].state["name"] == "run-7"


def test_cli_convert_with_allow_global(train_pt, tmp_path):
    out = tmp_path / "w.safetensors"
    r = subprocess.run([BIN_PATH, "convert", train_pt, out], capture_output=True, text=True)
    assert r.returncode != 0 and "--allow-global argparse.Namespace" in r.stderr and not out.exists()
    flags = [a for g in ["argparse.Namespace", config_global(), *NUMPY_SCALARS] for a in ("--allow-global", g)]
    r = subprocess.run([BIN_PATH, "convert", train_pt, out, *flags], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert torch.equal(safetensors.torch.load_file(out)["model.w"], torch.arange(6, dtype=torch.float32).reshape(2, 3))


class Attack:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_an_allowed_global_is_never_called(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(2), "x": Attack(marker)}, path)
    for name in ("os.system", "posix.system"):
        with pytest.raises(ckpt.Error) as e:
            ckpt.open(path, allowed_globals=[name])
        assert "calls it with arguments" in str(e.value) or "is not allowed" in str(e.value)
    assert not marker.exists()
