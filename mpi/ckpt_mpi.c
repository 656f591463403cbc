/* ckpt_mpi.c — libckpt_mpi: a ckpt_comm over MPI (see ckpt_mpi.h).
 *
 * It depends on MPI and on ckpt.h's types only — no libckpt symbol — so
 * that libckpt stays free of MPI and this library can be loaded at run
 * time.  Every operation is non-blocking and polled against a deadline,
 * with sleeps that grow to 1 ms, so that 32 ranks on 2 cores do not spin. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt_mpi.h"

typedef struct mpi_state {
    MPI_Comm comm;
    int rank, size;
    int broken;
    int initialised_mpi; /* ckpt_mpi_world called MPI_Init_thread */
    unsigned seq;        /* votes so far: their messages' tags */
} mpi_state;

enum { TAG_BASE = 7000, TAG_SPAN = 8000 };

static void set_error(ckpt_error *err, ckpt_status st, const char *fmt, ...) {
    if (!err) return;
    memset(err, 0, sizeof *err);
    err->status = st;
    err->detail = st == CKPT_E_TIMEOUT ? CKPT_D_PEER_TIMEOUT : CKPT_D_COMM; /* the only two it sets */
    err->offset = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

static ckpt_status mpi_failed(mpi_state *s, int rc, const char *call, ckpt_error *err) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", rc);
    else text[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    s->broken = 1;
    set_error(err, CKPT_E_PEER, "rank %d of %d: %s failed: %s", s->rank, s->size, call, text);
    return CKPT_E_PEER;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void pause_for(long ns) {
    struct timespec ts = {0, ns};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Polls `n` requests until all are done or the deadline passes; *done[i]
 * (may be NULL) says which completed. */
static ckpt_status wait_all(mpi_state *s, MPI_Request *req, int n, int *done, double deadline, const char *call,
                            ckpt_error *err) {
    long sleep_ns = 20000;
    for (;;) {
        int all = 1;
        for (int i = 0; i < n; i++) {
            if (req[i] == MPI_REQUEST_NULL) {
                if (done) done[i] = 1;
                continue;
            }
            int flag = 0;
            int rc = MPI_Test(&req[i], &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) return mpi_failed(s, rc, call, err);
            if (done) done[i] = flag;
            all &= flag;
        }
        if (all) return CKPT_OK;
        if (now() > deadline) return CKPT_E_TIMEOUT;
        pause_for(sleep_ns);
        if (sleep_ns < 1000000) sleep_ns *= 2;
    }
}

static ckpt_status usable(mpi_state *s, ckpt_error *err) {
    if (!s->broken) return CKPT_OK;
    set_error(err, CKPT_E_PEER, "rank %d of %d: an earlier MPI operation failed or timed out; end the job (MPI_Abort)",
              s->rank, s->size);
    return CKPT_E_PEER;
}

static ckpt_status timed_out(mpi_state *s, const char *call, uint32_t timeout_ms, ckpt_error *err) {
    s->broken = 1;
    set_error(err, CKPT_E_TIMEOUT, "rank %d of %d: %s did not complete within %.3g s (a rank died or hangs)", s->rank,
              s->size, call, timeout_ms / 1000.0);
    return CKPT_E_TIMEOUT;
}

static ckpt_status op_broadcast(void *user, void *data, uint64_t nbytes, int root, uint32_t timeout_ms, ckpt_error *err) {
    mpi_state *s = user;
    ckpt_status st = usable(s, err);
    if (st) return st;
    if (nbytes > INT_MAX) {
        set_error(err, CKPT_E_INVALID_ARGUMENT, "broadcast of %llu bytes: more than MPI counts", (unsigned long long)nbytes);
        return CKPT_E_INVALID_ARGUMENT;
    }
    double deadline = now() + timeout_ms / 1000.0;
    MPI_Request req;
    int rc = MPI_Ibcast(data, (int)nbytes, MPI_BYTE, root, s->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_failed(s, rc, "MPI_Ibcast", err);
    st = wait_all(s, &req, 1, NULL, deadline, "MPI_Ibcast", err);
    return st == CKPT_E_TIMEOUT ? timed_out(s, "a broadcast", timeout_ms, err) : st;
}

static ckpt_status op_allgather(void *user, void *data, uint64_t block, uint32_t timeout_ms, ckpt_error *err) {
    mpi_state *s = user;
    ckpt_status st = usable(s, err);
    if (st) return st;
    if (block > INT_MAX) {
        set_error(err, CKPT_E_INVALID_ARGUMENT, "allgather of %llu bytes: more than MPI counts", (unsigned long long)block);
        return CKPT_E_INVALID_ARGUMENT;
    }
    double deadline = now() + timeout_ms / 1000.0;
    MPI_Request req;
    int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, (int)block, MPI_BYTE, s->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_failed(s, rc, "MPI_Iallgather", err);
    st = wait_all(s, &req, 1, NULL, deadline, "MPI_Iallgather", err);
    return st == CKPT_E_TIMEOUT ? timed_out(s, "an allgather", timeout_ms, err) : st;
}

static ckpt_status op_barrier(void *user, uint32_t timeout_ms, ckpt_error *err) {
    mpi_state *s = user;
    ckpt_status st = usable(s, err);
    if (st) return st;
    double deadline = now() + timeout_ms / 1000.0;
    MPI_Request req;
    int rc = MPI_Ibarrier(s->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_failed(s, rc, "MPI_Ibarrier", err);
    st = wait_all(s, &req, 1, NULL, deadline, "MPI_Ibarrier", err);
    return st == CKPT_E_TIMEOUT ? timed_out(s, "a barrier", timeout_ms, err) : st;
}

/* Votes go to rank 0 as messages, so that rank 0 knows who did not vote;
 * rank 0 sends the outcome back. */
static ckpt_status op_agree(void *user, ckpt_vote *vote, uint32_t timeout_ms, ckpt_error *err) {
    mpi_state *s = user;
    ckpt_status st = usable(s, err);
    if (st) return st;
    double deadline = now() + timeout_ms / 1000.0;
    int tag = TAG_BASE + (int)(s->seq++ % TAG_SPAN) * 2;
    int rc;
    if (s->rank != 0) {
        /* Rank 0 may enter the vote up to one timeout after this rank, then
         * wait up to one timeout for the others before it answers: waiting
         * twice the timeout here lets its answer, naming the rank that did
         * not vote, arrive before this rank gives up on rank 0 itself. */
        deadline += timeout_ms / 1000.0;
        MPI_Request req[2];
        ckpt_vote out;
        if ((rc = MPI_Isend(vote, (int)sizeof *vote, MPI_BYTE, 0, tag, s->comm, &req[0])) != MPI_SUCCESS)
            return mpi_failed(s, rc, "MPI_Isend", err);
        if ((rc = MPI_Irecv(&out, (int)sizeof out, MPI_BYTE, 0, tag + 1, s->comm, &req[1])) != MPI_SUCCESS)
            return mpi_failed(s, rc, "MPI_Irecv", err);
        int done[2] = {0, 0};
        st = wait_all(s, req, 2, done, deadline, "a vote", err);
        if (st == CKPT_E_TIMEOUT) {
            s->broken = 1;
            vote->status = CKPT_E_TIMEOUT;
            vote->rank = 0;
            set_error(err, CKPT_E_TIMEOUT, "rank %d of %d: rank 0 did not answer the vote within %.3g s", s->rank, s->size,
                      2 * (timeout_ms / 1000.0));
            return CKPT_E_TIMEOUT;
        }
        if (st) return st;
        *vote = out;
        vote->message[sizeof vote->message - 1] = '\0';
        return CKPT_OK;
    }
    int n = s->size;
    ckpt_vote *votes = calloc((size_t)n, sizeof *votes);
    MPI_Request *req = malloc((size_t)n * sizeof *req);
    int *done = calloc((size_t)n, sizeof *done);
    if (!votes || !req || !done) {
        free(votes), free(req), free(done);
        s->broken = 1;
        set_error(err, CKPT_E_NO_MEMORY, "rank 0: out of memory for %d votes", n);
        return CKPT_E_NO_MEMORY;
    }
    votes[0] = *vote;
    req[0] = MPI_REQUEST_NULL;
    for (int r = 1; r < n; r++)
        if ((rc = MPI_Irecv(&votes[r], (int)sizeof *votes, MPI_BYTE, r, tag, s->comm, &req[r])) != MPI_SUCCESS) {
            free(votes), free(req), free(done);
            return mpi_failed(s, rc, "MPI_Irecv", err);
        }
    st = wait_all(s, req, n, done, deadline, "a vote", err);
    ckpt_vote out;
    memset(&out, 0, sizeof out);
    out.status = CKPT_OK;
    out.rank = -1;
    if (st == CKPT_E_TIMEOUT) {
        int missing = -1;
        for (int r = 1; r < n && missing < 0; r++)
            if (!done[r]) missing = r;
        for (int r = 1; r < n; r++)
            if (!done[r]) {
                MPI_Cancel(&req[r]);
                MPI_Request_free(&req[r]);
            }
        out.status = CKPT_E_TIMEOUT;
        out.rank = missing;
        snprintf(out.message, sizeof out.message, "rank %d did not vote within %.3g s", missing, timeout_ms / 1000.0);
    } else if (st) {
        free(votes), free(req), free(done);
        return st;
    } else {
        for (int r = 0; r < n; r++)
            if (votes[r].status != CKPT_OK) {
                out = votes[r];
                out.rank = r;
                out.message[sizeof out.message - 1] = '\0';
                break;
            }
    }
    /* The outcome to every other rank (one that did not vote may still come
     * for it); sends that do not complete in time are left to MPI. */
    for (int r = 1; r < n; r++)
        if ((rc = MPI_Isend(&out, (int)sizeof out, MPI_BYTE, r, tag + 1, s->comm, &req[r])) != MPI_SUCCESS) {
            free(votes), free(req), free(done);
            return mpi_failed(s, rc, "MPI_Isend", err);
        }
    ckpt_status sent = wait_all(s, req, n, done, out.status == CKPT_E_TIMEOUT ? now() + 1.0 : deadline, "a vote", err);
    if (sent == CKPT_E_TIMEOUT)
        for (int r = 1; r < n; r++)
            if (!done[r]) MPI_Request_free(&req[r]);
    free(votes), free(req), free(done);
    *vote = out;
    if (out.status == CKPT_E_TIMEOUT) {
        s->broken = 1;
        set_error(err, CKPT_E_TIMEOUT, "rank 0 of %d: %s", n, out.message);
        return CKPT_E_TIMEOUT;
    }
    return sent == CKPT_E_TIMEOUT ? timed_out(s, "sending a vote's outcome", timeout_ms, err) : sent;
}

ckpt_status ckpt_mpi_comm_create(MPI_Comm mpi_comm, ckpt_comm *comm, ckpt_error *err) {
    if (!comm) {
        set_error(err, CKPT_E_INVALID_ARGUMENT, "comm is required");
        return CKPT_E_INVALID_ARGUMENT;
    }
    memset(comm, 0, sizeof *comm);
    comm->size = sizeof *comm;
    comm->nranks = 1;
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
        set_error(err, CKPT_E_INVALID_ARGUMENT, "MPI is not initialised (call MPI_Init first)");
        return CKPT_E_INVALID_ARGUMENT;
    }
    mpi_state *s = calloc(1, sizeof *s);
    if (!s) {
        set_error(err, CKPT_E_NO_MEMORY, "out of memory");
        return CKPT_E_NO_MEMORY;
    }
    int rc = MPI_Comm_dup(mpi_comm, &s->comm);
    if (rc != MPI_SUCCESS) {
        ckpt_status st = mpi_failed(s, rc, "MPI_Comm_dup", err);
        free(s);
        return st;
    }
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(s->comm, &s->rank);
    MPI_Comm_size(s->comm, &s->size);
    comm->rank = s->rank;
    comm->nranks = s->size;
    comm->user = s;
    comm->broadcast = op_broadcast;
    comm->allgather = op_allgather;
    comm->barrier = op_barrier;
    comm->agree = op_agree;
    return CKPT_OK;
}

int ckpt_mpi_comm_broken(const ckpt_comm *comm) {
    const mpi_state *s = comm ? comm->user : NULL;
    return s && s->broken;
}

void ckpt_mpi_comm_free(ckpt_comm *comm) {
    if (!comm || !comm->user) return;
    mpi_state *s = comm->user;
    if (!s->broken) MPI_Comm_free(&s->comm);
    free(s);
    comm->user = NULL;
    comm->broadcast = NULL;
    comm->allgather = NULL;
    comm->barrier = NULL;
    comm->agree = NULL;
}

ckpt_status ckpt_mpi_world(ckpt_comm *comm, ckpt_error *err) {
    int initialised = 0, provided = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) {
            set_error(err, CKPT_E_PEER, "MPI_Init_thread failed (error %d)", rc);
            return CKPT_E_PEER;
        }
    }
    ckpt_status st = ckpt_mpi_comm_create(MPI_COMM_WORLD, comm, err);
    if (st == CKPT_OK) ((mpi_state *)comm->user)->initialised_mpi = !initialised;
    return st;
}

void ckpt_mpi_world_end(ckpt_comm *comm, int exit_code) {
    mpi_state *s = comm ? comm->user : NULL;
    int broken = s && s->broken, ours = s && s->initialised_mpi;
    ckpt_mpi_comm_free(comm);
    if (broken) MPI_Abort(MPI_COMM_WORLD, exit_code ? exit_code : 1);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (ours && !finalized) MPI_Finalize();
}
