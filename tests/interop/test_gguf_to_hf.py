"""And back (issue 29 §4): a llama.cpp GGUF, as convert_hf_to_gguf.py writes
it, converted by ckpt into a Hugging Face model directory that transformers'
from_pretrained loads, against transformers' own load of the same GGUF file
(from_pretrained(..., gguf_file=...), which dequantizes with gguf-py and
puts llama's Q/K rows back with its reverse_permute): the same tensors and
the same logits, exactly.  The models are test_llamacpp.py's tiny random
ones, converted by the vendored script."""
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(__file__))
from test_llamacpp import LLAMA_CPP, ckpt, models  # noqa: E402,F401  (the fixture: each family's model and GGUFs)

IDS = torch.tensor([[1, 5, 100, 2000, 7, 42, 900, 3, 31000]])


def transformers_model(path, **kw):
    from transformers import AutoModelForCausalLM
    if str(path).endswith(".gguf"):
        return AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32, **kw)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw)


def to_hf(src, dst, *args):
    r = ckpt("convert", src, dst, "--to", "hf", "-q", *args)
    assert r.returncode == 0, r.stderr
    return dst


def assert_same_model(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    with torch.no_grad():
        assert torch.equal(a(IDS).logits, b(IDS).logits)


# Llama's Q8_0: its Q and K rows are put back through a view of the rows,
# which the plan offers for whole-byte elements only (not yet Q8_0 blocks).
CASES = [(f, t) for f in ("llama3", "llama2", "qwen2", "qwen3", "phi3") for t in ("f32", "f16", "bf16", "q8_0")
         if not (f in ("llama3", "llama2") and t == "q8_0")]


@pytest.mark.parametrize("family,outtype", CASES)
def test_logits_equal_transformers_own_gguf_load(models, family, outtype, tmp_path):
    """Dequantized to f32, ckpt's directory is what transformers makes of
    the GGUF itself: every tensor and the logits, bit for bit (both
    dequantize the same blocks: d × q in f32)."""
    gguf = models[family][1][outtype]
    hf = to_hf(gguf, tmp_path / "hf", "--dtype", "f32")
    assert sorted(os.listdir(hf)) == ["config.json", "model.safetensors"]
    # transformers' GGUF config drops qwen3.attention.key_length: Qwen3Config's
    # default head_dim (128) would stay, so the tiny model's (16) is given.
    kw = {"head_dim": json.loads((hf / "config.json").read_text())["head_dim"]} if family == "qwen3" else {}
    assert_same_model(transformers_model(gguf, **kw), transformers_model(hf))


def test_default_dtype_is_the_ggufs_float_type(models, tmp_path):
    """No --dtype: a BF16 GGUF's matrices stay bf16 (its f32 norms too are
    bf16: one dtype, as config.json says)."""
    hf = to_hf(models["llama3"][1]["bf16"], tmp_path / "hf")
    assert {t.dtype for t in load_file(hf / "model.safetensors").values()} == {torch.bfloat16}
    assert json.loads((hf / "config.json").read_text())["dtype"] == "bfloat16"
    hf8 = to_hf(models["qwen2"][1]["q8_0"], tmp_path / "hf8")  # quantized: bf16
    assert {t.dtype for t in load_file(hf8 / "model.safetensors").values()} == {torch.bfloat16}


@pytest.mark.parametrize("family", ["llama3", "qwen3", "phi3"])
def test_round_trip_hf_gguf_hf(models, family, tmp_path):
    """HF → GGUF (ckpt, F32) → HF (ckpt): the original model's tensors, Q/K
    rows included, and its logits."""
    model = models[family][0]
    gguf = tmp_path / "m.gguf"
    r = ckpt("convert", model, gguf, "--dtype", "f32", "-q")
    assert r.returncode == 0, r.stderr
    hf = to_hf(gguf, tmp_path / "hf", "--dtype", "f32")
    original = load_file(model / "model.safetensors")
    back = load_file(hf / "model.safetensors")
    assert back.keys() == original.keys()
    for k in original:
        assert torch.equal(back[k], original[k].float()), k
    a = transformers_model(model)
    assert_same_model(a, transformers_model(hf))


def rewritten(src, dst, drop=(), change=None):
    """A copy of a GGUF with key-values dropped or changed (gguf-py)."""
    sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
    try:
        import gguf
        r = gguf.GGUFReader(src)
        arch = (change or {}).get("general.architecture", r.fields["general.architecture"].contents())
        w = gguf.GGUFWriter(dst, arch=arch)
        for name, f in r.fields.items():
            if name.startswith("GGUF.") or name == "general.architecture" or name in drop:
                continue
            value = (change or {}).get(name, f.contents())
            w.add_key_value(name, value, f.types[0], sub_type=f.types[-1] if len(f.types) > 1 else None)
        for t in r.tensors:
            w.add_tensor(t.name, t.data, raw_shape=list(reversed(t.shape.tolist())), raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    finally:
        sys.path.remove(str(LLAMA_CPP / "gguf-py"))
    return dst


def refused(src, tmp_path, *words):
    dst = tmp_path / "out"
    r = ckpt("convert", src, dst, "--to", "hf", "-q")
    assert r.returncode != 0
    for w in (str(src), *words):
        assert w in r.stderr, r.stderr
    assert not dst.exists()


def test_unknown_architecture_is_refused_by_name(models, tmp_path):
    src = rewritten(models["llama3"][1]["f32"], tmp_path / "m.gguf", change={"general.architecture": "mamba"})
    refused(src, tmp_path, "general.architecture", "mamba", "--raw")


@pytest.mark.parametrize("key", ["llama.embedding_length", "llama.attention.head_count", "llama.block_count"])
def test_incomplete_architecture_key_values_are_refused(models, tmp_path, key):
    src = rewritten(models["llama3"][1]["f32"], tmp_path / "m.gguf", drop=(key,))
    refused(src, tmp_path, key, "missing")


@pytest.mark.parametrize("key,value,tensor", [
    ("llama.attention.head_count", 8, "blk.0.attn_output.weight"),
    ("llama.attention.head_count_kv", 1, "blk.0.attn_k.weight"),
    ("llama.feed_forward_length", 128, "blk.0.ffn_down.weight"),
])
def test_key_values_that_contradict_shapes_are_refused(models, tmp_path, key, value, tensor):
    src = rewritten(models["llama3"][1]["f32"], tmp_path / "m.gguf", change={key: value})
    refused(src, tmp_path, tensor, key.split(".", 1)[1])


def test_raw_keeps_the_plain_container(models, tmp_path):
    """--raw: the GGUF's tensors as they are, llama.cpp's names, no config."""
    r = ckpt("convert", models["llama3"][1]["f32"], tmp_path / "raw/", "--raw", "-q")
    assert r.returncode == 0, r.stderr
    assert os.listdir(tmp_path / "raw") == ["model.safetensors"]
    assert "blk.0.attn_q.weight" in load_file(tmp_path / "raw" / "model.safetensors")
