"""Shard decisions and files identical to huggingface_hub's."""
import json
import subprocess

import pytest
import safetensors.torch
import torch
from huggingface_hub import save_torch_state_dict, split_torch_state_dict_into_shards
from huggingface_hub.serialization._base import parse_size_to_int
from ckptlib import BIN_PATH, Catalog, parse_size, write

from common import TORCH_TO_ST, random_tensor, st_shape, tensor_bytes


def make_state_dicts():
    gen = torch.Generator().manual_seed(0)
    sizes = [6, 6, 2, 6, 2, 2]  # the hub docstring's example, in KB
    yield "docstring", {f"t{i}": random_tensor(torch.uint8, [s * 1000], gen) for i, s in enumerate(sizes)}
    yield "mixed", {
        "embed": random_tensor(torch.bfloat16, [300, 40], gen),
        "a.0": random_tensor(torch.float32, [10, 10], gen),
        "huge": random_tensor(torch.float32, [100, 100], gen),
        "a.1": random_tensor(torch.float32, [10, 10], gen),
        "norm": random_tensor(torch.float16, [7], gen),
        "s": torch.tensor(3.0),
        "b": random_tensor(torch.int64, [500], gen),
    }
    yield "many small", {f"layers.{i}.{p}": random_tensor(torch.float32, [16, 8 + i % 5], gen)
                         for i in range(40) for p in ("w", "b")}


LIMITS = ["10KB", "25KB", "0.05MB", "1KB", "5GB", 12000]


@pytest.mark.parametrize("label,sd", list(make_state_dicts()), ids=[s[0] for s in make_state_dicts()])
@pytest.mark.parametrize("limit", LIMITS)
def test_same_shards_as_split_torch_state_dict(tmp_path, label, sd, limit):
    split = split_torch_state_dict_into_shards(sd, max_shard_size=limit)
    limit_bytes = limit if isinstance(limit, int) else parse_size(limit)
    records = [(k, TORCH_TO_ST[t.dtype], st_shape(t), tensor_bytes(t)) for k, t in sd.items()]
    placement = write(tmp_path / "out", records, max_shard_size=limit_bytes)
    assert placement == split.tensor_to_filename
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    expected = sorted(split.filename_to_tensors) + (["model.safetensors.index.json"] if split.is_sharded else [])
    assert files == expected
    if split.is_sharded:
        index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
        assert index["weight_map"] == split.tensor_to_filename
        assert index["metadata"] == split.metadata


@pytest.mark.parametrize("text", ["5GB", "500MB", "1.5GB", "10kb", "0.3MB", " 7 TB ", "2.5KB", "0.1GB"])
def test_size_strings_parse_like_the_hub(text):
    assert parse_size(text) == parse_size_to_int(text)


@pytest.mark.parametrize("label,sd", list(make_state_dicts()), ids=[s[0] for s in make_state_dicts()])
@pytest.mark.parametrize("limit", ["10KB", "25KB", "5GB"])
def test_convert_output_byte_identical_to_save_torch_state_dict(tmp_path, label, sd, limit):
    # ckpt convert walks the source in file order; give the hub that order.
    src = tmp_path / "src.safetensors"
    safetensors.torch.save_file(sd, str(src), metadata={"format": "pt"})
    with Catalog(src) as cat:
        ordered = {k: sd[k] for k in cat.names()}
    (tmp_path / "hub").mkdir()
    save_torch_state_dict(ordered, str(tmp_path / "hub"), max_shard_size=limit)
    subprocess.run([BIN_PATH, "convert", str(src), str(tmp_path / "ckpt"), "--max-shard-size", limit],
                   check=True, capture_output=True)
    hub_files = sorted(p.name for p in (tmp_path / "hub").iterdir())
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == hub_files
    for name in hub_files:
        assert (tmp_path / "ckpt" / name).read_bytes() == (tmp_path / "hub" / name).read_bytes(), name
