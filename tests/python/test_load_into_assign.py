"""load_into on a model built on the meta device (issue 27, item 1): without
assign=True a meta tensor is an error naming it; with it the module's
parameters and buffers become the checkpoint's tensors (views of the file
where the bytes allow), tied parameters stay one Parameter, requires_grad
and the Parameter class are kept, and transformers models give the logits
from_pretrained gives, holding about the file's size in memory."""
import json
import os
import subprocess
import sys

import pytest
import safetensors.torch as st_torch
import torch

import ckpt

transformers = pytest.importorskip("transformers")
sys.path.insert(0, os.path.dirname(__file__))
from test_views_default import mapped_from  # noqa: E402


def llama_config(tie, **kw):
    size = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2)
    size.update(kw)
    return transformers.LlamaConfig(tie_word_embeddings=tie, **size)


def gpt2_config():
    return transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64, bos_token_id=0,
                                   eos_token_id=0)


def bert_config():
    return transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=64, max_position_embeddings=64)


MODELS = {
    "llama-tied": (lambda: transformers.LlamaForCausalLM, lambda: llama_config(True)),
    "llama-untied": (lambda: transformers.LlamaForCausalLM, lambda: llama_config(False)),
    "gpt2": (lambda: transformers.GPT2LMHeadModel, gpt2_config),
    "bert": (lambda: transformers.BertForMaskedLM, bert_config),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_meta_model_gives_from_pretrained_logits(tmp_path, kind, dtype):
    cls, config = MODELS[kind][0](), MODELS[kind][1]()
    torch.manual_seed(0)
    cls(config).to(dtype).save_pretrained(tmp_path)  # model.safetensors, tied weights written once
    ref = cls.from_pretrained(tmp_path).eval()
    with torch.device("meta"):
        model = cls(config)
    with pytest.raises(ValueError, match=r"on the meta device.*assign=True") as e:
        ckpt.load_into(model, tmp_path, progress=False)
    assert any(f'"{n}"' in str(e.value) for n in ref.state_dict()), "the error names a meta tensor"

    result = ckpt.load_into(model, tmp_path, assign=True, progress=False)
    assert result == ckpt.LoadResult([], [], [])
    model.eval()
    tensors = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers(remove_duplicate=False))
    assert all(t.device.type == "cpu" for t in tensors.values()), [n for n, t in tensors.items() if t.is_meta]
    assert all(type(p) is torch.nn.Parameter and p.requires_grad for p in model.parameters())
    assert {n: t.dtype for n, t in ref.state_dict().items()} == {n: t.dtype for n, t in model.state_dict().items()}
    for name, t in model.state_dict().items():
        assert torch.equal(t, ref.state_dict()[name]), name
    in_file = [n for n, p in model.named_parameters()]
    assert all(mapped_from(model.get_parameter(n), tmp_path / "model.safetensors") for n in in_file), "views"
    if kind in ("llama-tied", "gpt2", "bert"):
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    else:
        assert model.get_output_embeddings().weight is not model.get_input_embeddings().weight
    ids = torch.arange(12)[None] % 90
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref(ids).logits)


class Tagged(torch.nn.Parameter):
    """A Parameter subclass, as quantization and sharding libraries make."""


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.norm = torch.nn.BatchNorm1d(4)  # persistent buffers: running_mean, running_var, num_batches_tracked
        self.scale = Tagged(torch.ones(4), requires_grad=False)
        self.scale.tag = "kept"


def test_assign_keeps_ties_classes_requires_grad_and_buffers(tmp_path):
    torch.manual_seed(1)
    src = Net()
    src.norm.running_mean.uniform_()
    src.norm.num_batches_tracked.fill_(7)
    sd = {k: v.clone() for k, v in src.state_dict().items()}  # both tied names, as torch.save writes them
    st_torch.save_file(sd, tmp_path / "m.safetensors")
    with torch.device("meta"):
        model = Net()
    model.scale.tag = "kept"
    seen = {}
    result = ckpt.load_into(model, tmp_path / "m.safetensors", assign=True, progress=False,
                            on_loaded=lambda n, t: seen.setdefault(n, t))
    assert result == ckpt.LoadResult([], [], [])
    assert model.head.weight is model.emb.weight and isinstance(model.emb.weight, torch.nn.Parameter)
    assert type(model.scale) is Tagged and not model.scale.requires_grad and model.scale.tag == "kept"
    assert model.emb.weight.requires_grad
    for k, v in sd.items():
        got = model.state_dict()[k]
        assert got.dtype == v.dtype and torch.equal(got, v), k
    assert model.norm.num_batches_tracked.item() == 7 and type(model.norm.running_mean) is torch.Tensor
    # The checkpoint repeats the tied weight: one name is read, both see it.
    assert len(seen) == len(sd) - 1 and {"emb.weight", "head.weight"} & set(seen)
    assert all(seen[n] is model.get_parameter(n) if n in dict(model.named_parameters()) else
               seen[n] is model.get_buffer(n) for n in seen)
    # A saved file lacking the tied name (save_pretrained's way) misses nothing.
    st_torch.save_file({k: v for k, v in sd.items() if k != "head.weight"}, tmp_path / "once.safetensors")
    with torch.device("meta"):
        again = Net()
    assert ckpt.load_into(again, tmp_path / "once.safetensors", assign=True) == ckpt.LoadResult([], [], [])
    assert again.head.weight is again.emb.weight and torch.equal(again.head.weight, sd["head.weight"])


def test_assign_dtype_copy_rules_and_strict(tmp_path):
    g = torch.Generator().manual_seed(2)
    sd = {"layer.weight": torch.randn(8, 6, generator=g).to(torch.bfloat16), "layer.bias": torch.randn(8, generator=g),
          "other": torch.zeros(3)}
    path = tmp_path / "m.safetensors"
    st_torch.save_file(sd, path)

    def meta_model(rows=8):
        with torch.device("meta"):
            return torch.nn.Sequential(torch.nn.Linear(6, rows))

    # strict: the unexpected "other" fails before anything is loaded.
    model = meta_model()
    with pytest.raises(RuntimeError, match='Unexpected key.*"other"'):
        ckpt.load_into(model, path, assign=True, rename={"layer": "0"})
    assert model[0].weight.is_meta and model[0].bias.is_meta
    assert ckpt.load_into(model, path, assign=True, rename={"layer": "0"}, select="layer.*") == ([], [], [])
    assert model[0].weight.dtype == torch.bfloat16 and mapped_from(model[0].weight, path)
    # dtype= casts (new memory); copy=True gives memory of its own.
    model = meta_model()
    ckpt.load_into(model, path, assign=True, rename={"layer": "0"}, select="layer.*", dtype="float32")
    assert model[0].weight.dtype == torch.float32 and torch.equal(model[0].weight, sd["layer.weight"].float())
    assert not mapped_from(model[0].weight, path)
    model = meta_model()
    ckpt.load_into(model, path, assign=True, rename={"layer": "0"}, select="layer.*", copy=True)
    assert torch.equal(model[0].bias, sd["layer.bias"]) and not mapped_from(model[0].bias, path)
    # Tensor-parallel part 1 of 2: rows 4..8, still a view of the file.
    model = meta_model(4)
    ckpt.load_into(model, path, assign=True, rename={"layer": "0"}, select="layer.*", tp_rank=1, tp_size=2)
    assert torch.equal(model[0].weight, sd["layer.weight"][4:]) and mapped_from(model[0].weight, path)
    # A shape that differs is a mismatch, the tensor stays on meta.
    model = meta_model(5)
    r = ckpt.load_into(model, path, assign=True, strict=False, rename={"layer": "0"})
    assert sorted(m.name for m in r.mismatched_keys) == ["0.bias", "0.weight"] and r.unexpected_keys == ["other"]
    assert model[0].weight.is_meta
    with pytest.raises(ValueError, match="go with assign=True"):
        ckpt.load_into(meta_model(), path, dtype="float32")
    with pytest.raises(TypeError, match="torch.nn.Module"):
        ckpt.load_into({"layer.weight": torch.empty(8, 6, device="meta")}, path, assign=True)


class Rotary(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(2, 2)
        self.register_buffer("inv_freq", torch.arange(2.0), persistent=False)


def test_non_persistent_meta_buffers_the_model_cannot_compute(tmp_path):
    """A plain torch module's non-persistent buffer on meta is in no
    checkpoint and nothing computes it: strict refuses before loading,
    strict=False names it in missing_keys and leaves it on meta."""
    src = Rotary()
    st_torch.save_model(src, tmp_path / "m.safetensors")
    with torch.device("meta"):
        model = Rotary()
    with pytest.raises(RuntimeError, match=r"Non-persistent buffer\(s\) on the meta device.*\"inv_freq\""):
        ckpt.load_into(model, tmp_path / "m.safetensors", assign=True)
    assert model.proj.weight.is_meta, "nothing loaded"
    r = ckpt.load_into(model, tmp_path / "m.safetensors", assign=True, strict=False)
    assert r.missing_keys == ["inv_freq"] and model.inv_freq.is_meta
    assert torch.equal(model.proj.weight, src.proj.weight)
    # Built off meta, the buffer is the module's own and the load is complete.
    assert ckpt.load_into(Rotary(), tmp_path / "m.safetensors", assign=True) == ckpt.LoadResult([], [], [])


RSS_SCRIPT = r"""
import json, sys
import torch, transformers, ckpt
from transformers import AutoConfig, AutoModelForCausalLM
mode, path = sys.argv[1], sys.argv[2]
if mode == "from_pretrained":
    model = AutoModelForCausalLM.from_pretrained(path)
else:
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    if mode != "empty":
        ckpt.load_into(model, path, assign=True, copy=mode == "copy", progress=False)
if mode != "empty":
    # Every weight read once: views' pages count from their first touch.
    assert all(torch.isfinite(t.sum()) for t in model.state_dict().values())
with open("/proc/self/status") as f:
    print(json.dumps({"peak": next(int(l.split()[1]) << 10 for l in f if l.startswith("VmHWM"))}))
"""


def test_meta_load_peak_rss_is_the_model(tmp_path):
    """Peak RSS of a process building a Llama on meta and loading it (views,
    and copy=True), every weight touched, is at most the imports' baseline
    plus 1.3× the file; from_pretrained's is measured beside it."""
    config = llama_config(False, vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                          num_attention_heads=8, num_key_value_heads=8)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    model.to_empty(device="cpu")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02, generator=g)
    model.save_pretrained(tmp_path)
    del model
    size = (tmp_path / "model.safetensors").stat().st_size
    assert size > 150 << 20
    peaks = {}
    for mode in ("empty", "views", "copy", "from_pretrained"):
        r = subprocess.run([sys.executable, "-c", RSS_SCRIPT, mode, str(tmp_path)], capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, r.stderr
        peaks[mode] = json.loads(r.stdout.strip().splitlines()[-1])["peak"]
    grew = {m: (peaks[m] - peaks["empty"]) / size for m in peaks}
    print(f"file {size / 2**20:.1f} MiB, baseline {peaks['empty'] / 2**20:.1f} MiB, peak growth / file: "
          + ", ".join(f"{m} {grew[m]:.2f}" for m in ("views", "copy", "from_pretrained")))
    assert grew["views"] <= 1.3 and grew["copy"] <= 1.3, (grew, peaks)
