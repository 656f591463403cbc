"""And back (issue 29 §4): a llama.cpp GGUF, as convert_hf_to_gguf.py writes
it, converted by ckpt into a Hugging Face model directory that transformers'
from_pretrained loads, against transformers' own load of the same GGUF file
(from_pretrained(..., gguf_file=...), which dequantizes with gguf-py and
puts llama's Q/K rows back with its reverse_permute): the same tensors and
the same logits, exactly.  The models are test_llamacpp.py's tiny random
ones, converted by the vendored script."""
import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(__file__))
from test_llamacpp import (LLAMA_CPP, SPM_FILES, TOKENIZER_FILES, TOKENIZERS, broken_copy,  # noqa: E402,F401
                           build_llama2_tokenizer, ckpt, models, reference, tiny_gemma, tiny_llama, tokenizer)

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


# Llama's Q8_0 too: its Q and K rows are put back in whole 34-byte blocks.
CASES = [(f, t) for f in ("llama3", "llama2", "qwen2", "qwen3", "phi3") for t in ("f32", "f16", "bf16", "q8_0")]


@pytest.mark.parametrize("family,outtype", CASES)
def test_logits_equal_transformers_own_gguf_load(models, family, outtype, tmp_path):
    """Dequantized to f32, ckpt's directory is what transformers makes of
    the GGUF itself: every tensor and the logits, bit for bit (both
    dequantize the same blocks: d × q in f32).  transformers reads a copy
    without the vocabulary's arrays, whose weights and config are the
    file's (without_vocabulary: gguf-py parses a vocabulary element by
    element, ~40 s a load of Llama 3's)."""
    gguf = models[family][1][outtype]
    hf = to_hf(gguf, tmp_path / "hf", "--dtype", "f32")
    spm = ["tokenizer.model"] if family in ("llama2", "phi3") else []  # SentencePiece's file
    assert sorted(os.listdir(hf)) == sorted(["config.json", "model.safetensors", "tokenizer.json",
                                             "tokenizer_config.json", *spm])
    # transformers' GGUF config drops qwen3.attention.key_length: Qwen3Config's
    # default head_dim (128) would stay, so the tiny model's (16) is given.
    kw = {"head_dim": json.loads((hf / "config.json").read_text())["head_dim"]} if family == "qwen3" else {}
    theirs = transformers_model(without_vocabulary(gguf, tmp_path / gguf.name), **kw)
    assert_same_model(theirs, transformers_model(hf))


# Mixtures of experts: llama.cpp stacks each layer's experts into one 3-D
# tensor; ckpt writes one 2-D tensor per expert, each a slice of the stack.
MOE = ["mixtral", "qwen2moe", "qwen3moe"]
# The largest difference of a logit from the original's, per outtype: F32
# and BF16 hold the bf16 weights exactly, F16 rounds few of them, Q8_0 rounds
# every block to 8 bits.
MOE_TOLERANCE = {"f32": 0.0, "bf16": 0.0, "f16": 1e-4, "q8_0": 2e-2}


def moe_logits(model):
    with torch.no_grad():
        return model(IDS).logits


@pytest.mark.parametrize("family", MOE)
@pytest.mark.parametrize("outtype", ["f32", "f16", "bf16", "q8_0"])
def test_moe_logits_equal_the_originals(models, family, outtype, tmp_path):
    """A mixture of experts back to Hugging Face: config.json names the
    family's config class and its expert keys, from_pretrained loads the
    per-expert tensors, and the logits are the original model's (exactly
    where the GGUF holds its bf16 weights exactly)."""
    original, ggufs = models[family]
    hf = to_hf(ggufs[outtype], tmp_path / "hf", "--dtype", "f32")
    config = json.loads((hf / "config.json").read_text())
    want = json.loads((original / "config.json").read_text())
    for key in ("architectures", "model_type", "num_experts_per_tok", "hidden_act", "num_local_experts", "num_experts",
                "moe_intermediate_size", "shared_expert_intermediate_size"):
        assert config.get(key) == want.get(key), key
    if family != "mixtral":  # llama.cpp's graph: Qwen2-MoE weighs the chosen experts as they are, Qwen3-MoE normalized
        assert config["norm_topk_prob"] == want["norm_topk_prob"]
    a, b = moe_logits(transformers_model(original)), moe_logits(transformers_model(hf))
    assert (a - b).abs().max().item() <= MOE_TOLERANCE[outtype]
    back, want = load_file(hf / "model.safetensors"), load_file(original / "model.safetensors")
    assert back.keys() == want.keys()  # one tensor per expert, under the original's names
    for k in want if outtype == "f32" else ():  # F32: each expert's tensors the original's, bit for bit
        assert torch.equal(back[k], want[k].float()), k


def test_moe_equals_transformers_own_gguf_load(models, tmp_path):
    """Qwen3-MoE, which transformers 5.23 loads from the GGUF itself (its
    GGUF config drops the experts' width: the tiny model's is given), Q8_0
    experts dequantized: the same state dict and logits, bit for bit.  (Its
    Qwen2-MoE load fails on the shared expert's gate, and it reads a Mixtral
    GGUF as a dense Llama.)  transformers reads the file without its
    vocabulary's arrays, as above."""
    gguf = models["qwen3moe"][1]["q8_0"]
    hf = to_hf(gguf, tmp_path / "hf", "--dtype", "f32")
    config = json.loads((hf / "config.json").read_text())
    theirs = transformers_model(without_vocabulary(gguf, tmp_path / gguf.name),
                                moe_intermediate_size=config["moe_intermediate_size"])
    assert_same_model(theirs, transformers_model(hf))


@pytest.mark.parametrize("key,value,tensor", [
    ("llama.expert_count", 8, "blk.0.ffn_gate_exps.weight"),  # the stack's first dimension
    ("llama.feed_forward_length", 32, "blk.0.ffn_gate_exps.weight"),  # an expert's rows
])
def test_moe_key_values_that_contradict_the_stacks_are_refused(models, tmp_path, key, value, tensor):
    """An expert count or width the stacked tensor's shape contradicts:
    refused naming the file, the tensor and the key; nothing written.  (The
    tensors are checked first: the copies leave the tokenizer out, quicker
    to write; Mixtral's: gguf-py reads Qwen's 151936 tokens slowly.)"""
    src = models["mixtral"][1]["f32"]
    src = rewritten(src, tmp_path / "m.gguf", drop=tokenizer_keys(src), change={key: value})
    refused(src, tmp_path, tensor, key)


@pytest.mark.parametrize("key,value,words", [
    ("llama.block_count", 100000, "at most 512 layers"),
    ("llama.expert_count", 2000, "at most 1024 experts"),
])
def test_counts_past_llama_cpps_bounds_are_refused(models, tmp_path, key, value, words):
    """A layer or expert count past llama.cpp's own is refused naming the
    key before anything is spent on it: the way back makes a tensor and a
    name per expert and (Gemma) a layer type per layer, so a few bytes of
    key-values asked for gigabytes."""
    src = models["mixtral"][1]["f32"]
    src = rewritten(src, tmp_path / "m.gguf", drop=tokenizer_keys(src), change={key: value})
    refused(src, tmp_path, key, str(value), words)


def test_moe_without_its_expert_count_is_refused(models, tmp_path):
    src = models["mixtral"][1]["f32"]
    src = rewritten(src, tmp_path / "m.gguf", drop=("llama.expert_count", *tokenizer_keys(src)))
    refused(src, tmp_path, "llama.expert_count", "missing", "blk.0.ffn_gate_exps.weight")


# Texts for the tokenizers: runs of spaces, tabs and newlines, unicode
# (accents, CJK, emoji, no-break spaces), digits, contractions, code, and
# each family's special tokens written in the text.
TEXTS = ["Hello world", "  two  spaces   and\ttabs\n\nnewlines  ", " leading space", "",
         "unicode: h\u00e9llo w\u00f6rld \u2014 \u00fcn\u00efc\u00f6d\u00e9 \u65e5\u672c\u8a9e\u30c6\u30ad\u30b9\u30c8 \U0001f917\U0001f680",
         "\u00a0nbsp\u3000ideographic", "numbers 1234567 3.14159 and CAPS", "don't I'll we're",
         "code:\n    def f(x):\n        return x**2  # c\n"]
SPECIAL_TEXTS = {
    "llama3": "<|begin_of_text|>user<|eot_id|> <|start_header_id|>x<|end_header_id|>\n\n",
    "qwen2": "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "llama2": "<s>[INST] hi [/INST] ok</s>",
    # no space after a chat token: transformers' GGUF load keeps the spaces
    # that llama.cpp strips after them (test_phi3_added_tokens_strip_...)
    "phi3": "<|user|>hi<|end|><|assistant|><|endoftext|>\n",
}


def auto_tokenizer(path):
    from transformers import AutoTokenizer
    path = Path(path)
    if path.suffix == ".gguf":
        return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return AutoTokenizer.from_pretrained(path)


def ids(tokenizer, texts):
    return [tokenizer(t)["input_ids"] for t in texts]


@pytest.fixture(scope="module")
def tokenizers(models, tmp_path_factory):
    """Each family's tokenizer three ways: from ckpt's directory, from
    transformers' own GGUF load, and the original HF tokenizer."""
    out = {}
    for family in ("llama3", "qwen2", "llama2", "phi3"):
        gguf = models[family][1]["f16"]
        hf = to_hf(gguf, tmp_path_factory.mktemp(family) / "hf")
        out[family] = (auto_tokenizer(hf), auto_tokenizer(gguf), auto_tokenizer(models[family][0]), hf)
    return out


@pytest.mark.parametrize("family", ["llama3", "qwen2", "llama2", "phi3"])
def test_tokenizer_ids_equal_transformers_own_gguf_tokenizer(tokenizers, family):
    """tokenizer.json and tokenizer_config.json of the GGUF's key-values:
    AutoTokenizer gives the ids transformers' GGUF load gives (SentencePiece
    vocabularies: the merges rebuilt from the scores, as it rebuilds them),
    BOS included, special tokens whole."""
    ours, theirs, _, _ = tokenizers[family]
    texts = TEXTS + [SPECIAL_TEXTS[family]]
    assert ids(ours, texts) == ids(theirs, texts)
    assert (ours.bos_token, ours.eos_token, ours.unk_token) == (theirs.bos_token, theirs.eos_token, theirs.unk_token)


@pytest.mark.parametrize("family", ["llama3", "qwen2"])
def test_byte_level_tokenizer_ids_equal_the_original(tokenizers, family):
    """Byte-level BPE: the original tokenizer's ids on every text, also
    where transformers' GGUF load is not the original (it adds
    <|endoftext|> to Llama 3's vocabulary as a new token and drops Qwen2's
    NFC normalizer): ckpt writes what the GGUF's pre-tokenizer name says."""
    ours, theirs, original, _ = tokenizers[family]
    texts = TEXTS + [SPECIAL_TEXTS[family], "<|endoftext|> e\u0301t\u00e9 ", "na\u0308ive cafe\u0301"]
    assert ids(ours, texts) == ids(original, texts)
    assert ids(theirs, texts) != ids(original, texts)  # where transformers' GGUF load is not the original


# Phi-3's chat tokens (and </s>) followed by spaces and newlines, which
# llama.cpp strips after them as the original tokenizer does; none after
# <|endoftext|>, which llama.cpp does not strip, nor text right after a
# special token (the original's Metaspace prefixes only the first piece).
PHI3_SPACED = ["hi <|user|>  \n <|end|> \n</s>   <|assistant|>\t<|placeholder1|>  ",
               "<|system|>\n<|end|>\n<|user|>\n \n<|end|>\n<|assistant|>\n"]


def phi3_rstrip(hf):
    """{content: rstrip} of tokenizer.json's added tokens and of
    tokenizer_config.json's added_tokens_decoder."""
    added = json.loads((hf / "tokenizer.json").read_text())["added_tokens"]
    decoder = json.loads((hf / "tokenizer_config.json").read_text())["added_tokens_decoder"].values()
    return {t["content"]: t["rstrip"] for t in added}, {t["content"]: t["rstrip"] for t in decoder}


def test_phi3_added_tokens_strip_the_spaces_after_them_as_llama_cpp(tokenizers, models, tmp_path):
    """The GGUF keeps no rstrip: llama.cpp sets it for a model named Phi-3
    (general.name holds "phi-3" or "phi3") on its special tokens and </s>,
    but <unk>, <s> and <|endoftext|> (llama-vocab.cpp).  ckpt's tokenizer
    files carry it: the original's ids where spaces follow those tokens,
    which transformers' own GGUF tokenizer does not give.  A phi3 GGUF of
    another name gets none, as llama.cpp gives it none."""
    ours, theirs, original, hf = tokenizers["phi3"]
    assert ids(ours, PHI3_SPACED) == ids(original, PHI3_SPACED)
    assert ids(theirs, PHI3_SPACED) != ids(original, PHI3_SPACED)
    added, decoder = phi3_rstrip(hf)
    want = {t: t not in ("<unk>", "<s>", "<|endoftext|>") for t in added}
    assert added == want and decoder == {t: want[t] for t in decoder}
    assert want["<|user|>"] and want["</s>"] and not want["<|endoftext|>"]
    src = models["phi3"][1]["f16"]
    other = to_hf(rewritten(src, tmp_path / "other.gguf", change={"general.name": "Tiny"}), tmp_path / "hf")
    assert not any(v for d in phi3_rstrip(other) for v in d.values())


def test_sentencepiece_tokenizer_ids_equal_sentencepiece(tokenizers, models):
    """Llama 2's: the ids of SentencePiece itself (its merges by score;
    texts that do not start with a space, where SentencePiece always adds
    its prefix and Metaspace does not), runs of spaces inside included."""
    import sentencepiece
    ours = tokenizers["llama2"][0]
    sp = sentencepiece.SentencePieceProcessor()
    sp.LoadFromFile(str(models["llama2"][0] / "tokenizer.model"))
    texts = [t for t in TEXTS if t and not t[0].isspace()] + ["a  b   c    d", "x\n  y"]
    assert ids(ours, texts) == [[1] + sp.encode(t) for t in texts]


def test_tokenizer_config_of_the_key_values(tokenizers):
    """Special tokens, BOS flags and the chat template from the GGUF."""
    _, _, original, hf = tokenizers["llama2"]
    config = json.loads((hf / "tokenizer_config.json").read_text())
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>", "<unk>")
    assert (config["add_bos_token"], config["add_eos_token"]) == (True, False)
    assert config["chat_template"] == original.chat_template
    ours = tokenizers["llama3"][0]
    assert ours("hi")["input_ids"][0] == 128000 and ours.decode(ours("h\u00e9 \U0001f917")["input_ids"][1:]) == "h\u00e9 \U0001f917"


def test_default_dtype_is_the_ggufs_float_type(models, tmp_path):
    """No --dtype: a BF16 GGUF's matrices stay bf16 (its f32 norms too are
    bf16: one dtype, as config.json says)."""
    hf = to_hf(models["llama3"][1]["bf16"], tmp_path / "hf")
    assert {t.dtype for t in load_file(hf / "model.safetensors").values()} == {torch.bfloat16}
    assert json.loads((hf / "config.json").read_text())["dtype"] == "bfloat16"
    hf8 = to_hf(models["qwen2"][1]["q8_0"], tmp_path / "hf8")  # quantized: bf16
    assert {t.dtype for t in load_file(hf8 / "model.safetensors").values()} == {torch.bfloat16}


def safetensors_header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return n, json.loads(f.read(n))


def test_safetensors_hold_save_pretrained_metadata_not_the_key_values(models, tmp_path):
    """The GGUF's key-values became config.json and the tokenizer's files:
    the safetensors header holds what transformers' save_pretrained writes
    ({"format": "pt"}), not a copy of them (Llama 3's vocabulary and merges
    were megabytes of header, and general.file_type said Q8_0 over bf16
    tensors); from_pretrained loads the directory as transformers loads the
    GGUF itself."""
    gguf = models["llama3"][1]["q8_0"]
    hf = to_hf(gguf, tmp_path / "hf", "--dtype", "f32")
    size, header = safetensors_header(hf / "model.safetensors")
    ours = transformers_model(hf)
    ours.save_pretrained(tmp_path / "saved")
    assert header["__metadata__"] == safetensors_header(tmp_path / "saved" / "model.safetensors")[1]["__metadata__"]
    assert header["__metadata__"] == {"format": "pt"}
    assert size < 128 * len(header)  # tensor entries alone: ~100 bytes each
    assert_same_model(transformers_model(without_vocabulary(gguf, tmp_path / gguf.name)), ours)


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


@pytest.mark.parametrize("family,rope", [
    ("llama3", {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0}),
    ("qwen3", {"rope_type": "yarn", "factor": 2.5, "original_max_position_embeddings": 16384, "rope_theta": 1000000.0,
               "beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.25}),
])
def test_rope_scaling_comes_back(models, tmp_path, family, rope):
    """Linear and yarn RoPE scaling (the key-values convert_hf_to_gguf.py
    writes) back as rope_parameters: the original's, and its logits."""
    model = broken_copy(models[family][0], tmp_path / "rope", config={"rope_parameters": rope})
    gguf = tmp_path / "m.gguf"
    r = ckpt("convert", model, gguf, "--dtype", "f32", "-q")
    assert r.returncode == 0, r.stderr
    hf = to_hf(gguf, tmp_path / "hf", "--dtype", "f32")
    assert json.loads((hf / "config.json").read_text())["rope_parameters"] == rope
    assert_same_model(transformers_model(model), transformers_model(hf))


@functools.cache
def gguf_reader(src):
    """gguf-py's reader of a GGUF that stays as it is (a reference, a
    fixture's file), parsed once for the tests that read or rewrite it:
    parsing a vocabulary of 128k tokens is ~9 s of CPU."""
    sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
    try:
        import gguf
        return gguf.GGUFReader(src)
    finally:
        sys.path.remove(str(LLAMA_CPP / "gguf-py"))


@pytest.fixture(scope="module", autouse=True)
def readers_let_go():
    """The parsed files (~0.5 GB a large vocabulary) kept no longer than this module."""
    yield
    gguf_reader.cache_clear()


def rewritten(src, dst, drop=(), change=None, types=None, tensors=None, keys=None):
    """A copy of a GGUF with key-values dropped, changed or added (gguf-py);
    `types`: a changed key-value's GGUF type by name ("INT32", "BOOL"…);
    `tensors`: name → array of the same shape and type, replacing its data;
    `keys`: a function giving each kept key-value's name in the copy."""
    sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
    try:
        import gguf
        r = gguf_reader(src)
        arch = (change or {}).get("general.architecture", r.fields["general.architecture"].contents())
        w = gguf.GGUFWriter(dst, arch=arch)
        for name, f in r.fields.items():
            if name.startswith("GGUF.") or name == "general.architecture" or name in drop:
                continue
            value = (change or {}).get(name, f.contents())
            kind = gguf.GGUFValueType[types[name]] if name in (types or {}) else f.types[0]
            w.add_key_value(keys(name) if keys else name, value, kind,
                            sub_type=f.types[-1] if len(f.types) > 1 else None)
        for name, value in (change or {}).items():  # new keys: strings
            if name not in r.fields:
                w.add_string(name, value)
        for t in r.tensors:
            # the data's own shape: the writer reads a uint8 array (BF16's and
            # the quantized types' bytes, as the reader gives them) as rows of
            # bytes, and any other as the elements' shape
            w.add_tensor(t.name, (tensors or {}).get(t.name, t.data), raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    finally:
        sys.path.remove(str(LLAMA_CPP / "gguf-py"))
    return dst


def tokenizer_keys(src):
    """The tokenizer's key-values of a GGUF (gguf-py)."""
    return [k for k in gguf_reader(src).fields if k.startswith("tokenizer.")]


# A vocabulary's arrays: what makes a real tokenizer's key-values large
# (Llama 3's 128k tokens and 280k merges).
VOCABULARY_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores",
                   "tokenizer.ggml.merges")
# GGUF's value types (gguf-py's GGUFValueType) by their size in bytes; 8 a
# string, 9 an array.
GGUF_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
GGUF_UINT32 = 4


class RawGGUF:
    """A GGUF's bytes cut where its parts lie, without reading the values
    (gguf-py's reader parses a vocabulary element by element: ~20 s Llama
    3's): `kvs`, {name: (type, bytes of the whole key-value, value's
    offset)}, the tensor infos' bytes, the alignment and the tensor data."""

    def __init__(self, src):
        import struct
        self.src, data = src, Path(src).read_bytes()
        magic, version, self.n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
        assert magic == b"GGUF" and version == 3, src
        at, self.alignment, self.kvs, self.data = 24, 32, {}, data
        for _ in range(n_kv):
            start = at
            name, at = self.string(at)
            kind, = struct.unpack_from("<I", data, at)
            end = self.skip(kind, at + 4)
            self.kvs[name.decode()] = (kind, data[start:end], at + 4)
            at = end
        if "general.alignment" in self.kvs:
            self.alignment, = struct.unpack_from("<I", data, self.kvs["general.alignment"][2])
        infos = at
        for _ in range(self.n_tensors):
            _, at = self.string(at)
            dims, = struct.unpack_from("<I", data, at)
            at += 4 + 8 * dims + 4 + 8
        self.infos = data[infos:at]
        self.tensor_data = memoryview(data)[-(-at // self.alignment) * self.alignment:]

    def string(self, at):
        n = int.from_bytes(self.data[at:at + 8], "little")
        return self.data[at + 8:at + 8 + n], at + 8 + n

    def skip(self, kind, at):
        import struct
        if kind == 8:
            return self.string(at)[1]
        if kind == 9:
            item, count = struct.unpack_from("<IQ", self.data, at)
            at += 12
            if item in (8, 9):
                for _ in range(count):
                    at = self.skip(item, at)
                return at
            return at + count * GGUF_SCALAR_SIZES[item]
        return at + GGUF_SCALAR_SIZES[kind]

    def value(self, name):
        """A string's text, an array's length, a UINT32's number."""
        kind, _, at = self.kvs[name]
        if kind == 8:
            return self.string(at)[0].decode()
        assert kind in (9, 4), f"{self.src}: {name}'s type {kind}"
        return int.from_bytes(self.data[at + 4:at + 12] if kind == 9 else self.data[at:at + 4], "little")


def edited(src, dst, drop=(), strings=None, counts=None):
    """A copy of a GGUF with key-values dropped, string key-values
    (`strings`: name → text) given another text, or UINT32 key-values added
    last (`counts`: name → number), made on the bytes (RawGGUF): every
    other key-value and each tensor info copied as its bytes, the tensor
    data byte for byte at the file's alignment."""
    import struct
    raw = src if isinstance(src, RawGGUF) else RawGGUF(src)
    strings, counts = strings or {}, counts or {}
    assert set(strings) <= set(raw.kvs) and not set(counts) & set(raw.kvs), (raw.src, strings, counts)
    kept = []
    for name, (kind, whole, at) in raw.kvs.items():
        if name in strings:
            assert kind == 8, f"{raw.src}: {name} is not a string"
            text = strings[name].encode()
            kept.append(struct.pack("<Q", len(name)) + name.encode() + struct.pack("<IQ", 8, len(text)) + text)
        elif name not in drop:
            kept.append(whole)
    kept += [struct.pack("<Q", len(n)) + n.encode() + struct.pack("<II", GGUF_UINT32, v) for n, v in counts.items()]
    head = struct.pack("<4sIQQ", b"GGUF", 3, raw.n_tensors, len(kept)) + b"".join(kept) + raw.infos
    with open(dst, "wb") as f:
        f.write(head + bytes(-len(head) % raw.alignment))
        f.write(raw.tensor_data)
    return dst


def without_vocabulary(src, dst):
    """A copy of a GGUF without its vocabulary's arrays (VOCABULARY_KEYS),
    for the tests whose reference is transformers' own GGUF load: gguf-py
    parses a vocabulary element by element (~20 s a parse of Llama 3's, and
    transformers parses the file twice a load), and the weights, the logits
    and the config do not depend on it: the token ids are the tokenizer's
    scalar key-values, kept, and vocab_size is ARCH.vocab_size, or where
    the file has none (the script writes it for Llama alone) the count of
    tokens, which the copy holds as ARCH.vocab_size."""
    raw = RawGGUF(src)
    key = raw.value("general.architecture") + ".vocab_size"
    counts = {} if key in raw.kvs else {key: raw.value("tokenizer.ggml.tokens")}
    return edited(raw, dst, drop=VOCABULARY_KEYS, counts=counts)


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


@pytest.mark.parametrize("family,drop,change,words", [
    ("llama3", (), {"tokenizer.ggml.model": "bert"}, ["tokenizer.ggml.model", "bert"]),
    ("llama3", (), {"tokenizer.ggml.pre": "mystery"}, ["tokenizer.ggml.pre", "mystery"]),
    ("llama3", (), {"tokenizer.ggml.bos_token_id": 999999}, ["tokenizer.ggml.bos_token_id", "999999"]),
    ("llama2", ("tokenizer.ggml.scores",), None, ["tokenizer.ggml.scores", "missing"]),
    ("llama2", (), {"tokenizer.ggml.token_type": [1, 2, 3]}, ["tokenizer.ggml.token_type", "one per token"]),
    ("llama3", (), {"llama.rope.scaling.type": "longrope"}, ["llama.rope.scaling.type", "longrope"]),
    ("llama3", (), {"llama.rope.scaling.type": "linear"}, ["llama.rope.scaling.factor", "missing"]),
    # JSON has no NaN: config.json would not load
    ("llama3", (), {"llama.rope.freq_base": float("nan")}, ["llama.rope.freq_base", "not a finite number"]),
])
def test_key_values_ckpt_cannot_write_back_are_refused(models, tmp_path, family, drop, change, words):
    src = rewritten(models[family][1]["f32"], tmp_path / "m.gguf", drop=drop, change=change)
    refused(src, tmp_path, *words)


@pytest.mark.parametrize("value,kind,want", [(-1, "INT32", -1), (True, "BOOL", True)])
def test_config_numbers_keep_their_sign_and_booleans(models, tmp_path, value, kind, want):
    """A signed key-value is written with its sign (not as its unsigned
    bits, 18446744073709551615), a boolean as true or false (not 1 or 0)."""
    src = rewritten(models["llama2"][1]["f32"], tmp_path / "m.gguf", change={"llama.context_length": value},
                    types={"llama.context_length": kind})
    config = json.loads((to_hf(src, tmp_path / "hf") / "config.json").read_text())
    assert config["max_position_embeddings"] is want if isinstance(want, bool) else config["max_position_embeddings"] == want


def test_tokens_too_long_to_rebuild_merges_from_are_refused(models, tmp_path):
    """SentencePiece's merges are rebuilt by cutting every token at every
    place: work and output grow as a token's length squared.  A GGUF whose
    vocabulary holds a token made to blow that up is refused, naming the
    key, before any work; nothing is written."""
    src = models["llama2"][1]["f32"]
    tokens = list(gguf_reader(src).fields["tokenizer.ggml.tokens"].contents())
    tokens[-1] = "a" * 20000  # 20000² bytes of cuts, past the 256 MiB bound
    long = rewritten(src, tmp_path / "m.gguf", change={"tokenizer.ggml.tokens": tokens})
    refused(long, tmp_path, "tokenizer.ggml.tokens", "too long to rebuild merges")


def test_tokenizer_files_come_of_the_tokenizer_key_values(models, tmp_path):
    """The tokenizer files where the GGUF has tokenizer.* key-values, none
    where it has not: config.json and the tensors."""
    src = models["qwen2"][1]["f32"]
    assert sorted(os.listdir(to_hf(src, tmp_path / "with"))) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    stripped = rewritten(src, tmp_path / "m.gguf", drop=tokenizer_keys(src))
    assert sorted(os.listdir(to_hf(stripped, tmp_path / "hf"))) == ["config.json", "model.safetensors"]


def test_raw_keeps_the_plain_container(models, tmp_path):
    """--raw: the GGUF's tensors as they are, llama.cpp's names, no config."""
    r = ckpt("convert", models["llama3"][1]["f32"], tmp_path / "raw/", "--raw", "-q")
    assert r.returncode == 0, r.stderr
    assert os.listdir(tmp_path / "raw") == ["model.safetensors"]
    assert "blk.0.attn_q.weight" in load_file(tmp_path / "raw" / "model.safetensors")


# ---- Gemma 2 and Gemma 3 -----------------------------------------------------

def build_gemma_tokenizer(out):
    """A Gemma-shaped SentencePiece tokenizer: Gemma's <pad>, <eos>, <bos>,
    <unk> and <mask> first, its <start_of_turn> and <end_of_turn>, then
    Llama 2's pieces (bytes for the byte fallback, BPE pieces and scores;
    its four last dropped: 32000 in all); no dummy prefix (Gemma's
    add_space_prefix false); tokenizer.json as transformers' GemmaTokenizer
    makes it, a Gemma tokenizer_config.json (BOS added, the turn markers
    special, a chat template)."""
    from sentencepiece import SentencePieceProcessor
    from sentencepiece import sentencepiece_model_pb2 as pb
    from transformers import AutoTokenizer, GemmaTokenizer
    kept = LLAMA_CPP.parent / "llama2-tokenizer"
    if not kept.is_dir():
        build_llama2_tokenizer(out)
        kept = out
    base = pb.ModelProto()
    base.ParseFromString((kept / "tokenizer.model").read_bytes())
    m = pb.ModelProto()
    m.CopyFrom(base)
    del m.pieces[:]
    names = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
    for text, kind in zip(names, (3, 3, 3, 2, 4, 4, 4)):  # control, unknown, user-defined
        p = m.pieces.add()
        p.piece, p.score, p.type = text, 0.0, kind
    for p in base.pieces[3:len(base.pieces) - 4]:
        m.pieces.add().CopyFrom(p)
    spec = m.trainer_spec
    spec.vocab_size, spec.pad_id, spec.eos_id, spec.bos_id, spec.unk_id = len(m.pieces), 0, 1, 2, 3
    m.normalizer_spec.add_dummy_prefix = False
    (out / "tokenizer.model").write_bytes(m.SerializeToString())
    sp = SentencePieceProcessor()
    sp.LoadFromFile(str(out / "tokenizer.model"))
    assert sp.get_piece_size() == 32000 and sp.encode("<start_of_turn>user") == [5, 1796]
    special = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
    (out / "tokenizer_config.json").write_text(json.dumps({
        "add_bos_token": True, "add_eos_token": False,
        "added_tokens_decoder": {str(i): {"content": t, **special} for i, t in enumerate(names)},
        "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"], "bos_token": "<bos>",
        "chat_template": "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}"
                         "<end_of_turn>\n{% endfor %}",
        "clean_up_tokenization_spaces": False, "eos_token": "<eos>", "mask_token": "<mask>",
        "model_max_length": 1000000000000000019884624838656, "pad_token": "<pad>", "padding_side": "left",
        "sp_model_kwargs": {}, "spaces_between_special_tokens": False, "tokenizer_class": "GemmaTokenizer",
        "unk_token": "<unk>", "use_default_system_prompt": False}, indent=2))
    GemmaTokenizer.from_pretrained(str(out)).save_pretrained(str(out / "hf"))
    os.replace(out / "hf" / "tokenizer.json", out / "tokenizer.json")
    assert AutoTokenizer.from_pretrained(str(out))("<start_of_turn>hi")["input_ids"] == [2, 5, 2922]


TOKENIZERS["gemma"] = build_gemma_tokenizer
TOKENIZER_FILES["gemma"] = SPM_FILES

# Gemma 3's as Gemma 3 4B has it: five sliding layers then a global one
# (llama.cpp's pattern, which the GGUF does not say), the global layers'
# RoPE scaled linearly, the sliding ones' of their own base.
GEMMA3 = {"num_hidden_layers": 6, "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
          "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}
# Bfloat16 norms of |w| < 2^-16: the first three with bits below w + 1's
# float32 ulp (2^-23 above 1, 2^-24 below), which the script's sum rounds
# away, so the way back cannot have them; the last's bits (down to 2^-24,
# w + 1 below 1) survive.
TINY = torch.tensor([255 / 128 * 2**-20, -255 / 128 * 2**-19, 129 / 128 * 2**-22, -2**-17 * 255 / 128])


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """Gemma 2 and Gemma 3, each a tiny random model with the Gemma
    tokenizer, and the script's BF16 file of it."""
    root = tmp_path_factory.mktemp("gemma")
    out = {}
    for family, arch, seed, changes in (("gemma2", "Gemma2ForCausalLM", 21, {}),
                                        ("gemma3", "Gemma3ForCausalLM", 22, GEMMA3)):
        d = root / f"tiny-{family}-gemmatok"
        tiny_gemma(d, arch, seed=seed, **changes)
        if family == "gemma2":  # a final norm with weights the script's + 1 rounds
            sd = load_file(d / "model.safetensors")
            sd["model.norm.weight"][:4] = TINY.to(torch.bfloat16)
            assert torch.equal(sd["model.norm.weight"][:4].float(), TINY)
            save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
        tokenizer("gemma", d)
        out[family] = (d, reference(d, "bf16"))
    return out


def test_gemma_config_is_the_originals(gemma, tmp_path):
    """config.json: the family's keys as transformers' Gemma2Config and
    Gemma3TextConfig name them (soft-caps, sliding window and layer types,
    query_pre_attn_scalar, per-layer-type RoPE, hidden_activation, tied
    embeddings), equal to the original's."""
    for family, (model, gguf) in gemma.items():
        ours = json.loads((to_hf(gguf, tmp_path / family) / "config.json").read_text())
        original = json.loads((model / "config.json").read_text())
        keys = ["model_type", "architectures", "hidden_activation", "query_pre_attn_scalar", "sliding_window",
                "layer_types", "rope_parameters", "tie_word_embeddings", "head_dim", "num_hidden_layers",
                "num_key_value_heads", "final_logit_softcapping", "attn_logit_softcapping", "bos_token_id",
                "eos_token_id", "pad_token_id", "max_position_embeddings", "rms_norm_eps", "vocab_size"]
        assert {k: ours.get(k) for k in keys} == {k: original.get(k) for k in keys}, family
        assert "hidden_act" not in ours and "lm_head.weight" not in load_file(tmp_path / family / "model.safetensors")


@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_gemma_norms_and_logits_come_back(gemma, family, tmp_path):
    """The norms − 1 (the script's + 1 undone, in float32): the original
    bfloat16 weights exactly wherever w + 1 was a float32, within 2^-24
    where the script's sum rounded (Gemma 2's TINY entries); every other
    tensor exactly; every tensor what transformers' own GGUF load makes
    (it subtracts 1 in float32 too); the original model's logits, bit for
    bit even where a norm is not (the model adds 1 back in float32, which
    rounds as the script's sum did)."""
    model, gguf = gemma[family]
    hf = to_hf(gguf, tmp_path / "hf", "--dtype", "f32")
    original, back = load_file(model / "model.safetensors"), load_file(hf / "model.safetensors")
    assert back.keys() == original.keys()
    rounded = 0
    for k, w in original.items():
        w = w.float()
        exact = (w == 0) | (w.abs() >= 2**-16)
        assert torch.equal(back[k][exact], w[exact]), k
        assert (back[k] - w).abs().max() <= 2**-24, k
        rounded += int((back[k] != w).sum())
    assert rounded == (3 if family == "gemma2" else 0)
    theirs = transformers_model(gguf).state_dict()
    ours = transformers_model(hf)
    assert all(torch.equal(theirs[k], v) for k, v in ours.state_dict().items())
    a = transformers_model(model)
    with torch.no_grad():
        la, lo = a(IDS).logits, ours(IDS).logits
    assert torch.equal(la, lo)  # Gemma's RMSNorm scales by 1 + w in float32: the rounded sum again


@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_gemma_tokenizer_ids_equal_the_original(gemma, family, tmp_path):
    """Gemma's SentencePiece vocabulary back: no prefix space, byte
    fallback, BOS added: SentencePiece's own ids on every text, runs of
    spaces included (where transformers 5's GemmaTokenizer, converting
    tokenizer.model, merges "▁▁" first and SentencePiece does not); the
    special tokens (<start_of_turn>, <end_of_turn>, <bos>…) whole, as the
    original tokenizer.json has them."""
    import sentencepiece
    model, gguf = gemma[family]
    hf = to_hf(gguf, tmp_path / "hf")
    ours, original = auto_tokenizer(hf), auto_tokenizer(model)
    sp = sentencepiece.SentencePieceProcessor()
    sp.LoadFromFile(str(model / "tokenizer.model"))
    texts = TEXTS + ["a  b   c    d", "x\n  y", "\u00e9\u00e8 \U0001f600\t\t  end"]
    assert ids(ours, texts) == [[2] + sp.encode(t) for t in texts]
    assert ids(original, texts) != ids(ours, texts)  # the converter's merges, not SentencePiece's
    specials = ["<start_of_turn>user\nhi there<end_of_turn>\n<start_of_turn>model\n", "<bos><eos><pad> x<mask>"]
    assert ids(ours, specials) == ids(original, specials)
    assert (ours.bos_token, ours.eos_token, ours.unk_token, ours.pad_token) == ("<bos>", "<eos>", "<unk>", "<pad>")
    assert ours.decode(ours("h\u00e9 \U0001f917 x")["input_ids"], skip_special_tokens=True) == "h\u00e9 \U0001f917 x"
    config = json.loads((hf / "tokenizer_config.json").read_text())
    assert (config["add_bos_token"], config["chat_template"]) == (True, original.chat_template)


# ---- tokenizer.model -------------------------------------------------------------

# A fixed multilingual text for SentencePiece: Latin with accents, Cyrillic,
# Greek, Arabic, Hebrew, Devanagari, CJK, Hangul, emoji (byte fallback),
# runs of spaces, tabs and newlines, digits.
MULTILINGUAL = ("Hello world! Gr\u00fc\u00dfe aus M\u00fcnchen, \u00e7a va tr\u00e8s bien.  \u041f\u0440\u0438\u0432\u0435\u0442, "
                "\u043c\u0438\u0440!\t\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd "
                "\u0928\u092e\u0938\u094d\u0924\u0947\n\n\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587 "
                "\ud55c\uad6d\uc5b4   \U0001f917\U0001f680 3.14159 1234567 don't\n    return x**2")


def sentencepiece_models(original, rebuilt):
    from sentencepiece import sentencepiece_model_pb2 as pb
    out = []
    for path in (original, rebuilt):
        m = pb.ModelProto()
        m.ParseFromString(Path(path).read_bytes())
        out.append(m)
    return out


@pytest.mark.parametrize("family", ["llama2", "gemma2"])
def test_sentencepiece_model_comes_back(models, request, family, tmp_path):
    """HF directory (its tokenizer.model) → the script's GGUF → ckpt's
    directory: tokenizer.model again, SentencePiece's ModelProto with the
    original's pieces, scores and types, its BPE, byte fallback, special
    ids and normalizer; SentencePiece encodes and decodes a multilingual
    text as the original does, and transformers' slow-tokenizer classes
    (which convert tokenizer.model) give the original's ids.  The only
    difference: Gemma's user-defined specials come back control pieces
    (the script types tokenizer_config.json's special tokens so)."""
    import sentencepiece
    from transformers import GemmaTokenizer, LlamaTokenizer
    model, gguf = (models["llama2"][0], models["llama2"][1]["f16"]) if family == "llama2" else \
        request.getfixturevalue("gemma")[family]
    hf = to_hf(gguf, tmp_path / "hf")
    original, ours = sentencepiece_models(model / "tokenizer.model", hf / "tokenizer.model")
    want = [(p.piece, p.score, p.type) for p in original.pieces]
    if family == "gemma2":  # <mask>, <start_of_turn>, <end_of_turn>: user-defined → control
        assert [w[2] for w in want[4:7]] == [4, 4, 4]
        want[4:7] = [(piece, score, 3) for piece, score, _ in want[4:7]]
    assert [(p.piece, p.score, p.type) for p in ours.pieces] == want
    fields = ("model_type", "vocab_size", "byte_fallback", "unk_id", "bos_id", "eos_id", "pad_id")
    assert [getattr(ours.trainer_spec, f) for f in fields] == [getattr(original.trainer_spec, f) for f in fields]
    fields = ("name", "precompiled_charsmap", "add_dummy_prefix", "remove_extra_whitespaces", "escape_whitespaces")
    assert [getattr(ours.normalizer_spec, f) for f in fields] == [getattr(original.normalizer_spec, f) for f in fields]
    a = sentencepiece.SentencePieceProcessor(model_file=str(model / "tokenizer.model"))
    b = sentencepiece.SentencePieceProcessor(model_file=str(hf / "tokenizer.model"))
    texts = [MULTILINGUAL, " leading", "a  b   c    d", ""]
    assert [b.encode(t) for t in texts] == [a.encode(t) for t in texts]
    assert b.decode(b.encode(MULTILINGUAL)) == a.decode(a.encode(MULTILINGUAL))
    bos, eos, unk, pad = (1, 2, 0, -1) if family == "llama2" else (2, 1, 3, 0)  # the GGUF's ids, by their pieces
    assert (b.bos_id(), b.eos_id(), b.unk_id(), b.pad_id()) == (bos, eos, unk, pad)
    slow = LlamaTokenizer if family == "llama2" else GemmaTokenizer
    for d, src in (("a", model), ("b", hf)):  # tokenizer.model alone: the class converts it
        (tmp_path / d).mkdir()
        shutil.copy(src / "tokenizer.model", tmp_path / d / "tokenizer.model")
    theirs, mine = slow.from_pretrained(str(tmp_path / "a")), slow.from_pretrained(str(tmp_path / "b"))
    assert ids(mine, texts) == ids(theirs, texts)


@pytest.mark.parametrize("change", ["twice", "byte", "type", "no unknown", "255 bytes"])
def test_vocabulary_sentencepiece_cannot_load_gets_no_tokenizer_model(models, tmp_path, change):
    """A vocabulary SentencePiece refuses to load (a piece twice, a byte
    piece not spelled <0xHH>, a type it does not have, no unknown piece —
    "unk is not defined" —, byte pieces but not all 256 — byte fallback
    needs every byte) gets no tokenizer.model; tokenizer.json still comes
    (it stands for the SentencePiece file).  The unchanged file gets one."""
    import sentencepiece
    src = models["llama2"][1]["f32"]
    fields = gguf_reader(src).fields
    tokens, types = list(fields["tokenizer.ggml.tokens"].contents()), list(fields["tokenizer.ggml.token_type"].contents())
    assert (tokens[13], types[13]) == ("<0x0A>", 6) and tokens[0] == "<unk>" and types[0] != 2
    key, value = ("tokenizer.ggml.tokens", tokens) if change in ("twice", "byte") else ("tokenizer.ggml.token_type", types)
    drop = ()
    if change == "twice":
        tokens[1000] = tokens[1001]
    elif change == "byte":
        tokens[13] = "<0x0a>"
    elif change == "type":
        types[1000] = 7
    elif change == "no unknown":  # <unk> typed control, as the script types it, and no id naming it
        drop = ("tokenizer.ggml.unknown_token_id",)
    else:
        types[13] = 1  # <0x0A> a normal piece: 255 byte pieces left
    both = {"with": src, "without": rewritten(src, tmp_path / "m.gguf", drop=drop, change={key: value})}
    for name, gguf in both.items():
        hf = to_hf(gguf, tmp_path / name)
        assert ("tokenizer.model" in os.listdir(hf)) == (name == "with")
        assert {"tokenizer.json", "tokenizer_config.json"} <= set(os.listdir(hf))
    sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "with" / "tokenizer.model"))


def test_rewritten_bf16_is_tensor_for_tensor_identical(models, tmp_path):
    """The tests' rewritten() copies a BF16 GGUF's tensors as they are
    (gguf-py reads BF16 as rows of bytes): the same names, types, shapes
    and bytes, tensor for tensor."""
    src = models["llama2"][1]["bf16"]
    a, b = gguf_reader(src), gguf_reader(rewritten(src, tmp_path / "m.gguf"))
    assert "BF16" in {t.tensor_type.name for t in a.tensors}
    assert [(t.name, t.tensor_type, t.shape.tolist(), t.data.tobytes()) for t in b.tensors] == [
        (t.name, t.tensor_type, t.shape.tolist(), t.data.tobytes()) for t in a.tensors]


def test_without_vocabulary_keeps_all_else(models, tmp_path):
    """The tests' without_vocabulary() copy, as gguf-py reads it: the same
    tensors, byte for byte, the same key-values but the vocabulary's
    arrays, and the count of tokens as qwen2.vocab_size (the script writes
    none for Qwen2: transformers counts the tokens); edited() changes a
    string key-value alone."""
    src = models["qwen2"][1]["f32"]  # parsed by test_tokenizer_files_come_of_the_tokenizer_key_values too
    a, b = gguf_reader(src), gguf_reader(without_vocabulary(src, tmp_path / "m.gguf"))

    def kvs(r):
        return {k: (f.types, f.contents()) for k, f in r.fields.items() if not k.startswith("GGUF.")}

    assert {k: v for k, v in kvs(b).items() if k != "qwen2.vocab_size"} == {
        k: v for k, v in kvs(a).items() if k not in VOCABULARY_KEYS}
    assert "qwen2.vocab_size" not in a.fields and kvs(b)["qwen2.vocab_size"] == (
        [GGUF_UINT32], len(a.fields["tokenizer.ggml.tokens"].data))
    assert [(t.name, t.tensor_type, t.shape.tolist(), t.data.tobytes()) for t in b.tensors] == [
        (t.name, t.tensor_type, t.shape.tolist(), t.data.tobytes()) for t in a.tensors]
    c = gguf_reader(edited(tmp_path / "m.gguf", tmp_path / "e.gguf", strings={"tokenizer.ggml.pre": "mystery"}))
    assert kvs(c) == {k: (t, "mystery" if k == "tokenizer.ggml.pre" else v) for k, (t, v) in kvs(b).items()}


# ---- Llama 3.1's RoPE ----------------------------------------------------------

LLAMA31 = [
    # Llama 3.1's own: written back as it was
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8192, "rope_theta": 500000.0},
    # low, high and the context halved make the same tensor: ckpt writes low_freq_factor 1
    {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
     "original_max_position_embeddings": 4096, "rope_theta": 100000.0},
]


@pytest.fixture(scope="module")
def llama31(models, tmp_path_factory):
    """Llama 3.1-shaped tiny models (a head of 128: rope_freqs' 64 factors,
    six on the smooth ramp) and the script's F32 files of them; Llama 2's
    tokenizer, whose 32000 pieces transformers' GGUF load reads in seconds."""
    out = []
    for k, rope in enumerate(LLAMA31):
        d = tmp_path_factory.mktemp("llama31") / "tiny-llama31-spm"
        tiny_llama(d, seed=10, rope_parameters=rope, head_dim=128, num_attention_heads=2, num_key_value_heads=1,
                   vocab_size=32000, bos_token_id=1, eos_token_id=2)
        for f in SPM_FILES:
            os.link(models["llama2"][0] / f, d / f)
        out.append((d, reference(d, "f32")))
    return out


@pytest.mark.parametrize("case", [0, 1])
def test_llama31_rope_comes_back_from_rope_freqs(llama31, case, tmp_path):
    """The GGUF has rope_freqs and no RoPE scaling key-values: rope_scaling
    llama3 recovered from the tensor (its largest factor, the ramp's line),
    checked by recomputing it; rope_freqs not a weight; the original
    model's logits bit for bit.  transformers' own GGUF load drops the
    tensor and sets no RoPE scaling: other logits."""
    model, gguf = llama31[case]
    hf = to_hf(gguf, tmp_path / "hf", "--dtype", "f32")
    rope = json.loads((hf / "config.json").read_text())["rope_parameters"]
    want = dict(LLAMA31[case])
    if case == 1:
        want |= {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 2048}
    assert rope == want
    assert "rope_freqs.weight" not in load_file(hf / "model.safetensors")
    original = transformers_model(model)
    assert_same_model(original, transformers_model(hf))
    with torch.no_grad():
        assert not torch.equal(transformers_model(gguf)(IDS).logits, original(IDS).logits)


@pytest.mark.parametrize("change", ["ramp", "factor", "shape"])
def test_rope_freqs_of_no_llama3_parameters_are_refused(llama31, change, tmp_path):
    """A rope_freqs that no llama3 parameters make (a ramp factor one ulp
    off, a factor past the ramp changed, a tensor of another length) is
    refused naming the file and the tensor; nothing is written."""
    import numpy as np
    _, gguf = llama31[0]
    r = gguf_reader(gguf)
    f = next(t for t in r.tensors if t.name == "rope_freqs.weight").data.copy()
    tokenizer_keys = [k for k in r.fields if k.startswith("tokenizer.")]  # not read before the refusal
    ramp = [i for i, v in enumerate(f) if 1.0 < v < 8.0]
    assert len(ramp) == 6
    if change == "ramp":
        f[ramp[2]] = np.nextafter(f[ramp[2]], np.float32(10))
    elif change == "factor":
        f[-1] = np.float32(7.5)
    src = rewritten(gguf, tmp_path / "m.gguf", drop=tokenizer_keys,
                    tensors={"rope_freqs.weight": f[:-1] if change == "shape" else f})
    refused(src, tmp_path, "rope_freqs.weight", "no llama3 RoPE parameters" if change != "shape" else "float32 factors")


# ---- GGUF → HF → GGUF: the tokenizer's types ------------------------------------

def tokenizer_arrays(gguf):
    """A GGUF's vocabulary (gguf-py): tokens, scores (None where absent) and token types."""
    fields = gguf_reader(gguf).fields
    scores = fields.get("tokenizer.ggml.scores")
    return (list(fields["tokenizer.ggml.tokens"].contents()), scores and list(scores.contents()),
            list(fields["tokenizer.ggml.token_type"].contents()))


# A token of each vocabulary made user-defined ("hello": no U+2581 for the
# script to respell, nothing <|...|> it would type control), as the script
# types tokenizer_config.json's added tokens that are not special.
USER_DEFINED = {"llama3": 15339, "llama2": 12199}
# Texts of special tokens; Phi-3's with no text after them: its
# tokenizer.json strips the whitespace there (rstrip), which the GGUF does
# not record, and puts no prefix space on a word after one.
ROUND_TRIP_TEXTS = {"gemma2": "<bos><start_of_turn>user\nhi<end_of_turn>\n<mask><pad><eos>",
                    "phi3": "hi<|end|><|assistant|><|endoftext|>"}


@pytest.mark.parametrize("family", ["llama3", "llama2", "phi3", "gemma2", "llama3+user", "llama2+user"])
def test_the_scripts_gguf_of_ckpts_directory_has_the_original_vocabulary(models, request, family, tmp_path):
    """The script's GGUF → ckpt's directory → the script's GGUF again: the
    same tokens, scores and token types (control and user-defined tokens
    as the script typed them the first time: it reads a SentencePiece
    vocabulary's back from tokenizer_config.json's added_tokens_decoder
    alone, which ckpt writes as transformers' save_pretrained does;
    without it <unk>, <s>, </s> came back SentencePiece's unknown and
    control pieces of score 0, a user-defined piece a normal one), and
    AutoTokenizer on ckpt's directory gives the original's ids on a text
    of special tokens, a user-defined token matched whole."""
    base, user = family.split("+")[0], "+user" in family
    if base == "gemma2":
        model = request.getfixturevalue("gemma")[base][0]
        gguf = reference(model, "f32")
    else:
        model, gguf = models[base][0], models[base][1]["f32"]
    if user:  # typed and scored as the script types a non-special added token
        tokens, scores, types = tokenizer_arrays(gguf)
        types[USER_DEFINED[base]] = 4
        change = {"tokenizer.ggml.token_type": types}
        if scores:
            scores[USER_DEFINED[base]] = -1000.0
            change["tokenizer.ggml.scores"] = scores
        gguf = rewritten(gguf, tmp_path / "user.gguf", change=change)
    hf = to_hf(gguf, tmp_path / f"tiny-{base}{'-user' if user else ''}-back", "--dtype", "f32")
    again = reference(hf, "f32")
    first, second = tokenizer_arrays(gguf), tokenizer_arrays(again)
    assert second[0] == first[0]
    assert second[2] == first[2]
    assert second[1] == first[1]
    text = ROUND_TRIP_TEXTS.get(base, SPECIAL_TEXTS.get(base))
    ours, original = auto_tokenizer(hf), auto_tokenizer(model)
    assert ids(ours, [text, "plain " + text]) == ids(original, [text, "plain " + text])
    if user:
        assert USER_DEFINED[base] in ids(ours, ["sayhellothere"])[0]
    # the map as save_pretrained writes it: the original's added tokens, special
    # where the GGUF types them control (the script's Phi-3 types </s>, not
    # special in the original, control); the GGUF keeps no lstrip, rstrip or
    # normalized: every flag false, but the rstrip llama.cpp gives Phi-3's
    # tokens (the original's, but for <|endoftext|>, which llama.cpp does not strip)
    decoder = json.loads((hf / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    want = {i: a.content for i, a in original.added_tokens_decoder.items()}
    if user:
        want[USER_DEFINED[base]] = "hello"
    assert {int(i): e["content"] for i, e in decoder.items()} == want
    assert {int(i): e["special"] for i, e in decoder.items()} == {i: first[2][i] == 3 for i in want}
    assert all(list(e) == ["content", "lstrip", "normalized", "rstrip", "single_word", "special"] and
               not (e["lstrip"] or e["normalized"] or e["single_word"]) for e in decoder.values())
    assert {int(i): e["rstrip"] for i, e in decoder.items()} == {
        i: base == "phi3" and original.added_tokens_decoder[i].rstrip and
        want[i] != "<|endoftext|>" for i in want}
    assert list(decoder) == sorted(decoder, key=int)
