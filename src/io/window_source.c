/* window_source.c — a source restricted to a byte range of another source:
 * a file embedded in a file (the torch.save archive of one item of a DCP
 * .distcp file) read with the ordinary format code.  Offsets are relative
 * to the window; reads outside it end, as a file would, with
 * CKPT_E_TRUNCATED.  The window borrows its base: no descriptor (the
 * engine must not pread the base at window offsets) and no mapping; and,
 * where its caller read its bytes already (with others, in one request of
 * a remote file), it borrows them too and reads nothing. */
#include <stdlib.h>
#include <string.h>

#include "source.h"

typedef struct window {
    ckpt__source *base;
    uint64_t offset;
    const unsigned char *held; /* the window's bytes, read already, or NULL */
} window;

static ckpt_status window_read(void *user, void *file, void *dst, uint64_t n, uint64_t offset, ckpt_error *err) {
    ckpt__source *src = file;
    (void)user;
    const window *w = src->impl;
    if (offset > src->size || n > src->size - offset)
        return ckpt__fail(err, CKPT_E_TRUNCATED, src->name, NULL, (int64_t)(w->offset + (offset < src->size ? src->size : offset)),
                          "the item at bytes [%llu, %llu) ends before data that runs to byte %llu",
                          (unsigned long long)w->offset, (unsigned long long)(w->offset + src->size),
                          (unsigned long long)(w->offset + offset + n));
    if (w->held) {
        memcpy(dst, w->held + offset, (size_t)n);
        return CKPT_OK;
    }
    return ckpt__source_read(w->base, dst, n, w->offset + offset, err);
}

static void window_close(void *user, void *file) {
    ckpt__source *src = file;
    (void)user; free(src->impl); }

static const ckpt__source_ops window_ops = {.version = CKPT_SOURCE_OPS_VERSION,
    .read = window_read,
    .close = window_close};

ckpt_status ckpt__source_window_held(ckpt__source *base, uint64_t offset, uint64_t length, const void *held,
                                     ckpt__source **out, ckpt_error *err) {
    *out = NULL;
    uint64_t end;
    if (!ckpt__add_u64(offset, length, &end) || end > base->size)
        return ckpt__fail(err, CKPT_E_TRUNCATED, base->name, NULL, (int64_t)(offset < base->size ? base->size : offset),
                          "an item at bytes [%llu, %llu + %llu) runs past the end of the file (%llu bytes)",
                          (unsigned long long)offset, (unsigned long long)offset, (unsigned long long)length,
                          (unsigned long long)base->size);
    ckpt__source *src = ckpt__calloc(1, sizeof *src);
    window *w = ckpt__calloc(1, sizeof *w);
    if (!src || !w || !(src->name = ckpt__strdup(base->name))) {
        free(src);
        free(w);
        return ckpt__oom(err, base->name, NULL);
    }
    w->base = base;
    w->offset = offset;
    w->held = held;
    src->ops = &window_ops;
    src->file = src;
    src->impl = w;
    src->size = length;
    src->fd = -1;
    src->caps = base->caps & CKPT__SRC_REMOTE;
    *out = src;
    return CKPT_OK;
}
