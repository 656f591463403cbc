/* name_table.c — open-addressing hash from names to array indexes.  The
 * table stores only indexes; names stay in the caller's array. */
#include <stdlib.h>
#include <string.h>

#include "base.h"

uint64_t ckpt__hash_str(const char *s) {
    /* Eight bytes a step until the terminating NUL's word, then mixed. */
    uint64_t h = 0x9E3779B97F4A7C15ULL;
    size_t n = strlen(s);
    for (; n >= 8; n -= 8, s += 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    uint64_t tail = 0;
    memcpy(&tail, s, n);
    h = (h ^ tail ^ n) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

static const char *name_at(const char *const *names, size_t stride, uint32_t i) {
    return *(const char *const *)((const char *)names + (size_t)i * stride);
}

bool ckpt__name_table_init(ckpt__name_table *table, size_t count) {
    size_t cap = 16;
    while (cap < count * 2) cap <<= 1;
    table->slots = ckpt__calloc(cap, sizeof *table->slots);
    table->mask = cap - 1;
    return table->slots != NULL;
}

void ckpt__name_table_free(ckpt__name_table *table) {
    free(table->slots);
    table->slots = NULL;
}

/* The 32 hash bits a slot keeps: the high ones (the low ones pick the slot). */
static uint64_t tag_of(uint64_t h) { return h & 0xFFFFFFFF00000000ULL; }

bool ckpt__name_table_grow(ckpt__name_table *table, size_t count) {
    ckpt__name_table t;
    if (!ckpt__name_table_init(&t, count)) return false;
    /* Slots keep only the high hash bits: place each by them, consistently
     * with insert and find, which start at the same bits. */
    for (size_t i = 0; table->slots && i <= table->mask; i++) {
        uint64_t s = table->slots[i];
        if (!s) continue;
        size_t j = (size_t)(s >> 32) & t.mask;
        while (t.slots[j]) j = (j + 1) & t.mask;
        t.slots[j] = s;
    }
    free(table->slots);
    *table = t;
    return true;
}

bool ckpt__name_table_insert(ckpt__name_table *table, const char *const *names, size_t stride,
                             uint32_t index, uint32_t *existing) {
    const char *name = name_at(names, stride, index);
    uint64_t tag = tag_of(ckpt__hash_str(name));
    for (size_t i = (size_t)(tag >> 32) & table->mask;; i = (i + 1) & table->mask) {
        uint64_t s = table->slots[i];
        if (s == 0) {
            table->slots[i] = tag | ((uint64_t)index + 1);
            return true;
        }
        if (tag_of(s) == tag && strcmp(name_at(names, stride, (uint32_t)s - 1), name) == 0) {
            if (existing) *existing = (uint32_t)s - 1;
            return false;
        }
    }
}

int64_t ckpt__name_table_find(const ckpt__name_table *table, const char *const *names, size_t stride,
                              const char *name) {
    if (!table->slots) return -1;
    uint64_t tag = tag_of(ckpt__hash_str(name));
    for (size_t i = (size_t)(tag >> 32) & table->mask;; i = (i + 1) & table->mask) {
        uint64_t s = table->slots[i];
        if (s == 0) return -1;
        if (tag_of(s) == tag && strcmp(name_at(names, stride, (uint32_t)s - 1), name) == 0) return (uint32_t)s - 1;
    }
}
