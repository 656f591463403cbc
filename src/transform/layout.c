/* layout.c — see layout.h. */
#include "layout.h"

#include <string.h>

void ckpt__runs_plan(ckpt__runs *r, uint32_t n, const uint64_t *piece_count, const int64_t *strides,
                     const uint64_t *box, const int64_t *dst_stride, bool direct) {
    int64_t dense[CKPT_MAX_DIMS];
    if (!strides) {
        int64_t s = 1;
        for (uint32_t a = n; a-- > 0;) dense[a] = s, s *= (int64_t)piece_count[a];
        strides = dense;
    }
    /* Physical order: strides descending (a stable insertion sort keeps a
     * dense piece in its own order). */
    r->n = n;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t a = k, j = k;
        while (j > 0 && strides[r->axis[j - 1]] < strides[a]) r->axis[j] = r->axis[j - 1], j--;
        r->axis[j] = a;
    }
    uint64_t pc[CKPT_MAX_DIMS];
    r->units = 1;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t a = r->axis[k];
        r->count[k] = box[a];
        r->stride[k] = strides[a];
        r->dst[k] = dst_stride ? dst_stride[a] : 0;
        pc[k] = piece_count[a];
        r->units *= box[a];
    }
    if (n == 0) {
        r->outer = 0, r->run_units = 1, r->runs = 1, r->direct_ok = true;
        return;
    }
    /* Merge inner axes while they are whole in the box and contiguous in
     * the file; a view whose innermost stride is not 1 has one-element
     * runs. */
    uint32_t inner = n; /* physical axes [inner, n) form a run */
    if (r->stride[n - 1] == 1) {
        inner = n - 1;
        while (inner > 0 && r->count[inner] == pc[inner] && r->stride[inner - 1] == (int64_t)pc[inner] * r->stride[inner])
            inner--;
    }
    r->direct_ok = true;
    if (direct && inner < n) {
        /* Runs read straight into the destination must land contiguous
         * there: keep the inner axes that do (the innermost at least). */
        if (r->dst[n - 1] != 1) {
            r->direct_ok = false;
        } else {
            uint32_t file_inner = inner;
            inner = n - 1;
            while (inner > file_inner && r->dst[inner - 1] == (int64_t)r->count[inner] * r->dst[inner]) inner--;
        }
    } else if (inner < n) {
        r->direct_ok = r->dst[n - 1] == 1;
        for (uint32_t k = n - 1; r->direct_ok && k > inner; k--)
            r->direct_ok = r->dst[k - 1] == (int64_t)r->count[k] * r->dst[k];
    }
    r->outer = inner;
    r->run_units = 1;
    for (uint32_t k = inner; k < n; k++) r->run_units *= r->count[k];
    r->runs = 1;
    for (uint32_t k = 0; k < inner; k++) r->runs *= r->count[k];
    if (r->units == 0) r->runs = 0;
}

void ckpt__runs_next(const ckpt__runs *r, uint64_t i, uint64_t *idx, int64_t *file_elem, int64_t *dst_unit) {
    if (i == 0) return;
    for (uint32_t k = r->outer; k-- > 0;) { /* the odometer over the outer axes */
        *file_elem += r->stride[k];
        *dst_unit += r->dst[k];
        if (++idx[k] < r->count[k]) return;
        *file_elem -= (int64_t)idx[k] * r->stride[k];
        *dst_unit -= (int64_t)idx[k] * r->dst[k];
        idx[k] = 0;
    }
}

void ckpt__scatter(ckpt__cast_fn fn, unsigned in_size, unsigned out_size, const unsigned char *src, uint32_t n,
                   const uint64_t *count, unsigned char *dst, const int64_t *dst_stride) {
    if (n == 0) {
        fn(src, dst, 1);
        return;
    }
    for (uint32_t d = 0; d < n; d++)
        if (count[d] == 0) return;
    uint64_t row = count[n - 1], idx[CKPT_MAX_DIMS] = {0};
    int64_t inner = dst_stride[n - 1];
    for (;;) {
        if (inner == 1) fn(src, dst, (size_t)row);
        else ckpt__cast_strided(fn, in_size, out_size, src, dst, (size_t)row, inner);
        src += row * in_size;
        uint32_t d = n - 1;
        for (;;) { /* odometer over the outer axes */
            if (d == 0) return;
            d--;
            dst += dst_stride[d] * (int64_t)out_size;
            if (++idx[d] < count[d]) break;
            dst -= (int64_t)idx[d] * dst_stride[d] * (int64_t)out_size;
            idx[d] = 0;
        }
    }
}
