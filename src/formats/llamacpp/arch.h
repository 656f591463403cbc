/*
 * arch.h — the shape of an architecture family's data for the conversion
 * of a Hugging Face model directory into the GGUF file llama.cpp runs
 * (llamacpp.c): what convert_hf_to_gguf.py does for the family, as tables.
 * Each family's tables live in one file beside this one (llama.h, qwen.h); the
 * converter holds no family's names.
 */
#ifndef CKPT_FORMATS_LLAMACPP_ARCH_H
#define CKPT_FORMATS_LLAMACPP_ARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "../../base/base.h"

/* How a key-value is computed from config.json. */
typedef enum ckpt__lc_kv_kind {
    CKPT__LC_U32,        /* the first hyper-parameter of `hparams` present, as a u32 */
    CKPT__LC_F32,        /* the same, as an f32 */
    CKPT__LC_ROPE_THETA, /* rope_parameters' (or rope_scaling's) rope_theta, else `hparams`', as an f32 */
    CKPT__LC_ROPE_SCALING, /* TextModel's linear or yarn scaling: rope.scaling.type, .factor, and yarn's
                              .original_context_length and tuning (key and hparams unused) */
    CKPT__LC_ROPE_DIM,   /* head_dim, else hidden_size / num_attention_heads */
    CKPT__LC_ROPE_DIM_PARTIAL, /* int(partial_rotary_factor × hidden_size) // num_attention_heads, the factor
                                  from the RoPE parameters, else `hparams`, else 1 */
    CKPT__LC_ROPE_U32,   /* the RoPE parameters' first of `hparams`, else config.json's, as a u32 */
    CKPT__LC_U32_OR_ZERO, /* the first of `hparams` as a u32, 0 when null or absent */
    CKPT__LC_FILE_TYPE,  /* llama.cpp's file type of the output dtype */
    CKPT__LC_ROPE_THETA_SWA, /* the sliding attention's RoPE parameters' rope_theta, when present, as an f32 */
    CKPT__LC_F32_NONZERO,    /* the first of `hparams` as an f32, unless absent, null or zero */
    CKPT__LC_U32_UNLESS_PATTERN_ONE, /* the first of `hparams` as a u32, unless sliding_window_pattern is 1 */
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
    CKPT__LC_HEAD,   /* the head dimension */
    CKPT__LC_QKV,    /* (num_attention_heads + 2 × num_key_value_heads) × the head dimension: Q, K and V fused */
    CKPT__LC_FF2,    /* 2 × intermediate_size: the gate and up projections fused */
    CKPT__LC_EXPERTS,   /* the expert count (the family's expert_hparams) */
    CKPT__LC_EXPERT_FF, /* moe_intermediate_size: an expert's */
    CKPT__LC_SHARED_FF, /* shared_expert_intermediate_size: the shared expert's */
    CKPT__LC_ONE,       /* 1 */
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
    const char *hf, *gguf; /* gguf NULL: the script drops the tensor */
    ckpt__lc_rope rope;
    uint8_t ndim;
    ckpt__lc_dim dims[2]; /* in Hugging Face's order (out, in) */
    bool f32;             /* kept float32 whatever the output type (the script's FFN_GATE_INP, …) */
    float add;            /* added to each element (in the source's precision, float32 for bfloat16), or 0:
                             Gemma's norms (x + 1) */
} ckpt__lc_tensor;

/* A layer's per-expert 2-D tensors the script stacks into one 3-D tensor
 * of (experts, out, in): `hf` holds "%u" for the layer, then "%u" for
 * the expert; `gguf` one "%u" for the layer.  A layer's stacks follow its
 * last expert tensor, in the table's order: the script merges them when it
 * has read every expert tensor of the layer.
 *
 * transformers' model of the family (since 5.0) holds a layer's experts
 * stacked too, not one module per expert: `model` (one "%u" for the
 * layer) is its tensor this stack is part of, joined along the rows
 * (axis 1) with the table's other stacks of that name in `model_at`
 * order — gate's rows then up's in one tensor, down alone — as its
 * checkpoint conversion (transformers' conversion_mapping.py) makes them
 * of the per-expert tensors; what a load into such a model reads
 * (ckpt_gguf_hf_plan_joined). */
typedef struct ckpt__lc_experts {
    const char *hf, *gguf;
    ckpt__lc_dim dims[2]; /* one expert's, in Hugging Face's order (out, in) */
    const char *model;
    unsigned model_at;
} ckpt__lc_experts;

/* How the family reads the added tokens of a SentencePiece vocabulary. */
typedef enum ckpt__lc_spm_added {
    CKPT__LC_SPM_TEXT_MODEL, /* TextModel._create_vocab_sentencepiece: tokenizer_config's added_tokens_decoder,
                                control when special or looking so, else user-defined with U+2581 as spaces */
    CKPT__LC_SPM_PHI3,       /* Phi3MiniModel.set_vocab: added_tokens_decoder, then tokenizer.json's
                                added_tokens, control when special, else user-defined, as they are */
} ckpt__lc_spm_added;

/* A BPE pre-tokenizer llama.cpp knows (tokenizer.ggml.pre), recognised by
 * the regular expression of tokenizer.json's Split pre-tokenizer (the
 * script hashes the tokens of a fixed text; the expression is what decides
 * them for one vocabulary). */
typedef struct ckpt__lc_pre {
    const char *regex, *name;
} ckpt__lc_pre;

/* Token attributes llama.cpp sets by model name, which the GGUF does not
 * keep (llama_vocab::impl::load, "set attributes by model/tokenizer/
 * architecture name"), and the way back writes as the added tokens' rstrip
 * flags in tokenizer.json and tokenizer_config.json: for a file whose
 * general.name, lowercased, holds one of `names`, every special token
 * (control, user-defined or unknown: llama.cpp's special-token cache) and
 * the tokens `also` strip the spaces after them, but the tokens `except`. */
typedef struct ckpt__lc_rstrip {
    const char *const *names, *const *also, *const *except; /* each NULL-terminated */
} ckpt__lc_rstrip;

/* What the way back (llamacpp_hf.c) writes into config.json beyond the
 * family's key-values, for a family whose transformers config says more
 * than a Llama's does, or says it otherwise (Gemma's): what llama.cpp
 * assumes of such a model where its GGUF says nothing. */
typedef struct ckpt__lc_hf_config {
    const char *activation;     /* hidden_activation (transformers' Gemma configs name it so) */
    uint32_t swa_pattern;       /* llama.cpp's sliding-window pattern when the GGUF has none (load_swa_pattern): of
                                   each run of n layers, the last attends fully, the others slide */
    uint64_t wide_query_layers; /* the layer count llama.cpp takes for a 27B, whose queries it scales by
                                   1/sqrt(n_embd / n_head), not by the head dimension's (query_pre_attn_scalar) */
    bool rope_per_layer_type;   /* rope_parameters per attention type: full (the GGUF's base and scaling) and
                                   sliding (rope.freq_base_swa, unscaled) */
} ckpt__lc_hf_config;

typedef struct ckpt__lc_family {
    const char *name;                 /* general.architecture */
    const char *const *hf_archs;      /* config.json architectures[0] values, NULL-terminated */
    const ckpt__lc_kv *kvs;           /* terminated by a NULL key */
    const ckpt__lc_tensor *tensors;   /* terminated by a NULL hf */
    const ckpt__lc_pre *pres;         /* terminated by a NULL regex */
    bool add_space_prefix;            /* tokenizer_config's add_prefix_space as tokenizer.ggml.add_space_prefix
                                         (LlamaModel.set_vocab writes it; others do not) */
    ckpt__lc_spm_added spm_added;     /* a SentencePiece vocabulary's added tokens */
    bool no_space_prefix_after;       /* tokenizer.ggml.add_space_prefix false after the vocabulary (Gemma's) */
    uint64_t refused_vocab_size;      /* a vocab_size the script reads special tokens of otherwise (CodeLlama's
                                         infill tokens at 32016): refused; or 0 */
    const char *refused_hint;         /* a variant the script converts otherwise (more key-values, other tensors),
                                         refused when the directory's name, config.json's _name_or_path, model_type
                                         or architecture, or README.md's "# " heading holds it; or NULL */
    bool rope_freqs;                  /* RoPE type llama3 makes the rope_freqs tensor (LlamaModel's
                                         generate_extra_tensors); else that type is refused */
    const ckpt__lc_experts *experts;  /* stacked per-expert tensors, terminated by a NULL hf; or NULL */
    const char *expert_hparams;       /* config.json's names of the expert count, "|"-separated */
    /* And back (llamacpp_hf.c): config.json as the family's transformers config class reads it. */
    const char *hf_model_type;        /* model_type; NULL: `name` */
    const char *hidden_act;           /* hidden_act (the config class's default, which transformers' GGUF
                                         loader keeps); NULL: none written */
    const char *const *hf_config_names; /* config names of the family's own hyper-parameters, looked for in
                                           `kvs`' hparams before the common ones (the expert count's:
                                           num_local_experts or num_experts); NULL-terminated, or NULL */
    const char *hf_moe_arch, *hf_moe_model_type; /* architectures[0] and model_type of a GGUF of the family
                                                    with experts (llama's: Mixtral); NULL: the family's */
    const char *hf_norm_topk_prob;    /* norm_topk_prob, "true" or "false": whether llama.cpp's graph of the
                                         family weighs the chosen experts normalized; NULL: no such key */
    const ckpt__lc_hf_config *hf;     /* config.json's keys the way back adds; NULL: a Llama's */
    const ckpt__lc_rstrip *rstrip;    /* the added tokens' rstrip llama.cpp gives them; NULL: none */
} ckpt__lc_family;

/* LlamaModel.generate_extra_tensors' rope_freqs for RoPE type llama3 (a
 * factor per pair of a head of `dim`, n = (dim + 1) / 2 of them), float32
 * as torch computes it; the HF → GGUF direction writes it, the way back
 * checks the parameters it recovers against the file's (llamacpp.c). */
CKPT__HIDDEN void ckpt__lc_llama3_rope_freqs(float *f, uint64_t n, uint64_t dim, double base, double factor, double low,
                                             double high, double ctx);

/* TextModel.set_gguf_parameters' key-values, which every family's table
 * starts with (the script's base class: the families add theirs after). */
#define CKPT__LC_TEXT_MODEL_KVS                                                                                   \
    {"%s.block_count", CKPT__LC_U32, "n_layers|num_hidden_layers|n_layer|num_layers", true},                     \
    {"%s.context_length", CKPT__LC_U32,                                                                           \
     "max_position_embeddings|n_ctx|n_positions|max_length|max_sequence_length|model_max_length", false},         \
    {"%s.embedding_length", CKPT__LC_U32, "hidden_size|n_embd|dim", false},                                      \
    {"%s.feed_forward_length", CKPT__LC_U32,                                                                      \
     "prefix_dense_intermediate_size|dense_intermediate_size|intermediate_size|n_inner|hidden_dim", false},       \
    {"%s.attention.head_count", CKPT__LC_U32, "num_attention_heads|n_head|n_heads", false},                      \
    {"%s.attention.head_count_kv", CKPT__LC_U32, "num_key_value_heads|n_kv_heads", false},                       \
    {"%s.rope.scaling", CKPT__LC_ROPE_SCALING, NULL, false},                                                     \
    {"%s.rope.freq_base", CKPT__LC_ROPE_THETA,                                                                   \
     "global_rope_theta|rope_global_theta|rope_theta_global|rope_theta|rotary_emb_base", false},                  \
    {"%s.rope.freq_base_swa", CKPT__LC_ROPE_THETA_SWA, NULL, false},                                             \
    {"%s.attention.layer_norm_rms_epsilon", CKPT__LC_F32, "rms_norm_eps|norm_eps", false},                       \
    {"%s.attention.layer_norm_epsilon", CKPT__LC_F32, "layer_norm_eps|layer_norm_epsilon|norm_epsilon", false},  \
    {"%s.expert_count", CKPT__LC_U32, "num_local_experts|num_experts|n_routed_experts", false},                   \
    {"%s.expert_used_count", CKPT__LC_U32, "num_experts_per_tok|num_experts_per_token|top_k_experts", false},      \
    {"%s.attention.key_length", CKPT__LC_U32, "head_dim", false},                                                \
    {"%s.attention.value_length", CKPT__LC_U32, "head_dim", false},                                              \
    {"general.file_type", CKPT__LC_FILE_TYPE, NULL, true}

/* gguf-py's TensorNameMap for the tensors of a Llama-style decoder that
 * every such family has: embeddings, head, norms, attention output, MLP. */
#define CKPT__LC_DECODER_TENSORS                                                                                  \
    {"model.embed_tokens.weight", "token_embd.weight", CKPT__LC_NO_PERMUTE, 2, {CKPT__LC_VOCAB, CKPT__LC_HIDDEN}}, \
    {"lm_head.weight", "output.weight", CKPT__LC_NO_PERMUTE, 2, {CKPT__LC_VOCAB, CKPT__LC_HIDDEN}},               \
    {"model.norm.weight", "output_norm.weight", CKPT__LC_NO_PERMUTE, 1, {CKPT__LC_HIDDEN}},                       \
    {"model.layers.%u.input_layernorm.weight", "blk.%u.attn_norm.weight", CKPT__LC_NO_PERMUTE, 1,                 \
     {CKPT__LC_HIDDEN}},                                                                                          \
    {"model.layers.%u.self_attn.o_proj.weight", "blk.%u.attn_output.weight", CKPT__LC_NO_PERMUTE, 2,             \
     {CKPT__LC_HIDDEN, CKPT__LC_Q}},                                                                              \
    {"model.layers.%u.post_attention_layernorm.weight", "blk.%u.ffn_norm.weight", CKPT__LC_NO_PERMUTE, 1,        \
     {CKPT__LC_HIDDEN}},                                                                                          \
    CKPT__LC_MLP_TENSORS

/* A dense MLP's gate, up and down projections. */
#define CKPT__LC_MLP_TENSORS                                                                                      \
    {"model.layers.%u.mlp.gate_proj.weight", "blk.%u.ffn_gate.weight", CKPT__LC_NO_PERMUTE, 2,                   \
     {CKPT__LC_FF, CKPT__LC_HIDDEN}},                                                                             \
    {"model.layers.%u.mlp.up_proj.weight", "blk.%u.ffn_up.weight", CKPT__LC_NO_PERMUTE, 2,                       \
     {CKPT__LC_FF, CKPT__LC_HIDDEN}},                                                                             \
    {"model.layers.%u.mlp.down_proj.weight", "blk.%u.ffn_down.weight", CKPT__LC_NO_PERMUTE, 2,                   \
     {CKPT__LC_HIDDEN, CKPT__LC_FF}}

#endif
