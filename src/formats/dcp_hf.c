/* dcp_hf.c — the per-rank safetensors files of DCP's Hugging Face storage
 * layer (HuggingFaceStorageWriter(save_distributed=True)): each holds its
 * rank's chunks as whole tensors and, in __metadata__, DCP_SHARDING_INFO
 * = JSON {fqn: {"saved_offsets": [...]}}.  Opening one of them opens every
 * `*.safetensors` file of its directory (as torch's HuggingFaceStorageReader
 * and consolidate_safetensors_files do); each tensor's size is the largest
 * offset + size per axis, and its chunks must tile it.  See dcp.h. */
#include <stdlib.h>
#include <string.h>

#include "../io/file.h"
#include "dcp.h"
#include "../base/json.h"
#include "safetensors.h"

#define SHARDING_KEY "DCP_SHARDING_INFO"

typedef struct chunk {
    const char *fqn;
    uint32_t file;      /* catalog data file */
    const char *path;
    ckpt_dtype dtype;
    uint32_t ndim;
    const uint64_t *sizes;
    uint64_t *offsets;  /* arena */
    uint64_t data;      /* byte offset in the file */
} chunk;

typedef struct group {
    const char *fqn;
    size_t first, count; /* into the sorted chunks */
} group;


static int chunk_order(const void *a, const void *b) {
    const chunk *x = a, *y = b;
    int c = strcmp(x->fqn, y->fqn);
    if (c) return c;
    return x->file < y->file ? -1 : x->file > y->file;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* The *.safetensors files of the checkpoint's directory `dir`, sorted,
 * malloc'ed: listed through the catalog's source. */
static ckpt_status list_files(ckpt_catalog *c, const char *dir, char ***out, size_t *count, ckpt_error *err) {
    if (!ckpt__cat_can_list(c))
        return ckpt__fail(err, CKPT_E_NOT_FOUND, dir, NULL, -1,
                          "cannot list the directory of DCP safetensors shards (a remote directory cannot be listed)");
    char **names;
    size_t n, kept = 0;
    ckpt_status st = ckpt__cat_list(c, dir, &names, &n, err);
    if (st) return st;
    for (size_t i = 0; i < n; i++) {
        if (ends_with(names[i], ".safetensors")) names[kept++] = names[i];
        else free(names[i]);
    }
    *out = names;
    *count = kept;
    return CKPT_OK;
}

typedef struct hf_reader {
    ckpt_catalog *c;
    ckpt__arena *arena;
    ckpt_error *err;
    chunk *chunks;
    size_t count, cap;
} hf_reader;

/* Reads one file's header and sharding info into chunks. */
static ckpt_status read_file(hf_reader *r, ckpt__source *src, uint32_t file) {
    const char *path = src->name;
    ckpt__st_header h;
    ckpt_status st = ckpt__st_read_header(src, r->arena, &h, r->err);
    if (st) return st;
    const char *info = NULL;
    for (size_t i = 0; i < h.meta_count; i++)
        if (!strcmp(h.meta_keys[i], SHARDING_KEY)) info = h.meta_values[i];
    if (!info) {
        ckpt__st_header_free(&h);
        return ckpt__fail(r->err, CKPT__D(DCP_METADATA), path, NULL, 8,
                          "__metadata__ has no %s: this file is not a shard of the DCP checkpoint beside it (every "
                          "*.safetensors file of the directory is one)", SHARDING_KEY);
    }
    size_t len = strlen(info);
    char *text = ckpt__malloc(len + 1);
    ckpt__json_doc doc = {0};
    ckpt__name_table keys = {0};
    const char **names = NULL;
    if (!text) st = ckpt__oom(r->err, path, NULL);
    if (st == CKPT_OK) {
        memcpy(text, info, len + 1);
        size_t at;
        const char *why;
        ckpt_status parsed = ckpt__json_parse_in(text, len, r->arena->budget, &doc, &at, &why);
        if (parsed != CKPT_OK)
            st = ckpt__fail(r->err, parsed == CKPT_E_LIMIT ? parsed : CKPT__D(DCP_METADATA), path, NULL, 8,
                            "%s is not JSON (%s at its byte %zu)", SHARDING_KEY, why ? why : "invalid", at);
        else if (doc.nodes[0].kind != CKPT__JSON_OBJECT)
            st = ckpt__fail(r->err, CKPT__D(DCP_METADATA), path, NULL, 8, "%s is not a JSON object", SHARDING_KEY);
    }
    /* fqn → node of its {"saved_offsets": [...]} */
    size_t members = st == CKPT_OK ? doc.nodes[0].count : 0;
    uint32_t *value_of = NULL;
    if (st == CKPT_OK) {
        names = ckpt__calloc(members ? members : 1, sizeof *names);
        value_of = ckpt__calloc(members ? members : 1, sizeof *value_of);
        if (!names || !value_of || !ckpt__name_table_init(&keys, members ? members : 1)) st = ckpt__oom(r->err, path, NULL);
    }
    for (size_t i = 0, node = 1; st == CKPT_OK && i < members; i++) {
        names[i] = doc.nodes[node].str;
        value_of[i] = (uint32_t)(node + 1);
        if (!ckpt__name_table_insert(&keys, names, sizeof *names, (uint32_t)i, NULL))
            st = ckpt__fail(r->err, CKPT__D(DCP_METADATA), path, names[i], 8, "%s names the tensor twice", SHARDING_KEY);
        node = doc.nodes[node + 1].end;
    }
    for (size_t i = 0; st == CKPT_OK && i < h.count; i++) {
        const ckpt__st_tensor *t = &h.tensors[i];
        int64_t k = members ? ckpt__name_table_find(&keys, names, sizeof *names, t->name) : -1;
        const ckpt__json_node *v = k >= 0 ? &doc.nodes[value_of[k]] : NULL, *offs = NULL;
        if (v && v->kind == CKPT__JSON_OBJECT)
            for (uint32_t m = 0, node = (uint32_t)(v - doc.nodes) + 1; m < v->count; m++, node = doc.nodes[node + 1].end)
                if (!strcmp(doc.nodes[node].str, "saved_offsets")) offs = &doc.nodes[node + 1];
        if (!offs || offs->kind != CKPT__JSON_ARRAY || offs->count != t->ndim) {
            st = ckpt__fail(r->err, CKPT__D(DCP_METADATA), path, t->name, (int64_t)t->header_offset,
                            "%s gives the tensor no saved_offsets of %u numbers", SHARDING_KEY, t->ndim);
            break;
        }
        chunk *grown = ckpt__grow(r->chunks, r->count, &r->cap, sizeof *grown, 64);
        if (!grown) {
            st = ckpt__oom(r->err, path, NULL);
            break;
        }
        r->chunks = grown;
        chunk *c = &r->chunks[r->count];
        c->fqn = t->name;
        c->file = file;
        c->path = path;
        c->dtype = t->dtype;
        c->ndim = t->ndim;
        c->sizes = t->shape;
        c->data = h.data_start + t->begin;
        c->offsets = ckpt__arena_alloc(r->arena, (t->ndim ? t->ndim : 1) * sizeof *c->offsets);
        if (!c->offsets) {
            st = ckpt__oom(r->err, path, NULL);
            break;
        }
        const ckpt__json_node *x = offs + 1;
        for (uint32_t d = 0; d < t->ndim && st == CKPT_OK; d++, x = &doc.nodes[x->end]) {
            if (!ckpt__json_u64(x, &c->offsets[d]))
                st = ckpt__fail(r->err, CKPT__D(DCP_METADATA), path, t->name, (int64_t)t->header_offset,
                                "saved_offsets[%u] is not a non-negative integer", d);
        }
        /* torch counts float4_e2m1fn_x2 in pairs; safetensors in values. */
        if (st == CKPT_OK && t->dtype == CKPT_F4 && t->ndim) {
            if (c->offsets[t->ndim - 1] > UINT64_MAX / 2)
                st = ckpt__fail(r->err, CKPT__D(DCP_CHUNK_BOUNDS), path, t->name, -1, "saved_offsets overflow");
            else c->offsets[t->ndim - 1] *= 2;
        }
        if (st == CKPT_OK) r->count++;
    }
    /* The names stay valid: they point into the header text, kept by the arena. */
    free(value_of);
    free(names);
    ckpt__name_table_free(&keys);
    ckpt__json_free(&doc);
    free(text);
    ckpt__st_header_free(&h);
    return st;
}

/* Groups the chunks by tensor and adds each tensor. */
static ckpt_status add_tensors(hf_reader *r) {
    if (r->count) qsort(r->chunks, r->count, sizeof *r->chunks, chunk_order);
    ckpt_status st = CKPT_OK;
    ckpt__dcp_chunk *geometry = ckpt__malloc((r->count ? r->count : 1) * sizeof *geometry);
    ckpt__piece *pieces = ckpt__malloc((r->count ? r->count : 1) * sizeof *pieces);
    if (!geometry || !pieces) st = ckpt__oom(r->err, NULL, NULL);
    for (size_t i = 0; st == CKPT_OK && i < r->count;) {
        size_t j = i;
        while (j < r->count && !strcmp(r->chunks[j].fqn, r->chunks[i].fqn)) j++;
        const chunk *a = &r->chunks[i];
        uint64_t *size = ckpt__arena_alloc(r->arena, (a->ndim ? a->ndim : 1) * sizeof *size);
        if (!size) {
            st = ckpt__oom(r->err, a->path, a->fqn);
            break;
        }
        memset(size, 0, (a->ndim ? a->ndim : 1) * sizeof *size);
        uint32_t count = 0;
        for (size_t k = i; k < j && st == CKPT_OK; k++) {
            const chunk *c = &r->chunks[k];
            if (c->dtype != a->dtype || c->ndim != a->ndim) {
                st = ckpt__fail(r->err, CKPT__D(DCP_CHUNK_MISMATCH), c->path, c->fqn, (int64_t)c->data,
                                "this chunk is %s with %u axes; the one in %s is %s with %u axes",
                                ckpt_dtype_name(c->dtype), c->ndim, a->path, ckpt_dtype_name(a->dtype), a->ndim);
                break;
            }
            uint64_t volume = 1;
            for (uint32_t d = 0; d < c->ndim; d++) {
                uint64_t end;
                if (!ckpt__add_u64(c->offsets[d], c->sizes[d], &end)) {
                    st = ckpt__fail(r->err, CKPT__D(DCP_CHUNK_BOUNDS), c->path, c->fqn, (int64_t)c->data,
                                    "saved_offsets + shape overflows on axis %u", d);
                    break;
                }
                if (end > size[d]) size[d] = end;
                volume *= c->sizes[d];
            }
            geometry[k - i] = (ckpt__dcp_chunk){c->offsets, c->sizes, c->path};
            if (volume || (k + 1 == j && !count))
                pieces[count++] = (ckpt__piece){.file = c->file, .offset = c->data, .start = c->offsets,
                                                .count = c->sizes};
        }
        if (st == CKPT_OK)
            st = ckpt__dcp_check_tiling(a->path, a->fqn, a->ndim, size, geometry, j - i, r->err);
        if (st == CKPT_OK) {
            ckpt__tensor_decl d = {a->fqn, a->dtype, a->ndim, size, CKPT__OWN_STORAGE, pieces, count};
            st = ckpt__cat_add_tensor(r->c, &d, r->err);
        }
        i = j;
    }
    free(geometry);
    free(pieces);
    return st;
}

static ckpt_status hf_open(ckpt_catalog *c, ckpt__source *src, ckpt_error *err) {
    hf_reader r = {.c = c, .arena = ckpt__cat_arena(c), .err = err};
    char *dir = ckpt__path_dirname(src->name);
    char **names = NULL;
    size_t count = 0;
    ckpt_status st = dir ? list_files(c, dir, &names, &count, err) : ckpt__oom(err, src->name, NULL);
    const char *own = ckpt__path_basename(src->name);
    bool adopted = false;
    for (size_t i = 0; st == CKPT_OK && i < count; i++) {
        ckpt__source *f = NULL;
        if (!adopted && !strcmp(names[i], own)) {
            f = src;
            adopted = true;
        } else {
            char *full = ckpt__path_join(dir, names[i]);
            st = full ? ckpt__cat_open_source(c, full, &f, err) : ckpt__oom(err, dir, NULL);
            free(full);
        }
        uint32_t file;
        if (st == CKPT_OK) st = ckpt__cat_add_source(c, f, &file, err);
        if (st == CKPT_OK) st = read_file(&r, f, file);
    }
    if (!adopted) { /* not found by listing (removed meanwhile): read it alone */
        uint32_t file;
        if (st == CKPT_OK) st = ckpt__cat_add_source(c, src, &file, err);
        else ckpt__source_close(src);
        if (st == CKPT_OK) st = read_file(&r, src, file);
    }
    if (st == CKPT_OK) st = add_tensors(&r);
    ckpt__cat_set_format(c, CKPT_FORMAT_DCP);
    ckpt__beneath_free_names(names, count);
    free(dir);
    free(r.chunks);
    return st;
}

static int hf_probe(const unsigned char *head, size_t n, const char *name) {
    (void)name;
    static const char key[] = "\"" SHARDING_KEY "\"";
    size_t i = 8;
    while (i < n && (head[i] == ' ' || head[i] == '\t' || head[i] == '\n' || head[i] == '\r')) i++;
    if (i >= n || head[i] != '{') return CKPT__PROBE_NO;
    return memmem(head, n, key, sizeof key - 1) ? CKPT__PROBE_MAGIC : CKPT__PROBE_NO;
}

const ckpt__format ckpt__format_dcp_hf = {"dcp-safetensors", CKPT_FORMAT_DCP, hf_probe, hf_open};
