/* quant_mix.c — llama-quantize's per-tensor mixes, as llama.cpp's
 * src/llama-quant.cpp chooses them (llama_tensor_get_type and what it
 * calls) for an f32 GGUF, no importance matrix, no overrides.  Only the
 * branches of the file types ckpt writes are kept; the comments name the
 * functions of llama-quant.cpp each part follows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant_mix.h"

/* llama_ftype numbers (llama.h). */
enum { FT_Q4_K_S = 14, FT_Q4_K_M = 15, FT_Q5_K_S = 16, FT_Q5_K_M = 17, FT_Q6_K = 18 };

unsigned ckpt__lc_mix_from_name(const char *name) {
    static const struct { const char *name; unsigned ftype; } mixes[] = {
        {"q4_k_s", FT_Q4_K_S}, {"q4_k_m", FT_Q4_K_M}, {"q5_k_s", FT_Q5_K_S}, {"q5_k_m", FT_Q5_K_M}, {"q6_k", FT_Q6_K},
    };
    for (size_t i = 0; name && i < sizeof mixes / sizeof *mixes; i++)
        if (!strcasecmp(name, mixes[i].name)) return mixes[i].ftype;
    return 0;
}

/* llama_ftype_get_default_type */
static ckpt_dtype default_type(unsigned ftype) {
    return ftype == FT_Q6_K ? CKPT_Q6_K : ftype == FT_Q5_K_S || ftype == FT_Q5_K_M ? CKPT_Q5_K : CKPT_Q4_K;
}

/* tensor_category, as tensor_get_category finds it from the name. */
typedef enum { TOKEN_EMBD, ATTN_Q, ATTN_V, ATTN_K, ATTN_QKV, ATTN_KV_B, ATTN_OUTPUT, FFN_UP, FFN_GATE, FFN_DOWN,
               OUTPUT, OTHER } category;

static category category_of(const char *name) {
    static const struct { const char *part; category cat; } parts[] = {
        {"attn_qkv.weight", ATTN_QKV},    {"attn_kv_b.weight", ATTN_KV_B}, {"attn_v.weight", ATTN_V},
        {"attn_k.weight", ATTN_K},        {"attn_q.weight", ATTN_Q},       {"attn_output.weight", ATTN_OUTPUT},
        {"ffn_up", FFN_UP},               {"ffn_gate", FFN_GATE},          {"ffn_down", FFN_DOWN},
    };
    if (!strcmp(name, "output.weight")) return OUTPUT;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight")) return TOKEN_EMBD;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        if (strstr(name, parts[i].part)) return parts[i].cat;
    return OTHER;
}

static bool is_attn_v(category c) { return c == ATTN_V || c == ATTN_QKV || c == ATTN_KV_B; }

/* tensor_allows_quantization, for what any architecture shares (the
 * architecture-specific names belong to models ckpt does not convert):
 * matrices named *weight, not norms, routers, positional embeddings or the
 * small tensors llama.cpp keeps as they are. */
static bool allows_quantization(const ckpt__lc_mix_tensor *t) {
    static const char *const kept[] = {
        "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
        "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
        "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
        "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd",
        "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
        "mm.a.code_embd",
    };
    size_t n = strlen(t->name);
    if (t->ndim < 2 || n < 6 || strcmp(t->name + n - 6, "weight")) return false;
    if (!strcmp(t->name, "position_embd.weight") || !strcmp(t->name, "token_types.weight")) return false;
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++)
        if (strstr(t->name, kept[i])) return false;
    return true;
}

/* The layer of "blk.N." (weight_name_comparer's sscanf), or -1. */
static int layer_of(const char *name) {
    int layer = -1;
    sscanf(name, "blk.%d.", &layer);
    return layer;
}

/* llama_model_loader's weights_map order. */
static int weights_order(const void *a, const void *b) {
    const ckpt__lc_mix_tensor *x = a, *y = b;
    int lx = layer_of(x->name), ly = layer_of(y->name);
    if (lx != ly) return lx < ly ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* llama.cpp's LLM_TYPE_70B, which moves attn_v up a type: the
 * architectures' load_arch_hparams give it to 80-layer models. */
static bool is_70b(const ckpt__lc_mix_model *m) {
    if (m->n_layer != 80) return false;
    if (!strcmp(m->arch, "llama")) return m->n_expert != 8 && m->n_head != m->n_head_kv;
    return !strcmp(m->arch, "qwen2");
}

static bool use_more_bits(int64_t i_layer, int64_t n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

/* The counters llama-quantize keeps while it walks the tensors. */
typedef struct mix_state {
    unsigned ftype;
    const ckpt__lc_mix_model *model;
    const char *path;
    ckpt_error *err;
    int64_t n_attention_wv, i_attention_wv, i_ffn_down, i_ffn_gate, i_ffn_up;
    bool tied; /* no output.weight: token_embd is the output too */
} mix_state;

/* layer_info: an expert model's ffn layer from the name, else the count. */
static ckpt_status ffn_layer(mix_state *s, const char *name, int64_t counter, int64_t *layer) {
    *layer = counter;
    if (s->model->n_expert <= 1) return CKPT_OK;
    int l;
    if (sscanf(name, "blk.%d.", &l) != 1)
        return ckpt__fail(s->err, CKPT_E_INVALID_ARGUMENT, s->path, name, -1,
                          "llama-quantize finds no layer in this expert model's tensor name");
    if (l < 0 || (uint64_t)l >= s->model->n_layer)
        return ckpt__fail(s->err, CKPT_E_INVALID_ARGUMENT, s->path, name, -1,
                          "layer %d is not below the model's %llu layers", l, (unsigned long long)s->model->n_layer);
    *layer = l;
    return CKPT_OK;
}

/* The output matrix (and a tied token_embd): Q6_K, or Q8_0 when its rows
 * are not whole blocks of the default type. */
static ckpt_dtype output_type(const ckpt__lc_mix_tensor *t, ckpt_dtype type) {
    if (t->row % ckpt_dtype_block_elems(type)) return CKPT_Q8_0;
    return type != CKPT_Q8_0 ? CKPT_Q6_K : type;
}

static ckpt_dtype attn_v_type(mix_state *s, ckpt_dtype type) {
    bool m_mix = s->ftype == FT_Q4_K_M || s->ftype == FT_Q5_K_M;
    if (m_mix && use_more_bits(s->i_attention_wv, s->n_attention_wv)) type = CKPT_Q6_K;
    else if (s->ftype == FT_Q4_K_S && s->i_attention_wv < 4) type = CKPT_Q5_K;
    if (is_70b(s->model) && type == CKPT_Q4_K) type = CKPT_Q5_K;
    if (s->model->n_expert == 8) type = CKPT_Q8_0;
    s->i_attention_wv++;
    return type;
}

static ckpt_status ffn_down_type(mix_state *s, const char *name, ckpt_dtype *type) {
    int64_t i_layer, n_layer = (int64_t)s->model->n_layer;
    ckpt_status st = ffn_layer(s, name, s->i_ffn_down, &i_layer);
    if (st) return st;
    if ((s->ftype == FT_Q4_K_M || s->ftype == FT_Q5_K_M) && use_more_bits(i_layer, n_layer)) *type = CKPT_Q6_K;
    else if (s->ftype == FT_Q4_K_S && i_layer < n_layer / 8) *type = CKPT_Q5_K;
    s->i_ffn_down++;
    return CKPT_OK;
}

/* llama_tensor_get_type_impl */
static ckpt_status mixed_type(mix_state *s, const ckpt__lc_mix_tensor *t, category cat, ckpt_dtype *type) {
    int64_t layer;
    ckpt_status st = CKPT_OK;
    if (cat == OUTPUT || (s->tied && cat == TOKEN_EMBD)) *type = output_type(t, *type);
    else if (is_attn_v(cat)) *type = attn_v_type(s, *type);
    else if (cat == ATTN_K && s->model->n_expert == 8) *type = CKPT_Q8_0;
    else if (cat == FFN_DOWN) st = ffn_down_type(s, t->name, type);
    else if (cat == ATTN_OUTPUT && s->model->n_expert == 8 && (s->ftype == FT_Q4_K_S || s->ftype == FT_Q4_K_M))
        *type = CKPT_Q5_K;
    else if (cat == FFN_GATE && !(st = ffn_layer(s, t->name, s->i_ffn_gate, &layer))) s->i_ffn_gate++;
    else if (cat == FFN_UP && !(st = ffn_layer(s, t->name, s->i_ffn_up, &layer))) s->i_ffn_up++;
    return st;
}

/* tensor_type_fallback: rows that are not whole blocks of the chosen type
 * take a 32-element type, or F16 when not even those fit. */
static ckpt_dtype fallback(const ckpt__lc_mix_tensor *t, ckpt_dtype type) {
    if (t->row % ckpt_dtype_block_elems(type) == 0) return type;
    ckpt_dtype to = type == CKPT_Q4_K ? CKPT_Q5_0 : type == CKPT_Q5_K ? CKPT_Q5_1 : type == CKPT_Q6_K ? CKPT_Q8_0 : type;
    return t->row % ckpt_dtype_block_elems(to) ? CKPT_F16 : to;
}

ckpt_status ckpt__lc_mix_choose(unsigned ftype, const ckpt__lc_mix_model *model, ckpt__lc_mix_tensor *t, size_t n,
                                const char *path, ckpt_error *err) {
    mix_state s = {.ftype = ftype, .model = model, .path = path, .err = err, .tied = true};
    if (n) qsort(t, n, sizeof *t, weights_order);
    for (size_t i = 0; i < n; i++) { /* init_quantize_state_counters */
        category cat = category_of(t[i].name);
        if (is_attn_v(cat)) s.n_attention_wv++;
        if (cat == OUTPUT) s.tied = false;
    }
    for (size_t i = 0; i < n; i++) {
        t[i].out = t[i].in;
        if (!allows_quantization(&t[i])) continue;
        ckpt_dtype type = default_type(ftype);
        ckpt_status st = mixed_type(&s, &t[i], category_of(t[i].name), &type);
        if (st) return st;
        t[i].out = fallback(&t[i], type);
    }
    return CKPT_OK;
}
