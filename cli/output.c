/* output.c — error lines, sizes and JSON strings for the CLI. */
#include <stdarg.h>
#include <string.h>

#include "cli.h"

int report_error(const ckpt_error *err) {
    /* The library's sentence is the caller's own language; the CLI's part
     * is how to go on. */
    fprintf(stderr, "ckpt: %s%s [%s]\n", err->message[0] ? err->message : ckpt_status_message(err->status),
            err->status == CKPT_E_EXISTS     ? "; use --force (-f) to replace it"
            : err->status == CKPT_E_NO_MATCH ? " (--ignore-unmatched allows it)"
                                             : "",
            ckpt_status_name(err->status));
    if (err->status == CKPT_E_CANCELLED) return EXIT_INTERRUPTED;
    if (err->status == CKPT_E_INVALID_ARGUMENT || err->status == CKPT_E_BAD_SIZE) return EXIT_USAGE;
    return EXIT_ERROR;
}

int usage_error(const char *command, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ckpt %s: ", command);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'ckpt %s --help'.\n", command);
    va_end(ap);
    return EXIT_USAGE;
}

const char *format_bytes(uint64_t bytes, char *buf, size_t cap) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 5) v /= 1024, u++;
    if (u == 0) snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}

const char *format_count(uint64_t n, char *buf, size_t cap) {
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%llu", (unsigned long long)n);
    size_t o = 0;
    for (int i = 0; i < len && o + 2 < cap; i++) {
        if (i && (len - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

void print_json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (c < 0x20) fprintf(out, "\\u%04x", c);
            else fputc(c, out);
        }
    }
    fputc('"', out);
}

void print_summary(const char *verb, uint64_t tensors, uint64_t bytes, size_t files, const char *where,
                   double seconds) {
    char count[32], size[32], rate[32] = "";
    format_count(tensors, count, sizeof count);
    format_bytes(bytes, size, sizeof size);
    if (seconds < 0) seconds = 0;
    double gbps = seconds > 0 ? (double)bytes / seconds / 1e9 : 0;
    if (bytes && seconds > 0) {
        if (gbps >= 0.01) snprintf(rate, sizeof rate, " (%.*f GB/s)", gbps < 10 ? 2 : 1, gbps);
        else snprintf(rate, sizeof rate, " (%.2f MB/s)", gbps * 1e3);
    }
    fprintf(stderr, "ckpt: %s %s tensor%s, %s in %zu file%s%s%s in %.*f s%s\n", verb, count, tensors == 1 ? "" : "s",
            size, files, files == 1 ? "" : "s", where ? " " : "", where ? where : "", seconds < 10 ? 2 : 1, seconds,
            rate);
}
