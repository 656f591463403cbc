/* threadcomm.h — a ckpt_comm between threads of one process, for the unit
 * tests of the collective operations under the sanitizers: every rank is a
 * thread; a step completes when every rank has arrived, or fails with
 * CKPT_E_TIMEOUT (detail CKPT_D_PEER_TIMEOUT) naming the first rank that did not. */
#ifndef CKPT_TEST_THREADCOMM_H
#define CKPT_TEST_THREADCOMM_H

#include "ckpt_collective.h"

#define THREADCOMM_MAX 8

typedef struct threadcomm threadcomm;

/* A group of n ranks; comms[r] is rank r's communicator. */
threadcomm *threadcomm_create(int n, ckpt_comm comms[THREADCOMM_MAX]);
void threadcomm_free(threadcomm *t);

/* Runs fn(rank, user) on n threads at once and waits for all. */
void threadcomm_run(int n, void (*fn)(int rank, void *user), void *user);

#endif
