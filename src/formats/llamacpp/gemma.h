/*
 * gemma.h — the Gemma families as convert_hf_to_gguf.py converts them
 * (conversion/gemma.py, llama-cpp-python 0.3.36's vendored llama.cpp):
 * gemma2 (Gemma2Model: its own key-values, with the logit soft-caps and the
 * sliding window) and gemma3 (Gemma3Model over TextModel: TextModel's
 * key-values, the sliding attention's RoPE base, the final soft-cap and
 * the sliding window).  Both add 1 to every norm's weights (Gemma's
 * RMSNorm scales by 1 + weight; the script adds in the weights' precision,
 * float32 for bfloat16) and read a SentencePiece vocabulary, then say
 * add_space_prefix false.  Gemma 2 drops lm_head (tied); Gemma 3 has Q and
 * K norms.  The embeddings' scaling is llama.cpp's, not a tensor change.
 * A Gemma 3 with a BPE tokenizer.json alone (the script trims the
 * embeddings to its vocabulary) is refused by its pre-tokenizer.
 */
#ifndef CKPT_FORMATS_LLAMACPP_GEMMA_H
#define CKPT_FORMATS_LLAMACPP_GEMMA_H

#include "arch.h"

/* Gemma2Model.set_gguf_parameters: its own, no TextModel ones. */
static const ckpt__lc_kv ckpt__lc_gemma2_kvs[] = {
    {"%s.context_length", CKPT__LC_U32, "max_position_embeddings", true},
    {"%s.embedding_length", CKPT__LC_U32, "hidden_size", true},
    {"%s.block_count", CKPT__LC_U32, "n_layers|num_hidden_layers|n_layer|num_layers", true},
    {"%s.feed_forward_length", CKPT__LC_U32, "intermediate_size", true},
    {"%s.attention.head_count", CKPT__LC_U32, "num_attention_heads", true},
    {"%s.attention.head_count_kv", CKPT__LC_U32, "num_key_value_heads|num_attention_heads", true},
    {"%s.attention.layer_norm_rms_epsilon", CKPT__LC_F32, "rms_norm_eps", true},
    {"%s.attention.key_length", CKPT__LC_U32, "head_dim", true},
    {"%s.attention.value_length", CKPT__LC_U32, "head_dim", true},
    {"general.file_type", CKPT__LC_FILE_TYPE, NULL, true},
    {"%s.attn_logit_softcapping", CKPT__LC_F32, "attn_logit_softcapping", true},
    {"%s.final_logit_softcapping", CKPT__LC_F32, "final_logit_softcapping", true},
    {"%s.attention.sliding_window", CKPT__LC_U32, "sliding_window", true},
    {NULL, 0, NULL, false},
};

/* Gemma3Model.set_gguf_parameters: TextModel's (its own calls then set the
 * same keys again: GGUFWriter keeps a key where it was first added), the
 * final soft-cap when not zero, the sliding window unless every layer
 * slides (sliding_window_pattern 1). */
static const ckpt__lc_kv ckpt__lc_gemma3_kvs[] = {
    CKPT__LC_TEXT_MODEL_KVS,
    {"%s.final_logit_softcapping", CKPT__LC_F32_NONZERO, "final_logit_softcapping", false},
    {"%s.attention.sliding_window", CKPT__LC_U32_UNLESS_PATTERN_ONE, "sliding_window", true},
    {NULL, 0, NULL, false},
};

#define CKPT__LC_GEMMA_NORM(hf, gguf, dim) {hf, gguf, CKPT__LC_NO_PERMUTE, 1, {dim}, .add = 1.0f}

/* A Gemma decoder's tensors: norms + 1, lm_head dropped (gguf NULL). */
#define CKPT__LC_GEMMA_TENSORS                                                                                    \
    {"model.embed_tokens.weight", "token_embd.weight", CKPT__LC_NO_PERMUTE, 2, {CKPT__LC_VOCAB, CKPT__LC_HIDDEN}}, \
    {"lm_head.weight", NULL, CKPT__LC_NO_PERMUTE, 2, {CKPT__LC_VOCAB, CKPT__LC_HIDDEN}},                          \
    CKPT__LC_GEMMA_NORM("model.norm.weight", "output_norm.weight", CKPT__LC_HIDDEN),                                               \
    CKPT__LC_GEMMA_NORM("model.layers.%u.input_layernorm.weight", "blk.%u.attn_norm.weight", CKPT__LC_HIDDEN),                     \
    CKPT__LC_GEMMA_NORM("model.layers.%u.post_attention_layernorm.weight", "blk.%u.post_attention_norm.weight", CKPT__LC_HIDDEN),  \
    CKPT__LC_GEMMA_NORM("model.layers.%u.pre_feedforward_layernorm.weight", "blk.%u.ffn_norm.weight", CKPT__LC_HIDDEN),            \
    CKPT__LC_GEMMA_NORM("model.layers.%u.post_feedforward_layernorm.weight", "blk.%u.post_ffw_norm.weight", CKPT__LC_HIDDEN),      \
    {"model.layers.%u.self_attn.q_proj.weight", "blk.%u.attn_q.weight", CKPT__LC_NO_PERMUTE, 2,                   \
     {CKPT__LC_Q, CKPT__LC_HIDDEN}},                                                                              \
    {"model.layers.%u.self_attn.k_proj.weight", "blk.%u.attn_k.weight", CKPT__LC_NO_PERMUTE, 2,                   \
     {CKPT__LC_KV, CKPT__LC_HIDDEN}},                                                                             \
    {"model.layers.%u.self_attn.v_proj.weight", "blk.%u.attn_v.weight", CKPT__LC_NO_PERMUTE, 2,                   \
     {CKPT__LC_KV, CKPT__LC_HIDDEN}},                                                                             \
    {"model.layers.%u.self_attn.o_proj.weight", "blk.%u.attn_output.weight", CKPT__LC_NO_PERMUTE, 2,              \
     {CKPT__LC_HIDDEN, CKPT__LC_Q}},                                                                              \
    CKPT__LC_MLP_TENSORS

static const char *const ckpt__lc_gemma2_archs[] = {"Gemma2ForCausalLM", NULL};

static const ckpt__lc_tensor ckpt__lc_gemma2_tensors[] = {
    CKPT__LC_GEMMA_TENSORS,
    {NULL, NULL, CKPT__LC_NO_PERMUTE, 0, {CKPT__LC_ANY}},
};

/* No BPE pre-tokenizer: Gemma reads tokenizer.model. */
static const ckpt__lc_pre ckpt__lc_gemma_pres[] = {
    {NULL, NULL},
};

/* The way back (llama.cpp's gemma2.cpp and gemma3.cpp, where the GGUF is
 * silent): GELU (tanh), every other layer sliding (Gemma 3: five of six),
 * queries scaled by the head dimension's root but in the 27B (46 layers;
 * Gemma 3's 62), Gemma 3's sliding layers' RoPE its own and unscaled. */
static const ckpt__lc_hf_config ckpt__lc_gemma2_hf = {
    .activation = "gelu_pytorch_tanh",
    .swa_pattern = 2,
    .wide_query_layers = 46,
};

static const ckpt__lc_hf_config ckpt__lc_gemma3_hf = {
    .activation = "gelu_pytorch_tanh",
    .swa_pattern = 6,
    .wide_query_layers = 62,
    .rope_per_layer_type = true,
};

static const ckpt__lc_family ckpt__lc_gemma2 = {
    .name = "gemma2",
    .hf_archs = ckpt__lc_gemma2_archs,
    .kvs = ckpt__lc_gemma2_kvs,
    .tensors = ckpt__lc_gemma2_tensors,
    .pres = ckpt__lc_gemma_pres,
    .add_space_prefix = false,
    .no_space_prefix_after = true,
    .hf = &ckpt__lc_gemma2_hf,
    .hf_model_type = "gemma2",
};

static const char *const ckpt__lc_gemma3_archs[] = {"Gemma3ForCausalLM", NULL};

/* Gemma 3 keeps lm_head when it has one (only Gemma and Gemma 2 drop it). */
static const ckpt__lc_tensor ckpt__lc_gemma3_tensors[] = {
    {"lm_head.weight", "output.weight", CKPT__LC_NO_PERMUTE, 2, {CKPT__LC_VOCAB, CKPT__LC_HIDDEN}},
    CKPT__LC_GEMMA_TENSORS,
    CKPT__LC_GEMMA_NORM("model.layers.%u.self_attn.q_norm.weight", "blk.%u.attn_q_norm.weight", CKPT__LC_HEAD),
    CKPT__LC_GEMMA_NORM("model.layers.%u.self_attn.k_norm.weight", "blk.%u.attn_k_norm.weight", CKPT__LC_HEAD),
    {NULL, NULL, CKPT__LC_NO_PERMUTE, 0, {CKPT__LC_ANY}},
};

static const ckpt__lc_family ckpt__lc_gemma3 = {
    .name = "gemma3",
    .hf_archs = ckpt__lc_gemma3_archs,
    .kvs = ckpt__lc_gemma3_kvs,
    .tensors = ckpt__lc_gemma3_tensors,
    .pres = ckpt__lc_gemma_pres,
    .add_space_prefix = false,
    .no_space_prefix_after = true,
    .hf = &ckpt__lc_gemma3_hf,
    .hf_model_type = "gemma3_text", /* transformers' text model */
};

#endif
