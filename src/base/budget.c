/* budget.c — the bound on what an input's metadata may cost in memory
 * (see base.h): a small file must not make the library allocate without
 * limit (4 MB of msgpack nils, a million empty GGUF arrays). */
#include "base.h"

static uint64_t bound(const ckpt__budget *b) {
    uint64_t scaled;
    if (!ckpt__mul_u64(b->input, CKPT__BUDGET_FACTOR, &scaled) || !ckpt__add_u64(scaled, CKPT__BUDGET_BASE, &scaled))
        return UINT64_MAX;
    return scaled;
}

void ckpt__budget_add_input(ckpt__budget *b, uint64_t bytes) {
    if (b && !ckpt__add_u64(b->input, bytes, &b->input)) b->input = UINT64_MAX;
}

ckpt_status ckpt__budget_charge(ckpt__budget *b, uint64_t bytes, ckpt_error *err, const char *path, int64_t offset) {
    if (!b) return CKPT_OK;
    uint64_t used;
    if (!ckpt__add_u64(b->used, bytes, &used) || used > bound(b))
        return ckpt__fail(err, CKPT_E_LIMIT, path, NULL, offset,
                          "its metadata would take more than %llu MiB of memory (%d times the %llu bytes of input, "
                          "plus %llu MiB): refused as an amplification",
                          (unsigned long long)(bound(b) >> 20), CKPT__BUDGET_FACTOR, (unsigned long long)b->input,
                          (unsigned long long)(CKPT__BUDGET_BASE >> 20));
    b->used = used;
    return CKPT_OK;
}

void ckpt__budget_release(ckpt__budget *b, uint64_t bytes) {
    if (b) b->used = bytes < b->used ? b->used - bytes : 0;
}

ckpt_status ckpt__budget_charge_buf(ckpt__budget *b, const ckpt__buf *buf, size_t *charged, ckpt_error *err,
                                    const char *path, int64_t offset) {
    if (buf->cap <= *charged) return CKPT_OK;
    ckpt_status st = ckpt__budget_charge(b, buf->cap - *charged, err, path, offset);
    if (st == CKPT_OK) *charged = buf->cap;
    return st;
}
