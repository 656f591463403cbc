/* sources.c — the options every command that opens a checkpoint shares:
 * where its bytes come from (remote files: timeouts, retries, credentials,
 * a cache) and how local files are read (--direct). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char source_options_help[] =
    "where the bytes come from (SRC/PATH may be an http://, https:// or s3:// URL:\n"
    "a file, an index whose shards lie beside it, or a URL ending in '/' holding\n"
    "model.safetensors[.index.json] or pytorch_model.bin[.index.json]):\n"
    "  --direct               read local files with O_DIRECT, around the page cache\n"
    "                         (converts also drop what they write from it)\n"
    "  --cache-dir DIR        keep verified copies of remote files in DIR (also\n"
    "                         $CKPT_CACHE_DIR); a later run reads them locally\n"
    "  --bearer-token-file F  send the token in F as 'Authorization: Bearer'\n"
    "                         (also $CKPT_BEARER_TOKEN; $HF_TOKEN for huggingface.co)\n"
    "  --timeout SECONDS      fail a transfer that receives nothing this long (60)\n"
    "  --connect-timeout SECONDS  to establish a connection (30)\n"
    "  --retries N            retries of a failed request, resuming (5)\n"
    "  --connections N        parallel range requests per file (16)\n"
    "  s3:// uses $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY, $AWS_SESSION_TOKEN,\n"
    "  $AWS_REGION and $AWS_ENDPOINT_URL (S3-compatible stores)\n";

static bool parse_uint(const char *s, uint64_t max, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9') return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max) return false;
    *out = v;
    return true;
}

static bool parse_seconds(const char *s, uint32_t *ms) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v > 0) || v > 86400.0) return false;
    *ms = (uint32_t)(v * 1000 + 0.5);
    if (!*ms) *ms = 1;
    return true;
}

/* The token file's first line, without its line end. */
static char *read_token(const char *path) {
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) return NULL;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    if (f != stdin) fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    char *t = strdup(buf);
    memset(buf, 0, sizeof buf);
    return t;
}

void source_options_init(source_options *s) {
    memset(s, 0, sizeof *s);
    ckpt_catalog_options_init(&s->catalog);
    const char *dir = getenv("CKPT_CACHE_DIR");
    if (dir && *dir) s->catalog.cache_dir = dir;
}

int source_option(const char *command, int argc, char **argv, int *i, source_options *s) {
    const char *a = argv[*i], *value = NULL;
    static const char *const with_value[] = {"--cache-dir", "--bearer-token-file", "--timeout", "--connect-timeout",
                                             "--retries", "--connections"};
    if (!strcmp(a, "--direct")) {
        s->catalog.direct = 1;
        return 1;
    }
    const char *name = NULL;
    for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++) {
        size_t n = strlen(with_value[k]);
        if (!strncmp(a, with_value[k], n) && (a[n] == '\0' || a[n] == '=')) {
            name = with_value[k];
            if (a[n] == '=') value = a + n + 1;
            else if (*i + 1 < argc) value = argv[++*i];
            else return usage_error(command, "%s needs a value", name), -1;
            break;
        }
    }
    if (!name) return 0;
    uint64_t v;
    if (!strcmp(name, "--cache-dir")) {
        s->catalog.cache_dir = value;
    } else if (!strcmp(name, "--bearer-token-file")) {
        free(s->token);
        s->token = read_token(value);
        if (!s->token) return usage_error(command, "cannot read the token file '%s': %s", value, strerror(errno)), -1;
        s->catalog.bearer_token = s->token;
    } else if (!strcmp(name, "--timeout")) {
        if (!parse_seconds(value, &s->catalog.read_timeout_ms))
            return usage_error(command, "--timeout needs a number of seconds, got '%s'", value), -1;
    } else if (!strcmp(name, "--connect-timeout")) {
        if (!parse_seconds(value, &s->catalog.connect_timeout_ms))
            return usage_error(command, "--connect-timeout needs a number of seconds, got '%s'", value), -1;
    } else if (!strcmp(name, "--retries")) {
        if (!parse_uint(value, 100, &v)) return usage_error(command, "--retries needs 0 to 100, got '%s'", value), -1;
        s->catalog.retries = (uint32_t)v;
    } else {
        if (!parse_uint(value, 256, &v) || !v)
            return usage_error(command, "--connections needs 1 to 256, got '%s'", value), -1;
        s->catalog.max_connections = (uint32_t)v;
    }
    return 1;
}

const ckpt_catalog_options *source_options_get(source_options *s) {
    if (!s->catalog.bearer_token) {
        const char *t = getenv("CKPT_BEARER_TOKEN");
        if (t && *t) s->catalog.bearer_token = t;
    }
    return &s->catalog;
}

void source_options_free(source_options *s) {
    if (s->token) {
        memset(s->token, 0, strlen(s->token));
        free(s->token);
    }
    s->token = NULL;
}

const char *display_name(const char *name, char *buf, size_t cap) {
    const char *scheme = strstr(name, "://");
    if (!scheme || cap < 16) return name;
    const char *host = scheme + 3, *end = host + strcspn(host, "/?#"), *at = NULL;
    for (const char *p = host; p < end; p++)
        if (*p == '@') at = p;
    const char *query = strchr(name, '?');
    if (!at && !query) return name;
    size_t n = 0;
    /* scheme://[user:REDACTED@]host/path[?REDACTED] */
    n += (size_t)snprintf(buf + n, cap - n, "%.*s", (int)(host - name), name);
    if (at && n < cap) {
        const char *colon = memchr(host, ':', (size_t)(at - host));
        n += (size_t)snprintf(buf + n, cap - n, "%.*s%s@", (int)((colon ? colon : at) - host), host,
                              colon ? ":REDACTED" : "");
    }
    const char *rest = at ? at + 1 : host;
    if (n < cap) n += (size_t)snprintf(buf + n, cap - n, "%.*s", (int)(query ? query - rest : (long)strlen(rest)), rest);
    if (query && n < cap) snprintf(buf + n, cap - n, "?REDACTED");
    return buf;
}
