/* comm.c — communicators (ckpt_comm): the "none" one from the environment,
 * and the collective steps every collective operation is made of —
 * chunked broadcasts, messages of any size with the sender's status,
 * gathers of variable size, and votes — each with a timeout, statistics,
 * and errors that name the rank at fault. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/wire.h"
#include "collective_internal.h"

enum { DEFAULT_TIMEOUT_MS = 30 * 60 * 1000 };

double ckpt__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ckpt_comm_init_sized(ckpt_comm *comm, size_t size) {
    if (!comm || size < sizeof comm->size) return;
    ckpt_comm d;
    memset(&d, 0, sizeof d);
    d.nranks = 1;
    memset(comm, 0, size);
    memcpy(comm, &d, size < sizeof d ? size : sizeof d);
    comm->size = size;
}

void ckpt_collective_options_init_sized(ckpt_collective_options *o, size_t size) {
    if (!o || size < sizeof o->size) return;
    ckpt_collective_options d;
    memset(&d, 0, sizeof d);
    d.replicated = CKPT_REPLICATED_BROADCAST;
    memset(o, 0, size);
    memcpy(o, &d, size < sizeof d ? size : sizeof d);
    o->size = size;
}

/* ---- "none" from the environment ------------------------------------------- */

static ckpt_status env_int(const char *name, int *value, bool *found, ckpt_error *err) {
    const char *s = getenv(name);
    *found = s && *s;
    if (!*found) return CKPT_OK;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > INT_MAX)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1,
                          "environment variable %s=\"%s\" is not a rank or a number of ranks", name, s);
    *value = (int)v;
    return CKPT_OK;
}

ckpt_status ckpt_comm_from_env(ckpt_comm *comm, int rank, int nranks, ckpt_error *err) {
    if (!comm) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "comm is required");
    ckpt_comm_init(comm);
    const char *source = "arguments";
    if (rank < 0) {
        static const char *const pairs[][2] = {{"RANK", "WORLD_SIZE"},
                                               {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                               {"PMI_RANK", "PMI_SIZE"},
                                               {"SLURM_PROCID", "SLURM_NTASKS"}};
        rank = 0, nranks = 1, source = NULL;
        for (size_t i = 0; i < sizeof pairs / sizeof pairs[0] && !source; i++) {
            int r = 0, n = 1;
            bool has_r, has_n;
            ckpt_status st = env_int(pairs[i][0], &r, &has_r, err);
            if (st == CKPT_OK) st = env_int(pairs[i][1], &n, &has_n, err);
            if (st) return st;
            if (!has_r && !has_n) continue;
            if (has_r != has_n)
                return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "%s is set without %s",
                                  has_r ? pairs[i][0] : pairs[i][1], has_r ? pairs[i][1] : pairs[i][0]);
            rank = r, nranks = n, source = pairs[i][0];
        }
        if (!source) source = "the default (no rank in the environment)";
    }
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "rank %d of %d ranks (from %s) is not a rank",
                          rank, nranks, source);
    comm->rank = rank;
    comm->nranks = nranks;
    return CKPT_OK;
}

/* ---- the wrapped communicator --------------------------------------------------- */

ckpt_status ckpt__coll_init(ckpt__coll *c, const ckpt_comm *comm, const ckpt_collective_options *options,
                            ckpt_collective_stats *stats, ckpt_error *err) {
    memset(c, 0, sizeof *c);
    c->stats = stats ? stats : &c->own_stats;
    memset(c->stats, 0, sizeof *c->stats);
    if (!comm) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "a communicator is required");
    if (comm->size && comm->size < offsetof(ckpt_comm, agree) + sizeof comm->agree)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "the communicator's size (%zu) is too small",
                          comm->size);
    if (comm->nranks < 1 || comm->rank < 0 || comm->rank >= comm->nranks)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "the communicator says rank %d of %d",
                          comm->rank, comm->nranks);
    bool any = comm->broadcast || comm->allgather || comm->barrier || comm->agree;
    bool all = comm->broadcast && comm->allgather && comm->barrier && comm->agree;
    if (any && !all)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1,
                          "a communicator needs all of broadcast, allgather, barrier and agree, or none of them");
    ckpt_collective_options o;
    ckpt_collective_options_init(&o);
    if (options) CKPT__TAKE_OPTIONS(&o, options);
    if (o.replicated != CKPT_REPLICATED_BROADCAST && o.replicated != CKPT_REPLICATED_READ)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "unknown replicated mode %d", (int)o.replicated);
    c->comm = comm;
    c->rank = comm->rank;
    c->n = comm->nranks;
    c->exchange = all;
    c->timeout_ms = o.timeout_ms ? o.timeout_ms : DEFAULT_TIMEOUT_MS;
    c->replicated = o.replicated;
    return CKPT_OK;
}

/* A communicator call failed: no more calls on it (it may hold unfinished
 * operations), and the error says which step. */
static ckpt_status call_failed(ckpt__coll *c, ckpt_status st, const char *what, ckpt_error *err) {
    c->broken = true;
    if (st == CKPT_OK) st = CKPT__D(COMM);
    if (err) {
        ckpt_error inner = *err;
        if (!inner.message[0]) snprintf(inner.message, sizeof inner.message, "%s", ckpt_status_message(st));
        ckpt__fail(err, ckpt__code_of(&inner, st), inner.path[0] ? inner.path : NULL, NULL, -1,
                   "rank %d of %d: %s: %s", c->rank, c->n, what, inner.message);
        err->sys_errno = inner.sys_errno;
    }
    return ckpt__category(st);
}

static ckpt_status usable(ckpt__coll *c, const char *what, ckpt_error *err) {
    if (c->broken)
        return ckpt__fail(err, CKPT__D(COMM), NULL, NULL, -1,
                          "rank %d: %s: an earlier call of the communicator failed; end the job", c->rank, what);
    if (!c->exchange && c->n > 1)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1,
                          "%s needs a communicator that exchanges bytes (MPI, torch.distributed): the \"none\" "
                          "communicator of %d ranks cannot",
                          what, c->n);
    return CKPT_OK;
}

ckpt_status ckpt__coll_bcast(ckpt__coll *c, void *data, uint64_t n, int root, const char *what, ckpt_error *err) {
    if (c->n == 1 || n == 0) return CKPT_OK;
    ckpt_status st = usable(c, what, err);
    if (st) return st;
    double t0 = ckpt__now();
    for (uint64_t at = 0; at < n && st == CKPT_OK; at += CKPT__COMM_CHUNK) {
        uint64_t k = n - at < CKPT__COMM_CHUNK ? n - at : CKPT__COMM_CHUNK;
        if (err) ckpt_error_clear(err);
        st = c->comm->broadcast(c->comm->user, (unsigned char *)data + at, k, root, c->timeout_ms, err);
        c->stats->collectives++;
    }
    c->stats->comm_seconds += ckpt__now() - t0;
    if (st) return call_failed(c, st, what, err);
    if (root == c->rank) c->stats->bytes_sent += n;
    else c->stats->bytes_received += n;
    return CKPT_OK;
}

/* The head of a message: its root's status, error and size. */
typedef struct message_head {
    unsigned char bytes[8 + 8 + 8 + sizeof(((ckpt_error *)0)->message) + sizeof(((ckpt_error *)0)->path) +
                        sizeof(((ckpt_error *)0)->tensor)];
} message_head;

static void head_put(message_head *h, ckpt_status st, const ckpt_error *e, uint64_t n) {
    memset(h, 0, sizeof *h);
    unsigned char *p = h->bytes;
    ckpt__store_le(p, (uint32_t)st | (uint64_t)(e && st != CKPT_OK ? (uint32_t)e->detail : 0) << 32, 8);
    ckpt__store_le(p + 8, n, 8);
    ckpt__store_le(p + 16, (uint64_t)(e ? e->offset : -1), 8);
    if (e && st != CKPT_OK) {
        size_t m = sizeof e->message, q = sizeof e->path;
        memcpy(p + 24, e->message, m);
        memcpy(p + 24 + m, e->path, q);
        memcpy(p + 24 + m + q, e->tensor, sizeof e->tensor);
    }
}

static ckpt_status head_get(const message_head *h, ckpt_error *e, uint64_t *n) {
    const unsigned char *p = h->bytes;
    uint64_t st = ckpt__le64(p), off = ckpt__le64(p + 16);
    *n = ckpt__le64(p + 8);
    memset(e, 0, sizeof *e);
    size_t m = sizeof e->message, q = sizeof e->path;
    memcpy(e->message, p + 24, m);
    memcpy(e->path, p + 24 + m, q);
    memcpy(e->tensor, p + 24 + m + q, sizeof e->tensor);
    e->message[m - 1] = e->path[q - 1] = e->tensor[sizeof e->tensor - 1] = '\0';
    e->offset = (int64_t)off;
    e->status = (ckpt_status)(uint32_t)st;
    e->detail = (ckpt_detail)(st >> 32);
    if ((uint32_t)st > INT32_MAX || !strcmp(ckpt_status_name(e->status), "CKPT_E_UNKNOWN_STATUS") ||
        ckpt_detail_status(e->detail) != (e->detail ? e->status : CKPT_OK)) {
        e->status = CKPT_E_PEER;
        e->detail = CKPT_D_COMM_DATA;
    }
    return e->status;
}

ckpt_status ckpt__coll_bcast_message(ckpt__coll *c, int root, ckpt_status status, const ckpt_error *root_err,
                                     void **data, uint64_t *n, uint64_t limit, const char *what, ckpt_error *err) {
    bool is_root = c->rank == root;
    message_head h;
    head_put(&h, is_root ? status : CKPT_OK, root_err, is_root && status == CKPT_OK ? *n : 0);
    ckpt_status st = ckpt__coll_bcast(c, &h, sizeof h, root, what, err);
    if (st) return st;
    if (is_root) {
        if (status != CKPT_OK) {
            if (err && root_err && err != root_err) *err = *root_err;
            return status;
        }
        return ckpt__coll_bcast(c, *data, *n, root, what, err);
    }
    ckpt_error remote;
    uint64_t size;
    ckpt_status rs = head_get(&h, &remote, &size);
    *data = NULL, *n = 0;
    if (rs != CKPT_OK)
        return ckpt__fail(err, CKPT__D(PEER_FAILED), remote.path[0] ? remote.path : NULL,
                          remote.tensor[0] ? remote.tensor : NULL, remote.offset, "rank %d failed (%s) at %s: %s",
                          root, ckpt_status_name(rs), what, remote.message);
    if (size > limit) {
        c->broken = true; /* the root sends the payload; this rank will not take it */
        return ckpt__fail(err, CKPT__D(COMM_DATA), NULL, NULL, -1, "rank %d: %s: rank %d sends %llu bytes, more than %llu",
                          c->rank, what, root, (unsigned long long)size, (unsigned long long)limit);
    }
    unsigned char *buf = ckpt__malloc(size ? (size_t)size : 1);
    if (!buf) {
        c->broken = true;
        return ckpt__oom(err, NULL, what);
    }
    if ((st = ckpt__coll_bcast(c, buf, size, root, what, err))) {
        free(buf);
        return st;
    }
    *data = buf, *n = size;
    return CKPT_OK;
}

ckpt_status ckpt__coll_allgatherv(ckpt__coll *c, const void *mine, uint64_t n, uint64_t limit, unsigned char **all,
                                  uint64_t **offsets, const char *what, ckpt_error *err) {
    *all = NULL, *offsets = NULL;
    ckpt_status st = c->n > 1 ? usable(c, what, err) : CKPT_OK;
    if (st) return st;
    size_t ranks = (size_t)c->n;
    uint64_t *off = ckpt__calloc(ranks + 1, sizeof *off), *sizes = ckpt__calloc(ranks, sizeof *sizes);
    unsigned char *block = NULL, *out = NULL;
    if (!off || !sizes) {
        free(off), free(sizes);
        c->broken = true;
        return ckpt__oom(err, NULL, what);
    }
    /* A rank that cannot send says so with UINT64_MAX, so that the others
     * fail now instead of waiting in the gather. */
    ckpt_status local = CKPT_OK;
    if (n > limit)
        local = ckpt__fail(err, CKPT_E_LIMIT, NULL, NULL, -1, "rank %d: %s: %llu bytes to send, more than %llu", c->rank,
                           what, (unsigned long long)n, (unsigned long long)limit);
    sizes[c->rank] = local ? UINT64_MAX : n;
    if (c->n > 1) {
        ckpt_error e2;
        ckpt_error *e = local ? &e2 : err;
        if (e) ckpt_error_clear(e);
        double t0 = ckpt__now();
        ckpt_status cs = c->comm->allgather(c->comm->user, sizes, sizeof *sizes, c->timeout_ms, e);
        c->stats->collectives++;
        c->stats->comm_seconds += ckpt__now() - t0;
        if (cs) st = local ? (c->broken = true, local) : call_failed(c, cs, what, err);
    }
    uint64_t max = 0, total = 0;
    for (size_t r = 0; st == CKPT_OK && r < ranks; r++) {
        uint64_t s = sizes[r];
        if (s == UINT64_MAX)
            st = local && (int)r == c->rank ? local
                                           : ckpt__fail(err, CKPT__D(PEER_FAILED), NULL, NULL, -1,
                                                        "rank %zu could not send its part of %s", r, what);
        else if (s > limit)
            st = ckpt__fail(err, CKPT__D(COMM_DATA), NULL, NULL, -1, "rank %d: %s: rank %zu sends %llu bytes, more than %llu",
                            c->rank, what, r, (unsigned long long)s, (unsigned long long)limit);
        if (st) break;
        off[r] = total;
        total += s; /* at most ranks × limit */
        if (s > max) max = s;
    }
    off[ranks] = total;
    /* Blocks of the largest size, in rounds of at most CKPT__COMM_CHUNK. */
    uint64_t round = max < CKPT__COMM_CHUNK / ranks ? max : CKPT__COMM_CHUNK / ranks;
    if (round == 0) round = 1;
    if (st == CKPT_OK && !(out = ckpt__malloc(total ? (size_t)total : 1))) st = ckpt__oom(err, NULL, what);
    if (st == CKPT_OK && c->n > 1 && max && !(block = ckpt__malloc((size_t)(round * ranks)))) st = ckpt__oom(err, NULL, what);
    if (st == CKPT_E_NO_MEMORY) c->broken = true; /* the others go on with the gather */
    for (uint64_t at = 0; st == CKPT_OK && c->n > 1 && at < max; at += round) {
        uint64_t k = max - at < round ? max - at : round, mine_k = at < n ? (n - at < k ? n - at : k) : 0;
        memset(block + (size_t)c->rank * k, 0, (size_t)k);
        if (mine_k) memcpy(block + (size_t)c->rank * k, (const unsigned char *)mine + at, (size_t)mine_k);
        if (err) ckpt_error_clear(err);
        double t0 = ckpt__now();
        ckpt_status cs = c->comm->allgather(c->comm->user, block, k, c->timeout_ms, err);
        c->stats->collectives++;
        c->stats->comm_seconds += ckpt__now() - t0;
        if (cs) {
            st = call_failed(c, cs, what, err);
            break;
        }
        for (size_t r = 0; r < ranks; r++) {
            if (at >= sizes[r]) continue;
            uint64_t take = sizes[r] - at < k ? sizes[r] - at : k;
            memcpy(out + off[r] + at, block + r * k, (size_t)take);
            if ((int)r != c->rank) c->stats->bytes_received += take;
        }
        c->stats->bytes_sent += mine_k;
    }
    if (st == CKPT_OK && c->n == 1 && n) memcpy(out, mine, (size_t)n);
    free(block);
    free(sizes);
    if (st) {
        free(out);
        free(off);
        return st;
    }
    *all = out, *offsets = off;
    return CKPT_OK;
}

/* Copies text, cut at a UTF-8 character boundary when it does not fit. */
static void copy_text(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) {
        n = cap - 1;
        while (n && ((unsigned char)src[n] & 0xC0) == 0x80) n--;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
}

ckpt_status ckpt__coll_agree(ckpt__coll *c, ckpt_status local, const ckpt_error *local_err, const char *what,
                             ckpt_error *err) {
    if (c->n == 1) {
        if (local && err && local_err && err != local_err) *err = *local_err;
        return local;
    }
    ckpt_status st = usable(c, what, err);
    if (st) return st;
    ckpt_vote vote;
    memset(&vote, 0, sizeof vote);
    vote.status = local;
    vote.rank = local ? c->rank : -1;
    if (local) copy_text(vote.message, sizeof vote.message,
                         local_err && local_err->message[0] ? local_err->message : ckpt_status_message(local));
    ckpt_error cerr;
    ckpt_error_clear(&cerr);
    double t0 = ckpt__now();
    ckpt_status cs = c->comm->agree(c->comm->user, &vote, c->timeout_ms, &cerr);
    c->stats->collectives++;
    c->stats->comm_seconds += ckpt__now() - t0;
    if (cs == CKPT_E_TIMEOUT) {
        c->broken = true;
        if (local) { /* this rank's own failure is the better reason */
            if (err && local_err && err != local_err) *err = *local_err;
            return local;
        }
        double s = c->timeout_ms / 1000.0;
        if (vote.rank >= 0 && vote.rank != c->rank)
            return ckpt__fail(err, CKPT__D(PEER_TIMEOUT), NULL, NULL, -1,
                              "rank %d did not reach %s within %.3g s (it died or hangs; seen from rank %d of %d)",
                              vote.rank, what, s, c->rank, c->n);
        return ckpt__fail(err, CKPT__D(PEER_TIMEOUT), NULL, NULL, -1, "rank %d of %d: %s: %s", c->rank, c->n, what,
                          cerr.message[0] ? cerr.message : "the vote timed out");
    }
    if (cs) {
        if (local) {
            c->broken = true;
            if (err && local_err && err != local_err) *err = *local_err;
            return local;
        }
        if (err) *err = cerr;
        return call_failed(c, cs, what, err);
    }
    if (vote.status == CKPT_OK) return CKPT_OK;
    if (local) {
        if (err && local_err && err != local_err) *err = *local_err;
        return local;
    }
    vote.message[sizeof vote.message - 1] = '\0';
    if (vote.status == CKPT_E_TIMEOUT && vote.rank >= 0)
        return ckpt__fail(err, CKPT__D(PEER_TIMEOUT), NULL, NULL, -1,
                          "rank %d did not reach %s within %.3g s (it died or hangs; seen from rank %d of %d)",
                          vote.rank, what, c->timeout_ms / 1000.0, c->rank, c->n);
    return ckpt__fail(err, CKPT__D(PEER_FAILED), NULL, NULL, -1, "rank %d failed (%s) at %s: %s", (int)vote.rank,
                      ckpt_status_name(vote.status), what, vote.message);
}
