/* load.c — the engine: ckpt_load (plan → memory, many threads) and
 * ckpt_convert_plan (plan → writer, streamed).
 *
 * Every tensor is cut into tasks: boxes of its slice (a range along one
 * axis, full beyond it) of at most chunk_bytes.  A box's bytes lie in the
 * file as runs — one per row of its innermost partial axis — which are
 * read straight into the destination when nothing converts them, else into
 * the worker's bounce buffer and converted from there (byte order, cast,
 * axis order in one pass).  Each worker owns one bounce buffer, so the
 * ring is threads × chunk_bytes. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "catalog_internal.h"
#include "io/reader.h"
#include "plan_internal.h"
#include "transform/cast.h"
#include "writer_internal.h"

enum {
    DEFAULT_CHUNK = 8 << 20,
    MIN_CHUNK = 64 << 10,
    BATCH = 256,          /* read requests gathered before submission */
    URING_PIECE = 1 << 20, /* large reads are split so that io_uring keeps several in flight */
    DIRECT_MIN = 1 << 20,  /* smaller runs are read through the page cache */
    BOUNCE_ALIGN = 4096,
    RING_BUDGET = 48 << 20,   /* default bounce memory, all threads together */
    RING_MIN_CHUNK = 1 << 20,
};

typedef struct file_state {
    int dfd;        /* O_DIRECT descriptor, -1 when not used */
    uint32_t align;
    bool remote;    /* network or FUSE file system: no views, no O_DIRECT */
} file_state;

typedef struct job {
    ckpt__plan_entry *e;
    const ckpt_tensor_info *t;
    ckpt__source *src;
    int fd;             /* the source's descriptor, or -1: reads go through the source */
    const char *path;
    file_state *file;
    unsigned in_size, out_size;
    ckpt__cast_fn fn;
    bool copy;   /* bytes go unchanged: runs are read straight into place */
    bool swap;   /* big-endian source */
    bool whole;  /* strided or compressed source: read whole through the catalog */
    uint32_t ndim;
    uint64_t *stride;     /* source row-major strides, in elements */
    int64_t *dst_stride;  /* per source axis, in elements of the destination */
    uint32_t split;       /* axis the tasks cut */
    uint64_t rows, per_outer, first_task, tasks;
    unsigned char *dst;
} job;

typedef struct engine {
    ckpt_plan *plan;
    job *jobs;
    size_t job_count;
    uint64_t task_count;
    file_state *files;
    size_t chunk;
    atomic_uint_fast64_t next_task, done_bytes, bytes_needed, bytes_read, reads;
    atomic_int stop, used_uring;
    uint64_t total_bytes;
    pthread_mutex_t lock;
    ckpt_status status;
    ckpt_error *err;
    ckpt_progress_fn progress;
    void *user;
} engine;

typedef struct worker {
    engine *g;
    ckpt__reader reader;
    unsigned char *bounce;
    size_t bounce_cap;
    ckpt__read_req reqs[BATCH];
    size_t nreq;
    ckpt_error err;
    pthread_t thread;
    bool caller; /* the calling thread: reports progress */
    uint64_t bytes_needed;
} worker;

/* ---- reading runs ------------------------------------------------------------ */

static ckpt_status flush(worker *w, ckpt_error *err) {
    if (!w->nreq) return CKPT_OK;
    ckpt_status st = ckpt__reader_run(&w->reader, w->reqs, w->nreq, err);
    w->nreq = 0;
    return st;
}

/* Queues a buffered read, in pieces when io_uring can overlap them. */
static ckpt_status queue_read(worker *w, const job *j, int fd, uint64_t off, uint64_t len, unsigned char *dst,
                              ckpt_error *err) {
    uint64_t piece = w->reader.uring ? URING_PIECE : len;
    for (uint64_t at = 0; at < len; at += piece) {
        if (w->nreq == BATCH) {
            ckpt_status st = flush(w, err);
            if (st) return st;
        }
        uint64_t n = len - at < piece ? len - at : piece;
        w->reqs[w->nreq++] = (ckpt__read_req){j->src, fd, off + at, n, n, dst + at, j->t->name};
    }
    return CKPT_OK;
}

static uint64_t align_down(uint64_t v, uint64_t a) { return v / a * a; }
static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* Reads [off, off + len) with O_DIRECT into an aligned part of the bounce
 * buffer; *data is where byte `off` landed. */
static ckpt_status direct_into_bounce(worker *w, const job *j, uint64_t off, uint64_t len, unsigned char **data,
                                      ckpt_error *err) {
    uint64_t a = j->file->align, lo = align_down(off, a), hi = align_up(off + len, a);
    ckpt_status st = flush(w, err);
    if (st) return st;
    st = queue_read(w, j, j->file->dfd, lo, hi - lo, w->bounce, err);
    if (st) return st;
    /* The file may end inside the last aligned block. */
    for (size_t i = 0; i < w->nreq; i++) {
        ckpt__read_req *q = &w->reqs[i];
        uint64_t end = off + len;
        q->need = q->offset >= end ? 0 : (end - q->offset < q->len ? end - q->offset : q->len);
    }
    if ((st = flush(w, err))) return st;
    *data = w->bounce + (off - lo);
    return CKPT_OK;
}

/* Where the bounce buffer's bytes of a direct read go: copied out piece by
 * piece as each read completes, while the next pieces are still being read. */
typedef struct bounce_copy {
    const unsigned char *bounce, *bounce_end;
    unsigned char *dst; /* destination of the bounce buffer's first byte */
} bounce_copy;

static void copy_out_piece(const ckpt__read_req *q, void *user) {
    const bounce_copy *c = user;
    const unsigned char *src = q->dst;
    if (src >= c->bounce && src < c->bounce_end) memcpy(c->dst + (src - c->bounce), src, (size_t)q->len);
}

/* A large run that needs no conversion, with O_DIRECT: aligned blocks go
 * straight into the destination when it lines up with the file, else
 * through the bounce buffer (in io_uring pieces, each copied out as soon as
 * it lands, so copies overlap reads); the unaligned ends through the page
 * cache. */
static ckpt_status direct_copy_run(worker *w, const job *j, uint64_t off, uint64_t len, unsigned char *dst,
                                   ckpt_error *err) {
    uint64_t a = j->file->align, mid_lo = align_up(off, a), mid_hi = align_down(off + len, a);
    ckpt_status st;
    if (mid_hi <= mid_lo) return queue_read(w, j, j->fd, off, len, dst, err);
    if ((st = queue_read(w, j, j->fd, off, mid_lo - off, dst, err))) return st;
    if ((st = queue_read(w, j, j->fd, mid_hi, off + len - mid_hi, dst + (mid_hi - off), err))) return st;
    unsigned char *mid = dst + (mid_lo - off);
    if ((uintptr_t)mid % a == 0) return queue_read(w, j, j->file->dfd, mid_lo, mid_hi - mid_lo, mid, err);
    if ((st = flush(w, err))) return st;
    uint64_t step = align_down(w->bounce_cap, a);
    /* Every piece of a step must be in one batch (queue_read would flush a
     * full batch without copying it out). */
    if (w->reader.uring && step > (uint64_t)BATCH * URING_PIECE) step = (uint64_t)BATCH * URING_PIECE;
    for (uint64_t at = mid_lo; at < mid_hi; at += step) {
        uint64_t n = mid_hi - at < step ? mid_hi - at : step;
        bounce_copy c = {w->bounce, w->bounce + n, dst + (at - off)};
        if ((st = queue_read(w, j, j->file->dfd, at, n, w->bounce, err))) return st;
        st = ckpt__reader_run_each(&w->reader, w->reqs, w->nreq, copy_out_piece, &c, err);
        w->nreq = 0;
        if (st) return st;
    }
    return CKPT_OK;
}

/* ---- converting ----------------------------------------------------------------- */


/* Dense source elements of a box (row-major) → destination through the
 * job's strides, converting each. */
static void convert_box(const job *j, const unsigned char *src, const uint64_t *bcount, unsigned char *dst,
                        const int64_t *dst_stride) {
    uint32_t n = j->ndim;
    if (n == 0) {
        j->fn(src, dst, 1);
        return;
    }
    uint64_t row = bcount[n - 1], idx[CKPT_MAX_DIMS] = {0};
    int64_t inner = dst_stride[n - 1];
    for (uint32_t d = 0; d < n; d++)
        if (bcount[d] == 0) return;
    for (;;) {
        if (inner == 1) j->fn(src, dst, (size_t)row);
        else ckpt__cast_strided(j->fn, j->in_size, j->out_size, src, dst, (size_t)row, inner);
        src += row * j->in_size;
        uint32_t d = n - 1;
        for (;;) { /* odometer over the outer axes */
            if (d == 0) return;
            d--;
            dst += dst_stride[d] * (int64_t)j->out_size;
            if (++idx[d] < bcount[d]) break;
            dst -= (int64_t)idx[d] * dst_stride[d] * (int64_t)j->out_size;
            idx[d] = 0;
        }
    }
}

/*
 * One box: bstart/bcount in source axes (absolute), its destination origin
 * and the destination strides per source axis.  `mem` (whole jobs) is the
 * gathered source instead of the file.
 */
static ckpt_status run_box(worker *w, const job *j, const uint64_t *bstart, const uint64_t *bcount,
                           unsigned char *dst, const int64_t *dst_stride, const unsigned char *mem,
                           unsigned char *scratch, ckpt_error *err) {
    const ckpt_tensor_info *t = j->t;
    uint32_t n = j->ndim;
    uint64_t nruns = 1, run_elems = 1, first = 0;
    uint32_t r = 0;
    if (n) {
        r = n - 1;
        while (r > 0 && bcount[r] == t->shape[r]) r--;
        for (uint32_t d = 0; d < r; d++) nruns *= bcount[d];
        run_elems = bcount[r] * j->stride[r];
        for (uint32_t d = 0; d < n; d++) {
            if (bcount[d] == 0) return CKPT_OK;
            first += bstart[d] * j->stride[d];
        }
    }
    uint64_t run_bytes = run_elems * j->in_size;
    w->bytes_needed += nruns * run_bytes;
    unsigned char *dense = mem ? scratch : w->bounce; /* where the box's source bytes gather */
    ckpt_status st = CKPT_OK;
    bool use_direct = !mem && j->file && j->file->dfd >= 0 && run_bytes >= DIRECT_MIN;

    if (!j->copy && use_direct && nruns == 1) {
        unsigned char *data;
        if ((st = direct_into_bounce(w, j, t->offset + first * j->in_size, run_bytes, &data, err))) return st;
        dense = data;
    } else {
        uint64_t idx[CKPT_MAX_DIMS] = {0}, elem = first;
        unsigned char *out = dst;
        for (uint64_t k = 0; k < nruns; k++) {
            unsigned char *target = j->copy ? out : dense + k * run_bytes;
            uint64_t off = elem * j->in_size;
            if (mem) memcpy(target, mem + off, (size_t)run_bytes);
            else if (j->copy && use_direct) st = direct_copy_run(w, j, t->offset + off, run_bytes, target, err);
            else st = queue_read(w, j, j->fd, t->offset + off, run_bytes, target, err);
            if (st) return st;
            for (uint32_t d = r; d-- > 0;) { /* next run: odometer over the axes before r */
                elem += j->stride[d];
                out += dst_stride[d] * (int64_t)j->out_size;
                if (++idx[d] < bcount[d]) break;
                elem -= idx[d] * j->stride[d];
                out -= (int64_t)idx[d] * dst_stride[d] * (int64_t)j->out_size;
                idx[d] = 0;
            }
        }
        if ((st = flush(w, err))) return st;
    }
    if (j->copy) return CKPT_OK;
    if (j->swap && !mem) ckpt__swap_units(dense, nruns * run_bytes, t->dtype == CKPT_C64 ? 4 : j->in_size);
    convert_box(j, dense, bcount, dst, dst_stride);
    return CKPT_OK;
}

/* A strided or compressed source: gathered (and byte-swapped, inflated) by
 * the catalog, whole, then sliced and converted from memory. */
static ckpt_status run_whole(worker *w, const job *j, unsigned char *dst, const int64_t *dst_stride,
                             ckpt_error *err) {
    ckpt__plan_entry *e = j->e;
    const ckpt_tensor_info *t = j->t;
    bool sliced = false, permuted = false;
    for (uint32_t d = 0; d < j->ndim; d++) sliced |= e->count[d] != t->shape[d], permuted |= e->perm[d] != d;
    w->bytes_needed += t->nbytes;
    if (!sliced && !permuted && e->pub.dtype == t->dtype && dst_stride == j->dst_stride)
        return ckpt_catalog_read(w->g->plan->catalog, t, 0, dst, t->nbytes, err);
    uint64_t box_bytes = e->pub.numel * j->in_size;
    unsigned char *all = ckpt__malloc(t->nbytes ? (size_t)t->nbytes : 1);
    unsigned char *scratch = ckpt__malloc(box_bytes ? (size_t)box_bytes : 1);
    ckpt_status st = CKPT_OK;
    if (!all || !scratch)
        st = ckpt__fail(err, CKPT_E_NO_MEMORY, j->path, t->name, -1, "cannot allocate %llu bytes to gather the tensor",
                        (unsigned long long)(t->nbytes + box_bytes));
    if (st == CKPT_OK) st = ckpt_catalog_read(w->g->plan->catalog, t, 0, all, t->nbytes, err);
    if (st == CKPT_OK) st = run_box(w, j, e->start, e->count, dst, dst_stride, all, scratch, err);
    free(all);
    free(scratch);
    return st;
}

/* ---- jobs and tasks ------------------------------------------------------------------- */

static uint64_t chunk_elements(const job *j, size_t chunk) {
    unsigned size = j->in_size > j->out_size ? j->in_size : j->out_size;
    uint64_t e = chunk / (size ? size : 1);
    return e ? e : 1;
}

/* Cuts the tensor's slice along the outermost axis whose inner rows fit a
 * chunk. */
static void plan_tasks(job *j, size_t chunk) {
    ckpt__plan_entry *e = j->e;
    if (j->whole || j->ndim == 0) {
        j->split = 0, j->rows = 1, j->per_outer = 1, j->tasks = e->pub.numel ? 1 : 0;
        return;
    }
    if (e->pub.numel == 0) {
        j->tasks = 0;
        return;
    }
    uint64_t limit = chunk_elements(j, chunk), inner = 1;
    uint32_t k = j->ndim - 1;
    /* inner = product of the counts after axis k */
    while (k > 0 && inner * e->count[k] <= limit) inner *= e->count[k--];
    uint64_t rows = limit / inner;
    if (rows == 0) rows = 1;
    if (rows > e->count[k]) rows = e->count[k];
    uint64_t outer = 1;
    for (uint32_t d = 0; d < k; d++) outer *= e->count[d];
    j->split = k, j->rows = rows, j->per_outer = (e->count[k] + rows - 1) / rows;
    j->tasks = outer * j->per_outer;
}

static void task_box(const job *j, uint64_t local, uint64_t *bstart, uint64_t *bcount, unsigned char **dst) {
    const ckpt__plan_entry *e = j->e;
    uint64_t outer = local / j->per_outer, piece = local % j->per_outer;
    int64_t off = 0;
    for (uint32_t d = j->ndim; d-- > 0;) {
        uint64_t rel;
        if (d > j->split) {
            rel = 0, bcount[d] = e->count[d];
        } else if (d == j->split) {
            rel = piece * j->rows;
            bcount[d] = e->count[d] - rel < j->rows ? e->count[d] - rel : j->rows;
        } else {
            rel = outer % e->count[d];
            outer /= e->count[d];
            bcount[d] = 1;
        }
        bstart[d] = e->start[d] + rel;
        off += (int64_t)rel * j->dst_stride[d];
    }
    *dst = j->dst + off * (int64_t)j->out_size;
}

static ckpt_status run_task(worker *w, uint64_t task, uint64_t *out_bytes, ckpt_error *err) {
    engine *g = w->g;
    size_t lo = 0, hi = g->job_count; /* the job whose tasks hold `task` */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (g->jobs[mid].first_task <= task) lo = mid;
        else hi = mid;
    }
    const job *j = &g->jobs[lo];
    if (j->whole) {
        *out_bytes = j->e->pub.nbytes;
        return run_whole(w, j, j->dst, j->dst_stride, err);
    }
    uint64_t bstart[CKPT_MAX_DIMS], bcount[CKPT_MAX_DIMS], numel = 1;
    unsigned char *dst;
    task_box(j, task - j->first_task, bstart, bcount, &dst);
    for (uint32_t d = 0; d < j->ndim; d++) numel *= bcount[d];
    *out_bytes = numel * j->out_size;
    return run_box(w, j, bstart, bcount, dst, j->dst_stride, NULL, NULL, err);
}

static void record_failure(engine *g, ckpt_status st, const ckpt_error *err) {
    pthread_mutex_lock(&g->lock);
    if (g->status == CKPT_OK) {
        g->status = st;
        if (g->err) *g->err = *err;
    }
    pthread_mutex_unlock(&g->lock);
    atomic_store(&g->stop, 1);
}

static void *work(void *arg) {
    worker *w = arg;
    engine *g = w->g;
    bool caller = w->caller;
    uint64_t last_report = 0;
    while (!atomic_load(&g->stop)) {
        uint64_t task = atomic_fetch_add(&g->next_task, 1);
        if (task >= g->task_count) break;
        ckpt_error_clear(&w->err);
        uint64_t bytes = 0;
        ckpt_status st = run_task(w, task, &bytes, &w->err);
        if (st) {
            record_failure(g, st, &w->err);
            break;
        }
        uint64_t done = atomic_fetch_add(&g->done_bytes, bytes) + bytes;
        if (caller && g->progress && done - last_report >= (16u << 20)) {
            last_report = done;
            if (g->progress(done, g->total_bytes, g->user)) {
                ckpt_error e;
                ckpt_error_clear(&e);
                record_failure(g, ckpt__fail(&e, CKPT_E_CANCELLED, NULL, NULL, -1, "cancelled by the progress callback"), &e);
            }
        }
    }
    atomic_fetch_add(&g->bytes_needed, w->bytes_needed);
    atomic_fetch_add(&g->bytes_read, w->reader.bytes);
    atomic_fetch_add(&g->reads, w->reader.reads);
    if (w->reader.uring) atomic_store(&g->used_uring, 1);
    return NULL;
}

/* ---- setup shared by load and convert ----------------------------------------------------- */

/* The plan already refused what cannot be done (casts without a kernel,
 * slices or permutations of packed sub-byte tensors), so every entry makes
 * a job. */
static void make_job(ckpt_plan *p, ckpt__plan_entry *e, job *j, uint64_t *stride_pool, int64_t *dst_pool,
                     file_state *files) {
    const ckpt_tensor_info *t = e->pub.source;
    memset(j, 0, sizeof *j);
    j->e = e, j->t = t, j->ndim = t->ndim;
    j->src = ckpt__catalog_source(p->catalog, t->file);
    j->fd = j->src->fd;
    j->path = j->src->name;
    j->file = files ? &files[t->file] : NULL;
    j->in_size = ckpt_dtype_bits(t->dtype) / 8;
    j->out_size = ckpt_dtype_bits(e->pub.dtype) / 8;
    j->whole = t->strides || t->compressed;
    j->swap = t->big_endian && !j->whole;
    j->fn = ckpt__cast_kernel(t->dtype, e->pub.dtype);
    j->copy = !e->pub.transform;
    j->stride = stride_pool, j->dst_stride = dst_pool;
    uint64_t s = 1;
    for (uint32_t d = t->ndim; d-- > 0;) j->stride[d] = s, s *= t->shape[d];
    /* Destination strides: row-major over the output shape, mapped back to
     * the source axis each output axis comes from. */
    int64_t o = 1;
    for (uint32_t i = t->ndim; i-- > 0;) j->dst_stride[e->perm[i]] = o, o *= (int64_t)e->shape[i];
    if (ckpt_dtype_bits(t->dtype) % 8) {
        /* Packed sub-byte data (F4, F6): one opaque element of nbytes,
         * read whole and unchanged. */
        j->ndim = 0;
        j->in_size = j->out_size = (unsigned)t->nbytes;
        j->copy = true;
    }
}

static size_t online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (size_t)n : 1;
}

/* Direct reads spend most of their time waiting for the disk: extra
 * threads keep it busy while others copy out of their bounce buffers
 * (measured on a 2-vCPU VM, 8 GB cold: 2 threads 1.2 GB/s, 6 threads
 * 1.8-2.2 GB/s).  The ring grows with them, by 16 threads at most. */
static size_t default_threads(bool direct) {
    size_t cpus = online_cpus();
    return direct ? cpus + (2 * cpus < 16 ? 2 * cpus : 16) : cpus;
}

static void *alloc_buffer(uint64_t nbytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, nbytes ? (size_t)nbytes : 1) != 0) return NULL;
    /* No MADV_HUGEPAGE: with the kernel's defrag=madvise default it made
     * first touch slower here (direct compaction): 2.1-5.1 s against
     * 1.4-2.0 s for 2 GB. */
    return p;
}

static bool single_run(const ckpt__plan_entry *e) {
    const ckpt_tensor_info *t = e->pub.source;
    uint32_t n = t->ndim;
    if (n == 0) return true;
    uint32_t r = n - 1;
    while (r > 0 && e->count[r] == t->shape[r]) r--;
    for (uint32_t d = 0; d < r; d++)
        if (e->count[d] != 1) return false;
    return true;
}

static uint64_t slice_offset(const ckpt__plan_entry *e) {
    const ckpt_tensor_info *t = e->pub.source;
    uint64_t off = 0, s = 1;
    for (uint32_t d = t->ndim; d-- > 0;) off += e->start[d] * s, s *= t->shape[d];
    return off * (ckpt_dtype_bits(t->dtype) / 8);
}

void ckpt_load_options_init(ckpt_load_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->io = CKPT_IO_AUTO;
}

static void close_files(file_state *files, size_t n) {
    for (size_t i = 0; files && i < n; i++)
        if (files[i].dfd >= 0) close(files[i].dfd);
    free(files);
}

/* Chooses, per data file, O_DIRECT or the page cache. */
static ckpt_status open_files(ckpt_plan *p, ckpt_io_mode mode, file_state **out, bool *any_direct) {
    size_t n = ckpt_catalog_file_count(p->catalog);
    file_state *files = ckpt__calloc(n ? n : 1, sizeof *files);
    if (!files) return CKPT_E_NO_MEMORY;
    *any_direct = false;
    for (size_t i = 0; i < n; i++) {
        files[i].dfd = -1;
        ckpt__source *src = ckpt__catalog_source(p->catalog, i);
        int fd = src->fd;
        uint64_t size = src->size;
        files[i].remote = (src->caps & CKPT__SRC_REMOTE) || !(src->caps & CKPT__SRC_MAP);
        bool direct = mode == CKPT_IO_DIRECT && !files[i].remote;
        if (mode == CKPT_IO_AUTO)
            direct = !files[i].remote && fd >= 0 && size >= (64u << 20) && ckpt__cached_fraction(fd, size, 0, size) < 0.5;
        if (direct && fd >= 0) files[i].dfd = ckpt__open_direct(src->name, fd, &files[i].align);
        if (files[i].dfd >= 0 && files[i].align > BOUNCE_ALIGN) { /* more than the bounce buffers' slack */
            close(files[i].dfd);
            files[i].dfd = -1;
        }
        if (files[i].dfd >= 0) *any_direct = true;
        else if (fd >= 0) posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
    *out = files;
    return CKPT_OK;
}

ckpt_status ckpt_load(ckpt_plan *p, const ckpt_load_options *options, ckpt_error *err) {
    ckpt_load_options defaults;
    ckpt_load_options_init(&defaults);
    const ckpt_load_options *o = options ? options : &defaults;
    if (!p) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan is required");
    ckpt_status st = ckpt__plan_check(p, err);
    if (st) return st;
    memset(&p->stats, 0, sizeof p->stats);
    ckpt__plan_release(p); /* a reload starts afresh */

    engine g;
    memset(&g, 0, sizeof g);
    g.plan = p;
    g.err = err;
    g.progress = o->progress, g.user = o->user;
    pthread_mutex_init(&g.lock, NULL);
    bool any_direct = false;
    size_t n = p->selected_count, dims = 0;
    for (size_t k = 0; k < n; k++) dims += p->entries[p->selected[k]].pub.ndim;
    g.jobs = ckpt__calloc(n ? n : 1, sizeof *g.jobs);
    uint64_t *stride_pool = ckpt__malloc((dims ? dims : 1) * sizeof *stride_pool);
    int64_t *dst_pool = ckpt__malloc((dims ? dims : 1) * sizeof *dst_pool);
    if (!g.jobs || !stride_pool || !dst_pool) st = ckpt__oom(err, NULL, "the load's tasks");
    if (st == CKPT_OK && open_files(p, o->io, &g.files, &any_direct) != CKPT_OK) st = ckpt__oom(err, NULL, "the load's tasks");
    size_t threads = o->threads ? o->threads : default_threads(any_direct);
    /* Without an explicit chunk size the ring stays within RING_BUDGET
     * however many threads run (chunks shrink to RING_MIN_CHUNK at most). */
    g.chunk = o->chunk_bytes ? (size_t)o->chunk_bytes : DEFAULT_CHUNK;
    if (!o->chunk_bytes && g.chunk * threads > RING_BUDGET)
        g.chunk = RING_BUDGET / threads < RING_MIN_CHUNK ? RING_MIN_CHUNK : RING_BUDGET / threads / 4096 * 4096;
    if (g.chunk < MIN_CHUNK) g.chunk = MIN_CHUNK;

    size_t used_dims = 0;
    for (size_t k = 0; st == CKPT_OK && k < n; k++) {
        ckpt__plan_entry *e = &p->entries[p->selected[k]];
        const ckpt_tensor_info *t = e->pub.source;
        if (!e->buffer && o->views && !e->pub.transform && single_run(e) && !g.files[t->file].remote) {
            const void *view;
            st = ckpt_catalog_view(p->catalog, t, &view, err);
            if (st) break;
            e->pub.data = (unsigned char *)view + slice_offset(e);
            e->pub.is_view = 1;
            p->stats.views++;
            continue;
        }
        if (e->buffer) {
            e->pub.data = e->buffer;
        } else {
            e->owned = alloc_buffer(e->pub.nbytes);
            if (!e->owned) {
                st = ckpt__fail(err, CKPT_E_NO_MEMORY, ckpt_catalog_file_path(p->catalog, t->file), e->pub.name, -1,
                                "cannot allocate %llu bytes", (unsigned long long)e->pub.nbytes);
                break;
            }
            e->pub.data = e->owned;
        }
        job *j = &g.jobs[g.job_count];
        make_job(p, e, j, stride_pool + used_dims, dst_pool + used_dims, g.files);
        used_dims += t->ndim;
        j->dst = e->pub.data;
        plan_tasks(j, g.chunk);
        if (j->tasks == 0) continue;
        j->first_task = g.task_count;
        g.task_count += j->tasks;
        g.total_bytes += e->pub.nbytes;
        g.job_count++;
    }

    if (threads > g.task_count) threads = g.task_count ? (size_t)g.task_count : 1;
    worker *workers = NULL;
    if (st == CKPT_OK) {
        workers = ckpt__calloc(threads, sizeof *workers);
        if (!workers) st = ckpt__oom(err, NULL, "the load's tasks");
    }
    bool need_bounce = any_direct;
    for (size_t k = 0; k < g.job_count && !need_bounce; k++) need_bounce = !g.jobs[k].copy;
    size_t started = 0;
    for (size_t i = 0; st == CKPT_OK && i < threads; i++) {
        worker *w = &workers[i];
        w->g = &g;
        w->caller = i == 0;
        ckpt__reader_init(&w->reader, o->io_uring >= 0);
        started = i + 1;
        if (need_bounce) {
            w->bounce_cap = g.chunk + 2 * BOUNCE_ALIGN;
            if (posix_memalign((void **)&w->bounce, BOUNCE_ALIGN, w->bounce_cap) != 0) {
                w->bounce = NULL;
                st = ckpt__oom(err, NULL, "bounce buffer");
            }
            p->stats.ring_bytes += w->bounce_cap;
        }
    }
    if (st == CKPT_OK && g.progress && g.progress(0, g.total_bytes, g.user))
        st = ckpt__fail(err, CKPT_E_CANCELLED, NULL, NULL, -1, "cancelled by the progress callback");
    if (st == CKPT_OK) {
        size_t running = 1;
        for (size_t i = 1; i < threads; i++) {
            if (pthread_create(&workers[i].thread, NULL, work, &workers[i]) != 0) break;
            running++;
        }
        work(&workers[0]);
        for (size_t i = 1; i < running; i++) pthread_join(workers[i].thread, NULL);
        st = g.status;
        if (st == CKPT_OK && g.progress && g.progress(g.total_bytes, g.total_bytes, g.user))
            st = ckpt__fail(err, CKPT_E_CANCELLED, NULL, NULL, -1, "cancelled by the progress callback");
        p->stats.threads = (unsigned)running;
    }
    for (size_t i = 0; i < started; i++) {
        ckpt__reader_free(&workers[i].reader);
        free(workers[i].bounce);
    }
    p->stats.bytes_needed = atomic_load(&g.bytes_needed);
    p->stats.bytes_read = atomic_load(&g.bytes_read);
    p->stats.reads = atomic_load(&g.reads);
    p->stats.tasks = g.task_count;
    p->stats.direct = any_direct;
    p->stats.io_uring = atomic_load(&g.used_uring);
    free(workers);
    close_files(g.files, ckpt_catalog_file_count(p->catalog));
    free(g.jobs);
    free(stride_pool);
    free(dst_pool);
    pthread_mutex_destroy(&g.lock);
    if (st != CKPT_OK) ckpt__plan_release(p);
    return st;
}

/* ---- convert: plan → writer ------------------------------------------------------------------ */

typedef struct convert_progress {
    ckpt_progress_fn fn;
    void *user;
    uint64_t before, total;
} convert_progress;

static int convert_tick(uint64_t copied, void *user) {
    convert_progress *c = user;
    return c->fn ? c->fn(c->before + copied, c->total, c->user) : 0;
}

/* Streams one transformed tensor: boxes in output order (a range along one
 * output axis, full beyond it), each converted into `slot` and appended. */
static ckpt_status convert_streamed(worker *w, const job *j, ckpt_writer *wr, size_t index, unsigned char *slot,
                                    size_t chunk, convert_progress *cp, ckpt_error *err) {
    const ckpt__plan_entry *e = j->e;
    uint32_t n = j->ndim;
    uint64_t limit = chunk_elements(j, chunk), inner = 1;
    if (e->pub.numel == 0) return CKPT_OK;
    uint32_t k = n ? n - 1 : 0;
    while (n && k > 0 && inner * e->shape[k] <= limit) inner *= e->shape[k--];
    uint64_t rows = n ? limit / inner : 1;
    if (rows == 0) rows = 1;
    if (n && rows > e->shape[k]) rows = e->shape[k];
    uint64_t outer = 1;
    for (uint32_t i = 0; i < k && n; i++) outer *= e->shape[i];
    uint64_t per_outer = n ? (e->shape[k] + rows - 1) / rows : 1, done = 0;
    for (uint64_t t = 0; t < outer * per_outer; t++) {
        uint64_t bstart[CKPT_MAX_DIMS], bcount[CKPT_MAX_DIMS], ocount[CKPT_MAX_DIMS], rest = t / per_outer,
                 piece = t % per_outer, numel = 1;
        int64_t slot_stride[CKPT_MAX_DIMS], s = 1;
        for (uint32_t i = n; i-- > 0;) {
            uint64_t rel;
            if (i > k) rel = 0, ocount[i] = e->shape[i];
            else if (i == k) rel = piece * rows, ocount[i] = e->shape[i] - rel < rows ? e->shape[i] - rel : rows;
            else rel = rest % e->shape[i], rest /= e->shape[i], ocount[i] = 1;
            uint32_t d = e->perm[i];
            bstart[d] = e->start[d] + rel;
            bcount[d] = ocount[i];
            slot_stride[d] = s;
            s *= (int64_t)ocount[i];
            numel *= ocount[i];
        }
        ckpt_status st = run_box(w, j, bstart, bcount, slot, slot_stride, NULL, NULL, err);
        if (st == CKPT_OK) st = ckpt_writer_write(wr, index, slot, (size_t)(numel * j->out_size), err);
        if (st) return st;
        done += numel * j->out_size;
        if (convert_tick(done, cp)) return ckpt__fail(err, CKPT_E_CANCELLED, NULL, NULL, -1, "cancelled");
    }
    return CKPT_OK;
}

static ckpt_status convert_item(worker *w, ckpt_plan *p, ckpt__plan_entry *e, ckpt_writer *wr, size_t index,
                                unsigned char *slot, size_t chunk, convert_progress *cp, ckpt_error *err) {
    uint64_t stride[CKPT_MAX_DIMS];
    int64_t dst_stride[CKPT_MAX_DIMS];
    job j;
    const ckpt_tensor_info *t = e->pub.source;
    make_job(p, e, &j, stride, dst_stride, NULL);
    if (j.copy && single_run(e))
        return ckpt__writer_copy(wr, index, j.src, t->offset + slice_offset(e), e->pub.nbytes, convert_tick, cp,
                                 err);
    if (!j.whole) return convert_streamed(w, &j, wr, index, slot, chunk, cp, err);
    unsigned char *all = ckpt__malloc(e->pub.nbytes ? (size_t)e->pub.nbytes : 1);
    if (!all) return ckpt__fail(err, CKPT_E_NO_MEMORY, j.path, e->pub.name, -1, "cannot allocate %llu bytes",
                                (unsigned long long)e->pub.nbytes);
    j.dst = all;
    ckpt_status st = run_whole(w, &j, all, j.dst_stride, err);
    if (st == CKPT_OK) st = ckpt_writer_write(wr, index, all, (size_t)e->pub.nbytes, err);
    free(all);
    if (st == CKPT_OK && convert_tick(e->pub.nbytes, cp)) st = ckpt__fail(err, CKPT_E_CANCELLED, NULL, NULL, -1, "cancelled");
    return st;
}

ckpt_status ckpt_convert_plan(ckpt_plan *p, const char *dst_path, const ckpt_writer_options *options,
                              ckpt_progress_fn progress, void *user, ckpt_error *err) {
    if (!p || !dst_path) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan and destination are required");
    ckpt_status st = ckpt__plan_check(p, err);
    if (st) return st;
    ckpt_writer *wr;
    if ((st = ckpt_writer_create(dst_path, options, &wr, err))) return st;
    st = ckpt__copy_source_metadata(p->catalog, wr, err);
    size_t n = p->selected_count;
    size_t *index = ckpt__malloc((n ? n : 1) * sizeof *index);
    if (!index && st == CKPT_OK) st = ckpt__oom(err, NULL, "the load's tasks");
    for (size_t k = 0; st == CKPT_OK && k < n; k++) {
        const ckpt_plan_item *it = &p->entries[p->selected[k]].pub;
        st = ckpt_writer_add_tensor(wr, it->name, it->dtype, it->ndim, it->shape, &index[k], err);
    }
    if (st == CKPT_OK) st = ckpt_writer_begin(wr, err);

    engine g;
    memset(&g, 0, sizeof g);
    g.plan = p;
    worker w;
    memset(&w, 0, sizeof w);
    w.g = &g, w.caller = true;
    size_t chunk = DEFAULT_CHUNK;
    unsigned char *slot = NULL;
    if (st == CKPT_OK) {
        ckpt__reader_init(&w.reader, true);
        w.bounce_cap = chunk + 2 * BOUNCE_ALIGN;
        if (posix_memalign((void **)&w.bounce, BOUNCE_ALIGN, w.bounce_cap) != 0) w.bounce = NULL;
        slot = ckpt__malloc(chunk);
        if (!w.bounce || !slot) st = ckpt__oom(err, NULL, "conversion buffers");
    }
    convert_progress cp = {progress, user, 0, ckpt_writer_total_bytes(wr)};
    if (st == CKPT_OK && progress && progress(0, cp.total, user))
        st = ckpt__fail(err, CKPT_E_CANCELLED, dst_path, NULL, -1, "cancelled");
    for (size_t k = 0; st == CKPT_OK && k < n; k++) {
        ckpt__plan_entry *e = &p->entries[p->selected[k]];
        st = convert_item(&w, p, e, wr, index[k], slot, chunk, &cp, err);
        cp.before += e->pub.nbytes;
    }
    if (st == CKPT_OK) st = ckpt_writer_commit(wr, err);
    ckpt__reader_free(&w.reader);
    free(w.bounce);
    free(slot);
    free(index);
    ckpt_writer_free(wr);
    return st;
}
