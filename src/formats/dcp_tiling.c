/* dcp_tiling.c — do a tensor's chunks tile it?  See dcp.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp.h"

const char *ckpt__dcp_dims(char *buf, size_t cap, const uint64_t *v, uint32_t n) {
    size_t at = 0;
    int w = snprintf(buf, cap, "[");
    at = w > 0 ? (size_t)w : 0;
    for (uint32_t i = 0; i < n && at < cap; i++) {
        w = snprintf(buf + at, cap - at, "%s%llu", i ? ", " : "", (unsigned long long)v[i]);
        if (w < 0 || (size_t)w >= cap - at) {
            if (cap >= 5) memcpy(buf + cap - 5, "...]", 5);
            return buf;
        }
        at += (size_t)w;
    }
    if (at + 2 <= cap) memcpy(buf + at, "]", 2);
    else if (cap >= 5) memcpy(buf + cap - 5, "...]", 5);
    return buf;
}

typedef struct sweep {
    const ckpt__dcp_chunk *chunks;
    uint32_t axis;
} sweep;

/* qsort has no context argument: the axis and chunks go through a
 * thread-local (the check runs once per tensor, on the opening thread). */
static _Thread_local const sweep *current;

static int by_start(const void *a, const void *b) {
    uint64_t x = current->chunks[*(const size_t *)a].offsets[current->axis];
    uint64_t y = current->chunks[*(const size_t *)b].offsets[current->axis];
    return x < y ? -1 : x > y;
}

static int by_value(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static bool boxes_meet(const ckpt__dcp_chunk *a, const ckpt__dcp_chunk *b, uint32_t ndim) {
    for (uint32_t d = 0; d < ndim; d++)
        if (a->offsets[d] >= b->offsets[d] + b->sizes[d] || b->offsets[d] >= a->offsets[d] + a->sizes[d]) return false;
    return true;
}

ckpt_status ckpt__dcp_check_tiling(const char *path, const char *tensor, uint32_t ndim, const uint64_t *shape,
                                   const ckpt__dcp_chunk *chunks, size_t count, ckpt_error *err) {
    char a[160], b[160], s[160];
    uint64_t numel;
    if (!ckpt__shape_numel(ndim, shape, &numel))
        return ckpt__fail(err, CKPT__D(SHAPE_OVERFLOW), path, tensor, -1,
                          "the size %s holds more than 2^63-1 elements in its nonzero axes",
                          ckpt__dcp_dims(s, sizeof s, shape, ndim));
    size_t *order = ckpt__malloc((count ? count : 1) * sizeof *order);
    if (!order) return ckpt__oom(err, path, tensor);
    size_t m = 0;
    uint64_t total = 0;
    bool total_overflows = false;
    for (size_t k = 0; k < count; k++) {
        const ckpt__dcp_chunk *c = &chunks[k];
        uint64_t volume = 1;
        for (uint32_t d = 0; d < ndim; d++) {
            uint64_t end;
            if (!ckpt__add_u64(c->offsets[d], c->sizes[d], &end) || end > shape[d]) {
                free(order);
                return ckpt__fail(err, CKPT__D(DCP_CHUNK_BOUNDS), path, tensor, -1,
                                  "chunk %zu (offsets %s, sizes %s, in %s) reaches past the end of axis %u, "
                                  "whose size is %llu (tensor size %s)",
                                  k, ckpt__dcp_dims(a, sizeof a, c->offsets, ndim),
                                  ckpt__dcp_dims(b, sizeof b, c->sizes, ndim), c->file, d,
                                  (unsigned long long)shape[d], ckpt__dcp_dims(s, sizeof s, shape, ndim));
            }
            volume *= c->sizes[d]; /* ≤ numel: every extent is within the shape */
        }
        if (!volume) continue;
        order[m++] = k;
        if (!ckpt__add_u64(total, volume, &total)) total_overflows = true;
    }
    /* Sweep along the axis with the most distinct chunk offsets: chunks
     * sorted by their start there; only those whose ranges meet on that
     * axis are compared. */
    uint32_t axis = 0;
    if (ndim > 1 && m > 1) {
        uint64_t *v = ckpt__malloc(m * sizeof *v);
        if (!v) {
            free(order);
            return ckpt__oom(err, path, tensor);
        }
        size_t best = 0;
        for (uint32_t d = 0; d < ndim; d++) {
            for (size_t i = 0; i < m; i++) v[i] = chunks[order[i]].offsets[d];
            qsort(v, m, sizeof *v, by_value);
            size_t distinct = 1;
            for (size_t i = 1; i < m; i++) distinct += v[i] != v[i - 1];
            if (distinct > best) best = distinct, axis = d;
        }
        free(v);
    }
    ckpt_status st = CKPT_OK;
    if (ndim == 0 && m > 1) {
        st = ckpt__fail(err, CKPT__D(DCP_CHUNK_OVERLAP), path, tensor, -1,
                        "chunks %zu (in %s) and %zu (in %s) both hold the scalar", order[0], chunks[order[0]].file,
                        order[1], chunks[order[1]].file);
    } else if (ndim > 0 && m > 1) {
        sweep sw = {chunks, axis};
        current = &sw;
        qsort(order, m, sizeof *order, by_start);
        current = NULL;
        for (size_t i = 0; i < m && st == CKPT_OK; i++) {
            const ckpt__dcp_chunk *x = &chunks[order[i]];
            uint64_t end = x->offsets[axis] + x->sizes[axis];
            for (size_t j = i + 1; j < m && chunks[order[j]].offsets[axis] < end; j++) {
                const ckpt__dcp_chunk *y = &chunks[order[j]];
                if (!boxes_meet(x, y, ndim)) continue;
                size_t p = order[i] < order[j] ? order[i] : order[j], q = order[i] ^ order[j] ^ p;
                char c[160], e[160];
                st = ckpt__fail(err, CKPT__D(DCP_CHUNK_OVERLAP), path, tensor, -1,
                                "chunks %zu (offsets %s, sizes %s, in %s) and %zu (offsets %s, sizes %s, in %s) "
                                "share elements",
                                p, ckpt__dcp_dims(a, sizeof a, chunks[p].offsets, ndim),
                                ckpt__dcp_dims(b, sizeof b, chunks[p].sizes, ndim), chunks[p].file, q,
                                ckpt__dcp_dims(c, sizeof c, chunks[q].offsets, ndim),
                                ckpt__dcp_dims(e, sizeof e, chunks[q].sizes, ndim), chunks[q].file);
                break;
            }
        }
    }
    free(order);
    if (st) return st;
    /* Inside the tensor and disjoint: they cover it exactly when their
     * volumes add up to it. */
    if (total_overflows || total != numel)
        return ckpt__fail(err, CKPT__D(DCP_CHUNK_HOLE), path, tensor, -1,
                          "its %zu chunks cover %llu of its %llu elements (size %s): %llu elements belong to no chunk",
                          count, (unsigned long long)total, (unsigned long long)numel,
                          ckpt__dcp_dims(s, sizeof s, shape, ndim), (unsigned long long)(numel - total));
    return CKPT_OK;
}
