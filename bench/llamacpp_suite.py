"""The llamacpp suite of `make bench` (issue 29 §5, §6): llama.cpp itself
runs what `ckpt convert HF_DIR model.gguf` writes, and ckpt's conversion
against llama.cpp's convert_hf_to_gguf.py on a 4 GB Llama.

llama.cpp is built from the llama-cpp-python sdist that the tests' reference
comes from (`make llama-cpp-build`: libllama, llama-quantize and
bench/llama_run.c, cached under .cache/; minutes the first time, then
reused).  Three parts (`--llamacpp-parts check,quantize-check,measure`):

  check    for each family ckpt converts (Llama 3 with its BPE tokenizer,
           Llama 2 and Mistral with SentencePiece, Qwen2, Qwen3, Phi-3), a
           tiny random transformers model with the family's real tokenizer
           (tests/interop/test_llamacpp.py builds both), its weights drawn
           at the scale of a trained model's (unit-RMS activations, attention
           that is not uniform, logits of order 1) so that every tensor, the
           Q/K permutation included, shows in the logits:
           - llama.cpp's tokenizer gives the HF tokenizer's ids on sample texts
             (special tokens the model adds included);
           - llama.cpp's logits on ckpt's F32, F16, BF16 and Q8_0 files equal
             transformers' float32 logits on the original model within
             TOLERANCE (the error relative to the largest logit);
           - negative controls: the F32 file with two query heads of block 0
             swapped, and (Llama 3) with Q and K left in HF's order, must
             fail that check — proof the check sees a wrong tensor.
           Any mismatch exits non-zero.  Writes bench/results/llamacpp-check.json.
  quantize-check
           for the same models and each of llama-quantize's mixes ckpt writes
           (q4_k_m, q5_k_m, q4_k_s, q5_k_s, q6_k): `ckpt convert --dtype MIX`
           is, byte for byte, the file of `convert_hf_to_gguf.py --outtype
           f32` then `llama-quantize F32.gguf OUT MIX`; a mismatch (named by
           its first differing byte and the tensor or header it lies in)
           exits non-zero; a control (ckpt's file with one byte changed)
           must be caught.  Writes bench/results/llamacpp-quantize-check.json.
  measure  a Llama 3-shaped bf16 model of ~4 GB (`--llamacpp-gb 4`; 1 for a
           ~1 GB one) (random weights, config.json and Llama 3's tokenizer;
           generated once under bench/data):
           ckpt convert against convert_hf_to_gguf.py for --outtype bf16 and
           q8_0, warm and cold, each run in its own process (peak RSS from
           GNU time), ckpt with and without fsync (the script does not
           fsync), cp of the weights as the ceiling; `ckpt convert --dtype
           q4_k_m` (HF bf16 → Q4_K_M in one pass) against `llama-quantize
           model-bf16.gguf Q4_K_M` with the same threads (llama.cpp's route
           being the script's BF16 file, then llama-quantize: both ratios
           are recorded), and ckpt's Q4_K_M with its scalar kernels
           (CKPT_SIMD=scalar: the quantizers before their SIMD versions);
           and `ckpt convert --raw` (the tensors alone, without llama.cpp's
           names, key-values and tokenizer), to show what the metadata
           costs.  Writes bench/results/llamacpp-4GB.json (llamacpp-1GB.json).

    make bench BENCH_ARGS="llamacpp --runs 3 --peer-runs 1"
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from run import BIN_PATH, DATA, ROOT, drop_caches, machine_facts, measure, run_timed, save, summary

LLAMA_CPP_CACHE = ROOT / ".cache" / "llama-cpp-python-0.3.36"
LLAMA_BIN = LLAMA_CPP_CACHE / "build" / "bin"
SCRIPT = LLAMA_CPP_CACHE / "llama.cpp" / "convert_hf_to_gguf.py"
DTYPES = ("f32", "f16", "bf16", "q8_0")

# How far llama.cpp's logits may be from transformers' float32 logits on the
# original weights: max |difference| / max |reference logit|.  The tiny
# models' weights are bf16 (Llama 2's f16), so the F32, and the BF16 (F16)
# file, hold them exactly; what differs is the arithmetic.  ggml's CPU
# matmuls round the activations to the weights' type before the dot product
# (bf16: unit roundoff u = 2^-9; f16: 2^-11; Q8_0: 8-bit blocks of 32,
# u = 1/254 of a block's largest value, which for 32 normal values is about
# 2.5 standard deviations: u about 2.5/254 of a typical value, the weights
# rounded too), while f32 only reorders float32 sums.  Two layers of 4
# rounded matmuls each and the output matmul put about 9 such roundings on
# the path to a logit: the tolerance is 16 u (f32: 1e-4, where reordered
# float32 sums over 2 layers give ~1e-6).  Measured when it was chosen: the
# largest error of the six families is 0.3 to 0.4 of the tolerance for
# every type (f16 2.7e-3, bf16 1.5e-2, q8_0 6.4e-2), while a wrong tensor
# (the negative controls) moves the logits by 0.6 to 1.2.
TOLERANCE = {"f32": 1e-4, "f16": 16 * 2 ** -11, "bf16": 16 * 2 ** -9, "q8_0": 16 * 2.5 / 254}
TOLERANCE_BASIS = ("max |llama.cpp - transformers| / max |transformers| over every position and token; "
                   "16 x the unit roundoff of the type ggml rounds activations (and Q8_0 weights) to "
                   "(bf16 2^-9, f16 2^-11, Q8_0 2.5/254: 1/254 of a block's largest value, about 2.5 "
                   "standard deviations): about 9 rounded matmuls lie on the path to a logit in these "
                   "2-layer models; f32 1e-4 (float32 sums reordered)")

SAMPLE_TEXTS = [
    "Hello world! It's a test: 12345 + 678 = 13023.",
    "The quick brown fox jumps over the lazy dog.\n\n  Indented\ttabs and  double  spaces;\r\nCRLF too.",
    "naïve café, Ünïcödé — “quotes”, 你好，世界! Привет мир. 🦙🚀 don't we'll I've",
]
# The prompt of the logits check: the HF tokenizer's ids of this text.
PROMPT = "The capital of France is Paris, and the capital of Italy is Rome. 1 2 3"


def llama_cpp_build():
    """`make llama-cpp-build` (a no-op once built); its build time, recorded
    by the Makefile in build-seconds when it built."""
    t0 = time.perf_counter()
    subprocess.run(["make", "-s", "-C", str(ROOT), "llama-cpp-build"], check=True)
    took = time.perf_counter() - t0
    recorded = LLAMA_CPP_CACHE / "build" / "build-seconds"
    return {"this_run_s": round(took, 1),
            "build_s": float(recorded.read_text()) if recorded.exists() else None,
            "bin": str(LLAMA_BIN.relative_to(ROOT))}


def llama_run(*args):
    r = subprocess.run([str(LLAMA_BIN / "ckpt-llama-run"), *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ckpt-llama-run {' '.join(map(str, args))}: {r.stderr[-2000:]}")
    return r.stdout


def ckpt_convert(model, dst, dtype):
    r = subprocess.run([BIN_PATH, "convert", str(model), str(dst), "--dtype", dtype, "-q", "--no-sync"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ckpt convert {model} --dtype {dtype}: {r.stderr}")


def script_convert(model, dst, outtype):
    r = subprocess.run([sys.executable, str(SCRIPT), str(model), "--outfile", str(dst), "--outtype", outtype],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"convert_hf_to_gguf.py {model} --outtype {outtype}: {r.stderr[-3000:]}")


def llama_quantize(src, dst, mix, threads=None):
    r = subprocess.run([str(LLAMA_BIN / "llama-quantize"), str(src), str(dst), mix.upper(),
                        str(threads or os.cpu_count())], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"llama-quantize {src} {mix}: {r.stderr[-3000:]}")


# ------------------------------------------------------------------ check

def _interop():
    """tests/interop/test_llamacpp.py: the tiny models and real tokenizers."""
    for p in (ROOT / "tests", ROOT / "tests" / "interop"):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    import test_llamacpp
    return test_llamacpp


def rescale(model, seed):
    """model.safetensors redrawn at a trained model's scale, same names,
    shapes and dtypes: norms 1 + 0.1 N(0,1), biases 0.1 N(0,1), embeddings
    N(0,1), matrices N(0,1)/sqrt(fan-in) (Q and K x2, so attention picks
    positions) — activations of unit RMS and logits of order 1, where the
    write_decoder's 0.02 N(0,1) makes attention uniform and logits tiny."""
    import torch
    from safetensors.torch import load_file, save_file
    g = torch.Generator().manual_seed(seed)
    sd = load_file(str(model / "model.safetensors"))
    out = {}
    for name, t in sd.items():
        x = torch.randn(t.shape, generator=g)
        if name.endswith("norm.weight"):
            x = 1 + 0.1 * x
        elif name.endswith(".bias"):
            x = 0.1 * x
        elif t.ndim == 2 and "embed_tokens" not in name:
            x = x / t.shape[1] ** 0.5
            if any(k in name for k in ("q_proj", "k_proj", "qkv_proj")):
                x = 2 * x
        out[name] = x.to(t.dtype)
    save_file(out, str(model / "model.safetensors"), metadata={"format": "pt"})


def check_models(root):
    """{family: model directory}: the families and tokenizer kinds ckpt writes."""
    t = _interop()
    import torch
    dirs = {}
    for family, make in (("llama3", t.tiny_llama), ("llama2", t.tiny_llama2), ("qwen2", t.tiny_qwen2),
                         ("qwen3", t.tiny_qwen3), ("phi3", t.tiny_phi3)):
        dirs[family] = root / f"tiny-{family}"
        make(dirs[family])
        t.tokenizer(t.TOKENIZER_OF.get(family, family), dirs[family])
    # Mistral 7B v0.1's shape of directory: LlamaModel, SentencePiece, GQA.
    dirs["mistral"] = root / "tiny-mistral"
    t.tiny_llama2(dirs["mistral"], dtype=torch.bfloat16, seed=5, architectures=["MistralForCausalLM"],
                  model_type="mistral", num_key_value_heads=2, sliding_window=4096)
    t.tokenizer("llama2", dirs["mistral"])
    for i, d in enumerate(dirs.values()):
        rescale(d, 100 + i)
    return dirs


def hf_logits(model, ids):
    import torch
    import transformers
    m = transformers.AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32)
    m.eval()
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0].numpy()


def cpp_logits(gguf, ids, scratch):
    out = scratch / "logits.f32"
    llama_run("logits", gguf, out, *ids)
    x = np.fromfile(out, dtype=np.float32)
    out.unlink()
    return x.reshape(len(ids), -1)


def compare(ref, got):
    """The check's figures for one file: relative max error, top-1 agreement."""
    if got.shape != ref.shape:
        return {"error": float("inf"), "shape": list(got.shape)}
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    return {"error": err, "top1_agree": float((got.argmax(-1) == ref.argmax(-1)).mean()),
            "max_abs_logit": float(np.abs(ref).max())}


def _gguf():
    sys.path.insert(0, str(LLAMA_CPP_CACHE / "llama.cpp" / "gguf-py"))
    import gguf
    return gguf


def perturbed(src, dst, how, config):
    """A copy of the F32 file with one mistake a converter could make:
    "swap-q-heads" (query heads 0 and 2 of block 0 exchanged) or
    "unpermuted-qk" (every block's Q and K rows in HF's order)."""
    shutil.copyfile(src, dst)
    r = _gguf().GGUFReader(dst, "r+")
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    for t in r.tensors:
        w = t.data  # rows x columns, a writable view of the file
        if how == "swap-q-heads" and t.name in ("blk.0.attn_q.weight", "blk.0.attn_qkv.weight"):
            a, b = slice(0, head_dim), slice(2 * head_dim, 3 * head_dim)
            w[a], w[b] = w[b].copy(), w[a].copy()
        if how == "unpermuted-qk" and t.name.endswith((".attn_q.weight", ".attn_k.weight")):
            n = heads if t.name.endswith("attn_q.weight") else kv_heads
            rows, cols = w.shape
            # llama.cpp's permutation, undone: (n, 2, rows/n/2) -> (n, rows/n/2, 2)
            w[:] = w.reshape(n, rows // n // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols).copy()
    r.data.flush()
    del r
    return dst


def tokens_check(model, text_file, texts):
    """llama.cpp's ids of each text against the HF tokenizer's.  With a
    SentencePiece model, the ids may instead be SentencePiece's own (with the
    BOS the HF tokenizer adds): HF's tokenizer.json, a BPE converted from
    tokenizer.model, merges runs of spaces otherwise ("▁▁" "Ind" where
    SentencePiece and llama.cpp give "▁" "▁Ind")."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(model))
    sp = None
    if (model / "tokenizer.model").exists():
        from sentencepiece import SentencePieceProcessor
        sp = SentencePieceProcessor()
        sp.LoadFromFile(str(model / "tokenizer.model"))
    rows = []
    for text in texts:
        text_file.write_text(text, encoding="utf-8")
        hf = tok(text).input_ids
        cpp = json.loads(llama_run("tokenize", model / "model-f32.gguf", text_file))
        row = {"text": text, "hf": hf, "llama_cpp": cpp, "equal_hf": hf == cpp}
        if sp is not None:
            row["sentencepiece"] = hf[:1] * (hf[:1] == [tok.bos_token_id]) + sp.encode(text)
            row["equal_sentencepiece"] = row["sentencepiece"] == cpp
        row["equal"] = row["equal_hf"] or row.get("equal_sentencepiece", False)
        rows.append(row)
    return rows


def run_check(args, build):
    scratch = DATA / "llamacpp-check"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    dirs = check_models(scratch)
    families, failures = {}, []
    for family, model in dirs.items():
        config = json.loads((model / "config.json").read_text())
        for dtype in DTYPES:
            ckpt_convert(model, model / f"model-{dtype}.gguf", dtype)
        from transformers import AutoTokenizer
        ids = AutoTokenizer.from_pretrained(str(model))(PROMPT).input_ids
        ref = hf_logits(model, ids)
        res = {"tokens": tokens_check(model, scratch / "text.txt", SAMPLE_TEXTS), "prompt_ids": ids, "logits": {},
               "controls": {}}
        for row in res["tokens"]:
            if not row["equal"]:
                failures.append(f"{family}: llama.cpp's tokens of {row['text']!r} are {row['llama_cpp']}, "
                                f"the HF tokenizer's {row['hf']}"
                                + (f", SentencePiece's {row['sentencepiece']}" if "sentencepiece" in row else ""))
        for dtype in DTYPES:
            c = compare(ref, cpp_logits(model / f"model-{dtype}.gguf", ids, scratch))
            c["tolerance"] = TOLERANCE[dtype]
            c["pass"] = c["error"] <= TOLERANCE[dtype]
            res["logits"][dtype] = c
            if not c["pass"]:
                failures.append(f"{family} {dtype}: logits off by {c['error']:.3g} (tolerance {TOLERANCE[dtype]:.3g})")
        # llama's Q and K rows are permuted by the script (and ckpt); qwen's and phi3's are not
        controls = ["swap-q-heads"] + (["unpermuted-qk"] if config["model_type"] in ("llama", "mistral") else [])
        for how in controls:
            bad = perturbed(model / "model-f32.gguf", scratch / f"{family}-{how}.gguf", how, config)
            c = compare(ref, cpp_logits(bad, ids, scratch))
            c["detected"] = not c["error"] <= TOLERANCE["f32"]
            res["controls"][how] = c
            bad.unlink()
            if not c["detected"]:
                failures.append(f"{family}: the logits check does not see {how} (error {c['error']:.3g})")
        families[family] = res
        print(f"  {family:8s} tokens {'equal' if all(r['equal'] for r in res['tokens']) else 'DIFFER'}; logits "
              + ", ".join(f"{d} {res['logits'][d]['error']:.2e}" for d in DTYPES) + "; controls "
              + ", ".join(f"{k} {v['error']:.2e}" for k, v in res["controls"].items()), flush=True)
    import tokenizers
    import transformers
    doc = {"suite": "llamacpp-check", "machine": machine_facts(), "llama_cpp": "llama-cpp-python 0.3.36 sdist",
           "llama_cpp_build": build, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
           "tolerance": TOLERANCE, "tolerance_basis": TOLERANCE_BASIS, "prompt": PROMPT, "families": families,
           "failures": failures}
    save("llamacpp-check", doc)
    shutil.rmtree(scratch, ignore_errors=True)
    if failures:
        sys.exit("llamacpp check FAILED:\n  " + "\n  ".join(failures))


# --------------------------------------------------------- quantize-check

MIXES = ("q4_k_m", "q5_k_m", "q4_k_s", "q5_k_s", "q6_k")


def where_in_gguf(path, offset):
    """What byte `offset` of a GGUF file belongs to: a tensor's data (its
    name, type and the offset within it), or the header (key-values and
    tensor infos)."""
    r = _gguf().GGUFReader(path)
    for t in r.tensors:
        if t.data_offset <= offset < t.data_offset + t.n_bytes:
            return f"tensor {t.name} ({t.tensor_type.name}), byte {offset - t.data_offset} of its data"
    return "the header (key-values, tensor infos) or padding"


def same_file(got, want):
    """{"identical": bool, ...}: the two files byte for byte; else their sizes
    and the first difference, placed in `want` (llama-quantize's file)."""
    a, b = got.read_bytes(), want.read_bytes()
    if a == b:
        return {"identical": True, "bytes": len(a), "sha256": hashlib.sha256(a).hexdigest()}
    at = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    return {"identical": False, "bytes": len(a), "reference_bytes": len(b), "first_difference": at,
            "where": where_in_gguf(want, at) if at < len(b) else "past the end of the shorter file"}


def quantize_check_models(root):
    """The check models (rows of 32: the mixes' Q5_0, Q5_1 and Q8_0
    fallbacks) and tests/interop/test_kquants.py's two Llamas: 8 layers of
    hidden size 256 with GQA (whole 256-element rows: Q4_K, Q5_K and Q6_K,
    use_more_bits over 8 layers) and hidden size 48 (rows of no whole
    block: F16)."""
    t = _interop()
    dirs = check_models(root)
    dirs["llama8"], dirs["llama48"] = root / "tiny-llama8", root / "tiny-llama48"
    t.tiny_llama2(dirs["llama8"], seed=8, hidden_size=256, intermediate_size=512, num_hidden_layers=8, head_dim=64,
                  num_key_value_heads=2)
    t.tiny_llama2(dirs["llama48"], seed=11, hidden_size=48, intermediate_size=96, head_dim=12)
    for d in (dirs["llama8"], dirs["llama48"]):
        t.tokenizer("llama2", d)
    return dirs


def tensor_types(path):
    """{ggml type: tensors of it} of a GGUF file."""
    out = {}
    for t in _gguf().GGUFReader(path).tensors:
        out[t.tensor_type.name] = out.get(t.tensor_type.name, 0) + 1
    return out


def run_quantize_check(args, build):
    """ckpt's mixes against llama.cpp's own route: the script's F32 file,
    then llama-quantize (no importance matrix), on each model."""
    scratch = DATA / "llamacpp-quantize-check"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    dirs = quantize_check_models(scratch)
    families, failures = {}, []
    control = None
    for family, model in dirs.items():
        f32 = scratch / f"{family}-f32.gguf"
        script_convert(model, f32, "f32")
        res = {}
        for mix in MIXES:
            want, got = scratch / f"{family}-{mix}.llama-quantize.gguf", scratch / f"{family}-{mix}.ckpt.gguf"
            llama_quantize(f32, want, mix)
            ckpt_convert(model, got, mix)
            res[mix] = {**same_file(got, want), "types": tensor_types(want)}
            if not res[mix]["identical"]:
                failures.append(f"{family} {mix}: ckpt's file differs from llama-quantize's at byte "
                                f"{res[mix]['first_difference']} ({res[mix]['where']})")
            if control is None and res[mix]["identical"]:
                # the comparison must see one changed byte: the last byte of ckpt's file, flipped
                bad = got.with_suffix(".control")
                data = bytearray(got.read_bytes())
                data[-1] ^= 0x01
                bad.write_bytes(bytes(data))
                c = same_file(bad, want)
                control = {"file": f"{family} {mix}, last byte flipped", "caught": not c["identical"], **c}
                bad.unlink()
                if c["identical"]:
                    failures.append("the control (one byte changed) compared equal: the check is blind")
            got.unlink()
            want.unlink()
        f32.unlink()
        families[family] = res
        print(f"  {family:8s} " + ", ".join(f"{m} {'identical' if r['identical'] else 'DIFFERS'}"
                                            for m, r in res.items()), flush=True)
    if control is None:
        failures.append("no identical file to run the control on")
    doc = {"suite": "llamacpp-quantize-check", "machine": machine_facts(), "llama_cpp": "llama-cpp-python 0.3.36 sdist",
           "llama_cpp_build": build, "route": "convert_hf_to_gguf.py --outtype f32, then llama-quantize F32.gguf OUT "
           "MIX (no importance matrix)", "mixes": list(MIXES), "families": families, "control": control,
           "failures": failures}
    save("llamacpp-quantize-check", doc)
    shutil.rmtree(scratch, ignore_errors=True)
    if failures:
        sys.exit("llamacpp quantize-check FAILED:\n  " + "\n  ".join(failures))


# ---------------------------------------------------------------- measure

# A Llama 3 of ~4 GB in bf16 (Llama 3.2 3B's vocabulary and heads, narrower):
# 2 x 128256 x 2048 embeddings and head, 24 layers of 121.6 MB.
BIG_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 128000,
    "dtype": "bfloat16", "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 8192, "mlp_bias": False,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 24, "num_key_value_heads": 8,
    "pad_token_id": None, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}, "tie_word_embeddings": False,
    "transformers_version": "5.23.0", "use_cache": True, "vocab_size": 128256}


# A Llama 3 of ~1 GB (`--llamacpp-gb 1`): the same vocabulary and heads of 64,
# hidden 1024, 16 layers of 30.4 MB; for the Q4_K_M comparison on a busy
# machine, where the 4 GB one takes most of an hour.
SMALL_CONFIG = {**BIG_CONFIG, "hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 16,
                "num_hidden_layers": 16, "num_key_value_heads": 4}
CONFIGS = {4: BIG_CONFIG, 1: SMALL_CONFIG}


def big_shapes(c):
    h, ff, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    shapes = [("model.embed_tokens.weight", [v, h])]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes += [(p + "input_layernorm.weight", [h]), (p + "post_attention_layernorm.weight", [h]),
                   (p + "self_attn.q_proj.weight", [q, h]), (p + "self_attn.k_proj.weight", [kv, h]),
                   (p + "self_attn.v_proj.weight", [kv, h]), (p + "self_attn.o_proj.weight", [h, q]),
                   (p + "mlp.gate_proj.weight", [ff, h]), (p + "mlp.up_proj.weight", [ff, h]),
                   (p + "mlp.down_proj.weight", [h, ff])]
    return shapes + [("model.norm.weight", [h]), ("lm_head.weight", [v, h])]


def make_big_model(gb=4):
    """bench/data/llamacpp-bf16-<gb>GB/bench-llama3: config.json, Llama 3's
    tokenizer, then model.safetensors, streamed through ckpt's writer from
    a 64 MiB block of 0.02 N(0,1) bf16 values (never the whole model in
    memory).  The directory's name has no part the script's metadata
    heuristics read as a size, version or fine-tune (general.basename,
    .finetune ...: ckpt writes none), so both write the same file."""
    config = CONFIGS[gb]
    model = DATA / f"llamacpp-bf16-{gb}GB" / "bench-llama3"
    if (model / "model.safetensors").exists():
        return model
    shutil.rmtree(model, ignore_errors=True)
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(config, indent=2))
    _interop().tokenizer("llama3", model)
    import ctypes
    import torch
    from ckptlib import DTYPES as CK_DTYPES, Error, WriterOptions, _check, _lib
    g = torch.Generator().manual_seed(0)
    block = (torch.randn(1 << 25, generator=g) * 0.02).bfloat16().view(torch.int16).numpy().tobytes()
    opts = WriterOptions()
    _lib.ckpt_writer_options_init_sized(ctypes.byref(opts), ctypes.sizeof(opts))
    opts.no_sync = 1
    w, err = ctypes.c_void_p(), Error()
    # the writer commits by renaming: no model.safetensors until it is whole
    _check(_lib.ckpt_writer_create(str(model / "model.safetensors").encode(), ctypes.byref(opts), ctypes.byref(w),
                                   ctypes.byref(err)), err)
    _lib.ckpt_writer_set_metadata(w, b"format", b"pt", ctypes.byref(err))
    shapes = big_shapes(config)
    for name, shape in shapes:
        dims = (ctypes.c_uint64 * len(shape))(*shape)
        _check(_lib.ckpt_writer_add_tensor(w, name.encode(), CK_DTYPES.index("BF16"), len(shape), dims, None,
                                           ctypes.byref(err)), err)
    _check(_lib.ckpt_writer_begin(w, ctypes.byref(err)), err)
    at = 0
    for i, (_, shape) in enumerate(shapes):
        left = 2 * int(np.prod(shape))
        while left:
            k = min(left, len(block) - at)
            _check(_lib.ckpt_writer_write(w, i, block[at:at + k], k, ctypes.byref(err)), err)
            left -= k
            at = (at + k) % len(block)
    _check(_lib.ckpt_writer_commit(w, ctypes.byref(err)), err)
    _lib.ckpt_writer_free(w)
    return model


def contenders(model, bf16_gguf):
    script = lambda t: lambda out: [sys.executable, str(SCRIPT), str(model), "--outfile", str(out), "--outtype", t]
    ckpt = lambda t, sync: lambda out: [BIN_PATH, "convert", str(model), str(out), "--dtype", t, "-q",
                                        *([] if sync else ["--no-sync"])]
    return {
        "bf16": {"ckpt convert --no-sync": ckpt("bf16", False), "ckpt convert": ckpt("bf16", True),
                 "convert_hf_to_gguf.py": script("bf16"),
                 # the same tensors without llama.cpp's names and key-values (tokenizer ...): what they cost
                 "ckpt convert --no-sync --raw": lambda out: [*ckpt("bf16", False)(out), "--raw"],
                 "cp (the weights)": lambda out: ["cp", str(model / "model.safetensors"), str(out)]},
        "q8_0": {"ckpt convert --no-sync": ckpt("q8_0", False), "ckpt convert": ckpt("q8_0", True),
                 "convert_hf_to_gguf.py": script("q8_0")},
        # HF bf16 → Q4_K_M in one pass, against llama-quantize from the script's (ckpt's, the same) BF16 file,
        # with the same threads (ckpt's engine: one per CPU)
        "Q4_K_M": {"ckpt convert --no-sync": ckpt("q4_k_m", False), "ckpt convert": ckpt("q4_k_m", True),
                   "llama-quantize (from the bf16 GGUF)":
                   lambda out: [str(LLAMA_BIN / "llama-quantize"), str(bf16_gguf), str(out), "Q4_K_M",
                                str(os.cpu_count())],
                   SCALAR: ckpt("q4_k_m", False)},
    }


# ckpt's quantizers without their SIMD kernels: the code before them, in the same run
SCALAR = "ckpt convert --no-sync, scalar kernels (CKPT_SIMD=scalar)"
ENV = {SCALAR: {**os.environ, "CKPT_SIMD": "scalar"}}
SLOW = ("convert_hf_to_gguf.py", "llama-quantize (from the bf16 GGUF)", SCALAR)
# The contenders whose files are compared (their first warm run's), and the peer each ratio is taken against.
SAME_OUTPUT = {"bf16": ("convert_hf_to_gguf.py", "ckpt convert --no-sync"),
               "q8_0": ("convert_hf_to_gguf.py", "ckpt convert --no-sync"),
               "Q4_K_M": ("llama-quantize (from the bf16 GGUF)", "ckpt convert --no-sync")}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def run_measure(args, build):
    gb = args.llamacpp_gb
    model = make_big_model(gb)
    src = model / "model.safetensors"
    size = src.stat().st_size
    scratch = DATA / "llamacpp-out"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    bf16_gguf = scratch / "model-bf16.gguf"  # llama-quantize's input, ckpt's bf16 file
    ckpt_convert(model, bf16_gguf, "bf16")
    cases = {c: cs for c, cs in contenders(model, bf16_gguf).items()
             if not args.llamacpp_cases or c in args.llamacpp_cases.split(",")}
    peer_runs = args.peer_runs or args.runs
    results = {case: {mode: {k: {"seconds": [], "rss": []} for k in cs} for mode in args.llamacpp_modes.split(",")}
               for case, cs in cases.items()}
    load_average = [os.getloadavg()[0]]
    digests = {}  # {case: {contender: sha256 of its file}}: the same file from ckpt and the script
    for case, cs in cases.items():
        inputs = [src, bf16_gguf] if case == "Q4_K_M" else [src]
        for mode in args.llamacpp_modes.split(","):
            for rnd in range(args.runs + 1):  # round 0 warms up (warm) or is dropped (cold)
                names = list(cs) if rnd % 2 == 0 else list(reversed(cs))
                for label in names:
                    if label in SLOW and not 0 < rnd <= peer_runs:
                        continue  # a slow contender: no warm-up of its own (its inputs are read before each run)
                    out = scratch / "out.gguf"
                    if out.exists():
                        out.unlink()
                    subprocess.run(["sync"])
                    if mode == "cold":
                        drop_caches(inputs)
                    else:
                        for f in inputs:
                            subprocess.run(["cat", str(f)], stdout=subprocess.DEVNULL)
                    secs, rss, r = run_timed(cs[label](out), env=ENV.get(label))
                    if r.returncode != 0:
                        raise RuntimeError(f"{label}: {r.stderr[-3000:]}")
                    if mode == "warm" and rnd == 1 and label in SAME_OUTPUT[case]:
                        digests.setdefault(case, {})[label] = sha256(out)
                    if rnd > 0:
                        results[case][mode][label]["seconds"].append(secs)
                        results[case][mode][label]["rss"].append(rss)
                    print(f"  {case:6s} {mode:4s} round {rnd} {label:38s} {secs:7.2f} s  RSS {rss / 2**20:8.1f} MiB",
                          flush=True)
            load_average.append(os.getloadavg()[0])
    shutil.rmtree(scratch, ignore_errors=True)
    doc = {"suite": f"llamacpp-{gb}GB", "bytes": size, "model": model.name, "config": {
               k: CONFIGS[gb][k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                          "num_attention_heads", "num_key_value_heads", "vocab_size")},
           "machine": machine_facts(), "llama_cpp": "llama-cpp-python 0.3.36 sdist", "llama_cpp_build": build,
           "runs": args.runs, "peer_runs": peer_runs,
           "identical_outputs": {case: len(set(d.values())) == 1 for case, d in digests.items()},
           "load_average": {"min": min(load_average), "max": max(load_average)},
           # llama's tensors are written one by one: no group the format forces to merge (MoE experts)
           "largest_merged_group_bytes": 0, "rss_target_bytes": 64 * 2**20, "results": {}}
    for case, modes in results.items():
        doc["results"][case] = {}
        for mode, res in modes.items():
            out = {}
            for label, r in res.items():
                if not r["seconds"]:
                    continue
                s = summary(r["seconds"])
                s["peak_rss_bytes"] = max(r["rss"])
                if label.startswith("ckpt"):
                    # named by the model's folder (llamacpp-bf16-<gb>GB): every size's model is bench-llama3
                    s["measure"] = measure(f"{label} --dtype {case}", model.parent, mode)
                out[label] = s
            peer = SAME_OUTPUT[case][0]
            if peer in out:
                out["speedup"] = {k: out[peer]["median"] / out[k]["median"]
                                  for k in ("ckpt convert --no-sync", "ckpt convert", SCALAR) if k in out}
            doc["results"][case][mode] = out
    for mode, res in doc["results"].get("Q4_K_M", {}).items():
        # llama.cpp's whole route from the HF directory: the script's BF16 file, then llama-quantize
        script = doc["results"].get("bf16", {}).get(mode, {}).get("convert_hf_to_gguf.py")
        if script and "speedup" in res:
            route = script["median"] + res["llama-quantize (from the bf16 GGUF)"]["median"]
            res["route_seconds"] = route
            res["speedup_route"] = {k: route / res[k]["median"] for k in res["speedup"]}
    save(f"llamacpp-{gb}GB", doc)
    return doc


def run_llamacpp_suite(args):
    build = llama_cpp_build()
    parts = args.llamacpp_parts.split(",")
    if "check" in parts:
        run_check(args, build)
    if "quantize-check" in parts:
        run_quantize_check(args, build)
    if "measure" in parts:
        run_measure(args, build)


def show_a_wrong_file_fails():
    """The check run on the tiny Llama 3 alone, ckpt's F32 file replaced by
    one with Q and K left in HF's order (the rest ckpt's own): it must exit
    non-zero, naming the F32 logits.  Nothing is saved; scratch in /tmp."""
    import tempfile
    global DATA, save, check_models, ckpt_convert
    DATA = Path(tempfile.mkdtemp(prefix="llamacpp-wrong-"))
    save = lambda name, doc: None  # noqa: E731
    real_convert = ckpt_convert

    def llama3_only(root):
        t = _interop()
        model = root / "tiny-llama3"
        t.tiny_llama(model)
        t.tokenizer("llama3", model)
        rescale(model, 100)
        return {"llama3": model}

    def convert_unpermuted(model, dst, dtype):
        real_convert(model, dst, dtype)
        if dtype == "f32":
            right = dst.with_suffix(".right")
            os.replace(dst, right)
            perturbed(right, dst, "unpermuted-qk", json.loads((model / "config.json").read_text()))
            right.unlink()

    check_models, ckpt_convert = llama3_only, convert_unpermuted
    try:
        run_check(None, llama_cpp_build())
    finally:
        shutil.rmtree(DATA, ignore_errors=True)
    sys.exit("the check passed a file with Q and K unpermuted: it is blind")


if __name__ == "__main__":
    # .venv/bin/python bench/llamacpp_suite.py --show-a-wrong-file-fails: exits 1, "llama3 f32: logits off by ..."
    if sys.argv[1:] == ["--show-a-wrong-file-fails"]:
        show_a_wrong_file_fails()
    sys.exit("run it as `make bench BENCH_ARGS=\"llamacpp\"`")
