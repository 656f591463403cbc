/* dtype.c — the dtype table: safetensors names and bit widths; the
 * float16 and bfloat16 scalar conversions. */
#include <string.h>

#include "base.h"
#include "ckpt_gguf.h" /* ggml type numbers */

typedef struct dtype_entry {
    const char *name;
    unsigned bits;       /* per element; 0 for block types */
    uint32_t unit_elems; /* elements per unit (a block for block types) */
    uint32_t unit_bytes; /* bytes per unit */
    int ggml;            /* ggml type number, -1 when GGUF has none */
} dtype_entry;

/* Indexed by ckpt_dtype; the order is safetensors' Dtype enum order. */
static const dtype_entry dtype_table[CKPT_DTYPE_COUNT] = {
    [CKPT_DTYPE_INVALID] = {NULL, 0},
    [CKPT_BOOL] = {"BOOL", 8, 1, 1, -1},
    [CKPT_F4] = {"F4", 4, 2, 1, -1},
    [CKPT_F6_E2M3] = {"F6_E2M3", 6, 4, 3, -1},
    [CKPT_F6_E3M2] = {"F6_E3M2", 6, 4, 3, -1},
    [CKPT_U8] = {"U8", 8, 1, 1, -1},
    [CKPT_I8] = {"I8", 8, 1, 1, 24},
    [CKPT_F8_E5M2] = {"F8_E5M2", 8, 1, 1, -1},
    [CKPT_F8_E4M3] = {"F8_E4M3", 8, 1, 1, -1},
    [CKPT_F8_E8M0] = {"F8_E8M0", 8, 1, 1, -1},
    [CKPT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8, 1, 1, -1},
    [CKPT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8, 1, 1, -1},
    [CKPT_I16] = {"I16", 16, 1, 2, 25},
    [CKPT_U16] = {"U16", 16, 1, 2, -1},
    [CKPT_F16] = {"F16", 16, 1, 2, 1},
    [CKPT_BF16] = {"BF16", 16, 1, 2, 30},
    [CKPT_I32] = {"I32", 32, 1, 4, 26},
    [CKPT_U32] = {"U32", 32, 1, 4, -1},
    [CKPT_F32] = {"F32", 32, 1, 4, 0},
    [CKPT_C64] = {"C64", 64, 1, 8, -1},
    [CKPT_F64] = {"F64", 64, 1, 8, 28},
    [CKPT_I64] = {"I64", 64, 1, 8, 27},
    [CKPT_U64] = {"U64", 64, 1, 8, -1},
    [CKPT_Q4_0] = {"Q4_0", 0, 32, 18, 2},
    [CKPT_Q4_1] = {"Q4_1", 0, 32, 20, 3},
    [CKPT_Q5_0] = {"Q5_0", 0, 32, 22, 6},
    [CKPT_Q5_1] = {"Q5_1", 0, 32, 24, 7},
    [CKPT_Q8_0] = {"Q8_0", 0, 32, 34, 8},
    [CKPT_Q8_1] = {"Q8_1", 0, 32, 40, 9},
    [CKPT_Q2_K] = {"Q2_K", 0, 256, 84, 10},
    [CKPT_Q3_K] = {"Q3_K", 0, 256, 110, 11},
    [CKPT_Q4_K] = {"Q4_K", 0, 256, 144, 12},
    [CKPT_Q5_K] = {"Q5_K", 0, 256, 176, 13},
    [CKPT_Q6_K] = {"Q6_K", 0, 256, 210, 14},
    [CKPT_Q8_K] = {"Q8_K", 0, 256, 292, 15},
    [CKPT_IQ2_XXS] = {"IQ2_XXS", 0, 256, 66, 16},
    [CKPT_IQ2_XS] = {"IQ2_XS", 0, 256, 74, 17},
    [CKPT_IQ3_XXS] = {"IQ3_XXS", 0, 256, 98, 18},
    [CKPT_IQ1_S] = {"IQ1_S", 0, 256, 50, 19},
    [CKPT_IQ4_NL] = {"IQ4_NL", 0, 32, 18, 20},
    [CKPT_IQ3_S] = {"IQ3_S", 0, 256, 110, 21},
    [CKPT_IQ2_S] = {"IQ2_S", 0, 256, 82, 22},
    [CKPT_IQ4_XS] = {"IQ4_XS", 0, 256, 136, 23},
    [CKPT_IQ1_M] = {"IQ1_M", 0, 256, 56, 29},
    [CKPT_TQ1_0] = {"TQ1_0", 0, 256, 54, 34},
    [CKPT_TQ2_0] = {"TQ2_0", 0, 256, 66, 35},
    [CKPT_MXFP4] = {"MXFP4", 0, 32, 17, 39},
    [CKPT_NVFP4] = {"NVFP4", 0, 64, 36, 40},
    [CKPT_Q1_0] = {"Q1_0", 0, 128, 18, 41},
};

static bool valid(ckpt_dtype d) { return d > CKPT_DTYPE_INVALID && d < CKPT_DTYPE_COUNT; }

const char *ckpt_dtype_name(ckpt_dtype dtype) { return valid(dtype) ? dtype_table[dtype].name : NULL; }

unsigned ckpt_dtype_bits(ckpt_dtype dtype) { return valid(dtype) ? dtype_table[dtype].bits : 0; }

int ckpt_dtype_is_block(ckpt_dtype dtype) { return valid(dtype) && dtype_table[dtype].bits == 0; }
uint32_t ckpt_dtype_block_elems(ckpt_dtype dtype) { return valid(dtype) ? dtype_table[dtype].unit_elems : 0; }
uint32_t ckpt_dtype_block_bytes(ckpt_dtype dtype) { return valid(dtype) ? dtype_table[dtype].unit_bytes : 0; }
int ckpt_dtype_ggml_type(ckpt_dtype dtype) { return valid(dtype) ? dtype_table[dtype].ggml : -1; }

ckpt_dtype ckpt_dtype_from_ggml_type(uint32_t ggml_type) {
    for (int d = 1; d < CKPT_DTYPE_COUNT; d++)
        if (dtype_table[d].ggml >= 0 && (uint32_t)dtype_table[d].ggml == ggml_type) return (ckpt_dtype)d;
    return CKPT_DTYPE_INVALID;
}

bool ckpt__block_rows_ok(ckpt_dtype dtype, uint32_t ndim, const uint64_t *shape) {
    if (!ckpt_dtype_is_block(dtype)) return true;
    return ndim > 0 && shape[ndim - 1] % dtype_table[dtype].unit_elems == 0;
}

ckpt_dtype ckpt_dtype_from_name(const char *name) {
    if (!name) return CKPT_DTYPE_INVALID;
    for (int d = 1; d < CKPT_DTYPE_COUNT; d++) /* first letters first: headers ask this once per tensor */
        if (dtype_table[d].name[0] == name[0] && strcmp(dtype_table[d].name, name) == 0) return (ckpt_dtype)d;
    return CKPT_DTYPE_INVALID;
}

/* Bytes of `numel` elements of a dtype, rounded up (whole blocks; packed
 * elements by eights of them, so that no bit count overflows); false past
 * 2^64.  *partial: they end inside a byte or a block. */
static bool bytes_of(const dtype_entry *d, uint64_t numel, uint64_t *bytes, bool *partial) {
    uint64_t whole, rest;
    if (d->bits == 0) {
        *partial = numel % d->unit_elems != 0;
        return ckpt__mul_u64(numel / d->unit_elems + *partial, d->unit_bytes, bytes);
    }
    rest = numel % 8 * d->bits; /* the bits of the last, incomplete eight */
    *partial = rest % 8 != 0;
    return ckpt__mul_u64(numel / 8, d->bits, &whole) && ckpt__add_u64(whole, rest / 8 + *partial, bytes);
}

/* The product of the nonzero axes (what an axis of 0 must not hide);
 * false past INT64_MAX. */
static bool nonzero_product(uint32_t ndim, const uint64_t *shape, uint64_t *span, bool *empty) {
    uint64_t n = 1;
    *empty = false;
    for (uint32_t i = 0; i < ndim; i++) {
        if (shape[i] == 0) *empty = true;
        else if (!ckpt__mul_u64(n, shape[i], &n) || n > (uint64_t)INT64_MAX) return false;
    }
    *span = n;
    return true;
}

bool ckpt__shape_numel(uint32_t ndim, const uint64_t *shape, uint64_t *numel) {
    uint64_t span;
    bool empty;
    if (!nonzero_product(ndim, shape, &span, &empty)) return false;
    *numel = empty ? 0 : span;
    return true;
}

ckpt_status ckpt__tensor_size(ckpt_dtype dtype, uint32_t ndim, const uint64_t *shape, uint64_t *numel,
                              uint64_t *nbytes) {
    uint64_t span, bytes;
    bool empty, partial;
    if (!valid(dtype)) return CKPT__D(UNKNOWN_DTYPE);
    if (!nonzero_product(ndim, shape, &span, &empty)) return CKPT__D(SHAPE_OVERFLOW);
    /* The nonzero axes' bytes, rounded up. */
    if (!bytes_of(&dtype_table[dtype], span, &bytes, &partial) || bytes > (uint64_t)INT64_MAX)
        return CKPT__D(SHAPE_OVERFLOW);
    *numel = empty ? 0 : span;
    return ckpt__dtype_nbytes(dtype, *numel, nbytes);
}

ckpt_status ckpt__dtype_nbytes(ckpt_dtype dtype, uint64_t numel, uint64_t *nbytes) {
    bool partial;
    if (!valid(dtype)) return CKPT__D(UNKNOWN_DTYPE);
    if (!bytes_of(&dtype_table[dtype], numel, nbytes, &partial)) return CKPT__D(SHAPE_OVERFLOW);
    if (partial) return dtype_table[dtype].bits ? CKPT__D(PARTIAL_BYTE) : CKPT__D(GGUF_DIMS);
    return CKPT_OK;
}

/* ---- float16 / bfloat16 -------------------------------------------------- */

/* As VCVTPH2PS: exact; a NaN keeps its sign and payload and becomes quiet. */
float ckpt__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    if (exp == 0x1F) return ckpt__f32_from(sign | 0x7F800000 | (mant ? 0x400000 | (mant << 13) : 0));
    if (exp == 0) {
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    return ckpt__f32_from(sign | ((exp + 112) << 23) | (mant << 13));
}

/* As VCVTPS2PH with round to nearest even (and torch on CPU). */
uint16_t ckpt__f32_to_f16(float f) {
    uint32_t x = ckpt__f32_bits(f), sign = (x >> 16) & 0x8000;
    x &= 0x7FFFFFFF;
    if (x > 0x7F800000) return (uint16_t)(sign | 0x7E00 | ((x >> 13) & 0x3FF));
    if (x >= 0x477FF000) return (uint16_t)(sign | 0x7C00); /* 65520 and up round to infinity */
    if (x >= 0x38800000) return (uint16_t)(sign | ((x - 0x38000000 + 0xFFF + ((x >> 13) & 1)) >> 13));
    /* Subnormal or zero: adding 0.5 lines the f16 ulp up with the f32 ulp,
     * so the FPU's own rounding is the rounding. */
    uint32_t r = ckpt__f32_bits(ckpt__f32_from(x) + 0.5f) - 0x3F000000;
    return (uint16_t)(sign | r);
}

float ckpt__bf16_to_f32(uint16_t b) { return ckpt__f32_from((uint32_t)b << 16); }

uint16_t ckpt__f32_to_bf16(float f) {
    uint32_t x = ckpt__f32_bits(f);
    if ((x & 0x7FFFFFFF) > 0x7F800000) return (uint16_t)((x >> 16) | 0x40); /* quiet, sign kept */
    return (uint16_t)((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
}
