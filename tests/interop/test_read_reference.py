"""Files written by torch/safetensors/numpy are read exactly by ckpt."""
import json
import subprocess

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch
from ckptlib import BIN_PATH, Catalog

from common import TORCH_TO_ST, all_dtypes_state_dict, st_shape, tensor_bytes


@pytest.mark.parametrize("metadata", [None, {"format": "pt"}, {"a": "1", "b": "ü", "c": ""}])
def test_every_dtype_read_exactly(tmp_path, metadata):
    sd = all_dtypes_state_dict()
    path = tmp_path / "m.safetensors"
    safetensors.torch.save_file(sd, str(path), metadata=metadata)
    with Catalog(path) as cat, safetensors.safe_open(str(path), framework="pt") as ref:
        assert sorted(cat.names()) == sorted(ref.keys())
        assert cat.metadata() == (ref.metadata() or {})
        for name, t in sd.items():
            info = cat.info(name)
            assert info["dtype"] == TORCH_TO_ST[t.dtype], name
            assert info["shape"] == st_shape(t), name
            assert cat.read(name) == tensor_bytes(t), name
            assert cat.view(name) == tensor_bytes(ref.get_tensor(name)), name
        # Byte ranges inside a tensor.
        name = "layer.14.f32"
        full = tensor_bytes(sd[name])
        assert cat.read(name, 5, 7) == full[5:12]


def test_numpy_files(tmp_path):
    rng = np.random.default_rng(1)
    arrays = {
        "f16": rng.standard_normal((4, 3)).astype(np.float16),
        "f64": rng.standard_normal(7),
        "i8": rng.integers(-128, 127, (2, 2, 2), dtype=np.int8),
        "u64": rng.integers(0, 2**63, 3, dtype=np.uint64),
        "bool": rng.integers(0, 2, 5).astype(bool),
        "zero_dim": np.array(1.25, dtype=np.float32),
        "empty": np.zeros((0,), dtype=np.int16),
    }
    path = tmp_path / "np.safetensors"
    safetensors.numpy.save_file(arrays, str(path))
    with Catalog(path) as cat:
        for name, a in arrays.items():
            assert cat.info(name)["shape"] == list(a.shape)
            assert cat.read(name) == a.tobytes()


def test_inspect_json_matches_reference(tmp_path):
    sd = all_dtypes_state_dict(3)
    path = tmp_path / "m.safetensors"
    safetensors.torch.save_file(sd, str(path), metadata={"format": "pt"})
    out = subprocess.run([BIN_PATH, "inspect", "--json", str(path)], capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["metadata"] == {"format": "pt"}
    by_name = {t["name"]: t for t in doc["tensors"]}
    assert set(by_name) == set(sd)
    for name, t in sd.items():
        assert by_name[name]["shape"] == st_shape(t)
        assert by_name[name]["nbytes"] == len(tensor_bytes(t))
    assert doc["totals"]["tensors"] == len(sd)
    assert doc["totals"]["bytes"] == sum(len(tensor_bytes(t)) for t in sd.values())
    # Offsets are the file's: the bytes there are the tensor's.
    raw = path.read_bytes()
    for name, t in sd.items():
        e = by_name[name]
        assert raw[e["offset"]:e["offset"] + e["nbytes"]] == tensor_bytes(t)


def test_sharded_checkpoint_from_huggingface_hub(tmp_path):
    from huggingface_hub import save_torch_state_dict
    gen = torch.Generator().manual_seed(5)
    sd = {f"blocks.{i}.w": torch.randn(64, 32 + i, generator=gen) for i in range(12)}
    sd["head.bias"] = torch.randn(10, generator=gen).bfloat16()
    save_torch_state_dict(sd, str(tmp_path), max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    with Catalog(tmp_path) as cat:
        assert sorted(cat.names()) == sorted(sd)
        assert len(cat.files()) > 3
        for name, t in sd.items():
            assert cat.read(name) == tensor_bytes(t)
        assert cat.metadata() == {"format": "pt"}
    with Catalog(tmp_path / "model.safetensors.index.json") as cat:
        assert len(cat.names()) == len(sd)
