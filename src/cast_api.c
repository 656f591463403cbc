/* cast_api.c — ckpt_cast and ckpt_can_cast over the transform kernels. */
#include "transform/cast.h"

int ckpt_can_cast(ckpt_dtype from, ckpt_dtype to) { return ckpt__cast_kernel(from, to) != NULL; }

ckpt_status ckpt_cast(ckpt_dtype from, const void *src, ckpt_dtype to, void *dst, uint64_t count, ckpt_error *err) {
    ckpt__cast_fn fn = ckpt__cast_kernel(from, to);
    if (!fn && (ckpt_dtype_is_block(from) || ckpt_dtype_is_block(to)))
        return ckpt__fail(err, CKPT__D(UNSUPPORTED_DTYPE), NULL, NULL, -1,
                          "ckpt does not convert %s to %s (it dequantizes Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K-Q6_K, "
                          "TQ1_0, TQ2_0 and MXFP4 to F32, F16 and BF16, and quantizes F32, F16, BF16 and F64 to "
                          "Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K)",
                          ckpt_dtype_name(from) ? ckpt_dtype_name(from) : "an invalid dtype",
                          ckpt_dtype_name(to) ? ckpt_dtype_name(to) : "an invalid dtype");
    if (!fn)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "ckpt does not cast %s to %s",
                          ckpt_dtype_name(from) ? ckpt_dtype_name(from) : "an invalid dtype",
                          ckpt_dtype_name(to) ? ckpt_dtype_name(to) : "an invalid dtype");
    if (count && (!src || !dst)) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "src and dst are required");
    if (count > SIZE_MAX / 8) return ckpt__fail(err, CKPT_E_LIMIT, NULL, NULL, -1, "too many elements");
    /* Block types convert whole blocks: the kernel counts blocks. */
    uint32_t block = ckpt_dtype_is_block(from) ? ckpt_dtype_block_elems(from) : ckpt_dtype_block_elems(to);
    if ((ckpt_dtype_is_block(from) || ckpt_dtype_is_block(to)) && count % block)
        return ckpt__fail(err, CKPT__D(GGUF_DIMS), NULL, NULL, -1, "%llu elements are not whole %s blocks of %u",
                          (unsigned long long)count, ckpt_dtype_name(ckpt_dtype_is_block(from) ? from : to), block);
    if (ckpt_dtype_is_block(from) || ckpt_dtype_is_block(to)) count /= block;
    fn(src, dst, (size_t)count);
    return CKPT_OK;
}
