"""ckpt's K-quants and llama-quantize mixes against ggml itself (ggml_ref.py
builds the references from the llama-cpp-python sdist at test time):

- every Q4_K, Q5_K and Q6_K block (and the Q5_0, Q5_1 and Q8_0 blocks the
  mixes fall back to) is the block ggml's quantize_row_*_ref writes, from
  f32, f16 and bf16, on random data and on edge cases;
- `ckpt convert HF_DIR out.gguf --dtype q4_k_m` (q5_k_m, and the _s mixes
  and q6_k) is the file `convert_hf_to_gguf.py --outtype f32` then
  `llama-quantize` writes: the tensors in llama-quantize's order with the
  types llama-quant.cpp's own code chooses, each tensor's bytes ggml's
  quantization of the script's f32 data, laid out as ggml's GGUF writer lays
  them out, and the script's key-values with general.quantization_version
  and general.file_type last, as llama-quantize sets them again."""
import functools
import struct
import subprocess

import gguf
import numpy as np
import pytest
import torch

import ckptlib
import ggml_ref
from test_gguf_to_hf import GGUF_UINT32, VOCABULARY_KEYS, RawGGUF, edited
from test_llamacpp import reference, tiny_llama2, tiny_phi3, tiny_qwen3, tokenizer

MIXES = {"q4_k_m": 15, "q5_k_m": 17, "q4_k_s": 14, "q5_k_s": 16, "q6_k": 18}


def edge_cases():
    """float32 arrays of whole 256-element blocks: random data and the
    edges of the quantizers' arithmetic."""
    rng = np.random.default_rng(29)
    n = 256 * 16
    half = np.concatenate([rng.standard_normal(128) * 1e30, rng.standard_normal(128) * 1e-30] * 16)
    outlier = rng.standard_normal(n) * 0.01
    outlier[::256] = 50.0
    return {
        "normal": rng.standard_normal(n * 4) * 0.02,
        "wide range": rng.standard_normal(n) * np.exp(rng.uniform(-30, 30, n)),
        "zeros": np.zeros(n),
        "constant": np.full(n, 0.37),
        "negative constant": np.full(n, -3.0),
        "all negative": -np.abs(rng.standard_normal(n)),
        "uniform": rng.uniform(0, 1, n),
        "sparse": rng.standard_normal(n) * (rng.uniform(0, 1, n) < 0.05),
        "one outlier a block": outlier,
        "alternating": np.tile([1.0, -1.0], n // 2),
        "ramp": np.linspace(-1, 1, n),
        "huge": rng.standard_normal(n) * 1e37,
        "largest float": np.tile([3.4028235e38, -3.4028235e38, 1.0, 0.0], n // 4),
        "tiny": rng.standard_normal(n) * 1e-40,
        "huge and tiny": half,
    }


CASES = edge_cases()


@pytest.fixture(scope="module")
def ref():
    return ggml_ref.quants_lib()


def first_difference(a, b, block_bytes):
    i = next(i for i in range(min(len(a), len(b))) if a[i] != b[i])
    return f"block {i // block_bytes}, byte {i % block_bytes}"


@pytest.mark.parametrize("src", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1"])
def test_blocks_are_ggmls(ref, qtype, src):
    """ckpt_cast to the block type is ggml's quantize_row_*_ref of the same
    values (a f16 or bf16 source widened to f32 first, exactly, as
    llama-quantize widens it)."""
    torch_dtype = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[src]
    for case, x in CASES.items():
        t = torch.from_numpy(x.astype(np.float32)).to(torch_dtype)
        raw = t.view(torch.int32 if src == "F32" else torch.int16).numpy().tobytes()
        want = ggml_ref.quantize(ref, qtype, t.float().numpy())
        got = ckptlib.cast(src, raw, qtype, t.numel())
        assert got == want, f"{case}: {first_difference(got, want, ggml_ref.BLOCK[qtype][1])}"


@pytest.fixture(scope="module")
def mix_models(tmp_path_factory):
    """Model directories whose mixes differ: an 8-layer Llama of hidden size
    256 with GQA (whole 256-element rows: the K-quants, use_more_bits over 8
    layers, an untied output), a Qwen3 of hidden size 32 (tied embeddings,
    rows of 32: the Q5_0 / Q5_1 / Q8_0 fallbacks), a Phi-3 (fused attn_qkv)
    and a Llama of hidden size 48 (rows of no whole block: F16)."""
    root = tmp_path_factory.mktemp("kquants")
    dirs = {"llama8": root / "tiny-llama8", "qwen3": root / "tiny-qwen3", "phi3": root / "tiny-phi3",
            "llama48": root / "tiny-llama48"}
    tiny_llama2(dirs["llama8"], seed=8, hidden_size=256, intermediate_size=512, num_hidden_layers=8,
                head_dim=64, num_key_value_heads=2)
    tiny_qwen3(dirs["qwen3"], seed=9)
    tiny_phi3(dirs["phi3"], seed=10)
    tiny_llama2(dirs["llama48"], seed=11, hidden_size=48, intermediate_size=96, head_dim=12)
    for family, d in (("llama2", dirs["llama8"]), ("qwen2", dirs["qwen3"]), ("phi3", dirs["phi3"]),
                      ("llama2", dirs["llama48"])):
        tokenizer(family, d)
    return {name: (d, reference(d, "f32")) for name, d in dirs.items()}


@functools.cache
def script_file(path, copy):
    """The script's F32 file, read once for the five mixes of a model: its
    key-values' bytes (RawGGUF), and gguf-py's reader of its tensors (a
    copy without the vocabulary's arrays, which gguf-py parses element by
    element: ~9 s of CPU Qwen2's 152k tokens), written to `copy`."""
    return RawGGUF(path), tensors_of(path, copy)


def tensors_of(path, copy):
    """gguf-py's reader of a GGUF's tensors and architecture key-values:
    a copy of it without the vocabulary's arrays (the tensor infos and
    data as they are, their offsets too)."""
    edited(path, copy, drop=VOCABULARY_KEYS)
    return gguf.GGUFReader(copy)


@pytest.fixture(scope="module", autouse=True)
def readers_let_go():
    """The parsed files (~0.5 GB a large vocabulary) kept no longer than this module."""
    yield
    script_file.cache_clear()


def fields(raw):
    """The key-values of a GGUF file, in order: (key, its bytes: name, type, value)."""
    return [(name, whole) for name, (_, whole, _) in raw.kvs.items()]


def uint32(name, value):
    """A UINT32 key-value's bytes."""
    return name, struct.pack("<Q", len(name)) + name.encode() + struct.pack("<II", GGUF_UINT32, value)


def hparams(reader):
    arch = reader.fields["general.architecture"].contents()

    def get(key, default=0):
        f = reader.fields.get(f"{arch}.{key}")
        return f.contents() if f else default

    return arch, get("block_count"), get("attention.head_count"), get("attention.head_count_kv"), get("expert_count")


def expected_bytes(ref, typ, data):
    """What llama-quantize writes for a tensor of f32 `data` in ggml type `typ`."""
    name = next(k for k, v in ggml_ref.GGML.items() if v == typ)
    if name == "F32":
        return data.astype(np.float32).tobytes()
    if name == "F16":
        return data.astype(np.float16).tobytes()
    return ggml_ref.quantize(ref, name, data)


@pytest.mark.parametrize("mix", list(MIXES))
@pytest.mark.parametrize("model", ["llama8", "qwen3", "phi3", "llama48"])
def test_mix_is_llama_quantizes(ref, mix_models, model, mix, tmp_path):
    src, f32 = mix_models[model]
    dst = tmp_path / "out.gguf"
    r = subprocess.run([ckptlib.BIN_PATH, "convert", src, dst, "--dtype", mix, "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (base_kvs, base) = script_file(f32, src.parent / f"{model}-f32.gguf")
    got = tensors_of(dst, tmp_path / "tensors.gguf")
    # the types: llama-quant.cpp's choice, in its order
    want = ggml_ref.mix_types(MIXES[mix], *hparams(base),
                              [(t.name, int(t.tensor_type), t.shape.tolist()) for t in base.tensors])
    assert isinstance(want, list), want
    assert [(t.name, int(t.tensor_type)) for t in got.tensors] == want
    # every tensor's bytes: ggml's quantization of the script's f32 data
    f32_data = {t.name: np.asarray(t.data, dtype=np.float32).reshape(-1) for t in base.tensors}
    for t in got.tensors:
        assert bytes(t.data) == expected_bytes(ref, int(t.tensor_type), f32_data[t.name]), t.name
    # ggml's layout: offsets in order, each tensor padded to the alignment
    offset = 0
    for t in got.tensors:
        assert t.data_offset - got.data_offset == offset, t.name
        offset += -(-t.n_bytes // 32) * 32
    # the key-values, byte for byte: the script's, then the two llama-quantize sets again
    last = ("general.quantization_version", "general.file_type")
    want_kv = [f for f in fields(base_kvs) if f[0] not in last]
    want_kv += [uint32(last[0], 2), uint32(last[1], MIXES[mix])]
    assert fields(RawGGUF(dst)) == want_kv


def test_unknown_mix_is_refused_by_name(mix_models, tmp_path):
    src, _ = mix_models["qwen3"]
    dst = tmp_path / "out.gguf"
    r = subprocess.run([ckptlib.BIN_PATH, "convert", src, dst, "--dtype", "q3_k_m", "-q"], capture_output=True,
                       text=True)
    assert r.returncode != 0 and "q3_k_m" in r.stderr and "q4_k_m" in r.stderr, r.stderr
    assert not dst.exists()


@pytest.mark.parametrize("qtype", ["q4_k", "q5_k", "q6_k"])
def test_plain_gguf_conversion_quantizes_whole_block_rows(ref, qtype, tmp_path):
    """--dtype q4_k on a plain (non-llama.cpp) GGUF output: matrices whose
    rows are whole 256-element blocks become ggml's blocks, the others stay
    as they are (as for q8_0)."""
    from safetensors.numpy import save_file
    rng = np.random.default_rng(5)
    src = {"w": (rng.standard_normal((8, 512)) * 0.02).astype(np.float32),
           "short_rows": rng.standard_normal((4, 96)).astype(np.float32), "v": np.ones(256, np.float32)}
    save_file(src, str(tmp_path / "m.safetensors"))
    dst = tmp_path / "m.gguf"
    r = subprocess.run([ckptlib.BIN_PATH, "convert", tmp_path / "m.safetensors", dst, "--dtype", qtype, "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = {t.name: t for t in gguf.GGUFReader(dst).tensors}
    assert int(got["w"].tensor_type) == ggml_ref.GGML[qtype.upper()]
    assert bytes(got["w"].data) == ggml_ref.quantize(ref, qtype.upper(), src["w"])
    assert int(got["short_rows"].tensor_type) == ggml_ref.GGML["F32"] and int(got["v"].tensor_type) == 0
