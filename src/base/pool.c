/* pool.c — every thread the library starts (pool.h). */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

typedef struct slot {
    void (*work)(void *);
    void *item;
    atomic_size_t *done; /* NULL: a thread of its own (the slot is the thread's to free) */
    pthread_t thread;
    bool started;
} slot;

/* Reads only what was set before the thread started (its starter writes
 * `thread` and `started` meanwhile). */
static void *run_slot(void *arg) {
    slot *s = arg;
    void (*work)(void *) = s->work;
    void *item = s->item;
    atomic_size_t *done = s->done;
    if (!done) free(s);
    work(item);
    if (done) atomic_fetch_add(done, 1);
    return NULL;
}

size_t ckpt__pool_run(const ckpt__pool_batch *b) {
    size_t first = b->poll || !b->count ? 0 : 1, threads = first; /* without poll, item 0 is the caller's */
    atomic_size_t done;
    atomic_init(&done, 0);
    slot *s = ckpt__calloc(b->count ? b->count : 1, sizeof *s);
    for (size_t i = 0; s && i < b->count; i++) {
        s[i] = (slot){b->work, (char *)b->items + i * b->item_size, &done};
        if (i >= first) threads += s[i].started = pthread_create(&s[i].thread, NULL, run_slot, &s[i]) == 0;
    }
    for (size_t i = 0; i < b->count; i++) /* the caller's item, and any that no thread could take */
        if (!s || !s[i].started) {
            b->work((char *)b->items + i * b->item_size);
            atomic_fetch_add(&done, 1);
        }
    for (struct timespec nap = {0, 1000000}; b->poll && atomic_load(&done) < b->count; b->poll(b->poll_user))
        nanosleep(&nap, NULL);
    for (size_t i = first; s && i < b->count; i++)
        if (s[i].started) pthread_join(s[i].thread, NULL);
    free(s);
    return threads;
}

bool ckpt__pool_detach(void (*work)(void *), void *arg) {
    slot *s = ckpt__malloc(sizeof *s);
    pthread_attr_t attr;
    pthread_t thread;
    if (!s || pthread_attr_init(&attr) != 0) {
        free(s);
        return false;
    }
    *s = (slot){work, arg, NULL};
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    bool started = pthread_create(&thread, &attr, run_slot, s) == 0;
    pthread_attr_destroy(&attr);
    if (!started) free(s);
    return started;
}

struct ckpt__pool_thread {
    pthread_t thread;
};

ckpt__pool_thread *ckpt__pool_start(void (*work)(void *), void *arg) {
    ckpt__pool_thread *t = ckpt__malloc(sizeof *t);
    slot *s = ckpt__malloc(sizeof *s);
    if (!t || !s) {
        free(t);
        free(s);
        return NULL;
    }
    *s = (slot){work, arg, NULL};
    if (pthread_create(&t->thread, NULL, run_slot, s) != 0) {
        free(t);
        free(s);
        return NULL;
    }
    return t;
}

void ckpt__pool_join(ckpt__pool_thread *t) {
    if (!t) return;
    pthread_join(t->thread, NULL);
    free(t);
}
