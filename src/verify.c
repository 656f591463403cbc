/* verify.c — ckpt_verify: recorded per-tensor checksums, re-read. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/base.h"
#include "catalog_internal.h"
#include "formats/json.h"
#include "io/file.h"

enum { CHUNK = 8 << 20 };

typedef struct progress {
    ckpt_progress_fn fn;
    void *user;
    uint64_t done, total;
} progress;

/* The XXH3-64 of a tensor's bytes, read in chunks. */
static ckpt_status digest(const ckpt_catalog *cat, const ckpt_tensor_info *t, unsigned char *buf, progress *p,
                          uint64_t *out, ckpt_error *err) {
    XXH3_state_t *state = XXH3_createState();
    if (!state || XXH3_64bits_reset(state) == XXH_ERROR) {
        XXH3_freeState(state);
        return ckpt__fail(err, CKPT_E_NO_MEMORY, NULL, t->name, -1, "out of memory");
    }
    ckpt_status st = CKPT_OK;
    for (uint64_t at = 0; at < t->nbytes && st == CKPT_OK;) {
        uint64_t len = t->nbytes - at < CHUNK ? t->nbytes - at : CHUNK;
        st = ckpt_catalog_read(cat, t, at, buf, len, err);
        if (st == CKPT_OK) XXH3_64bits_update(state, buf, (size_t)len);
        at += len;
        p->done += len;
        if (st == CKPT_OK && p->fn && p->fn(p->done, p->total, p->user))
            st = ckpt__fail(err, CKPT_E_CANCELLED, NULL, NULL, -1, "cancelled");
    }
    *out = XXH3_64bits_digest(state);
    XXH3_freeState(state);
    return st;
}

static bool parse_hex64(const char *s, size_t len, uint64_t *out) {
    if (len != 16) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return true;
}

/* The header check: the header as written hashed with the map in its
 * placeholder form (every digest zero), as the writer hashed it. */
static ckpt_status verify_header(const ckpt_catalog *cat, size_t file, const char *map, const ckpt__json_doc *doc,
                                 uint64_t want, ckpt_error *err) {
    const char *path = ckpt_catalog_file_path(cat, file);
    ckpt__buf placeholder = {0}, actual = {0}, zeros = {0};
    ckpt__buf_puts(&placeholder, "{");
    size_t i = 1;
    for (uint32_t k = 0; k < doc->nodes[0].count; k++) {
        const ckpt__json_node *key = &doc->nodes[i];
        if (k) ckpt__buf_puts(&placeholder, ",");
        ckpt__buf_json_string(&placeholder, key->str);
        ckpt__buf_puts(&placeholder, ":\"0000000000000000\"");
        i = doc->nodes[key->end].end;
    }
    ckpt__buf_puts(&placeholder, "}");
    ckpt__buf_json_string(&actual, map);
    ckpt__buf_json_string(&zeros, placeholder.data ? placeholder.data : "");
    ckpt__source *src = ckpt__catalog_source(cat, file);
    unsigned char prefix[8];
    uint64_t n = 0;
    char *header = NULL;
    ckpt_status st = placeholder.failed || actual.failed || zeros.failed
                         ? ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory")
                         : ckpt__source_read(src, prefix, 8, 0, err);
    if (st == CKPT_OK) {
        for (int b = 7; b >= 0; b--) n = n << 8 | prefix[b];
        header = ckpt__malloc((size_t)n + 8);
        st = header ? ckpt__source_read(src, header, n + 8, 0, err)
                    : ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
    }
    if (st == CKPT_OK) {
        char *at = actual.len == zeros.len ? memmem(header, (size_t)n + 8, actual.data, actual.len) : NULL;
        if (!at) {
            st = ckpt__fail(err, CKPT_E_CHECKSUM, path, NULL, 8, "the checksum map does not match the header's layout");
        } else {
            memcpy(at, zeros.data, zeros.len);
            uint64_t got = XXH3_64bits(header, (size_t)n + 8);
            if (got != want)
                st = ckpt__fail(err, CKPT_E_CHECKSUM, path, NULL, 8,
                                "header checksum is %016llx, the file records %016llx: the header changed",
                                (unsigned long long)got, (unsigned long long)want);
        }
    }
    free(header);
    free(placeholder.data);
    free(actual.data);
    free(zeros.data);
    return st;
}

/* Checks the tensors named in one file's checksum map. */
static ckpt_status verify_file(const ckpt_catalog *cat, size_t file, const char *map, unsigned char *buf, progress *p,
                               size_t *checked, ckpt_error *err) {
    const char *path = ckpt_catalog_file_path(cat, file);
    size_t len = strlen(map);
    char *text = ckpt__malloc(len + 1);
    if (!text) return ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
    memcpy(text, map, len + 1);
    ckpt__json_doc doc;
    size_t at;
    const char *why;
    ckpt_status st = ckpt__json_parse(text, len, &doc, &at, &why);
    if (st || doc.nodes[0].kind != CKPT__JSON_OBJECT) {
        if (st == CKPT_OK) ckpt__json_free(&doc);
        free(text);
        return ckpt__fail(err, CKPT_E_CHECKSUM, path, NULL, -1, "%s is not a JSON object of checksums",
                          CKPT_CHECKSUM_METADATA_KEY);
    }
    size_t i = 1;
    for (uint32_t k = 0; k < doc.nodes[0].count && st == CKPT_OK; k++) {
        const ckpt__json_node *key = &doc.nodes[i], *val = &doc.nodes[key->end];
        uint64_t want = 0, got = 0;
        const ckpt_tensor_info *t = ckpt_catalog_find(cat, key->str);
        if (val->kind != CKPT__JSON_STRING || !parse_hex64(val->str, val->len, &want))
            st = ckpt__fail(err, CKPT_E_CHECKSUM, path, key->str, -1, "checksum is not 16 hex digits");
        else if (!strcmp(key->str, "__metadata__"))
            st = verify_header(cat, file, map, &doc, want, err);
        else if (!t || t->file != file)
            st = ckpt__fail(err, CKPT_E_INDEX_MISMATCH, path, key->str, -1,
                            "the checksum map names a tensor this file does not hold");
        else if ((st = digest(cat, t, buf, p, &got, err)) == CKPT_OK && got != want)
            st = ckpt__fail(err, CKPT_E_CHECKSUM, path, t->name, (int64_t)t->offset,
                            "data checksum is %016llx, the file records %016llx: the tensor's bytes changed",
                            (unsigned long long)got, (unsigned long long)want);
        else if (st == CKPT_OK)
            (*checked)++;
        i = val->end;
    }
    ckpt__json_free(&doc);
    free(text);
    return st;
}

/* A key one byte away from the checksum key is a damaged checksum key, not
 * a file without checksums. */
static ckpt_status check_key_intact(const ckpt_catalog *cat, size_t file, ckpt_error *err) {
    const ckpt__pairs *meta = ckpt__catalog_file_meta(cat, file);
    const char *want = CKPT_CHECKSUM_METADATA_KEY;
    size_t n = strlen(want);
    for (size_t i = 0; i < meta->count; i++) {
        const char *k = meta->keys[i];
        if (strlen(k) != n) continue;
        size_t diff = 0;
        for (size_t j = 0; j < n; j++) diff += k[j] != want[j];
        if (diff == 1)
            return ckpt__fail(err, CKPT_E_CHECKSUM, ckpt_catalog_file_path(cat, file), NULL, -1,
                              "metadata key '%s' looks like a damaged '%s'", k, want);
    }
    return CKPT_OK;
}

ckpt_status ckpt_verify(const ckpt_catalog *cat, ckpt_progress_fn progress_fn, void *user, size_t *checked,
                        ckpt_error *err) {
    size_t count = 0;
    if (checked) *checked = 0;
    if (!cat) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "catalog is NULL");
    progress p = {progress_fn, user, 0, 0};
    for (size_t i = 0; i < ckpt_catalog_tensor_count(cat); i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
        if (ckpt_catalog_file_metadata(cat, t->file, CKPT_CHECKSUM_METADATA_KEY)) p.total += t->nbytes;
    }
    unsigned char *buf = ckpt__malloc(CHUNK);
    if (!buf) return ckpt__fail(err, CKPT_E_NO_MEMORY, NULL, NULL, -1, "out of memory");
    ckpt_status st = CKPT_OK;
    for (size_t f = 0; f < ckpt_catalog_file_count(cat) && st == CKPT_OK; f++) {
        const char *map = ckpt_catalog_file_metadata(cat, f, CKPT_CHECKSUM_METADATA_KEY);
        if (map) st = verify_file(cat, f, map, buf, &p, &count, err);
        else st = check_key_intact(cat, f, err);
    }
    free(buf);
    if (checked) *checked = count;
    return st;
}
