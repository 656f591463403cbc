/*
 * crc32.h — the CRC-32 of ZIP members (zlib's crc32: the reflected
 * polynomial 0xEDB88320, as ZIP, gzip and PNG use it), fast.
 *
 * Checking every byte a load reads costs what the CRC costs: zlib 1.2's
 * table-driven crc32 runs at about 4 GB/s a core, under half of memcpy, so
 * a warm load checked with it took 2.7 times as long.  Where the CPU has
 * PCLMULQDQ (x86-64 since 2010), the data is folded 64 bytes at a time by
 * carry-less multiplication ("Fast CRC Computation for Generic Polynomials
 * Using PCLMULQDQ Instruction", Gopal, Ozturk et al., Intel 2009), about 4
 * times faster here; with AVX-512's VPCLMULQDQ, 256 bytes at a time, 10
 * times (L2-resident data on a loaded 2-vCPU AMD EPYC VM: zlib 1.2 GB/s,
 * PCLMULQDQ 5 GB/s, VPCLMULQDQ 11-13.5 GB/s).  Elsewhere, and for the last
 * bytes, zlib's crc32.  All give zlib's value bit for bit.  CKPT_SIMD=scalar
 * takes zlib's always, CKPT_SIMD=avx2 at most PCLMULQDQ.
 * Depends on base only.
 */
#ifndef CKPT_TRANSFORM_CRC32_H
#define CKPT_TRANSFORM_CRC32_H

#include "../base/base.h"

/* The CRC-32 of data[0, len) continuing `crc` (0 for a start): what
 * zlib's crc32_z(crc, data, len) gives. */
CKPT__HIDDEN uint32_t ckpt__crc32(uint32_t crc, const void *data, size_t len);

/* The same at most at a level: 1 zlib's, 2 PCLMULQDQ, 3 VPCLMULQDQ (the
 * CPU's, if lower); tests compare them. */
CKPT__HIDDEN uint32_t ckpt__crc32_at(int level, uint32_t crc, const void *data, size_t len);

#endif
