/*
 * swap.h — byte order: big-endian elements (torch files saved on big-endian
 * machines, big-endian GGUF) to little-endian, in place, chunk by chunk.
 * Depends on base only.
 */
#ifndef CKPT_TRANSFORM_SWAP_H
#define CKPT_TRANSFORM_SWAP_H

#include "../base/base.h"

/* Reverses the bytes of each `unit`-byte element of p[0, n); units of 0 or
 * 1 byte are left as they are. */
static inline void ckpt__swap_units(unsigned char *p, uint64_t n, unsigned unit) {
    if (unit < 2) return;
    for (uint64_t i = 0; i + unit <= n; i += unit)
        for (unsigned a = 0, z = unit - 1; a < z; a++, z--) {
            unsigned char t = p[i + a];
            p[i + a] = p[i + z];
            p[i + z] = t;
        }
}

/* The byte-swapped unit of a dtype: the element, or each half of a
 * complex number. */
static inline unsigned ckpt__swap_unit(ckpt_dtype d) {
    unsigned bytes = ckpt_dtype_bits(d) / 8;
    return d == CKPT_C64 ? 4 : bytes ? bytes : 1;
}

#endif
