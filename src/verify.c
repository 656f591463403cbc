/* verify.c — ckpt_verify: every checksum the files record, re-read: ckpt's
 * XXH3-64 digests (tensors and headers, here) and what the formats declared
 * (ZIP members' CRC-32s, ckpt__cat_add_crc), read whole by the engine. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/base.h"
#include "catalog_internal.h"
#include "formats/json.h"
#include "engine.h"
#include "io/file.h"

/* Every tensor to hash, with the digest its file records. */
typedef struct checks {
    ckpt__move *moves;
    uint64_t *want;
    size_t count, cap;
    size_t headers; /* header digests matched */
} checks;

static bool add_check(checks *c, size_t tensor, uint64_t want) {
    if (c->count == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        ckpt__move *m = ckpt__realloc(c->moves, cap * sizeof *m);
        if (m) c->moves = m;
        uint64_t *w = m ? ckpt__realloc(c->want, cap * sizeof *w) : NULL;
        if (!w) return false;
        c->want = w, c->cap = cap;
    }
    c->moves[c->count] = (ckpt__move){.tensor = tensor, .sink = CKPT__SINK_HASH};
    c->want[c->count++] = want;
    return true;
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
static ckpt_status verify_file(const ckpt_catalog *cat, size_t file, const char *map, checks *todo, ckpt_error *err) {
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
        uint64_t want = 0;
        const ckpt_tensor_info *t = ckpt_catalog_find(cat, key->str);
        if (val->kind != CKPT__JSON_STRING || !parse_hex64(val->str, val->len, &want))
            st = ckpt__fail(err, CKPT_E_CHECKSUM, path, key->str, -1, "checksum is not 16 hex digits");
        else if (!strcmp(key->str, "__metadata__") && (st = verify_header(cat, file, map, &doc, want, err)) == CKPT_OK)
            todo->headers++;
        else if (!t || t->file != file)
            st = ckpt__fail(err, CKPT_E_INDEX_MISMATCH, path, key->str, -1,
                            "the checksum map names a tensor this file does not hold");
        else if (!add_check(todo, ckpt__catalog_index_of(cat, t), want))
            st = ckpt__oom(err, path, NULL);
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

/* Tensors whose bytes lie in members with a recorded CRC-32. */
static size_t tensors_in_members(const ckpt_catalog *cat) {
    size_t n = 0;
    for (size_t i = 0; i < ckpt_catalog_tensor_count(cat); i++) {
        uint32_t count;
        const ckpt__piece *p = ckpt__catalog_pieces(cat, i, &count);
        bool in = count > 0;
        for (uint32_t k = 0; k < count; k++) in &= p[k].crc != 0;
        n += in;
    }
    return n;
}

ckpt_status ckpt_verify(const ckpt_catalog *cat, ckpt_progress_fn progress_fn, void *user, size_t *checked,
                        ckpt_error *err) {
    ckpt_verify_report r = {.size = sizeof r};
    ckpt_status st = ckpt_verify_ex(cat, progress_fn, user, &r, err);
    if (checked) *checked = r.tensor_digests;
    return st;
}

ckpt_status ckpt_verify_ex(const ckpt_catalog *cat, ckpt_progress_fn progress_fn, void *user,
                           ckpt_verify_report *report, ckpt_error *err) {
    ckpt_verify_report r;
    memset(&r, 0, sizeof r);
    if (report && report->size < sizeof report->size)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "report->size is not set");
    if (report) memset((char *)report + sizeof report->size, 0, report->size - sizeof report->size);
    if (!cat) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "catalog is NULL");
    checks todo = {0};
    ckpt_status st = CKPT_OK;
    for (size_t f = 0; f < ckpt_catalog_file_count(cat) && st == CKPT_OK; f++) {
        const char *map = ckpt_catalog_file_metadata(cat, f, CKPT_CHECKSUM_METADATA_KEY);
        if (map) st = verify_file(cat, f, map, &todo, err);
        else st = check_key_intact(cat, f, err);
    }
    /* The members whose CRC-32s the files record, each read whole. */
    size_t members = ckpt__catalog_crc_count(cat);
    uint32_t *numbers = ckpt__malloc((members ? members : 1) * sizeof *numbers);
    if (st == CKPT_OK && !numbers) st = ckpt__oom(err, NULL, "the recorded checksums");
    for (size_t i = 0; st == CKPT_OK && i < members; i++) {
        numbers[i] = (uint32_t)i;
        r.bytes += ckpt__catalog_crc(cat, i, NULL)->size;
    }
    /* Every tensor hashed and every member checked by the engine (in
     * parallel); the digests then compared in the files' order. */
    ckpt__engine_options o = {.io = CKPT_IO_AUTO, .progress = progress_fn, .user = user, .members = numbers,
                              .member_count = members};
    if (st == CKPT_OK) st = ckpt__engine_run((ckpt_catalog *)cat, todo.moves, todo.count, &o, NULL, err);
    free(numbers);
    if (st == CKPT_OK) r.zip_crc32 = members, r.header_digests = todo.headers;
    size_t count = 0;
    for (size_t i = 0; st == CKPT_OK && i < todo.count; i++, count++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, todo.moves[i].tensor);
        if (todo.moves[i].digest != todo.want[i])
            st = ckpt__fail(err, CKPT_E_CHECKSUM, ckpt_catalog_file_path(cat, t->file), t->name, (int64_t)t->offset,
                            "data checksum is %016llx, the file records %016llx: the tensor's bytes changed",
                            (unsigned long long)todo.moves[i].digest, (unsigned long long)todo.want[i]);
    }
    for (size_t i = 0; i < count; i++) r.bytes += ckpt_catalog_tensor(cat, todo.moves[i].tensor)->nbytes;
    if (st == CKPT_OK) r.tensors = count + tensors_in_members(cat);
    free(todo.moves);
    free(todo.want);
    r.tensor_digests = count;
    if (report) {
        size_t size = report->size < sizeof r ? report->size : sizeof r;
        r.size = report->size;
        memcpy(report, &r, size);
    }
    return st;
}
