/* load.c — ckpt_load: a plan's tensors into memory — the caller's buffers,
 * buffers the library allocates, or views of the file — through the
 * engine (engine.c). */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/pool.h"
#include "device/device.h"
#include "engine.h"
#include "io/mapping.h"
#include "plan_internal.h"

void ckpt_load_options_init_sized(ckpt_load_options *o, size_t size) {
    if (!o || size < sizeof o->size) return;
    /* Every default is 0; a caller with a longer struct (a newer header)
     * gets zeros in what this library does not know too. */
    memset(o, 0, size);
    o->size = size;
}

static void *alloc_buffer(uint64_t nbytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, nbytes ? (size_t)nbytes : 1) != 0) return NULL;
    /* No MADV_HUGEPAGE: with the kernel's defrag=madvise default it made
     * first touch slower here (direct compaction): 2.1-5.1 s against
     * 1.4-2.0 s for 2 GB. */
    return p;
}

/* Whether the entry's slice is one contiguous range of its tensor's bytes
 * (whole rows of whole inner axes): what a view can show. */
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
    /* In units: elements, or blocks along the innermost axis of a block type. */
    uint64_t off = 0, s = 1, block = ckpt_dtype_block_elems(t->dtype);
    for (uint32_t d = t->ndim; d-- > 0;) {
        uint64_t div = d == t->ndim - 1 ? block : 1;
        off += e->start[d] / div * s, s *= t->shape[d] / div;
    }
    return off * ckpt_dtype_block_bytes(t->dtype);
}

/* A view of the entry's bytes in a mapping of its file — the catalog's
 * shared one, or the plan's private (copy-on-write, prefetched) one — when
 * the bytes are the tensor as loaded and the file can be mapped; else
 * *viewed stays false. */
static ckpt_status try_view(ckpt_plan *p, ckpt__plan_entry *e, int views, bool *viewed, ckpt_error *err) {
    const ckpt_tensor_info *t = e->pub.source;
    size_t index = ckpt__catalog_index_of(p->catalog, t);
    uint32_t pieces;
    ckpt__catalog_pieces(p->catalog, index, &pieces);
    ckpt__source *src = ckpt__catalog_source(p->catalog, t->file);
    *viewed = false;
    if (e->pub.transform || pieces != 1 || !single_run(e) || !(src->caps & CKPT__SRC_MAP) || (src->caps & CKPT__SRC_REMOTE))
        return CKPT_OK;
    const void *view;
    if (views == CKPT_VIEWS_PRIVATE) {
        /* Private views are what frameworks own as tensors: their elements
         * must be aligned (safetensors and torch files always are). */
        unsigned unit = ckpt_dtype_bits(t->dtype) / 8;
        if (unit > 1 && (t->offset + slice_offset(e)) % unit) return CKPT_OK;
        size_t files = ckpt_catalog_file_count(p->catalog);
        if (!p->maps && !(p->maps = ckpt__calloc(files ? files : 1, sizeof *p->maps)))
            return ckpt__oom(err, src->name, NULL);
        ckpt_status st = CKPT_OK;
        /* Prefetched below: only the viewed bytes (prefetch_views). */
        if (!p->maps[t->file]) st = ckpt_catalog_map_file(p->catalog, t->file, 0, &p->maps[t->file], err);
        if (st) return ckpt__error_in_tensor(err, st, t->name);
        static const char empty[1];
        unsigned char *base = ckpt_mapping_data(p->maps[t->file]);
        view = base ? (const void *)(base + t->offset) : (const void *)empty;
    } else {
        ckpt_status st = ckpt_catalog_view(p->catalog, t, &view, err);
        if (st) return st;
    }
    e->pub.data = (unsigned char *)view + slice_offset(e);
    e->pub.is_view = (uint8_t)(views == CKPT_VIEWS_PRIVATE ? 2 : 1);
    *viewed = true;
    return CKPT_OK;
}

/* Prefetches, per file, the bytes that private views show (only those:
 * a rank's rows of each tensor are all it reads), in the background. */
static void prefetch_views(ckpt_plan *p) {
    size_t files = ckpt_catalog_file_count(p->catalog), n = p->selected_count;
    if (!p->maps) return;
    ckpt__range *ranges = ckpt__malloc((n ? n : 1) * sizeof *ranges);
    if (!ranges) return; /* views still work, through page faults */
    for (size_t f = 0; f < files; f++) {
        if (!p->maps[f]) continue;
        const unsigned char *base = ckpt_mapping_data(p->maps[f]);
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            const ckpt__plan_entry *e = &p->entries[p->selected[i]];
            if (e->pub.is_view == CKPT_VIEWS_PRIVATE && e->pub.source->file == f && base && e->pub.nbytes)
                ranges[k++] = (ckpt__range){(uint64_t)((const unsigned char *)e->pub.data - base), e->pub.nbytes};
        }
        ckpt__mapping_prefetch(p->maps[f], ckpt__catalog_source(p->catalog, f), ranges, k);
    }
    free(ranges);
}

/* Where one entry's bytes go: the caller's buffer, a view (nothing to
 * move: *moved stays 0) or a buffer the library allocates; *moved moves
 * from move_out on fill it. */
static ckpt_status place_entry(ckpt_plan *p, ckpt__plan_entry *e, int views, ckpt__move *move_out, size_t *moved,
                               ckpt_error *err) {
    const ckpt_tensor_info *t = e->pub.source;
    const char *path = ckpt_catalog_file_path(p->catalog, t->file);
    bool viewed = false;
    *moved = 0;
    ckpt_status st = CKPT_OK;
    if (!e->buffer && !e->device && views && (st = try_view(p, e, views, &viewed, err))) return st;
    if (viewed) return CKPT_OK;
    if (e->buffer && e->capacity < e->pub.nbytes) /* a rule after set_buffer grew the tensor (a cast) */
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, e->pub.name, -1,
                          "buffer of %llu bytes for a tensor of %llu bytes", (unsigned long long)e->capacity,
                          (unsigned long long)e->pub.nbytes);
    if (e->buffer || e->device) {
        e->pub.data = e->buffer;
    } else if ((e->owned = alloc_buffer(e->pub.nbytes))) {
        e->pub.data = e->owned;
    } else {
        return ckpt__fail(err, CKPT_E_NO_MEMORY, path, e->pub.name, -1, "cannot allocate %llu bytes",
                          (unsigned long long)e->pub.nbytes);
    }
    ckpt__move out = {.dtype = e->pub.dtype, .name = e->pub.name, .op = e->has_op ? &e->op : NULL,
                      .sink = CKPT__SINK_MEMORY};
    if (e->device) out.sink = CKPT__SINK_STAGE, out.stage = &e->device->ring.stage;
    for (uint64_t j = 0; j < ckpt__plan_pieces(e); j++) { /* one, or a joined entry's pieces, each at its offset */
        uint64_t at;
        move_out[j] = out;
        ckpt__plan_piece(p, e, j, &move_out[j], &at);
        move_out[j].dst = (unsigned char *)e->pub.data + at;
    }
    *moved = (size_t)ckpt__plan_pieces(e);
    return CKPT_OK;
}

/* Prefaulting fresh destinations.  The first touch of new memory costs
 * more than the copy into it (here 0.6-1.5 GB/s for one thread against
 * 10-14 GB/s for memcpy, bench/perf_suite.py: page faults trap out of the
 * VM).  MADV_POPULATE_WRITE faults a whole range in one call, and threads
 * fault in parallel: 4 GiB in 1.1-1.9 s on two threads against 3.6-5.3 s
 * on one.  Faulting while the engine writes into the same buffers was the
 * slowest of all (the faults contend): bf16 to f32, 2 GB (ckpt_load_bench
 * load PATH 0 0 auto F32), warm 3.2-3.9 s with one prefault thread beside
 * the engine against 1.8-2.3 s with every core prefaulting first, cold
 * 2.4-3.4 s against 2.1-2.3 s.  So every core faults the destinations in
 * first, then the engine reads.  The madvise leaves contents alone; a
 * kernel before 5.14 (EINVAL) leaves the faults to the engine's writes.
 * MADV_HUGEPAGE was as often slower as faster here (4 GiB on two threads:
 * 0.27-2.5 s against 0.85-2.3 s without, with free memory more or less
 * fragmented).  Tried again with 2 MiB-aligned buffers, asked for only
 * when /proc/buddyinfo showed free 2 MiB blocks for every byte with a
 * quarter to spare: a bare 4 GiB mapping faulted in faster (median 1.1 s
 * against 1.7 s), but ckpt.load(dtype="float32") of a 2 GB bf16 file was
 * slower in six rounds out of six, alternating (prefault 1.5-2.7 s
 * against 1.0-1.5 s).  So it is not used. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define PREFAULT_MIN (4u << 20)  /* below this, not worth threads */
#define PREFAULT_STEP (2u << 20) /* per madvise */
#define PREFAULT_POLL_MS 50       /* the caller's progress callback (a cancel) every 50 ms meanwhile */

typedef struct prefault_range {
    uintptr_t start, end; /* page-aligned, inside a buffer */
} prefault_range;

typedef struct prefault_worker {
    const prefault_range *ranges;
    size_t count;
    uint64_t lo, hi; /* this worker's share of the ranges' bytes, laid end to end */
    atomic_bool *stop;
} prefault_worker;

enum { PREFAULT_WORKERS_MAX = 8 };

static void prefault_work(void *arg) {
    prefault_worker *a = arg;
    uint64_t before = 0;
    for (size_t i = 0; i < a->count && before < a->hi; before += a->ranges[i].end - a->ranges[i].start, i++) {
        uint64_t len = a->ranges[i].end - a->ranges[i].start;
        uint64_t from = a->lo > before ? a->lo - before : 0, to = a->hi - before < len ? a->hi - before : len;
        for (uint64_t at = from; at < to && !atomic_load_explicit(a->stop, memory_order_relaxed); at += PREFAULT_STEP) {
            size_t n = to - at < PREFAULT_STEP ? (size_t)(to - at) : PREFAULT_STEP;
            if (madvise((void *)(a->ranges[i].start + at), n, MADV_POPULATE_WRITE) != 0 &&
                (errno == EINVAL || errno == ENOSYS))
                return;
        }
    }
}

/* While the workers fault pages in, the caller's thread asks progress
 * whether to go on (a cancel). */
typedef struct prefault_poll {
    ckpt_progress_fn progress;
    uint64_t total;
    void *user;
    atomic_bool *stop;
    unsigned naps;
} prefault_poll;

static void prefault_ask(void *arg) {
    prefault_poll *p = arg;
    if (p->progress && ++p->naps % PREFAULT_POLL_MS == 0 && !atomic_load(p->stop) && p->progress(0, p->total, p->user))
        atomic_store(p->stop, true);
}

/* Faults in the plan's library-allocated buffers on one thread per core,
 * each over its share of the bytes, while the caller's thread calls
 * progress(0, total) every 50 ms: a non-zero answer stops them
 * (CKPT_E_CANCELLED), so that a large load stays cancellable. */
static ckpt_status prefault(ckpt_plan *p, ckpt_progress_fn progress, uint64_t total, void *user, ckpt_error *err) {
    long page = sysconf(_SC_PAGESIZE), cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t n = p->selected_count, k = 0;
    size_t workers = cpus < 1 ? 1 : cpus > PREFAULT_WORKERS_MAX ? PREFAULT_WORKERS_MAX : (size_t)cpus;
    uint64_t bytes = 0;
    atomic_bool stop;
    atomic_init(&stop, false);
    prefault_range *ranges = page > 0 ? ckpt__malloc((n ? n : 1) * sizeof *ranges) : NULL;
    if (!ranges) return CKPT_OK; /* the engine's writes fault the pages */
    for (size_t i = 0; i < n; i++) {
        const ckpt__plan_entry *e = &p->entries[p->selected[i]];
        if (!e->owned || e->pub.nbytes < 2 * (uint64_t)page) continue;
        uintptr_t a = ((uintptr_t)e->owned + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
        uintptr_t b = ((uintptr_t)e->owned + (uintptr_t)e->pub.nbytes) & ~(uintptr_t)(page - 1);
        if (b > a) ranges[k++] = (prefault_range){a, b}, bytes += b - a;
    }
    if (bytes >= PREFAULT_MIN) {
        prefault_worker w[PREFAULT_WORKERS_MAX];
        uint64_t share = bytes / workers / (uint64_t)page * (uint64_t)page; /* madvise takes page-aligned starts */
        for (size_t i = 0; i < workers; i++)
            w[i] = (prefault_worker){ranges, k, share * i, i + 1 == workers ? bytes : share * (i + 1), &stop};
        prefault_poll poll = {progress, total, user, &stop, 0};
        ckpt__pool_run(&(ckpt__pool_batch){prefault_work, w, sizeof *w, workers, prefault_ask, &poll});
    }
    free(ranges);
    if (atomic_load(&stop)) return ckpt__fail(err, CKPT_E_CANCELLED, NULL, NULL, -1, "cancelled by the progress callback");
    return CKPT_OK;
}

/* Progress counts views as loaded: the caller sees the bytes of every
 * tensor, whether the engine moves them or a view shows them. */
typedef struct view_progress {
    ckpt_progress_fn fn;
    void *user;
    uint64_t view_bytes;
} view_progress;

static int progress_with_views(uint64_t done, uint64_t total, void *user) {
    const view_progress *v = user;
    return v->fn(done + v->view_bytes, total + v->view_bytes, v->user);
}

ckpt_status ckpt__load_moves(ckpt_plan *p, const ckpt_load_options *o, const bool *no_view, ckpt__move **out,
                             size_t *out_count, uint64_t *out_views, uint64_t *out_view_bytes, ckpt_error *err) {
    *out = NULL, *out_count = 0, *out_views = 0;
    if (out_view_bytes) *out_view_bytes = 0;
    ckpt_status st = ckpt__plan_refuse_assembled(p, "a load", true, err);
    if (st) return st;
    /* a destination for every selected entry (no_view[k]: the k-th is read
     * into memory, never viewed — a collective load broadcasts into it) */
    size_t n = p->selected_count, moves_used = 0, most = 0;
    for (size_t k = 0; k < n; k++) most += (size_t)ckpt__plan_pieces(&p->entries[p->selected[k]]);
    ckpt__move *moves = ckpt__calloc(most ? most : 1, sizeof *moves);
    if (!moves) return ckpt__oom(err, NULL, "the load's tensors");
    uint64_t views = 0, view_bytes = 0;
    for (size_t k = 0; st == CKPT_OK && k < n; k++) {
        size_t moved = 0;
        const ckpt__plan_entry *e = &p->entries[p->selected[k]];
        if (no_view && e->device) { /* a collective load broadcasts into host memory */
            st = ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, e->pub.name, -1,
                            "a collective load fills host memory: give the tensor a host buffer, not a device one");
            break;
        }
        int v = no_view && no_view[k] ? 0 : o->views;
        st = place_entry(p, &p->entries[p->selected[k]], v, &moves[moves_used], &moved, err);
        if (st == CKPT_OK && moved) moves_used += moved;
        else if (st == CKPT_OK) views++, view_bytes += e->pub.nbytes;
    }
    if (st) {
        free(moves);
        ckpt__plan_release(p);
        return st;
    }
    *out = moves, *out_count = moves_used, *out_views = views;
    if (out_view_bytes) *out_view_bytes = view_bytes;
    return CKPT_OK;
}

/* item_done for the engine's moves: item_of_move[m] is the item move m
 * fills (each item not viewed has one move, a joined one one per piece),
 * whose bytes are in place once its last move is done (left[item] of
 * them still to go); a device item's once its copies have completed. */
typedef struct items_done {
    int (*fn)(size_t item, void *user);
    void *user;
    size_t *item_of_move;
    atomic_size_t *left;
    const ckpt__move *moves;
} items_done;

static int move_done(size_t move, void *user) {
    const items_done *d = user;
    const ckpt__move *m = &d->moves[move];
    /* a failed copy fails the load with its own error (ckpt__device_finish) */
    if (m->sink == CKPT__SINK_STAGE && ckpt__device_flush(((ckpt__ring *)m->stage)->device, NULL)) return 1;
    size_t item = d->item_of_move[move];
    if (atomic_fetch_sub(&d->left[item], 1) != 1) return 0; /* the item's other moves go on */
    return d->fn(item, d->user);
}

/* The devices the moves copy to, each once, in address order (so that two
 * loads lock them in the same order): *count of them in *out. */
static ckpt_status moves_devices(const ckpt__move *moves, size_t n, ckpt_device ***out, size_t *count,
                                 ckpt_error *err) {
    ckpt_device **devs = NULL;
    *out = NULL, *count = 0;
    for (size_t i = 0; i < n; i++) {
        if (moves[i].sink != CKPT__SINK_STAGE) continue;
        ckpt_device *d = ((ckpt__ring *)moves[i].stage)->device;
        size_t at = 0;
        while (at < *count && (uintptr_t)devs[at] < (uintptr_t)d) at++;
        if (at < *count && devs[at] == d) continue;
        if (!devs && !(devs = ckpt__malloc(n * sizeof *devs))) return ckpt__oom(err, NULL, "the load's devices");
        memmove(devs + at + 1, devs + at, (*count - at) * sizeof *devs);
        devs[at] = d, (*count)++;
    }
    *out = devs;
    return CKPT_OK;
}

ckpt_status ckpt_load(ckpt_plan *p, const ckpt_load_options *options, ckpt_error *err) {
    ckpt_load_options taken;
    ckpt_load_options_init(&taken);
    if (options) CKPT__TAKE_OPTIONS(&taken, options);
    const ckpt_load_options *o = &taken;
    if (!p) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan is required");
    ckpt_status st = ckpt__plan_check(p, err);
    if (st) return st;
    memset(&p->stats, 0, sizeof p->stats);
    ckpt__plan_release(p); /* a reload starts afresh */
    /* 1. a destination for every selected entry */
    ckpt__move *moves;
    size_t moves_used;
    uint64_t views, view_bytes;
    if ((st = ckpt__load_moves(p, o, NULL, &moves, &moves_used, &views, &view_bytes, err))) return st;
    prefetch_views(p);
    /* 2. the fresh destinations are faulted in, then the engine moves the
     * bytes of everything that is not a view */
    view_progress vp = {o->progress, o->user, view_bytes};
    ckpt__engine_options eo = {.threads = o->threads, .chunk_bytes = o->chunk_bytes,
                               .io = ckpt__catalog_io(p->catalog),
                               .io_uring = o->io_uring, .progress = o->progress, .user = o->user,
                               .check_crc = !o->skip_crc_check};
    if (o->progress && view_bytes) eo.progress = progress_with_views, eo.user = &vp;
    uint64_t total = 0;
    for (size_t i = 0; i < moves_used; i++) total += ckpt__move_nbytes(p->catalog, &moves[i]);
    items_done done = {o->item_done, o->item_done_user, NULL, NULL, moves};
    if (o->item_done) { /* views are in place already; moved items as the engine finishes them */
        done.item_of_move = ckpt__malloc((moves_used ? moves_used : 1) * sizeof *done.item_of_move);
        done.left = ckpt__malloc((p->selected_count ? p->selected_count : 1) * sizeof *done.left);
        if (!done.item_of_move || !done.left) st = ckpt__oom(err, NULL, "the load's items");
        for (size_t k = 0, m = 0; st == CKPT_OK && k < p->selected_count; k++) {
            const ckpt__plan_entry *e = &p->entries[p->selected[k]];
            atomic_init(&done.left[k], e->pub.is_view ? 0 : (size_t)ckpt__plan_pieces(e));
            for (size_t j = 0; !e->pub.is_view && j < (size_t)ckpt__plan_pieces(e); j++) done.item_of_move[m++] = k;
            if (!e->pub.is_view) continue;
            if (o->item_done(k, o->item_done_user))
                st = ckpt__fail(err, CKPT_E_CANCELLED, NULL, p->entries[p->selected[k]].pub.name, -1,
                                "cancelled by the item_done callback");
        }
        eo.move_done = move_done, eo.done_user = &done;
    }
    if (st == CKPT_OK) st = prefault(p, eo.progress, total, eo.user, err);
    /* device destinations: held for the load, and no copy left in flight
     * when it returns, whatever happened */
    size_t device_count = 0;
    ckpt_device **devices = NULL;
    if (st == CKPT_OK) st = moves_devices(moves, moves_used, &devices, &device_count, err);
    for (size_t i = 0; i < device_count; i++) ckpt__device_begin(devices[i]);
    if (st == CKPT_OK) st = ckpt__engine_run(p->catalog, moves, moves_used, &eo, &p->stats, err);
    for (size_t i = device_count; i-- > 0;) st = ckpt__device_finish(devices[i], st, err);
    free(devices);
    p->stats.views = views;
    free(done.item_of_move);
    free((void *)done.left);
    free(moves);
    if (st != CKPT_OK) ckpt__plan_release(p);
    return st;
}
