"""`ckpt convert` with transforms (--select --exclude --rename --dtype
--slice --transpose --layout), checked with torch and safetensors."""
import subprocess

import pytest
import torch
from ckptlib import BIN_PATH
from safetensors.torch import load_file, save_file


def run(*args):
    return subprocess.run([BIN_PATH, *map(str, args)], capture_output=True, text=True)


@pytest.fixture
def model(tmp_path):
    g = torch.Generator().manual_seed(1)
    t = {"model.layers.0.mlp.weight": torch.randn(10, 6, generator=g),
         "model.layers.0.mlp.bias": torch.randn(10, generator=g),
         "model.conv.weight": torch.randn(8, 3, 2, 5, generator=g),
         "model.embed": torch.randn(7, 4, generator=g).half(),
         "model.step": torch.tensor([3], dtype=torch.int32)}
    path = tmp_path / "in.safetensors"
    save_file(t, str(path), metadata={"format": "pt"})
    return path, t


def test_transforms_in_order(model, tmp_path):
    path, t = model
    out = tmp_path / "out.safetensors"
    r = run("convert", path, out, "--exclude", "*.step", "--dtype", "bf16", "--dtype", "model.embed=f32",
            "--transpose", "*.mlp.weight", "--layout", "*conv*=OIHW:HWIO", "--slice", "*.mlp.*=0:1/3",
            "--slice", "model.embed=-1:1:3", "--rename", "model.=", "--rename", "layers.*.mlp.*=h.*.ffn.*",
            "--no-progress")
    assert r.returncode == 0, r.stderr
    got = load_file(str(out))
    assert set(got) == {"h.0.ffn.weight", "h.0.ffn.bias", "conv.weight", "embed"}
    w = t["model.layers.0.mlp.weight"]
    # slices are in the source's axes, before the transpose: rows 4..7 of (10, 6)
    assert torch.equal(got["h.0.ffn.weight"], torch.tensor_split(w, 3, 0)[1].bfloat16().t())
    assert torch.equal(got["h.0.ffn.bias"], torch.tensor_split(t["model.layers.0.mlp.bias"], 3, 0)[1].bfloat16())
    assert torch.equal(got["conv.weight"], t["model.conv.weight"].bfloat16().permute(2, 3, 1, 0))
    assert torch.equal(got["embed"], t["model.embed"][:, 1:3].float())


def test_sharded_output_and_torch_source(model, tmp_path):
    path, t = model
    src = tmp_path / "model.pt"
    torch.save({k: v for k, v in t.items()}, str(src))
    r = run("convert", src, tmp_path / "shards", "--max-shard-size", "100B", "--dtype", "f16", "--select",
            "model.layers.*", "--no-progress")
    assert r.returncode == 0, r.stderr
    files = sorted((tmp_path / "shards").glob("model-*.safetensors"))
    got = {}
    for f in files:
        got.update(load_file(str(f)))
    assert len(files) == 2 and set(got) == {"model.layers.0.mlp.weight", "model.layers.0.mlp.bias"}
    assert torch.equal(got["model.layers.0.mlp.weight"], t["model.layers.0.mlp.weight"].half())


@pytest.mark.parametrize("args,needle", [
    (["--dtype", "float7"], "unknown dtype 'float7'"),
    (["--slice", "0:1"], "--slice needs"),
    (["--slice", "0:2/2"], "rank 2 of 2"),
    (["--layout", "OIHW"], "--layout needs FROM:TO"),
    (["--layout", "OIHW:HWIX"], "same distinct letters"),
    (["--rename", "nothing"], "--rename needs FROM=TO"),
    (["--slice", "model.step=3:0/2"], "model.step"),
    (["--dtype", "i16"], "cannot cast I32 to I16"),
])
def test_bad_transforms(model, tmp_path, args, needle):
    path, _ = model
    out = tmp_path / "bad.safetensors"
    r = run("convert", path, out, *args)
    assert r.returncode in (1, 2) and needle in r.stderr, r.stderr
    assert not out.exists()
