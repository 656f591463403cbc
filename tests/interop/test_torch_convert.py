"""ckpt convert of torch files: the result is what huggingface_hub's
save_torch_state_dict makes of the loaded state dict, plus the object tree."""
import json
import subprocess

import pytest
import safetensors.torch
import torch
from ckptlib import BIN_PATH, Catalog
from safetensors import safe_open

from torch_models import TinyResNet, conv_net, tiny_transformer

TREE_KEY = "ckpt.torch_tree"


def convert(src, dst, *args):
    r = subprocess.run([BIN_PATH, "convert", str(src), str(dst), *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.parametrize("make", [tiny_transformer, TinyResNet, conv_net], ids=["transformer", "resnet", "convnet"])
@pytest.mark.parametrize("limit", ["20KB", "5GB"])
def test_same_files_as_save_torch_state_dict(tmp_path, make, limit):
    from huggingface_hub import save_torch_state_dict
    torch.manual_seed(0)
    src = tmp_path / "model.bin"
    torch.save(make().state_dict(), src)
    loaded = torch.load(src, weights_only=True)
    (tmp_path / "hub").mkdir()
    save_torch_state_dict(loaded, str(tmp_path / "hub"), max_shard_size=limit)
    convert(src, tmp_path / "ckpt", "--max-shard-size", limit)
    hub_files = sorted(p.name for p in (tmp_path / "hub").iterdir())
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == hub_files
    index = "model.safetensors.index.json"
    if index in hub_files:
        # A plain state dict has no object tree worth recording: every file,
        # the index included, is byte-identical to the hub's.
        ours = json.loads((tmp_path / "ckpt" / index).read_text())
        assert TREE_KEY not in ours["metadata"]
        for name in hub_files:
            assert (tmp_path / "ckpt" / name).read_bytes() == (tmp_path / "hub" / name).read_bytes(), name
    else:
        with safe_open(str(tmp_path / "hub" / "model.safetensors"), "pt") as h, \
                safe_open(str(tmp_path / "ckpt" / "model.safetensors"), "pt") as c:
            assert c.metadata() == h.metadata()  # format and removed → kept; no tree for a plain state dict
            assert sorted(c.keys()) == sorted(h.keys())
            for k in h.keys():
                assert torch.equal(c.get_tensor(k), h.get_tensor(k)), k


def test_views_shared_and_transposed(tmp_path):
    w = torch.arange(20, dtype=torch.float32).reshape(4, 5)
    sd = {"w": w, "w_t": w.t(), "row": w[2], "tied": w, "alone_t": torch.arange(6.).reshape(2, 3).t(),
          "part_a": torch.arange(10.)[:5], "be": torch.arange(3, dtype=torch.int64)}
    sd["part_b"] = sd["part_a"]._base[5:] if sd["part_a"]._base is not None else torch.arange(10.)[5:]
    torch.save(sd, tmp_path / "v.pt")
    convert(tmp_path / "v.pt", tmp_path / "v.safetensors")
    out = safetensors.torch.load_file(str(tmp_path / "v.safetensors"))
    ref = torch.load(tmp_path / "v.pt", weights_only=True)
    with safe_open(str(tmp_path / "v.safetensors"), "pt") as f:
        meta = f.metadata()
    # w, w_t, row and tied overlap in one storage: the hub keeps "tied"
    # (the first complete name in sorted order) and maps the rest to it.
    assert "tied" in out and not {"w", "w_t", "row"} & set(out)
    assert meta["w"] == meta["w_t"] == meta["row"] == "tied"
    for k, t in out.items():
        assert torch.equal(t, ref[k]), k
    # A transposed tensor alone in its storage is written contiguous.
    assert out["alone_t"].is_contiguous() and torch.equal(out["alone_t"], ref["alone_t"])


def test_training_checkpoint_keeps_everything(tmp_path):
    torch.manual_seed(1)
    model = conv_net()
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 1, 28, 28)).sum().backward()
    opt.step()
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 7, "note": "run 3"}
    torch.save(ckpt, tmp_path / "train.pt")
    convert(tmp_path / "train.pt", tmp_path / "out", "--max-shard-size", "50KB")
    with Catalog(tmp_path / "out") as cat:
        names = set(cat.names())
    flat_ref = {}
    for k, v in ckpt["model"].items():
        flat_ref[f"model.{k}"] = v
    for pid, state in ckpt["optimizer"]["state"].items():
        for k, v in state.items():
            flat_ref[f"optimizer.state.{pid}.{k}"] = v
    assert names == set(flat_ref)
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    tree = json.loads(index["metadata"][TREE_KEY])
    top = dict(tree["__dict__"])
    assert top["epoch"] == 7 and top["note"] == "run 3"
    groups = dict(top["optimizer"]["__dict__"])["param_groups"]
    assert dict(groups[0]["__dict__"])["lr"] == 0.001
    loaded = {}
    for shard in set(index["weight_map"].values()):
        loaded.update(safetensors.torch.load_file(str(tmp_path / "out" / shard)))
    for k, v in flat_ref.items():
        assert torch.equal(loaded[k], v), k
