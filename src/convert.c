/* convert.c — ckpt_convert: catalog → writer, streamed.
 *
 * safetensors sources are copied file to file by the kernel.  torch sources
 * get what huggingface_hub's save_torch_state_dict does to a state dict:
 * tensors that overlap in one storage are written once (the first complete
 * one by name is kept; the others are recorded as `removed → kept` in the
 * checkpoint metadata), views are written contiguous, every file gets
 * {"format": "pt"}; and the non-tensor object tree is kept as JSON under
 * CKPT_TREE_METADATA_KEY. */
#include <stdlib.h>
#include <string.h>

#include "catalog_internal.h"
#include "writer_internal.h"

/* The checkpoint-metadata key of a torch file's object tree (see
 * ckpt_catalog_tree_json). */
#define CKPT_TREE_METADATA_KEY "ckpt.torch_tree"

enum { TRANSFORM_CHUNK = 8 << 20 };

typedef struct progress {
    ckpt_progress_fn fn;
    void *user;
    uint64_t before; /* bytes done before the current tensor */
    uint64_t total;
} progress;

static int tick(uint64_t copied, void *user) {
    progress *p = user;
    return p->fn ? p->fn(p->before + copied, p->total, p->user) : 0;
}

/* ---- shared storages, as huggingface_hub's _remove_duplicate_names ------ */

typedef struct area {
    size_t index;  /* catalog tensor */
    size_t rank;   /* first appearance of its storage */
    uint64_t start, stop;
    const char *name;
} area;

static int by_area(const void *a, const void *b) {
    const area *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    if (x->stop != y->stop) return x->stop < y->stop ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(const area *const *)a)->name, (*(const area *const *)b)->name);
}

/* Byte range of a tensor inside its storage: [start, one past its last
 * element in row-major order), as the hub's data_ptr/_end_ptr. */
static void tensor_area(const ckpt_tensor_info *t, uint64_t base, area *a) {
    a->start = t->offset - base;
    if (!t->numel) {
        a->stop = a->start;
    } else if (!t->strides) {
        a->stop = a->start + t->nbytes;
    } else {
        uint64_t last = 0, item = ckpt_dtype_bits(t->dtype) / 8;
        for (uint32_t d = 0; d < t->ndim; d++) last += (t->shape[d] - 1) * (uint64_t)t->strides[d];
        a->stop = a->start + (last + 1) * item;
    }
}

/* Marks in `keep` the tensors to write; records removed → kept pairs. */
static ckpt_status resolve_shared(const ckpt_catalog *src, ckpt_writer *w, unsigned char *keep, ckpt_error *err) {
    size_t n = ckpt_catalog_tensor_count(src), count = 0;
    area *areas = ckpt__malloc((n ? n : 1) * sizeof *areas);
    area **group = ckpt__malloc((n ? n : 1) * sizeof *group);
    uint32_t *rank_of = NULL;
    size_t ranks = 0, rank_cap = 0;
    ckpt_status st = CKPT_OK;
    if (!areas || !group) st = ckpt__fail(err, CKPT_E_NO_MEMORY, NULL, NULL, -1, "out of memory");
    /* Storage rank = order of first appearance (the hub's dict order). */
    uint32_t max_storage = 0;
    for (size_t i = 0; st == CKPT_OK && i < n; i++)
        if (ckpt_catalog_tensor(src, i)->storage > max_storage) max_storage = ckpt_catalog_tensor(src, i)->storage;
    if (st == CKPT_OK) {
        rank_cap = (size_t)max_storage + 1;
        rank_of = ckpt__malloc(rank_cap * sizeof *rank_of);
        if (!rank_of) st = ckpt__fail(err, CKPT_E_NO_MEMORY, NULL, NULL, -1, "out of memory");
        else memset(rank_of, 0xFF, rank_cap * sizeof *rank_of);
    }
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(src, i);
        uint64_t base, size;
        if (!ckpt__catalog_storage(src, t->storage, &base, &size) || size == 0) continue; /* the hub skips empty storages */
        if (rank_of[t->storage] == UINT32_MAX) rank_of[t->storage] = (uint32_t)ranks++;
        area *a = &areas[count++];
        a->index = i;
        a->rank = rank_of[t->storage];
        a->name = t->name;
        tensor_area(t, base, a);
    }
    if (st == CKPT_OK) qsort(areas, count, sizeof *areas, by_area);
    for (size_t i = 0; st == CKPT_OK && i < count;) {
        /* A group: consecutive areas of one storage, each starting before
         * the previous one's stop (the hub compares with the previous stop,
         * not the largest). */
        size_t j = i + 1;
        while (j < count && areas[j].rank == areas[i].rank && areas[j].start < areas[j - 1].stop) j++;
        if (j - i >= 2) {
            size_t members = 0;
            const area *keep_area = NULL;
            for (size_t k = i; k < j; k++) {
                group[members++] = &areas[k];
                const ckpt_tensor_info *t = ckpt_catalog_tensor(src, areas[k].index);
                uint64_t base, size;
                ckpt__catalog_storage(src, t->storage, &base, &size);
                bool complete = areas[k].start == 0 && t->nbytes == size;
                if (complete && (!keep_area || strcmp(areas[k].name, keep_area->name) < 0)) keep_area = &areas[k];
            }
            /* No tensor covers the storage: the hub refuses; ckpt writes each
             * view as its own copy, which loses nothing and stores no more
             * than the views. */
            if (keep_area) {
                qsort(group, members, sizeof *group, by_name);
                for (size_t k = 0; k < members && st == CKPT_OK; k++) {
                    if (group[k] == keep_area) continue;
                    keep[group[k]->index] = 0;
                    st = ckpt_writer_set_checkpoint_metadata(w, group[k]->name, keep_area->name, err);
                }
            }
        }
        i = j;
    }
    free(areas);
    free(group);
    free(rank_of);
    return st;
}

/* ---- copying -------------------------------------------------------------- */

/* Tensors that need a transform (gather, byte swap) go through reads: in
 * chunks when contiguous, whole when strided (a gather reads the span). */
static ckpt_status copy_transformed(const ckpt_catalog *src, const ckpt_tensor_info *t, ckpt_writer *w, size_t index,
                                    progress *p, ckpt_error *err) {
    /* Strided and compressed data are read whole: each read would redo the
     * gather or the inflation from the start. */
    uint64_t chunk = (t->strides || t->compressed) ? t->nbytes : (t->nbytes < TRANSFORM_CHUNK ? t->nbytes : TRANSFORM_CHUNK);
    unsigned char *buf = ckpt__malloc(chunk ? (size_t)chunk : 1);
    if (!buf) return ckpt__fail(err, CKPT_E_NO_MEMORY, ckpt_catalog_file_path(src, t->file), t->name, -1,
                                "cannot allocate %llu bytes", (unsigned long long)chunk);
    ckpt_status st = CKPT_OK;
    for (uint64_t done = 0; done < t->nbytes && st == CKPT_OK;) {
        uint64_t len = t->nbytes - done < chunk ? t->nbytes - done : chunk;
        st = ckpt_catalog_read(src, t, done, buf, len, err);
        if (st == CKPT_OK) st = ckpt_writer_write(w, index, buf, (size_t)len, err);
        done += len;
        if (st == CKPT_OK && tick(done, p)) st = ckpt__fail(err, CKPT_E_CANCELLED, NULL, NULL, -1, "cancelled");
    }
    free(buf);
    return st;
}

/* The file metadata ("format": "pt" for torch sources, then the source's
 * own map) and, for torch sources, the object tree as checkpoint metadata.
 * Called after any removed → kept entries so that they come first. */
ckpt_status ckpt__copy_source_metadata(const ckpt_catalog *src, ckpt_writer *w, ckpt_error *err) {
    ckpt_format format = ckpt_catalog_format(src);
    ckpt_status st = CKPT_OK;
    if (format == CKPT_FORMAT_TORCH || format == CKPT_FORMAT_TORCH_SHARDED) {
        st = ckpt_writer_set_metadata(w, "format", "pt", err);
        if (st == CKPT_OK && ckpt_catalog_tree_json(src))
            st = ckpt_writer_set_checkpoint_metadata(w, CKPT_TREE_METADATA_KEY, ckpt_catalog_tree_json(src), err);
    }
    for (size_t i = 0; st == CKPT_OK && i < ckpt_catalog_metadata_count(src); i++) {
        const char *k, *v;
        ckpt_catalog_metadata_entry(src, i, &k, &v);
        st = ckpt_writer_set_metadata(w, k, v, err);
    }
    return st;
}

ckpt_status ckpt_convert(const ckpt_catalog *src, const char *dst_path, const ckpt_writer_options *options,
                         ckpt_progress_fn progress_fn, void *user, ckpt_error *err) {
    if (!src || !dst_path)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "source and destination are required");
    ckpt_writer *w;
    ckpt_status st = ckpt_writer_create(dst_path, options, &w, err);
    if (st) return st;
    size_t n = ckpt_catalog_tensor_count(src);
    unsigned char *keep = ckpt__malloc(n ? n : 1);
    size_t *index = ckpt__malloc((n ? n : 1) * sizeof *index);
    if (!keep || !index) st = ckpt__fail(err, CKPT_E_NO_MEMORY, dst_path, NULL, -1, "out of memory");
    else memset(keep, 1, n ? n : 1);
    ckpt_format format = ckpt_catalog_format(src);
    if (st == CKPT_OK && (format == CKPT_FORMAT_TORCH || format == CKPT_FORMAT_TORCH_SHARDED))
        st = resolve_shared(src, w, keep, err);
    if (st == CKPT_OK) st = ckpt__copy_source_metadata(src, w, err);
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(src, i);
        if (keep[i]) st = ckpt_writer_add_tensor(w, t->name, t->dtype, t->ndim, t->shape, &index[i], err);
    }
    if (st == CKPT_OK) st = ckpt_writer_begin(w, err);
    progress p = {progress_fn, user, 0, ckpt_writer_total_bytes(w)};
    if (st == CKPT_OK && progress_fn && progress_fn(0, p.total, user))
        st = ckpt__fail(err, CKPT_E_CANCELLED, dst_path, NULL, -1, "cancelled");
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        if (!keep[i]) continue;
        const ckpt_tensor_info *t = ckpt_catalog_tensor(src, i);
        if (t->strides || t->big_endian || t->compressed)
            st = copy_transformed(src, t, w, index[i], &p, err);
        else
            st = ckpt__writer_copy(w, index[i], ckpt__catalog_source(src, t->file), t->offset, t->nbytes, tick, &p,
                                   err);
        p.before += t->nbytes;
    }
    if (st == CKPT_OK) st = ckpt_writer_commit(w, err);
    ckpt_writer_free(w);
    free(keep);
    free(index);
    return st;
}
