/* arena.c — bump allocation in blocks, freed all at once.  Catalogs keep
 * every name and shape here, so opening 30,000 tensors costs a handful of
 * allocations rather than 60,000. */
#include <stdlib.h>
#include <string.h>

#include "base.h"

struct ckpt__arena_block {
    ckpt__arena_block *next;
    max_align_t data[];
};

enum { ARENA_MIN_BLOCK = 64 * 1024 };

void *ckpt__arena_alloc(ckpt__arena *arena, size_t size) {
    size = (size + 7) & ~(size_t)7;
    if (size < ((size_t)-1) / 2 && arena->head && arena->cap - arena->used >= size) {
        void *p = (char *)arena->head->data + arena->used;
        arena->used += size;
        return p;
    }
    if (size > ((size_t)-1) / 2) return NULL;
    size_t cap = size > ARENA_MIN_BLOCK ? size : ARENA_MIN_BLOCK;
    ckpt__arena_block *b = ckpt__malloc(sizeof *b + cap);
    if (!b) return NULL;
    b->next = arena->head;
    arena->head = b;
    arena->cap = cap;
    arena->used = size;
    return b->data;
}

char *ckpt__arena_strndup(ckpt__arena *arena, const char *s, size_t len) {
    char *p = ckpt__arena_alloc(arena, len + 1);
    if (!p) return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

struct ckpt__arena_adopted {
    ckpt__arena_adopted *next;
    void *block;
};

bool ckpt__arena_adopt(ckpt__arena *arena, void *block) {
    ckpt__arena_adopted *a = ckpt__arena_alloc(arena, sizeof *a);
    if (!a) {
        free(block);
        return false;
    }
    *a = (ckpt__arena_adopted){arena->adopted, block};
    arena->adopted = a;
    return true;
}

void ckpt__arena_free(ckpt__arena *arena) {
    for (ckpt__arena_adopted *a = arena->adopted; a; a = a->next) free(a->block);
    arena->adopted = NULL;
    ckpt__arena_block *b = arena->head;
    while (b) {
        ckpt__arena_block *next = b->next;
        free(b);
        b = next;
    }
    arena->head = NULL;
    arena->used = arena->cap = 0;
}
