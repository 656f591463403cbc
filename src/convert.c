/* convert.c — ckpt_convert: catalog → writer, streamed by kernel copies. */
#include "catalog_internal.h"
#include "writer_internal.h"

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

ckpt_status ckpt_convert(const ckpt_catalog *src, const char *dst_path, const ckpt_writer_options *options,
                         ckpt_progress_fn progress_fn, void *user, ckpt_error *err) {
    if (!src || !dst_path)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "source and destination are required");
    ckpt_writer *w;
    ckpt_status st = ckpt_writer_create(dst_path, options, &w, err);
    if (st) return st;
    for (size_t i = 0; st == CKPT_OK && i < ckpt_catalog_metadata_count(src); i++) {
        const char *k, *v;
        ckpt_catalog_metadata_entry(src, i, &k, &v);
        st = ckpt_writer_set_metadata(w, k, v, err);
    }
    size_t n = ckpt_catalog_tensor_count(src);
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(src, i);
        st = ckpt_writer_add_tensor(w, t->name, t->dtype, t->ndim, t->shape, NULL, err);
    }
    if (st == CKPT_OK) st = ckpt_writer_begin(w, err);
    progress p = {progress_fn, user, 0, ckpt_writer_total_bytes(w)};
    if (st == CKPT_OK && progress_fn && progress_fn(0, p.total, user))
        st = ckpt__fail(err, CKPT_E_CANCELLED, dst_path, NULL, -1, "cancelled");
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(src, i);
        st = ckpt__writer_copy(w, i, ckpt__catalog_fd(src, t->file), t->offset, ckpt_catalog_file_path(src, t->file),
                               t->nbytes, tick, &p, err);
        p.before += t->nbytes;
    }
    if (st == CKPT_OK) st = ckpt_writer_commit(w, err);
    ckpt_writer_free(w);
    return st;
}
