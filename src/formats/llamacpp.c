/*
 * llamacpp.c — a Hugging Face model directory converted into the GGUF file
 * llama.cpp runs, as convert_hf_to_gguf.py converts it: the plan's tensors
 * get llama.cpp's names, dtypes and Q/K row order (the engine streams them:
 * nothing is held whole), and the key-values — general.*, the
 * architecture's hyper-parameters from config.json, the tokenizer from
 * tokenizer.json and tokenizer_config.json — go with the plan in GGUF's
 * encoding (ckpt__plan_add_kv), in the order the script adds them:
 * tokenizer.json (Llama 3's: 17 MB) is read through a window, its
 * vocabulary and merges encoded as they stream by, so that neither a node
 * tree of the file nor a JSON text of its tokens is ever made.  What is a
 * family's own is data (llamacpp/<family>.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../catalog_internal.h"
#include "../plan_internal.h"
#include "../base/cursor.h"
#include "../base/json.h"
#include "../io/beneath.h"
#include "../io/file.h"
#include "ckpt_gguf.h"
#include "gguf.h"
#include "llamacpp/arch.h"
#include "llamacpp/gemma.h"
#include "llamacpp/llama.h"
#include "llamacpp/phi3.h"
#include "llamacpp/qwen.h"
#include "llamacpp/quant_mix.h"

static const ckpt__lc_family *const families[] = {&ckpt__lc_llama,    &ckpt__lc_qwen2,    &ckpt__lc_qwen3,
                                                  &ckpt__lc_qwen2moe, &ckpt__lc_qwen3moe, &ckpt__lc_phi3,
                                                  &ckpt__lc_gemma2,   &ckpt__lc_gemma3};

/* Larger JSON files are not a model's configuration or tokenizer. */
#define LC_MAX_JSON_BYTES (256u << 20)

/* A JSON file of the model directory, parsed. */
typedef struct lc_json {
    const char *name;
    char *path, *text;
    ckpt__json_doc doc;
    ckpt__arena strings; /* the tree's strings, when it was read streaming */
    bool present;
} lc_json;

typedef struct lc {
    ckpt_plan *plan;
    const char *dir;
    ckpt__beneath *root;
    ckpt_error *err;
    lc_json config, tokenizer, tok_config;
    const ckpt__lc_family *family;
    ckpt_dtype dtype;     /* the output's: F32, F16, BF16 or Q8_0 (F32 under a mix) */
    unsigned mix;         /* llama-quantize's file type of a mix (quant_mix.h), or 0 */
    /* the key-values, in order: each in GGUF's encoding (type and payload,
     * malloc'ed), handed to the plan when the conversion is made */
    char **kv_keys;
    ckpt__encoded *kvs;
    size_t kv_count, kv_cap;
    ckpt_status kv_failed; /* the first key-value that could not be encoded */
    bool kvs_handed;
    ckpt__buf text;       /* scratch: a small key-value's typed JSON */
    /* tokenizer.json's vocabulary and merges, read as the file streams by
     * (c->tokenizer's node tree holds the rest): each id's token, the merges
     * encoded; the first error of each, reported after the file's own */
    struct token_slot *slots;
    ckpt__arena vocab_text;
    ckpt__buf merges;
    uint64_t merge_count;
    bool vocab_read, merges_read;
    ckpt_error vocab_err, merges_err;
    ckpt_status vocab_st, merges_st;
    /* config.json's hyper-parameters the tensors' shapes follow */
    uint64_t vocab, hidden, ff, n_head, n_kv, head_dim;
    bool has_ff, has_kv, head_dim_derived;
    /* a mixture of experts: the expert count (0: none declared) and widths;
     * the catalog index of each expert tensor by layer, row of the
     * family's experts table and expert (SIZE_MAX: not found), for
     * `layers` layers; the parameters the script counts */
    uint64_t n_experts, expert_ff, shared_ff, layers;
    char experts_key[32];
    bool has_expert_ff, has_shared_ff;
    size_t *expert_at, expert_rows;
    uint64_t shared_params, expert_params;
} lc;

/* ---- files --------------------------------------------------------------- */

/* A file of the model directory, whole, NUL-terminated, in *text (left
 * NULL when the file is absent). */
static ckpt_status read_file(lc *c, const char *path, const char *name, char **text, uint64_t *size) {
    *text = NULL;
    if (!ckpt__beneath_has(c->root, name)) return CKPT_OK;
    int fd = -1;
    ckpt_status st = ckpt__beneath_open(c->root, path, false, &fd, size, c->err);
    if (st) return st;
    if (*size > LC_MAX_JSON_BYTES) st = ckpt__fail(c->err, CKPT_E_LIMIT, path, NULL, -1, "%llu bytes is too large "
                                                   "for a model's configuration file", (unsigned long long)*size);
    if (!st && !(*text = ckpt__malloc(*size + 1))) st = ckpt__oom(c->err, path, NULL);
    if (!st) st = ckpt__pread_full(fd, *text, *size, 0, path, c->err);
    close(fd);
    if (!st) (*text)[*size] = '\0';
    return st;
}

static ckpt_status read_json(lc *c, lc_json *f, const char *name, bool required) {
    f->name = name;
    if (!(f->path = ckpt__path_join(c->dir, name))) return ckpt__oom(c->err, c->dir, NULL);
    if (!ckpt__beneath_has(c->root, name)) {
        if (!required) return CKPT_OK;
        return ckpt__fail(c->err, CKPT_E_NOT_FOUND, f->path, NULL, -1,
                          "llama.cpp's conversion needs %s beside the weights", name);
    }
    uint64_t size = 0;
    ckpt_status st = read_file(c, f->path, name, &f->text, &size);
    if (st) return st;
    size_t at;
    const char *why;
    st = ckpt__json_parse(f->text, size, &f->doc, &at, &why);
    if (st == CKPT_E_NO_MEMORY) return ckpt__oom(c->err, f->path, NULL);
    if (st) return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, f->path, NULL, (int64_t)at, "not JSON: %s", why);
    if (f->doc.nodes[0].kind != CKPT__JSON_OBJECT)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, f->path, NULL, 0, "not a JSON object");
    f->present = true;
    return CKPT_OK;
}

static void free_json(lc_json *f) {
    ckpt__json_free(&f->doc);
    ckpt__arena_free(&f->strings);
    free(f->text);
    free(f->path);
}

/* The last component of a directory's path (trailing '/' ignored): its
 * start, and its length in *n. */
static const char *dir_base(const char *dir, size_t *n) {
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    const char *base = dir + len;
    while (base > dir && base[-1] != '/') base--;
    *n = (size_t)(dir + len - base);
    return base;
}

/* Member `key` of object node i of a file, or NULL. */
static const ckpt__json_node *member(const lc_json *f, uint32_t i, const char *key) {
    if (!f->present || f->doc.nodes[i].kind != CKPT__JSON_OBJECT) return NULL;
    uint32_t v = ckpt__json_member(&f->doc, i, key);
    return v ? &f->doc.nodes[v] : NULL;
}

/* A node's byte offset for an error, or -1 without one. */
static int64_t at(const ckpt__json_node *n) { return n ? (int64_t)n->offset : -1; }

static uint32_t node_index(const lc_json *f, const ckpt__json_node *n) { return (uint32_t)(n - f->doc.nodes); }

/* config.json's first hyper-parameter of "a|b|c" that is present (not
 * null), with its name in *found. */
static const ckpt__json_node *hparam(const lc *c, const char *names, char *found, size_t cap) {
    for (const char *p = names; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n < cap) {
            memcpy(found, p, n);
            found[n] = '\0';
            const ckpt__json_node *v = member(&c->config, 0, found);
            if (v && v->kind != CKPT__JSON_NULL) return v;
        }
        p = bar ? bar + 1 : NULL;
    }
    return NULL;
}

static ckpt_status config_u64(lc *c, const char *name, const ckpt__json_node *v, uint64_t *out) {
    if (ckpt__json_u64(v, out) && *out <= UINT32_MAX) return CKPT_OK;
    return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, NULL, v->offset,
                      "%s must be a whole number below 2^32", name);
}

/* ---- key-values ---------------------------------------------------------- */

/* Key-value `key` whose value is `bytes` (GGUF's encoding, malloc'ed:
 * taken over, NULL when out of memory) next. */
static void kv_add(lc *c, const char *key, unsigned char *bytes, size_t len) {
    if (!bytes) {
        if (!c->kv_failed) c->kv_failed = ckpt__oom(c->err, c->dir, key);
        return;
    }
    if (c->kv_count == c->kv_cap) {
        size_t cap = c->kv_cap ? 2 * c->kv_cap : 64;
        char **k = ckpt__realloc(c->kv_keys, cap * sizeof *k);
        if (k) c->kv_keys = k;
        ckpt__encoded *v = k ? ckpt__realloc(c->kvs, cap * sizeof *v) : NULL;
        if (v) c->kvs = v, c->kv_cap = cap;
    }
    char *k = c->kv_count < c->kv_cap ? ckpt__strdup(key) : NULL;
    if (!k) {
        free(bytes);
        if (!c->kv_failed) c->kv_failed = ckpt__oom(c->err, c->dir, key);
        return;
    }
    c->kv_keys[c->kv_count] = k;
    c->kvs[c->kv_count++] = (ckpt__encoded){ckpt__gguf_encoding, bytes, len, ckpt__gguf_kv_json};
}

/* A buffer's bytes as the next key-value's (the buffer emptied). */
static void kv_add_buf(lc *c, const char *key, ckpt__buf *b) {
    if (b->failed) free(b->data), b->data = NULL;
    kv_add(c, key, (unsigned char *)b->data, b->len);
    *b = (ckpt__buf){0};
}

/* The typed JSON in c->text as key-value `key`, encoded as GGUF output
 * encodes a caller's typed JSON. */
static void kv_typed_text(lc *c, const char *key) {
    ckpt__buf enc = {0};
    char why[256] = "";
    ckpt_status st = c->text.failed ? CKPT_E_NO_MEMORY : ckpt__gguf_encode_kv(&enc, key, c->text.data, why, sizeof why);
    c->text.len = 0;
    if (st && st != CKPT_E_NO_MEMORY) {
        free(enc.data);
        if (!c->kv_failed) c->kv_failed = ckpt__fail(c->err, st, c->dir, NULL, -1, "metadata '%s': %s", key, why);
        return;
    }
    size_t skip = 8 + strlen(key); /* the key, which the pairs hold */
    unsigned char *bytes = !st && !enc.failed && enc.len > skip ? ckpt__malloc(enc.len - skip) : NULL;
    if (bytes) memcpy(bytes, enc.data + skip, enc.len - skip);
    free(enc.data);
    kv_add(c, key, bytes, enc.len - skip);
}

static void kv_scalar(lc *c, const char *key, const char *type, const char *value) {
    ckpt__buf_puts(&c->text, "{\"gguf_type\": \"");
    ckpt__buf_puts(&c->text, type);
    ckpt__buf_puts(&c->text, "\", \"value\": ");
    ckpt__buf_puts(&c->text, value);
    ckpt__buf_puts(&c->text, "}");
    kv_typed_text(c, key);
}

/* Number `v` of config.json (its `name`) as an f32 key-value, as it is
 * spelled there (GGUF output reads it as Python's json does, then narrows
 * it to the type); anything else refused. */
static ckpt_status kv_f32(lc *c, const char *key, const char *name, const ckpt__json_node *v) {
    if (v->kind != CKPT__JSON_NUMBER)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, name, v->offset, "not a number");
    ckpt__buf text = {0};
    ckpt__buf_append(&text, v->str, v->len);
    kv_scalar(c, key, "f32", text.data ? text.data : "0");
    if (text.failed) c->text.failed = true;
    free(text.data);
    return CKPT_OK;
}

static void kv_u32(lc *c, const char *key, uint64_t v) {
    char text[24];
    snprintf(text, sizeof text, "%llu", (unsigned long long)v);
    kv_scalar(c, key, "u32", text);
}

static void kv_bool(lc *c, const char *key, bool v) { kv_scalar(c, key, "bool", v ? "true" : "false"); }

/* GGUF's string: its length, then its bytes. */
static void put_string(ckpt__buf *b, const char *s, size_t len) {
    ckpt__put_le(b, len, 8);
    ckpt__buf_append(b, s, len);
}

static void kv_string(lc *c, const char *key, const char *s, size_t len) {
    ckpt__buf b = {0};
    ckpt__put_le(&b, CKPT__GGUF_STRING, 4);
    put_string(&b, s, len);
    kv_add_buf(c, key, &b);
}

/* An array's head: its type, its elements' and their count. */
static void array_head(ckpt__buf *b, uint32_t element, uint64_t count) {
    CKPT__PUT_FIELDS(b, {4, CKPT__GGUF_ARRAY}, {4, element}, {8, count});
}

/* The key-values made, handed to the plan (which the conversion gives to
 * its output), and as typed JSON into *json when asked. */
static ckpt_status hand_kvs(lc *c, char **json) {
    ckpt__buf b = {0};
    for (size_t i = 0; json && i < c->kv_count; i++) {
        char *text = ckpt__gguf_kv_json(&c->kvs[i]);
        ckpt__buf_puts(&b, i ? ",\n" : "{\n");
        ckpt__buf_json_string(&b, c->kv_keys[i]);
        ckpt__buf_puts(&b, ": ");
        if (!text) b.failed = true;
        else ckpt__buf_puts(&b, text);
        free(text);
    }
    if (json) ckpt__buf_puts(&b, c->kv_count ? "\n}\n" : "{}\n");
    if (b.failed) {
        free(b.data);
        return ckpt__oom(c->err, c->dir, "the key-values");
    }
    ckpt_status st = CKPT_OK;
    size_t i = 0;
    for (; !st && i < c->kv_count; i++) st = ckpt__plan_add_kv(c->plan, c->kv_keys[i], &c->kvs[i], c->err);
    for (; i < c->kv_count; i++) free((void *)c->kvs[i].bytes);
    c->kvs_handed = true; /* the bytes are the plan's */
    if (st) free(b.data);
    else if (json) *json = b.data;
    return st;
}

/* llama.cpp's file type (LlamaFileType) of the output dtype. */
static unsigned file_type(ckpt_dtype d) {
    switch (d) {
    case CKPT_F32: return 0;
    case CKPT_F16: return 1;
    case CKPT_Q8_0: return 7;
    default: return 32; /* BF16 */
    }
}

/* The RoPE parameters: rope_parameters, else rope_scaling (what the
 * script's TextModel reads), as a node of config.json, or 0. */
static uint32_t rope_parameters(const lc *c) {
    const ckpt__json_node *r = member(&c->config, 0, "rope_parameters");
    if (!r || r->kind == CKPT__JSON_NULL) r = member(&c->config, 0, "rope_scaling");
    if (!r || r->kind != CKPT__JSON_OBJECT) return 0;
    const ckpt__json_node *full = member(&c->config, node_index(&c->config, r), "full_attention");
    if (full && full->kind == CKPT__JSON_OBJECT) r = full; /* per layer type: the full attention's */
    return node_index(&c->config, r);
}

/* The RoPE parameters' first member of "a|b" present, or NULL. */
static const ckpt__json_node *rope_param(const lc *c, const char *names, char *found, size_t cap) {
    uint32_t rp = rope_parameters(c);
    for (const char *p = names; rp && p && *p;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        snprintf(found, cap, "%.*s", (int)n, p);
        const ckpt__json_node *v = member(&c->config, rp, found);
        if (v && v->kind != CKPT__JSON_NULL) return v;
        p = bar ? bar + 1 : NULL;
    }
    return NULL;
}

/* The RoPE type of the RoPE parameters ("rope_type", else "type"), or
 * NULL. */
static const ckpt__json_node *rope_type(const lc *c) {
    uint32_t rp = rope_parameters(c);
    const ckpt__json_node *type = rp ? member(&c->config, rp, "rope_type") : NULL;
    return type || !rp ? type : member(&c->config, rp, "type");
}

/* Whether the RoPE type is llama3 (the script compares it lower-cased). */
static bool rope_llama3(const ckpt__json_node *type) {
    return type && type->kind == CKPT__JSON_STRING && !strcasecmp(type->str, "llama3");
}

/* RoPE parameters the script turns into tensors ckpt does not make
 * (longrope's factors; llama3's rope_freqs where the family does not make
 * it) or reads in ways ckpt does not (types other than default, linear,
 * yarn and llama3): refused by name. */
static ckpt_status check_rope(lc *c) {
    const ckpt__json_node *type = rope_type(c);
    uint32_t rp = rope_parameters(c);
    const ckpt__json_node *factors = rp ? member(&c->config, rp, "long_factor") : NULL;
    const char *name = type && type->kind == CKPT__JSON_STRING ? type->str : "(not a string)";
    bool llama3 = rope_llama3(type) && c->family->rope_freqs;
    if (type && !llama3 && (type->kind != CKPT__JSON_STRING ||
                            (strcmp(name, "default") && strcmp(name, "linear") && strcmp(name, "yarn"))))
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, "rope_type", type->offset,
                          "RoPE type %s: ckpt converts the default, linear and yarn RoPE, and llama3's for llama "
                          "(longrope's factors are tensors the script makes, which ckpt does not)",
                          name);
    if (factors && factors->kind != CKPT__JSON_NULL)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, "long_factor", factors->offset,
                          "RoPE factors (long_factor, short_factor) are tensors the script makes, which ckpt does "
                          "not");
    return CKPT_OK;
}

/* A number of the RoPE parameters, or `fallback` when absent. */
static ckpt_status rope_number(lc *c, const char *key, double fallback, double *out) {
    char name[64];
    const ckpt__json_node *v = rope_param(c, key, name, sizeof name);
    *out = fallback;
    if (!v) return CKPT_OK;
    if (v->kind != CKPT__JSON_NUMBER)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, key, v->offset, "not a number");
    *out = strtod(v->str, NULL);
    return CKPT_OK;
}

void ckpt__lc_llama3_rope_freqs(float *f, uint64_t n, uint64_t dim, double base, double factor, double low,
                                double high, double ctx) {
    double low_wavelen = ctx / low, high_wavelen = ctx / high;
    for (uint64_t i = 0; i < n; i++) {
        float exponent = (float)(2 * i) / (float)dim;
        float freq = 1.0f / powf((float)base, exponent);
        float wavelen = (1.0f / freq) * (float)(2 * M_PI);
        if (wavelen < (float)high_wavelen) {
            f[i] = 1.0f;
        } else if (wavelen > (float)low_wavelen) {
            f[i] = (float)factor;
        } else {
            float smooth = ((1.0f / wavelen) * (float)ctx - (float)low) / (float)(high - low);
            f[i] = 1.0f / ((1.0f - smooth) / (float)factor + smooth);
        }
    }
}

/* LlamaModel.generate_extra_tensors for RoPE type llama3: rope_freqs, a
 * factor per pair of the head's dimensions, float32 as torch computes it
 * (each step rounded to float32; a scalar divided by a tensor is the
 * tensor's reciprocal times the scalar, as torch's __rtruediv__ does);
 * the first tensor of the file. */
static ckpt_status generate_rope_freqs(lc *c) {
    if (!c->family->rope_freqs || !rope_llama3(rope_type(c))) return CKPT_OK;
    double base, factor, low, high, ctx;
    ckpt_status st = rope_number(c, "rope_theta", 10000.0, &base);
    if (!st) st = rope_number(c, "factor", 8.0, &factor);
    if (!st) st = rope_number(c, "low_freq_factor", 1.0, &low);
    if (!st) st = rope_number(c, "high_freq_factor", 4.0, &high);
    if (!st) st = rope_number(c, "original_max_position_embeddings", 8192.0, &ctx);
    if (st) return st;
    uint64_t dim = c->head_dim, n = (dim + 1) / 2;
    if (!n || n > (1u << 20) || low == 0.0 || high == 0.0 || high == low)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, "rope_parameters", -1,
                          "llama3's RoPE needs a head dimension and distinct, nonzero low and high frequency factors");
    float *f = ckpt__malloc(n * sizeof *f);
    if (!f) return ckpt__oom(c->err, c->config.path, "rope_freqs");
    ckpt__lc_llama3_rope_freqs(f, n, dim, base, factor, low, high, ctx);
    uint64_t shape[1] = {n};
    st = ckpt__plan_generate(c->plan, "rope_freqs.weight", CKPT_F32, 1, shape, f, n * sizeof *f, c->err);
    free(f);
    c->shared_params += n;
    return st;
}

/* A number of the RoPE parameters as an f32 key-value, when present. */
static ckpt_status kv_rope_f32(lc *c, const char *key, const char *names) {
    char name[64];
    const ckpt__json_node *v = rope_param(c, names, name, sizeof name);
    return v ? kv_f32(c, key, name, v) : CKPT_OK;
}

/* TextModel's RoPE scaling: linear and yarn with a factor, their type,
 * factor and (yarn) original context length and tuning. */
static ckpt_status kv_rope_scaling(lc *c) {
    const ckpt__json_node *type = rope_type(c);
    char name[64], key[128];
    const ckpt__json_node *factor = rope_param(c, "factor", name, sizeof name);
    if (!type || !factor || (strcmp(type->str, "linear") && strcmp(type->str, "yarn"))) return CKPT_OK;
    const char *arch = c->family->name;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    kv_string(c, key, type->str, strlen(type->str));
    snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
    ckpt_status st = kv_rope_f32(c, key, "factor");
    if (st || strcmp(type->str, "yarn")) return st;
    const ckpt__json_node *ctx = rope_param(c, "original_max_position_embeddings", name, sizeof name);
    if (!ctx) ctx = hparam(c, "original_max_position_embeddings", name, sizeof name);
    if (!ctx)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, "original_max_position_embeddings", -1,
                          "yarn RoPE scaling needs the original context length");
    uint64_t u;
    if ((st = config_u64(c, name, ctx, &u))) return st;
    snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
    kv_u32(c, key, u);
    static const char *const tuning[][2] = {{"yarn_ext_factor", "extrapolation_factor"},
                                            {"yarn_attn_factor", "attention_factor|attn_factor"},
                                            {"yarn_beta_fast", "beta_fast"},
                                            {"yarn_beta_slow", "beta_slow"}};
    for (size_t k = 0; !st && k < sizeof tuning / sizeof *tuning; k++) {
        snprintf(key, sizeof key, "%s.rope.scaling.%s", arch, tuning[k][0]);
        st = kv_rope_f32(c, key, tuning[k][1]);
    }
    return st;
}

/* rope.freq_base: the RoPE parameters' rope_theta, else the first of the
 * hyper-parameters. */
static ckpt_status kv_rope_theta(lc *c, const char *key, const ckpt__lc_kv *rule) {
    uint32_t rp = rope_parameters(c);
    const ckpt__json_node *v = rp ? member(&c->config, rp, "rope_theta") : NULL;
    char name[64];
    if (!v || v->kind == CKPT__JSON_NULL) v = hparam(c, rule->hparams, name, sizeof name);
    if (!v && rule->required)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, "rope_theta", -1,
                          "config.json has no rope_theta, which %s needs", key);
    return v ? kv_f32(c, key, "rope_theta", v) : CKPT_OK;
}

/* rope.freq_base_swa: the sliding attention's rope_theta (RoPE parameters
 * per layer type), when present. */
static ckpt_status kv_rope_theta_swa(lc *c, const char *key) {
    const ckpt__json_node *r = member(&c->config, 0, "rope_parameters");
    if (!r || r->kind == CKPT__JSON_NULL) r = member(&c->config, 0, "rope_scaling");
    const ckpt__json_node *swa = r && r->kind == CKPT__JSON_OBJECT
                                     ? member(&c->config, node_index(&c->config, r), "sliding_attention") : NULL;
    const ckpt__json_node *v = swa && swa->kind == CKPT__JSON_OBJECT
                                   ? member(&c->config, node_index(&c->config, swa), "rope_theta") : NULL;
    return !v || v->kind == CKPT__JSON_NULL ? CKPT_OK : kv_f32(c, key, "rope_theta", v);
}

/* rope.dimension_count of a partial rotary embedding, as the script
 * computes it: int(factor * hidden_size) // num_attention_heads. */
static ckpt_status kv_rope_dim_partial(lc *c, const char *key) {
    char name[64];
    const ckpt__json_node *v = rope_param(c, "partial_rotary_factor", name, sizeof name);
    if (!v) v = hparam(c, "partial_rotary_factor|rope_pct|rope_percent", name, sizeof name);
    double factor = 1.0;
    if (v && v->kind != CKPT__JSON_NUMBER)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, name, v->offset, "not a number");
    if (v) factor = strtod(v->str, NULL);
    if (!(factor > 0.0 && factor <= 1.0))
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, name, at(v), "a rotary factor is in (0, 1]");
    kv_u32(c, key, (uint64_t)(factor * (double)c->hidden) / c->n_head);
    return CKPT_OK;
}

static ckpt_status kv_rule(lc *c, const ckpt__lc_kv *rule) {
    char key[128], name[64];
    snprintf(key, sizeof key, rule->key, c->family->name);
    const ckpt__json_node *v;
    uint64_t u;
    ckpt_status st = CKPT_OK;
    switch (rule->kind) {
    case CKPT__LC_FILE_TYPE: /* a mix: llama-quantize sets it again, last */
        if (!c->mix) kv_u32(c, key, file_type(c->dtype));
        return CKPT_OK;
    case CKPT__LC_ROPE_THETA: return kv_rope_theta(c, key, rule);
    case CKPT__LC_ROPE_THETA_SWA: return kv_rope_theta_swa(c, key);
    case CKPT__LC_F32_NONZERO:
        v = hparam(c, rule->hparams, name, sizeof name);
        if (!v || (v->kind == CKPT__JSON_NUMBER && strtod(v->str, NULL) == 0.0)) return CKPT_OK;
        return kv_f32(c, key, name, v);
    case CKPT__LC_U32_UNLESS_PATTERN_ONE:
        v = member(&c->config, 0, "sliding_window_pattern");
        if (v && ckpt__json_u64(v, &u) && u == 1) return CKPT_OK;
        if (!(v = hparam(c, rule->hparams, name, sizeof name)))
            return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, rule->hparams, -1,
                              "config.json has no %s, which %s needs", rule->hparams, key);
        if (!(st = config_u64(c, name, v, &u))) kv_u32(c, key, u);
        return st;
    case CKPT__LC_ROPE_SCALING: return kv_rope_scaling(c);
    case CKPT__LC_ROPE_DIM: kv_u32(c, key, c->head_dim); return CKPT_OK;
    case CKPT__LC_ROPE_DIM_PARTIAL: return kv_rope_dim_partial(c, key);
    case CKPT__LC_U32_OR_ZERO:
        if (!(v = hparam(c, rule->hparams, name, sizeof name))) {
            kv_u32(c, key, 0);
            return CKPT_OK;
        }
        if (!(st = config_u64(c, name, v, &u))) kv_u32(c, key, u);
        return st;
    case CKPT__LC_ROPE_U32:
    case CKPT__LC_U32:
    case CKPT__LC_F32:
        v = rule->kind == CKPT__LC_ROPE_U32 ? rope_param(c, rule->hparams, name, sizeof name) : NULL;
        if (!v && !(v = hparam(c, rule->hparams, name, sizeof name))) {
            if (!rule->required) return CKPT_OK;
            return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, NULL, -1,
                              "config.json has none of %s, which %s needs", rule->hparams, key);
        }
        if (rule->kind == CKPT__LC_F32) return kv_f32(c, key, name, v);
        if (!(st = config_u64(c, name, v, &u))) kv_u32(c, key, u);
        return st;
    }
    return CKPT_OK;
}

/* ---- the architecture and its hyper-parameters --------------------------- */

static ckpt_status find_family(lc *c) {
    const ckpt__json_node *a = member(&c->config, 0, "architectures");
    if (!a || a->kind != CKPT__JSON_ARRAY || !a->count || a[1].kind != CKPT__JSON_STRING)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, "architectures", at(a),
                          "config.json names no architecture (architectures: [\"LlamaForCausalLM\"], …)");
    const char *arch = a[1].str;
    for (size_t f = 0; f < sizeof families / sizeof *families; f++)
        for (const char *const *n = families[f]->hf_archs; *n; n++)
            if (!strcmp(*n, arch)) {
                c->family = families[f];
                return CKPT_OK;
            }
    char known[512] = "";
    for (size_t f = 0; f < sizeof families / sizeof *families; f++)
        for (const char *const *n = families[f]->hf_archs; *n; n++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", *known ? ", " : "", *n);
    return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, "architectures", a[1].offset,
                      "architecture %s: ckpt does not convert it for llama.cpp (it converts %s); --raw writes the "
                      "tensors as they are",
                      arch, known);
}

/* Whether `text` holds one of the "|"-separated `hints` after `prefix`,
 * ignoring ASCII case (the script compares lower-cased names). */
static const char *holds_hint(const char *text, const char *prefix, const char *hints, char *which, size_t cap) {
    for (const char *p = hints; text && p && *p;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        snprintf(which, cap, "%s%.*s", prefix, (int)n, p);
        if (strcasestr(text, which)) return which;
        p = bar ? bar + 1 : NULL;
    }
    return NULL;
}

/* A variant of the family the script converts otherwise (a Qwen3
 * reranker), found where the script looks for it: refused by name. */
static ckpt_status refuse_variant(lc *c) {
    const char *hints = c->family->refused_hint;
    if (!hints) return CKPT_OK;
    char which[128];
    size_t n;
    const char *base = dir_base(c->dir, &n);
    char dirname[256];
    snprintf(dirname, sizeof dirname, "%.*s", (int)(n < 255 ? n : 255), base);
    const char *keys[] = {"_name_or_path", "model_type", "architectures"};
    const char *found = holds_hint(dirname, "", hints, which, sizeof which), *where = "the directory's name";
    for (size_t k = 0; !found && k < sizeof keys / sizeof *keys; k++) {
        const ckpt__json_node *v = member(&c->config, 0, keys[k]);
        if (v && v->kind == CKPT__JSON_ARRAY && v->count) v++;
        if (v && v->kind == CKPT__JSON_STRING && (found = holds_hint(v->str, "", hints, which, sizeof which)))
            where = keys[k];
    }
    char *path = NULL, *readme = NULL;
    uint64_t size = 0;
    ckpt_status st = CKPT_OK;
    if (!found) {
        if (!(path = ckpt__path_join(c->dir, "README.md"))) return ckpt__oom(c->err, c->dir, NULL);
        st = read_file(c, path, "README.md", &readme, &size);
        if (!st && readme && strlen(readme) == size && (found = holds_hint(readme, "# ", hints, which, sizeof which)))
            where = "README.md";
    }
    if (!st && found)
        st = ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, readme ? path : c->config.path, where, -1,
                        "a %s model (\"%s\" in %s): the script converts it with a pooling type and a classifier "
                        "head, which ckpt does not convert",
                        c->family->name, which, where);
    free(readme);
    free(path);
    return st;
}

static ckpt_status need_u64(lc *c, const char *names, uint64_t *out, bool *has) {
    char name[64];
    const ckpt__json_node *v = hparam(c, names, name, sizeof name);
    if (has) *has = v != NULL;
    if (!v) {
        if (has) return CKPT_OK;
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, NULL, -1, "config.json has none of %s",
                          names);
    }
    return config_u64(c, name, v, out);
}

/* The hyper-parameters that tensor shapes and the Q/K permutation follow. */
static ckpt_status read_hparams(lc *c) {
    ckpt_status st = need_u64(c, "vocab_size", &c->vocab, NULL);
    if (!st) st = need_u64(c, "hidden_size|n_embd|dim", &c->hidden, NULL);
    if (!st) st = need_u64(c, "num_attention_heads|n_head|n_heads", &c->n_head, NULL);
    if (!st) st = need_u64(c, "intermediate_size", &c->ff, &c->has_ff);
    if (!st) st = need_u64(c, "num_key_value_heads|n_kv_heads", &c->n_kv, &c->has_kv);
    if (st) return st;
    if (!c->has_kv) c->n_kv = c->n_head;
    bool has_head_dim;
    if ((st = need_u64(c, "head_dim", &c->head_dim, &has_head_dim))) return st;
    if (!c->n_head || !c->n_kv)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, c->n_head ? "num_key_value_heads"
                          : "num_attention_heads", -1, "a model has at least one attention head");
    if (!has_head_dim) c->head_dim = c->hidden / c->n_head, c->head_dim_derived = true;
    if (c->family->refused_vocab_size && c->vocab == c->family->refused_vocab_size)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, "vocab_size", -1,
                          "vocab_size %llu: the script gives such a %s model's infill tokens (prefix, suffix, "
                          "middle, eot) fixed ids, which ckpt does not",
                          (unsigned long long)c->vocab, c->family->name);
    return CKPT_OK;
}

/* ---- tensors ------------------------------------------------------------- */

/* The table's tensor `name` is, and its layer. */
static const ckpt__lc_tensor *map_tensor(const lc *c, const char *name, unsigned *layer) {
    for (const ckpt__lc_tensor *t = c->family->tensors; t->hf; t++) {
        const char *pct = strstr(t->hf, "%u");
        if (!pct) {
            if (!strcmp(t->hf, name)) return t;
            continue;
        }
        size_t head = (size_t)(pct - t->hf);
        if (strncmp(name, t->hf, head) != 0 || name[head] < '0' || name[head] > '9') continue;
        char *end;
        errno = 0;
        unsigned long v = strtoul(name + head, &end, 10);
        if (errno || v > 100000 || (name[head] == '0' && end != name + head + 1)) continue;
        if (!strcmp(end, pct + 2)) {
            *layer = (unsigned)v;
            return t;
        }
    }
    return NULL;
}

static uint64_t expected_extent(const lc *c, ckpt__lc_dim d, const char **key) {
    switch (d) {
    case CKPT__LC_VOCAB: *key = "vocab_size"; return c->vocab;
    case CKPT__LC_HIDDEN: *key = "hidden_size"; return c->hidden;
    case CKPT__LC_FF: *key = "intermediate_size"; return c->has_ff ? c->ff : 0;
    case CKPT__LC_Q:
        *key = c->head_dim_derived ? "num_attention_heads × (hidden_size / num_attention_heads)"
                                   : "num_attention_heads × head_dim";
        return c->n_head * c->head_dim;
    case CKPT__LC_KV:
        *key = c->head_dim_derived ? "num_key_value_heads × (hidden_size / num_attention_heads)"
                                   : "num_key_value_heads × head_dim";
        return c->n_kv * c->head_dim;
    case CKPT__LC_QKV:
        *key = "(num_attention_heads + 2 × num_key_value_heads) × the head dimension";
        return (c->n_head + 2 * c->n_kv) * c->head_dim;
    case CKPT__LC_FF2: *key = "2 × intermediate_size"; return c->has_ff ? 2 * c->ff : 0;
    case CKPT__LC_EXPERTS: *key = c->experts_key; return c->n_experts;
    case CKPT__LC_EXPERT_FF: *key = "moe_intermediate_size"; return c->has_expert_ff ? c->expert_ff : 0;
    case CKPT__LC_SHARED_FF:
        *key = "shared_expert_intermediate_size";
        return c->has_shared_ff ? c->shared_ff : 0;
    case CKPT__LC_ONE: *key = "a gate of one row"; return 1;
    case CKPT__LC_HEAD:
        *key = c->head_dim_derived ? "hidden_size / num_attention_heads" : "head_dim";
        return c->head_dim;
    default: return 0;
    }
}

/* The tensor's shape against config.json (ndim axes of extents `dims`,
 * llama.cpp's tensor `gguf`): an error names the key. */
static ckpt_status check_dims(lc *c, const ckpt_tensor_info *t, uint32_t ndim, const ckpt__lc_dim *dims,
                              const char *gguf) {
    if (t->ndim != ndim)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, t->name, -1,
                          "the tensor has %u axes; llama.cpp's %s has %u", t->ndim, gguf, (unsigned)ndim);
    for (uint32_t a = 0; a < t->ndim; a++) {
        const char *key = NULL;
        uint64_t want = expected_extent(c, dims[a], &key);
        if (key && want && t->shape[a] != want)
            return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, t->name, -1,
                              "%s says axis %u has %llu elements; the tensor has %llu", key, a,
                              (unsigned long long)want, (unsigned long long)t->shape[a]);
    }
    return CKPT_OK;
}

/* The dtype the script gives a tensor: vectors and norms f32, Q8_0 rows
 * that are not whole blocks f16 (its QuantError fallback), else the
 * output's. */
static ckpt_dtype tensor_dtype(const lc *c, const ckpt_tensor_info *t, const char *gguf_name, bool f32) {
    size_t n = strlen(gguf_name);
    if (f32 || t->ndim <= 1 || (n >= 12 && !strcmp(gguf_name + n - 12, "_norm.weight"))) return CKPT_F32;
    if (c->dtype == CKPT_Q8_0 && t->shape[t->ndim - 1] % 32) return CKPT_F16;
    return c->dtype;
}

/* A name with glob characters escaped, so that a plan rule names exactly it. */
static char *escape_name(const char *name) {
    char *out = ckpt__malloc(2 * strlen(name) + 1), *o = out;
    if (!out) return NULL;
    for (const char *s = name; *s; s++) {
        if (strchr("*?[\\", *s)) *o++ = '\\';
        *o++ = *s;
    }
    *o = '\0';
    return out;
}

/* LlamaModel.permute: rows as (heads, 2, rows/heads/2, in), the middle two
 * axes swapped. */
static ckpt_status permute_rows(lc *c, size_t index, const ckpt_tensor_info *t, uint64_t heads) {
    if (!heads || t->shape[0] % (2 * heads))
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, t->name, -1,
                          "%llu rows do not split into %llu heads of pairs", (unsigned long long)t->shape[0],
                          (unsigned long long)heads);
    uint64_t shape[4] = {heads, 2, t->shape[0] / heads / 2, t->shape[1]};
    static const uint32_t perm[4] = {0, 2, 1, 3};
    return ckpt__plan_view_permute(c->plan, index, 4, shape, perm, c->err);
}

static ckpt_status note_expert(lc *c, size_t index, const ckpt_tensor_info *t, bool *is_expert);

/* A source tensor's dtype as llama.cpp's conversion takes it. */
static ckpt_status check_source_dtype(lc *c, const ckpt_tensor_info *t) {
    if (t->dtype == CKPT_F32 || t->dtype == CKPT_F16 || t->dtype == CKPT_BF16) return CKPT_OK;
    return ckpt__fail(c->err, CKPT__D(UNSUPPORTED_DTYPE), ckpt_catalog_file_path(c->plan->catalog, t->file), t->name,
                      -1, "a %s tensor: llama.cpp's conversion takes f32, f16 or bf16 weights", ckpt_dtype_name(t->dtype));
}

/* Entry `index` (tensor t) cast to the dtype the script gives llama.cpp's `name`. */
static ckpt_status cast_output(lc *c, const ckpt_tensor_info *t, const char *name, bool f32) {
    ckpt_dtype d = tensor_dtype(c, t, name, f32);
    if (d == t->dtype) return CKPT_OK;
    char *pattern = escape_name(t->name);
    ckpt_status st = pattern ? ckpt_plan_cast(c->plan, pattern, d, c->err) : ckpt__oom(c->err, NULL, t->name);
    free(pattern);
    return st;
}

static ckpt_status plan_tensor(lc *c, size_t index) {
    const ckpt_tensor_info *t = ckpt_catalog_tensor(c->plan->catalog, index);
    unsigned layer = 0;
    bool expert = false;
    ckpt_status st = check_source_dtype(c, t);
    if (!st) st = note_expert(c, index, t, &expert);
    if (st || expert) return st;
    const ckpt__lc_tensor *m = map_tensor(c, t->name, &layer);
    if (!m)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, ckpt_catalog_file_path(c->plan->catalog, t->file), t->name,
                          -1, "no llama.cpp tensor of %s is made of it", c->family->name);
    if ((st = check_dims(c, t, m->ndim, m->dims, m->gguf))) return st;
    char name[256];
    snprintf(name, sizeof name, m->gguf, layer);
    if (m->rope == CKPT__LC_PERMUTE_Q) st = permute_rows(c, index, t, c->n_head);
    else if (m->rope == CKPT__LC_PERMUTE_K) st = permute_rows(c, index, t, c->n_kv);
    if (!st && m->add != 0.0f) { /* in the precision the script adds in: float16 stays, bfloat16 is widened */
        ckpt__elementwise rule = {.add = m->add, .hold = t->dtype == CKPT_F16 ? CKPT_F16 : CKPT_F32};
        st = ckpt__plan_compute(c->plan, index, &rule, c->err);
    }
    if (!st) st = cast_output(c, t, name, m->f32);
    if (st) return st;
    c->shared_params += t->numel;
    return ckpt__plan_set_name(c->plan, index, name, c->err);
}

/* The tensors the script drops (Gemma 2's lm_head), left out of the plan. */
static ckpt_status drop_tensors(lc *c) {
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; !st && i < c->plan->entry_count; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(c->plan->catalog, i);
        unsigned layer;
        const ckpt__lc_tensor *m = c->plan->entries[i].selected ? map_tensor(c, t->name, &layer) : NULL;
        if (!m || m->gguf) continue;
        char *pattern = escape_name(t->name);
        st = pattern ? ckpt_plan_exclude(c->plan, pattern, c->err) : ckpt__oom(c->err, NULL, t->name);
        free(pattern);
    }
    ckpt__plan_refresh(c->plan);
    return st;
}

/* ---- experts ------------------------------------------------------------- */

/* The family's expert tensor `name` is: its row of the experts table, its
 * layer and expert; NULL when it is none. */
static const ckpt__lc_experts *map_expert(const lc *c, const char *name, unsigned *layer, unsigned *expert) {
    for (const ckpt__lc_experts *x = c->family->experts; x && x->hf; x++) {
        const char *a = strstr(x->hf, "%u"), *b = a ? strstr(a + 2, "%u") : NULL;
        if (!b || strncmp(name, x->hf, (size_t)(a - x->hf))) continue;
        const char *p = name + (a - x->hf);
        char *end;
        errno = 0;
        unsigned long l = strtoul(p, &end, 10);
        if (errno || end == p || *p < '0' || *p > '9' || l > 100000 || (*p == '0' && end != p + 1)) continue;
        size_t mid = (size_t)(b - a - 2);
        if (strncmp(end, a + 2, mid)) continue;
        p = end + mid;
        errno = 0;
        unsigned long e = strtoul(p, &end, 10);
        if (errno || end == p || *p < '0' || *p > '9' || e > 100000 || (*p == '0' && end != p + 1)) continue;
        if (strcmp(end, b + 2)) continue;
        *layer = (unsigned)l, *expert = (unsigned)e;
        return x;
    }
    return NULL;
}

/* An expert tensor (*is_expert) noted for its layer's stack (shape
 * checked against config.json; an expert the config does not count
 * refused by key). */
static ckpt_status note_expert(lc *c, size_t index, const ckpt_tensor_info *t, bool *is_expert) {
    unsigned layer, expert;
    const ckpt__lc_experts *x = map_expert(c, t->name, &layer, &expert);
    if (!(*is_expert = x != NULL)) return CKPT_OK;
    const char *path = ckpt_catalog_file_path(c->plan->catalog, t->file);
    if (!c->n_experts || expert >= c->n_experts || layer >= c->layers)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, layer >= c->layers ? "num_hidden_layers"
                          : c->experts_key, -1,
                          "%s (in %s) is expert %u of layer %u, but config.json counts %llu experts and %llu layers",
                          t->name, path, expert, layer, (unsigned long long)c->n_experts,
                          (unsigned long long)c->layers);
    ckpt_status st = check_dims(c, t, 2, x->dims, x->gguf);
    if (st) return st;
    size_t row = (size_t)(x - c->family->experts);
    c->expert_at[((size_t)layer * c->expert_rows + row) * c->n_experts + expert] = index;
    return CKPT_OK;
}

/* Every layer's experts stacked as the script merges them: each row of
 * the table into one output after the layer's last expert tensor, every
 * expert of every row present (else refused naming the one missing). */
static ckpt_status stack_experts(lc *c) {
    size_t n = (size_t)c->n_experts;
    for (uint64_t layer = 0; c->expert_at && layer < c->layers; layer++) {
        size_t *at = c->expert_at + (size_t)layer * c->expert_rows * n, last = 0, found = 0, any = SIZE_MAX;
        for (size_t k = 0; k < c->expert_rows * n; k++)
            if (at[k] != SIZE_MAX) found++, any = at[k], last = at[k] > last ? at[k] : last;
        if (!found) continue;
        for (size_t k = 0; k < c->expert_rows * n; k++) {
            if (at[k] != SIZE_MAX) continue;
            char missing[256];
            snprintf(missing, sizeof missing, c->family->experts[k / n].hf, (unsigned)layer, (unsigned)(k % n));
            const ckpt_tensor_info *t = ckpt_catalog_tensor(c->plan->catalog, any);
            return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, ckpt_catalog_file_path(c->plan->catalog, t->file),
                              missing, -1, "the weights lack this expert tensor, which %s %llu in config.json needs",
                              c->experts_key, (unsigned long long)c->n_experts);
        }
        for (size_t row = 0; row < c->expert_rows; row++) {
            const ckpt_tensor_info *t = ckpt_catalog_tensor(c->plan->catalog, at[row * n]);
            char name[256];
            snprintf(name, sizeof name, c->family->experts[row].gguf, (unsigned)layer);
            ckpt_status st = ckpt__plan_stack(c->plan, at[row * n], n, at + row * n, c->err);
            if (!st) st = cast_output(c, t, name, false);
            if (!st) st = ckpt__plan_set_name(c->plan, at[row * n], name, c->err);
            if (st) return st;
            ckpt__plan_place(c->plan, at[row * n], last);
            c->expert_params += t->numel; /* the script counts one expert of each stack */
        }
    }
    return CKPT_OK;
}

/* The expert count and widths from config.json, and room for the expert
 * tensors' indexes. */
static ckpt_status read_expert_hparams(lc *c) {
    if (!c->family->experts) return CKPT_OK;
    ckpt_status st = need_u64(c, "n_layers|num_hidden_layers|n_layer|num_layers", &c->layers, NULL);
    const ckpt__json_node *v = hparam(c, c->family->expert_hparams, c->experts_key, sizeof c->experts_key);
    if (!v) snprintf(c->experts_key, sizeof c->experts_key, "%.*s", (int)strcspn(c->family->expert_hparams, "|"),
                     c->family->expert_hparams);
    if (!st && v) st = config_u64(c, c->experts_key, v, &c->n_experts);
    if (!st) st = need_u64(c, "moe_intermediate_size", &c->expert_ff, &c->has_expert_ff);
    if (!st) st = need_u64(c, "shared_expert_intermediate_size", &c->shared_ff, &c->has_shared_ff);
    if (st || !c->n_experts) return st;
    for (const ckpt__lc_experts *x = c->family->experts; x->hf; x++) c->expert_rows++;
    size_t cells = (size_t)c->layers * c->expert_rows * (size_t)c->n_experts;
    if (!(c->expert_at = ckpt__malloc((cells ? cells : 1) * sizeof *c->expert_at)))
        return ckpt__oom(c->err, c->config.path, c->experts_key);
    for (size_t k = 0; k < cells; k++) c->expert_at[k] = SIZE_MAX;
    return CKPT_OK;
}

/* llama-quantize run on the script's f32 file: each tensor cast to the
 * mix's choice (quant_mix.c) and the tensors in the order it writes them. */
static ckpt_status apply_mix(lc *c) {
    ckpt_plan *p = c->plan;
    ckpt__lc_mix_model model = {.arch = c->family->name, .n_head = c->n_head, .n_head_kv = c->n_kv};
    ckpt_status st = need_u64(c, "n_layers|num_hidden_layers|n_layer|num_layers", &model.n_layer, NULL);
    bool has;
    if (!st) st = need_u64(c, "num_local_experts|num_experts", &model.n_expert, &has);
    ckpt__lc_mix_tensor *t = st ? NULL : ckpt__calloc(p->selected_count ? p->selected_count : 1, sizeof *t);
    if (!st && !t) st = ckpt__oom(c->err, c->dir, NULL);
    for (size_t k = 0; !st && k < p->selected_count; k++) {
        const ckpt__plan_entry *e = &p->entries[p->selected[k]];
        const ckpt_tensor_info *s = e->pub.source;
        t[k] = (ckpt__lc_mix_tensor){.name = e->pub.name, .ndim = s->ndim, .row = s->ndim ? s->shape[s->ndim - 1] : 1,
                                     .in = e->pub.dtype, .index = p->selected[k]};
    }
    if (!st) st = ckpt__lc_mix_choose(c->mix, &model, t, p->selected_count, c->config.path, c->err);
    for (size_t k = 0; !st && k < p->selected_count; k++) {
        p->selected[k] = t[k].index;
        if (t[k].out == t[k].in) continue;
        char *pattern = escape_name(p->entries[t[k].index].pub.source->name);
        st = pattern ? ckpt_plan_cast(p, pattern, t[k].out, c->err) : ckpt__oom(c->err, NULL, t[k].name);
        free(pattern);
    }
    free(t);
    return st;
}

/* --outtype auto: the first matrix's dtype when it is bf16 or f16, else f16. */
static ckpt_dtype auto_dtype(const ckpt_plan *p) {
    for (size_t i = 0; i < p->entry_count; i++) {
        const ckpt_tensor_info *t = p->entries[i].pub.source;
        if (!p->entries[i].selected || t->ndim < 2) continue;
        return t->dtype == CKPT_BF16 ? CKPT_BF16 : CKPT_F16;
    }
    return CKPT_F16;
}

/* ---- general.* ----------------------------------------------------------- */

/* gguf.Metadata's title of a directory name: words split at '-' and
 * whitespace, a lower-case word that is not a version or a number
 * title-cased as Python's str.title does. */
static void model_name(const char *dir, ckpt__buf *b) {
    size_t n;
    const char *base = dir_base(dir, &n);
    bool first = true;
    for (size_t i = 0; i < n;) {
        while (i < n && (base[i] == '-' || base[i] == ' ' || base[i] == '\t')) i++;
        size_t s = i;
        while (i < n && base[i] != '-' && base[i] != ' ' && base[i] != '\t') i++;
        if (i == s) break;
        bool lower = false, upper = false;
        for (size_t k = s; k < i; k++) lower |= base[k] >= 'a' && base[k] <= 'z', upper |= base[k] >= 'A' && base[k] <= 'Z';
        bool numeric = (base[s] >= '0' && base[s] <= '9') ||
                       (base[s] == 'v' && i > s + 1 && base[s + 1] >= '0' && base[s + 1] <= '9' &&
                        strspn(base + s + 1, "0123456789.") >= i - s - 1);
        if (!first) ckpt__buf_puts(b, " ");
        first = false;
        bool prev_letter = false;
        for (size_t k = s; k < i; k++) {
            char ch = base[k];
            bool letter = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
            if (lower && !upper && !numeric && letter) ch = prev_letter ? ch : (char)(ch - 'a' + 'A');
            prev_letter = letter;
            ckpt__buf_append(b, &ch, 1);
        }
    }
}

/* gguf.size_label: the parameter count rounded, two digits at least. */
static void size_label(uint64_t params, char *out, size_t cap) {
    double x;
    const char *suffix;
    if (params > 1e12) x = (double)params * 1e-12, suffix = "T";
    else if (params > 1e9) x = (double)params * 1e-9, suffix = "B";
    else if (params > 1e6) x = (double)params * 1e-6, suffix = "M";
    else x = (double)params * 1e-3, suffix = "K";
    char whole[32];
    snprintf(whole, sizeof whole, "%.0f", nearbyint(x));
    const char *digits = whole + strspn(whole, "0");
    int fix = 2 - (int)strlen(digits);
    snprintf(out, cap, "%.*f%s", fix > 0 ? fix : 0, x, suffix);
}

/* ---- the tokenizer ------------------------------------------------------- */

/* llama.cpp's token types, SentencePiece's piece types alike. */
#define TOKEN_NORMAL 1
#define TOKEN_UNKNOWN 2
#define TOKEN_CONTROL 3
#define TOKEN_USER_DEFINED 4
#define TOKEN_UNUSED 5
#define TOKEN_BYTE 6

/* The script's does_token_look_special. */
static bool looks_special(const char *s, size_t n) {
    static const char *const names[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (n == strlen(names[i]) && !memcmp(s, names[i], n)) return true;
#define ENDS(a, b) (n >= strlen(a) + strlen(b) && !memcmp(s, a, strlen(a)) && !memcmp(s + n - strlen(b), b, strlen(b)))
    return ENDS("<|", "|>") || ENDS("<\xef\xbd\x9c", "\xef\xbd\x9c>") || ENDS("<unused", ">");
#undef ENDS
}

/* A user-defined token's U+2581 as spaces, as the script writes it
 * ("pre-normalize user-defined spaces"). */
static void spaces_restored(const char *s, size_t len, ckpt__buf *out) {
    for (size_t k = 0; k < len; k++) {
        if (k + 3 <= len && !memcmp(s + k, "\xe2\x96\x81", 3)) ckpt__buf_puts(out, " "), k += 2;
        else ckpt__buf_append(out, s + k, 1);
    }
}

typedef struct token_slot {
    const char *text; /* NULL: no token */
    uint32_t len;
    int type;
} token_slot;

/* ---- tokenizer.json, streamed --------------------------------------------- */

/* Whether a string of tokenizer.json is UTF-8: the JSON reader passes
 * other bytes through, where Python's json.load of the file fails. */
static bool is_text(const char *s, size_t len) { return ckpt__utf8_check((const unsigned char *)s, len) == len; }

/* A vocabulary entry as the file streams by: token `ev->key`, id the value. */
static ckpt_status vocab_entry(lc *c, const ckpt__json_event *ev) {
    const char *path = c->tokenizer.path;
    ckpt__json_node n = {.str = ev->str, .kind = ev->kind, .len = (uint32_t)ev->len};
    uint64_t id;
    if (!ckpt__json_u64(&n, &id))
        return ckpt__fail(&c->vocab_err, CKPT_E_INVALID_ARGUMENT, path, "model.vocab", (int64_t)ev->offset,
                          "a token id must be a whole number");
    if (!is_text(ev->key, ev->key_len)) /* json.load refuses such a file; GGUF's strings are UTF-8 */
        return ckpt__fail(&c->vocab_err, CKPT_E_INVALID_ARGUMENT, path, "model.vocab", (int64_t)ev->offset,
                          "token %llu is not UTF-8 text", (unsigned long long)id);
    if (id >= c->vocab)
        return ckpt__fail(&c->vocab_err, CKPT_E_INVALID_ARGUMENT, c->config.path, "vocab_size", -1,
                          "vocab_size %llu is not above token id %llu of %s", (unsigned long long)c->vocab,
                          (unsigned long long)id, path);
    char *text = ckpt__arena_strndup(&c->vocab_text, ev->key, ev->key_len);
    if (!text) return ckpt__oom(&c->vocab_err, path, "model.vocab");
    c->slots[id] = (token_slot){text, (uint32_t)ev->key_len, TOKEN_NORMAL};
    return CKPT_OK;
}

/* model.vocab, an object {token: id}, into c->slots; its first error kept
 * for after the file's own (c->vocab_st). */
static ckpt_status read_vocab(lc *c, ckpt__json_pull *r) {
    ckpt__json_event ev;
    ckpt_status st;
    while (!(st = ckpt__json_pull_next(r, &ev)) && ev.step == CKPT__JSON_VALUE) {
        if (!c->vocab_st) c->vocab_st = vocab_entry(c, &ev);
        if ((st = ckpt__json_pull_skip(r, &ev))) break;
    }
    return st;
}

/* A merge's part, a space in it as U+0120 (as gguf.SpecialVocab encodes
 * it). */
static void merge_part(ckpt__buf *pair, const char *s, size_t len) {
    for (size_t b = 0; b < len; b++)
        if (s[b] == ' ') ckpt__buf_puts(pair, "\xc4\xa0");
        else ckpt__buf_append(pair, s + b, 1);
}

/* A merge given as a pair ["a", "b"] (its start event read): "a b" into
 * *pair, or false (the pair read to its end). */
static ckpt_status merge_pair(ckpt__json_pull *r, ckpt__buf *pair, bool *ok) {
    ckpt__json_event ev;
    ckpt_status st;
    size_t parts = 0;
    *ok = true;
    pair->len = 0;
    while (!(st = ckpt__json_pull_next(r, &ev)) && ev.step == CKPT__JSON_VALUE) {
        if (ev.kind != CKPT__JSON_STRING || parts == 2 || !is_text(ev.str, ev.len)) *ok = false;
        else {
            if (parts++) ckpt__buf_puts(pair, " ");
            merge_part(pair, ev.str, ev.len);
        }
        if ((st = ckpt__json_pull_skip(r, &ev))) return st;
    }
    if (parts != 2) *ok = false;
    return st;
}

/* model.merges, an array, encoded into c->merges as the file streams by:
 * "a b" strings, or pairs joined so; its first error kept for after the
 * file's own (c->merges_st). */
static ckpt_status read_merges(lc *c, ckpt__json_pull *r) {
    ckpt__json_event ev;
    ckpt__buf pair = {0};
    ckpt_status st;
    array_head(&c->merges, CKPT__GGUF_STRING, 0); /* the count patched at the end */
    while (!(st = ckpt__json_pull_next(r, &ev)) && ev.step == CKPT__JSON_VALUE) {
        bool ok = ev.kind == CKPT__JSON_STRING && is_text(ev.str, ev.len);
        if (ok) put_string(&c->merges, ev.str, ev.len);
        else if (ev.kind == CKPT__JSON_ARRAY && !(st = merge_pair(r, &pair, &ok)) && ok)
            put_string(&c->merges, pair.data ? pair.data : "", pair.len);
        else if (!st && ev.kind != CKPT__JSON_ARRAY) st = ckpt__json_pull_skip(r, &ev);
        if (st) break;
        if (!ok && !c->merges_st)
            c->merges_st = ckpt__fail(&c->merges_err, CKPT_E_INVALID_ARGUMENT, c->tokenizer.path, "model.merges",
                                      (int64_t)ev.offset, "a merge is a string \"a b\" or a pair [\"a\", \"b\"], of UTF-8 text");
        c->merge_count++;
    }
    if (pair.failed || c->merges.failed) st = st ? st : CKPT_E_NO_MEMORY;
    free(pair.data);
    if (!st) ckpt__store_le((unsigned char *)c->merges.data + 8, c->merge_count, 8);
    return st;
}

/* ckpt__json_pull_doc's take: model.vocab and model.merges (the first of
 * each) read as the file streams by — no tree of a million nodes. */
static bool take_vocab(void *user, ckpt__json_pull *r, const ckpt__json_event *ev, const char *parent,
                       ckpt_status *st) {
    lc *c = user;
    if (ev->depth != 2 || !parent || strcmp(parent, "model") || !ev->key) return false;
    bool vocab = !strcmp(ev->key, "vocab") && ev->kind == CKPT__JSON_OBJECT && !c->vocab_read;
    bool merges = !strcmp(ev->key, "merges") && ev->kind == CKPT__JSON_ARRAY && !c->merges_read;
    if (!vocab && !merges) return false;
    if (vocab) c->vocab_read = true;
    else c->merges_read = true;
    *st = !c->slots ? ckpt__json_pull_skip(r, ev) /* SentencePiece's: unused */
          : vocab   ? read_vocab(c, r)
                    : read_merges(c, r);
    return true;
}

typedef struct lc_file {
    int fd;
    const char *path;
    ckpt_error *err;
} lc_file;

static ckpt_status fill_from_file(void *user, uint64_t offset, char *buf, size_t cap, size_t *got) {
    lc_file *f = user;
    ckpt_status st = ckpt__pread_full(f->fd, buf, cap, offset, f->path, f->err);
    *got = st ? 0 : cap;
    return st;
}

/* tokenizer.json read through a window: the vocabulary and merges as they
 * stream by (for byte-level BPE: `bpe`), the rest into c->tokenizer's tree. */
static ckpt_status read_tokenizer_json(lc *c, bool required, bool bpe) {
    lc_json *f = &c->tokenizer;
    f->name = "tokenizer.json";
    if (!(f->path = ckpt__path_join(c->dir, f->name))) return ckpt__oom(c->err, c->dir, NULL);
    if (!ckpt__beneath_has(c->root, f->name)) {
        if (!required) return CKPT_OK;
        return ckpt__fail(c->err, CKPT_E_NOT_FOUND, f->path, NULL, -1,
                          "llama.cpp's conversion needs %s beside the weights", f->name);
    }
    lc_file file = {-1, f->path, c->err};
    uint64_t size = 0;
    ckpt_status st = ckpt__beneath_open(c->root, f->path, false, &file.fd, &size, c->err);
    if (st) return st;
    if (size > LC_MAX_JSON_BYTES)
        st = ckpt__fail(c->err, CKPT_E_LIMIT, f->path, NULL, -1, "%llu bytes is too large for a model's configuration "
                        "file", (unsigned long long)size);
    if (!st && bpe && !(c->slots = ckpt__calloc(c->vocab ? c->vocab : 1, sizeof *c->slots)))
        st = ckpt__oom(c->err, f->path, NULL);
    ckpt__json_pull r = {0};
    ckpt__json_event ev;
    if (!st) st = ckpt__json_pull_init(&r, size, 64 << 10, fill_from_file, &file);
    if (!st) st = ckpt__json_pull_next(&r, &ev);
    if (!st) st = ckpt__json_pull_doc(&r, &ev, &f->strings, take_vocab, c, &f->doc);
    if (!st) st = ckpt__json_pull_next(&r, &ev); /* the end, or trailing characters */
    if (st == CKPT_E_INVALID_ARGUMENT && r.why)
        st = ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, f->path, NULL, (int64_t)r.error_offset, "not JSON: %s", r.why);
    else if (st == CKPT_E_NO_MEMORY) st = ckpt__oom(c->err, f->path, NULL);
    ckpt__json_pull_free(&r);
    close(file.fd);
    if (st) return st;
    if (f->doc.nodes[0].kind != CKPT__JSON_OBJECT)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, f->path, NULL, 0, "not a JSON object");
    f->present = true;
    return CKPT_OK;
}

/* A deferred error of the streamed vocabulary or merges, as it was. */
static ckpt_status deferred(lc *c, ckpt_status st, const ckpt_error *e) {
    if (st && c->err) *c->err = *e;
    return st;
}

/* tokens and token types: the model's vocabulary and the added tokens, by
 * id, up to vocab_size ("[PAD<i>]" for ids without a token). */
static ckpt_status write_tokens(lc *c) {
    lc_json *f = &c->tokenizer;
    token_slot *slots = c->slots;
    ckpt_status st = deferred(c, c->vocab_st, &c->vocab_err);
    const ckpt__json_node *added = member(f, 0, "added_tokens");
    if (!st && added && added->kind == CKPT__JSON_ARRAY) {
        for (uint32_t i = node_index(f, added) + 1, k = 0; !st && k < added->count; k++, i = f->doc.nodes[i].end) {
            const ckpt__json_node *id_node = member(f, i, "id"), *content = member(f, i, "content"),
                                  *special = member(f, i, "special");
            uint64_t id;
            if (!id_node || !content || content->kind != CKPT__JSON_STRING || !ckpt__json_u64(id_node, &id)) {
                st = ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, f->path, "added_tokens", f->doc.nodes[i].offset,
                                "an added token needs an id and a content");
            } else if (id >= c->vocab) {
                st = ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, "vocab_size", -1,
                                "vocab_size %llu is not above added token id %llu of %s",
                                (unsigned long long)c->vocab, (unsigned long long)id, f->path);
            } else {
                bool control = (special && special->kind == CKPT__JSON_TRUE) || looks_special(content->str, content->len);
                slots[id] = (token_slot){content->str, content->len, control ? TOKEN_CONTROL : TOKEN_USER_DEFINED};
            }
        }
    }
    if (st) return st;
    ckpt__buf tokens = {0}, types = {0}, spaced = {0};
    array_head(&tokens, CKPT__GGUF_STRING, c->vocab);
    array_head(&types, CKPT__GGUF_I32, c->vocab);
    char pad[40];
    for (uint64_t id = 0; id < c->vocab; id++) {
        const token_slot *t = &slots[id];
        int type = t->text ? t->type : TOKEN_UNUSED;
        if (!t->text) {
            snprintf(pad, sizeof pad, "[PAD%llu]", (unsigned long long)id);
            put_string(&tokens, pad, strlen(pad));
        } else if (t->type == TOKEN_USER_DEFINED && strstr(t->text, "\xe2\x96\x81")) {
            spaced.len = 0;
            spaces_restored(t->text, t->len, &spaced);
            put_string(&tokens, spaced.data ? spaced.data : "", spaced.len);
        } else {
            put_string(&tokens, t->text, t->len);
        }
        ckpt__put_le(&types, (uint32_t)type, 4);
    }
    if (spaced.failed) tokens.failed = true;
    free(spaced.data);
    kv_add_buf(c, "tokenizer.ggml.tokens", &tokens);
    kv_add_buf(c, "tokenizer.ggml.token_type", &types);
    return CKPT_OK;
}

/* tokenizer.ggml.merges, streamed already (none when there are none). */
static ckpt_status write_merges(lc *c, bool with_merges) {
    if (!with_merges || !c->merges_read) return CKPT_OK;
    ckpt_status st = deferred(c, c->merges_st, &c->merges_err);
    if (st || !c->merge_count) return st;
    kv_add_buf(c, "tokenizer.ggml.merges", &c->merges);
    return CKPT_OK;
}

/* gguf.SpecialVocab's special token types, in its order ("eot" and "eom"
 * join when a template's last token is not the EOS). */
enum { SP_BOS, SP_EOS, SP_UNK, SP_SEP, SP_PAD, SP_CLS, SP_MASK, SP_EOT, SP_EOM, SP_COUNT };
static const char *const sp_names[SP_COUNT] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask", "eot", "eom"};
static const char *const sp_keys[SP_COUNT] = {
    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.padding_token_id", NULL /* cls: GGUFWriter has none */,
    "tokenizer.ggml.mask_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"};
static const char *const add_keys[SP_COUNT] = {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token", NULL,
                                               "tokenizer.ggml.add_sep_token"};

typedef struct special_vocab {
    const char *token[SP_COUNT]; /* tokenizer_config's <type>_token, as the script amends it */
    bool types[SP_COUNT];        /* the types looked up */
    int id_order[SP_COUNT], id_count;
    uint64_t ids[SP_COUNT];
    bool has_id[SP_COUNT];
    int add_order[SP_COUNT], add_count;
    bool add[SP_COUNT], has_add[SP_COUNT];
    uint64_t n_vocab; /* ids at or above it are skipped; 0: no bound */
} special_vocab;

static void set_add(special_vocab *s, int t, bool v, bool only_if_unset) {
    if (s->has_add[t] && only_if_unset) return;
    if (!s->has_add[t]) s->add_order[s->add_count++] = t;
    s->has_add[t] = true, s->add[t] = v;
}

static void set_id(special_vocab *s, int t, uint64_t id) {
    if (s->has_id[t] || (s->n_vocab && id >= s->n_vocab)) return;
    s->has_id[t] = true, s->ids[t] = id, s->id_order[s->id_count++] = t;
}

/* A tokenizer_config entry's text: a string, or an AddedToken's content. */
static const char *token_text(const lc *c, const char *key) {
    const ckpt__json_node *v = member(&c->tok_config, 0, key);
    if (v && v->kind == CKPT__JSON_OBJECT) v = member(&c->tok_config, node_index(&c->tok_config, v), "content");
    return v && v->kind == CKPT__JSON_STRING ? v->str : NULL;
}

/* A template item's SpecialToken id, or NULL. */
static const char *template_special(const lc_json *f, uint32_t item) {
    const ckpt__json_node *sp = member(f, item, "SpecialToken");
    const ckpt__json_node *id = sp ? member(f, node_index(f, sp), "id") : NULL;
    return id && id->kind == CKPT__JSON_STRING && *id->str ? id->str : NULL;
}

static bool same(const char *a, const char *b) { return a && b && !strcmp(a, b); }

/* SpecialVocab's reading of a TemplateProcessing post-processor: whether
 * BOS, EOS and SEP are added, and the tokens it implies. */
static void template_processing(lc *c, special_vocab *s, uint32_t proc) {
    const lc_json *f = &c->tokenizer;
    const ckpt__json_node *single = member(f, proc, "single"), *pair = member(f, proc, "pair");
    const char *first = NULL, *last = NULL;
    if (single && single->kind == CKPT__JSON_ARRAY && single->count > 1) {
        uint32_t a = node_index(f, single) + 1, z = a;
        for (uint32_t k = 1; k < single->count; k++) z = f->doc.nodes[z].end;
        if ((first = template_special(f, a))) {
            if (!c->tok_config.present) s->token[SP_BOS] = first;
            else if (!same(first, s->token[SP_BOS]) && !same(first, s->token[SP_CLS])) {
                if (!s->token[SP_BOS]) s->token[SP_BOS] = first;
                if (!s->token[SP_CLS]) s->token[SP_CLS] = first;
            }
            set_add(s, SP_BOS, same(first, s->token[SP_BOS]) || same(first, s->token[SP_CLS]), false);
        }
        if ((last = template_special(f, z))) {
            if (!c->tok_config.present) s->token[SP_EOS] = last;
            else if (!same(last, s->token[SP_EOS])) {
                int extra = !s->types[SP_EOT] ? SP_EOT : !s->types[SP_EOM] ? SP_EOM : -1;
                if (extra >= 0) s->types[extra] = true, s->token[extra] = s->token[SP_EOS];
                s->token[SP_EOS] = last;
            }
            set_add(s, SP_EOS, same(last, s->token[SP_EOS]), false);
        }
    }
    if (!pair || pair->kind != CKPT__JSON_ARRAY || !pair->count) return;
    uint32_t items[64], n = 0;
    for (uint32_t i = node_index(f, pair) + 1, k = 0; k < pair->count && n < 64; k++, i = f->doc.nodes[i].end)
        items[n++] = i;
    uint32_t lo = first && same(template_special(f, items[0]), first) ? 1 : 0, hi = n;
    if (last && same(template_special(f, items[n - 1]), last)) hi = n - 1;
    if (hi <= lo) return;
    const ckpt__json_node *sa = member(f, items[lo], "Sequence"), *sb = member(f, items[hi - 1], "Sequence");
    const ckpt__json_node *ida = sa ? member(f, node_index(f, sa), "id") : NULL;
    const ckpt__json_node *idb = sb ? member(f, node_index(f, sb), "id") : NULL;
    if (!ida || !idb || ida->kind != CKPT__JSON_STRING || idb->kind != CKPT__JSON_STRING || strcmp(ida->str, "A") ||
        strcmp(idb->str, "B") || hi - lo < 3)
        return;
    bool add_sep = false;
    const char *e1 = template_special(f, items[lo + 1]);
    if (e1 && (same(e1, s->token[SP_SEP]) || same(e1, s->token[SP_EOS])) && !last) add_sep = true;
    if (hi - lo - 2 == 2) {
        const char *e2 = template_special(f, items[lo + 2]);
        if (e2 && (same(e2, s->token[SP_SEP]) || same(e2, s->token[SP_EOS]))) add_sep = true;
    }
    set_add(s, SP_SEP, add_sep, false);
    if (add_sep && !s->token[SP_SEP] && c->tok_config.present) s->token[SP_SEP] = s->token[SP_EOS];
}

/* The first added token whose content is `text`: its id. */
static bool added_id(const lc *c, const char *text, uint64_t *id) {
    const lc_json *f = &c->tokenizer;
    const ckpt__json_node *added = member(f, 0, "added_tokens");
    if (!text || !added || added->kind != CKPT__JSON_ARRAY) return false;
    for (uint32_t i = node_index(f, added) + 1, k = 0; k < added->count; k++, i = f->doc.nodes[i].end) {
        const ckpt__json_node *content = member(f, i, "content"), *idn = member(f, i, "id");
        if (content && content->kind == CKPT__JSON_STRING && !strcmp(content->str, text))
            return idn && ckpt__json_u64(idn, id);
    }
    return false;
}

/* tokenizer_config.json's chat template: a string, or none. */
static ckpt_status chat_template(lc *c, const char **text, size_t *len) {
    const ckpt__json_node *tmpl = member(&c->tok_config, 0, "chat_template");
    if (tmpl && tmpl->kind == CKPT__JSON_STRING) *text = tmpl->str, *len = tmpl->len;
    else if (tmpl && tmpl->kind != CKPT__JSON_NULL)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->tok_config.path, "chat_template", tmpl->offset,
                          "ckpt converts a chat template that is one string");
    else if (!tmpl && (ckpt__beneath_has(c->root, "chat_template.jinja") ||
                       ckpt__beneath_has(c->root, "chat_template.json")))
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->tok_config.path, "chat_template", -1,
                          "the chat template is a file of its own, which ckpt does not convert; give it in "
                          "tokenizer_config.json");
    return CKPT_OK;
}

/* tokenizer_config.json's add_<type>_token flags and <type>_token tokens
 * (their ids: the added tokens'), as SpecialVocab reads them. */
static void tokenizer_config_tokens(lc *c, special_vocab *s) {
    for (int t = 0; t < SP_COUNT; t++) {
        if (!s->types[t]) continue;
        char key[32];
        snprintf(key, sizeof key, "add_%s_token", sp_names[t]);
        const ckpt__json_node *a = member(&c->tok_config, 0, key);
        if (a && (a->kind == CKPT__JSON_TRUE || a->kind == CKPT__JSON_FALSE))
            set_add(s, t, a->kind == CKPT__JSON_TRUE, true);
        snprintf(key, sizeof key, "%s_token", sp_names[t]);
        const char *text = t == SP_BOS || t == SP_EOS || t == SP_CLS || t == SP_SEP || s->token[t] ? s->token[t]
                                                                                                 : token_text(c, key);
        uint64_t id;
        if (added_id(c, text, &id)) set_id(s, t, id);
    }
}

/* gguf.SpecialVocab(load_merges=True, n_vocab=n_vocab).add_to_gguf:
 * merges (when `merges`: tokenizer.json's, streamed), special token ids (below n_vocab, unless
 * 0), whether they are added, and the chat template. */
static ckpt_status write_special_vocab(lc *c, bool merges, uint64_t n_vocab) {
    ckpt_status st = write_merges(c, merges);
    if (st) return st;
    special_vocab s;
    memset(&s, 0, sizeof s);
    s.n_vocab = n_vocab;
    for (int t = 0; t < SP_EOT; t++) s.types[t] = true;
    if (c->tok_config.present) {
        s.token[SP_BOS] = token_text(c, "bos_token"), s.token[SP_EOS] = token_text(c, "eos_token");
        s.token[SP_CLS] = token_text(c, "cls_token"), s.token[SP_SEP] = token_text(c, "sep_token");
        if (!s.token[SP_BOS] && s.token[SP_CLS]) s.token[SP_BOS] = s.token[SP_CLS];
        if (!s.token[SP_EOS] && s.token[SP_SEP]) s.token[SP_EOS] = s.token[SP_SEP];
    }
    const lc_json *f = &c->tokenizer;
    const ckpt__json_node *pp = member(f, 0, "post_processor");
    if (pp && pp->kind == CKPT__JSON_OBJECT) {
        const ckpt__json_node *list = member(f, node_index(f, pp), "processors");
        uint32_t first = list && list->kind == CKPT__JSON_ARRAY ? node_index(f, list) + 1 : node_index(f, pp);
        uint32_t count = list && list->kind == CKPT__JSON_ARRAY ? list->count : 1;
        for (uint32_t i = first, k = 0; k < count; k++, i = f->doc.nodes[i].end) {
            const ckpt__json_node *type = member(f, i, "type");
            const char *ty = type && type->kind == CKPT__JSON_STRING ? type->str : "";
            if (!strcmp(ty, "ByteLevel")) {
                set_add(&s, SP_BOS, false, true);
                set_add(&s, SP_EOS, false, true);
            } else if (!strcmp(ty, "TemplateProcessing")) {
                template_processing(c, &s, i);
            } else if (!strcmp(ty, "RobertaProcessing")) {
                return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, f->path, "post_processor", type->offset,
                                  "a RobertaProcessing post-processor is not a llama tokenizer's");
            }
        }
    }
    const char *template_text = NULL;
    size_t template_len = 0;
    if (c->tok_config.present) {
        if ((st = chat_template(c, &template_text, &template_len))) return st;
        tokenizer_config_tokens(c, &s);
    }
    for (int t = 0; t < SP_COUNT; t++) { /* config.json's <type>_token_id */
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", sp_names[t]);
        const ckpt__json_node *v = s.types[t] ? member(&c->config, 0, key) : NULL;
        uint64_t id;
        if (v && ckpt__json_u64(v, &id)) set_id(&s, t, id);
    }
    for (int k = 0; k < s.id_count; k++)
        if (sp_keys[s.id_order[k]]) kv_u32(c, sp_keys[s.id_order[k]], s.ids[s.id_order[k]]);
    for (int k = 0; k < s.add_count; k++)
        if (s.add_order[k] < (int)(sizeof add_keys / sizeof *add_keys) && add_keys[s.add_order[k]])
            kv_bool(c, add_keys[s.add_order[k]], s.add[s.add_order[k]]);
    if (template_text) kv_string(c, "tokenizer.chat_template", template_text, template_len);
    return CKPT_OK;
}

/* The Split pre-tokenizer's regular expression of tokenizer.json: the
 * name llama.cpp knows it by. */
static ckpt_status pre_tokenizer(lc *c, const char **name) {
    lc_json *f = &c->tokenizer;
    const ckpt__json_node *pre = member(f, 0, "pre_tokenizer");
    const ckpt__json_node *list = pre ? member(f, node_index(f, pre), "pretokenizers") : NULL;
    if (list && list->kind == CKPT__JSON_ARRAY) {
        for (uint32_t i = node_index(f, list) + 1, k = 0; k < list->count; k++, i = f->doc.nodes[i].end) {
            const ckpt__json_node *type = member(f, i, "type"), *pattern = member(f, i, "pattern");
            const ckpt__json_node *regex = pattern ? member(f, node_index(f, pattern), "Regex") : NULL;
            if (!type || type->kind != CKPT__JSON_STRING || strcmp(type->str, "Split") || !regex ||
                regex->kind != CKPT__JSON_STRING)
                continue;
            for (const ckpt__lc_pre *p = c->family->pres; p->regex; p++)
                if (!strcmp(p->regex, regex->str)) {
                    *name = p->name;
                    return CKPT_OK;
                }
        }
    }
    return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, f->path, "pre_tokenizer", at(pre),
                      "a BPE pre-tokenizer llama.cpp does not know under a name ckpt knows (ckpt knows Llama 3's)");
}

/* ---- SentencePiece (tokenizer.model) ------------------------------------- */

/* A piece of a SentencePiece model: its text (in the file's bytes), score
 * and type (sentencepiece_model.proto's SentencePiece: piece = 1,
 * score = 2, type = 3, NORMAL by default). */
typedef struct spm_piece {
    const char *text;
    size_t len;
    float score;
    int type;
} spm_piece;

/* A protobuf field's value skipped by its wire type; false for a type no
 * SentencePiece model has (groups). */
static bool pb_skip(ckpt__rd *r, unsigned wire) {
    size_t n;
    switch (wire) {
    case 0: ckpt__rd_uvarint(r); return true;
    case 1: return ckpt__rd_skip(r, 8);
    case 2:
        n = (size_t)ckpt__rd_uvarint(r);
        return !r->bad && n <= ckpt__rd_left(r) && ckpt__rd_skip(r, n);
    case 5: return ckpt__rd_skip(r, 4);
    default: return false;
    }
}

/* One SentencePiece message of `len` bytes at the cursor. */
static bool spm_read_piece(ckpt__rd *r, size_t len, spm_piece *p) {
    size_t end = r->at + len;
    *p = (spm_piece){NULL, 0, 0.0f, TOKEN_NORMAL};
    while (!r->bad && r->at < end) {
        uint64_t tag = ckpt__rd_uvarint(r);
        unsigned field = (unsigned)(tag >> 3), wire = (unsigned)(tag & 7);
        if (field == 1 && wire == 2) {
            size_t n = (size_t)ckpt__rd_uvarint(r);
            if (r->bad || n > end - r->at) return false;
            p->text = (const char *)ckpt__rd_bytes(r, n), p->len = n;
        } else if (field == 2 && wire == 5) {
            uint32_t bits = ckpt__rd_u32(r);
            memcpy(&p->score, &bits, 4);
        } else if (field == 3 && wire == 0) {
            uint64_t t = ckpt__rd_uvarint(r);
            if (t < TOKEN_NORMAL || t > TOKEN_BYTE) return false;
            p->type = (int)t;
        } else if (!pb_skip(r, wire)) {
            return false;
        }
    }
    return !r->bad && r->at == end && p->text;
}

/* tokenizer.model's pieces (ModelProto's field 1, in order), pointing
 * into `bytes`; the rest of the model (trainer and normalizer specs) is
 * not what the script reads. */
static ckpt_status spm_read(lc *c, const char *path, const char *bytes, size_t size, spm_piece **pieces,
                            size_t *count) {
    *pieces = NULL, *count = 0;
    spm_piece *v = NULL;
    size_t n = 0, start = 0;
    bool ok = true;
    for (int pass = 0; ok && pass < 2; pass++) { /* count the pieces, then read them */
        if (pass && !(v = ckpt__calloc(n ? n : 1, sizeof *v))) return ckpt__oom(c->err, path, NULL);
        ckpt__rd r = ckpt__rd_over(bytes, size, 0);
        for (n = 0; ok && !r.bad && ckpt__rd_left(&r);) {
            start = r.at;
            uint64_t tag = ckpt__rd_uvarint(&r);
            if (tag != (1u << 3 | 2)) {
                ok = pb_skip(&r, (unsigned)(tag & 7));
                continue;
            }
            size_t len = (size_t)ckpt__rd_uvarint(&r);
            ok = !r.bad && len <= ckpt__rd_left(&r);
            if (ok && !pass) ckpt__rd_skip(&r, len);
            else if (ok) ok = spm_read_piece(&r, len, &v[n]) && isfinite(v[n].score) &&
                              ckpt__utf8_check((const unsigned char *)v[n].text, v[n].len) == v[n].len;
            n++;
        }
        ok = ok && !r.bad;
    }
    if (!ok || !n) {
        free(v);
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, path, n ? NULL : "pieces", (int64_t)start,
                          n ? "not a SentencePiece model: piece %zu is not a UTF-8 text with a finite score and a "
                              "known type"
                            : "not a SentencePiece model (no pieces)",
                          n ? n - 1 : 0);
    }
    *pieces = v, *count = n;
    return CKPT_OK;
}

typedef struct spm_vocab {
    const char **text; /* NULL: "[PAD<id>]" */
    size_t *len;
    char **owned;      /* texts made here (spaces restored), freed after */
    float *score;
    int *type;
} spm_vocab;

static void spm_set(spm_vocab *v, uint64_t id, const char *text, size_t len, float score, int type) {
    v->text[id] = text, v->len[id] = len, v->score[id] = score, v->type[id] = type;
}

/* added_tokens.json's tokens: user-defined, score -1000, in the file's order. */
static ckpt_status spm_added_tokens_json(lc *c, lc_json *f, spm_vocab *v) {
    ckpt_status st = read_json(c, f, "added_tokens.json", false);
    if (st || !f->present) return st;
    const ckpt__json_node *o = &f->doc.nodes[0];
    for (uint32_t i = 1, k = 0; k < o->count; k++, i = f->doc.nodes[i + 1].end) {
        uint64_t id;
        if (!ckpt__json_u64(&f->doc.nodes[i + 1], &id))
            return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, f->path, f->doc.nodes[i].str, f->doc.nodes[i + 1].offset,
                              "a token id must be a whole number");
        if (id < c->vocab) spm_set(v, id, f->doc.nodes[i].str, f->doc.nodes[i].len, -1000.0f, TOKEN_USER_DEFINED);
    }
    return CKPT_OK;
}

/* tokenizer_config.json's added_tokens_decoder, score -1000: control when
 * special (or, unless `plain`, looking so), else user-defined (unless
 * `plain`, with U+2581 as spaces). */
static ckpt_status spm_added_tokens_decoder(lc *c, spm_vocab *v, bool plain) {
    const lc_json *f = &c->tok_config;
    const ckpt__json_node *d = member(f, 0, "added_tokens_decoder");
    if (!d || d->kind != CKPT__JSON_OBJECT) return CKPT_OK;
    for (uint32_t i = node_index(f, d) + 1, k = 0; k < d->count; k++, i = f->doc.nodes[i + 1].end) {
        const ckpt__json_node *key = &f->doc.nodes[i];
        const ckpt__json_node *content = member(f, i + 1, "content"), *special = member(f, i + 1, "special");
        char *end;
        errno = 0;
        unsigned long long id = strtoull(key->str, &end, 10);
        if (errno || end == key->str || *end || !content || content->kind != CKPT__JSON_STRING)
            return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, f->path, "added_tokens_decoder", key->offset,
                              "an added token is {\"<id>\": {\"content\": …}}");
        if (id >= c->vocab) continue;
        bool control = special && special->kind == CKPT__JSON_TRUE;
        if (control || plain || looks_special(content->str, content->len)) {
            spm_set(v, id, content->str, content->len, -1000.0f, control || !plain ? TOKEN_CONTROL : TOKEN_USER_DEFINED);
            continue;
        }
        ckpt__buf spaced = {0};
        spaces_restored(content->str, content->len, &spaced);
        if (spaced.failed || !(v->owned[id] = spaced.data ? spaced.data : ckpt__malloc(1))) {
            free(spaced.data);
            return ckpt__oom(c->err, f->path, NULL);
        }
        spm_set(v, id, v->owned[id], spaced.len, -1000.0f, TOKEN_USER_DEFINED);
    }
    return CKPT_OK;
}

/* tokenizer.json's added_tokens over the vocabulary (Phi3MiniModel's):
 * score -1000, control when special, else user-defined. */
static ckpt_status spm_tokenizer_json_added(lc *c, spm_vocab *v) {
    const lc_json *f = &c->tokenizer;
    const ckpt__json_node *added = member(f, 0, "added_tokens");
    if (!added || added->kind != CKPT__JSON_ARRAY) return CKPT_OK;
    for (uint32_t i = node_index(f, added) + 1, k = 0; k < added->count; k++, i = f->doc.nodes[i].end) {
        const ckpt__json_node *idn = member(f, i, "id"), *content = member(f, i, "content"),
                              *special = member(f, i, "special");
        uint64_t id;
        if (!idn || !content || content->kind != CKPT__JSON_STRING || !ckpt__json_u64(idn, &id))
            return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, f->path, "added_tokens", f->doc.nodes[i].offset,
                              "an added token needs an id and a content");
        if (id < c->vocab)
            spm_set(v, id, content->str, content->len, -1000.0f,
                    special && special->kind == CKPT__JSON_TRUE ? TOKEN_CONTROL : TOKEN_USER_DEFINED);
    }
    return CKPT_OK;
}

static void spm_write(lc *c, const spm_vocab *v) {
    ckpt__buf tokens = {0}, scores = {0}, types = {0};
    array_head(&tokens, CKPT__GGUF_STRING, c->vocab);
    array_head(&scores, CKPT__GGUF_F32, c->vocab);
    array_head(&types, CKPT__GGUF_I32, c->vocab);
    char pad[40];
    for (uint64_t id = 0; id < c->vocab; id++) {
        if (v->text[id]) {
            put_string(&tokens, v->text[id], v->len[id]);
        } else {
            snprintf(pad, sizeof pad, "[PAD%llu]", (unsigned long long)id);
            put_string(&tokens, pad, strlen(pad));
        }
        uint32_t bits;
        memcpy(&bits, &v->score[id], 4);
        ckpt__put_le(&scores, bits, 4);
        ckpt__put_le(&types, (uint32_t)v->type[id], 4);
    }
    kv_add_buf(c, "tokenizer.ggml.tokens", &tokens);
    kv_add_buf(c, "tokenizer.ggml.scores", &scores);
    kv_add_buf(c, "tokenizer.ggml.token_type", &types);
}

/* The script's _set_vocab_sentencepiece (or Phi3MiniModel.set_vocab):
 * tokenizer.model's pieces (their types as SentencePieceProcessor reports
 * them: user-defined pieces are normal), added_tokens.json and the added
 * tokens of tokenizer_config.json (and Phi-3's of tokenizer.json) over
 * them, "[PAD<id>]" (unused, score -10000) up to vocab_size; then
 * gguf.SpecialVocab without merges. */
static ckpt_status write_sentencepiece(lc *c) {
    char *path = ckpt__path_join(c->dir, "tokenizer.model"), *bytes = NULL;
    if (!path) return ckpt__oom(c->err, c->dir, NULL);
    uint64_t size = 0;
    spm_piece *pieces = NULL;
    size_t count = 0;
    lc_json added = {0};
    spm_vocab v = {0};
    size_t n = c->vocab ? c->vocab : 1;
    ckpt_status st = read_file(c, path, "tokenizer.model", &bytes, &size);
    if (!st) st = spm_read(c, path, bytes, size, &pieces, &count);
    if (!st && (!(v.text = ckpt__calloc(n, sizeof *v.text)) || !(v.len = ckpt__calloc(n, sizeof *v.len)) ||
                !(v.owned = ckpt__calloc(n, sizeof *v.owned)) || !(v.score = ckpt__calloc(n, sizeof *v.score)) ||
                !(v.type = ckpt__calloc(n, sizeof *v.type))))
        st = ckpt__oom(c->err, path, NULL);
    if (!st) {
        for (uint64_t id = 0; id < c->vocab; id++) spm_set(&v, id, NULL, 0, -10000.0f, TOKEN_UNUSED);
        for (size_t id = 0; id < count && id < c->vocab; id++)
            spm_set(&v, id, pieces[id].text, pieces[id].len, pieces[id].score,
                    pieces[id].type == TOKEN_USER_DEFINED ? TOKEN_NORMAL : pieces[id].type);
        st = spm_added_tokens_json(c, &added, &v);
    }
    bool phi3 = c->family->spm_added == CKPT__LC_SPM_PHI3;
    if (!st) st = spm_added_tokens_decoder(c, &v, phi3);
    if (!st && phi3) st = spm_tokenizer_json_added(c, &v);
    if (!st) {
        kv_string(c, "tokenizer.ggml.model", "llama", 5);
        kv_string(c, "tokenizer.ggml.pre", "default", 7);
        spm_write(c, &v);
        st = write_special_vocab(c, false, c->vocab);
    }
    for (size_t id = 0; v.owned && id < n; id++) free(v.owned[id]);
    free(v.text), free(v.len), free(v.owned), free(v.score), free(v.type);
    free_json(&added);
    free(pieces);
    free(bytes);
    free(path);
    return st;
}

/* LlamaModel.set_vocab for a tokenizer.json of byte-level BPE (Llama 3's):
 * the script's _set_vocab_gpt2 and gguf.SpecialVocab. */
static ckpt_status write_tokenizer(lc *c) {
    bool spm = ckpt__beneath_has(c->root, "tokenizer.model");
    ckpt_status st = read_tokenizer_json(c, !spm, !spm);
    if (!st) st = read_json(c, &c->tok_config, "tokenizer_config.json", false);
    if (st) return st;
    const ckpt__json_node *space = member(&c->tok_config, 0, "add_prefix_space");
    if (c->family->add_space_prefix && space && (space->kind == CKPT__JSON_TRUE || space->kind == CKPT__JSON_FALSE))
        kv_bool(c, "tokenizer.ggml.add_space_prefix", space->kind == CKPT__JSON_TRUE);
    if (spm) {
        st = write_sentencepiece(c);
        if (!st && c->family->no_space_prefix_after) kv_bool(c, "tokenizer.ggml.add_space_prefix", false);
        return st;
    }
    lc_json *f = &c->tokenizer;
    const ckpt__json_node *model = member(f, 0, "model");
    uint32_t mi = model ? node_index(f, model) : 0;
    const ckpt__json_node *type = mi ? member(f, mi, "type") : NULL, *vocab = mi ? member(f, mi, "vocab") : NULL;
    const ckpt__json_node *decoder = member(f, 0, "decoder");
    const ckpt__json_node *dtype = decoder ? member(f, node_index(f, decoder), "type") : NULL;
    if (!type || type->kind != CKPT__JSON_STRING || strcmp(type->str, "BPE") || !vocab ||
        vocab->kind != CKPT__JSON_OBJECT)
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, f->path, "model.type", at(type),
                          "ckpt converts BPE tokenizers (model.type \"BPE\" with a vocab)");
    if (!dtype || dtype->kind != CKPT__JSON_STRING || strcmp(dtype->str, "ByteLevel"))
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, f->path, "decoder", at(decoder),
                          "ckpt converts byte-level BPE tokenizers (decoder ByteLevel)");
    const char *pre = NULL;
    if ((st = pre_tokenizer(c, &pre))) return st;
    kv_string(c, "tokenizer.ggml.model", "gpt2", 4);
    kv_string(c, "tokenizer.ggml.pre", pre, strlen(pre));
    if ((st = write_tokens(c))) return st;
    return write_special_vocab(c, true, 0);
}

/* ---- the conversion ------------------------------------------------------ */

static ckpt_status convert(lc *c) {
    ckpt_status st = read_json(c, &c->config, "config.json", true);
    if (!st && ckpt__beneath_has(c->root, "modules.json"))
        return ckpt__fail(c->err, CKPT_E_INVALID_ARGUMENT, c->config.path, "modules.json", -1,
                          "a sentence-transformers model (modules.json): the script adds its pooling, which ckpt "
                          "does not convert");
    if (!st) st = find_family(c);
    if (!st) st = refuse_variant(c);
    if (!st) st = check_rope(c);
    if (!st) st = read_hparams(c);
    if (!st) st = read_expert_hparams(c);
    if (st) return st;
    if (c->dtype == CKPT_DTYPE_INVALID) c->dtype = auto_dtype(c->plan);
    ckpt__plan_refresh(c->plan);
    st = generate_rope_freqs(c);
    if (!st) st = drop_tensors(c);
    for (size_t k = 0; !st && k < c->plan->selected_count; k++) st = plan_tensor(c, c->plan->selected[k]);
    if (!st) st = stack_experts(c);
    if (!st && c->mix) st = apply_mix(c);
    if (st) return st;
    /* Model.__init__ and prepare_metadata: general.* first */
    kv_string(c, "general.architecture", c->family->name, strlen(c->family->name));
    kv_string(c, "general.type", "model", 5);
    ckpt__buf name = {0};
    model_name(c->dir, &name);
    kv_string(c, "general.name", name.data ? name.data : "", name.len);
    free(name.data);
    /* gguf.size_label: "<experts>x<size>" when there are stacks of experts */
    char label[48], size[40];
    uint64_t params = c->shared_params + c->expert_params;
    size_label(params, size, sizeof size);
    if (c->expert_params) snprintf(label, sizeof label, "%llux%s", (unsigned long long)c->n_experts, size);
    else snprintf(label, sizeof label, "%s", size);
    if (params) kv_string(c, "general.size_label", label, strlen(label));
    for (const ckpt__lc_kv *r = c->family->kvs; !st && r->key; r++) st = kv_rule(c, r);
    if (st) return st;
    if (c->mix) { /* llama-quantize sets these two again: last */
        if ((st = write_tokenizer(c))) return st;
        kv_u32(c, "general.quantization_version", 2);
        kv_u32(c, "general.file_type", c->mix);
        return CKPT_OK;
    }
    kv_u32(c, "general.quantization_version", 2);
    return write_tokenizer(c);
}

static ckpt_status llamacpp_plan(ckpt_plan *plan, const char *model_dir, ckpt_dtype dtype, unsigned mix,
                                 char **metadata_json, ckpt_error *err) {
    if (!plan || !model_dir)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan and model_dir are required");
    if (metadata_json) *metadata_json = NULL;
    if (plan->kvs.count) /* the key-values are the plan's once: a second conversion would repeat every key */
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, model_dir, NULL, -1,
                          "this plan is already a llama.cpp conversion: make a new plan");
    if (dtype != CKPT_DTYPE_INVALID && dtype != CKPT_F32 && dtype != CKPT_F16 && dtype != CKPT_BF16 &&
        dtype != CKPT_Q8_0)
        return ckpt__fail(err, CKPT__D(UNSUPPORTED_DTYPE), model_dir, NULL, -1,
                          "llama.cpp's conversion writes f32, f16, bf16 or q8_0 (and "
                          "llama-quantize's mixes: ckpt_gguf_llamacpp_plan_mix), not %s", ckpt_dtype_name(dtype));
    lc c;
    memset(&c, 0, sizeof c);
    c.plan = plan, c.dir = model_dir, c.err = err, c.dtype = mix ? CKPT_F32 : dtype, c.mix = mix;
    ckpt_status st = ckpt__beneath_open_root(model_dir, &c.root, err);
    if (!st) st = convert(&c);
    if (!st) st = c.kv_failed;
    if (!st) st = hand_kvs(&c, metadata_json);
    free_json(&c.config);
    free_json(&c.tokenizer);
    free_json(&c.tok_config);
    for (size_t i = 0; i < c.kv_count; i++) {
        free(c.kv_keys[i]);
        if (!c.kvs_handed) free((void *)c.kvs[i].bytes);
    }
    free(c.kv_keys);
    free(c.kvs);
    free(c.text.data);
    free(c.slots);
    ckpt__arena_free(&c.vocab_text);
    free(c.merges.data);
    free(c.expert_at);
    ckpt__beneath_close(c.root);
    return st;
}

ckpt_status ckpt_gguf_llamacpp_plan(ckpt_plan *plan, const char *model_dir, ckpt_dtype dtype, char **metadata_json,
                                    ckpt_error *err) {
    return llamacpp_plan(plan, model_dir, dtype, 0, metadata_json, err);
}

ckpt_status ckpt_gguf_llamacpp_plan_mix(ckpt_plan *plan, const char *model_dir, const char *mix, char **metadata_json,
                                        ckpt_error *err) {
    unsigned ftype = ckpt__lc_mix_from_name(mix);
    if (!ftype) {
        if (metadata_json) *metadata_json = NULL;
        return ckpt__fail(err, CKPT__D(UNSUPPORTED_DTYPE), model_dir, NULL, -1,
                          "llama-quantize's mixes ckpt writes are q4_k_s, q4_k_m, q5_k_s, q5_k_m and q6_k, not %s",
                          mix ? mix : "none");
    }
    return llamacpp_plan(plan, model_dir, CKPT_F32, ftype, metadata_json, err);
}
