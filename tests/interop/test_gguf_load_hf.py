"""And back, into a model (issue 29): ckpt.transformers' from_pretrained(dir,
gguf_file=...) reads a llama.cpp GGUF that needs more than renames and
casts on its way back — Gemma's norms, stored + 1 — with ckpt itself: the
engine takes the 1 away in float32 as it reads each norm straight into
the model built on meta (load_into(as_hf=True, assign=True)), as `ckpt
convert` does when it writes them.  The GGUFs are the vendored
convert_hf_to_gguf.py's files of test_llamacpp.py's tiny random models; the
model equals the original Hugging Face model (F32 and BF16 hold its bf16
weights exactly) and the same GGUF through `ckpt convert` then
transformers' from_pretrained, state dict and logits, bit for bit."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))
from test_gguf_to_hf import IDS, to_hf, transformers_model  # noqa: E402
from test_llamacpp import models  # noqa: E402,F401

ckt = pytest.importorskip("ckpt.transformers")
GEMMA = ["gemma2", "gemma3"]


@pytest.fixture
def no_numpy_dequantization(monkeypatch):
    """transformers' GGUF loader may parse key-values (its config), never
    read the tensors: ckpt reads them."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    real = gguf_utils.load_gguf_checkpoint

    def config_only(path, return_tensors=False, **kw):
        assert not return_tensors, "transformers' own GGUF loader read the tensors"
        return real(path, return_tensors=False, **kw)

    monkeypatch.setattr(gguf_utils, "load_gguf_checkpoint", config_only)


def ckpt_load(gguf, **kw):
    return ckt.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32, **kw)


def logits(model):
    with torch.no_grad():
        return model(IDS).logits


def assert_same_weights_and_logits(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]), k
    assert torch.equal(logits(a), logits(b))


def config_of(directory):
    from transformers import AutoConfig
    return AutoConfig.from_pretrained(directory)


@pytest.mark.parametrize("outtype", ["f32", "f16", "bf16", "q8_0"])
@pytest.mark.parametrize("family", GEMMA)
def test_gemma_loads_as_ckpt_convert_writes_it(models, family, outtype, tmp_path, request):
    """Every tensor, the norms less 1 among them: those of `ckpt convert`
    then transformers' from_pretrained, bit for bit, and so are the logits
    under that directory's config.json (transformers' parsing of the
    key-values, the default config, has Gemma's query_pre_attn_scalar 256
    whatever the model's: its own GGUF load gets the same model as ckpt's
    then); transformers' own GGUF loader never reads a tensor."""
    gguf = models[family][1][outtype]
    hf = to_hf(gguf, tmp_path / "hf", "--dtype", "f32")
    converted, theirs = transformers_model(hf), transformers_model(gguf)
    request.getfixturevalue("no_numpy_dequantization")
    assert_same_weights_and_logits(ckpt_load(gguf, config=config_of(hf)), converted)
    assert_same_weights_and_logits(ckpt_load(gguf), theirs)


@pytest.mark.parametrize("outtype", ["f32", "bf16"])
@pytest.mark.parametrize("family", GEMMA)
def test_gemma_loads_the_original_model(models, family, outtype, no_numpy_dequantization):
    """F32 and BF16 hold the original's bf16 weights exactly (the norms
    + 1 in float32, where − 1 gives them back): the original model's
    state dict and logits."""
    original, ggufs = models[family]
    ours = ckpt_load(ggufs[outtype], config=config_of(original))
    assert_same_weights_and_logits(ours, transformers_model(original))
    norms = [k for k in ours.state_dict() if k.endswith("norm.weight")]
    assert norms and all(ours.state_dict()[k].abs().max() < 0.5 for k in norms)  # w, not w + 1


def test_ckpt_load_as_hf_takes_gemmas_norms_back(models):
    """ckpt.load(as_hf=True) of a Gemma GGUF: each norm less the 1 the
    script added (computed in memory of its own: the file holds w + 1),
    the other tensors the file's."""
    import ckpt
    gguf = models["gemma2"][1]["f32"]
    sd = ckpt.load(gguf, as_hf=True)
    plain = ckpt.load(gguf)
    assert torch.equal(sd["model.norm.weight"], plain["output_norm.weight"] - 1)
    assert torch.equal(sd["model.embed_tokens.weight"], plain["token_embd.weight"])
