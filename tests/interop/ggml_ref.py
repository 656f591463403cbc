"""ggml itself as the reference of ckpt's K-quants and llama-quantize mixes,
built at test time from the llama-cpp-python sdist that `make llama-cpp-ref`
keeps in .cache/ (never a build dependency of libckpt):

- libggml_quants_ref.so: ggml-quants.c as it is (its quantize_row_*_ref),
  compiled as ggml builds ggml-base (C11, -O2, NDEBUG, no -march: no FMA);
- mix-ref: llama.cpp's src/llama-quant.cpp's own type choice —
  tensor_get_category, tensor_allows_quantization, llama_tensor_get_type and
  what they call, the text cut from the file unchanged — with
  llama_model_loader's weights_map order (llama-model-loader.h's
  weight_name_comparer), driven over a tensor list as
  llama_model_quantize_impl drives it; only llama_model, the log macros and
  ggml's type table are stand-ins.

Both are built once under .cache/ (~10 s) and kept beside the sdist."""
import ctypes
import os
import re
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SDIST = REPO / ".cache/llama-cpp-python-0.3.36/llama_cpp_python-0.3.36.tar.gz"
KEPT = REPO / ".cache/llama-cpp-python-0.3.36/ggml-ref"
MEMBERS = ("ggml/src/ggml-quants.c", "ggml/src/ggml-quants.h", "ggml/src/ggml-common.h", "ggml/src/ggml-impl.h",
           "ggml/src/ggml-cpu/ggml-cpu-impl.h",
           "ggml/include/", "src/llama-quant.cpp", "src/llama-model-loader.h", "include/llama.h")

# ggml_type numbers (ggml.h), as GGUF files store them.
GGML = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q2_K": 10, "Q3_K": 11,
        "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "BF16": 30}
BLOCK = {"Q4_0": (32, 18), "Q5_0": (32, 22), "Q5_1": (32, 24), "Q8_0": (32, 34), "Q4_K": (256, 144),
         "Q5_K": (256, 176), "Q6_K": (256, 210)}

STUBS = r"""
#include <stdlib.h>
#include <stddef.h>
#include <stdint.h>
/* ggml.c's, which the _ref quantizers never call */
void ggml_abort(const char *f, int l, const char *fmt, ...) { (void)f; (void)l; (void)fmt; abort(); }
size_t ggml_row_size(int t, int64_t n) { (void)t; (void)n; abort(); }
const char *ggml_type_name(int t) { (void)t; abort(); }
size_t ggml_type_size(int t) { (void)t; abort(); }
"""

MIX_PRELUDE = r"""
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>
#include "llama.h"

/* stand-ins for llama.cpp's model and logging */
enum llm_arch { LLM_ARCH_LLAMA, LLM_ARCH_QWEN2, LLM_ARCH_QWEN2MOE, LLM_ARCH_QWEN3, LLM_ARCH_QWEN3MOE, LLM_ARCH_PHI3,
                LLM_ARCH_FALCON, LLM_ARCH_GLM5_NEXT, LLM_ARCH_BAILINGMOE3, LLM_ARCH_UNKNOWN };
enum llm_type { LLM_TYPE_UNKNOWN, LLM_TYPE_70B };
enum llm_tensor { LLM_TENSOR_POS_EMBD, LLM_TENSOR_TOKEN_TYPES };
struct llama_hparams {
    uint32_t n_expert = 0, n_layer_all = 0, n_head = 0, n_head_kv = 0;
    uint32_t n_gqa() const { return n_head_kv ? n_head / n_head_kv : 0; }
};
struct llama_model { llm_arch arch; llm_type type; llama_hparams hparams; };
struct LLM_TN {
    explicit LLM_TN(llm_arch) {}
    std::string operator()(llm_tensor t, const char *suffix) const {
        return std::string(t == LLM_TENSOR_POS_EMBD ? "position_embd" : "token_types") + "." + suffix;
    }
};
#define LLAMA_LOG_WARN(...) ((void)0)
#define LLAMA_LOG_INFO(...) ((void)0)
#define LLAMA_LOG_ERROR(...) ((void)0)
#define LLAMA_LOG_DEBUG(...) ((void)0)
static std::string format(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}
extern "C" {
const char *ggml_get_name(const struct ggml_tensor *t) { return t->name; }
int ggml_n_dims(const struct ggml_tensor *t) {
    for (int i = GGML_MAX_DIMS - 1; i >= 1; --i)
        if (t->ne[i] > 1) return i + 1;
    return 1;
}
int64_t ggml_blck_size(enum ggml_type t) {
    switch (t) {
    case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: return 1;
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q8_0:
    case GGML_TYPE_IQ4_NL: case GGML_TYPE_MXFP4: return 32;
    default: return 256;
    }
}
bool ggml_is_quantized(enum ggml_type t) { return ggml_blck_size(t) > 1; }
const char *ggml_type_name(enum ggml_type t) { (void)t; return "?"; }
}
"""

MIX_MAIN = r"""
/* stdin: "ftype arch n_layer n_head n_head_kv n_expert", then one
 * "name type ne0 ne1 ne2 ne3" a tensor; stdout: "name type" in
 * llama-quantize's order, as llama_model_quantize_impl walks them. */
int main() {
    int ftype;
    char arch[64];
    llama_model model{};
    if (std::scanf("%d %63s %u %u %u %u", &ftype, arch, &model.hparams.n_layer_all, &model.hparams.n_head,
                   &model.hparams.n_head_kv, &model.hparams.n_expert) != 6) return 2;
    static const std::map<std::string, llm_arch> archs = {
        {"llama", LLM_ARCH_LLAMA}, {"qwen2", LLM_ARCH_QWEN2}, {"qwen2moe", LLM_ARCH_QWEN2MOE},
        {"qwen3", LLM_ARCH_QWEN3}, {"qwen3moe", LLM_ARCH_QWEN3MOE}, {"phi3", LLM_ARCH_PHI3}};
    model.arch = archs.count(arch) ? archs.at(arch) : LLM_ARCH_UNKNOWN;
    /* load_arch_hparams' LLM_TYPE_70B (models/llama.cpp, models/qwen2.cpp) */
    bool llama70 = model.arch == LLM_ARCH_LLAMA && model.hparams.n_expert != 8 &&
                   model.hparams.n_head != model.hparams.n_head_kv;
    if (model.hparams.n_layer_all == 80 && (llama70 || model.arch == LLM_ARCH_QWEN2)) model.type = LLM_TYPE_70B;
    std::map<std::string, ggml_tensor, weight_name_comparer> weights;
    char name[GGML_MAX_NAME];
    int type;
    long long ne[4];
    while (std::scanf("%63s %d %lld %lld %lld %lld", name, &type, &ne[0], &ne[1], &ne[2], &ne[3]) == 6) {
        ggml_tensor t{};
        std::strcpy(t.name, name);
        t.type = (ggml_type)type;
        for (int i = 0; i < 4; i++) t.ne[i] = ne[i];
        weights[name] = t;
    }
    llama_model_quantize_params params = llama_model_quantize_default_params();
    params.ftype = (llama_ftype)ftype;
    quantize_state_impl qs(model, &params);
    std::vector<tensor_metadata> metadata;
    for (auto &w : weights) metadata.push_back(tensor_metadata{w.first});
    init_quantize_state_counters(qs, metadata);
    ggml_type default_type = llama_ftype_get_default_type((llama_ftype)ftype);
    size_t i = 0;
    try {
        for (auto &w : weights) {
            tensor_metadata &tm = metadata[i++];
            ggml_type out = tensor_allows_quantization(&params, model.arch, &w.second)
                ? llama_tensor_get_type(qs, &params, &w.second, default_type, tm) : w.second.type;
            std::printf("%s %d\n", w.first.c_str(), (int)out);
        }
    } catch (const std::exception &e) {
        std::printf("error %s\n", e.what());
        return 1;
    }
    return 0;
}
"""

DEFAULT_PARAMS = r"""
llama_model_quantize_params llama_model_quantize_default_params() {
    llama_model_quantize_params result = {};
    result.ftype = LLAMA_FTYPE_MOSTLY_Q8_0;
    result.output_tensor_type = GGML_TYPE_COUNT;
    result.token_embedding_type = GGML_TYPE_COUNT;
    result.quantize_output_tensor = true;
    return result;
}
"""


def unpack():
    """The sdist's ggml and llama.cpp sources this module builds from."""
    src = KEPT / "src"
    if (src / ".done").is_file():
        return src
    src.mkdir(parents=True, exist_ok=True)
    with tarfile.open(SDIST) as tar:
        for m in tar.getmembers():
            rel = m.name.split("/vendor/llama.cpp/", 1)
            if len(rel) == 2 and m.isfile() and any(rel[1] == p or (p.endswith("/") and rel[1].startswith(p))
                                                    for p in MEMBERS):
                dst = src / rel[1]
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(tar.extractfile(m).read())
    (src / ".done").touch()
    return src


def cut(text, start):
    """The declaration that begins at `start` (a regex), through its
    matching closing brace (and a ';' right after it)."""
    m = re.search(start, text, re.M)
    assert m, start
    depth, i = 0, text.index("{", m.start())
    while True:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            break
    if text[i:i + 1] == ";":
        i += 1
    return text[m.start():i]


def mix_source(src):
    """llama-quant.cpp's type choice, cut from the file, and a driver."""
    quant = (src / "src/llama-quant.cpp").read_text()
    loader = (src / "src/llama-model-loader.h").read_text()
    parts = [cut(loader, r"^\s*struct weight_name_comparer")]
    parts.append(cut(quant, r"^enum class tensor_category"))
    for name in ("tensor_name_match_token_embd", "tensor_name_match_output_weight", "tensor_get_category",
                 "category_is_attn_v"):
        parts.append(cut(quant, rf"^static \w+ {name}\("))
    parts.append(cut(quant, r"^struct quantize_state_impl"))
    parts.append(cut(quant, r"^struct tensor_metadata"))
    for name in ("tensor_allows_quantization", "tensor_type_fallback", "llama_tensor_get_type_impl",
                 "llama_tensor_get_type", "llama_ftype_get_default_type", "init_quantize_state_counters"):
        parts.append(cut(quant, rf"^\w[\w ]*\b{name}\("))
    return MIX_PRELUDE + DEFAULT_PARAMS + "\n\n".join(parts) + MIX_MAIN


def _build(out, cmd):
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    r = subprocess.run([*cmd, "-o", str(tmp)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    os.replace(tmp, out)


def quants_lib():
    """ctypes handle on ggml-quants.c built as ggml builds it."""
    lib = KEPT / "libggml_quants_ref.so"
    if not lib.is_file():
        src = unpack()
        stubs = KEPT / "stubs.c"
        stubs.write_text(STUBS)
        _build(lib, ["cc", "-std=gnu11", "-O2", "-DNDEBUG", "-fPIC", "-shared", f"-I{src}/ggml/src",
                     f"-I{src}/ggml/include", str(src / "ggml/src/ggml-quants.c"), str(stubs), "-lm"])
    return ctypes.CDLL(str(lib))


def mix_binary():
    """The path of the mix driver (mix-ref)."""
    exe = KEPT / "mix-ref"
    if not exe.is_file():
        src = unpack()
        cpp = KEPT / "mix_ref.cpp"
        cpp.write_text(mix_source(src))
        _build(exe, ["c++", "-std=c++17", "-O1", f"-I{src}/include", f"-I{src}/ggml/include", str(cpp)])
    return exe


def quantize(lib, name, x):
    """ggml's quantize_row_<name>_ref of float32 array x: the blocks' bytes."""
    import numpy as np
    qk, size = BLOCK[name]
    x = np.ascontiguousarray(x, dtype=np.float32)
    assert x.size % qk == 0
    out = ctypes.create_string_buffer(x.size // qk * size)
    kind = name.lower()
    fn = getattr(lib, f"quantize_row_{kind[:-2] + '_K' if kind.endswith('_k') else kind}_ref")
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    fn(x.ctypes.data, out, x.size)
    return out.raw


def mix_types(ftype, arch, n_layer, n_head, n_head_kv, n_expert, tensors):
    """[(name, ggml type)] in llama-quantize's order, from llama-quant.cpp's
    own choice; tensors: (name, ggml type, ne tuple in ggml's order)."""
    lines = [f"{ftype} {arch} {n_layer} {n_head} {n_head_kv} {n_expert}"]
    for name, typ, ne in tensors:
        ne = list(ne) + [1] * (4 - len(ne))
        lines.append(f"{name} {typ} {' '.join(map(str, ne))}")
    r = subprocess.run([str(mix_binary())], input="\n".join(lines) + "\n", capture_output=True, text=True)
    out = [line.split(" ", 1) for line in r.stdout.splitlines()]
    if r.returncode:
        return out[-1][1] if out and out[-1][0] == "error" else r.stderr
    return [(n, int(t)) for n, t in out]
