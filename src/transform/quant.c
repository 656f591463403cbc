/* quant.c — ggml's block types: dequantization to F32, F16 and BF16;
 * quantization to Q8_0 and Q4_0 bit for bit as the gguf package's
 * gguf.quants computes them with numpy, and to Q5_0, Q5_1, Q4_K, Q5_K and
 * Q6_K bit for bit as ggml's reference quantizers (ggml-quants.c) do
 * (float32 arithmetic in their order, no fused multiply-add: this file is
 * compiled with -ffp-contract=off).
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

void ckpt__quant_scale_min_k4(const uint8_t *s, uint8_t *sc, uint8_t *mn) {
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
    ckpt__quant_scale_min_k4(b + 4, sc, mn);
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
    ckpt__quant_scale_min_k4(b + 4, sc, mn);
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

void ckpt__quant_q8_0_block(const float *x, uint8_t *block) { q_q8_0(x, block); }

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

/* ---- float32 → one block (ggml's reference quantizers) ----------------------
 *
 * Q5_0, Q5_1 and the K-quants as ggml-quants.c's quantize_row_*_ref compute
 * them (what llama-quantize writes without an importance matrix): the same
 * float32 operations in the same order, so that every block is bit-exact,
 * huge, tiny and constant inputs included.  ggml's float → small integer
 * casts are x86's truncating conversions, done here through int32_t. */

#define GROUP_MAX_EPS 1e-15f

/* ggml's nearest_int: round to nearest even by adding 1.5 × 2^23 and
 * reading the mantissa (its range assert is compiled out, so values beyond
 * ±2^22 give what the bits give, as here). */
static inline int nearest_int(float fval) {
    float val = fval + 12582912.f;
    int32_t i;
    memcpy(&i, &val, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* x86's truncating float → int32 conversion (cvttss2si), which ggml's
 * casts compile to: a NaN or a value out of range gives INT32_MIN. */
static inline int32_t cvtt(float v) { return v > -2147483648.f && v < 2147483648.f ? (int32_t)v : INT32_MIN; }

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

static void q_q5_0(const float *x, uint8_t *b) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
    const float d = max / -16, id = d ? 1.0f / d : 0.0f;
    uint16_t h = ckpt__f32_to_f16(d);
    memcpy(b, &h, 2);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        uint8_t xi0 = (uint8_t)imin(31, (int8_t)cvtt(x[j] * id + 16.5f));
        uint8_t xi1 = (uint8_t)imin(31, (int8_t)cvtt(x[j + 16] * id + 16.5f));
        b[6 + j] = (uint8_t)((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
        qh |= ((xi0 & 0x10u) >> 4) << j;
        qh |= ((xi1 & 0x10u) >> 4) << (j + 16);
    }
    memcpy(b + 2, &qh, 4);
}

static void q_q5_1(const float *x, uint8_t *b) {
    float min = 3.40282347e+38f, max = -3.40282347e+38f;
    for (int j = 0; j < 32; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 31, id = d ? 1.0f / d : 0.0f;
    uint16_t hd = ckpt__f32_to_f16(d), hm = ckpt__f32_to_f16(min);
    memcpy(b, &hd, 2);
    memcpy(b + 2, &hm, 2);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        uint8_t xi0 = (uint8_t)cvtt((x[j] - min) * id + 0.5f);
        uint8_t xi1 = (uint8_t)cvtt((x[j + 16] - min) * id + 0.5f);
        b[8 + j] = (uint8_t)((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
        qh |= ((xi0 & 0x10u) >> 4) << j;
        qh |= ((xi1 & 0x10u) >> 4) << (j + 16);
    }
    memcpy(b + 4, &qh, 4);
}

/* ggml's make_qkx2_quants: a scale and a minimum for n values quantized to
 * 0..nmax, the best of nstep + 1 trial scales by weighted squared error.
 * Returns the scale, the minimum (negated) in *the_min, levels in L. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * L[i] + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) this_min = 0, this_scale = sum_xl / sum_l2;
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error, scale = this_scale, min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* The 6-bit scales and minimums of Q4_K and Q5_K, packed in 12 bytes. */
static void pack_scales_k4(uint8_t *s, const uint8_t *ls, const uint8_t *lm) {
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            s[j] = ls[j], s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Q4_K and Q5_K's scales: each sub-block's scale and minimum quantized to
 * 6 bits against the block's largest (max_scale, max_min: ggml's running
 * maxima from 0), packed in 12 bytes, d and dmin as float16 before them. */
void ckpt__quant_k4_scales(uint8_t *b, const float *scales, const float *mins, float max_scale, float max_min) {
    uint8_t ls[8], lm[8];
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f, inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; ++j) {
        ls[j] = (uint8_t)imin(63, (uint8_t)nearest_int(inv_scale * scales[j]));
        lm[j] = (uint8_t)imin(63, (uint8_t)nearest_int(inv_min * mins[j]));
    }
    uint16_t hd = ckpt__f32_to_f16(max_scale / 63.f), hm = ckpt__f32_to_f16(max_min / 63.f);
    memcpy(b, &hd, 2);
    memcpy(b + 2, &hm, 2);
    memset(b + 4, 0, 12);
    pack_scales_k4(b + 4, ls, lm);
}

/* The shared first half of Q4_K and Q5_K: each 32-value sub-block's scale
 * and minimum (make_qkx2_quants, weighted by |x| plus the sub-block's RMS),
 * quantized to 6 bits against the block's largest, then every value's level
 * 0..nmax against the rounded scales.  Writes d, dmin and the scales to b,
 * the levels to L. */
static void q_k4_levels(const float *x, uint8_t *b, uint8_t *L, int nmax, float rmin, int nstep) {
    float mins[8], scales[8], weights[32], max_scale = 0, max_min = 0;
    uint8_t Laux[32];
    for (int j = 0; j < 8; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    ckpt__quant_k4_scales(b, scales, mins, max_scale, max_min);
    uint8_t sc[8], mn[8];
    ckpt__quant_scale_min_k4(b + 4, sc, mn);
    for (int j = 0; j < 8; ++j) {
        const float d = f16(b) * sc[j];
        if (!d) continue; /* ggml keeps make_qkx2_quants' levels there */
        const float dm = f16(b + 2) * mn[j];
        for (int ii = 0; ii < 32; ++ii)
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, nearest_int((x[32 * j + ii] + dm) / d)));
    }
}

void ckpt__quant_q4_k_pack(const uint8_t *L, uint8_t *b) {
    uint8_t *q = b + 16;
    for (int j = 0; j < QK_K; j += 64, q += 32)
        for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
}

void ckpt__quant_q5_k_pack(const uint8_t *L, uint8_t *b) {
    uint8_t *qh = b + 16, *ql = b + 48, m1 = 1, m2 = 2;
    memset(qh, 0, QK_K / 8);
    for (int n = 0; n < QK_K; n += 64, ql += 32, m1 <<= 2, m2 <<= 2)
        for (int j = 0; j < 32; ++j) {
            int l1 = L[n + j], l2 = L[n + j + 32];
            if (l1 > 15) l1 -= 16, qh[j] |= m1;
            if (l2 > 15) l2 -= 16, qh[j] |= m2;
            ql[j] = (uint8_t)(l1 | (l2 << 4));
        }
}

static void q_q4_k(const float *x, uint8_t *b) {
    uint8_t L[QK_K];
    q_k4_levels(x, b, L, 15, -1.f, 20);
    ckpt__quant_q4_k_pack(L, b);
}

static void q_q5_k(const float *x, uint8_t *b) {
    uint8_t L[QK_K];
    q_k4_levels(x, b, L, 31, -0.5f, 15);
    ckpt__quant_q5_k_pack(L, b);
}

/* ggml's make_qx_quants with rmse_type 1 and no importance weights, as
 * Q6_K calls it: a signed scale for n values quantized to -nmax..nmax-1,
 * the best of 19 trial scales by x²-weighted error.  Levels (+ nmax) in L. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) amax = ax, max = x[i];
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
            scale = sumlx / suml2, best = scale * sumlx;
        }
    }
    return scale;
}

/* Q6_K's scales: each sub-block's quantized to int8 against the largest in
 * magnitude (max_scale, signed), d as float16 after them. */
void ckpt__quant_q6_k_scales(uint8_t *b, const float *scales, float max_scale) {
    int8_t *sc = (int8_t *)(b + 192);
    float iscale = -128.f / max_scale;
    uint16_t h = ckpt__f32_to_f16(1 / iscale);
    memcpy(b + 208, &h, 2);
    for (int ib = 0; ib < 16; ++ib) sc[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
}

/* Q6_K's levels (0..63) packed: 4 low bits in ql, 2 high bits in qh. */
void ckpt__quant_q6_k_pack(const uint8_t *L, uint8_t *b) {
    uint8_t *ql = b, *qh = b + 128;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32)
        for (int l = 0; l < 32; ++l) {
            ql[l] = (uint8_t)((L[j + l] & 0xF) | ((L[j + l + 64] & 0xF) << 4));
            ql[l + 32] = (uint8_t)((L[j + l + 32] & 0xF) | ((L[j + l + 96] & 0xF) << 4));
            qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                              ((L[j + l + 96] >> 4) << 6));
        }
}

static void q_q6_k(const float *x, uint8_t *b) {
    int8_t L[QK_K];
    float scales[16], max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
        scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
        if (fabsf(scales[ib]) > max_abs_scale) max_abs_scale = fabsf(scales[ib]), max_scale = scales[ib];
    }
    if (max_abs_scale < GROUP_MAX_EPS) {
        memset(b, 0, 210);
        return;
    }
    const int8_t *sc = (const int8_t *)(b + 192);
    ckpt__quant_q6_k_scales(b, scales, max_scale);
    for (int j = 0; j < 16; ++j) {
        float d = f16(b + 208) * sc[j];
        if (!d) continue;
        for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = (int8_t)(imax(-32, imin(31, nearest_int(x[16 * j + ii] / d))) + 32);
    }
    ckpt__quant_q6_k_pack((const uint8_t *)L, b);
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

#define DEQ_TO(NAME, ELEMS, BYTES, TO, SIZE)                                                                  \
    static void NAME##_##TO(const void *src, void *dst, size_t n) {                                           \
        const uint8_t *s = src;                                                                               \
        unsigned char *d = dst;                                                                               \
        float y[ELEMS];                                                                                       \
        for (size_t i = 0; i < n; i++) deq_##NAME(s + i * BYTES, y), enc_##TO(y, d + i * ELEMS * SIZE, ELEMS); \
    }
#define DEQ(NAME, ELEMS, BYTES) DEQ_TO(NAME, ELEMS, BYTES, f32, 4) DEQ_TO(NAME, ELEMS, BYTES, f16, 2) \
    DEQ_TO(NAME, ELEMS, BYTES, bf16, 2)
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

#define QUANT(NAME, ELEMS, BYTES, FROM, SIZE)                                                                   \
    static void FROM##_##NAME(const void *src, void *dst, size_t n) {                                         \
        const unsigned char *s = src;                                                                         \
        uint8_t *d = dst;                                                                                     \
        float x[ELEMS];                                                                                       \
        for (size_t i = 0; i < n; i++) dec_##FROM(s + i * ELEMS * SIZE, x, ELEMS), q_##NAME(x, d + i * BYTES); \
    }
#define QUANT_FROM_ALL(NAME, ELEMS, BYTES) QUANT(NAME, ELEMS, BYTES, f32, 4) QUANT(NAME, ELEMS, BYTES, f16, 2) \
    QUANT(NAME, ELEMS, BYTES, bf16, 2) QUANT(NAME, ELEMS, BYTES, f64, 8)
QUANT_FROM_ALL(q8_0, 32, 34)
QUANT_FROM_ALL(q4_0, 32, 18)
QUANT_FROM_ALL(q5_0, 32, 22)
QUANT_FROM_ALL(q5_1, 32, 24)
QUANT_FROM_ALL(q4_k, 256, 144)
QUANT_FROM_ALL(q5_k, 256, 176)
QUANT_FROM_ALL(q6_k, 256, 210)

/* A block type to itself: whole blocks copied, a kernel for each block
 * size of GGUF's types. */
#define BLOCK_SIZES(X)                                                                                        \
    X(17) X(18) X(20) X(22) X(24) X(34) X(36) X(40) X(50) X(54) X(56) X(66) X(74) X(82) X(84) X(98) X(110) X(136) \
    X(144) X(176) X(210) X(292)
#define COPY_BLOCKS(BYTES)                                                                               \
    static void copy_blocks_##BYTES(const void *src, void *dst, size_t n) { memcpy(dst, src, n * BYTES); }
BLOCK_SIZES(COPY_BLOCKS)

static ckpt__cast_fn copy_kernel(unsigned bytes) {
    switch (bytes) {
#define C(B) case B: return copy_blocks_##B;
        BLOCK_SIZES(C)
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
    static const struct { ckpt_dtype d; ckpt__cast_fn f32, f16, bf16, f64; } quant[] = {
        {CKPT_Q8_0, f32_q8_0, f16_q8_0, bf16_q8_0, f64_q8_0}, {CKPT_Q4_0, f32_q4_0, f16_q4_0, bf16_q4_0, f64_q4_0},
        {CKPT_Q5_0, f32_q5_0, f16_q5_0, bf16_q5_0, f64_q5_0}, {CKPT_Q5_1, f32_q5_1, f16_q5_1, bf16_q5_1, f64_q5_1},
        {CKPT_Q4_K, f32_q4_k, f16_q4_k, bf16_q4_k, f64_q4_k}, {CKPT_Q5_K, f32_q5_k, f16_q5_k, bf16_q5_k, f64_q5_k},
        {CKPT_Q6_K, f32_q6_k, f16_q6_k, bf16_q6_k, f64_q6_k},
    };
    for (size_t i = 0; i < sizeof quant / sizeof quant[0]; i++) {
        t[CKPT_F32][quant[i].d] = quant[i].f32, t[CKPT_F16][quant[i].d] = quant[i].f16;
        t[CKPT_BF16][quant[i].d] = quant[i].bf16, t[CKPT_F64][quant[i].d] = quant[i].f64;
    }
    for (int d = 1; d < CKPT_DTYPE_COUNT; d++)
        if (ckpt_dtype_is_block((ckpt_dtype)d)) t[d][d] = copy_kernel(ckpt_dtype_block_bytes((ckpt_dtype)d));
}
