/* pairs.c — ordered string pairs, for __metadata__ maps. */
#include <stdlib.h>
#include <string.h>

#include "base.h"

bool ckpt__pairs_push(ckpt__pairs *p, const char *key, const char *value) {
    if (p->count == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;
        const char **k = ckpt__realloc(p->keys, cap * sizeof *k);
        if (!k) return false;
        p->keys = k;
        const char **v = ckpt__realloc(p->values, cap * sizeof *v);
        if (!v) return false;
        p->values = v;
        p->cap = cap;
    }
    p->keys[p->count] = key;
    p->values[p->count++] = value;
    return true;
}

const char *ckpt__pairs_get(const ckpt__pairs *p, const char *key) {
    for (size_t i = 0; i < p->count; i++)
        if (strcmp(p->keys[i], key) == 0) return p->values[i];
    return NULL;
}

void ckpt__pairs_free(ckpt__pairs *p) {
    free(p->keys);
    free(p->values);
    memset(p, 0, sizeof *p);
}
