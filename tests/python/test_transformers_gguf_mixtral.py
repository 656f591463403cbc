"""ckpt.transformers' from_pretrained(path, gguf_file=...) of a Mixtral GGUF
(issue 29).  llama.cpp writes a Mixtral as its llama architecture with
experts, and transformers' GGUF loader, which knows no Mixtral, parses its
key-values as a plain Llama's: the model it would build has no experts.
ckpt knows the file's model: the config is the one `ckpt convert
model.gguf dir/` writes (ckpt_gguf_hf_config), a MixtralConfig with
num_local_experts and num_experts_per_tok, so the model built is the
Mixtral, and its logits equal the original transformers model's: exactly
from F32 (the model's bfloat16 weights, widened), within Q8_0's
quantization error from Q8_0.  The GGUFs are ckpt's conversions of a tiny
random Mixtral (byte for byte convert_hf_to_gguf.py's, test_llamacpp.py)."""
import json
import os
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")
import ckpt  # noqa: E402
import ckpt.transformers as ckt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "interop"))
from ckptlib import BIN_PATH  # noqa: E402
from test_llamacpp import TOKENIZER_OF, tiny_mixtral, tokenizer  # noqa: E402

IDS = torch.tensor([[1, 5, 100, 2000, 7, 42, 900, 3, 31000]])


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory):
    """(the tiny Mixtral's directory, {type: ckpt's GGUF of it})."""
    root = tmp_path_factory.mktemp("mixtral")
    model = root / "tiny-mixtral"
    tiny_mixtral(model)
    tokenizer(TOKENIZER_OF["mixtral"], model)  # the conversion to GGUF writes one; these tests never read it
    out = {}
    for t in ("f32", "q8_0"):
        out[t] = root / f"mixtral-{t}.gguf"
        r = subprocess.run([BIN_PATH, "convert", model, out[t], "--dtype", t, "-q"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    return model, out


@pytest.fixture
def no_numpy_dequantization(monkeypatch):
    """transformers' GGUF loader may parse key-values, never read the
    tensors."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    real = gguf_utils.load_gguf_checkpoint

    def config_only(path, return_tensors=False, **kw):
        assert not return_tensors, "transformers' own GGUF loader read the tensors"
        return real(path, return_tensors=False, **kw)

    monkeypatch.setattr(gguf_utils, "load_gguf_checkpoint", config_only)


def original(model):
    return transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)


def logits(model):
    with torch.no_grad():
        return model(IDS).logits


def test_the_config_is_the_one_ckpt_convert_writes(mixtral, tmp_path):
    """The config is ckpt's where transformers' parsing of the key-values
    has no experts; a config the caller passes is used as it is."""
    model, path = mixtral
    theirs = transformers.AutoConfig.from_pretrained(path["f32"].parent, gguf_file=path["f32"].name)
    assert theirs.model_type == "llama" and not hasattr(theirs, "num_local_experts")
    r = subprocess.run([BIN_PATH, "convert", path["f32"], tmp_path / "hf", "--to", "hf", "-q"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    with ckpt.open(path["f32"]) as c:
        assert json.loads(c._catalog.gguf_hf_config()) == written
    assert written["architectures"] == ["MixtralForCausalLM"]
    config = ckt.from_pretrained(path["f32"].parent, gguf_file=path["f32"].name).config
    assert type(config) is transformers.MixtralConfig
    want = transformers.MixtralConfig.from_pretrained(tmp_path / "hf").to_dict()
    got = config.to_dict()
    assert got.pop("quantization_config")["gguf_file"] == path["f32"].name  # transformers' mark of a GGUF load
    for k in ("_name_or_path", "name_or_path", "transformers_version"):
        want.pop(k, None), got.pop(k, None)
    assert got == want
    source = transformers.AutoConfig.from_pretrained(model)
    assert (config.num_local_experts, config.num_experts_per_tok) == (source.num_local_experts,
                                                                       source.num_experts_per_tok) == (4, 2)
    source.num_experts_per_tok = 1
    given = ckt.AutoModelForCausalLM.from_pretrained(path["f32"].parent, gguf_file=path["f32"].name, config=source)
    assert type(given) is transformers.MixtralForCausalLM and given.config.num_experts_per_tok == 1


@pytest.mark.parametrize("entry", ["from_pretrained", "AutoModelForCausalLM", "MixtralForCausalLM"])
def test_an_f32_mixtral_gguf_is_the_original_model(mixtral, entry, no_numpy_dequantization):
    """Every way in builds the Mixtral, its experts read by ckpt: the state
    dict and the logits equal the original's exactly."""
    model, path = mixtral
    load = ckt.from_pretrained if entry == "from_pretrained" else getattr(ckt, entry).from_pretrained
    got = load(path["f32"].parent, gguf_file=path["f32"].name)
    assert type(got) is transformers.MixtralForCausalLM and got.dtype == torch.float32  # transformers' GGUF dtype rule
    want = original(model)
    have, expected = got.state_dict(), want.state_dict()
    assert have.keys() == expected.keys()
    assert all(torch.equal(t, expected[k]) for k, t in have.items())
    assert torch.equal(logits(got), logits(want))


def test_a_q8_0_mixtral_gguf_is_the_original_within_its_quantization_error(mixtral, no_numpy_dequantization):
    model, path = mixtral
    got = ckt.AutoModelForCausalLM.from_pretrained(path["q8_0"].parent, gguf_file=path["q8_0"].name,
                                                   dtype=torch.float32)
    assert type(got) is transformers.MixtralForCausalLM
    want = original(model)
    # each weight within half a step of its block of 32 (the step max |w| /
    # 127, stored as a float16: up to 127 × 2^-11 of a step more)
    for k, t in want.state_dict().items():
        if t.dim() >= 2 and t.shape[-1] % 32 == 0:
            blocks = t.reshape(-1, 32)
            step = blocks.abs().amax(dim=1, keepdim=True) / 127
            diff = (got.state_dict()[k].reshape(-1, 32) - blocks).abs()
            assert bool((diff <= step * (0.5 + 127 / 2048) + 1e-12).all()), k
    a, b = logits(got), logits(want)
    assert not torch.equal(a, b)  # quantized: not the F32 model
    assert (a - b).abs().max() <= 0.02 * b.abs().max()


def test_the_dtype_is_transformers_gguf_rule_not_the_configs(mixtral, no_numpy_dequantization):
    """ckpt's config sets no dtype: dtype="auto" loads a Q8_0 Mixtral in
    float32, as transformers' own GGUF load does every quantized file (the
    config.json of `ckpt convert` says bfloat16, its dequantized dtype)."""
    _, path = mixtral
    got = ckt.AutoModelForCausalLM.from_pretrained(path["q8_0"].parent, gguf_file=path["q8_0"].name, dtype="auto")
    assert type(got) is transformers.MixtralForCausalLM and got.dtype == torch.float32
