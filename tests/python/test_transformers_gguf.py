"""ckpt.transformers' from_pretrained(path, gguf_file=...) (issue 30 §4):
a llama.cpp GGUF read by ckpt through the library's GGUF → Hugging Face
mapping (ckpt_gguf_hf_plan: Hugging Face's names, llama's Q/K rows put
back, dequantized by the engine) straight into the model built on meta
(load_into(assign=True)), no directory written and transformers' numpy
dequantization never run; the config is transformers' own parsing of the
key-values.  The state dict and the logits equal transformers' own
from_pretrained(dir, gguf_file=...), exactly.  The GGUFs are ckpt's
conversions (byte for byte convert_hf_to_gguf.py's, test_llamacpp.py) of
that file's tiny random models."""
import os
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")
import ckpt.transformers as ckt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "interop"))
from ckptlib import BIN_PATH  # noqa: E402
from test_gguf_to_hf import edited, rewritten, without_vocabulary  # noqa: E402
from test_llamacpp import (TOKENIZER_OF, tiny_gemma, tiny_llama, tiny_mixtral, tiny_phi3, tiny_qwen2,  # noqa: E402
                           tiny_qwen3, tiny_qwen_moe, tokenizer)

IDS = torch.tensor([[1, 5, 100, 2000, 7, 42, 900, 3, 31000]])
FAMILIES = {"llama3": tiny_llama, "qwen2": tiny_qwen2, "qwen3": tiny_qwen3, "phi3": tiny_phi3}
TYPES = ("f32", "f16", "bf16", "q8_0")
# transformers' GGUF config drops qwen3.attention.key_length: Qwen3Config's
# default head_dim (128) would stay, so the tiny model's (16) is given to both.
EXTRA = {"qwen3": {"head_dim": 16}}


@pytest.fixture(scope="module")
def vocabulary_ggufs(tmp_path_factory):
    """{(family, type): GGUF file}, all in one directory, each with its
    family's real vocabulary."""
    root = tmp_path_factory.mktemp("gguf-models")
    out = {}
    for family, build in FAMILIES.items():
        model = root / f"tiny-{family}"
        build(model)
        tokenizer(TOKENIZER_OF.get(family, family), model)
        for t in TYPES:
            out[family, t] = root / f"{family}-{t}.gguf"
            r = subprocess.run([BIN_PATH, "convert", model, out[family, t], "--dtype", t, "-q"], capture_output=True,
                               text=True)
            assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def ggufs(vocabulary_ggufs, tmp_path_factory):
    """The same files without their vocabulary's arrays, all in one
    directory: what the weights, the logits and the config are made of,
    without the ~20 s that gguf-py spends parsing Llama 3's or Qwen2's
    vocabulary on each of transformers' and ckpt.transformers' config
    parses (test_gguf_to_hf.without_vocabulary)."""
    root = tmp_path_factory.mktemp("gguf-weights")
    return {k: without_vocabulary(path, root / path.name) for k, path in vocabulary_ggufs.items()}


def transformers_own(path, **kw):
    return transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, **kw)


@pytest.fixture
def no_numpy_dequantization(monkeypatch):
    """transformers' GGUF loader may parse key-values (its config), never
    read the tensors."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    real = gguf_utils.load_gguf_checkpoint

    def config_only(path, return_tensors=False, **kw):
        assert not return_tensors, "transformers' own GGUF loader read the tensors"
        return real(path, return_tensors=False, **kw)

    monkeypatch.setattr(gguf_utils, "load_gguf_checkpoint", config_only)


def assert_same_model(a, b, same_config=True):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]), k
    with torch.no_grad():
        assert torch.equal(a(IDS).logits, b(IDS).logits)
    assert type(a) is type(b) and (not same_config or a.config.to_dict() == b.config.to_dict())


def ckpt_maps(path):
    return ckt._gguf_names(str(path)) is not None


def test_a_tokenizer_the_conversion_refuses_does_not_send_the_weights_elsewhere(vocabulary_ggufs, tmp_path):
    """A load maps the tensors alone (ckpt_gguf_hf_plan_tensors): the
    tokenizer's key-values are neither read nor checked, so a GGUF whose
    tokenizer `ckpt convert` refuses (a pre-tokenizer it does not know)
    still has its weights read by ckpt, and no tokenizer.json is built for
    nothing on every load."""
    src = tmp_path / "m.gguf"
    edited(vocabulary_ggufs["llama3", "f32"], src, strings={"tokenizer.ggml.pre": "mystery"})
    r = subprocess.run([BIN_PATH, "convert", src, tmp_path / "hf", "--to", "hf", "-q"], capture_output=True, text=True)
    assert r.returncode != 0 and "mystery" in r.stderr, r.stderr  # the conversion writes tokenizer files: refused
    assert ckpt_maps(src)


@pytest.mark.parametrize("gguf_type", TYPES)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_state_dict_and_logits_equal_transformers_own_gguf_load(ggufs, family, gguf_type, request):
    path = ggufs[family, gguf_type]
    if family == "llama3" and gguf_type == "q8_0" and not ckpt_maps(path):
        pytest.skip("ckpt_gguf_hf_plan refuses llama's Q8_0 Q/K rows (put back through a view of whole-byte "
                    "elements only; Q8_0 blocks are being added in llamacpp_hf.c); transformers reads it")
    kw = EXTRA.get(family, {})
    expected = transformers_own(path, **kw)
    request.getfixturevalue("no_numpy_dequantization")
    got = ckt.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, **kw)
    assert_same_model(expected, got)


@pytest.mark.parametrize("family,gguf_type", [("qwen2", "q8_0"), ("phi3", "f16"), ("llama3", "f32")])
def test_a_dtype_is_the_engines_cast(ggufs, family, gguf_type, request):
    """dtype=bfloat16: each tensor dequantized (or widened) and rounded as
    transformers rounds its float32 copy."""
    path = ggufs[family, gguf_type]
    kw = EXTRA.get(family, {})
    expected = transformers_own(path, dtype=torch.bfloat16, **kw)
    request.getfixturevalue("no_numpy_dequantization")
    got = ckt.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.bfloat16, **kw)
    assert_same_model(expected, got)
    assert got.dtype == torch.bfloat16


def test_the_model_class_takes_a_gguf_too(ggufs, no_numpy_dequantization):
    path = ggufs["qwen2", "bf16"]
    model = ckt.Qwen2ForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    assert type(model) is transformers.Qwen2ForCausalLM and model.is_quantized  # as transformers marks a GGUF load


def f32_gguf(tmp_path, family, build, gguf_type="f32", vocabulary=False):
    """(the tiny model `build` makes, with its family's tokenizer; ckpt's
    GGUF of it of that type, F32 by default, as convert_hf_to_gguf.py
    writes it, without its vocabulary's arrays — see `ggufs` — in a
    directory of its own, tmp_path / "weights", unless `vocabulary`)."""
    model, full = tmp_path / f"tiny-{family}", tmp_path / f"{family}-{gguf_type}.gguf"
    path = full if vocabulary else tmp_path / "weights" / full.name
    if path.exists():  # a module's directory: made by an earlier test
        return model, path
    if not model.exists():
        build(model)
        tokenizer(TOKENIZER_OF.get(family, family), model)
    if not full.exists():
        r = subprocess.run([BIN_PATH, "convert", model, full, "--dtype", gguf_type, "-q"], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr
    if vocabulary:
        return model, full
    path.parent.mkdir(exist_ok=True)
    return model, without_vocabulary(full, path)


# Mixtral (llama.cpp's llama with experts), Qwen2-MoE (a shared expert
# beside them) and Qwen3-MoE: (the tiny model, from_pretrained's keywords,
# whether transformers' own GGUF load reads the file).  transformers' GGUF
# config drops the Qwen mixtures' experts' widths: the tiny models' are
# given (to its own load; ckpt.transformers' config is ckpt's, which has
# them, test_qwen_moe_ggufs_get_ckpts_config).  It reads a llama GGUF with experts as a Llama without them (no
# Mixtral GGUF support: the Mixtral's config is given), and fails on
# Qwen2-MoE's shared expert gate (a (1, 1, hidden) tensor for the model's
# (1, hidden)): those two loads equal the original model alone.
MOE = {"mixtral": (tiny_mixtral, None, False),
       "qwen2moe": (lambda d: tiny_qwen_moe(d, "Qwen2MoeForCausalLM"),
                    {"moe_intermediate_size": 16, "shared_expert_intermediate_size": 48}, False),
       "qwen3moe": (lambda d: tiny_qwen_moe(d, "Qwen3MoeForCausalLM"), {"moe_intermediate_size": 16}, True)}


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("moe")


@pytest.mark.parametrize("gguf_type", ["f32", "q8_0"])
@pytest.mark.parametrize("family", list(MOE))
def test_moe_experts_are_read_by_ckpt_into_the_models_stacked_experts(moe_dir, family, gguf_type, request):
    """transformers' MoE models hold each layer's experts stacked
    (mlp.experts.gate_up_proj: every expert's gate rows then its up rows;
    mlp.experts.down_proj): ckpt's mapping joins llama.cpp's ffn_gate_exps
    and ffn_up_exps into the first, each expert's rows read into place by
    the engine (ckpt_gguf_hf_plan_joined), so transformers' loader never
    reads a tensor.  The state dict and logits equal transformers' own
    GGUF load where it has one, and for F32 the original model's."""
    build, kw, theirs = MOE[family]
    model, path = f32_gguf(moe_dir, family, build, gguf_type)
    assert ckpt_maps(path)
    kw = kw if kw is not None else {"config": transformers.AutoConfig.from_pretrained(model)}
    expected = transformers_own(path, **kw) if theirs else None
    request.getfixturevalue("no_numpy_dequantization")
    got = ckt.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, **kw)
    assert type(got).__name__ == transformers.AutoConfig.from_pretrained(model).architectures[0]
    if expected is not None:  # the config ckpt's: the original's, not transformers' parsing (rms_norm_eps as an f32)
        assert_same_model(expected, got, same_config=False)
    have = got.state_dict()
    assert have["model.layers.1.mlp.experts.gate_up_proj"].shape == (4, 2 * have[
        "model.layers.1.mlp.experts.down_proj"].shape[2], 32)
    if gguf_type == "f32":  # bfloat16 weights in F32: exact
        want = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).state_dict()
        assert have.keys() == want.keys()
        assert all(torch.equal(t, want[k]) for k, t in have.items())


@pytest.mark.parametrize("gguf_type", ["f32", "q8_0"])
@pytest.mark.parametrize("family", ["qwen2moe", "qwen3moe"])
def test_qwen_moe_ggufs_get_ckpts_config(moe_dir, family, gguf_type, no_numpy_dequantization):
    """No keywords: transformers' parsing of a Qwen MoE GGUF drops the
    experts' widths (a model of 1408- or 768-wide experts, which the tensors
    do not fit), so the config is ckpt's (ckpt_gguf_hf_config): the
    original's widths, shared expert and norm_topk_prob, and its logits
    (exactly from F32, the bf16 weights widened; within Q8_0's rounding)."""
    model, path = f32_gguf(moe_dir, family, MOE[family][0], gguf_type)
    got = ckt.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    source = transformers.AutoConfig.from_pretrained(model)
    assert type(got).__name__ == source.architectures[0]
    for key in ("moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob", "decoder_sparse_step",
                "num_experts", "num_experts_per_tok"):
        assert getattr(got.config, key, None) == getattr(source, key, None), key
    want = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    with torch.no_grad():
        a, b = got(IDS).logits, want(IDS).logits
    assert (a - b).abs().max().item() <= (0.0 if gguf_type == "f32" else 2e-2)


@pytest.mark.parametrize("family, build, key", [("qwen3", tiny_qwen3, "head_dim"),
                                                 ("llama3", tiny_llama, "head_dim")])
def test_a_width_transformers_parsing_drops_comes_from_the_file(tmp_path, family, build, key,
                                                                no_numpy_dequantization):
    """No keywords: transformers' parsing of a dense Qwen3 GGUF drops
    qwen3.attention.key_length, and Qwen3Config keeps its default head_dim
    of 128, which the tiny model's 16-wide heads do not fit: the config is
    ckpt's then, and the model the original's.  A Llama's config derives
    head_dim from the widths transformers does parse, so a Llama GGUF keeps
    transformers' own config."""
    model, path = f32_gguf(tmp_path, family, build)
    source = transformers.AutoConfig.from_pretrained(model)
    got = ckt.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    assert getattr(got.config, key) == getattr(source, key)
    want = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    with torch.no_grad():
        assert torch.equal(got(IDS).logits, want(IDS).logits)
    # Qwen3: ckpt's config; Llama: transformers' own parsing, as before.
    assert (ckt._gguf_config(str(path.parent), path.name, {}) is None) == (family == "llama3")


def test_the_experts_load_cast_and_report_each_tensor_once(moe_dir):
    """The joined tensor is one item of the load, its pieces written into
    the caller's buffer: on_loaded (the engine's item_done, once its every
    piece is in place) reports it once, whole, and a dtype casts every
    piece of it."""
    import ckpt
    model, path = f32_gguf(moe_dir, "qwen3moe", MOE["qwen3moe"][0])
    state = ckpt.load(path, as_hf="joined", dtype=torch.bfloat16)
    gate_up = state["model.layers.1.mlp.experts.gate_up_proj"]
    want = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16).state_dict()
    assert gate_up.dtype == torch.bfloat16 and torch.equal(gate_up, want["model.layers.1.mlp.experts.gate_up_proj"])
    target, seen = {k: torch.zeros_like(v) for k, v in state.items()}, []
    ckpt.load_into(target, path, as_hf="joined",  # in place: each target's dtype, bfloat16
                   on_loaded=lambda n, t: seen.append((n, t.clone())))
    assert sorted(n for n, _ in seen) == sorted(state)
    assert all(torch.equal(t, state[n]) for n, t in seen)


def test_a_conversion_writes_the_joined_experts_as_a_load_reads_them(moe_dir, tmp_path):
    """A one-process conversion of the joined plan writes each piece at its
    offset in the writer's tensor: the file holds what the load gives."""
    import ckpt
    from ckpt import _ckpt
    from safetensors.torch import load_file
    _, path = f32_gguf(moe_dir, "qwen3moe", MOE["qwen3moe"][0])
    with ckpt.open(path) as c:
        plan = _ckpt.Plan(c._catalog)
        plan.gguf_hf("BF16", False, True)
        plan.convert(str(tmp_path / "joined.safetensors"))
    written = load_file(tmp_path / "joined.safetensors")
    state = ckpt.load(path, as_hf="joined", dtype=torch.bfloat16)
    assert "model.layers.0.mlp.experts.gate_up_proj" in state
    assert written.keys() == state.keys() and all(torch.equal(written[k], state[k]) for k in state)


def test_a_gguf_ckpt_does_not_map_goes_to_transformers(tmp_path):
    """A family ckpt's mapping does not take (a made-up one here, the file
    otherwise a Qwen3's) is transformers' business: ckpt.transformers
    fails as transformers' own load fails on it."""
    _, path = f32_gguf(tmp_path, "qwen3", tiny_qwen3)
    src = rewritten(path, path.parent / "m.gguf", change={"general.architecture": "mystery"},
                    keys=lambda k: "mystery." + k[len("qwen3."):] if k.startswith("qwen3.") else k)
    assert not ckpt_maps(src)
    with pytest.raises(ValueError, match="mystery") as theirs:
        transformers_own(src)
    with pytest.raises(ValueError, match="mystery") as ours:
        ckt.AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name)
    assert str(ours.value) == str(theirs.value)


def test_gemma_norms_are_read_by_ckpt(tmp_path, no_numpy_dequantization):
    """Gemma 2's norms are stored + 1: ckpt's mapping takes the 1 away as
    the engine reads them, in a load as in `ckpt convert`, so ckpt reads
    the file (tests/interop/test_gguf_load_hf.py: the original model).
    (Its vocabulary kept: the script's Gemma has no gemma2.vocab_size.)"""
    model, path = f32_gguf(tmp_path, "gemma2", lambda d: tiny_gemma(d, "Gemma2ForCausalLM"), vocabulary=True)
    assert ckpt_maps(path)
    got = ckt.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    want = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).state_dict()
    assert all(torch.equal(t, want[k]) for k, t in got.state_dict().items())


@pytest.mark.parametrize("value", ["joind", "yes", 1.5])
def test_as_hf_refuses_a_value_it_does_not_know(tmp_path, value):
    """A typo of as_hf="joined" is an error, not as_hf=True (which would
    leave a MoE GGUF's experts unjoined without a word)."""
    import ckpt
    from safetensors.torch import save_file
    save_file({"a": torch.zeros(2)}, tmp_path / "x.safetensors")
    with pytest.raises(ValueError, match="as_hf="):
        ckpt.load(tmp_path / "x.safetensors", as_hf=value)
