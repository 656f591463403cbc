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

/* Room for one more pair (and its value slot when the pairs have values). */
static bool reserve(ckpt__pairs *p) {
    if (p->count < p->cap) return true;
    size_t cap = p->cap ? p->cap * 2 : 8;
    const char **k = ckpt__realloc(p->keys, cap * sizeof *k);
    if (!k) return false;
    p->keys = k;
    const char **v = ckpt__realloc(p->values, cap * sizeof *v);
    if (!v) return false;
    p->values = v;
    if (p->typed) {
        const ckpt__encoded **t = ckpt__realloc(p->typed, cap * sizeof *t);
        if (!t) return false;
        p->typed = t;
    }
    p->cap = cap;
    return true;
}

static bool push(ckpt__pairs *p, const char *key, const char *value, const ckpt__encoded *typed) {
    if (typed && !p->typed && !(p->typed = ckpt__calloc(p->cap ? p->cap : 8, sizeof *p->typed))) return false;
    if (!reserve(p)) return false;
    p->keys[p->count] = key;
    p->values[p->count] = value;
    if (p->typed) p->typed[p->count] = typed;
    p->count++;
    if (index_last(p)) return true;
    p->count--;
    return false;
}

bool ckpt__pairs_push(ckpt__pairs *p, const char *key, const char *value) { return push(p, key, value, NULL); }

bool ckpt__pairs_push_value(ckpt__pairs *p, const char *key, const ckpt__encoded *value) {
    return push(p, key, NULL, value);
}

const char *ckpt__pairs_text(const ckpt__pairs *p, size_t i) {
    const char *text = __atomic_load_n(&p->values[i], __ATOMIC_ACQUIRE);
    if (text || !ckpt__pairs_value(p, i)) return text;
    char *mine = p->typed[i]->json(p->typed[i]);
    const char *expected = NULL;
    if (mine && !__atomic_compare_exchange_n((const char **)&p->values[i], &expected, mine, false, __ATOMIC_ACQ_REL,
                                             __ATOMIC_ACQUIRE)) {
        free(mine); /* another thread wrote it first */
        return expected;
    }
    return mine;
}

void ckpt__pairs_set(ckpt__pairs *p, size_t i, const char *value) {
    if (ckpt__pairs_value(p, i)) {
        free((char *)p->values[i]);
        p->typed[i] = NULL;
    }
    p->values[i] = value;
}

bool ckpt__pairs_set_value(ckpt__pairs *p, size_t i, const ckpt__encoded *value) {
    if (!p->typed && !(p->typed = ckpt__calloc(p->cap, sizeof *p->typed))) return false;
    ckpt__pairs_set(p, i, NULL);
    p->typed[i] = value;
    return true;
}

int64_t ckpt__pairs_find(const ckpt__pairs *p, const char *key) {
    if (p->index_cap) return ckpt__name_table_find(p->index, p->keys, sizeof *p->keys, key);
    for (size_t i = 0; i < p->count; i++)
        if (strcmp(p->keys[i], key) == 0) return (int64_t)i;
    return -1;
}

const char *ckpt__pairs_get(const ckpt__pairs *p, const char *key) {
    int64_t i = ckpt__pairs_find(p, key);
    return i < 0 ? NULL : ckpt__pairs_text(p, (size_t)i);
}

void ckpt__pairs_free(ckpt__pairs *p) {
    for (size_t i = 0; p->typed && i < p->count; i++)
        if (p->typed[i]) free((char *)p->values[i]); /* the texts written when asked */
    free(p->keys);
    free(p->values);
    free(p->typed);
    if (p->index) ckpt__name_table_free(p->index);
    free(p->index);
    memset(p, 0, sizeof *p);
}
