"""ckpt.convert(..., dry_run=True): what the conversion would write, after
every rule, as data; nothing written."""
import json
import os

import pytest
import torch

import ckpt


def tied_model(directory):
    torch.manual_seed(0)
    wte = torch.randn(64, 16)
    sd = {"wte.weight": wte, "h.0.w": torch.randn(16, 48), "h.1.w": torch.randn(16, 48), "lm_head.weight": wte}
    directory.mkdir()
    torch.save(sd, directory / "pytorch_model.bin")
    (directory / "config.json").write_text('{"model_type": "gpt2"}')
    return directory


def test_dry_run_returns_the_listing_and_writes_nothing(tmp_path):
    src = tied_model(tmp_path / "model")
    rules = dict(max_shard_size="2KB", dtype="bf16", rename={"h.": "layers."}, progress=False)
    listing = ckpt.convert(src, tmp_path / "out", dry_run=True, **rules)
    assert sorted(os.listdir(tmp_path)) == ["model"]
    by_name = {t["name"]: t for t in listing["tensors"]}
    assert set(by_name) == {"wte.weight", "layers.0.w", "layers.1.w", "lm_head.weight"}
    assert by_name["layers.0.w"]["source"] == "h.0.w" and by_name["layers.0.w"]["dtype"] == "BF16"
    assert by_name["layers.0.w"]["shape"] == [16, 48] and by_name["layers.0.w"]["nbytes"] == 16 * 48 * 2
    # The tied head is written once, as the hub writes it ("lm_head.weight" kept).
    assert by_name["wte.weight"]["file"] is None and by_name["wte.weight"]["same_as"] == "lm_head.weight"
    assert listing["copied_files"] == ["config.json"] and listing["side_files"] == ["model.safetensors.index.json"]
    assert listing["totals"] == {"tensors": 4, "written": 3, "parameters": 64 * 16 + 2 * 16 * 48,
                                 "bytes": 2 * (64 * 16 + 2 * 16 * 48)}
    # The conversion then writes exactly that.
    wrote = ckpt.convert(src, tmp_path / "out", **rules)
    out = tmp_path / "out"
    assert wrote == [str(out / n) for n in [f["name"] for f in listing["files"]] + listing["side_files"] +
                     listing["copied_files"]]
    assert sorted(os.listdir(out)) == sorted([f["name"] for f in listing["files"]] + listing["side_files"] +
                                             listing["copied_files"])
    assert all((out / f["name"]).stat().st_size == f["size"] for f in listing["files"])
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == {t["name"]: t["file"] for t in listing["tensors"] if t["file"]}
    # Same checks as the conversion, in the caller's words.
    with pytest.raises(ckpt.ExistsError, match="overwrite=True"):
        ckpt.convert(src, out, dry_run=True, **rules)
    again = ckpt.convert(src, out, dry_run=True, overwrite=True, **rules)
    assert sorted(again["replaces"]) == sorted(f["name"] for f in listing["files"]) + ["model.safetensors.index.json"]
    with pytest.raises(ckpt.NoMatchError, match="nomatch"):
        ckpt.convert(src, tmp_path / "x", dry_run=True, select="nomatch*")
    assert not (tmp_path / "x").exists()
