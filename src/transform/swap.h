/*
 * swap.h — byte order: big-endian elements (torch files saved on big-endian
 * machines, big-endian GGUF) to little-endian, in place, chunk by chunk,
 * by dtype (ckpt__swap_units, the bytes of each number, is base's).
 * Depends on base only.
 */
#ifndef CKPT_TRANSFORM_SWAP_H
#define CKPT_TRANSFORM_SWAP_H

#include "../base/base.h"

/* The byte-swapped unit of a dtype: the element, or each half of a
 * complex number. */
static inline unsigned ckpt__swap_unit(ckpt_dtype d) {
    unsigned bytes = ckpt_dtype_bits(d) / 8;
    return d == CKPT_C64 ? 4 : bytes ? bytes : 1;
}

/* Byte-swaps whole units of `dtype` in p[0, n): elements (each half of a
 * complex), or the fields of a GGUF block type as gguf-py's
 * gguf_convert_endian swaps them (the f16 scales of Q4_0, Q8_0, Q4_K and
 * Q6_K; nothing in MXFP4 and NVFP4; the GGUF reader refuses other block
 * types in big-endian files). */
static inline void ckpt__swap_dtype(ckpt_dtype dtype, unsigned char *p, uint64_t n) {
    if (!ckpt_dtype_is_block(dtype)) {
        ckpt__swap_units(p, n, ckpt__swap_unit(dtype));
        return;
    }
    uint32_t size = ckpt_dtype_block_bytes(dtype);
    for (uint64_t at = 0; at + size <= n; at += size) {
        switch (dtype) {
        case CKPT_Q4_0: case CKPT_Q8_0: ckpt__swap_units(p + at, 2, 2); break;
        case CKPT_Q4_K: ckpt__swap_units(p + at, 4, 2); break;
        case CKPT_Q6_K: ckpt__swap_units(p + at + 208, 2, 2); break;
        default: break;
        }
    }
}

#endif
