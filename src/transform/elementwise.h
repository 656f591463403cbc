/*
 * elementwise.h — a rule applied to every element of a tensor on its way
 * from the source to the output (elementwise.c): the engine widens the
 * source's elements to float32, applies the rule, and casts the result to
 * the output's dtype.  Format-neutral: a format says which tensors get
 * which rule (llama.cpp's conversion of Gemma's norms: x + 1).
 */
#ifndef CKPT_TRANSFORM_ELEMENTWISE_H
#define CKPT_TRANSFORM_ELEMENTWISE_H

#include "../base/base.h"

/* x + add, computed in float32 and rounded to `hold` (F32, F16 or BF16):
 * the precision the rule's reference computes in (torch adds two float16
 * tensors in float and rounds the sum to float16). */
typedef struct ckpt__elementwise {
    double add;
    ckpt_dtype hold;
} ckpt__elementwise;

/* Whether a rule is one ckpt applies (its hold is a float dtype ckpt
 * rounds to, its constant finite). */
CKPT__HIDDEN bool ckpt__elementwise_valid(const ckpt__elementwise *rule);

/* Applies the rule to n float32 values in place. */
CKPT__HIDDEN void ckpt__elementwise_apply(const ckpt__elementwise *rule, float *x, size_t n);

#endif
