/*
 * pool.h — every thread the library starts: a batch of workers the caller's
 * thread joins (the engine's, a load's prefault), work in the background
 * that nobody waits for (a view's prefetch), or one thread joined later
 * (a Hub file's download while reads wait for its bytes).  A batch's threads end with it:
 * none outlives the call that needed it, or sits idle across a fork.
 * Depends on base only.
 */
#ifndef CKPT_BASE_POOL_H
#define CKPT_BASE_POOL_H

#include "base.h"

typedef struct ckpt__pool_batch {
    void (*work)(void *item);
    void *items; /* `count` items of `item_size` bytes, each given to work */
    size_t item_size, count;
    /* NULL: the caller's thread runs item 0, threads the others.  Else
     * threads run them all while the caller's thread calls poll(poll_user)
     * every millisecond. */
    void (*poll)(void *user);
    void *poll_user;
} ckpt__pool_batch;

/* Runs every item, returning when all are done (an item no thread could be
 * started for runs on the caller's thread); returns how many threads ran
 * items, the caller's included. */
CKPT__HIDDEN size_t ckpt__pool_run(const ckpt__pool_batch *batch);

/* work(arg) on a thread nobody joins; false when none could be started. */
CKPT__HIDDEN bool ckpt__pool_detach(void (*work)(void *), void *arg);

/* work(arg) on a thread of its own that outlives the call (a Hub file's
 * download, which reads wait on: io/hf_stream.c), joined — gone, its
 * thread-local state released — by ckpt__pool_join, once, before the
 * caller's work is done; NULL when none could be started. */
typedef struct ckpt__pool_thread ckpt__pool_thread;
CKPT__HIDDEN ckpt__pool_thread *ckpt__pool_start(void (*work)(void *), void *arg);
CKPT__HIDDEN void ckpt__pool_join(ckpt__pool_thread *t);

#endif
