/* cast_api.c — ckpt_cast and ckpt_can_cast over the transform kernels. */
#include "transform/cast.h"

int ckpt_can_cast(ckpt_dtype from, ckpt_dtype to) { return ckpt__cast_kernel(from, to) != NULL; }

ckpt_status ckpt_cast(ckpt_dtype from, const void *src, ckpt_dtype to, void *dst, uint64_t count, ckpt_error *err) {
    ckpt__cast_fn fn = ckpt__cast_kernel(from, to);
    if (!fn)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "ckpt does not cast %s to %s",
                          ckpt_dtype_name(from) ? ckpt_dtype_name(from) : "an invalid dtype",
                          ckpt_dtype_name(to) ? ckpt_dtype_name(to) : "an invalid dtype");
    if (count && (!src || !dst)) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "src and dst are required");
    if (count > SIZE_MAX / 8) return ckpt__fail(err, CKPT_E_LIMIT, NULL, NULL, -1, "too many elements");
    fn(src, dst, (size_t)count);
    return CKPT_OK;
}
