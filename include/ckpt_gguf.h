/*
 * ckpt_gguf.h — what is GGUF's own in libckpt's interface: a GGUF file's
 * typed key-value pairs, ggml's tensor type numbers, and GGUF output's own
 * options.
 *
 * Everything else about GGUF — opening `.gguf` files and gguf-split parts,
 * their tensors, quantized block dtypes (CKPT_Q4_0 ...), writing GGUF as
 * GGUFWriter does (ckpt_writer_options.format, a `.gguf` destination) — goes
 * through the format-neutral interface of <ckpt.h>, which this header
 * includes.  The pairs of a catalog of another format: none.
 */
#ifndef CKPT_GGUF_H
#define CKPT_GGUF_H

#include "ckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- key-value pairs ------------------------------------------------------ */

/* A GGUF value's type; the numbers are GGUF's own. */
typedef enum ckpt_kv_type {
    CKPT_KV_U8 = 0,
    CKPT_KV_I8 = 1,
    CKPT_KV_U16 = 2,
    CKPT_KV_I16 = 3,
    CKPT_KV_U32 = 4,
    CKPT_KV_I32 = 5,
    CKPT_KV_F32 = 6,
    CKPT_KV_BOOL = 7,
    CKPT_KV_STRING = 8,
    CKPT_KV_ARRAY = 9,
    CKPT_KV_U64 = 10,
    CKPT_KV_I64 = 11,
    CKPT_KV_F64 = 12
} ckpt_kv_type;

/* The JSON member naming a typed value's GGUF type (see ckpt_kv.json). */
#define CKPT_GGUF_TYPE_KEY "gguf_type"

/*
 * One key-value pair of a GGUF file, in file order.  Pointers live as long
 * as the catalog.
 *   scalars  `i`, `u` and `f` hold the value as a signed, unsigned and
 *            floating number (a bool is 0 or 1);
 *   strings  `string` (NUL-terminated; `string_len` bytes, which may hold a
 *            NUL) — every string KV is also in the catalog's metadata map;
 *   arrays   `element_type` and `count`; arrays of numbers or bools have
 *            their `count` elements packed little-endian at `data`.
 * Every value is also given as typed JSON text, which is what the metadata
 * map holds for values that are not strings, what `ckpt inspect --json`
 * prints, and what a writer of GGUF files turns back into the same value:
 *   {"gguf_type": "u32", "value": 5}
 *   {"gguf_type": "array", "element": "string", "value": ["a", "b"]}
 *   {"gguf_type": "array", "element": "array", "value": [{"gguf_type": ...}, ...]}
 * Floats print with enough digits to read back exactly; NaN and the
 * infinities are the strings "nan", "inf", "-inf".
 */
typedef struct ckpt_kv {
    const char *key;
    ckpt_kv_type type;
    ckpt_kv_type element_type; /* arrays only */
    uint64_t count;            /* array elements; 1 for a scalar or string */
    int64_t i;
    uint64_t u;
    double f;
    const char *string;
    uint64_t string_len;
    const void *data;
    const char *json;
} ckpt_kv;

/* Number of key-value pairs (0 for formats other than GGUF; a split GGUF
 * gives those of its first part, which holds them all). */
CKPT_API size_t ckpt_catalog_kv_count(const ckpt_catalog *catalog);

/* The i-th pair, or NULL when out of range. */
CKPT_API const ckpt_kv *ckpt_catalog_kv(const ckpt_catalog *catalog, size_t i);

/* The pair with this key, or NULL. */
CKPT_API const ckpt_kv *ckpt_catalog_kv_find(const ckpt_catalog *catalog, const char *key);

/* "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
 * "array", "u64", "i64", "f64"; NULL for another number. */
CKPT_API const char *ckpt_kv_type_name(ckpt_kv_type type);

/* ---- ggml's tensor types -------------------------------------------------- */

/* ggml's type number (GGMLQuantizationType: F32 0, F16 1, Q4_0 2, ...,
 * BF16 30) of a dtype, or -1 when GGUF has no such type (U8, BOOL, F8...). */
CKPT_API int ckpt_dtype_ggml_type(ckpt_dtype dtype);

/* The dtype of a ggml type number, or CKPT_DTYPE_INVALID. */
CKPT_API ckpt_dtype ckpt_dtype_from_ggml_type(uint32_t ggml_type);

/* ---- llama.cpp's conversion of a Hugging Face model ------------------------- */

/*
 * Makes a plan over a Hugging Face model directory (its safetensors, the
 * plan's catalog) into the conversion llama.cpp's convert_hf_to_gguf.py
 * does (llama-cpp-python 0.3.36's llama.cpp), its GGUF key-values
 * carried by the plan: convert the plan (ckpt_convert_plan) to a `.gguf`
 * destination, and the file is byte for byte the script's.  The
 * key-values go to the output after the source's metadata, in GGUF's
 * encoding (no text in between: Llama 3's tokenizer is 128,256 tokens and
 * 280,147 merges, which tokenizer.json gives as 17 MB of JSON, read through
 * a window); a writer option metadata_json replaces any of them in place.
 *
 *   architecture  config.json's architectures[0]: LlamaForCausalLM,
 *                 MistralForCausalLM or MixtralForCausalLM (llama),
 *                 Qwen2ForCausalLM (qwen2), Qwen3ForCausalLM (qwen3),
 *                 Qwen2MoeForCausalLM (qwen2moe), Qwen3MoeForCausalLM
 *                 (qwen3moe), Phi3ForCausalLM (phi3), Gemma2ForCausalLM
 *                 (gemma2), Gemma3ForCausalLM (gemma3); another is refused
 *                 by name (CKPT_E_INVALID_ARGUMENT)
 *   tensors       llama.cpp's names (blk.N.attn_q.weight, …); the rows of
 *                 Q and K reordered as the script reorders them for llama's RoPE,
 *                 streamed like any other tensor; a mixture of experts'
 *                 per-expert tensors stacked into one per layer
 *                 (blk.N.ffn_gate_exps.weight, …), each expert streamed to
 *                 its offset; Gemma's norms + 1; Llama 3.1's rope_freqs
 *                 computed from the RoPE parameters; vectors and norms f32,
 *                 other tensors `dtype` (Q8_0 rows that are not whole
 *                 blocks: f16, as the script falls back)
 *   key-values    general.* (general.name from the directory's name, as the
 *                 script titles it; general.size_label from the parameter
 *                 count), the architecture's hyper-parameters from
 *                 config.json (linear and yarn RoPE scaling included),
 *                 general.file_type; the tokenizer: SentencePiece's
 *                 tokenizer.model (tokens, scores, token types) where the
 *                 directory has one, else tokenizer.json's byte-level BPE
 *                 (tokens, token types, merges, the pre-tokenizer's name);
 *                 then, from tokenizer.json and tokenizer_config.json,
 *                 special token ids, whether BOS/EOS/SEP are added, the
 *                 chat template
 *
 * `dtype`: CKPT_F32, CKPT_F16, CKPT_BF16 or CKPT_Q8_0 (the script's
 * --outtype), or CKPT_DTYPE_INVALID for its `auto` (the first matrix's bf16
 * or f16, else f16).  Give the plan with every tensor selected and no rules
 * of its own.  Errors name the file and the key: a missing config.json or
 * tokenizer.json (CKPT_E_NOT_FOUND), a hyper-parameter that contradicts a
 * tensor's shape, a tensor the architecture has no name for, a tokenizer
 * ckpt does not convert (a tokenizer.model that is no SentencePiece model,
 * a pre-tokenizer llama.cpp knows under no name ckpt knows), RoPE the
 * script makes tensors of that ckpt does not (longrope's factors) or a
 * RoPE type other than default, linear, yarn and (llama) llama3, a variant
 * the script converts otherwise (a Qwen3 reranker, CodeLlama's vocab_size
 * 32016), an expert count that contradicts the expert tensors or an expert
 * tensor the count needs and the weights lack; tokenizer.json that is not
 * JSON, by its byte offset.
 * `metadata_json`: NULL, or receives the same key-values as the typed
 * JSON of writer option metadata_json (as ckpt_kv.json writes a GGUF's),
 * malloc'ed (ckpt_free) — to show or edit them; given back as that option,
 * each replaces the plan's in place, so the file is the same.
 */
CKPT_API ckpt_status ckpt_gguf_llamacpp_plan(ckpt_plan *plan, const char *model_dir, ckpt_dtype dtype,
                                             char **metadata_json, ckpt_error *err);

/*
 * As ckpt_gguf_llamacpp_plan, then as llama-quantize (llama.cpp's
 * tools/quantize, no importance matrix) quantizes the script's f32 file
 * with file type `mix`: "q4_k_m", "q5_k_m", "q4_k_s", "q5_k_s" or "q6_k"
 * (any case; another is CKPT_D_UNSUPPORTED_DTYPE).  Byte for byte the file
 * `convert_hf_to_gguf.py --outtype f32` then `llama-quantize F32.gguf OUT
 * Q4_K_M` writes:
 *   types         llama_tensor_get_type's per-tensor choice — Q4_K_M:
 *                 Q4_K, with output.weight (or a tied token_embd.weight)
 *                 Q6_K, and attn_v / ffn_down Q6_K in the first and last
 *                 eighth of the layers and every third between
 *                 (use_more_bits); Q5_K_M the same over Q5_K; the _S mixes
 *                 and Q6_K as llama.cpp has them; an 8-expert model's
 *                 attn_v and attn_k Q8_0; rows that are not whole 256-element
 *                 blocks fall back as llama-quantize does (Q4_K → Q5_0, Q5_K
 *                 → Q5_1, Q6_K → Q8_0; rows not of whole 32-element blocks:
 *                 F16); vectors, norms, routers (ffn_gate_inp) f32.  Blocks
 *                 bit-exact with ggml's quantize_row_*_ref.
 *   order         the tensors in llama-quantize's order (by the layer of
 *                 "blk.N.", layerless tensors first, then by name);
 *                 general.quantization_version and general.file_type (the
 *                 mix's llama.cpp file type: 15 for Q4_K_M, 17 for Q5_K_M)
 *                 the last key-values
 * Errors as ckpt_gguf_llamacpp_plan's, and an expert model's ffn tensor
 * whose layer is past num_hidden_layers (CKPT_E_INVALID_ARGUMENT).
 */
CKPT_API ckpt_status ckpt_gguf_llamacpp_plan_mix(ckpt_plan *plan, const char *model_dir, const char *mix,
                                                 char **metadata_json, ckpt_error *err);

/*
 * And back: sets up `plan` (over a llama.cpp GGUF file) so that
 * ckpt_convert_plan into a directory writes a Hugging Face model directory
 * that transformers' from_pretrained loads, for the families
 * ckpt_gguf_llamacpp_plan writes (llama, qwen2, qwen3, phi3, gemma2,
 * gemma3, and the mixtures of experts: llama with experts — Mixtral —,
 * qwen2moe, qwen3moe: the same per-family tables, read backwards):
 *
 *   tensors       Hugging Face's names; the Q and K rows llama.cpp's
 *                 conversion reordered put back (transformers'
 *                 reverse_permute); a layer's stacked experts (experts ×
 *                 out × in) as one tensor per expert, each a slice of the
 *                 stack, streamed; Gemma's norms less the 1 the
 *                 conversion added (in float32: exact wherever w + 1 was
 *                 a float32, docs/FORMATS.md); each tensor dequantized
 *                 or cast to `dtype`; rope_freqs is no weight
 *   config.json   architectures and model_type of the family (Mixtral's
 *                 for a llama file with experts), its hyper-parameters
 *                 from the architecture's key-values (under the names of
 *                 the family's transformers config: num_local_experts or
 *                 num_experts, num_experts_per_tok, moe_intermediate_size,
 *                 shared_expert_intermediate_size; signed integers with
 *                 their sign, booleans as true and false), vocab_size from
 *                 the embeddings, rope_parameters (linear and yarn scaling
 *                 too; llama3's recovered from rope_freqs, checked by
 *                 recomputing the tensor), the special token ids,
 *                 tie_word_embeddings when there is no output.weight,
 *                 hidden_act, norm_topk_prob as llama.cpp weighs a
 *                 mixture's chosen experts, and Gemma's soft-caps, layer
 *                 types, query scale and activation as llama.cpp runs the
 *                 file
 *   tokenizer.json, tokenizer_config.json
 *                 from the tokenizer.ggml.* key-values ("gpt2": byte-level
 *                 BPE with the split of tokenizer.ggml.pre; "llama":
 *                 SentencePiece's BPE with byte fallback, its merges
 *                 rebuilt from the scores), the ids transformers' own GGUF
 *                 tokenizer gives; none when the file has no
 *                 tokenizer.ggml.model
 *
 * `dtype`: CKPT_F32, CKPT_F16 or CKPT_BF16, or CKPT_DTYPE_INVALID for the
 * GGUF's float type (general.file_type F32, F16 or BF16), else bf16.  Give
 * the plan with every tensor selected and no rules of its own.  Errors name
 * the file and the key (nothing is then written): general.architecture
 * missing or of a family ckpt does not convert, a hyper-parameter the
 * config needs missing (an expert count when the file has experts), one
 * that contradicts a tensor's shape (an expert count its stacks'
 * first dimension contradicts), a layer or expert count past llama.cpp's
 * own bounds (CKPT_E_LIMIT), a tensor
 * the family has no Hugging Face name for, a RoPE scaling other than linear
 * and yarn, a rope_freqs tensor no llama3 parameters make, a tokenizer ckpt cannot write (another tokenizer.ggml.model, an
 * unknown tokenizer.ggml.pre) or key-values of it that contradict the
 * vocabulary.
 */
CKPT_API ckpt_status ckpt_gguf_hf_plan(ckpt_plan *plan, ckpt_dtype dtype, ckpt_error *err);

/*
 * ckpt_gguf_hf_plan's tensors alone, for a load into a Hugging Face model
 * (ckpt_load, Python's `as_hf=True`): the same names, Q/K rows and dtype,
 * and the same errors about them, but no config.json and no tokenizer
 * files are made, so the tokenizer's key-values are neither read nor
 * checked, nor is rope_freqs (left out).  Gemma's norms, stored + 1,
 * load as the conversion writes them: the engine takes the 1 away in
 * float32 as it reads each one into its buffer (never a view of the
 * file).  A load gives each of the file's tensors one output: stacked
 * experts, which ckpt_gguf_hf_plan splits, are refused
 * (CKPT_E_INVALID_ARGUMENT naming the tensor).
 */
CKPT_API ckpt_status ckpt_gguf_hf_plan_tensors(ckpt_plan *plan, ckpt_dtype dtype, ckpt_error *err);

/*
 * ckpt_gguf_hf_plan_tensors for a load into transformers' model (5.0 and
 * later: Python's ckpt.transformers), which holds a mixture of experts'
 * tensors stacked, not one per expert: each layer's stacked experts load
 * as that model's tensors — Mixtral's, Qwen2-MoE's and Qwen3-MoE's
 * model.layers.N.mlp.experts.down_proj (llama.cpp's ffn_down_exps as it
 * is: experts, hidden, ff) and gate_up_proj (experts, 2 × ff, hidden: each
 * expert's ffn_gate_exps rows, then its ffn_up_exps rows), every expert's
 * rows read straight into their place in the one buffer, so that neither
 * stack is held whole nor the output copied.  The other tensors as
 * ckpt_gguf_hf_plan_tensors names them; a GGUF without experts gives that
 * function's plan.  A layer with one of ffn_gate_exps and ffn_up_exps but
 * not the other is refused (CKPT_E_INVALID_ARGUMENT naming it).  ckpt_load
 * reads the plan; a one-process conversion writes it too; a collective
 * load or conversion refuses it (CKPT_E_UNSUPPORTED).
 */
CKPT_API ckpt_status ckpt_gguf_hf_plan_joined(ckpt_plan *plan, ckpt_dtype dtype, ckpt_error *err);

/*
 * The config.json ckpt_gguf_hf_plan writes for the catalog's llama.cpp GGUF
 * (its "dtype" `dtype`, chosen as there), made by the same pass over the
 * key-values and tensors, in a plan of its own: a Hugging Face config of
 * the model the file is, where transformers' own GGUF loader may see
 * another (a llama file with experts is a Mixtral, which it reads as a
 * Llama without them).  *json is malloc'ed (release it with ckpt_free).
 * The errors of ckpt_gguf_hf_plan, less the tokenizer's: its key-values
 * are neither read nor checked.
 */
CKPT_API ckpt_status ckpt_gguf_hf_config(ckpt_catalog *catalog, ckpt_dtype dtype, char **json, ckpt_error *err);

/* ---- GGUF output's own options -------------------------------------------- */

/*
 * Given as ckpt_writer_options.gguf when GGUF is written (see
 * ckpt_writer_options.format for how GGUF output is laid out and split).
 * Zero-initialise it and set `size` (ckpt_gguf_writer_options_init).
 */
typedef struct ckpt_gguf_writer_options {
    size_t size; /* sizeof(ckpt_gguf_writer_options) */
    /* Split after this many tensors, as gguf-split --split-max-tensors
     * does (alone or with max_shard_size: whichever comes first); 0: no
     * count limit. */
    uint64_t split_max_tensors;
} ckpt_gguf_writer_options;

static inline void ckpt_gguf_writer_options_init(ckpt_gguf_writer_options *options) {
    *options = (ckpt_gguf_writer_options){0};
    options->size = sizeof *options;
}

#ifdef __cplusplus
}
#endif

#endif /* CKPT_GGUF_H */
