/*
 * arch.h — the shape of an architecture family's data for the conversion
 * of a Hugging Face model directory into the GGUF file llama.cpp runs
 * (llamacpp.c): what convert_hf_to_gguf.py does for the family, as tables.
 * Each family's tables live in one file beside this one (llama.h); the
 * converter holds no family's names.
 */
#ifndef CKPT_FORMATS_LLAMACPP_ARCH_H
#define CKPT_FORMATS_LLAMACPP_ARCH_H

#include <stdbool.h>
#include <stdint.h>

/* How a key-value is computed from config.json. */
typedef enum ckpt__lc_kv_kind {
    CKPT__LC_U32,        /* the first hyper-parameter of `hparams` present, as a u32 */
    CKPT__LC_F32,        /* the same, as an f32 */
    CKPT__LC_ROPE_THETA, /* rope_parameters' (or rope_scaling's) rope_theta, else `hparams`', as an f32;
                            a RoPE type other than "default" is refused by name */
    CKPT__LC_ROPE_DIM,   /* head_dim, else hidden_size / num_attention_heads */
    CKPT__LC_FILE_TYPE,  /* llama.cpp's file type of the output dtype */
} ckpt__lc_kv_kind;

/* One key-value, in the order the script adds it; `key` holds "%s" for the
 * architecture's name.  `hparams` lists config.json's names, "|"-separated,
 * in the order the script looks for them. */
typedef struct ckpt__lc_kv {
    const char *key;
    ckpt__lc_kv_kind kind;
    const char *hparams;
    bool required;
} ckpt__lc_kv;

/* What a tensor's extent must be, from config.json. */
typedef enum ckpt__lc_dim {
    CKPT__LC_ANY,    /* not checked */
    CKPT__LC_VOCAB,  /* vocab_size */
    CKPT__LC_HIDDEN, /* hidden_size */
    CKPT__LC_FF,     /* intermediate_size */
    CKPT__LC_Q,      /* num_attention_heads × the head dimension */
    CKPT__LC_KV,     /* num_key_value_heads × the head dimension */
} ckpt__lc_dim;

/* Which rows the script reorders for llama.cpp's RoPE (LlamaModel.permute). */
typedef enum ckpt__lc_rope {
    CKPT__LC_NO_PERMUTE,
    CKPT__LC_PERMUTE_Q, /* in heads of num_attention_heads */
    CKPT__LC_PERMUTE_K, /* in heads of num_key_value_heads */
} ckpt__lc_rope;

/* A Hugging Face tensor and its llama.cpp name: `hf` and `gguf` hold one
 * "%u" for the layer, or none. */
typedef struct ckpt__lc_tensor {
    const char *hf, *gguf;
    ckpt__lc_rope rope;
    uint8_t ndim;
    ckpt__lc_dim dims[2]; /* in Hugging Face's order (out, in) */
} ckpt__lc_tensor;

/* A BPE pre-tokenizer llama.cpp knows (tokenizer.ggml.pre), recognised by
 * the regular expression of tokenizer.json's Split pre-tokenizer (the
 * script hashes the tokens of a fixed text; the expression is what decides
 * them for one vocabulary). */
typedef struct ckpt__lc_pre {
    const char *regex, *name;
} ckpt__lc_pre;

typedef struct ckpt__lc_family {
    const char *name;                 /* general.architecture */
    const char *const *hf_archs;      /* config.json architectures[0] values, NULL-terminated */
    const ckpt__lc_kv *kvs;           /* terminated by a NULL key */
    const ckpt__lc_tensor *tensors;   /* terminated by a NULL hf */
    const ckpt__lc_pre *pres;         /* terminated by a NULL regex */
} ckpt__lc_family;

#endif
