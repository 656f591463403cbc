/* stack.c — explicit stacks, the frames of walks that must not recurse on
 * input depth (see base.h). */
#include <string.h>

#include "base.h"

void *ckpt__stack_push(ckpt__stack *s) {
    unsigned char *d = ckpt__grow(s->data, s->len, &s->cap, s->size, 16);
    if (!d) return NULL;
    s->data = d;
    unsigned char *frame = s->data + s->len++ * s->size;
    memset(frame, 0, s->size);
    return frame;
}

void ckpt__stack_free(ckpt__stack *s) {
    free(s->data);
    s->data = NULL;
    s->len = s->cap = 0;
}
