/*
 * hf_stream.c — a file of the Hub read while it downloads (hf.h): the
 * download into the Hub's cache (ckpt__hf_cache_fill) runs on a thread of
 * its own, and a read registers what it wants and waits; the download,
 * as each run of bytes arrives (written to the partial blob and hashed
 * first), copies the part of it that each waiting read wants straight
 * into that read's destination.  One pass from the network into the
 * model: nothing is read back from disk, and nothing is held in memory
 * but the reads' own destinations.
 *
 * The download is paced by the reads: once no read waits for bytes, it
 * holds the run of bytes it has (the socket's buffer and then TCP hold
 * the rest) until a read asks for more, so that the engine's reads, which
 * come one after another, get every byte from the download and none back
 * from disk, however the threads are scheduled.  A run held is served
 * from memory to the next read.  No read asking for PACE_WAIT_MS (a load
 * that wants only part of the file, or that reads another file
 * meanwhile), and once the outcome is asked for (ckpt__hf_stream_wait),
 * the download runs free to its end: a connection is never left idle
 * long enough for a server to drop it.
 *
 * A read that asks for bytes that already went by reads them from the
 * partial blob (written, so in the page cache), and after the download
 * from the blob; a resumed download's first bytes are in the partial blob
 * too.  The bytes a read gets are not yet checked: the SHA-256 covers the
 * whole file and is known at its last byte.  ckpt__hf_stream_wait gives
 * the verdict, which the engine asks for at the end of every run and the
 * catalog at the end of an open (ckpt__source_settle), so that no load and
 * no open succeeds on bytes that fail the check; the cache entry appears
 * under its name only once they passed it (hf_cache.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../base/pool.h"
#include "hf.h"

/* A read waiting for bytes of the download: [from, end) of the file go to
 * dst + (from - off) as they arrive. */
typedef struct waiter {
    struct waiter *next;
    unsigned char *dst;
    uint64_t off, from, end; /* [off, from) had arrived when the read came; [from, end) comes to it */
    uint64_t back;           /* [off, back) is read back from the partial blob; [back, from) came from the held run */
    bool full;               /* every byte up to `end` is in */
} waiter;

struct ckpt__hf_stream {
    pthread_mutex_t lock;
    pthread_cond_t moved; /* bytes arrived, the download started again, or ended */
    pthread_cond_t asked; /* a read wants bytes, or the download is to run free or stop */
    ckpt__hf_entry entry; /* its strings owned */
    ckpt__source *remote; /* the caller's, which outlives the stream */
    char sha256[65];      /* "" when none is stated */
    uint64_t size;
    int part;             /* the partial blob (a descriptor of our own), -1 before it is opened */
    uint64_t arrived;     /* bytes [0, arrived) are in the partial blob */
    unsigned round;       /* bumped when `arrived` goes back or jumps: registered reads start again */
    waiter *waiters;
    const unsigned char *held; /* while the download waits for a read to ask: its last run, */
    uint64_t held_off;         /* bytes [held_off, arrived) */
    bool free_run;             /* no more pacing: the outcome was asked for, or no read came in time */
    /* A read returned bytes of the download under way; and then the
     * download started over from byte 0 (a server that answers a resume
     * whole): the SHA-256 covers only the bytes sent again, so what those
     * reads got was never checked, and the verdict fails. */
    bool served, unchecked;
    ckpt__pool_thread *thread; /* the download's, until joined */
    bool stop, ended;
    ckpt_status status;   /* the download's, once ended */
    ckpt_error err;
    int blob;             /* once ended well: the blob */
};

/* ---- the download's side ----------------------------------------------------------- */

/* How long the download waits for a read to ask for more before it runs
 * free: far longer than the engine takes between two reads, far shorter
 * than a server's idle timeout. */
enum { PACE_WAIT_MS = 2000 };

static bool someone_waits(const ckpt__hf_stream *s) {
    for (const waiter *w = s->waiters; w; w = w->next)
        if (!w->full) return true;
    return false;
}

/* Under the lock: while no read waits for bytes to come, the download
 * holds its last run [offset, offset + n) (served from memory to the
 * reads that come meanwhile) and waits for one to ask, up to PACE_WAIT_MS. */
static void pace(ckpt__hf_stream *s, const void *data, size_t n, uint64_t offset) {
    if (s->free_run || s->stop || n == 0 || someone_waits(s)) return;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += PACE_WAIT_MS / 1000;
    until.tv_nsec += (long)(PACE_WAIT_MS % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    s->held = data;
    s->held_off = offset;
    while (!s->free_run && !s->stop && !someone_waits(s))
        if (pthread_cond_timedwait(&s->asked, &s->lock, &until) == ETIMEDOUT) {
            s->free_run = true;
            break;
        }
    s->held = NULL;
}

static void on_begin(void *ctx, int fd, uint64_t from) {
    ckpt__hf_stream *s = ctx;
    pthread_mutex_lock(&s->lock);
    if (s->part < 0) s->part = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    s->arrived = from; /* a resumed download: reads registered before now read these bytes from the file */
    s->round++;
    pthread_cond_broadcast(&s->moved);
    pthread_mutex_unlock(&s->lock);
}

static bool on_bytes(void *ctx, const void *data, size_t n, uint64_t offset) {
    ckpt__hf_stream *s = ctx;
    uint64_t end = offset + n;
    bool woke = false;
    pthread_mutex_lock(&s->lock);
    if (s->stop) {
        pthread_mutex_unlock(&s->lock);
        errno = ECANCELED;
        return false;
    }
    if (offset != s->arrived) { /* sent again from byte 0: every waiting read starts again */
        if (s->served) s->unchecked = true;
        s->round++;
        woke = true;
    }
    for (waiter *w = s->waiters; w; w = w->next) {
        uint64_t a = offset > w->from ? offset : w->from, z = end < w->end ? end : w->end;
        if (a < z) memcpy(w->dst + (a - w->off), (const unsigned char *)data + (a - offset), (size_t)(z - a));
        if (!w->full && end >= w->end) w->full = woke = true;
    }
    s->arrived = end;
    if (woke) pthread_cond_broadcast(&s->moved);
    pace(s, data, n, offset);
    pthread_mutex_unlock(&s->lock);
    return true;
}

static void pump(void *arg) {
    ckpt__hf_stream *s = arg;
    ckpt__hf_tee tee = {on_begin, on_bytes, s};
    ckpt_error err;
    ckpt_error_clear(&err);
    int fd = -1;
    ckpt_status st = ckpt__hf_cache_fill(&s->entry, s->remote, s->sha256[0] ? s->sha256 : NULL, &tee, &fd, &err);
    pthread_mutex_lock(&s->lock);
    if (st == CKPT_OK && s->unchecked) { /* the blob is right (and kept); what the reads got may not be */
        close(fd);
        fd = -1;
        st = ckpt__fail(&err, CKPT__D(CHECKSUM), s->entry.shown, NULL, -1,
                        "the server sent the file again from its first byte after bytes of its first answer "
                        "had been read: those bytes are not the ones whose SHA-256 was checked (the checked "
                        "copy is now in the Hub's cache: read it again)");
    }
    s->status = st;
    s->err = err;
    s->blob = fd;
    if (st == CKPT_OK) s->arrived = s->size;
    s->ended = true;
    pthread_cond_broadcast(&s->moved);
    pthread_mutex_unlock(&s->lock); /* the stream may be freed from here on (once this thread is joined) */
}

/* ---- starting and ending ----------------------------------------------------------- */

static void entry_free(ckpt__hf_entry *e) {
    free((char *)e->cache);
    free((char *)e->repo);
    free((char *)e->commit);
    free((char *)e->path);
    free((char *)e->ref);
    free((char *)e->shown);
}

static bool entry_copy(ckpt__hf_entry *to, const ckpt__hf_entry *e) {
    memset(to, 0, sizeof *to);
    to->cache = ckpt__strdup(e->cache);
    to->repo = ckpt__strdup(e->repo);
    to->commit = ckpt__strdup(e->commit);
    to->path = ckpt__strdup(e->path);
    to->ref = e->ref ? ckpt__strdup(e->ref) : NULL;
    to->shown = ckpt__strdup(e->shown);
    return to->cache && to->repo && to->commit && to->path && (to->ref || !e->ref) && to->shown;
}

/* The download's thread, gone (its thread-local state too, before a
 * caller may exit), once it ended.  Under the lock, which it may release
 * meanwhile. */
static void join(ckpt__hf_stream *s) {
    ckpt__pool_thread *t = s->thread;
    s->thread = NULL;
    if (!t) return;
    pthread_mutex_unlock(&s->lock);
    ckpt__pool_join(t);
    pthread_mutex_lock(&s->lock);
}

static void stream_free(ckpt__hf_stream *s) {
    if (s->part >= 0) close(s->part);
    if (s->blob >= 0) close(s->blob);
    entry_free(&s->entry);
    pthread_cond_destroy(&s->moved);
    pthread_cond_destroy(&s->asked);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

ckpt__hf_stream *ckpt__hf_stream_start(const ckpt__hf_entry *e, ckpt__source *remote, const char *sha256) {
    ckpt__hf_stream *s = ckpt__calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->moved, NULL);
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&s->asked, &monotonic);
    pthread_condattr_destroy(&monotonic);
    s->part = s->blob = -1;
    s->remote = remote;
    s->size = remote->size;
    if (sha256) memcpy(s->sha256, sha256, 65);
    pthread_mutex_lock(&s->lock); /* the thread's handle is in before the thread can end */
    bool started = entry_copy(&s->entry, e) && (s->thread = ckpt__pool_start(pump, s));
    pthread_mutex_unlock(&s->lock);
    if (!started) {
        stream_free(s);
        return NULL;
    }
    return s;
}

void ckpt__hf_stream_stop(ckpt__hf_stream *s) {
    pthread_mutex_lock(&s->lock);
    s->stop = true; /* a download under way stops at its next bytes; its partial blob stays, to be resumed */
    pthread_cond_broadcast(&s->asked);
    while (!s->ended) pthread_cond_wait(&s->moved, &s->lock);
    join(s);
    pthread_mutex_unlock(&s->lock);
}

void ckpt__hf_stream_free(ckpt__hf_stream *s) {
    if (!s) return;
    ckpt__hf_stream_stop(s);
    stream_free(s);
}

ckpt_status ckpt__hf_stream_wait(ckpt__hf_stream *s, int *fd, ckpt_error *err) {
    *fd = -1;
    pthread_mutex_lock(&s->lock);
    s->free_run = true; /* the rest of the file, whoever wants it: its end gives the verdict */
    pthread_cond_broadcast(&s->asked);
    while (!s->ended) pthread_cond_wait(&s->moved, &s->lock);
    join(s);
    ckpt_status st = s->status;
    if (st && err) *err = s->err;
    if (st == CKPT_OK && (*fd = fcntl(s->blob, F_DUPFD_CLOEXEC, 0)) < 0)
        st = ckpt__fail_errno(err, errno, s->entry.shown, -1, "cannot open the downloaded blob again");
    pthread_mutex_unlock(&s->lock);
    return st;
}

/* ---- the readers' side ------------------------------------------------------------- */

/* Bytes [off, off + n) of a file already written (the partial blob below
 * what arrived, or the blob), from descriptor fd. */
static ckpt_status read_written(ckpt__hf_stream *s, int fd, unsigned char *dst, uint64_t n, uint64_t off,
                                const char *tensor, ckpt_error *err) {
    for (uint64_t done = 0; done < n;) {
        ssize_t got = ckpt__io_pread(fd, dst + done, (size_t)(n - done), (off_t)(off + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            ckpt_status st = got < 0 ? ckpt__fail_errno(err, errno, s->entry.shown, (int64_t)(off + done),
                                                        "cannot read the download in the Hub's cache")
                                     : ckpt__fail(err, CKPT_E_TRUNCATED, s->entry.shown, NULL, (int64_t)(off + done),
                                                  "the download in the Hub's cache ends before byte %llu",
                                                  (unsigned long long)(off + n));
            return ckpt__error_in_tensor(err, st, tensor);
        }
        done += (uint64_t)got;
    }
    return CKPT_OK;
}

/* A request's bytes: `len` clipped to `need` (no O_DIRECT rounding here). */
static uint64_t wanted(const ckpt_source_request *q) { return q->need < q->len ? q->need : q->len; }

/* Every request from the blob of a download that ended well; its error
 * otherwise.  Under the lock, which it releases. */
static ckpt_status read_ended(ckpt__hf_stream *s, ckpt_source_request *reqs, size_t n, ckpt_error *err) {
    ckpt_status st = s->status;
    int blob = s->blob;
    if (st && err) *err = s->err;
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; st == CKPT_OK && i < n; i++)
        st = read_written(s, blob, reqs[i].dst, wanted(&reqs[i]), reqs[i].offset, reqs[i].tensor, err);
    if (st && n) st = ckpt__error_in_tensor(err, st, reqs[0].tensor);
    return st;
}

static bool all_full(const waiter *ws, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!ws[i].full) return false;
    return true;
}

/* One round of a read (under the lock, which it holds again on return):
 * registers what is still to come, copies what the download holds, reads
 * what went by before from the partial blob, waits for the rest.  *again when the round did not get every
 * byte: the download started over meanwhile, or ended first (the blob
 * then has them, or its error says why not). */
static ckpt_status read_round(ckpt__hf_stream *s, ckpt_source_request *reqs, size_t n, waiter *ws, bool *again,
                              ckpt_error *err) {
    unsigned round = s->round;
    uint64_t arrived = s->arrived;
    int part = s->part;
    bool asks = false;
    for (size_t i = 0; i < n; i++) {
        uint64_t off = reqs[i].offset, end = off + wanted(&reqs[i]);
        uint64_t from = off > arrived ? off : end < arrived ? end : arrived; /* [off, from) went by */
        ws[i] = (waiter){.dst = reqs[i].dst, .off = off, .from = from, .back = from, .end = end, .full = from == end};
        if (s->held && from > s->held_off) { /* the part of [off, from) the download holds, from memory */
            uint64_t a = off > s->held_off ? off : s->held_off;
            memcpy(ws[i].dst + (a - off), s->held + (a - s->held_off), (size_t)(from - a));
            ws[i].back = a;
        }
        if (!ws[i].full) {
            ws[i].next = s->waiters;
            s->waiters = &ws[i];
            asks = true;
        }
    }
    if (asks) pthread_cond_broadcast(&s->asked);
    pthread_mutex_unlock(&s->lock);
    ckpt_status st = CKPT_OK;
    bool went_by = true; /* every byte that went by before this round was read */
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        if (ws[i].back == ws[i].off) continue;
        if (part < 0) went_by = false; /* no descriptor of the partial blob: from the blob, at the end */
        else st = read_written(s, part, ws[i].dst, ws[i].back - ws[i].off, ws[i].off, reqs[i].tensor, err);
    }
    pthread_mutex_lock(&s->lock);
    /* A failed read of written bytes is an error, unless the download
     * started over meanwhile (cutting the partial blob back). */
    bool failed = st && s->round == round;
    while (!failed && !st && !s->ended && s->round == round && !(went_by && all_full(ws, n)))
        pthread_cond_wait(&s->moved, &s->lock);
    for (waiter **p = &s->waiters; *p;) { /* ours out of the list */
        if (*p >= ws && *p < ws + n) *p = (*p)->next;
        else p = &(*p)->next;
    }
    *again = !failed && !(st == CKPT_OK && went_by && all_full(ws, n) && s->round == round);
    return failed ? st : CKPT_OK;
}

ckpt_status ckpt__hf_stream_read(ckpt__hf_stream *s, ckpt_source_request *reqs, size_t n, ckpt_error *err) {
    for (size_t i = 0; i < n; i++) {
        uint64_t len = wanted(&reqs[i]);
        if (reqs[i].offset > s->size || len > s->size - reqs[i].offset)
            return ckpt__fail(err, CKPT_E_TRUNCATED, s->entry.shown, reqs[i].tensor, (int64_t)s->size,
                              "the file ends at byte %llu, inside data that runs to byte %llu",
                              (unsigned long long)s->size, (unsigned long long)(reqs[i].offset + len));
    }
    waiter stack[16], *ws = n <= 16 ? stack : ckpt__malloc(n * sizeof *ws);
    if (!ws) return ckpt__oom(err, s->entry.shown, NULL);
    ckpt_status st = CKPT_OK;
    pthread_mutex_lock(&s->lock);
    for (bool again = true; again;) {
        if (s->ended) {
            st = read_ended(s, reqs, n, err); /* unlocks */
            break;
        }
        st = read_round(s, reqs, n, ws, &again, err);
        if (st == CKPT_OK && !again) s->served = true;
        if (st || !again) {
            pthread_mutex_unlock(&s->lock);
            break;
        }
    }
    if (ws != stack) free(ws);
    return st;
}
