/* quant.c — ggml's block types: dequantization to F32, F16 and BF16, and
 * quantization to Q8_0 and Q4_0, bit for bit as the gguf package's
 * gguf.quants computes them with numpy (float32 arithmetic in its order,
 * no fused multiply-add: this file is compiled with -ffp-contract=off).
 *
 * Kernels convert a count of *blocks* (the engine's unit for block types):
 * a dequantizing kernel reads n blocks and writes n × block_elems values;
 * a quantizing one reads n × block_elems values and writes n blocks. */
#include <math.h>
#include <string.h>

#include "cast.h"

enum { QK = 32, QK_K = 256 };

static inline float f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return ckpt__f16_to_f32(h);
}

/* ---- one block → float32 ------------------------------------------------------ */

static void deq_q4_0(const uint8_t *b, float *y) {
    float d = f16(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)((int)(qs[j] & 0x0F) - 8);
        y[j + 16] = d * (float)((int)(qs[j] >> 4) - 8);
    }
}

static void deq_q4_1(const uint8_t *b, float *y) {
    float d = f16(b), m = f16(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)(qs[j] & 0x0F) + m;
        y[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
}

static void deq_q5_0(const uint8_t *b, float *y) {
    float d = f16(b);
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 32; j++) {
        int lo = j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4;
        int q = (lo | (int)(((qh >> j) & 1) << 4)) - 16;
        y[j] = d * (float)q;
    }
}

static void deq_q5_1(const uint8_t *b, float *y) {
    float d = f16(b), m = f16(b + 2);
    uint32_t qh;
    memcpy(&qh, b + 4, 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 32; j++) {
        int lo = j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4;
        int q = lo | (int)(((qh >> j) & 1) << 4);
        y[j] = d * (float)q + m;
    }
}

static void deq_q8_0(const uint8_t *b, float *y) {
    float d = f16(b);
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
}

static void deq_q2_k(const uint8_t *b, float *y) {
    const uint8_t *scales = b, *qs = b + 16;
    float d = f16(b + 80), dmin = f16(b + 82), dl[16], ml[16];
    for (int i = 0; i < 16; i++) dl[i] = d * (float)(scales[i] & 0x0F), ml[i] = dmin * (float)(scales[i] >> 4);
    for (int e = 0; e < QK_K; e++) {
        int g = e / 128, s = (e / 32) % 4, k = e % 32;
        float q = (float)((qs[g * 32 + k] >> (2 * s)) & 3);
        y[e] = dl[e / 16] * q - ml[e / 16];
    }
}

static void deq_q3_k(const uint8_t *b, float *y) {
    const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
    float d = f16(b + 108), dl[16];
    for (int i = 0; i < 16; i++) {
        int ls = (i < 8 ? sc[i] : sc[i - 8] >> 4) & 0x0F;
        int hs = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
        dl[i] = d * (float)((int8_t)(uint8_t)(ls | (hs << 4)) - 32);
    }
    for (int e = 0; e < QK_K; e++) {
        int g = e / 128, s = (e / 32) % 4, k = e % 32;
        int ql = (qs[g * 32 + k] >> (2 * s)) & 3;
        int qh = ((hmask[k] >> (e / 32)) & 1) ^ 1;
        y[e] = dl[e / 16] * (float)(int8_t)(ql - (qh << 2));
    }
}

static void scale_min_k4(const uint8_t *s, uint8_t *sc, uint8_t *mn) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 0x3F;
        sc[j + 4] = (uint8_t)((s[8 + j] & 0x0F) | ((s[j] >> 2) & 0x30));
        mn[j] = s[4 + j] & 0x3F;
        mn[j + 4] = (uint8_t)((s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30));
    }
}

static void deq_q4_k(const uint8_t *b, float *y) {
    float d = f16(b), dmin = f16(b + 2), dl[8], ml[8];
    uint8_t sc[8], mn[8];
    scale_min_k4(b + 4, sc, mn);
    for (int i = 0; i < 8; i++) dl[i] = d * (float)sc[i], ml[i] = dmin * (float)mn[i];
    const uint8_t *qs = b + 16;
    for (int e = 0; e < QK_K; e++) {
        int i = e / 32, k = e % 32, g = i / 2, h = i % 2;
        float q = (float)((qs[g * 32 + k] >> (4 * h)) & 0x0F);
        y[e] = dl[i] * q - ml[i];
    }
}

static void deq_q5_k(const uint8_t *b, float *y) {
    float d = f16(b), dmin = f16(b + 2), dl[8], ml[8];
    uint8_t sc[8], mn[8];
    scale_min_k4(b + 4, sc, mn);
    for (int i = 0; i < 8; i++) dl[i] = d * (float)sc[i], ml[i] = dmin * (float)mn[i];
    const uint8_t *qh = b + 16, *qs = b + 48;
    for (int e = 0; e < QK_K; e++) {
        int i = e / 32, k = e % 32, g = i / 2, h = i % 2;
        int lo = (qs[g * 32 + k] >> (4 * h)) & 0x0F, hi = (qh[k] >> i) & 1;
        y[e] = dl[i] * (float)(lo | (hi << 4)) - ml[i];
    }
}

static void deq_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = f16(b + 208), dl[16];
    for (int i = 0; i < 16; i++) dl[i] = d * (float)sc[i];
    for (int e = 0; e < QK_K; e++) {
        int g = e / 128, h = (e / 64) % 2, j = e % 64, s = (e / 32) % 4, k = e % 32;
        int lo = (ql[g * 64 + j] >> (4 * h)) & 0x0F;
        int hi = (qh[g * 32 + k] >> (2 * s)) & 3;
        y[e] = dl[e / 16] * (float)((int8_t)(uint8_t)(lo | (hi << 4)) - 32);
    }
}

static void deq_tq1_0(const uint8_t *b, float *y) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t *qs = b, *qh = b + 48;
    float d = f16(b + 52);
    uint8_t v[QK_K];
    for (int p = 0; p < 5; p++)
        for (int k = 0; k < 32; k++) v[p * 32 + k] = (uint8_t)(qs[k] * pow3[p]);
    for (int p = 0; p < 5; p++)
        for (int k = 0; k < 16; k++) v[160 + p * 16 + k] = (uint8_t)(qs[32 + k] * pow3[p]);
    for (int p = 0; p < 4; p++)
        for (int k = 0; k < 4; k++) v[240 + p * 4 + k] = (uint8_t)(qh[k] * pow3[p]);
    for (int e = 0; e < QK_K; e++) y[e] = d * (float)((int8_t)(((uint16_t)v[e] * 3) >> 8) - 1);
}

static void deq_tq2_0(const uint8_t *b, float *y) {
    const uint8_t *qs = b;
    float d = f16(b + 64);
    for (int e = 0; e < QK_K; e++) {
        int g = e / 128, s = (e / 32) % 4, k = e % 32;
        y[e] = d * (float)(((qs[g * 32 + k] >> (2 * s)) & 3) - 1);
    }
}

static void deq_mxfp4(const uint8_t *b, float *y) {
    static const int8_t kvalues[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    uint8_t e = b[0];
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23; /* ggml_e8m0_to_fp32_half */
    float d;
    memcpy(&d, &bits, 4);
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)kvalues[b[1 + j] & 0x0F];
        y[j + 16] = d * (float)kvalues[b[1 + j] >> 4];
    }
}

/* ---- float32 → one block (gguf.quants' quantize_blocks) ---------------------- */

/* numpy's astype to a small integer from float32, for the values these
 * quantizers produce (a NaN or infinity, only from non-finite input,
 * gives 0 as x86's conversion does). */
static inline int to_int(float v) { return isfinite(v) ? (int)v : 0; }

/* gguf.quants.np_roundf: round half away from zero, in float32. */
static inline float np_roundf(float n) {
    float a = fabsf(n), fl = floorf(a), r = fl + floorf(2.0f * (a - fl));
    if (isnan(n)) return n;
    return n > 0 ? r : n < 0 ? -r : 0.0f * r;
}

static void q_q8_0(const float *x, uint8_t *b) {
    float amax = 0;
    bool nan = false;
    for (int j = 0; j < 32; j++) {
        float a = fabsf(x[j]);
        nan |= a != a;
        amax = a > amax ? a : amax;
    }
    float d = nan ? NAN : amax / 127.0f;
    float id = d == 0 ? 0.0f : 1.0f / d;
    uint16_t h = ckpt__f32_to_f16(d);
    memcpy(b, &h, 2);
    int8_t *q = (int8_t *)(b + 2);
    if (isfinite(d) && isfinite(id)) {
        /* Every x * id is finite and within about ±127: np_roundf without
         * libm calls (a truncation is floor for a ≥ 0; 2 × the fraction is
         * exact, so floor(2 × frac) is frac ≥ 0.5), branch-free. */
        for (int j = 0; j < 32; j++) {
            float v = x[j] * id, a = fabsf(v);
            int32_t t = (int32_t)a;
            int32_t r = t + ((a - (float)t) >= 0.5f);
            q[j] = (int8_t)(v < 0 ? -r : r);
        }
        return;
    }
    for (int j = 0; j < 32; j++) q[j] = (int8_t)to_int(np_roundf(x[j] * id));
}

static void q_q4_0(const float *x, uint8_t *b) {
    /* argmax of |x|: the first largest, or the first NaN */
    int imax = 0;
    float best = fabsf(x[0]);
    for (int j = 1; j < 32 && !isnan(best); j++) {
        float a = fabsf(x[j]);
        if (isnan(a) || a > best) best = a, imax = j;
    }
    float d = x[imax] / -8.0f;
    float id = d == 0 ? 0.0f : 1.0f / d;
    uint16_t h = ckpt__f32_to_f16(d);
    memcpy(b, &h, 2);
    uint8_t q[32];
    if (isfinite(d) && isfinite(id)) {
        /* x * id + 8.5 lies in about [0.5, 16.5]: truncf is the int cast. */
        for (int j = 0; j < 32; j++) {
            int32_t v = (int32_t)(x[j] * id + 8.5f);
            q[j] = (uint8_t)(v < 0 ? 0 : v > 15 ? 15 : v);
        }
    } else {
        for (int j = 0; j < 32; j++) {
            int v = to_int(truncf(x[j] * id + 8.5f));
            q[j] = (uint8_t)(v < 0 ? 0 : v > 15 ? 15 : v);
        }
    }
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(q[j] | (q[j + 16] << 4));
}

/* ---- kernels ------------------------------------------------------------------- */

static inline void enc_f32(const float *y, unsigned char *d, int n) { memcpy(d, y, (size_t)n * 4); }
static inline void enc_f16(const float *y, unsigned char *d, int n) {
    for (int i = 0; i < n; i++) {
        uint16_t h = ckpt__f32_to_f16(y[i]);
        memcpy(d + 2 * i, &h, 2);
    }
}
static inline void enc_bf16(const float *y, unsigned char *d, int n) {
    for (int i = 0; i < n; i++) {
        uint16_t h = ckpt__f32_to_bf16(y[i]);
        memcpy(d + 2 * i, &h, 2);
    }
}

#define DEQ(NAME, ELEMS, BYTES)                                                                          \
    static void NAME##_f32(const void *src, void *dst, size_t n) {                                     \
        const uint8_t *s = src;                                                                        \
        unsigned char *d = dst;                                                                        \
        float y[ELEMS];                                                                                \
        for (size_t i = 0; i < n; i++) deq_##NAME(s + i * BYTES, y), enc_f32(y, d + i * ELEMS * 4, ELEMS); \
    }                                                                                                  \
    static void NAME##_f16(const void *src, void *dst, size_t n) {                                     \
        const uint8_t *s = src;                                                                        \
        unsigned char *d = dst;                                                                        \
        float y[ELEMS];                                                                                \
        for (size_t i = 0; i < n; i++) deq_##NAME(s + i * BYTES, y), enc_f16(y, d + i * ELEMS * 2, ELEMS); \
    }                                                                                                  \
    static void NAME##_bf16(const void *src, void *dst, size_t n) {                                    \
        const uint8_t *s = src;                                                                        \
        unsigned char *d = dst;                                                                        \
        float y[ELEMS];                                                                                \
        for (size_t i = 0; i < n; i++) deq_##NAME(s + i * BYTES, y), enc_bf16(y, d + i * ELEMS * 2, ELEMS); \
    }
DEQ(q4_0, 32, 18)
DEQ(q4_1, 32, 20)
DEQ(q5_0, 32, 22)
DEQ(q5_1, 32, 24)
DEQ(q8_0, 32, 34)
DEQ(q2_k, 256, 84)
DEQ(q3_k, 256, 110)
DEQ(q4_k, 256, 144)
DEQ(q5_k, 256, 176)
DEQ(q6_k, 256, 210)
DEQ(tq1_0, 256, 54)
DEQ(tq2_0, 256, 66)
DEQ(mxfp4, 32, 17)

static inline void dec_f32(const unsigned char *s, float *x, int n) { memcpy(x, s, (size_t)n * 4); }
static inline void dec_f16(const unsigned char *s, float *x, int n) {
    for (int i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        x[i] = ckpt__f16_to_f32(h);
    }
}
static inline void dec_bf16(const unsigned char *s, float *x, int n) {
    for (int i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        x[i] = ckpt__bf16_to_f32(h);
    }
}
static inline void dec_f64(const unsigned char *s, float *x, int n) {
    for (int i = 0; i < n; i++) {
        double v;
        memcpy(&v, s + 8 * i, 8);
        x[i] = (float)v;
    }
}

#define QUANT(NAME, BYTES, FROM, SIZE)                                                                    \
    static void FROM##_##NAME(const void *src, void *dst, size_t n) {                                   \
        const unsigned char *s = src;                                                                   \
        uint8_t *d = dst;                                                                               \
        float x[32];                                                                                    \
        for (size_t i = 0; i < n; i++) dec_##FROM(s + i * 32 * SIZE, x, 32), q_##NAME(x, d + i * BYTES); \
    }
#define QUANT_FROM_ALL(NAME, BYTES) QUANT(NAME, BYTES, f32, 4) QUANT(NAME, BYTES, f16, 2) QUANT(NAME, BYTES, bf16, 2) \
    QUANT(NAME, BYTES, f64, 8)
QUANT_FROM_ALL(q8_0, 34)
QUANT_FROM_ALL(q4_0, 18)

/* A block type to itself: whole blocks copied. */
#define COPY_BLOCKS(BYTES)                                                                               \
    static void copy_blocks_##BYTES(const void *src, void *dst, size_t n) { memcpy(dst, src, n * BYTES); }
COPY_BLOCKS(17)
COPY_BLOCKS(18)
COPY_BLOCKS(20)
COPY_BLOCKS(22)
COPY_BLOCKS(24)
COPY_BLOCKS(34)
COPY_BLOCKS(36)
COPY_BLOCKS(40)
COPY_BLOCKS(50)
COPY_BLOCKS(54)
COPY_BLOCKS(56)
COPY_BLOCKS(66)
COPY_BLOCKS(74)
COPY_BLOCKS(82)
COPY_BLOCKS(84)
COPY_BLOCKS(98)
COPY_BLOCKS(110)
COPY_BLOCKS(136)
COPY_BLOCKS(144)
COPY_BLOCKS(176)
COPY_BLOCKS(210)
COPY_BLOCKS(292)

static ckpt__cast_fn copy_kernel(unsigned bytes) {
    switch (bytes) {
#define C(B) case B: return copy_blocks_##B;
        C(17) C(18) C(20) C(22) C(24) C(34) C(36) C(40) C(50) C(54) C(56) C(66) C(74) C(82) C(84) C(98) C(110) C(136)
        C(144) C(176) C(210) C(292)
#undef C
    }
    return NULL;
}

void ckpt__quant_fill(ckpt__cast_fn (*t)[CKPT_DTYPE_COUNT]) {
    static const struct { ckpt_dtype d; ckpt__cast_fn f32, f16, bf16; } deq[] = {
        {CKPT_Q4_0, q4_0_f32, q4_0_f16, q4_0_bf16},     {CKPT_Q4_1, q4_1_f32, q4_1_f16, q4_1_bf16},
        {CKPT_Q5_0, q5_0_f32, q5_0_f16, q5_0_bf16},     {CKPT_Q5_1, q5_1_f32, q5_1_f16, q5_1_bf16},
        {CKPT_Q8_0, q8_0_f32, q8_0_f16, q8_0_bf16},     {CKPT_Q2_K, q2_k_f32, q2_k_f16, q2_k_bf16},
        {CKPT_Q3_K, q3_k_f32, q3_k_f16, q3_k_bf16},     {CKPT_Q4_K, q4_k_f32, q4_k_f16, q4_k_bf16},
        {CKPT_Q5_K, q5_k_f32, q5_k_f16, q5_k_bf16},     {CKPT_Q6_K, q6_k_f32, q6_k_f16, q6_k_bf16},
        {CKPT_TQ1_0, tq1_0_f32, tq1_0_f16, tq1_0_bf16}, {CKPT_TQ2_0, tq2_0_f32, tq2_0_f16, tq2_0_bf16},
        {CKPT_MXFP4, mxfp4_f32, mxfp4_f16, mxfp4_bf16},
    };
    for (size_t i = 0; i < sizeof deq / sizeof deq[0]; i++) {
        t[deq[i].d][CKPT_F32] = deq[i].f32;
        t[deq[i].d][CKPT_F16] = deq[i].f16;
        t[deq[i].d][CKPT_BF16] = deq[i].bf16;
    }
    t[CKPT_F32][CKPT_Q8_0] = f32_q8_0, t[CKPT_F16][CKPT_Q8_0] = f16_q8_0;
    t[CKPT_BF16][CKPT_Q8_0] = bf16_q8_0, t[CKPT_F64][CKPT_Q8_0] = f64_q8_0;
    t[CKPT_F32][CKPT_Q4_0] = f32_q4_0, t[CKPT_F16][CKPT_Q4_0] = f16_q4_0;
    t[CKPT_BF16][CKPT_Q4_0] = bf16_q4_0, t[CKPT_F64][CKPT_Q4_0] = f64_q4_0;
    for (int d = 1; d < CKPT_DTYPE_COUNT; d++)
        if (ckpt_dtype_is_block((ckpt_dtype)d)) t[d][d] = copy_kernel(ckpt_dtype_block_bytes((ckpt_dtype)d));
}
