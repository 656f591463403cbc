/* output.c — error lines, sizes and JSON strings for the CLI. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char *status_text(const ckpt_error *err, char *buf, size_t cap) {
    if (err->detail)
        snprintf(buf, cap, "%s/%s", ckpt_status_name(err->status), ckpt_detail_name(err->detail));
    else
        snprintf(buf, cap, "%s", ckpt_status_name(err->status));
    return buf;
}

int report_error(const ckpt_error *err) {
    /* The library's sentence is the caller's own language; the CLI's part
     * is how to go on.  It quotes names from the checkpoint: printable. */
    char status[96];
    fprintf(stderr, "ckpt: %s%s [%s]\n", err->message[0] ? printable(err->message) : ckpt_status_message(err->status),
            err->status == CKPT_E_EXISTS     ? "; use --force (-f) to replace it"
            : err->status == CKPT_E_NO_MATCH ? " (--ignore-unmatched allows it)"
                                             : "",
            status_text(err, status, sizeof status));
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

const char *format_bytes(uint64_t bytes, char *buf, size_t cap) { return ckpt_format_size(bytes, buf, cap); }

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

/* How many bytes of UTF-8 start at p (left bytes there): 1 to 4, or 0 when
 * they are no well-formed character. */
static size_t utf8_length(const unsigned char *p, size_t left) {
    size_t n = p[0] < 0x80 ? 1 : p[0] >= 0xC2 && p[0] <= 0xDF ? 2 : p[0] >= 0xE0 && p[0] <= 0xEF ? 3
                             : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : 0;
    if (!n || n > left) return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    /* no overlong forms, no surrogates, nothing past U+10FFFF */
    if ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] > 0x9F) || (p[0] == 0xF0 && p[1] < 0x90) ||
        (p[0] == 0xF4 && p[1] > 0x8F))
        return 0;
    return n;
}

/* The escape of the character at p (`len` bytes, 0: a byte that is not
 * UTF-8) into out, or 0 when it is shown as it is. */
static int escape_of(const unsigned char *p, size_t len, char out[8]) {
    if (len == 0) return snprintf(out, 8, "\\x%02x", p[0]);
    if (len == 2 && p[0] == 0xC2 && p[1] < 0xA0) return snprintf(out, 8, "\\u%04x", p[1]); /* C1 controls */
    if (len > 1 || (p[0] >= 0x20 && p[0] != 0x7F)) return 0;
    switch (p[0]) {
    case '\n': return snprintf(out, 8, "\\n");
    case '\r': return snprintf(out, 8, "\\r");
    case '\t': return snprintf(out, 8, "\\t");
    default: return snprintf(out, 8, "\\x%02x", p[0]);
    }
}

const char *printable(const char *s) {
    /* A few results live at once (several in one printf). */
    static char *ring[8];
    static unsigned next;
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), need = 0;
    bool plain = true;
    char esc[8];
    for (size_t i = 0; i < n;) {
        size_t len = utf8_length(p + i, n - i);
        int e = escape_of(p + i, len, esc);
        plain = plain && !e;
        need += e ? (size_t)e : len;
        i += len ? len : 1;
    }
    if (plain) return s;
    char *out = malloc(need + 1);
    if (!out) return "(a name, not shown: out of memory)";
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_length(p + i, n - i);
        int e = escape_of(p + i, len, esc);
        memcpy(out + o, e ? esc : (const char *)p + i, e ? (size_t)e : len);
        o += e ? (size_t)e : len;
        i += len ? len : 1;
    }
    out[o] = '\0';
    free(ring[next % 8]);
    ring[next++ % 8] = out;
    return out;
}

int text_columns(const char *s) {
    int n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* "…" where the locale is UTF-8, "..." elsewhere. */
const char *ellipsis(void) {
    const char *vars[] = {"LC_ALL", "LC_CTYPE", "LANG"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return strstr(v, "UTF-8") || strstr(v, "utf8") || strstr(v, "UTF8") || strstr(v, "utf-8") ? "…" : "...";
    }
    return "...";
}

/* s after its first `count` code points. */
static const char *skip_columns(const char *s, int count) {
    for (; *s && count > 0; count--)
        for (s++; ((unsigned char)*s & 0xC0) == 0x80; s++) {}
    return s;
}

void print_padded(FILE *out, const char *name, int width) {
    name = printable(name);
    int columns = text_columns(name);
    if (columns <= width) {
        fputs(name, out);
        for (; columns < width; columns++) fputc(' ', out);
        return;
    }
    /* Too long for its column: its beginning and its end (".weight"),
     * with an ellipsis between them.  --json keeps every name whole. */
    const char *dots = ellipsis();
    int room = width - text_columns(dots), head = room > 0 ? room / 2 : 0;
    const char *tail = skip_columns(name, columns - (room > 0 ? room - head : 0));
    fwrite(name, 1, (size_t)(skip_columns(name, head) - name), out);
    fputs(dots, out);
    fputs(tail, out);
}

void print_json_string(FILE *out, const char *s) {
    ckpt__buf b = {0};
    ckpt__buf_json_string(&b, s);
    if (b.data) fwrite(b.data, 1, b.len, out);
    free(b.data);
}

bool json_read(const char *json, char **text, ckpt__json_doc *doc) {
    size_t at;
    const char *why;
    *doc = (ckpt__json_doc){0};
    *text = json ? strdup(json) : NULL;
    return *text && ckpt__json_parse(*text, strlen(*text), doc, &at, &why) == CKPT_OK;
}

void json_close(char *text, ckpt__json_doc *doc) {
    ckpt__json_free(doc);
    free(text);
}

const char *format_elapsed(uint64_t bytes, double seconds, char *buf, size_t cap) {
    char rate[32] = "";
    if (seconds < 0) seconds = 0;
    double gbps = seconds > 0 ? (double)bytes / seconds / 1e9 : 0;
    if (bytes && seconds > 0) {
        if (gbps >= 0.01) snprintf(rate, sizeof rate, " (%.*f GB/s)", gbps < 10 ? 2 : 1, gbps);
        else snprintf(rate, sizeof rate, " (%.2f MB/s)", gbps * 1e3);
    }
    snprintf(buf, cap, "in %.*f s%s", seconds < 10 ? 2 : 1, seconds, rate);
    return buf;
}

void print_summary(const char *verb, uint64_t tensors, uint64_t bytes, size_t files, const char *where,
                   double seconds) {
    char count[32], size[32], elapsed[64];
    format_count(tensors, count, sizeof count);
    format_bytes(bytes, size, sizeof size);
    fprintf(stderr, "ckpt: %s %s tensor%s, %s in %zu file%s%s%s %s\n", verb, count, tensors == 1 ? "" : "s", size,
            files, files == 1 ? "" : "s", where ? " " : "", where ? where : "",
            format_elapsed(bytes, seconds, elapsed, sizeof elapsed));
}

/* `text` as help prints it: wrapped at 80 columns, the first line after
 * `first`, the others after `indent`. */
static void print_wrapped(FILE *f, const char *first, const char *indent, const char *text) {
    enum { WIDTH = 80 };
    int col = fprintf(f, "%s", first);
    while (*text) {
        size_t word = strcspn(text, " ");
        if (col > (int)strlen(indent) && col + 1 + (int)word > WIDTH) col = fprintf(f, "\n%s", indent) - 1;
        else if (col > (int)strlen(first)) col += fprintf(f, " ");
        col += (int)fwrite(text, 1, word, f);
        text += word;
        while (*text == ' ') text++;
    }
    fputc('\n', f);
}

/* "  - safetensors: a .safetensors file" and so on, then the sources. */
static void print_read_formats(FILE *f) {
    for (size_t i = 0; ckpt_format_at(i); i++) print_wrapped(f, "  - ", "    ", ckpt_format_description(ckpt_format_at(i)));
    fputs("  - any of these at an http://, https://, s3://, gs:// or az:// URL, or in an\n"
          "    hf://ORG/NAME repo\n"
          "  - a directory in the Hugging Face layout holding any of these\n", f);
}

/* The titles of the formats ckpt writes, on one wrapped line. */
static void print_write_formats(FILE *f) {
    char line[1024];
    size_t n = 0;
    for (size_t i = 0; ckpt_format_at(i) && n < sizeof line; i++) {
        ckpt_format id = ckpt_format_at(i);
        if (!ckpt_format_writable(id)) continue;
        const char *d = ckpt_format_description(id);
        n += (size_t)snprintf(line + n, sizeof line - n, "%s%.*s", n ? ", " : "", (int)strcspn(d, ":"), d);
    }
    print_wrapped(f, "  ", "  ", line);
}

int finish_stdout(void) {
    if (fflush(stdout) == 0 && !ferror(stdout)) return EXIT_OK;
    fputs("ckpt: cannot write the output\n", stderr);
    return EXIT_ERROR;
}

int print_usage(FILE *f, const char *text) {
    for (;;) {
        const char *reads = strstr(text, CLI_READ_FORMATS), *writes = strstr(text, CLI_WRITE_FORMATS);
        const char *mark = reads && (!writes || reads < writes) ? reads : writes;
        if (!mark) break;
        fwrite(text, 1, (size_t)(mark - text), f);
        if (mark == reads) print_read_formats(f), text = mark + strlen(CLI_READ_FORMATS);
        else print_write_formats(f), text = mark + strlen(CLI_WRITE_FORMATS);
    }
    fputs(text, f);
    return fflush(f) != 0 || ferror(f) ? EXIT_ERROR : EXIT_OK;
}
