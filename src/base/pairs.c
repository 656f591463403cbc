/* pairs.c — ordered string pairs, for __metadata__ maps. */
#include <stdlib.h>
#include <string.h>

#include "base.h"

enum { INDEXED = 16 }; /* pairs beyond which keys are hashed */

/* Keeps the hash of the keys in step with a pair just pushed. */
static bool index_last(ckpt__pairs *p) {
    if (p->count <= INDEXED) return true;
    if (!p->index && !(p->index = ckpt__calloc(1, sizeof *p->index))) return false;
    if (p->count > p->index_cap) {
        size_t cap = p->index_cap ? 2 * p->index_cap : 2 * INDEXED;
        if (!(p->index_cap ? ckpt__name_table_grow(p->index, cap) : ckpt__name_table_init(p->index, cap))) return false;
        size_t from = p->index_cap ? p->count - 1 : 0; /* a new index takes every key */
        p->index_cap = cap;
        for (size_t i = from; i + 1 < p->count; i++) ckpt__name_table_insert(p->index, p->keys, sizeof *p->keys, (uint32_t)i, NULL);
    }
    /* a repeated key keeps its first pair, as a search in order would */
    ckpt__name_table_insert(p->index, p->keys, sizeof *p->keys, (uint32_t)(p->count - 1), NULL);
    return true;
}

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
    if (index_last(p)) return true;
    p->count--;
    return false;
}

const char *ckpt__pairs_get(const ckpt__pairs *p, const char *key) {
    if (p->index_cap) {
        int64_t i = ckpt__name_table_find(p->index, p->keys, sizeof *p->keys, key);
        return i < 0 ? NULL : p->values[i];
    }
    for (size_t i = 0; i < p->count; i++)
        if (strcmp(p->keys[i], key) == 0) return p->values[i];
    return NULL;
}

void ckpt__pairs_free(ckpt__pairs *p) {
    free(p->keys);
    free(p->values);
    if (p->index) ckpt__name_table_free(p->index);
    free(p->index);
    memset(p, 0, sizeof *p);
}
