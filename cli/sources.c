/* sources.c — the options every command that opens a checkpoint shares:
 * where its bytes come from (remote files: timeouts, retries, credentials,
 * a cache) and how local files are read (--direct). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char source_options_help[] =
    "where the bytes come from (SRC/PATH may be an http://, https://, s3://, gs://\n"
    "or az:// URL: a file, an index whose shards lie beside it, or a URL ending in\n"
    "'/' holding model.safetensors[.index.json] or pytorch_model.bin[.index.json];\n"
    "a gs:// or az:// prefix is listed as a directory):\n"
    "  --direct               read local files with O_DIRECT, around the page cache\n"
    "                         (converts also drop what they write from it)\n"
    "  --cache-dir DIR        keep verified copies of remote files in DIR (also\n"
    "                         $CKPT_CACHE_DIR); a later run reads them locally.\n"
    "                         A server that serves no byte ranges needs one: its\n"
    "                         files are downloaded whole into DIR, then read there\n"
    "  --bearer-token-file F  send the token in F as 'Authorization: Bearer'\n"
    "                         (also $CKPT_BEARER_TOKEN; $HF_TOKEN for huggingface.co)\n"
    "  --timeout SECONDS      fail a transfer that receives nothing this long (60)\n"
    "  --connect-timeout SECONDS  to establish a connection (30)\n"
    "  --retries N            retries of a failed request, resuming (5)\n"
    "  --retry-deadline SECONDS  no more retries once a request has gone this long\n"
    "                         without progress (300; 0: --retries alone)\n"
    "  --min-speed BYTES      fail (and retry) a transfer slower than BYTES per\n"
    "                         second, such as 1KiB (1KiB; 0: no minimum)…\n"
    "  --min-speed-time SECONDS  …over each window this long (30)\n"
    "  --connections N        parallel range requests per file (16)\n"
    "  s3:// uses $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY, $AWS_SESSION_TOKEN,\n"
    "  $AWS_REGION and $AWS_ENDPOINT_URL (S3-compatible stores)\n"
    "  gs://BUCKET/KEY uses $GS_ACCESS_KEY_ID and $GS_SECRET_ACCESS_KEY (HMAC\n"
    "  keys), else $GOOGLE_APPLICATION_CREDENTIALS or the metadata server\n"
    "  ($GCE_METADATA_HOST), and $STORAGE_EMULATOR_HOST for another endpoint\n"
    "  az://ACCOUNT/CONTAINER/BLOB (or https://ACCOUNT.blob.core.windows.net/...)\n"
    "  uses a SAS token (in the URL, or $AZURE_STORAGE_SAS_TOKEN), else\n"
    "  $AZURE_STORAGE_ACCOUNT and $AZURE_STORAGE_KEY, or\n"
    "  $AZURE_STORAGE_CONNECTION_STRING (and its BlobEndpoint)\n"
    "  hf://ORG/NAME[@REVISION][/PATH] reads a Hugging Face Hub repo at one commit\n"
    "  ($HF_ENDPOINT, $HF_TOKEN or `hf auth login`), kept in the Hub's own cache\n"
    "  ($HF_HUB_CACHE, $HF_HOME; $HF_HUB_OFFLINE=1 reads only that)\n";

static bool parse_uint(const char *s, uint64_t max, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9') return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max) return false;
    *out = v;
    return true;
}

/* Seconds, more than 0 (or 0 itself, when `zero_ok`), up to a day. */
static bool parse_seconds(const char *s, bool zero_ok, uint32_t *ms) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v > 0 || (zero_ok && v == 0)) || v > 86400.0) return false;
    *ms = (uint32_t)(v * 1000 + 0.5);
    if (!*ms && v > 0) *ms = 1;
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
    s->download_bar_mode = -1;
    const char *dir = getenv("CKPT_CACHE_DIR");
    if (dir && *dir) s->catalog.cache_dir = dir;
}

int source_option(const char *command, int id, const char *value, source_options *s) {
    uint64_t v;
    switch (id) {
    case OPT_DIRECT: s->catalog.io = CKPT_IO_DIRECT; break;
    case OPT_CACHE_DIR: s->catalog.cache_dir = value; break;
    case OPT_BEARER_TOKEN_FILE:
        free(s->token);
        s->token = read_token(value);
        if (!s->token) return usage_error(command, "cannot read the token file '%s': %s", value, strerror(errno));
        s->catalog.bearer_token = s->token;
        break;
    case OPT_TIMEOUT:
        if (!parse_seconds(value, false, &s->catalog.read_timeout_ms))
            return usage_error(command, "--timeout needs a number of seconds, got '%s'", value);
        break;
    case OPT_CONNECT_TIMEOUT:
        if (!parse_seconds(value, false, &s->catalog.connect_timeout_ms))
            return usage_error(command, "--connect-timeout needs a number of seconds, got '%s'", value);
        break;
    case OPT_MIN_SPEED_TIME:
        if (!parse_seconds(value, false, &s->catalog.min_speed_time_ms))
            return usage_error(command, "--min-speed-time needs a number of seconds, got '%s'", value);
        break;
    case OPT_RETRY_DEADLINE:
        if (!parse_seconds(value, true, &s->catalog.retry_deadline_ms))
            return usage_error(command, "--retry-deadline needs a number of seconds (0: none), got '%s'", value);
        break;
    case OPT_MIN_SPEED: {
        ckpt_error err;
        if (ckpt_parse_size(value, &v, &err) != CKPT_OK || v > UINT32_MAX)
            return usage_error(command, "--min-speed needs bytes per second such as 1KiB (0: none), got '%s'", value);
        s->catalog.min_speed_bytes = (uint32_t)v;
        break;
    }
    case OPT_RETRIES:
        if (!parse_uint(value, 100, &v)) return usage_error(command, "--retries needs 0 to 100, got '%s'", value);
        s->catalog.retries = (uint32_t)v;
        break;
    default: /* OPT_CONNECTIONS */
        if (!parse_uint(value, 256, &v) || !v)
            return usage_error(command, "--connections needs 1 to 256, got '%s'", value);
        s->catalog.max_connections = (uint32_t)v;
        break;
    }
    return EXIT_OK;
}

void source_options_progress(source_options *s, int mode) { s->download_bar_mode = mode; }

/* ckpt_catalog_options.download_progress: a bar while a server without
 * byte ranges sends a whole file into the cache (erased when every
 * download begun is done, so that what the command prints next starts on
 * a clean line); Ctrl-C stops the download. */
static int download_update(uint64_t done, uint64_t total, void *user) {
    source_options *s = user;
    if (!s->download_bar_on) {
        progress_start(&s->download_bar, "downloading", s->download_bar_mode);
        s->download_bar_on = true;
    }
    int stop = progress_update(done, total, &s->download_bar);
    if (done >= total) {
        progress_finish(&s->download_bar, true);
        s->download_bar_on = false;
    }
    return stop;
}

const ckpt_catalog_options *source_options_get(source_options *s) {
    s->catalog.download_progress = download_update;
    s->catalog.download_progress_user = s;
    if (!s->catalog.bearer_token) {
        const char *t = getenv("CKPT_BEARER_TOKEN");
        if (t && *t) s->catalog.bearer_token = t;
    }
    return &s->catalog;
}

int open_checkpoint(const char *path, const ckpt_catalog_options *options, bool note, ckpt_catalog **cat) {
    ckpt_error err;
    ckpt_error_clear(&err);
    if (ckpt_catalog_open_ex(path, options, cat, &err) != CKPT_OK) return report_error(&err);
    if (note) note_unfinished_commit(path);
    return EXIT_OK;
}

void source_options_free(source_options *s) {
    if (s->token) {
        memset(s->token, 0, strlen(s->token));
        free(s->token);
    }
    s->token = NULL;
}

const char *display_name(const char *name, char *buf, size_t cap) {
    ckpt_redact_name(name, buf, cap);
    return buf;
}
