/*
 * llama.h — the llama family as convert_hf_to_gguf.py converts it
 * (conversion/llama.py's LlamaModel over TextModel, llama-cpp-python
 * 0.3.36's vendored llama.cpp): its key-values in the order the script
 * adds them, its tensors' names, and the Q/K rows it reorders; Mixtral's
 * router (ffn_gate_inp, kept float32) and its experts w1, w2, w3 stacked
 * per layer into ffn_gate_exps, ffn_down_exps and ffn_up_exps; Llama 3.1's
 * RoPE (type llama3) as the rope_freqs tensor the script computes.
 */
#ifndef CKPT_FORMATS_LLAMACPP_LLAMA_H
#define CKPT_FORMATS_LLAMACPP_LLAMA_H

#include "arch.h"

/* LlamaModel converts Mistral and Mixtral alike (conversion/llama.py registers them). */
static const char *const ckpt__lc_llama_archs[] = {"LlamaForCausalLM", "LLaMAForCausalLM", "MistralForCausalLM",
                                                   "MixtralForCausalLM", NULL};

static const ckpt__lc_kv ckpt__lc_llama_kvs[] = {
    CKPT__LC_TEXT_MODEL_KVS,
    /* LlamaModel.set_gguf_parameters */
    {"%s.vocab_size", CKPT__LC_U32, "vocab_size", true},
    {"%s.rope.dimension_count", CKPT__LC_ROPE_DIM, NULL, true},
    {NULL, 0, NULL, false},
};

static const ckpt__lc_tensor ckpt__lc_llama_tensors[] = {
    CKPT__LC_DECODER_TENSORS,
    {"model.layers.%u.self_attn.q_proj.weight", "blk.%u.attn_q.weight", CKPT__LC_PERMUTE_Q, 2,
     {CKPT__LC_Q, CKPT__LC_HIDDEN}},
    {"model.layers.%u.self_attn.k_proj.weight", "blk.%u.attn_k.weight", CKPT__LC_PERMUTE_K, 2,
     {CKPT__LC_KV, CKPT__LC_HIDDEN}},
    {"model.layers.%u.self_attn.v_proj.weight", "blk.%u.attn_v.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_KV, CKPT__LC_HIDDEN}},
    {"model.layers.%u.block_sparse_moe.gate.weight", "blk.%u.ffn_gate_inp.weight", CKPT__LC_NO_PERMUTE, 2,
     {CKPT__LC_EXPERTS, CKPT__LC_HIDDEN}, .f32 = true},
    {NULL, NULL, CKPT__LC_NO_PERMUTE, 0, {CKPT__LC_ANY}},
};

/* LlamaModel.modify_tensors: "block_sparse_moe.experts" merged as w1, w2, w3.
 * MixtralForCausalLM holds them as mlp.experts' gate_up_proj (w1's rows,
 * then w3's) and down_proj (w2). */
static const ckpt__lc_experts ckpt__lc_llama_experts[] = {
    {"model.layers.%u.block_sparse_moe.experts.%u.w1.weight", "blk.%u.ffn_gate_exps.weight",
     {CKPT__LC_FF, CKPT__LC_HIDDEN}, "model.layers.%u.mlp.experts.gate_up_proj", 0},
    {"model.layers.%u.block_sparse_moe.experts.%u.w2.weight", "blk.%u.ffn_down_exps.weight",
     {CKPT__LC_HIDDEN, CKPT__LC_FF}, "model.layers.%u.mlp.experts.down_proj", 0},
    {"model.layers.%u.block_sparse_moe.experts.%u.w3.weight", "blk.%u.ffn_up_exps.weight",
     {CKPT__LC_FF, CKPT__LC_HIDDEN}, "model.layers.%u.mlp.experts.gate_up_proj", 1},
    {NULL, NULL, {CKPT__LC_ANY}, NULL, 0},
};

/* Llama 3's pre-tokenizer (the script's "llama-bpe"). */
static const ckpt__lc_pre ckpt__lc_llama_pres[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "llama-bpe"},
    {NULL, NULL},
};

/* MixtralConfig's names of the expert count and of the experts a token takes. */
static const char *const ckpt__lc_llama_hf_names[] = {"num_local_experts", "num_experts_per_tok", NULL};

static const ckpt__lc_family ckpt__lc_llama = {
    .name = "llama",
    .hf_archs = ckpt__lc_llama_archs,
    .kvs = ckpt__lc_llama_kvs,
    .tensors = ckpt__lc_llama_tensors,
    .pres = ckpt__lc_llama_pres,
    .add_space_prefix = true,
    .refused_vocab_size = 32016, /* LlamaModel.set_vocab: CodeLlama's prefix, suffix, middle and eot tokens */
    .rope_freqs = true,
    .experts = ckpt__lc_llama_experts,
    .expert_hparams = "num_local_experts", /* LlamaModel reads hparams["num_local_experts"] */
    .hidden_act = "silu",
    .hf_config_names = ckpt__lc_llama_hf_names,
    .hf_moe_arch = "MixtralForCausalLM", /* llama.cpp's llama with experts is Mixtral */
    .hf_moe_model_type = "mixtral",
};

#endif
