/*
 * llamacpp_hf_tokenizer.c — a llama.cpp GGUF's tokenizer as Hugging Face's
 * tokenizer.json and tokenizer_config.json (llamacpp_hf.h), the files
 * convert_hf_to_gguf.py read it from, made of the key-values it wrote
 * (tokenizer.ggml.*), as transformers' own GGUF load builds its tokenizer
 * (integrations/gguf/gguf_tokenizer_mapping.py) and as the original
 * tokenizer.json spells what the GGUF names:
 *
 *   "gpt2"   byte-level BPE: the vocabulary and merges as written (a token
 *            outside the byte alphabet respelled byte by byte), the
 *            pre-tokenizer's split of tokenizer.ggml.pre (llama-bpe: Llama
 *            3's, with its ignore_merges; qwen2: Qwen2's, with its NFC)
 *   "llama"  SentencePiece's BPE with byte fallback: the merges, which the
 *            file does not hold, rebuilt from the vocabulary and its scores
 *            (transformers' generate_merges, in its order); Metaspace (Phi-3:
 *            the prefix and spaces as a normalizer, as its tokenizer.json)
 *
 * Control tokens (and the unknown token) are special added tokens, user-
 * defined ones plain added tokens, in tokenizer.json and again in
 * tokenizer_config.json's added_tokens_decoder (which the script reads
 * back); BOS/EOS added as tokenizer.ggml.add_* says.  The JSON is written
 * as the arrays are walked: no tree of the vocabulary is built.
 *
 * A "llama" vocabulary also gets tokenizer.model, the SentencePiece
 * ModelProto the script read it from (put_sentencepiece): slow tokenizers
 * and sentencepiece itself load that file, not tokenizer.json.
 */
#include "llamacpp_hf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../catalog_internal.h"
#include "../plan_internal.h"
#include "../base/cursor.h"
#include "../base/json.h"
#include "ckpt_gguf.h"
#include "llamacpp/arch.h"

/* llama.cpp's token types (gguf-py's TokenType). */
enum { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_USER_DEFINED = 4, TOK_UNUSED = 5, TOK_BYTE = 6 };

/* The pre-tokenizer splits transformers knows, by tokenizer.ggml.pre. */
#define LLAMA3_SPLIT                                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"          \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_SPLIT                                                                                                   \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"               \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define GPT4O_SPLIT                                                                                                   \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?" \
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?" \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct pre_split {
    const char *pre, *regex;
    const char *normalizer; /* JSON, or NULL */
    bool ignore_merges;     /* the original tokenizer.json's */
} pre_split;

static const pre_split pre_splits[] = {
    {"llama-bpe", LLAMA3_SPLIT, NULL, true}, {"llama3", LLAMA3_SPLIT, NULL, true},
    {"llama-v3", LLAMA3_SPLIT, NULL, true},  {"smaug-bpe", LLAMA3_SPLIT, NULL, false},
    {"dbrx", LLAMA3_SPLIT, NULL, false},     {"falcon3", LLAMA3_SPLIT, NULL, false},
    {"qwen2", QWEN2_SPLIT, "{\"type\": \"NFC\"}", false},
    {"deepseek-r1-qwen", QWEN2_SPLIT, "{\"type\": \"NFC\"}", false},
    {"megrez", QWEN2_SPLIT, "{\"type\": \"NFC\"}", false},
    {"gpt-4o", GPT4O_SPLIT, NULL, false},    {"llama4", GPT4O_SPLIT, NULL, false},
};

typedef struct tok {
    const ckpt_catalog *catalog;
    const char *path;
    ckpt_error *err;
    bool spm;         /* "llama": SentencePiece's BPE */
    bool phi3;        /* the prefix space as a normalizer */
    const pre_split *split;
    uint64_t count;
    char **text;      /* each token, NUL-terminated (one block) */
    char *block;
    uint32_t *first;  /* per id: the id of the token's first occurrence */
    uint32_t *last;   /* per first occurrence: the token's last id (its id in the vocabulary) */
    ckpt__name_table table;
    const int32_t *types;       /* tokenizer.ggml.token_type, or NULL */
    const unsigned char *scores; /* tokenizer.ggml.scores (f32), or NULL */
    int64_t bos, eos, unk, pad;
    bool add_bos, add_eos;
    const ckpt__lc_rstrip *rstrip; /* the family's rule, when general.name says llama.cpp applies it; or NULL */
} tok;

/* A tokenizer key-value ckpt cannot write: the file, the key, why. */
static ckpt_status bad(tok *t, const char *key, const char *fmt, ...) CKPT__PRINTF(3, 4);
static ckpt_status bad(tok *t, const char *key, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ckpt__fail(t->err, CKPT_E_INVALID_ARGUMENT, t->path, NULL, -1, "key '%s': %s", key, what);
}

/* A string key-value, or NULL. */
static const char *string_kv(const tok *t, const char *key) {
    const ckpt_kv *kv = NULL;
    return ckpt__catalog_kv_encoded(t->catalog, key, &kv) && kv->type == CKPT_KV_STRING ? kv->string : NULL;
}

static bool bool_kv(const tok *t, const char *key, bool otherwise) {
    const ckpt_kv *kv = NULL;
    return ckpt__catalog_kv_encoded(t->catalog, key, &kv) && kv->type == CKPT_KV_BOOL ? kv->u != 0 : otherwise;
}

/* A token id key-value (-1 when absent), within the vocabulary. */
static ckpt_status token_id(tok *t, const char *key, int64_t *out) {
    const ckpt_kv *kv = NULL;
    *out = -1;
    if (!ckpt__catalog_kv_encoded(t->catalog, key, &kv)) return CKPT_OK;
    if (kv->type == CKPT_KV_STRING || kv->type == CKPT_KV_ARRAY || kv->type == CKPT_KV_F32 ||
        kv->type == CKPT_KV_F64 || kv->type == CKPT_KV_BOOL || kv->u >= t->count)
        return bad(t, key, "%llu is no token of tokenizer.ggml.tokens (%llu tokens)", (unsigned long long)kv->u,
                   (unsigned long long)t->count);
    *out = (int64_t)kv->u;
    return CKPT_OK;
}

/* A number array of the vocabulary's length, or NULL when absent. */
static ckpt_status per_token(tok *t, const char *key, ckpt_kv_type type, const void **out) {
    const ckpt_kv *kv = NULL;
    *out = NULL;
    if (!ckpt__catalog_kv_encoded(t->catalog, key, &kv)) return CKPT_OK;
    if (kv->type != CKPT_KV_ARRAY || kv->element_type != type || kv->count != t->count)
        return bad(t, key, "not an array of %s of one per token (%llu)", ckpt_kv_type_name(type),
                   (unsigned long long)t->count);
    *out = kv->data;
    return CKPT_OK;
}

/* ---- the vocabulary ------------------------------------------------------- */

/* tokenizer.ggml.tokens: each token copied NUL-terminated (checked UTF-8),
 * and a hash of them (a token twice: its first id found, its last kept). */
static ckpt_status read_tokens(tok *t) {
    static const char key[] = "tokenizer.ggml.tokens";
    const ckpt_kv *kv = NULL;
    const ckpt__encoded *e = ckpt__catalog_kv_encoded(t->catalog, key, &kv);
    if (!e || kv->type != CKPT_KV_ARRAY || kv->element_type != CKPT_KV_STRING || !kv->count || kv->count > UINT32_MAX - 1)
        return bad(t, key, "%s: a tokenizer needs an array of strings, one per token", e ? "not such an array" : "missing");
    ckpt__rd r = ckpt__rd_over(e->bytes, e->len, 0);
    ckpt__rd_skip(&r, 16); /* type, element type, count */
    t->count = kv->count;
    t->text = malloc(t->count * sizeof *t->text);
    t->first = malloc(t->count * sizeof *t->first);
    t->last = malloc(t->count * sizeof *t->last);
    t->block = malloc(e->len); /* each string's 8-byte length is room for its NUL */
    if (!t->text || !t->first || !t->last || !t->block || !ckpt__name_table_init(&t->table, t->count))
        return ckpt__oom(t->err, t->path, key);
    char *at = t->block;
    for (uint64_t i = 0; i < t->count; i++) {
        uint64_t len = ckpt__rd_u64(&r);
        const unsigned char *s = ckpt__rd_bytes(&r, (size_t)len);
        if (!s || ckpt__utf8_check(s, (size_t)len) != len || memchr(s, 0, (size_t)len))
            return bad(t, key, "token %llu is not text (UTF-8 without NUL)", (unsigned long long)i);
        memcpy(at, s, (size_t)len);
        at[len] = 0;
        t->text[i] = at;
        at += len + 1;
        uint32_t seen;
        if (ckpt__name_table_insert(&t->table, (const char *const *)t->text, sizeof *t->text, (uint32_t)i, &seen))
            seen = (uint32_t)i;
        t->first[i] = seen;
        t->last[seen] = (uint32_t)i;
    }
    return CKPT_OK;
}

/* The id the vocabulary gives a text (its last), or -1. */
static int64_t vocab_id(const tok *t, const char *s) {
    int64_t f = ckpt__name_table_find(&t->table, (const char *const *)t->text, sizeof *t->text, s);
    return f < 0 ? -1 : (int64_t)t->last[f];
}

static int32_t type_of(const tok *t, uint64_t i) {
    return t->types ? (int32_t)ckpt__le32((const unsigned char *)(t->types) + 4 * i) : TOK_NORMAL;
}

/* ---- byte-level spelling ---------------------------------------------------- */

/* GPT-2's bytes_to_unicode: the code point byte b is spelled with. */
static unsigned byte_char(unsigned b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    unsigned n = 0;
    for (unsigned k = 0; k < b; k++) n += !((k >= 33 && k <= 126) || (k >= 161 && k <= 172) || k >= 174);
    return 256 + n;
}

/* Whether a token is spelled in the byte alphabet (valid UTF-8 given). */
static bool byte_spelled(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        unsigned cp, n = *p < 0x80 ? 1 : *p < 0xE0 ? 2 : *p < 0xF0 ? 3 : 4;
        cp = n == 1 ? *p : *p & (0x7F >> n);
        for (unsigned k = 1; k < n; k++) cp = cp << 6 | (p[k] & 0x3F);
        p += n;
        if (!((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255) ||
              (cp >= 256 && cp <= 323)))
            return false;
    }
    return true;
}

/* A code point below U+0800 (the byte alphabet's) in UTF-8. */
static void put_utf8(ckpt__buf *b, unsigned cp) {
    char u[2] = {(char)cp, 0};
    if (cp >= 0x80) u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F));
    ckpt__buf_append(b, u, cp < 0x80 ? 1 : 2);
}

/* A vocabulary key: the token, or (byte-level, outside the alphabet: a
 * mislabelled added token) its bytes respelled, as transformers does. */
static void put_vocab_key(const tok *t, ckpt__buf *b, const char *s) {
    if (t->spm || byte_spelled(s)) {
        ckpt__buf_json_string(b, s);
        return;
    }
    ckpt__buf tmp = {0};
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) put_utf8(&tmp, byte_char(*p));
    ckpt__buf_json_string_n(b, tmp.data ? tmp.data : "", tmp.len);
    b->failed |= tmp.failed;
    free(tmp.data);
}

/* ---- merges ---------------------------------------------------------------- */

typedef struct merge {
    uint32_t left, right; /* vocabulary ids */
    float score;
    uint32_t left_chars, right_chars, seq;
} merge;

static uint32_t chars(const char *s, size_t len) {
    uint32_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

static int by_pieces(const void *a, const void *b) {
    const merge *x = a, *y = b;
    if (x->left != y->left) return x->left < y->left ? -1 : 1;
    return x->right < y->right ? -1 : x->right > y->right;
}

/* generate_merges' order: score, then the pieces' lengths, all
 * descending; ties in the order made (Python's sort is stable). */
static int by_rank(const void *a, const void *b) {
    const merge *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->left_chars != y->left_chars) return x->left_chars > y->left_chars ? -1 : 1;
    if (x->right_chars != y->right_chars) return x->right_chars > y->right_chars ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static float score_of(const tok *t, uint64_t i) {
    uint32_t bits = ckpt__le32(t->scores + 4 * i);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Cutting a token of L bytes at each place looks up pieces of L bytes and
 * can make L merges of L bytes each: work and output grow as L².  Real
 * SentencePiece pieces are short (16 characters by default), so a whole
 * vocabulary stays far below this bound (Gemma's 256k tokens: about
 * 16 MB); a file of a few long tokens made to blow up the merges does not. */
#define MERGE_WORK_LIMIT ((uint64_t)256 << 20)

/* transformers' generate_merges(vocab, scores): every token cut in two
 * pieces of the vocabulary is a merge of the token's score. */
static ckpt_status make_merges(tok *t, merge **out, size_t *n_out) {
    uint64_t work = 0;
    for (uint64_t i = 0; i < t->count && work <= MERGE_WORK_LIMIT; i++) {
        uint64_t len = strlen(t->text[i]);
        if (t->first[i] == i) work += len * len;
    }
    if (work > MERGE_WORK_LIMIT)
        return ckpt__fail(t->err, CKPT_E_LIMIT, t->path, NULL, -1,
                          "key 'tokenizer.ggml.tokens': the tokens are too long to rebuild merges from (the sum "
                          "of their squared lengths passes %llu bytes); a SentencePiece vocabulary's pieces are short",
                          (unsigned long long)MERGE_WORK_LIMIT);
    size_t n = 0, cap = 0;
    merge *m = NULL;
    char *scratch = malloc(strlen(t->text[0]) + 1);
    size_t scratch_cap = strlen(t->text[0]) + 1;
    for (uint64_t i = 0; i < t->count; i++) {
        if (t->first[i] != i) continue; /* a dict's key: its first place, its last value */
        const char *s = t->text[i];
        size_t len = strlen(s), local = n;
        float score = score_of(t, t->last[i]);
        if (len + 1 > scratch_cap) {
            free(scratch);
            scratch = malloc(scratch_cap = len + 1);
        }
        if (!scratch) break;
        for (size_t k = 1; k < len; k++) {
            if (((unsigned char)s[k] & 0xC0) == 0x80) continue; /* cut between characters */
            memcpy(scratch, s, k);
            scratch[k] = 0;
            int64_t l = vocab_id(t, scratch), r = l < 0 ? -1 : vocab_id(t, s + k);
            if (r < 0) continue;
            if (n == cap) {
                merge *g = realloc(m, (cap = cap ? 2 * cap : 4096) * sizeof *m);
                if (!g) goto oom;
                m = g;
            }
            m[n++] = (merge){(uint32_t)l, (uint32_t)r, score, chars(s, k), chars(s + k, len - k), 0};
        }
        if (n > local) qsort(m + local, n - local, sizeof *m, by_pieces);
    }
    if (!scratch) goto oom;
    free(scratch);
    for (size_t k = 0; k < n; k++) m[k].seq = (uint32_t)k;
    if (n) qsort(m, n, sizeof *m, by_rank);
    *out = m, *n_out = n;
    return CKPT_OK;
oom:
    free(scratch);
    free(m);
    return ckpt__oom(t->err, t->path, "the tokenizer's merges");
}

/* tokenizer.ggml.merges ("a b" each) as pairs. */
static ckpt_status put_file_merges(tok *t, ckpt__buf *b, const ckpt__encoded *e, const ckpt_kv *kv) {
    static const char key[] = "tokenizer.ggml.merges";
    if (kv->type != CKPT_KV_ARRAY || kv->element_type != CKPT_KV_STRING)
        return bad(t, key, "not an array of strings");
    ckpt__rd r = ckpt__rd_over(e->bytes, e->len, 0);
    ckpt__rd_skip(&r, 16);
    for (uint64_t i = 0; i < kv->count; i++) {
        uint64_t len = ckpt__rd_u64(&r);
        const char *s = (const char *)ckpt__rd_bytes(&r, (size_t)len);
        const char *space = s ? memchr(s, ' ', (size_t)len) : NULL;
        if (!space || ckpt__utf8_check((const unsigned char *)s, (size_t)len) != len)
            return bad(t, key, "merge %llu is not two tokens with a space between", (unsigned long long)i);
        ckpt__buf_puts(b, i ? ", [" : "[");
        ckpt__buf_json_string_n(b, s, (size_t)(space - s));
        ckpt__buf_puts(b, ", ");
        ckpt__buf_json_string_n(b, space + 1, (size_t)(s + len - space - 1));
        ckpt__buf_puts(b, "]");
    }
    return CKPT_OK;
}

static ckpt_status put_merges(tok *t, ckpt__buf *b) {
    const ckpt_kv *kv = NULL;
    const ckpt__encoded *e = ckpt__catalog_kv_encoded(t->catalog, "tokenizer.ggml.merges", &kv);
    ckpt__buf_puts(b, "[");
    ckpt_status st;
    if (e) st = put_file_merges(t, b, e, kv);
    else if (!t->scores)
        st = bad(t, "tokenizer.ggml.scores", "missing: the merges are made of the tokens' scores");
    else {
        merge *m = NULL;
        size_t n = 0;
        if ((st = make_merges(t, &m, &n))) return st;
        for (size_t k = 0; k < n; k++) {
            ckpt__buf_puts(b, k ? ", [" : "[");
            put_vocab_key(t, b, t->text[m[k].left]);
            ckpt__buf_puts(b, ", ");
            put_vocab_key(t, b, t->text[m[k].right]);
            ckpt__buf_puts(b, "]");
        }
        free(m);
    }
    ckpt__buf_puts(b, "]");
    return st;
}

/* ---- tokenizer.json --------------------------------------------------------- */

static bool is_added(const tok *t, uint64_t i, bool *special) {
    int32_t type = type_of(t, i);
    *special = type == TOK_CONTROL || type == TOK_UNKNOWN;
    if (t->first[i] != i) return false;
    /* a byte-level control token spelled outside the alphabet is a
     * mislabel transformers leaves out */
    if (*special) return t->spm || byte_spelled(t->text[i]);
    return type == TOK_USER_DEFINED && (t->spm || byte_spelled(t->text[i]));
}

static bool listed(const char *const *list, const char *s) {
    for (; list && *list; list++)
        if (!strcmp(*list, s)) return true;
    return false;
}

/* Whether llama.cpp strips the spaces after token i (ckpt__lc_rstrip). */
static bool rstrip_of(const tok *t, uint64_t i) {
    if (!t->rstrip || listed(t->rstrip->except, t->text[i])) return false;
    int32_t type = type_of(t, i);
    return type == TOK_CONTROL || type == TOK_USER_DEFINED || type == TOK_UNKNOWN ||
           listed(t->rstrip->also, t->text[i]);
}

/*
 * The added tokens, written twice: tokenizer.json's added_tokens (a list,
 * each entry's keys in the tokenizers library's order) and
 * tokenizer_config.json's added_tokens_decoder (`decoder`: a map by id,
 * as transformers' save_pretrained writes it — json.dumps(indent=2,
 * sort_keys=True): ids in order, each entry's keys sorted).  The GGUF
 * keeps no lstrip, rstrip or normalized: all false, but the rstrip llama.cpp
 * gives a family's tokens by model name (rstrip_of: Phi-3's chat tokens,
 * whose spaces after them the original tokenizer strips too).  convert_hf_to_gguf.py
 * reads a SentencePiece vocabulary's added tokens from the map alone (not
 * tokenizer.json): each listed token it types control where "special" (or
 * where it looks special, <|...|>), user-defined otherwise, and scores
 * -1000, over what tokenizer.model says; without it the way back to GGUF
 * gave <unk>, <s>, </s> SentencePiece's types and scores instead of the
 * ones the script gave them the first time.  The map leaves the unknown
 * token out unless typed control: listed, the script would make an UNKNOWN
 * one control (tokenizer.json still lists it, so transformers matches it
 * whole).
 */
static void put_added(const tok *t, ckpt__buf *b, bool decoder) {
    bool any = false, special;
    ckpt__buf_puts(b, decoder ? "{" : "[");
    for (uint64_t i = 0; i < t->count; i++) {
        if (!is_added(t, i, &special) || (decoder && type_of(t, i) == TOK_UNKNOWN)) continue;
        ckpt__buf_puts(b, any ? ",\n    " : "\n    ");
        if (decoder) {
            char id[24];
            snprintf(id, sizeof id, "%u", t->last[i]);
            ckpt__buf_json_string(b, id);
            ckpt__buf_puts(b, ": {\n      \"content\": ");
        } else {
            ckpt__buf_puts(b, "{\"id\": ");
            ckpt__buf_u64(b, t->last[i]);
            ckpt__buf_puts(b, ", \"content\": ");
        }
        put_vocab_key(t, b, t->text[i]);
        const char *rstrip = rstrip_of(t, i) ? "true" : "false";
        ckpt__buf_puts(b, decoder ? ",\n      \"lstrip\": false,\n      \"normalized\": false,\n      \"rstrip\": "
                                  : ", \"single_word\": false, \"lstrip\": false, \"rstrip\": ");
        ckpt__buf_puts(b, rstrip);
        ckpt__buf_puts(b, decoder ? ",\n      \"single_word\": false,\n      \"special\": "
                                  : ", \"normalized\": false, \"special\": ");
        ckpt__buf_puts(b, special ? "true" : "false");
        ckpt__buf_puts(b, decoder ? "\n    }" : "}");
        any = true;
    }
    ckpt__buf_puts(b, decoder ? (any ? "\n  }" : "}") : (any ? "\n  ]" : "]"));
}

static void put_special(const tok *t, ckpt__buf *b, int64_t id, unsigned type_id) {
    ckpt__buf_puts(b, "{\"SpecialToken\": {\"id\": ");
    ckpt__buf_json_string(b, t->text[id]);
    ckpt__buf_puts(b, type_id ? ", \"type_id\": 1}}" : ", \"type_id\": 0}}");
}

/* BOS and EOS around each sequence, as tokenizer.ggml.add_* say. */
static void put_post_processor(const tok *t, ckpt__buf *b) {
    int64_t bos = t->add_bos ? t->bos : -1, eos = t->add_eos ? t->eos : -1;
    ckpt__buf_puts(b, "{\"type\": \"TemplateProcessing\", \"single\": [");
    for (unsigned pass = 0; pass < 2; pass++) {
        if (pass) ckpt__buf_puts(b, ", \"pair\": [");
        for (unsigned seq = 0; seq <= pass; seq++) {
            if (seq) ckpt__buf_puts(b, ", ");
            if (bos >= 0) put_special(t, b, bos, seq), ckpt__buf_puts(b, ", ");
            ckpt__buf_puts(b, seq ? "{\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}" : "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}");
            if (eos >= 0) ckpt__buf_puts(b, ", "), put_special(t, b, eos, seq);
        }
        ckpt__buf_puts(b, "]");
    }
    ckpt__buf_puts(b, ", \"special_tokens\": {");
    int64_t ids[2] = {bos, eos == bos ? -1 : eos};
    for (int k = 0, any = 0; k < 2; k++) {
        if (ids[k] < 0) continue;
        ckpt__buf_puts(b, any++ ? ", " : "");
        ckpt__buf_json_string(b, t->text[ids[k]]);
        ckpt__buf_puts(b, ": {\"id\": ");
        ckpt__buf_json_string(b, t->text[ids[k]]);
        ckpt__buf_puts(b, ", \"ids\": [");
        ckpt__buf_u64(b, (uint64_t)ids[k]);
        ckpt__buf_puts(b, "], \"tokens\": [");
        ckpt__buf_json_string(b, t->text[ids[k]]);
        ckpt__buf_puts(b, "]}");
    }
    ckpt__buf_puts(b, "}}");
}

static void put_pipeline(const tok *t, ckpt__buf *b) {
    bool prefix = bool_kv(t, "tokenizer.ggml.add_space_prefix", true);
    ckpt__buf_puts(b, ",\n  \"normalizer\": ");
    if (t->phi3)
        ckpt__buf_puts(b, "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\xe2\x96\x81\"}, "
                          "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xe2\x96\x81\"}]}");
    else ckpt__buf_puts(b, !t->spm && t->split->normalizer ? t->split->normalizer : "null");
    ckpt__buf_puts(b, ",\n  \"pre_tokenizer\": ");
    if (t->phi3) ckpt__buf_puts(b, "null");
    else if (t->spm) {
        ckpt__buf_puts(b, "{\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", \"prepend_scheme\": ");
        ckpt__buf_puts(b, prefix ? "\"first\", \"split\": false}" : "\"never\", \"split\": false}");
    } else {
        ckpt__buf_puts(b, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": ");
        ckpt__buf_json_string(b, t->split->regex);
        ckpt__buf_puts(b, "}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
                          "\"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": false}]}");
    }
    ckpt__buf_puts(b, ",\n  \"post_processor\": ");
    put_post_processor(t, b);
    ckpt__buf_puts(b, ",\n  \"decoder\": ");
    if (!t->spm)
        ckpt__buf_puts(b, "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true}");
    else {
        ckpt__buf_puts(b, "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": "
                          "\"\xe2\x96\x81\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}");
        ckpt__buf_puts(b, prefix ? ", {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}" : "]}");
    }
}

static ckpt_status put_model(tok *t, ckpt__buf *b) {
    ckpt__buf_puts(b, ",\n  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": ");
    if (t->spm && t->unk >= 0) ckpt__buf_json_string(b, t->text[t->unk]);
    else ckpt__buf_puts(b, "null");
    ckpt__buf_puts(b, ", \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": ");
    ckpt__buf_puts(b, t->spm ? "true, \"byte_fallback\": true" : "false, \"byte_fallback\": false");
    ckpt__buf_puts(b, ", \"ignore_merges\": ");
    ckpt__buf_puts(b, !t->spm && t->split->ignore_merges ? "true" : "false");
    ckpt__buf_puts(b, ",\n    \"vocab\": {");
    for (uint64_t i = 0, any = 0; i < t->count; i++) {
        if (t->first[i] != i) continue;
        ckpt__buf_puts(b, any++ ? ", " : "");
        put_vocab_key(t, b, t->text[i]);
        ckpt__buf_puts(b, ": ");
        ckpt__buf_u64(b, t->last[i]);
    }
    ckpt__buf_puts(b, "},\n    \"merges\": ");
    ckpt_status st = put_merges(t, b);
    ckpt__buf_puts(b, "}\n}\n");
    return st;
}

/* ---- tokenizer_config.json -------------------------------------------------- */

static void put_config(const tok *t, ckpt__buf *b) {
    ckpt__buf_puts(b, "{\n  \"add_bos_token\": ");
    ckpt__buf_puts(b, t->add_bos ? "true" : "false");
    ckpt__buf_puts(b, ",\n  \"add_eos_token\": ");
    ckpt__buf_puts(b, t->add_eos ? "true" : "false");
    ckpt__buf_puts(b, ",\n  \"added_tokens_decoder\": ");
    put_added(t, b, true);
    static const char *const names[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    const int64_t ids[] = {t->bos, t->eos, t->unk, t->pad};
    for (int k = 0; k < 4; k++) { /* null where the file names none: no class default stands in */
        ckpt__buf_puts(b, ",\n  ");
        ckpt__buf_json_string(b, names[k]);
        ckpt__buf_puts(b, ": ");
        if (ids[k] >= 0) put_vocab_key(t, b, t->text[ids[k]]);
        else ckpt__buf_puts(b, "null");
    }
    const char *template = string_kv(t, "tokenizer.chat_template");
    if (template) {
        const ckpt_kv *kv = NULL;
        ckpt__catalog_kv_encoded(t->catalog, "tokenizer.chat_template", &kv);
        ckpt__buf_puts(b, ",\n  \"chat_template\": ");
        ckpt__buf_json_string_n(b, template, (size_t)kv->string_len);
    }
    ckpt__buf_puts(b, ",\n  \"clean_up_tokenization_spaces\": false,\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\"\n}\n");
}

/* ---- tokenizer.model --------------------------------------------------------- */

/* Protobuf's wire format, as much of it as sentencepiece_model.proto's
 * ModelProto needs: varints, length-delimited bytes, 32-bit floats. */
enum { PB_VARINT = 0, PB_BYTES = 2, PB_FIXED32 = 5 };

static void pb_varint(ckpt__buf *b, uint64_t v) {
    char out[10];
    size_t n = 0;
    for (; v >= 0x80; v >>= 7) out[n++] = (char)(v | 0x80);
    out[n++] = (char)v;
    ckpt__buf_append(b, out, n);
}

static void pb_tag(ckpt__buf *b, unsigned field, unsigned wire) { pb_varint(b, (uint64_t)field << 3 | wire); }

/* An int32 field: a negative one as its sign-extended 64 bits (ten bytes), as protobuf writes it. */
static void pb_int(ckpt__buf *b, unsigned field, int64_t v) {
    pb_tag(b, field, PB_VARINT);
    pb_varint(b, (uint64_t)v);
}

static void pb_bytes(ckpt__buf *b, unsigned field, const char *s, size_t n) {
    pb_tag(b, field, PB_BYTES);
    pb_varint(b, n);
    ckpt__buf_append(b, s, n);
}

static void pb_string(ckpt__buf *b, unsigned field, const char *s) { pb_bytes(b, field, s, strlen(s)); }

/* Whether a byte piece is spelled as SentencePiece spells one ("<0x%02X>"):
 * it refuses to load any other. */
static bool byte_piece(const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    return strlen(s) == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && s[3] && strchr(hex, s[3]) && s[4] &&
           strchr(hex, s[4]);
}

/* A token's SentencePiece type (llama.cpp's numbers are SentencePiece's):
 * the unknown token's UNKNOWN (the script types tokenizer_config.json's
 * special tokens, <unk> among them, as control ones); 0 where SentencePiece
 * cannot load the vocabulary (a piece twice or empty, a type it has not, a
 * byte piece otherwise spelled, a second unknown piece; put_pieces refuses
 * the whole vocabulary's faults). */
static int32_t piece_type(const tok *t, uint64_t i) {
    int32_t type = (int64_t)i == t->unk ? TOK_UNKNOWN : type_of(t, i);
    if (t->first[i] != i || !t->text[i][0] || type < TOK_NORMAL || type > TOK_BYTE) return 0;
    if (type == TOK_UNKNOWN && t->unk >= 0 && (int64_t)i != t->unk) return 0;
    if (type == TOK_BYTE && !byte_piece(t->text[i])) return 0;
    return type;
}

/* ModelProto's pieces (field 1): the tokens, their scores and types, in
 * id order; false where SentencePiece could not load them: besides what
 * piece_type refuses, no unknown piece ("unk is not defined"), or byte
 * pieces but not all 256 of them (byte fallback needs every byte).
 * *bytes is whether byte pieces are among them (byte fallback).  The
 * meta pieces' (control, unknown, user-defined) scores are 0,
 * SentencePiece's: the script gives tokenizer_config.json's added tokens
 * -1000, a score no encoder reads (they are matched whole or never). */
static bool put_pieces(const tok *t, ckpt__buf *b, bool *bytes) {
    ckpt__buf piece = {0};
    bool ok = true, unknown = false;
    uint64_t byte_pieces = 0; /* each spelled <0xHH> once (piece_type, first[]): 256 are every byte */
    for (uint64_t i = 0; ok && i < t->count; i++) {
        int32_t type = piece_type(t, i);
        ok = type != 0 && !(type == TOK_UNKNOWN && unknown);
        unknown |= type == TOK_UNKNOWN;
        byte_pieces += type == TOK_BYTE;
        piece.len = 0;
        pb_string(&piece, 1, t->text[i]);
        pb_tag(&piece, 2, PB_FIXED32);
        if (type == TOK_CONTROL || type == TOK_UNKNOWN || type == TOK_USER_DEFINED)
            ckpt__buf_append(&piece, "\0\0\0\0", 4); /* 0, as SentencePiece's trainer scores them */
        else ckpt__buf_append(&piece, (const char *)t->scores + 4 * i, 4); /* the f32, little-endian as protobuf's */
        if (type != TOK_NORMAL) pb_int(&piece, 3, type); /* NORMAL: the field's default */
        pb_bytes(b, 1, piece.data, piece.len);
    }
    b->failed |= piece.failed;
    free(piece.data);
    *bytes = byte_pieces != 0;
    return ok && unknown && (byte_pieces == 0 || byte_pieces == 256);
}

/* A special token's id and piece (TrainerSpec's *_id and *_piece fields);
 * -1 where the GGUF names none. */
static void put_special_id(const tok *t, ckpt__buf *b, unsigned id_field, unsigned piece_field, int64_t id) {
    pb_int(b, id_field, id);
    if (id >= 0) pb_string(b, piece_field, t->text[id]);
}

/*
 * tokenizer.model: SentencePiece's ModelProto of what llama.cpp runs for a
 * "llama" vocabulary: its BPE (merges by score, byte fallback where byte
 * pieces are), the tokens' pieces, scores and types, the special tokens'
 * ids, and its normalization (none but the spaces as U+2581 and the
 * dummy prefix of tokenizer.ggml.add_space_prefix).  The training fields
 * the GGUF does not keep are left at their defaults.  *holdable is false
 * (and nothing is kept) where SentencePiece could not load the vocabulary.
 */
static void put_sentencepiece(const tok *t, ckpt__buf *b, bool *holdable) {
    bool bytes = false;
    *holdable = t->scores && put_pieces(t, b, &bytes);
    if (!*holdable) return;
    ckpt__buf spec = {0};
    pb_int(&spec, 3, 2); /* model_type: BPE */
    pb_int(&spec, 4, (int64_t)t->count);
    if (bytes) pb_int(&spec, 35, 1); /* byte_fallback */
    put_special_id(t, &spec, 40, 45, t->unk);
    put_special_id(t, &spec, 41, 46, t->bos);
    put_special_id(t, &spec, 42, 47, t->eos);
    put_special_id(t, &spec, 43, 48, t->pad);
    pb_bytes(b, 2, spec.data, spec.len);
    ckpt__buf norm = {0};
    pb_string(&norm, 1, "identity");
    pb_int(&norm, 3, bool_kv(t, "tokenizer.ggml.add_space_prefix", true)); /* add_dummy_prefix */
    pb_int(&norm, 4, 0); /* remove_extra_whitespaces: llama.cpp keeps runs of spaces */
    pb_int(&norm, 5, 1); /* escape_whitespaces */
    pb_bytes(b, 3, norm.data, norm.len);
    b->failed |= spec.failed || norm.failed;
    free(spec.data);
    free(norm.data);
}

/* ---- the files -------------------------------------------------------------- */

/* Whether `s`, lowercased (ASCII, as llama.cpp's std::tolower in the C
 * locale), holds `lower`. */
static bool holds_lowercased(const char *s, const char *lower) {
    size_t n = strlen(lower);
    for (; *s; s++) {
        size_t k = 0;
        while (k < n && s[k] && (s[k] >= 'A' && s[k] <= 'Z' ? s[k] - 'A' + 'a' : s[k]) == lower[k]) k++;
        if (k == n) return true;
    }
    return !n;
}

/* The family's rstrip rule, when general.name holds one of its names. */
static void read_rstrip(tok *t, const ckpt__lc_family *family) {
    const char *name = string_kv(t, "general.name");
    for (const char *const *s = family->rstrip ? family->rstrip->names : NULL; name && s && *s; s++)
        if (holds_lowercased(name, *s)) t->rstrip = family->rstrip;
}

static ckpt_status read_kind(tok *t, const ckpt__lc_family *family) {
    const char *model = string_kv(t, "tokenizer.ggml.model");
    t->spm = model && !strcmp(model, "llama");
    t->phi3 = t->spm && !strcmp(family->name, "phi3");
    read_rstrip(t, family);
    if (t->spm) return CKPT_OK;
    if (!model || strcmp(model, "gpt2"))
        return bad(t, "tokenizer.ggml.model", "'%s': ckpt writes the tokenizers of 'gpt2' (byte-level BPE) and "
                   "'llama' (SentencePiece)", model ? model : "(not a string)");
    const char *pre = string_kv(t, "tokenizer.ggml.pre");
    for (size_t k = 0; pre && k < sizeof pre_splits / sizeof *pre_splits; k++)
        if (!strcmp(pre_splits[k].pre, pre)) t->split = &pre_splits[k];
    if (!t->split)
        return bad(t, "tokenizer.ggml.pre", "'%s': no pre-tokenizer ckpt knows for a byte-level BPE vocabulary",
                   pre ? pre : "(missing)");
    return CKPT_OK;
}

static ckpt_status read_vocab(tok *t) {
    ckpt_status st;
    if ((st = read_tokens(t)) || (st = per_token(t, "tokenizer.ggml.token_type", CKPT_KV_I32, (const void **)&t->types)) ||
        (st = per_token(t, "tokenizer.ggml.scores", CKPT_KV_F32, (const void **)&t->scores)) ||
        (st = token_id(t, "tokenizer.ggml.bos_token_id", &t->bos)) ||
        (st = token_id(t, "tokenizer.ggml.eos_token_id", &t->eos)) ||
        (st = token_id(t, "tokenizer.ggml.unknown_token_id", &t->unk)) ||
        (st = token_id(t, "tokenizer.ggml.padding_token_id", &t->pad)))
        return st;
    /* llama.cpp adds BOS to a SentencePiece vocabulary that does not say otherwise */
    t->add_bos = bool_kv(t, "tokenizer.ggml.add_bos_token", t->spm);
    t->add_eos = bool_kv(t, "tokenizer.ggml.add_eos_token", false);
    return CKPT_OK;
}

static void tok_free(tok *t) {
    free(t->text);
    free(t->block);
    free(t->first);
    free(t->last);
    ckpt__name_table_free(&t->table);
}

ckpt_status ckpt__lc_hf_tokenizer(ckpt_plan *plan, const ckpt__lc_family *family, ckpt_error *err) {
    const ckpt_kv *kv = NULL;
    tok t = {.catalog = plan->catalog, .path = ckpt_catalog_file_path(plan->catalog, 0), .err = err};
    if (!ckpt__catalog_kv_encoded(t.catalog, "tokenizer.ggml.model", &kv)) return CKPT_OK; /* no tokenizer in the file */
    ckpt__buf json = {0}, config = {0}, model = {0};
    ckpt_status st = read_kind(&t, family);
    if (st == CKPT_OK) st = read_vocab(&t);
    if (st == CKPT_OK) {
        ckpt__buf_puts(&json, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": ");
        put_added(&t, &json, false);
        put_pipeline(&t, &json);
        st = put_model(&t, &json);
        put_config(&t, &config);
    }
    bool holdable = false;
    if (st == CKPT_OK && t.spm) put_sentencepiece(&t, &model, &holdable);
    if (st == CKPT_OK && (json.failed || config.failed || model.failed))
        st = ckpt__oom(err, t.path, model.failed ? "tokenizer.model" : "tokenizer.json");
    if (st == CKPT_OK) st = ckpt__plan_add_file(plan, "tokenizer.json", json.data, json.len, err);
    if (st == CKPT_OK) st = ckpt__plan_add_file(plan, "tokenizer_config.json", config.data, config.len, err);
    if (st == CKPT_OK && holdable) st = ckpt__plan_add_file(plan, "tokenizer.model", model.data, model.len, err);
    free(json.data);
    free(config.data);
    free(model.data);
    tok_free(&t);
    return st;
}
