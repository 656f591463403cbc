/* elementwise.c — the rules of elementwise.h, on float32 values. */
#include "elementwise.h"

#include <math.h>

bool ckpt__elementwise_valid(const ckpt__elementwise *rule) {
    return rule && isfinite(rule->add) && (rule->hold == CKPT_F32 || rule->hold == CKPT_F16 || rule->hold == CKPT_BF16);
}

void ckpt__elementwise_apply(const ckpt__elementwise *rule, float *x, size_t n) {
    float add = (float)rule->add;
    switch (rule->hold) {
    case CKPT_F16:
        for (size_t i = 0; i < n; i++) x[i] = ckpt__f16_to_f32(ckpt__f32_to_f16(x[i] + add));
        break;
    case CKPT_BF16:
        for (size_t i = 0; i < n; i++) x[i] = ckpt__bf16_to_f32(ckpt__f32_to_bf16(x[i] + add));
        break;
    default:
        for (size_t i = 0; i < n; i++) x[i] += add;
        break;
    }
}
