/* dtype.c — the dtype table: safetensors names and bit widths. */
#include <string.h>

#include "base.h"

typedef struct dtype_entry {
    const char *name;
    unsigned bits;
} dtype_entry;

/* Indexed by ckpt_dtype; the order is safetensors' Dtype enum order. */
static const dtype_entry dtype_table[CKPT_DTYPE_COUNT] = {
    [CKPT_DTYPE_INVALID] = {NULL, 0},
    [CKPT_BOOL] = {"BOOL", 8},
    [CKPT_F4] = {"F4", 4},
    [CKPT_F6_E2M3] = {"F6_E2M3", 6},
    [CKPT_F6_E3M2] = {"F6_E3M2", 6},
    [CKPT_U8] = {"U8", 8},
    [CKPT_I8] = {"I8", 8},
    [CKPT_F8_E5M2] = {"F8_E5M2", 8},
    [CKPT_F8_E4M3] = {"F8_E4M3", 8},
    [CKPT_F8_E8M0] = {"F8_E8M0", 8},
    [CKPT_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [CKPT_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [CKPT_I16] = {"I16", 16},
    [CKPT_U16] = {"U16", 16},
    [CKPT_F16] = {"F16", 16},
    [CKPT_BF16] = {"BF16", 16},
    [CKPT_I32] = {"I32", 32},
    [CKPT_U32] = {"U32", 32},
    [CKPT_F32] = {"F32", 32},
    [CKPT_C64] = {"C64", 64},
    [CKPT_F64] = {"F64", 64},
    [CKPT_I64] = {"I64", 64},
    [CKPT_U64] = {"U64", 64},
};

static bool valid(ckpt_dtype d) { return d > CKPT_DTYPE_INVALID && d < CKPT_DTYPE_COUNT; }

const char *ckpt_dtype_name(ckpt_dtype dtype) { return valid(dtype) ? dtype_table[dtype].name : NULL; }

unsigned ckpt_dtype_bits(ckpt_dtype dtype) { return valid(dtype) ? dtype_table[dtype].bits : 0; }

ckpt_dtype ckpt_dtype_from_name(const char *name) {
    if (!name) return CKPT_DTYPE_INVALID;
    for (int d = 1; d < CKPT_DTYPE_COUNT; d++)
        if (strcmp(dtype_table[d].name, name) == 0) return (ckpt_dtype)d;
    return CKPT_DTYPE_INVALID;
}

bool ckpt__shape_numel(uint32_t ndim, const uint64_t *shape, uint64_t *numel) {
    uint64_t n = 1;
    for (uint32_t i = 0; i < ndim; i++)
        if (!ckpt__mul_u64(n, shape[i], &n)) return false;
    *numel = n;
    return true;
}

ckpt_status ckpt__dtype_nbytes(ckpt_dtype dtype, uint64_t numel, uint64_t *nbytes) {
    uint64_t bits;
    if (!valid(dtype)) return CKPT_E_UNKNOWN_DTYPE;
    if (!ckpt__mul_u64(numel, dtype_table[dtype].bits, &bits)) return CKPT_E_SHAPE_OVERFLOW;
    if (bits % 8) return CKPT_E_PARTIAL_BYTE;
    *nbytes = bits / 8;
    return CKPT_OK;
}
