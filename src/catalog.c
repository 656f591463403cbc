/* catalog.c — ckpt_catalog_*: opening checkpoints and reading their data. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "catalog_internal.h"
#include "formats/safetensors.h"
#include "formats/shards.h"
#include "formats/torch.h"
#include "formats/zip.h"
#include "io/file.h"

typedef struct catalog_file {
    char *path;
    int fd;
    uint64_t size;
    void *map;        /* whole-file read-only mapping, made on first view */
    ckpt__pairs meta; /* this file's own __metadata__ */
} catalog_file;

struct ckpt_catalog {
    ckpt_format format;
    ckpt__arena arena;
    char *index_path;
    size_t file_count;
    catalog_file *files;
    size_t count, cap;
    ckpt_tensor_info *tensors;
    ckpt__name_table names;
    ckpt__pairs meta;
    uint32_t storage_count; /* storages numbered so far, over all files */
    uint64_t *storage_base, *storage_size; /* per storage: data offset and size */
    uint64_t *storage_comp;                /* per storage: DEFLATE bytes, 0 when stored */
    size_t storage_cap;
    ckpt__buf tree;         /* torch object trees as JSON */
    size_t trees;
    pthread_mutex_t map_lock;
};

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static ckpt_status oom(ckpt_error *err, const char *path) {
    return ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
}

static ckpt_status add_file(ckpt_catalog *c, const char *path, ckpt_error *err) {
    catalog_file *files = ckpt__realloc(c->files, (c->file_count + 1) * sizeof *files);
    if (!files) return oom(err, path);
    c->files = files;
    catalog_file *f = &files[c->file_count];
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = ckpt__strdup(path);
    if (!f->path) return oom(err, path);
    c->file_count++;
    return ckpt__file_open_read(path, &f->fd, &f->size, err);
}

/* Records the next storage number's place; false when out of memory. */
static bool grow(uint64_t **array, size_t cap) {
    uint64_t *a = ckpt__realloc(*array, cap * sizeof *a);
    if (a) *array = a;
    return a != NULL;
}

static bool add_storage(ckpt_catalog *c, uint64_t base, uint64_t nbytes, uint64_t comp_size) {
    if (c->storage_count == c->storage_cap) {
        size_t cap = c->storage_cap ? c->storage_cap * 2 : 64;
        if (!grow(&c->storage_base, cap) || !grow(&c->storage_size, cap) || !grow(&c->storage_comp, cap)) return false;
        c->storage_cap = cap;
    }
    c->storage_base[c->storage_count] = base;
    c->storage_size[c->storage_count] = nbytes;
    c->storage_comp[c->storage_count++] = comp_size;
    return true;
}

bool ckpt__catalog_storage(const ckpt_catalog *c, uint32_t storage, uint64_t *base, uint64_t *nbytes) {
    if (storage >= c->storage_count) return false;
    *base = c->storage_base[storage];
    *nbytes = c->storage_size[storage];
    return true;
}

static bool reserve_tensors(ckpt_catalog *c, size_t more) {
    if (c->count + more <= c->cap) return true;
    size_t cap = c->cap ? c->cap : 64;
    while (cap < c->count + more) cap *= 2;
    ckpt_tensor_info *t = ckpt__realloc(c->tensors, cap * sizeof *t);
    if (!t) return false;
    c->tensors = t;
    c->cap = cap;
    return true;
}

/* Reads the catalog's last opened file as safetensors: its tensors (in
 * data order) and its new metadata keys. */
static ckpt_status add_safetensors(ckpt_catalog *c, const char *path, ckpt_error *err) {
    ckpt_status st;
    catalog_file *f = &c->files[c->file_count - 1];
    uint32_t file = (uint32_t)(c->file_count - 1);

    ckpt__st_header h;
    st = ckpt__st_read_header(f->fd, f->size, path, &c->arena, &h, err);
    if (st) return st;
    if (!reserve_tensors(c, h.count)) {
        ckpt__st_header_free(&h);
        return oom(err, path);
    }
    for (size_t i = 0; i < h.count; i++) {
        const ckpt__st_tensor *s = &h.tensors[i];
        c->tensors[c->count++] = (ckpt_tensor_info){
            .name = s->name, .dtype = s->dtype, .ndim = s->ndim, .shape = s->shape,
            .numel = s->numel, .nbytes = s->nbytes, .file = file, .offset = h.data_start + s->begin,
            .storage = c->storage_count,
        };
        if (!add_storage(c, h.data_start + s->begin, s->nbytes, 0)) {
            ckpt__st_header_free(&h);
            return oom(err, path);
        }
    }
    for (size_t i = 0; i < h.meta_count; i++) {
        if (!ckpt__pairs_push(&f->meta, h.meta_keys[i], h.meta_values[i])) {
            ckpt__st_header_free(&h);
            return oom(err, path);
        }
        if (ckpt__pairs_get(&c->meta, h.meta_keys[i])) continue; /* the first shard's value wins */
        if (!ckpt__pairs_push(&c->meta, h.meta_keys[i], h.meta_values[i])) {
            ckpt__st_header_free(&h);
            return oom(err, path);
        }
    }
    ckpt__st_header_free(&h);
    return CKPT_OK;
}

/* Reads the catalog's last opened file as a torch.save zip archive. */
static ckpt_status add_torch(ckpt_catalog *c, const char *path, bool legacy, ckpt_error *err) {
    catalog_file *f = &c->files[c->file_count - 1];
    uint32_t file = (uint32_t)(c->file_count - 1);
    ckpt__torch_file tf;
    ckpt_status st = legacy ? ckpt__torch_read_legacy(f->fd, f->size, path, &c->arena, &tf, err)
                            : ckpt__torch_read_zip(f->fd, f->size, path, &c->arena, &tf, err);
    if (st) return st;
    if (!reserve_tensors(c, tf.count)) {
        ckpt__torch_file_free(&tf);
        return oom(err, path);
    }
    for (size_t i = 0; i < tf.count; i++) {
        const ckpt__torch_tensor *t = &tf.tensors[i];
        c->tensors[c->count++] = (ckpt_tensor_info){
            .name = t->name, .dtype = t->dtype, .ndim = t->ndim, .shape = t->shape, .numel = t->numel,
            .nbytes = t->nbytes, .file = file, .offset = t->offset, .strides = t->strides,
            .storage = c->storage_count + t->storage, .big_endian = tf.big_endian,
            .compressed = tf.storages[t->storage].comp_size != 0,
        };
    }
    /* The tensors above were numbered from storage_count: add the storages
     * in the same order. */
    for (size_t i = 0; i < tf.storage_count; i++)
        if (!add_storage(c, tf.storages[i].offset, tf.storages[i].nbytes, tf.storages[i].comp_size)) {
            ckpt__torch_file_free(&tf);
            return oom(err, path);
        }
    ckpt__buf_puts(&c->tree, c->trees++ ? ", " : "");
    ckpt__buf_puts(&c->tree, tf.tree_json);
    ckpt__torch_file_free(&tf);
    return c->tree.failed ? oom(err, path) : CKPT_OK;
}

/* Opens a data file and reads it as what its first bytes say it is. */
static ckpt_status add_data_file(ckpt_catalog *c, const char *path, ckpt_error *err) {
    ckpt_status st = add_file(c, path, err);
    if (st) return st;
    catalog_file *f = &c->files[c->file_count - 1];
    unsigned char head[512] = {0};
    size_t n = f->size < sizeof head ? (size_t)f->size : sizeof head;
    if ((st = ckpt__pread_full(f->fd, head, n, 0, path, err)) != CKPT_OK) return st;
    bool zip = ckpt__zip_sniff(head, n), legacy = ckpt__torch_sniff_legacy(head, n);
    if (ckpt__torch_sniff_tar(head, n))
        return ckpt__fail(err, CKPT_E_UNKNOWN_FORMAT, path, NULL, 0,
                          "this is a tar archive: the torch.save format of PyTorch before 0.4, which ckpt does not "
                          "read; load and re-save it with a current torch");
    if (zip || legacy) {
        if (c->format == CKPT_FORMAT_SAFETENSORS) c->format = CKPT_FORMAT_TORCH;
        else if (c->format == CKPT_FORMAT_SAFETENSORS_SHARDED) c->format = CKPT_FORMAT_TORCH_SHARDED;
        return add_torch(c, path, legacy, err);
    }
    return add_safetensors(c, path, err);
}

/* Builds the name table; a name in two shards is a duplicate. */
static ckpt_status index_names(ckpt_catalog *c, ckpt_error *err) {
    if (!ckpt__name_table_init(&c->names, c->count)) return oom(err, NULL);
    for (size_t i = 0; i < c->count; i++) {
        uint32_t prev;
        if (!ckpt__name_table_insert(&c->names, &c->tensors[0].name, sizeof *c->tensors, (uint32_t)i, &prev)) {
            const ckpt_tensor_info *t = &c->tensors[i];
            return ckpt__fail(err, CKPT_E_DUPLICATE_NAME, c->files[t->file].path, t->name, (int64_t)t->offset,
                              "tensor is also in %s", c->files[c->tensors[prev].file].path);
        }
    }
    return CKPT_OK;
}

static ckpt_status open_index(ckpt_catalog *c, const char *index_path, ckpt_error *err) {
    c->format = CKPT_FORMAT_SAFETENSORS_SHARDED;
    c->index_path = ckpt__strdup(index_path);
    if (!c->index_path) return oom(err, index_path);
    char *text;
    uint64_t len;
    ckpt_status st = ckpt__read_small_file(index_path, CKPT__INDEX_MAX_BYTES, CKPT_E_INDEX_INVALID, &text,
                                           &len, err);
    if (st) return st;
    ckpt__index idx;
    st = ckpt__index_parse(text, (size_t)len, index_path, &c->arena, &idx, err);
    if (st) {
        free(text);
        return st;
    }

    char *dir = ckpt__path_dirname(index_path);
    if (!dir) st = oom(err, index_path);
    for (size_t i = 0; st == CKPT_OK && i < idx.file_count; i++) {
        char *p = ckpt__path_join(dir, idx.files[i]);
        st = p ? add_data_file(c, p, err) : oom(err, index_path);
        free(p);
    }
    free(dir);
    if (st == CKPT_OK) st = index_names(c, err);
    /* Every weight_map entry must be in the shard it names; the counts then
     * tell whether a shard holds a tensor the index does not list. */
    for (size_t i = 0; st == CKPT_OK && i < idx.count; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_find(c, idx.names[i]);
        if (!t)
            st = ckpt__fail(err, CKPT_E_INDEX_MISMATCH, index_path, idx.names[i], -1,
                            "weight_map puts this tensor in %s, but no shard holds it", idx.files[idx.file_of[i]]);
        else if (t->file != idx.file_of[i])
            st = ckpt__fail(err, CKPT_E_INDEX_MISMATCH, index_path, idx.names[i], -1,
                            "weight_map puts this tensor in %s, but it is in %s", idx.files[idx.file_of[i]],
                            c->files[t->file].path);
    }
    if (st == CKPT_OK && idx.count != c->count) {
        ckpt__name_table listed = {0};
        if (!ckpt__name_table_init(&listed, idx.count)) st = oom(err, index_path);
        for (size_t i = 0; st == CKPT_OK && i < idx.count; i++)
            ckpt__name_table_insert(&listed, idx.names, sizeof(char *), (uint32_t)i, NULL);
        for (size_t i = 0; st == CKPT_OK && i < c->count; i++)
            if (ckpt__name_table_find(&listed, idx.names, sizeof(char *), c->tensors[i].name) < 0)
                st = ckpt__fail(err, CKPT_E_INDEX_MISMATCH, c->files[c->tensors[i].file].path, c->tensors[i].name,
                                (int64_t)c->tensors[i].offset, "tensor is in this shard but not in the index %s",
                                index_path);
        ckpt__name_table_free(&listed);
    }
    ckpt__index_free(&idx);
    free(text); /* the index's strings live in it */
    return st;
}

/* Finds the checkpoint in a directory (see ckpt_catalog_open) into a
 * malloc'ed path. */
static ckpt_status resolve_directory(const char *dir, char **found, ckpt_error *err) {
    /* The Hugging Face layout, safetensors preferred as transformers does. */
    static const char *const preferred[] = {"model.safetensors.index.json", NULL, "model.safetensors", NULL,
                                            "pytorch_model.bin.index.json", NULL, "pytorch_model.bin", NULL};
    static const char *const suffixes[] = {NULL, ".safetensors.index.json", NULL, ".safetensors",
                                           NULL, ".bin.index.json",         NULL, ".bin"};
    for (int step = 0; step < 8; step++) {
        if (preferred[step]) {
            char *p = ckpt__path_join(dir, preferred[step]);
            struct stat st;
            if (p && stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
                *found = p;
                return CKPT_OK;
            }
            free(p);
            continue;
        }
        DIR *d = opendir(dir);
        if (!d) return ckpt__fail_errno(err, errno, dir, -1, "cannot list directory");
        char *match = NULL;
        int matches = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.' || !ends_with(e->d_name, suffixes[step])) continue;
            if (!matches++) match = ckpt__strdup(e->d_name);
        }
        closedir(d);
        if (matches == 1 && match) {
            *found = ckpt__path_join(dir, match);
            free(match);
            return *found ? CKPT_OK : oom(err, dir);
        }
        free(match);
        if (matches > 1)
            return ckpt__fail(err, CKPT_E_UNKNOWN_FORMAT, dir, NULL, -1,
                              "directory holds %d '*%s' files and no model.safetensors.index.json; "
                              "open one of them, or its index",
                              matches, suffixes[step]);
    }
    return ckpt__fail(err, CKPT_E_NOT_FOUND, dir, NULL, -1,
                      "directory holds no *.safetensors or *.bin checkpoint and no index of one");
}

/* Several torch shards: {"__shards__": [tree, …]}. */
static ckpt_status wrap_shard_trees(ckpt_catalog *c, ckpt_error *err) {
    ckpt__buf b = {0};
    ckpt__buf_puts(&b, "{\"__shards__\": [");
    ckpt__buf_append(&b, c->tree.data, c->tree.len);
    ckpt__buf_puts(&b, "]}");
    if (b.failed) {
        free(b.data);
        return oom(err, c->index_path);
    }
    free(c->tree.data);
    c->tree = b;
    return CKPT_OK;
}

ckpt_status ckpt_catalog_open(const char *path, ckpt_catalog **out, ckpt_error *err) {
    if (out) *out = NULL;
    if (!path || !out) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "path and out are required");
    ckpt_catalog *c = ckpt__calloc(1, sizeof *c);
    if (!c) return oom(err, path);
    pthread_mutex_init(&c->map_lock, NULL);
    c->format = CKPT_FORMAT_SAFETENSORS;

    char *resolved = NULL;
    struct stat sb;
    ckpt_status st = CKPT_OK;
    if (stat(path, &sb) != 0) st = ckpt__fail_errno(err, errno, path, -1, "cannot open");
    else if (S_ISDIR(sb.st_mode)) st = resolve_directory(path, &resolved, err);
    const char *target = resolved ? resolved : path;
    if (st == CKPT_OK) {
        if (ends_with(target, ".json")) {
            st = open_index(c, target, err);
        } else {
            st = add_data_file(c, target, err);
            if (st == CKPT_OK) st = index_names(c, err);
        }
    }
    free(resolved);
    if (st == CKPT_OK && c->trees > 1) st = wrap_shard_trees(c, err);
    if (st) {
        ckpt_catalog_close(c);
        return st;
    }
    *out = c;
    return CKPT_OK;
}

void ckpt_catalog_close(ckpt_catalog *c) {
    if (!c) return;
    for (size_t i = 0; i < c->file_count; i++) {
        if (c->files[i].map) munmap(c->files[i].map, (size_t)c->files[i].size);
        if (c->files[i].fd >= 0) close(c->files[i].fd);
        ckpt__pairs_free(&c->files[i].meta);
        free(c->files[i].path);
    }
    free(c->files);
    free(c->tensors);
    ckpt__pairs_free(&c->meta);
    free(c->tree.data);
    free(c->storage_base);
    free(c->storage_size);
    free(c->storage_comp);
    free(c->index_path);
    ckpt__name_table_free(&c->names);
    ckpt__arena_free(&c->arena);
    pthread_mutex_destroy(&c->map_lock);
    free(c);
}

ckpt_format ckpt_catalog_format(const ckpt_catalog *c) { return c->format; }
size_t ckpt_catalog_tensor_count(const ckpt_catalog *c) { return c ? c->count : 0; }

const ckpt_tensor_info *ckpt_catalog_tensor(const ckpt_catalog *c, size_t i) {
    return c && i < c->count ? &c->tensors[i] : NULL;
}

const ckpt_tensor_info *ckpt_catalog_find(const ckpt_catalog *c, const char *name) {
    if (!c || !name || !c->count) return NULL;
    int64_t i = ckpt__name_table_find(&c->names, &c->tensors[0].name, sizeof *c->tensors, name);
    return i < 0 ? NULL : &c->tensors[i];
}

size_t ckpt_catalog_file_count(const ckpt_catalog *c) { return c ? c->file_count : 0; }
const char *ckpt_catalog_file_path(const ckpt_catalog *c, size_t i) {
    return c && i < c->file_count ? c->files[i].path : NULL;
}
uint64_t ckpt_catalog_file_size(const ckpt_catalog *c, size_t i) {
    return c && i < c->file_count ? c->files[i].size : 0;
}
const char *ckpt_catalog_index_path(const ckpt_catalog *c) { return c ? c->index_path : NULL; }

const char *ckpt_catalog_tree_json(const ckpt_catalog *c) { return c && c->trees ? c->tree.data : NULL; }
size_t ckpt_catalog_metadata_count(const ckpt_catalog *c) { return c ? c->meta.count : 0; }

ckpt_status ckpt_catalog_metadata_entry(const ckpt_catalog *c, size_t i, const char **key, const char **value) {
    if (!c || i >= c->meta.count) return CKPT_E_OUT_OF_RANGE;
    if (key) *key = c->meta.keys[i];
    if (value) *value = c->meta.values[i];
    return CKPT_OK;
}

const char *ckpt_catalog_file_metadata(const ckpt_catalog *c, size_t file, const char *key) {
    return c && key && file < c->file_count ? ckpt__pairs_get(&c->files[file].meta, key) : NULL;
}

const char *ckpt_catalog_metadata_get(const ckpt_catalog *c, const char *key) {
    return c && key ? ckpt__pairs_get(&c->meta, key) : NULL;
}

int ckpt__catalog_fd(const ckpt_catalog *c, size_t file) { return c->files[file].fd; }

const ckpt__pairs *ckpt__catalog_file_meta(const ckpt_catalog *c, size_t file) { return &c->files[file].meta; }

static ckpt_status check_tensor(const ckpt_catalog *c, const ckpt_tensor_info *t, ckpt_error *err) {
    if (!c || !t || t < c->tensors || t >= c->tensors + c->count)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1,
                          "tensor info does not belong to this catalog");
    return CKPT_OK;
}

/* ---- reads that transform: byte order, strides, compression -------------- */

/* Where a tensor's bytes come from: the file directly, or a DEFLATE record. */
typedef struct source {
    const catalog_file *f;
    uint64_t base;      /* the storage's data (or compressed data) offset */
    uint64_t comp_size; /* 0: stored */
    uint64_t begin;     /* the tensor's element 0, in bytes into the storage */
} source;

/* Bytes [off, off + n) of the tensor's storage run, from element 0 on. */
static ckpt_status fetch(const source *s, const ckpt_tensor_info *t, uint64_t off, void *dst, uint64_t n,
                         ckpt_error *err) {
    if (!s->comp_size) return ckpt__pread_full(s->f->fd, dst, n, s->base + s->begin + off, s->f->path, err);
    return ckpt__zip_inflate_range(s->f->fd, s->base, s->comp_size, s->f->path, t->name, s->begin + off, dst, n, err);
}

/* Bytes per byte-swapped unit: the element, or each half of a complex. */
static unsigned swap_unit(ckpt_dtype d) {
    unsigned bytes = ckpt_dtype_bits(d) / 8;
    return d == CKPT_C64 ? 4 : bytes ? bytes : 1;
}


/* Contiguous big-endian data: read in place, swap whole units, and redo
 * the (at most two) units the range cuts. */
static ckpt_status read_swapped(const source *src, const ckpt_tensor_info *t, uint64_t off, void *dst, uint64_t n,
                                ckpt_error *err) {
    unsigned unit = swap_unit(t->dtype);
    unsigned char *out = dst;
    ckpt_status st = fetch(src, t, off, out, n, err);
    if (st || unit < 2 || n == 0) return st;
    uint64_t first = off / unit * unit, end = off + n;
    for (uint64_t u = first; u < end; u += unit) {
        if (u >= off && u + unit <= end) {
            ckpt__swap_units(out + (u - off), unit, unit);
            continue;
        }
        unsigned char tmp[8];
        if ((st = fetch(src, t, u, tmp, unit, err))) return st;
        ckpt__swap_units(tmp, unit, unit);
        for (unsigned k = 0; k < unit; k++)
            if (u + k >= off && u + k < end) out[u + k - off] = tmp[k];
    }
    return CKPT_OK;
}

/* A strided view: read the span of the storage it covers, then gather its
 * elements in row-major order (an odometer over the shape, no division per
 * element).  Memory: the span, once per call. */
static ckpt_status read_strided(const source *src, const ckpt_tensor_info *t, uint64_t off, void *dst, uint64_t n,
                                ckpt_error *err) {
    const catalog_file *f = src->f;
    if (n == 0) return CKPT_OK;
    uint64_t item = ckpt_dtype_bits(t->dtype) / 8, span = 1;
    for (uint32_t d = 0; d < t->ndim; d++) span += (t->shape[d] - 1) * (uint64_t)t->strides[d];
    span *= item; /* bounded by the storage when the catalog was opened */
    if (span > (1ULL << 34))
        return ckpt__fail(err, CKPT_E_LIMIT, f->path, t->name, (int64_t)t->offset,
                          "strided tensor spans %llu bytes of its storage; gathering it needs that much memory",
                          (unsigned long long)span);
    unsigned char *buf = ckpt__malloc((size_t)span);
    if (!buf) return ckpt__fail(err, CKPT_E_NO_MEMORY, f->path, t->name, -1, "cannot allocate %llu bytes", (unsigned long long)span);
    ckpt_status st = fetch(src, t, 0, buf, span, err);
    if (st == CKPT_OK) {
        if (t->big_endian) ckpt__swap_units(buf, (size_t)span, swap_unit(t->dtype));
        uint64_t idx[CKPT_MAX_DIMS], e = off / item, rest = e, at = 0;
        for (uint32_t d = t->ndim; d-- > 0;) {
            idx[d] = rest % t->shape[d];
            rest /= t->shape[d];
            at += idx[d] * (uint64_t)t->strides[d];
        }
        unsigned char *out = dst;
        uint64_t skip = off % item, left = n;
        while (left) {
            uint64_t take = item - skip < left ? item - skip : left;
            memcpy(out, buf + at * item + skip, (size_t)take);
            out += take;
            left -= take;
            skip = 0;
            for (uint32_t d = t->ndim; d-- > 0;) { /* next element: the odometer */
                at += (uint64_t)t->strides[d];
                if (++idx[d] < t->shape[d]) break;
                at -= idx[d] * (uint64_t)t->strides[d];
                idx[d] = 0;
            }
        }
    }
    free(buf);
    return st;
}

ckpt_status ckpt_catalog_read(const ckpt_catalog *c, const ckpt_tensor_info *t, uint64_t byte_offset, void *dst,
                              uint64_t nbytes, ckpt_error *err) {
    ckpt_status st = check_tensor(c, t, err);
    if (st) return st;
    uint64_t end;
    if (!ckpt__add_u64(byte_offset, nbytes, &end) || end > t->nbytes)
        return ckpt__fail(err, CKPT_E_OUT_OF_RANGE, c->files[t->file].path, t->name, -1,
                          "bytes [%llu, %llu + %llu) are outside the tensor's %llu bytes",
                          (unsigned long long)byte_offset, (unsigned long long)byte_offset,
                          (unsigned long long)nbytes, (unsigned long long)t->nbytes);
    if (nbytes && !dst) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, t->name, -1, "no destination buffer");
    const catalog_file *f = &c->files[t->file];
    source src = {f, c->storage_base[t->storage], c->storage_comp[t->storage], t->offset - c->storage_base[t->storage]};
    if (!t->strides && !t->big_endian) return fetch(&src, t, byte_offset, dst, nbytes, err);
    return t->strides ? read_strided(&src, t, byte_offset, dst, nbytes, err) : read_swapped(&src, t, byte_offset, dst, nbytes, err);
}

ckpt_status ckpt_catalog_view(ckpt_catalog *c, const ckpt_tensor_info *t, const void **data, ckpt_error *err) {
    ckpt_status st = check_tensor(c, t, err);
    if (st) return st;
    if (!data) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, t->name, -1, "data is required");
    catalog_file *f = &c->files[t->file];
    if (t->strides || t->big_endian || t->compressed)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, f->path, t->name, -1,
                          "the tensor is %s in the file: no view of it as a dense little-endian array; read it instead",
                          t->strides ? "a strided view" : t->big_endian ? "big-endian" : "compressed");
    pthread_mutex_lock(&c->map_lock);
    if (!f->map) {
        /* A file cut short since it was opened would make the mapping fault
         * (SIGBUS) where the data used to be: check before mapping. */
        struct stat sb;
        if (fstat(f->fd, &sb) != 0) {
            st = ckpt__fail_errno(err, errno, f->path, -1, "cannot stat");
        } else if ((uint64_t)sb.st_size < f->size) {
            st = ckpt__fail(err, CKPT_E_TRUNCATED, f->path, t->name, (int64_t)sb.st_size,
                            "file shrank from %llu to %llu bytes since it was opened", (unsigned long long)f->size,
                            (unsigned long long)sb.st_size);
        } else {
            void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_SHARED, f->fd, 0);
            if (m == MAP_FAILED) st = ckpt__fail_errno(err, errno, f->path, -1, "cannot map the file");
            else f->map = m;
        }
    }
    pthread_mutex_unlock(&c->map_lock);
    if (st) return st;
    *data = (const char *)f->map + t->offset;
    return CKPT_OK;
}
