"""ckpt.transformers (issue 30, item 4): from_pretrained with the weights
read by ckpt.load_into(assign=True) gives the model transformers'
from_pretrained gives — every tensor of the state dict and the logits
torch.equal — for safetensors (one file, shards with an index), torch
.bin files (one, or shards with an index), dtypes, key renames, the base
model prefix added or stripped, missing weights, tied weights, device
maps, and a Hub repo id resolved through huggingface_hub's cache."""
import json
import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
import ckpt.transformers as ckt  # noqa: E402


def llama(tie=False, **kw):
    size = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, tie_word_embeddings=tie)
    size.update(kw)
    return transformers.LlamaForCausalLM, transformers.LlamaConfig(**size)


def qwen2(tie=True):
    return transformers.Qwen2ForCausalLM, transformers.Qwen2Config(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=tie)


def gpt2():
    return transformers.GPT2LMHeadModel, transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=64, bos_token_id=0, eos_token_id=0)


def bert():
    return transformers.BertForMaskedLM, transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64)


MODELS = {"llama": llama, "llama-tied": lambda: llama(True), "qwen2": qwen2, "gpt2": gpt2, "bert": bert}
AUTO = {"bert": "AutoModelForMaskedLM"}


def make(kind, folder, fmt="safetensors", dtype=torch.float32, seed=0):
    """A random tiny model of `kind` saved in `folder` as `fmt`; returns its class."""
    cls, config = MODELS[kind]()
    torch.manual_seed(seed)
    model = cls(config).to(dtype)
    if fmt == "safetensors":
        model.save_pretrained(folder)
    elif fmt == "sharded":
        model.save_pretrained(folder, max_shard_size="20KB")
        assert os.path.exists(os.path.join(folder, "model.safetensors.index.json"))
    else:
        model.save_pretrained(folder)  # config.json, generation_config.json
        os.remove(os.path.join(folder, "model.safetensors"))
        write_bin(model.state_dict(), folder, sharded=fmt == "bin-sharded")
    return cls


def write_bin(state, folder, sharded):
    """torch.save files as transformers' older save_pretrained wrote them:
    pytorch_model.bin, or shards with pytorch_model.bin.index.json."""
    state = {k: v.clone() for k, v in state.items()}
    if not sharded:
        torch.save(state, os.path.join(folder, "pytorch_model.bin"))
        return
    names = list(state)
    half = len(names) // 2
    parts = [names[:half], names[half:]]
    weight_map = {}
    for i, part in enumerate(parts):
        fname = f"pytorch_model-{i + 1:05d}-of-{len(parts):05d}.bin"
        torch.save({k: state[k] for k in part}, os.path.join(folder, fname))
        weight_map.update(dict.fromkeys(part, fname))
    with open(os.path.join(folder, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(v.nbytes for v in state.values())}, "weight_map": weight_map}, f)


def assert_same(ref, got):
    """Every tensor of the state dict, and the logits for a fixed input, equal."""
    assert type(got) is type(ref)
    assert not got.training, "model.eval() as from_pretrained"
    rs, gs = ref.state_dict(), got.state_dict()
    assert list(gs) == list(rs)
    for k in rs:
        assert gs[k].dtype == rs[k].dtype, k
        assert gs[k].device == rs[k].device, k
        assert torch.equal(gs[k], rs[k]), k
    for (n, b), (n2, b2) in zip(ref.named_buffers(), got.named_buffers()):
        assert n == n2 and torch.equal(b, b2), n
    rp = {n for n, _ in ref.named_parameters()}
    assert {n for n, _ in got.named_parameters()} == rp, "tied parameters are one Parameter, as in transformers"
    ids = torch.tensor([[1, 5, 7, 2, 9, 11]])
    with torch.no_grad():
        r, g = ref(ids), got(ids)
    assert torch.equal(g[0], r[0])  # logits, or the bare model's last hidden state
    assert got.config.to_dict() == ref.config.to_dict()


@pytest.mark.parametrize("fmt", ["safetensors", "sharded", "bin", "bin-sharded"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_auto_class_equals_from_pretrained(tmp_path, kind, fmt):
    make(kind, tmp_path, fmt)
    auto = AUTO.get(kind, "AutoModelForCausalLM")
    ref = getattr(transformers, auto).from_pretrained(tmp_path)
    got = getattr(ckt, auto).from_pretrained(tmp_path)
    assert_same(ref, got)


@pytest.mark.parametrize("dtype", ["auto", torch.bfloat16, "float16", torch.float32])
@pytest.mark.parametrize("kind", ["llama-tied", "gpt2"])
def test_dtype(tmp_path, kind, dtype):
    make(kind, tmp_path, "safetensors", dtype=torch.bfloat16)
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=dtype)
    got = ckt.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=dtype)
    assert_same(ref, got)
    old = ckt.AutoModelForCausalLM.from_pretrained(tmp_path, torch_dtype=dtype)
    assert_same(ref, old)


def test_from_pretrained_takes_the_class_config_names(tmp_path):
    cls = make("qwen2", tmp_path)
    got = ckt.from_pretrained(tmp_path)
    assert_same(cls.from_pretrained(tmp_path), got)
    assert repr(ckt.LlamaForCausalLM) == "ckpt.transformers.LlamaForCausalLM"
    assert_same(transformers.Qwen2Model.from_pretrained(tmp_path), ckt.Qwen2Model.from_pretrained(tmp_path))
    with pytest.raises(AttributeError, match="NoSuchModel"):
        ckt.NoSuchModel


def test_base_model_prefix_stripped_and_added(tmp_path):
    """A causal LM's checkpoint loaded as the bare model ("model." stripped),
    and a bare model's loaded as the causal LM ("model." added, the head
    tied to the embedding as the config says)."""
    make("llama-tied", tmp_path / "lm")
    assert_same(transformers.AutoModel.from_pretrained(tmp_path / "lm"), ckt.AutoModel.from_pretrained(tmp_path / "lm"))
    _, config = llama(True)
    torch.manual_seed(1)
    transformers.LlamaModel(config).save_pretrained(tmp_path / "bare")
    ref, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "bare", output_loading_info=True)
    got, got_info = ckt.AutoModelForCausalLM.from_pretrained(tmp_path / "bare", output_loading_info=True)
    assert_same(ref, got)
    assert got_info == info
    assert got.lm_head.weight is got.model.embed_tokens.weight


def test_missing_keys_initialised_as_transformers_does(tmp_path):
    """An untied head the checkpoint lacks is initialised by the model's
    _init_weights, from the same random stream as from_pretrained's."""
    make("llama", tmp_path)
    from safetensors.torch import load_file, save_file
    state = load_file(tmp_path / "model.safetensors")
    del state["lm_head.weight"]
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    torch.manual_seed(5)
    ref, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    torch.manual_seed(5)
    got, got_info = ckt.AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert info["missing_keys"] == {"lm_head.weight"} and got_info == info
    assert_same(ref, got)
    assert got.lm_head.weight.std() > 0


def test_legacy_names_renamed_as_transformers_renames(tmp_path):
    """LayerNorm gamma/beta of old checkpoints: transformers' renamings,
    applied by ckpt's plan."""
    make("bert", tmp_path)
    from safetensors.torch import load_file, save_file
    state = load_file(tmp_path / "model.safetensors")
    old = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
           for k, v in state.items()}
    assert any("gamma" in k for k in old)
    save_file(old, tmp_path / "model.safetensors", metadata={"format": "pt"})
    ref, info = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    got, got_info = ckt.AutoModelForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and got_info == info
    assert_same(ref, got)


def test_converted_weights_use_transformers_converters(tmp_path):
    """Mixtral's checkpoints keep one tensor per expert; transformers fuses
    them on load (WeightConverter): those names go through its converters,
    the others through load_into."""
    config = transformers.MixtralConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                        num_experts_per_tok=2)
    torch.manual_seed(0)
    transformers.MixtralForCausalLM(config).save_pretrained(tmp_path)
    import ckpt
    assert any(".experts.0." in n for n in ckpt.open(tmp_path / "model.safetensors").keys()), "saved per expert"
    ref, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    got, got_info = ckt.AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert got_info == info
    assert_same(ref, got)


@pytest.mark.parametrize("device_map", ["cpu", {"": "cpu"}, {"model.embed_tokens": "cpu", "model.layers": "cpu",
                                                             "model.norm": "cpu", "lm_head": "cpu"}])
def test_device_map(tmp_path, device_map):
    """Each tensor on the device its prefix maps to (the CPU here: transformers
    itself needs accelerate for any device_map, ckpt does not)."""
    make("llama", tmp_path)
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    got = ckt.AutoModelForCausalLM.from_pretrained(tmp_path, device_map=device_map)
    assert_same(ref, got)
    assert {t.device.type for t in got.state_dict().values()} == {"cpu"}
    with pytest.raises(ValueError, match="device_map"):
        ckt.AutoModelForCausalLM.from_pretrained(tmp_path, device_map=["cpu"])


def test_views_of_the_file(tmp_path):
    """No cast: the parameters are ckpt's copy-on-write views of the file
    (nothing held twice), and stay the model's own to change."""
    make("llama", tmp_path)
    got = ckt.AutoModelForCausalLM.from_pretrained(tmp_path)
    w = got.model.layers[0].mlp.up_proj.weight
    assert w._is_hf_initialized
    import ckpt
    mapped = ckpt.load(tmp_path / "model.safetensors")["model.layers.0.mlp.up_proj.weight"]
    assert torch.equal(w, mapped)
    with torch.no_grad():
        w.add_(1)
    assert torch.equal(ckpt.load(tmp_path / "model.safetensors")["model.layers.0.mlp.up_proj.weight"], mapped)


def hub_cache(tmp_path, folder, repo="org/tiny", commit="0123456789abcdef0123456789abcdef01234567"):
    """huggingface_hub's cache layout for `repo` at `commit` (main), holding
    the files of `folder`: blobs, snapshot links, refs/main."""
    root = tmp_path / "hub"
    base = root / ("models--" + repo.replace("/", "--"))
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(commit)
    (base / "blobs").mkdir()
    snap = base / "snapshots" / commit
    snap.mkdir(parents=True)
    import hashlib
    for name in os.listdir(folder):
        data = (folder / name).read_bytes()
        blob = base / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snap), snap / name)
    return root


@pytest.mark.parametrize("fmt", ["safetensors", "sharded"])
def test_hub_repo_resolved_through_huggingface_hub(tmp_path, monkeypatch, fmt):
    """A repo id: files found by huggingface_hub in its cache (offline, as
    it is told), read by ckpt through the snapshot's links."""
    make("llama-tied", tmp_path / "src", fmt)
    cache = hub_cache(tmp_path, tmp_path / "src")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ref = transformers.AutoModelForCausalLM.from_pretrained("org/tiny", cache_dir=cache, revision="main")
    got = ckt.AutoModelForCausalLM.from_pretrained("org/tiny", cache_dir=cache, revision="main")
    assert_same(ref, got)
    with pytest.raises(OSError):
        ckt.AutoModelForCausalLM.from_pretrained("org/absent", cache_dir=cache)


def test_options_transformers_does_go_to_it(tmp_path):
    make("llama", tmp_path)
    state = transformers.LlamaForCausalLM.from_pretrained(tmp_path).state_dict()
    _, config = llama()
    got = ckt.LlamaForCausalLM.from_pretrained(None, config=config, state_dict=state)
    assert_same(transformers.LlamaForCausalLM.from_pretrained(None, config=config, state_dict=state), got)


@pytest.mark.parametrize("kind,fmt,dtype", [("llama", "safetensors", "auto"), ("llama", "sharded", "bfloat16"),
                                            ("qwen2", "bin", "auto")])
def test_tensor_parallel_reads_each_ranks_part(tmp_path, kind, fmt, dtype):
    """tp_plan="auto" on 2 gloo ranks (torchrun): each rank's shards (their
    DTensor placements and local values) and the logits equal transformers'
    own tensor-parallel from_pretrained; ckpt serves the bytes (no pickle
    runs for .bin), and a rank is served its part of the sharded tensors,
    not the whole checkpoint."""
    import subprocess
    import sys
    folder, out = tmp_path / "model", tmp_path / "out"
    out.mkdir()
    make(kind, folder, fmt)
    worker = os.path.join(os.path.dirname(__file__), "tp_worker.py")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", worker,
                          str(folder), str(out), dtype], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    for rank in (0, 1):
        r = json.loads((out / f"rank{rank}.json").read_text())
        assert r["diffs"] == [] and r["logits"], r
        assert r["sharded"] > 0, "the tp plan sharded nothing: the test would prove nothing"
        assert r["served"]["calls"] > 0, "ckpt served no tensor: transformers read the files itself"
        # both models' tensors came from ckpt's slices only for ckpt's load;
        # a rank is served its part of the sharded ones, the replicated
        # norms whole: well under the whole checkpoint
        assert r["served"]["bytes"] < 0.75 * r["checkpoint_bytes"], r


def test_from_pretrained_of_a_gguf_is_its_causal_lm(tmp_path):
    """transformers' GGUF config names no architecture, so
    ckpt.transformers.from_pretrained(dir, gguf_file=...) took the
    AutoModel: a Phi3Model without the head the file holds (lm_head
    reported UNEXPECTED).  A llama.cpp GGUF generates: its causal LM, the
    model and logits of transformers' AutoModelForCausalLM of the file."""
    import subprocess
    import sys
    pytest.importorskip("gguf")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "interop"))
    from ckptlib import BIN_PATH
    from test_llamacpp import tiny_phi3, tokenizer
    model = tmp_path / "tiny-phi3"
    tiny_phi3(model)
    tokenizer("phi3", model)  # a 32k vocabulary: transformers parses the GGUF's in a few seconds
    gguf = tmp_path / "phi3-f32.gguf"
    r = subprocess.run([BIN_PATH, "convert", model, gguf, "--dtype", "f32", "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = ckt.from_pretrained(tmp_path, gguf_file=gguf.name)
    want = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=gguf.name)
    assert type(got) is transformers.Phi3ForCausalLM
    ids = torch.tensor([[1, 5, 100, 2000, 7]])
    with torch.no_grad():
        assert torch.equal(got(ids).logits, want(ids).logits)
