/* Fuzz target: what ranks send each other in collective operations
 * (src/wire.c, writer.c's join) — bytes that are untrusted on the receiving
 * side.  The first byte picks the decoder:
 *   0  a catalog (rank 0's, broadcast): data files become in-memory
 *      buffers of exactly the declared size, and every tensor is then read
 *      and viewed, so that a piece outside its file shows under ASan;
 *   1  a shard writer's declarations (gathered from every rank);
 *   2  a writer's layout (rank 0's, for the others to join; files not
 *      opened). */
#include <stdlib.h>
#include <string.h>

#include "catalog_internal.h"
#include "collective_internal.h"
#include "fuzz_common.h"
#include "writer_internal.h"

#define MAX_FILE (16u << 20)
#define MAX_FILES 64

typedef struct files {
    void *bufs[MAX_FILES];
    size_t n;
} files;

static ckpt_status open_memory(void *user, const char *name, uint64_t size, ckpt__source **out, ckpt_error *err) {
    files *f = user;
    if (size > MAX_FILE || f->n == MAX_FILES)
        return ckpt__fail(err, CKPT_E_LIMIT, name, NULL, -1, "fuzz: file too large or too many");
    unsigned char *b = malloc(size ? size : 1);
    if (!b) return ckpt__oom(err, name, NULL);
    memset(b, 0x5a, size ? size : 1);
    f->bufs[f->n++] = b;
    return ckpt__source_memory(name, b, size, out, err);
}

static void catalog(const uint8_t *data, size_t size) {
    files f = {{0}, 0};
    ckpt_catalog *c;
    ckpt_error err;
    if (ckpt__catalog_decode(data, size, NULL, NULL, open_memory, &f, &c, &err) == CKPT_OK) {
        for (size_t i = 0; i < ckpt_catalog_tensor_count(c); i++) {
            const ckpt_tensor_info *t = ckpt_catalog_tensor(c, i);
            if (t->nbytes <= (4u << 20)) {
                unsigned char *buf = malloc(t->nbytes ? t->nbytes : 1);
                if (buf) ckpt_catalog_read(c, t, 0, buf, t->nbytes, &err);
                free(buf);
            }
            const void *view;
            if (ckpt_catalog_view(c, t, &view, &err) == CKPT_OK && t->nbytes) {
                volatile unsigned char sink = 0;
                for (uint64_t k = 0; k < t->nbytes; k += 4093) sink ^= ((const unsigned char *)view)[k];
                sink ^= ((const unsigned char *)view)[t->nbytes - 1];
                (void)sink;
            }
        }
        ckpt__buf again = {0};
        ckpt__catalog_encode(c, &again, &err);
        free(again.data);
        ckpt_catalog_close(c);
    }
    for (size_t i = 0; i < f.n; i++) free(f.bufs[i]);
}

static void parts(const uint8_t *data, size_t size) {
    ckpt__arena arena = {0};
    ckpt__wire_part *p;
    size_t n;
    ckpt_error err;
    if (ckpt__parts_decode(data, size, 1, &arena, &p, &n, &err) == CKPT_OK)
        for (size_t i = 0; i < n; i++)
            if (!p[i].name || p[i].ndim > CKPT_MAX_DIMS) abort();
    ckpt__arena_free(&arena);
}

static void join(const uint8_t *data, size_t size) {
    ckpt_writer *w;
    ckpt_error err;
    if (ckpt__writer_join(data, size, false, &w, &err) == CKPT_OK) {
        for (size_t i = 0; i < 4; i++) ckpt_writer_tensor_kept(w, i);
        ckpt_writer_free(w);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    switch (data[0] % 3) {
    case 0: catalog(data + 1, size - 1); break;
    case 1: parts(data + 1, size - 1); break;
    default: join(data + 1, size - 1); break;
    }
    return 0;
}
