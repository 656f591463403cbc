/*
 * llamacpp_hf.c — "and back": a llama.cpp GGUF as a Hugging Face model
 * directory (ckpt_gguf_hf_plan, ckpt_gguf.h).  The reverse of llamacpp.c,
 * read from the same per-family tables (llamacpp/{llama,qwen,phi3,gemma}.h),
 * so that each family's mapping lives in one place: the family is the one
 * whose name is general.architecture, each tensor gets the Hugging Face name
 * whose llama.cpp name it has, Q and K rows that the script reordered for
 * llama.cpp's RoPE are put back (transformers' reverse_permute), a layer's
 * stacked experts become one tensor per expert (ckpt__plan_unstack: each a
 * slice of the stack, streamed), what the script added to a tensor
 * (Gemma's norms) is taken away, and config.json is made of the family's
 * key-values, each written under the transformers name among the family's
 * hyper-parameter names (its own first: num_local_experts, num_experts),
 * with what the family's table says llama.cpp assumes (ckpt__lc_hf_config)
 * and Llama 3.1's RoPE parameters recovered from rope_freqs.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../catalog_internal.h"
#include "../plan_internal.h"
#include "../base/json.h"
#include "ckpt_gguf.h"
#include "llamacpp_hf.h"
#include "llamacpp/arch.h"
#include "llamacpp/gemma.h"
#include "llamacpp/llama.h"
#include "llamacpp/phi3.h"
#include "llamacpp/qwen.h"

static const ckpt__lc_family *const hf_families[] = {
    &ckpt__lc_llama, &ckpt__lc_qwen2,    &ckpt__lc_qwen3,    &ckpt__lc_phi3,
    &ckpt__lc_gemma2, &ckpt__lc_gemma3, &ckpt__lc_qwen2moe, &ckpt__lc_qwen3moe,
};

/* The names transformers' configs give the hyper-parameters: config.json
 * takes, for a family's key-value, the one of its hparams list here. */
static const char *const config_names[] = {
    "num_hidden_layers", "max_position_embeddings", "hidden_size", "intermediate_size", "num_attention_heads",
    "num_key_value_heads", "rms_norm_eps", "head_dim", "vocab_size", "original_max_position_embeddings",
    "sliding_window", "attn_logit_softcapping", "final_logit_softcapping", NULL,
};

/* Llama 3.1's RoPE parameters, recovered from rope_freqs. */
typedef struct llama3_rope {
    bool found;
    double factor, low, high, ctx;
} llama3_rope;

typedef struct hf {
    ckpt_plan *plan;
    const char *path; /* the GGUF file, for messages */
    ckpt_error *err;
    const ckpt__lc_family *family;
    bool files;   /* a conversion's plan (config.json, the tokenizer's files), not a load's */
    bool joined;  /* a load into transformers' model: its experts' tensors (ckpt__lc_experts.model) */
    uint64_t n_head, n_kv, n_embd, n_ff, head_dim, vocab, layers;
    uint64_t n_expert, n_expert_ff, n_shared_ff; /* 0: the key is missing */
    bool experts; /* the file has stacked experts: a mixture of experts */
    llama3_rope llama3;
    ckpt__buf config;
    char nonfinite[160]; /* the first key whose float is NaN or infinite: JSON has no such number */
} hf;

/* ---- the GGUF's key-values ------------------------------------------------ */

static const ckpt_kv *arch_kv(const hf *h, const char *suffix) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", h->family->name, suffix);
    return ckpt_catalog_kv_find(h->plan->catalog, key);
}

/* Whether a key-value is a signed integer (its value in `i`). */
static bool signed_kv(const ckpt_kv *kv) {
    return kv->type == CKPT_KV_I8 || kv->type == CKPT_KV_I16 || kv->type == CKPT_KV_I32 || kv->type == CKPT_KV_I64;
}

/* A key-value the conversion needs, as an unsigned integer. */
static ckpt_status need_uint(hf *h, const char *suffix, uint64_t *out) {
    const ckpt_kv *kv = arch_kv(h, suffix);
    if (!kv || kv->type == CKPT_KV_STRING || kv->type == CKPT_KV_ARRAY || kv->type == CKPT_KV_F32 ||
        kv->type == CKPT_KV_F64 || kv->type == CKPT_KV_BOOL)
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, NULL, -1,
                          "key '%s.%s' %s: a Hugging Face config.json needs it", h->family->name, suffix,
                          kv ? "is not an integer" : "is missing");
    if (signed_kv(kv) && kv->i < 0)
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, NULL, -1, "key '%s.%s' is negative (%lld)",
                          h->family->name, suffix, (long long)kv->i);
    *out = kv->u;
    return CKPT_OK;
}

/* A key-value of a mixture of experts, when the file has it (0 otherwise:
 * a tensor that needs it says so). */
static ckpt_status opt_uint(hf *h, const char *suffix, uint64_t *out) {
    *out = 0;
    return arch_kv(h, suffix) ? need_uint(h, suffix, out) : CKPT_OK;
}

static ckpt_status find_family(hf *h) {
    const ckpt_kv *a = ckpt_catalog_kv_find(h->plan->catalog, "general.architecture");
    if (!a || a->type != CKPT_KV_STRING)
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, NULL, -1,
                          "key 'general.architecture' is missing: no llama.cpp model (--raw writes the tensors as "
                          "they are)");
    for (size_t f = 0; f < sizeof hf_families / sizeof *hf_families; f++)
        if (!strcmp(hf_families[f]->name, a->string)) {
            h->family = hf_families[f];
            return CKPT_OK;
        }
    char known[256] = "";
    for (size_t f = 0; f < sizeof hf_families / sizeof *hf_families; f++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", *known ? ", " : "", hf_families[f]->name);
    return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, NULL, -1,
                      "key 'general.architecture' is %s: ckpt converts %s to Hugging Face (--raw writes the tensors "
                      "as they are)",
                      a->string, known);
}

/* llama.cpp's own bounds (src/llama-hparams.h: LLAMA_MAX_LAYERS,
 * LLAMA_MAX_EXPERTS): a file past them is no model llama.cpp runs, and the
 * way back spends memory by them, whatever the file's size — a name, an
 * output tensor and an engine move per expert, config.json's layer types
 * per layer — so a few hundred bytes of key-values must not ask for
 * millions of each. */
enum { MAX_LAYERS = 512, MAX_EXPERTS = 1024 };

static ckpt_status within(hf *h, const char *suffix, uint64_t value, uint64_t most, const char *what) {
    if (value <= most) return CKPT_OK;
    return ckpt__fail(h->err, CKPT_E_LIMIT, h->path, NULL, -1, "key '%s.%s' is %llu: llama.cpp runs at most %llu %s",
                      h->family->name, suffix, (unsigned long long)value, (unsigned long long)most, what);
}

static ckpt_status read_hparams(hf *h) {
    ckpt_status st;
    if ((st = need_uint(h, "attention.head_count", &h->n_head)) || (st = need_uint(h, "embedding_length", &h->n_embd)) ||
        (st = need_uint(h, "feed_forward_length", &h->n_ff)) || (st = need_uint(h, "block_count", &h->layers)))
        return st;
    h->n_kv = h->n_head;
    if (arch_kv(h, "attention.head_count_kv") && (st = need_uint(h, "attention.head_count_kv", &h->n_kv))) return st;
    if (!h->n_head || !h->n_kv || h->n_head % h->n_kv)
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, NULL, -1,
                          "key '%s.attention.head_count_kv' (%llu) does not divide head_count (%llu)", h->family->name,
                          (unsigned long long)h->n_kv, (unsigned long long)h->n_head);
    h->head_dim = h->n_embd / h->n_head;
    if (arch_kv(h, "attention.key_length") && (st = need_uint(h, "attention.key_length", &h->head_dim))) return st;
    if ((st = opt_uint(h, "expert_count", &h->n_expert)) ||
        (st = opt_uint(h, "expert_feed_forward_length", &h->n_expert_ff)) ||
        (st = opt_uint(h, "expert_shared_feed_forward_length", &h->n_shared_ff)) ||
        (st = within(h, "block_count", h->layers, MAX_LAYERS, "layers")) ||
        (st = within(h, "expert_count", h->n_expert, MAX_EXPERTS, "experts")))
        return st;
    const ckpt_tensor_info *e = ckpt_catalog_find(h->plan->catalog, "token_embd.weight");
    if (!e || e->ndim != 2)
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, "token_embd.weight", -1,
                          "the token embeddings are missing: no %s model", h->family->name);
    h->vocab = e->shape[0];
    return CKPT_OK;
}

/* ---- tensors ------------------------------------------------------------- */

/* Whether `name` is `pattern` (one "%u" for the layer, or none). */
static bool matches(const char *pattern, const char *name, unsigned *layer) {
    const char *pct = strstr(pattern, "%u");
    if (!pct) return !strcmp(pattern, name);
    size_t head = (size_t)(pct - pattern);
    if (strncmp(name, pattern, head) != 0 || name[head] < '0' || name[head] > '9') return false;
    char *end;
    errno = 0;
    unsigned long v = strtoul(name + head, &end, 10);
    if (errno || v > 100000 || (name[head] == '0' && end != name + head + 1) || strcmp(end, pct + 2)) return false;
    *layer = (unsigned)v;
    return true;
}

/* What dimension kind `d` must be, and the key that says so (NULL: the
 * embeddings' rows, or 1).  0: a mixture of experts' key is missing. */
static uint64_t extent(const hf *h, ckpt__lc_dim d, const char **key) {
    static const char *const keys[] = {
        [CKPT__LC_HIDDEN] = "embedding_length", [CKPT__LC_FF] = "feed_forward_length",
        [CKPT__LC_Q] = "attention.head_count", [CKPT__LC_KV] = "attention.head_count_kv",
        [CKPT__LC_HEAD] = "attention.key_length", [CKPT__LC_QKV] = "attention.head_count_kv",
        [CKPT__LC_FF2] = "feed_forward_length", [CKPT__LC_EXPERTS] = "expert_count",
        [CKPT__LC_EXPERT_FF] = "expert_feed_forward_length", [CKPT__LC_SHARED_FF] = "expert_shared_feed_forward_length",
    };
    *key = keys[d];
    switch (d) {
    case CKPT__LC_VOCAB: return h->vocab;
    case CKPT__LC_HIDDEN: return h->n_embd;
    case CKPT__LC_FF: return h->n_ff;
    case CKPT__LC_Q: return h->n_head * h->head_dim;
    case CKPT__LC_KV: return h->n_kv * h->head_dim;
    case CKPT__LC_HEAD: return h->head_dim;
    case CKPT__LC_QKV: return (h->n_head + 2 * h->n_kv) * h->head_dim;
    case CKPT__LC_FF2: return 2 * h->n_ff;
    case CKPT__LC_EXPERTS: return h->n_expert;
    case CKPT__LC_EXPERT_FF: return h->n_expert_ff;
    case CKPT__LC_SHARED_FF: return h->n_shared_ff;
    case CKPT__LC_ONE: return 1;
    default: return 0;
    }
}

/* A tensor's shape, `ndim` dimensions of kinds `dims` (Hugging Face's
 * order), against the key-values. */
static ckpt_status check_shape(hf *h, const ckpt_tensor_info *t, uint32_t ndim, const ckpt__lc_dim *dims) {
    if (t->ndim != ndim)
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, t->name, -1, "%u dimensions, not %u", t->ndim,
                          ndim);
    for (uint32_t d = 0; d < t->ndim; d++) {
        const char *key = NULL;
        uint64_t want = dims[d] == CKPT__LC_ANY ? 0 : extent(h, dims[d], &key);
        bool moe = dims[d] == CKPT__LC_EXPERTS || dims[d] == CKPT__LC_EXPERT_FF || dims[d] == CKPT__LC_SHARED_FF;
        if (!want && moe)
            return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, t->name, -1,
                              "key '%s.%s' is missing: a Hugging Face mixture of experts needs it", h->family->name,
                              key);
        if (want && t->shape[d] != want && key)
            return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, t->name, -1,
                              "dimension %u is %llu, but key '%s.%s' makes it %llu", d,
                              (unsigned long long)t->shape[d], h->family->name, key, (unsigned long long)want);
        if (want && t->shape[d] != want)
            return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, t->name, -1,
                              "dimension %u is %llu, but %s makes it %llu", d, (unsigned long long)t->shape[d],
                              dims[d] == CKPT__LC_VOCAB ? "the embeddings' rows" : "the family's model",
                              (unsigned long long)want);
    }
    return CKPT_OK;
}

/* transformers' reverse_permute: rows as (heads, rows/heads/2, 2, in), the
 * middle two axes swapped — LlamaModel.permute undone. */
static ckpt_status unpermute_rows(hf *h, size_t index, const ckpt_tensor_info *t, uint64_t heads) {
    if (!heads || t->shape[0] % (2 * heads))
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, t->name, -1,
                          "%llu rows do not split into %llu heads of pairs", (unsigned long long)t->shape[0],
                          (unsigned long long)heads);
    uint64_t shape[4] = {heads, t->shape[0] / heads / 2, 2, t->shape[1]};
    static const uint32_t perm[4] = {0, 2, 1, 3};
    return ckpt__plan_view_permute(h->plan, index, 4, shape, perm, h->err);
}

/* The catalog index of the layer's stack of table row `x`, or a failure
 * naming it missing (`t`: the stack that needs it). */
static ckpt_status layer_stack(hf *h, const ckpt_tensor_info *t, const ckpt__lc_experts *x, unsigned layer,
                               size_t *index) {
    char name[256];
    snprintf(name, sizeof name, x->gguf, layer);
    const ckpt_tensor_info *s = ckpt_catalog_find(h->plan->catalog, name);
    if (!s) {
        char model[256];
        snprintf(model, sizeof model, x->model, layer);
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, t->name, -1,
                          "%s is missing: transformers' %s is made of both", name, model);
    }
    *index = ckpt__catalog_index_of(h->plan->catalog, s);
    return CKPT_OK;
}

/* A layer's stacks as transformers' model holds them (h->joined): the
 * first of its tensor's parts joined with the others along the rows
 * (ckpt__plan_join: each expert's rows of each part read into place), a
 * part after the first left to it, once the first is known to be there. */
static ckpt_status join_experts(hf *h, size_t index, const ckpt_tensor_info *t, const ckpt__lc_experts *m,
                                unsigned layer) {
    size_t parts[4], n = 0;
    ckpt_status st = CKPT_OK;
    for (const ckpt__lc_experts *x = h->family->experts; st == CKPT_OK && x->hf; x++) {
        if (!x->model || strcmp(x->model, m->model)) continue;
        if (m->model_at && x->model_at == 0) return layer_stack(h, t, x, layer, &parts[0]); /* the first joins it */
        if (x->model_at >= sizeof parts / sizeof *parts) continue; /* the tables' joins have 2 parts */
        st = layer_stack(h, t, x, layer, &parts[x->model_at]);
        n = x->model_at + 1 > n ? x->model_at + 1 : n;
    }
    if (st == CKPT_OK && n > 1) st = ckpt__plan_join(h->plan, index, n, parts, 1, h->err);
    char name[256];
    snprintf(name, sizeof name, m->model, layer);
    return st ? st : ckpt__plan_set_name(h->plan, index, name, h->err);
}

/* A layer's experts stacked by llama.cpp's conversion (3-D: experts,
 * out, in): one Hugging Face tensor per expert, each a slice of the
 * stack (ckpt__plan_unstack); in a load into transformers' model, its
 * tensors (join_experts). */
static ckpt_status plan_experts(hf *h, size_t index, const ckpt_tensor_info *t, const ckpt__lc_experts *m,
                                unsigned layer) {
    const ckpt__lc_dim dims[3] = {CKPT__LC_EXPERTS, m->dims[0], m->dims[1]};
    ckpt_status st = check_shape(h, t, 3, dims);
    if (st) return st;
    h->experts = true;
    if (h->joined && m->model) return join_experts(h, index, t, m, layer);
    if (!h->files) /* a load of Hugging Face's names gives each catalog tensor one output */
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, t->name, -1,
                          "a load does not split llama.cpp's stacked experts into Hugging Face's (ckpt convert "
                          "writes them; a load into transformers' model joins them as it holds them, "
                          "ckpt_gguf_hf_plan_joined)");
    size_t n = (size_t)t->shape[0], width = strlen(m->hf) + 2 * 20;
    char **names = ckpt__malloc(n * sizeof *names), *text = ckpt__malloc(n * width);
    if (!names || !text) st = ckpt__oom(h->err, h->path, t->name);
    for (size_t k = 0; st == CKPT_OK && k < n; k++) {
        names[k] = text + k * width;
        snprintf(names[k], width, m->hf, layer, (unsigned)k);
    }
    if (st == CKPT_OK) st = ckpt__plan_unstack(h->plan, index, n, (const char *const *)names, h->err);
    free(names);
    free(text);
    return st;
}

/* What the script added to each element (Gemma's norms: + 1) taken away,
 * in float32, the engine's elementwise rule streamed as the forward one
 * is: (w + 1) − 1 is w exactly wherever w + 1 was (a bfloat16 w of
 * magnitude 2^-16 or more; docs/FORMATS.md).  A conversion and a load
 * alike: the engine applies it as it moves the tensor. */
static ckpt_status unshift(hf *h, size_t index, const ckpt__lc_tensor *m) {
    ckpt__elementwise rule = {.add = -(double)m->add, .hold = CKPT_F32};
    return ckpt__plan_compute(h->plan, index, &rule, h->err);
}

static ckpt_status plan_tensor(hf *h, size_t index) {
    const ckpt_tensor_info *t = ckpt_catalog_tensor(h->plan->catalog, index);
    unsigned layer = 0;
    if (h->family->rope_freqs && !strcmp(t->name, "rope_freqs.weight"))
        return ckpt_plan_exclude(h->plan, "rope_freqs.weight", h->err); /* config.json's rope_parameters */
    const ckpt__lc_tensor *m = h->family->tensors;
    while (m->hf && (!m->gguf || !matches(m->gguf, t->name, &layer))) m++; /* gguf NULL: a tensor the script drops */
    const ckpt__lc_experts *x = h->family->experts;
    while (!m->hf && x && x->hf && !matches(x->gguf, t->name, &layer)) x++;
    if (!m->hf && x && x->hf) return plan_experts(h, index, t, x, layer);
    if (!m->hf)
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, t->name, -1,
                          "no Hugging Face tensor of %s is made of it", h->family->name);
    ckpt_status st = check_shape(h, t, m->ndim, m->dims);
    if (st == CKPT_OK && m->rope == CKPT__LC_PERMUTE_Q) st = unpermute_rows(h, index, t, h->n_head);
    else if (st == CKPT_OK && m->rope == CKPT__LC_PERMUTE_K) st = unpermute_rows(h, index, t, h->n_kv);
    else if (st == CKPT_OK && m->add != 0.0f) st = unshift(h, index, m);
    if (st) return st;
    char name[256];
    snprintf(name, sizeof name, m->hf, layer);
    return ckpt__plan_set_name(h->plan, index, name, h->err);
}

/* --dtype's default: the GGUF's float type (general.file_type F32, F16,
 * BF16), else bf16. */
static ckpt_dtype default_dtype(const ckpt_catalog *c) {
    const ckpt_kv *ft = ckpt_catalog_kv_find(c, "general.file_type");
    uint64_t v = ft && ft->type != CKPT_KV_STRING && ft->type != CKPT_KV_ARRAY ? ft->u : UINT64_MAX;
    return v == 0 ? CKPT_F32 : v == 1 ? CKPT_F16 : CKPT_BF16;
}

/* ---- config.json ----------------------------------------------------------- */

/* The first of `names` (NULL-terminated) among a rule's hparams ("a|b|c"), or NULL. */
static const char *name_among(const char *const *names, const char *hparams) {
    for (const char *const *n = names; names && hparams && *n; n++) {
        size_t len = strlen(*n);
        for (const char *p = hparams; (p = strstr(p, *n)); p += len)
            if ((p == hparams || p[-1] == '|') && (p[len] == '|' || !p[len])) return *n;
    }
    return NULL;
}

/* The transformers name among a rule's hparams: the family's own first
 * (num_local_experts or num_experts), else a common one; or NULL. */
static const char *config_name(const ckpt__lc_family *f, const char *hparams) {
    const char *own = name_among(f->hf_config_names, hparams);
    return own ? own : name_among(config_names, hparams);
}

static void put_key(ckpt__buf *b, const char *key) {
    ckpt__buf_puts(b, ",\n  ");
    ckpt__buf_json_string(b, key);
    ckpt__buf_puts(b, ": ");
}

/* A key-value's number as JSON: integers as they are (signed ones with
 * their sign), booleans as true and false, floats as the shortest text of
 * their f32 (with a ".0" when integral).  A NaN or an infinity has no JSON
 * spelling: the key is kept for write_config's error. */
static void put_number(hf *h, const char *key, const ckpt_kv *kv) {
    ckpt__buf *b = &h->config;
    char tmp[40];
    bool real = kv->type == CKPT_KV_F32 || kv->type == CKPT_KV_F64;
    if (real && !isfinite(kv->f) && !h->nonfinite[0]) snprintf(h->nonfinite, sizeof h->nonfinite, "%s", key);
    if (real) ckpt__shortest_float(tmp, sizeof tmp, kv->f, kv->type == CKPT_KV_F32);
    else if (kv->type == CKPT_KV_BOOL) snprintf(tmp, sizeof tmp, "%s", kv->u ? "true" : "false");
    else if (signed_kv(kv)) snprintf(tmp, sizeof tmp, "%lld", (long long)kv->i);
    else snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)kv->u);
    ckpt__buf_puts(b, tmp);
    if (real && !strpbrk(tmp, ".eEni")) ckpt__buf_puts(b, ".0"); /* a float stays one (a RoPE factor 2.0) */
}

static const char *const special_ids[][2] = {
    {"tokenizer.ggml.bos_token_id", "bos_token_id"},
    {"tokenizer.ggml.eos_token_id", "eos_token_id"},
    {"tokenizer.ggml.padding_token_id", "pad_token_id"},
};

/* The RoPE scaling convert_hf_to_gguf.py writes (TextModel: linear, and
 * yarn with its original context and tuning) under transformers' names. */
static const char *const yarn_names[][2] = {
    {"rope.scaling.original_context_length", "original_max_position_embeddings"},
    {"rope.scaling.yarn_attn_factor", "attention_factor"},
    {"rope.scaling.yarn_beta_fast", "beta_fast"},
    {"rope.scaling.yarn_beta_slow", "beta_slow"},
    {"rope.scaling.yarn_ext_factor", "extrapolation_factor"},
};

/* `suffix`: the key-value's name after the architecture's, for messages. */
static void put_member(hf *h, const char *name, const char *suffix, const ckpt_kv *kv) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", h->family->name, suffix);
    ckpt__buf_puts(&h->config, ", ");
    ckpt__buf_json_string(&h->config, name);
    ckpt__buf_puts(&h->config, ": ");
    put_number(h, key, kv);
}

static bool is_number(const ckpt_kv *kv) { return kv && kv->type != CKPT_KV_STRING && kv->type != CKPT_KV_ARRAY; }

/* A float member, spelled as a float (", \"name\": 4.0"). */
static void put_float(ckpt__buf *b, const char *name, double v, bool f32) {
    char tmp[48];
    ckpt__shortest_float(tmp, sizeof tmp, v, f32);
    ckpt__buf_puts(b, ", ");
    ckpt__buf_json_string(b, name);
    ckpt__buf_puts(b, ": ");
    ckpt__buf_puts(b, tmp);
    if (!strpbrk(tmp, ".eEni")) ckpt__buf_puts(b, ".0");
}

/* Llama 3.1's RoPE parameters, as recovered (transformers' names). */
static void put_llama3(ckpt__buf *b, const llama3_rope *r) {
    put_float(b, "factor", r->factor, true); /* the file's float32 */
    put_float(b, "low_freq_factor", r->low, false);
    put_float(b, "high_freq_factor", r->high, false);
    ckpt__buf_puts(b, ", \"original_max_position_embeddings\": ");
    ckpt__buf_u64(b, (uint64_t)r->ctx);
}

/* A rope_parameters object's members: the type, rope_theta (the
 * key-value, else llama.cpp's default where `fallback_theta`), the linear
 * or yarn scaling, Llama 3.1's recovered from rope_freqs, and the partial
 * rotary factor. */
static ckpt_status put_rope_members(hf *h, bool fallback_theta) {
    ckpt__buf *b = &h->config;
    const ckpt_kv *type = arch_kv(h, "rope.scaling.type"), *factor = arch_kv(h, "rope.scaling.factor");
    const char *name = type && type->type == CKPT_KV_STRING ? type->string : "none";
    bool scaled = strcmp(name, "none") != 0;
    bool known = !strcmp(name, "linear") || !strcmp(name, "yarn");
    if (scaled && (!known || !is_number(factor)))
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, NULL, -1,
                          "key '%s.rope.scaling.%s' is %s: ckpt carries linear and yarn RoPE scaling, with a factor, "
                          "back to Hugging Face",
                          h->family->name, known ? "factor" : "type", known ? "missing or not a number" : name);
    if (scaled && h->llama3.found)
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, "rope_freqs.weight", -1,
                          "key '%s.rope.scaling.type' (%s) and llama3's rope_freqs both scale the RoPE",
                          h->family->name, name);
    ckpt__buf_puts(b, "{\"rope_type\": ");
    ckpt__buf_json_string(b, h->llama3.found ? "llama3" : scaled ? name : "default");
    const ckpt_kv *theta = arch_kv(h, "rope.freq_base");
    if (is_number(theta)) put_member(h, "rope_theta", "rope.freq_base", theta);
    else if (fallback_theta) ckpt__buf_puts(b, ", \"rope_theta\": 10000.0"); /* llama.cpp's rope_freq_base_train */
    if (scaled) put_member(h, "factor", "rope.scaling.factor", factor);
    for (size_t k = 0; !strcmp(name, "yarn") && k < sizeof yarn_names / sizeof *yarn_names; k++) {
        const ckpt_kv *kv = arch_kv(h, yarn_names[k][0]);
        if (is_number(kv)) put_member(h, yarn_names[k][1], yarn_names[k][0], kv);
    }
    if (h->llama3.found) put_llama3(b, &h->llama3);
    const ckpt_kv *rope_dim = arch_kv(h, "rope.dimension_count");
    if (is_number(rope_dim) && h->head_dim && rope_dim->u != h->head_dim) {
        char tmp[40];
        ckpt__shortest_float(tmp, sizeof tmp, (double)rope_dim->u / (double)h->head_dim, false);
        ckpt__buf_puts(b, ", \"partial_rotary_factor\": ");
        ckpt__buf_puts(b, tmp);
    }
    ckpt__buf_puts(b, "}");
    return CKPT_OK;
}

/* architectures and model_type: the family's, or those of the family's
 * mixture of experts (llama's: Mixtral) when the file has experts. */
static void put_architecture(hf *h) {
    ckpt__buf *b = &h->config;
    const ckpt__lc_family *f = h->family;
    bool moe = h->experts && f->hf_moe_arch;
    ckpt__buf_puts(b, "{\n  \"architectures\": [");
    ckpt__buf_json_string(b, moe ? f->hf_moe_arch : f->hf_archs[0]);
    ckpt__buf_puts(b, "]");
    put_key(b, "model_type");
    ckpt__buf_json_string(b, moe ? f->hf_moe_model_type : f->hf_model_type ? f->hf_model_type : f->name);
}

/* What the family's config class reads beyond the key-values: its
 * activation, and how a mixture of experts weighs the experts it chose. */
static void put_family_constants(hf *h) {
    ckpt__buf *b = &h->config;
    if (h->family->hidden_act) {
        put_key(b, "hidden_act");
        ckpt__buf_json_string(b, h->family->hidden_act);
    }
    if (h->experts && h->family->hf_norm_topk_prob) {
        put_key(b, "norm_topk_prob");
        ckpt__buf_puts(b, h->family->hf_norm_topk_prob);
    }
}

/* RoPE as transformers 5 writes it: rope_parameters; per attention type
 * where the family's config has one for each (Gemma 3: the full layers'
 * of the file's base and scaling, the sliding ones' of
 * rope.freq_base_swa, unscaled, as llama.cpp runs them). */
static ckpt_status put_rope(hf *h) {
    const ckpt__lc_hf_config *c = h->family->hf;
    put_key(&h->config, "rope_parameters");
    if (!c || !c->rope_per_layer_type) {
        const ckpt_kv *swa = arch_kv(h, "rope.freq_base_swa"), *base = arch_kv(h, "rope.freq_base");
        if (c && is_number(swa) && (!is_number(base) || swa->f != base->f)) /* one RoPE in transformers' config */
            return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, NULL, -1,
                              "key '%s.rope.freq_base_swa': the sliding layers' RoPE base differs from the others', "
                              "which %s's Hugging Face config cannot say",
                              h->family->name, h->family->hf_model_type);
        return put_rope_members(h, c != NULL);
    }
    ckpt__buf_puts(&h->config, "{\"full_attention\": ");
    ckpt_status st = put_rope_members(h, true);
    if (st) return st;
    ckpt__buf_puts(&h->config, ", \"sliding_attention\": {\"rope_type\": \"default\"");
    const ckpt_kv *swa = arch_kv(h, "rope.freq_base_swa");
    if (is_number(swa)) put_member(h, "rope_theta", "rope.freq_base_swa", swa);
    else ckpt__buf_puts(&h->config, ", \"rope_theta\": 10000.0"); /* llama.cpp's rope_freq_base_train_swa */
    ckpt__buf_puts(&h->config, "}}");
    return CKPT_OK;
}

/* ---- Llama 3.1's RoPE, back from rope_freqs ------------------------------- */

/*
 * LlamaModel computes rope_freqs from four parameters; the factors depend
 * on the wavelengths ctx / low and ctx / high alone (transformers'
 * _compute_llama3_parameters too), so the three are known up to a common
 * scale: the smooth ramp's factors give its line, s(x) = (ctx·x − low) /
 * (high − low) over x = 1 / wavelength, and where that line crosses 0 and
 * 1 the two wavelengths.  Of the parameters that make them ckpt writes
 * the first that reproduce the file's tensor bit for bit: low_freq_factor
 * 1 (Llama 3.1's; then 2, 0.5, 4, 0.25, 3, 1.5, 8), the context rounded to
 * an integer, high_freq_factor of the fewest digits; none does: refused.
 */

/* The wavelength LlamaModel gives pair i (float32, as it computes it). */
static double rope_wavelength(double base, uint64_t dim, uint64_t i) {
    float freq = 1.0f / powf((float)base, (float)(2 * i) / (float)dim);
    return (double)((1.0f / freq) * (float)(2 * M_PI));
}

/* The wavelengths where the ramp's line of `f` crosses 0 (low) and 1
 * (high), from its first and last entries strictly between 1 and factor;
 * false when it has fewer than two. */
static bool ramp_wavelengths(const float *f, uint64_t n, double base, uint64_t dim, double factor, double *low_wl,
                             double *high_wl) {
    uint64_t first = n, last = n;
    for (uint64_t i = 0; i < n; i++)
        if (f[i] != 1.0f && (double)f[i] != factor) {
            if (first == n) first = i;
            last = i;
        }
    if (first == n || first == last) return false;
    double x1 = 1.0 / rope_wavelength(base, dim, first), x2 = 1.0 / rope_wavelength(base, dim, last);
    double s1 = (1.0 / f[first] - 1.0 / factor) / (1.0 - 1.0 / factor);
    double s2 = (1.0 / f[last] - 1.0 / factor) / (1.0 - 1.0 / factor);
    double slope = (s2 - s1) / (x2 - x1);
    if (!(slope > 0.0)) return false;
    *low_wl = 1.0 / (x1 - s1 / slope);
    *high_wl = 1.0 / (x1 + (1.0 - s1) / slope);
    return isfinite(*low_wl) && isfinite(*high_wl) && *low_wl > *high_wl && *high_wl > 0.0;
}

/* `v` to `digits` significant decimal digits. */
static double round_digits(double v, int digits) {
    char tmp[40];
    snprintf(tmp, sizeof tmp, "%.*g", digits, v);
    return strtod(tmp, NULL);
}

/* Whether the parameters make exactly the file's factors. */
static bool rope_freqs_equal(const float *want, float *scratch, uint64_t n, uint64_t dim, double base,
                             const llama3_rope *r) {
    ckpt__lc_llama3_rope_freqs(scratch, n, dim, base, r->factor, r->low, r->high, r->ctx);
    return memcmp(scratch, want, n * sizeof *want) == 0;
}

static bool recover_llama3(const float *f, float *scratch, uint64_t n, uint64_t dim, double base, llama3_rope *out) {
    static const double lows[] = {1.0, 2.0, 0.5, 4.0, 0.25, 3.0, 1.5, 8.0};
    double factor = 1.0, low_wl, high_wl;
    for (uint64_t i = 0; i < n; i++)
        if (f[i] > factor) factor = f[i];
    if (!(factor > 1.0) || !isfinite(factor)) return false;
    llama3_rope r = {.found = true, .factor = factor};
    if (!ramp_wavelengths(f, n, base, dim, factor, &low_wl, &high_wl)) {
        r.low = 1.0, r.high = 4.0, r.ctx = 8192.0; /* no ramp to read: Llama 3.1's, if they make it */
        if (!rope_freqs_equal(f, scratch, n, dim, base, &r)) return false;
        *out = r;
        return true;
    }
    for (size_t k = 0; k < sizeof lows / sizeof *lows; k++) {
        r.low = lows[k];
        r.ctx = nearbyint(r.low * low_wl);
        if (r.ctx < 1.0 || r.ctx > 1e12) continue;
        for (int digits = 1; digits <= 9; digits++) {
            r.high = round_digits(r.ctx / high_wl, digits);
            if (r.high > r.low && rope_freqs_equal(f, scratch, n, dim, base, &r)) {
                *out = r;
                return true;
            }
        }
    }
    return false;
}

/* rope_freqs.weight, when the family makes it: its parameters for
 * config.json, or refused naming it. */
static ckpt_status read_llama3_rope(hf *h) {
    static const char name[] = "rope_freqs.weight";
    const ckpt_tensor_info *t = h->family->rope_freqs ? ckpt_catalog_find(h->plan->catalog, name) : NULL;
    if (!t) return CKPT_OK;
    const ckpt_kv *rope_dim = arch_kv(h, "rope.dimension_count"), *theta = arch_kv(h, "rope.freq_base");
    uint64_t dim = is_number(rope_dim) ? rope_dim->u : h->head_dim, n = (dim + 1) / 2;
    double base = is_number(theta) ? (theta->type == CKPT_KV_F32 || theta->type == CKPT_KV_F64 ? theta->f
                                                                                                : (double)theta->u)
                                   : 10000.0;
    if (t->dtype != CKPT_F32 || t->ndim != 1 || t->shape[0] != n || !n || n > (1u << 20))
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, name, -1,
                          "not %llu float32 factors, one per pair of the RoPE's %llu dimensions (llama3's RoPE)",
                          (unsigned long long)n, (unsigned long long)dim);
    float *f = ckpt__malloc(2 * n * sizeof *f);
    if (!f) return ckpt__oom(h->err, h->path, name);
    ckpt_status st = ckpt_catalog_read(h->plan->catalog, t, 0, f, n * sizeof *f, h->err);
    if (st == CKPT_OK && !recover_llama3(f, f + n, n, dim, base, &h->llama3))
        st = ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, name, -1,
                        "no llama3 RoPE parameters (factor, low_freq_factor, high_freq_factor, "
                        "original_max_position_embeddings) make these factors: ckpt carries Llama 3.1's RoPE back "
                        "only where it recomputes the tensor exactly");
    free(f);
    return st;
}

/* ---- the family's own config.json keys -------------------------------------- */

/* Which layers slide: the file's attention.sliding_window_pattern (one
 * bool a layer, or a period n), else the family's period; none where
 * the file has no sliding window and the family slides only with one
 * (Gemma 3 with every layer global). */
static ckpt_status put_layer_types(hf *h, const ckpt__lc_hf_config *c) {
    const ckpt_kv *pattern = arch_kv(h, "attention.sliding_window_pattern"), *window = arch_kv(h, "attention.sliding_window");
    uint64_t period = c->swa_pattern;
    const unsigned char *each = NULL;
    if (pattern && pattern->type == CKPT_KV_ARRAY && pattern->element_type == CKPT_KV_BOOL && pattern->count == h->layers)
        each = pattern->data;
    else if (is_number(pattern) && pattern->type != CKPT_KV_F32 && pattern->type != CKPT_KV_F64)
        period = pattern->u;
    else if (pattern)
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, NULL, -1,
                          "key '%s.attention.sliding_window_pattern' is neither a period nor one bool a layer (%llu)",
                          h->family->name, (unsigned long long)h->layers);
    bool sliding = c->rope_per_layer_type ? is_number(window) && window->u > 0 : true; /* gemma3.cpp; gemma2.cpp always */
    put_key(&h->config, "layer_types");
    ckpt__buf_puts(&h->config, "[");
    for (uint64_t il = 0; il < h->layers; il++) { /* llama_hparams::set_swa_pattern */
        bool swa = sliding && (each ? each[il] != 0 : period == 0 || il % period < period - 1);
        ckpt__buf_puts(&h->config, il ? ", " : "");
        ckpt__buf_puts(&h->config, swa ? "\"sliding_attention\"" : "\"full_attention\"");
    }
    ckpt__buf_puts(&h->config, "]");
    return CKPT_OK;
}

/* What a family's transformers config holds beyond the key-values: the
 * family's constants, and what llama.cpp assumes where the GGUF is silent
 * (ckpt__lc_hf_config: Gemma's activation, query scale, layer types). */
static ckpt_status put_family_keys(hf *h) {
    const ckpt__lc_hf_config *c = h->family->hf;
    ckpt__buf *b = &h->config;
    put_family_constants(h);
    if (!c) return CKPT_OK;
    put_key(b, "hidden_activation");
    ckpt__buf_json_string(b, c->activation);
    put_key(b, "query_pre_attn_scalar");
    ckpt__buf_u64(b, h->layers == c->wide_query_layers ? h->n_embd / h->n_head : h->head_dim);
    /* the soft-caps came with the key-values; absent, llama.cpp's defaults
     * are transformers' (Gemma 2: 50 and 30; Gemma 3: none) */
    return put_layer_types(h, c);
}

static ckpt_status write_config(hf *h, ckpt_dtype dtype, bool tied) {
    ckpt__buf *b = &h->config;
    ckpt_status st;
    const ckpt_catalog *c = h->plan->catalog;
    put_architecture(h);
    /* the family's key-values, each name once; head_dim, the KV heads and
     * vocab_size from what the model is (the embeddings' rows) */
    const char *written[64];
    size_t nwritten = 0;
    for (const ckpt__lc_kv *r = h->family->kvs; r->key; r++) {
        const char *name = config_name(h->family, r->hparams);
        char key[160];
        snprintf(key, sizeof key, r->key, h->family->name);
        const ckpt_kv *kv = ckpt_catalog_kv_find(c, key);
        bool seen = false;
        for (size_t n = 0; name && n < nwritten; n++) seen |= !strcmp(written[n], name);
        if (!name || seen || nwritten == sizeof written / sizeof *written || !kv || kv->type == CKPT_KV_STRING ||
            kv->type == CKPT_KV_ARRAY || !strcmp(name, "head_dim") || !strcmp(name, "num_key_value_heads") ||
            !strcmp(name, "vocab_size"))
            continue;
        written[nwritten++] = name;
        put_key(b, name);
        put_number(h, key, kv);
    }
    char tmp[40];
    const char *const derived[3] = {"head_dim", "num_key_value_heads", "vocab_size"};
    const uint64_t values[3] = {h->head_dim, h->n_kv, h->vocab};
    for (int k = 0; k < 3; k++) {
        put_key(b, derived[k]);
        snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)values[k]);
        ckpt__buf_puts(b, tmp);
    }
    if ((st = read_llama3_rope(h)) || (st = put_rope(h))) return st;
    for (size_t i = 0; i < sizeof special_ids / sizeof *special_ids; i++) {
        const ckpt_kv *kv = ckpt_catalog_kv_find(c, special_ids[i][0]);
        if (!kv || kv->type == CKPT_KV_STRING || kv->type == CKPT_KV_ARRAY) continue;
        put_key(b, special_ids[i][1]);
        put_number(h, special_ids[i][0], kv);
    }
    put_key(b, "tie_word_embeddings");
    ckpt__buf_puts(b, tied ? "true" : "false");
    if ((st = put_family_keys(h))) return st;
    put_key(b, "dtype");
    ckpt__buf_json_string(b, dtype == CKPT_F32 ? "float32" : dtype == CKPT_F16 ? "float16" : "bfloat16");
    ckpt__buf_puts(b, "\n}\n");
    if (h->nonfinite[0])
        return ckpt__fail(h->err, CKPT_E_INVALID_ARGUMENT, h->path, NULL, -1,
                          "key '%s' is not a finite number: config.json cannot hold it", h->nonfinite);
    return b->failed ? ckpt__oom(h->err, h->path, "config.json") : CKPT_OK;
}

/* ---- the plan -------------------------------------------------------------- */

/* `files`: config.json and the tokenizer's files too (a conversion), or
 * the tensors alone (a load); with `config`, the conversion's config.json
 * handed out in *config (malloc'ed) instead, and no tokenizer. */
static ckpt_status hf_plan(ckpt_plan *plan, ckpt_dtype dtype, bool files, bool joined, char **config,
                           ckpt_error *err) {
    if (!plan) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "no plan");
    const ckpt_catalog *c = plan->catalog;
    hf h = {.plan = plan, .path = ckpt_catalog_file_path(c, 0), .err = err, .files = files, .joined = joined};
    if (ckpt_catalog_format(c) != CKPT_FORMAT_GGUF)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, h.path, NULL, -1, "not a GGUF file");
    if (dtype == CKPT_DTYPE_INVALID) dtype = default_dtype(c);
    if (dtype != CKPT_F32 && dtype != CKPT_F16 && dtype != CKPT_BF16)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, h.path, NULL, -1,
                          "a Hugging Face model's dtype is f32, f16 or bf16, not %s", ckpt_dtype_name(dtype));
    plan->metadata_mapped = true; /* the key-values become config.json and the tokenizer's files, or nothing */
    ckpt_status st = find_family(&h);
    if (st == CKPT_OK) st = read_hparams(&h);
    for (size_t i = 0; st == CKPT_OK && i < ckpt_catalog_tensor_count(c); i++) st = plan_tensor(&h, i);
    if (st == CKPT_OK) st = ckpt_plan_cast(plan, "*", dtype, err); /* every tensor: one dtype, as config.json says */
    if (files && st == CKPT_OK) st = write_config(&h, dtype, !ckpt_catalog_find(c, "output.weight"));
    if (config && st == CKPT_OK) {
        *config = h.config.data;
        return CKPT_OK;
    }
    if (files && st == CKPT_OK) st = ckpt__plan_add_file(plan, "config.json", h.config.data, h.config.len, err);
    if (files && st == CKPT_OK) st = ckpt__lc_hf_tokenizer(plan, h.family, err);
    free(h.config.data);
    return st;
}

ckpt_status ckpt_gguf_hf_plan(ckpt_plan *plan, ckpt_dtype dtype, ckpt_error *err) {
    return hf_plan(plan, dtype, true, false, NULL, err);
}

ckpt_status ckpt_gguf_hf_plan_tensors(ckpt_plan *plan, ckpt_dtype dtype, ckpt_error *err) {
    return hf_plan(plan, dtype, false, false, NULL, err);
}

ckpt_status ckpt_gguf_hf_plan_joined(ckpt_plan *plan, ckpt_dtype dtype, ckpt_error *err) {
    return hf_plan(plan, dtype, false, true, NULL, err);
}

ckpt_status ckpt_gguf_hf_config(ckpt_catalog *catalog, ckpt_dtype dtype, char **json, ckpt_error *err) {
    if (!json) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "json is required");
    *json = NULL;
    ckpt_plan *plan; /* the conversion's pass over the tensors, in a plan of its own */
    ckpt_status st = ckpt_plan_create(catalog, &plan, err);
    if (st == CKPT_OK) st = hf_plan(plan, dtype, true, false, json, err);
    ckpt_plan_free(plan);
    return st;
}
