/* threadcomm.c — see threadcomm.h. */
#include "threadcomm.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum op { OP_BCAST, OP_ALLGATHER, OP_BARRIER, OP_AGREE } op;

struct threadcomm {
    int n;
    pthread_mutex_t m;
    pthread_cond_t cv;
    uint64_t gen;
    int arrived;
    int present[THREADCOMM_MAX];
    void *buf[THREADCOMM_MAX];
    ckpt_vote *votes[THREADCOMM_MAX];
    uint64_t nbytes;
    int root;
    op what;
    struct rank_user {
        struct threadcomm *t;
        int rank;
    } users[THREADCOMM_MAX];
};

static void complete(threadcomm *t) {
    switch (t->what) {
    case OP_BCAST:
        for (int r = 0; r < t->n; r++)
            if (r != t->root) memcpy(t->buf[r], t->buf[t->root], t->nbytes);
        break;
    case OP_ALLGATHER:
        for (int r = 0; r < t->n; r++)
            for (int s = 0; s < t->n; s++)
                if (r != s) memcpy((char *)t->buf[r] + (size_t)s * t->nbytes, (char *)t->buf[s] + (size_t)s * t->nbytes, t->nbytes);
        break;
    case OP_BARRIER:
        break;
    case OP_AGREE: {
        ckpt_vote out;
        memset(&out, 0, sizeof out);
        out.rank = -1;
        for (int r = 0; r < t->n; r++)
            if (t->votes[r]->status != CKPT_OK) {
                out = *t->votes[r];
                out.rank = r;
                break;
            }
        for (int r = 0; r < t->n; r++) *t->votes[r] = out;
        break;
    }
    }
}

static ckpt_status step(void *user, op what, void *data, uint64_t nbytes, int root, ckpt_vote *vote, uint32_t timeout_ms,
                        ckpt_error *err) {
    struct rank_user *u = user;
    threadcomm *t = u->t;
    pthread_mutex_lock(&t->m);
    uint64_t gen = t->gen;
    if (t->arrived == 0) t->what = what, t->nbytes = nbytes, t->root = root;
    if (t->what != what || t->nbytes != nbytes || t->root != root) {
        pthread_mutex_unlock(&t->m);
        if (err) {
            err->status = CKPT_E_PEER;
            err->detail = CKPT_D_COMM;
            snprintf(err->message, sizeof err->message, "threadcomm: rank %d called a different step", u->rank);
        }
        return CKPT_E_PEER;
    }
    t->buf[u->rank] = data;
    t->votes[u->rank] = vote;
    t->present[u->rank] = 1;
    if (++t->arrived == t->n) {
        complete(t);
        t->arrived = 0;
        memset(t->present, 0, sizeof t->present);
        t->gen++;
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->m);
        return CKPT_OK;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
    int rc = 0;
    while (t->gen == gen && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&t->cv, &t->m, &deadline);
    if (t->gen == gen) {
        int missing = -1;
        for (int r = 0; r < t->n && missing < 0; r++)
            if (!t->present[r]) missing = r;
        pthread_mutex_unlock(&t->m);
        if (vote) vote->rank = missing;
        if (err) {
            err->status = CKPT_E_TIMEOUT;
            err->detail = CKPT_D_PEER_TIMEOUT;
            snprintf(err->message, sizeof err->message, "threadcomm: rank %d did not arrive", missing);
        }
        return CKPT_E_TIMEOUT;
    }
    pthread_mutex_unlock(&t->m);
    return CKPT_OK;
}

static ckpt_status tc_bcast(void *user, void *data, uint64_t nbytes, int root, uint32_t timeout_ms, ckpt_error *err) {
    return step(user, OP_BCAST, data, nbytes, root, NULL, timeout_ms, err);
}
static ckpt_status tc_allgather(void *user, void *data, uint64_t block, uint32_t timeout_ms, ckpt_error *err) {
    return step(user, OP_ALLGATHER, data, block, 0, NULL, timeout_ms, err);
}
static ckpt_status tc_barrier(void *user, uint32_t timeout_ms, ckpt_error *err) {
    return step(user, OP_BARRIER, NULL, 0, 0, NULL, timeout_ms, err);
}
static ckpt_status tc_agree(void *user, ckpt_vote *vote, uint32_t timeout_ms, ckpt_error *err) {
    return step(user, OP_AGREE, NULL, 0, 0, vote, timeout_ms, err);
}

threadcomm *threadcomm_create(int n, ckpt_comm comms[THREADCOMM_MAX]) {
    threadcomm *t = calloc(1, sizeof *t);
    t->n = n;
    pthread_mutex_init(&t->m, NULL);
    pthread_cond_init(&t->cv, NULL);
    for (int r = 0; r < n; r++) {
        t->users[r] = (struct rank_user){t, r};
        ckpt_comm_init(&comms[r]);
        comms[r].rank = r;
        comms[r].nranks = n;
        comms[r].user = &t->users[r];
        comms[r].broadcast = tc_bcast;
        comms[r].allgather = tc_allgather;
        comms[r].barrier = tc_barrier;
        comms[r].agree = tc_agree;
    }
    return t;
}

void threadcomm_free(threadcomm *t) {
    if (!t) return;
    pthread_mutex_destroy(&t->m);
    pthread_cond_destroy(&t->cv);
    free(t);
}

struct run_arg {
    void (*fn)(int, void *);
    void *user;
    int rank;
};

static void *run_one(void *p) {
    struct run_arg *a = p;
    a->fn(a->rank, a->user);
    return NULL;
}

void threadcomm_run(int n, void (*fn)(int rank, void *user), void *user) {
    pthread_t th[THREADCOMM_MAX];
    struct run_arg args[THREADCOMM_MAX];
    for (int r = 0; r < n; r++) {
        args[r] = (struct run_arg){fn, user, r};
        pthread_create(&th[r], NULL, run_one, &args[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
}
