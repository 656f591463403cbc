/* size.c — shard sizes such as "5GB", parsed as huggingface_hub does, and
 * sizes written for people ("86.6 MiB"). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base.h"

typedef struct unit {
    const char *suffix;
    double multiplier;
} unit;

/* Decimal units as in huggingface_hub's SIZE_UNITS; binary ones are ckpt's. */
static const unit units[] = {
    {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
    {"TIB", 1099511627776.0}, {"GIB", 1073741824.0}, {"MIB", 1048576.0}, {"KIB", 1024.0},
    {"B", 1.0},
};

/* A decimal number: digits, optional fraction, optional exponent; what
 * Python's float() accepts for sizes, minus signs, "inf" and "nan". */
static bool is_decimal(const char *s, size_t n) {
    size_t i = 0, digits = 0;
    while (i < n && isdigit((unsigned char)s[i])) i++, digits++;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && isdigit((unsigned char)s[i])) i++, digits++;
    }
    if (digits == 0) return false;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t exp_digits = 0;
        while (i < n && isdigit((unsigned char)s[i])) i++, exp_digits++;
        if (!exp_digits) return false;
    }
    return i == n;
}

ckpt_status ckpt_parse_size(const char *text, uint64_t *bytes, ckpt_error *err) {
    if (!text || !bytes) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "no size given");
    const char *s = text, *e = text + strlen(text);
    while (s < e && isspace((unsigned char)*s)) s++;
    while (e > s && isspace((unsigned char)e[-1])) e--;

    const char *unit_start = e;
    while (unit_start > s && isalpha((unsigned char)unit_start[-1])) unit_start--;
    size_t unit_len = (size_t)(e - unit_start);
    const char *num_end = unit_start;
    while (num_end > s && isspace((unsigned char)num_end[-1])) num_end--;
    size_t num_len = (size_t)(num_end - s);

    if (unit_len == 0) {
        /* Plain integer: bytes, parsed exactly. */
        uint64_t v = 0;
        if (num_len == 0) goto bad;
        for (const char *p = s; p < num_end; p++) {
            if (!isdigit((unsigned char)*p)) goto bad;
            if (!ckpt__mul_u64(v, 10, &v) || !ckpt__add_u64(v, (uint64_t)(*p - '0'), &v)) goto bad;
        }
        if (v == 0) goto zero;
        *bytes = v;
        return CKPT_OK;
    }
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
        if (strlen(units[u].suffix) != unit_len || strncasecmp(unit_start, units[u].suffix, unit_len))
            continue;
        if (!is_decimal(s, num_len)) goto bad;
        char buf[64];
        if (num_len >= sizeof buf) goto bad;
        memcpy(buf, s, num_len);
        buf[num_len] = '\0';
        /* Same arithmetic as the hub: float(value) * multiplier, truncated. */
        double v = strtod(buf, NULL) * units[u].multiplier;
        if (!isfinite(v) || v >= 18446744073709551616.0) goto bad;
        if (v < 1.0) goto zero;
        *bytes = (uint64_t)v;
        return CKPT_OK;
    }
bad:
    return ckpt__fail(err, CKPT_E_BAD_SIZE, NULL, NULL, -1,
                      "cannot parse size '%s': expected a number of bytes or a number followed by "
                      "KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)",
                      text);
zero:
    return ckpt__fail(err, CKPT_E_BAD_SIZE, NULL, NULL, -1, "size '%s' must be at least one byte", text);
}

char *ckpt_format_size(uint64_t bytes, char *out, size_t cap) {
    static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (!out || !cap) return out;
    double v = (double)bytes;
    int u = 0;
    /* The next unit as soon as one decimal would show 1000.0 or more:
     * "999.9 KiB", then "1.0 MiB" — never four digits before the point. */
    while ((u == 0 ? v >= 1000 : v >= 999.95) && u < 6) v /= 1024, u++;
    if (u == 0) snprintf(out, cap, "%u B", (unsigned)bytes);
    else snprintf(out, cap, "%.1f %s", v, names[u]);
    return out;
}
