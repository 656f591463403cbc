/*
 * qwen.h — the Qwen families as convert_hf_to_gguf.py converts them
 * (conversion/qwen.py, llama-cpp-python 0.3.36's vendored llama.cpp):
 * qwen2 (Qwen2Model over TextModel) and qwen3 (Qwen3Model over Qwen2Model):
 * their key-values in the order the script adds them and their tensors'
 * names (biases on Q, K and V where the model has them; no row
 * permutation; qwen3's Q and K norms); and their mixtures of experts,
 * qwen2moe (Qwen2MoeModel) and qwen3moe (Qwen3MoeModel over it): the
 * router and the shared expert's gate kept float32, each layer's experts'
 * down, gate and up projections stacked into ffn_down_exps, ffn_gate_exps
 * and ffn_up_exps, Qwen2-MoE's shared expert beside them.
 */
#ifndef CKPT_FORMATS_LLAMACPP_QWEN_H
#define CKPT_FORMATS_LLAMACPP_QWEN_H

#include "arch.h"

static const char *const ckpt__lc_qwen2_archs[] = {"Qwen2ForCausalLM", NULL};

/* TextModel's alone (Qwen2Model adds a pooling type only for a
 * sentence-transformers directory, modules.json: refused). */
static const ckpt__lc_kv ckpt__lc_qwen2_kvs[] = {
    CKPT__LC_TEXT_MODEL_KVS,
    {NULL, 0, NULL, false},
};

/* Qwen's attention: Q, K and V, with biases where the model has them. */
#define CKPT__LC_QWEN_ATTENTION_TENSORS                                                                           \
    {"model.layers.%u.self_attn.q_proj.weight", "blk.%u.attn_q.weight", CKPT__LC_NO_PERMUTE, 2,                    \
     {CKPT__LC_Q, CKPT__LC_HIDDEN}},                                                                               \
    {"model.layers.%u.self_attn.q_proj.bias", "blk.%u.attn_q.bias", CKPT__LC_NO_PERMUTE, 1, {CKPT__LC_Q}},         \
    {"model.layers.%u.self_attn.k_proj.weight", "blk.%u.attn_k.weight", CKPT__LC_NO_PERMUTE, 2,                    \
     {CKPT__LC_KV, CKPT__LC_HIDDEN}},                                                                              \
    {"model.layers.%u.self_attn.k_proj.bias", "blk.%u.attn_k.bias", CKPT__LC_NO_PERMUTE, 1, {CKPT__LC_KV}},        \
    {"model.layers.%u.self_attn.v_proj.weight", "blk.%u.attn_v.weight", CKPT__LC_NO_PERMUTE, 2,                    \
     {CKPT__LC_KV, CKPT__LC_HIDDEN}},                                                                              \
    {"model.layers.%u.self_attn.v_proj.bias", "blk.%u.attn_v.bias", CKPT__LC_NO_PERMUTE, 1, {CKPT__LC_KV}}

static const ckpt__lc_tensor ckpt__lc_qwen2_tensors[] = {
    CKPT__LC_DECODER_TENSORS,
    CKPT__LC_QWEN_ATTENTION_TENSORS,
    {NULL, NULL, CKPT__LC_NO_PERMUTE, 0, {CKPT__LC_ANY}},
};

/* Qwen2's pre-tokenizer (the script's "qwen2"): Llama 3's with single digits. */
static const ckpt__lc_pre ckpt__lc_qwen2_pres[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "qwen2"},
    {NULL, NULL},
};

static const ckpt__lc_family ckpt__lc_qwen2 = {
    .name = "qwen2",
    .hidden_act = "silu",
    .hf_archs = ckpt__lc_qwen2_archs,
    .kvs = ckpt__lc_qwen2_kvs,
    .tensors = ckpt__lc_qwen2_tensors,
    .pres = ckpt__lc_qwen2_pres,
    .add_space_prefix = false,
};

/* Qwen3Model: Qwen2Model's key-values and tensors, with RMS norms of Q and
 * K per head.  A reranker (the script's _is_qwen3_reranker: adds a pooling
 * type and a classifier head) is refused by its hints. */
static const char *const ckpt__lc_qwen3_archs[] = {"Qwen3ForCausalLM", NULL};

/* Qwen3's attention: Qwen2's with RMS norms of Q and K per head. */
#define CKPT__LC_QWEN3_ATTENTION_TENSORS                                                                          \
    CKPT__LC_QWEN_ATTENTION_TENSORS,                                                                              \
    {"model.layers.%u.self_attn.q_norm.weight", "blk.%u.attn_q_norm.weight", CKPT__LC_NO_PERMUTE, 1,               \
     {CKPT__LC_HEAD}},                                                                                            \
    {"model.layers.%u.self_attn.k_norm.weight", "blk.%u.attn_k_norm.weight", CKPT__LC_NO_PERMUTE, 1,               \
     {CKPT__LC_HEAD}}

static const ckpt__lc_tensor ckpt__lc_qwen3_tensors[] = {
    CKPT__LC_DECODER_TENSORS,
    CKPT__LC_QWEN3_ATTENTION_TENSORS,
    {NULL, NULL, CKPT__LC_NO_PERMUTE, 0, {CKPT__LC_ANY}},
};

static const ckpt__lc_family ckpt__lc_qwen3 = {
    .name = "qwen3",
    .hidden_act = "silu",
    .hf_archs = ckpt__lc_qwen3_archs,
    .kvs = ckpt__lc_qwen2_kvs,
    .tensors = ckpt__lc_qwen3_tensors,
    .pres = ckpt__lc_qwen2_pres,
    .add_space_prefix = false,
    .refused_hint = "qwen3-reranker",
};

/* Qwen2MoeModel.set_gguf_parameters: TextModel's, then the experts' widths. */
static const ckpt__lc_kv ckpt__lc_qwen_moe_kvs[] = {
    CKPT__LC_TEXT_MODEL_KVS,
    {"%s.expert_feed_forward_length", CKPT__LC_U32, "moe_intermediate_size", false},
    {"%s.expert_shared_feed_forward_length", CKPT__LC_U32, "shared_expert_intermediate_size", false},
    {NULL, 0, NULL, false},
};

/* A Qwen MoE layer's router and shared expert (Qwen2-MoE's; Qwen3-MoE has none). */
#define CKPT__LC_QWEN_MOE_TENSORS                                                                                 \
    {"model.layers.%u.mlp.gate.weight", "blk.%u.ffn_gate_inp.weight", CKPT__LC_NO_PERMUTE, 2,                     \
     {CKPT__LC_EXPERTS, CKPT__LC_HIDDEN}, .f32 = true},                                                            \
    {"model.layers.%u.mlp.shared_expert_gate.weight", "blk.%u.ffn_gate_inp_shexp.weight", CKPT__LC_NO_PERMUTE, 2,  \
     {CKPT__LC_ONE, CKPT__LC_HIDDEN}, .f32 = true},                                                                \
    {"model.layers.%u.mlp.shared_expert.gate_proj.weight", "blk.%u.ffn_gate_shexp.weight", CKPT__LC_NO_PERMUTE, 2, \
     {CKPT__LC_SHARED_FF, CKPT__LC_HIDDEN}},                                                                       \
    {"model.layers.%u.mlp.shared_expert.up_proj.weight", "blk.%u.ffn_up_shexp.weight", CKPT__LC_NO_PERMUTE, 2,     \
     {CKPT__LC_SHARED_FF, CKPT__LC_HIDDEN}},                                                                       \
    {"model.layers.%u.mlp.shared_expert.down_proj.weight", "blk.%u.ffn_down_shexp.weight", CKPT__LC_NO_PERMUTE, 2, \
     {CKPT__LC_HIDDEN, CKPT__LC_SHARED_FF}}

/* Qwen2MoeModel.modify_tensors: a layer's experts merged as down, gate, up.
 * Qwen2MoeForCausalLM and Qwen3MoeForCausalLM hold them as mlp.experts'
 * gate_up_proj (gate's rows, then up's) and down_proj. */
static const ckpt__lc_experts ckpt__lc_qwen_moe_experts[] = {
    {"model.layers.%u.mlp.experts.%u.down_proj.weight", "blk.%u.ffn_down_exps.weight",
     {CKPT__LC_HIDDEN, CKPT__LC_EXPERT_FF}, "model.layers.%u.mlp.experts.down_proj", 0},
    {"model.layers.%u.mlp.experts.%u.gate_proj.weight", "blk.%u.ffn_gate_exps.weight",
     {CKPT__LC_EXPERT_FF, CKPT__LC_HIDDEN}, "model.layers.%u.mlp.experts.gate_up_proj", 0},
    {"model.layers.%u.mlp.experts.%u.up_proj.weight", "blk.%u.ffn_up_exps.weight",
     {CKPT__LC_EXPERT_FF, CKPT__LC_HIDDEN}, "model.layers.%u.mlp.experts.gate_up_proj", 1},
    {NULL, NULL, {CKPT__LC_ANY}, NULL, 0},
};

/* Qwen2MoeConfig's and Qwen3MoeConfig's names of the experts' hyper-parameters. */
static const char *const ckpt__lc_qwen_moe_hf_names[] = {"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                                                         "shared_expert_intermediate_size", NULL};

static const char *const ckpt__lc_qwen2moe_archs[] = {"Qwen2MoeForCausalLM", NULL};

static const ckpt__lc_tensor ckpt__lc_qwen2moe_tensors[] = {
    CKPT__LC_DECODER_TENSORS,
    CKPT__LC_QWEN_ATTENTION_TENSORS,
    CKPT__LC_QWEN_MOE_TENSORS,
    {NULL, NULL, CKPT__LC_NO_PERMUTE, 0, {CKPT__LC_ANY}},
};

/* Its vocabulary: TextModel's _set_vocab_gpt2, Qwen2's pre-tokenizer. */
static const ckpt__lc_family ckpt__lc_qwen2moe = {
    .name = "qwen2moe",
    .hf_archs = ckpt__lc_qwen2moe_archs,
    .kvs = ckpt__lc_qwen_moe_kvs,
    .tensors = ckpt__lc_qwen2moe_tensors,
    .pres = ckpt__lc_qwen2_pres,
    .add_space_prefix = false,
    .experts = ckpt__lc_qwen_moe_experts,
    .expert_hparams = "num_local_experts|num_experts", /* the script's find_hparam */
    .hf_model_type = "qwen2_moe",
    .hidden_act = "silu",
    .hf_config_names = ckpt__lc_qwen_moe_hf_names,
    .hf_norm_topk_prob = "false", /* llama.cpp's qwen2moe graph: the chosen experts' softmax weights as they are */
};

static const char *const ckpt__lc_qwen3moe_archs[] = {"Qwen3MoeForCausalLM", NULL};

static const ckpt__lc_tensor ckpt__lc_qwen3moe_tensors[] = {
    CKPT__LC_DECODER_TENSORS,
    CKPT__LC_QWEN3_ATTENTION_TENSORS,
    {"model.layers.%u.mlp.gate.weight", "blk.%u.ffn_gate_inp.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_EXPERTS, CKPT__LC_HIDDEN}, .f32 = true},
    {NULL, NULL, CKPT__LC_NO_PERMUTE, 0, {CKPT__LC_ANY}},
};

static const ckpt__lc_family ckpt__lc_qwen3moe = {
    .name = "qwen3moe",
    .hf_archs = ckpt__lc_qwen3moe_archs,
    .kvs = ckpt__lc_qwen_moe_kvs,
    .tensors = ckpt__lc_qwen3moe_tensors,
    .pres = ckpt__lc_qwen2_pres,
    .add_space_prefix = false,
    .experts = ckpt__lc_qwen_moe_experts,
    .expert_hparams = "num_local_experts|num_experts",
    .hf_model_type = "qwen3_moe",
    .hidden_act = "silu",
    .hf_config_names = ckpt__lc_qwen_moe_hf_names,
    .hf_norm_topk_prob = "true", /* llama.cpp's qwen3moe graph normalizes them (transformers' GGUF loader too) */
};

#endif
