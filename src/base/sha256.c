/* sha256.c — SHA-256 (FIPS 180-4): the portable compression function, and
 * the x86 SHA extensions' where the processor has them (chosen at run
 * time, like the casts of cast_x86.c): the check of a multi-GB cache
 * copy runs four to five times faster with them (0.71 against 0.15 GB/s
 * on the 2-core test machine). */
#include "sha256.h"

#include <stdlib.h>
#include <string.h>

#include "cursor.h"

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static uint32_t load_be32(const unsigned char *p) { return (uint32_t)ckpt__load_be(p, 4); }

static void blocks_portable(uint32_t h[8], const unsigned char *p, size_t count) {
    for (; count; count--, p += 64) {
        uint32_t w[64];
        for (int i = 0; i < 16; i++) w[i] = load_be32(p + 4 * i);
        for (int i = 16; i < 64; i++) {
            uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
        for (int i = 0; i < 64; i++) {
            uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
            uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
        }
        h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

#define SHA_NI __attribute__((target("sha,sse4.1")))

/* Four rounds: the message words in `msg` (with their constants added). */
#define ROUNDS4(msg)                                                                                    \
    do {                                                                                                \
        __m128i m_ = (msg);                                                                             \
        cdgh = _mm_sha256rnds2_epu32(cdgh, abef, m_);                                                   \
        abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(m_, 0x0e));                          \
    } while (0)

SHA_NI static void blocks_sha_ni(uint32_t h[8], const unsigned char *p, size_t count) {
    const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    /* The state as the instructions want it: (a,b,e,f) and (c,d,g,h). */
    __m128i dcba = _mm_loadu_si128((const __m128i *)&h[0]);
    __m128i hgfe = _mm_loadu_si128((const __m128i *)&h[4]);
    __m128i badc = _mm_shuffle_epi32(dcba, 0xb1), fehg = _mm_shuffle_epi32(hgfe, 0x1b);
    __m128i abef = _mm_alignr_epi8(badc, fehg, 8), cdgh = _mm_blend_epi16(fehg, badc, 0xf0);
    for (; count; count--, p += 64) {
        __m128i save_abef = abef, save_cdgh = cdgh;
        __m128i w[4];
        for (int i = 0; i < 4; i++) w[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), swap);
        for (int r = 0; r < 16; r++) {
            __m128i cur = w[r & 3];
            ROUNDS4(_mm_add_epi32(cur, _mm_loadu_si128((const __m128i *)&K[4 * r])));
            if (r < 12) {
                /* The next schedule words: w[i] = σ1(w[i-2]) + w[i-7] + σ0(w[i-15]) + w[i-16]. */
                __m128i next = _mm_sha256msg1_epu32(w[r & 3], w[(r + 1) & 3]);
                next = _mm_add_epi32(next, _mm_alignr_epi8(w[(r + 3) & 3], w[(r + 2) & 3], 4));
                w[r & 3] = _mm_sha256msg2_epu32(next, w[(r + 3) & 3]);
            }
        }
        abef = _mm_add_epi32(abef, save_abef);
        cdgh = _mm_add_epi32(cdgh, save_cdgh);
    }
    /* Back to (a,b,c,d) and (e,f,g,h). */
    __m128i feba = _mm_shuffle_epi32(abef, 0x1b), dchg = _mm_shuffle_epi32(cdgh, 0xb1);
    _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(feba, dchg, 0xf0));
    _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(dchg, feba, 8));
}

/* The SHA extensions (CPUID leaf 7, EBX bit 29) and SSE4.1 (leaf 1, ECX
 * bit 19), asked of CPUID itself: clang 14 has no "sha" for
 * __builtin_cpu_supports (and `make fuzz` builds with clang). */
static int has_sha_ni(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 19 & 1) && __get_cpuid_count(7, 0, &a, &b, &c, &d) &&
           (b >> 29 & 1);
}

/* CKPT_SHA256=portable in the environment keeps to the portable code (tests
 * check both against hashlib; bench/sha256_speed.sh times both). */
static void blocks(uint32_t h[8], const unsigned char *p, size_t count) {
    static int has_sha = -1;
    if (has_sha < 0) {
        const char *force = getenv("CKPT_SHA256");
        has_sha = has_sha_ni() && !(force && !strcmp(force, "portable"));
    }
    if (has_sha) blocks_sha_ni(h, p, count);
    else blocks_portable(h, p, count);
}
#else
static void blocks(uint32_t h[8], const unsigned char *p, size_t count) { blocks_portable(h, p, count); }
#endif

void ckpt__sha256_init(ckpt__sha256 *s) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof iv);
    s->bytes = 0;
    s->fill = 0;
}

void ckpt__sha256_update(ckpt__sha256 *s, const void *data, size_t n) {
    const unsigned char *p = data;
    s->bytes += n;
    if (s->fill) {
        size_t take = 64 - s->fill < n ? 64 - s->fill : n;
        memcpy(s->block + s->fill, p, take);
        s->fill += take, p += take, n -= take;
        if (s->fill < 64) return;
        blocks(s->h, s->block, 1);
        s->fill = 0;
    }
    blocks(s->h, p, n / 64);
    p += n / 64 * 64;
    n %= 64;
    memcpy(s->block, p, n);
    s->fill = n;
}

void ckpt__sha256_final(ckpt__sha256 *s, unsigned char digest[32]) {
    uint64_t bits = s->bytes * 8;
    unsigned char pad[72] = {0x80};
    size_t padding = (s->fill < 56 ? 56 : 120) - s->fill;
    for (int i = 0; i < 8; i++) pad[padding + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
    ckpt__sha256_update(s, pad, padding + 8);
    for (int i = 0; i < 8; i++) {
        digest[4 * i] = (unsigned char)(s->h[i] >> 24);
        digest[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
        digest[4 * i + 2] = (unsigned char)(s->h[i] >> 8);
        digest[4 * i + 3] = (unsigned char)s->h[i];
    }
}

void ckpt__sha256_hex(const unsigned char digest[32], char hex[65]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[64] = '\0';
}

void ckpt__hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len, unsigned char mac[32]) {
    unsigned char k[64] = {0}, pad[64], inner[32];
    if (key_len > 64) {
        ckpt__sha256 s;
        ckpt__sha256_init(&s);
        ckpt__sha256_update(&s, key, key_len);
        ckpt__sha256_final(&s, k);
    } else if (key_len) {
        memcpy(k, key, key_len);
    }
    ckpt__sha256 s;
    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x36;
    ckpt__sha256_init(&s);
    ckpt__sha256_update(&s, pad, 64);
    ckpt__sha256_update(&s, msg, msg_len);
    ckpt__sha256_final(&s, inner);
    for (int i = 0; i < 64; i++) pad[i] = k[i] ^ 0x5c;
    ckpt__sha256_init(&s);
    ckpt__sha256_update(&s, pad, 64);
    ckpt__sha256_update(&s, inner, 32);
    ckpt__sha256_final(&s, mac);
    memset(k, 0, sizeof k);
    memset(pad, 0, sizeof pad);
}
