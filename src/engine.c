/* engine.c — the engine (see engine.h): every byte that leaves a checkpoint
 * — loads, conversions, verification, ckpt_catalog_read — goes through
 * ckpt__engine_run or read_range below; ckpt_catalog_view hands out the
 * catalog's mapping instead of bytes. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>

#include "base/chunk_hash.h"
#include "base/pool.h"
#include "engine.h"
#include "io/file.h"
#include "io/reader.h"
#include "transform/cast.h"
#include "transform/crc32.h"
#include "transform/inflate.h"
#include "transform/layout.h"
#include "transform/swap.h"
#include "writer_internal.h"

enum {
    DEFAULT_CHUNK = 8 << 20,
    MIN_CHUNK = 64 << 10,
    COPY_CHUNK = 64 << 20,   /* kernel copies, and remote reads straight into memory: no buffer, larger boxes */
    STREAM_CHUNKS = 4,       /* boxes of direct copies into memory, in chunks (see direct_stream) */
    BATCH = 256,             /* read requests gathered before submission */
    URING_PIECE = 1 << 20,   /* large reads are split so that io_uring keeps several in flight */
    DIRECT_MIN = 1 << 20,    /* smaller runs are read through the page cache */
    MERGE_RUN = 256 << 10,   /* runs below this, separated by at most MERGE_GAP, are read as one span */
    MERGE_GAP = 64 << 10,    /* (about what the kernel's readahead would have read between them) */
    BOUNCE_ALIGN = 4096,
    STAGE_DIRECT_ALIGN = 4096,  /* GPUDirect Storage reads whole 4 KiB blocks straight to the device */
    STAGE_DIRECT_MIN = 64 << 10, /* below this, a box's aligned middle goes through a slot too */
    RING_BUDGET = 48 << 20,  /* default bounce memory, all threads together */
    RING_MIN_CHUNK = 1 << 20,
    PROGRESS_STEP = 16 << 20,
    /* A converted box bound for a writer goes out this much at a time,
     * converted into the slot's head and written while it is in cache
     * (whole, a chunk's output would go to memory and be read back by the
     * write): one write call each through the page cache. */
    CONVERT_PIECE = CKPT__WRITE_PIECE,
};

/* ---- jobs: a move, as the engine runs it ------------------------------------ */

typedef struct file_state {
    int dfd; /* O_DIRECT descriptor, -1 when not used */
    uint32_t align;
    int sfd; /* O_DIRECT descriptor a stage reads directly from (ckpt__stage.read_direct); -1: none */
} file_state;

/* Bytes of a checked member that a run read, and their CRC-32. */
typedef struct crc_segment {
    uint64_t at, len; /* in the member's bytes */
    uint32_t crc;
} crc_segment;

/* A stored member whose bytes the run checks (see engine.h): the segments
 * read so far, and the tasks still to add theirs. */
typedef struct crc_track {
    const ckpt__recorded_crc *r;
    uint32_t number;           /* the catalog's */
    uint32_t file;
    const char *tensor;        /* one read from it, for messages; NULL: found when needed */
    crc_segment *segs;
    size_t count, cap;
    bool dropped;              /* read in too many scattered pieces to follow: not checked */
    bool oom;                  /* no memory to follow it: the run fails */
    atomic_uint_fast64_t tasks_left;
} crc_track;

typedef struct job {
    ckpt__move *m;             /* NULL for a member job (ckpt_verify's): it reads `member` whole */
    const ckpt_tensor_info *t;
    const char *name;
    const ckpt__piece *pieces;
    uint32_t npieces;
    uint32_t n;               /* axes as the engine sees them (packed sub-byte data: 1, in bytes) */
    const uint64_t *shape;    /* the tensor's, in those axes */
    uint64_t *start, *count;  /* the slice */
    uint32_t *perm;           /* output axis i is source axis perm[i] */
    uint32_t *order;          /* the axes boxes are cut along, outermost first */
    int64_t *dst_stride;      /* per source axis: the output's stride, in output units */
    unsigned in_size, out_size;
    ckpt__cast_fn fn;
    /* An elementwise rule (the move's op): the source's units widened to
     * float32 units of wide_size bytes by `widen`, the rule applied, then
     * fn casts float32 to the output. */
    ckpt__cast_fn widen;
    unsigned wide_size;
    bool same_bytes;          /* output bytes are the source's (no cast) */
    bool serial;              /* boxes in order on one worker: hashes, ordered writes, DEFLATE */
    bool kernel_copy;         /* WRITER: the slice is one run of a local file, copied by the kernel */
    bool box_copy;            /* WRITER, several pieces: a box inside one piece's run is copied by the kernel */
    bool stage_direct;        /* STAGE: boxes that are runs of a file, unchanged, may be read by the stage itself */
    uint64_t nbytes;          /* output bytes */
    uint32_t block;           /* elements per unit of the innermost axis: a GGUF block type's (either
                                 side of the cast), else 1; the axes above are then in units */
    uint32_t split;           /* position in `order` of the axis the boxes cut */
    uint64_t rows, per_outer, boxes, first_task, tasks;
    atomic_uint_fast64_t tasks_left; /* for move_done */
    uint32_t crc;             /* the recorded CRC-32 the job checks (the catalog's number + 1); 0: none */
    crc_track *track;         /* stored: where the boxes' segments go */
    const ckpt__recorded_crc *member; /* a member job's */
} job;

/* The bytes of one unit (element) of a dtype, in the engine's axes. */
static unsigned unit_bytes(ckpt_dtype d) { return ckpt_dtype_bits(d) / 8; }

static bool packed(ckpt_dtype d) { return ckpt_dtype_bits(d) % 8 != 0; }

/* Bytes of `numel` elements of a dtype (block types: whole blocks). */
static uint64_t dtype_bytes(ckpt_dtype d, uint64_t numel) {
    if (ckpt_dtype_is_block(d)) return numel / ckpt_dtype_block_elems(d) * ckpt_dtype_block_bytes(d);
    return numel * unit_bytes(d);
}

/* A piece's extent in the job's units (block types: the innermost axis in
 * blocks).  Formats give block-type tensors whole pieces (GGUF). */
static const uint64_t *piece_count(const job *j, const ckpt__piece *p, uint64_t *buf) {
    if (!p->count) return j->shape;
    if (j->block == 1) return p->count;
    memcpy(buf, p->count, j->n * sizeof *buf);
    buf[j->n - 1] /= j->block;
    return buf;
}

/* Physical order of a piece: its axes by stride, outermost first. */
static void piece_order(const job *j, const ckpt__piece *p, uint32_t *order) {
    ckpt__runs r;
    uint64_t buf[CKPT_MAX_DIMS];
    ckpt__runs_plan(&r, j->n, piece_count(j, p, buf), p->strides, j->count, NULL, false);
    memcpy(order, r.axis, j->n * sizeof *order);
}

/* The axes a move sees its source in: its view's, or the tensor's. */
static uint32_t move_ndim(const ckpt_tensor_info *t, const ckpt__move *m) {
    return m->view_ndim ? m->view_ndim : t->ndim;
}

uint64_t ckpt__move_nbytes(const ckpt_catalog *c, const ckpt__move *m) {
    const ckpt_tensor_info *t = ckpt_catalog_tensor(c, m->tensor);
    ckpt_dtype d = m->dtype ? m->dtype : t->dtype;
    if (!m->count) return packed(d) ? t->nbytes : dtype_bytes(d, t->numel);
    uint64_t numel;
    ckpt__shape_numel(move_ndim(t, m), m->count, &numel); /* a slice of a checked shape: within bounds */
    return dtype_bytes(d, numel);
}

/* Fills a job from a move; `pool` holds its arrays.  The plan has refused
 * what cannot be done (casts without a kernel, slices of packed data). */
static void make_job(ckpt_catalog *c, ckpt__move *m, job *j, uint64_t *pool) {
    const ckpt_tensor_info *t = ckpt_catalog_tensor(c, m->tensor);
    ckpt_dtype out = m->dtype ? m->dtype : t->dtype;
    memset(j, 0, sizeof *j);
    j->m = m, j->t = t;
    j->name = m->name ? m->name : t->name;
    j->pieces = ckpt__catalog_pieces(c, m->tensor, &j->npieces);
    uint32_t n = packed(t->dtype) ? 1 : move_ndim(t, m);
    const uint64_t *source_shape = m->view_ndim ? m->view_shape : t->shape;
    j->n = n;
    uint64_t *shape = pool;
    j->start = pool + n, j->count = pool + 2 * n;
    j->dst_stride = (int64_t *)(pool + 3 * n);
    j->perm = (uint32_t *)(pool + 4 * n);
    j->order = j->perm + n;
    if (packed(t->dtype)) {
        /* Packed sub-byte data (F4, F6) moves whole and unchanged: as bytes. */
        shape[0] = t->nbytes, j->start[0] = 0, j->count[0] = t->nbytes, j->perm[0] = 0;
        j->in_size = j->out_size = 1;
    } else {
        for (uint32_t a = 0; a < n; a++) {
            shape[a] = source_shape[a];
            j->start[a] = m->start ? m->start[a] : 0;
            j->count[a] = m->count ? m->count[a] : source_shape[a];
            j->perm[a] = m->perm ? m->perm[a] : a;
        }
        j->in_size = unit_bytes(t->dtype);
        j->out_size = unit_bytes(out);
    }
    j->block = 1;
    ckpt_dtype b = ckpt_dtype_is_block(t->dtype) ? t->dtype : ckpt_dtype_is_block(out) ? out : CKPT_DTYPE_INVALID;
    if (b && n) {
        /* GGUF block types: the innermost axis in blocks (the plan keeps
         * it innermost and its slices whole blocks); a unit converts a
         * block of elements, and the kernels count blocks. */
        j->block = ckpt_dtype_block_elems(b);
        shape[n - 1] /= j->block, j->start[n - 1] /= j->block, j->count[n - 1] /= j->block;
        j->in_size = ckpt_dtype_is_block(t->dtype) ? ckpt_dtype_block_bytes(t->dtype) : j->block * unit_bytes(t->dtype);
        j->out_size = ckpt_dtype_is_block(out) ? ckpt_dtype_block_bytes(out) : j->block * unit_bytes(out);
    }
    j->shape = shape;
    j->fn = ckpt__cast_kernel(packed(t->dtype) ? CKPT_U8 : t->dtype, packed(t->dtype) ? CKPT_U8 : out);
    j->same_bytes = out == t->dtype;
    if (m->op) { /* the plan checked both casts exist (ckpt__plan_compute) */
        j->widen = ckpt__cast_kernel(t->dtype, CKPT_F32);
        j->fn = ckpt__cast_kernel(CKPT_F32, out);
        j->wide_size = j->block * 4;
        j->same_bytes = false;
    }
    /* The output is row-major over count[perm[i]]: each source axis's
     * stride is that of the output axis it becomes.  No product of extents
     * here or below (strides, offsets, box sizes) overflows an int64: every
     * tensor's nonzero axes hold at most 2^63-1 elements and bytes in its
     * dtype and in the one it is cast to (ckpt__tensor_size, checked where
     * shapes come in: formats, the writer, casts), and a slice's extents
     * lie within its tensor's. */
    int64_t s = 1;
    for (uint32_t i = n; i-- > 0;) j->dst_stride[j->perm[i]] = s, s *= (int64_t)j->count[j->perm[i]];
    j->nbytes = (uint64_t)s * j->out_size;
    if (n == 0) j->nbytes = j->out_size;
    bool deflate = false;
    for (uint32_t k = 0; k < j->npieces; k++) deflate |= j->pieces[k].record_size != 0;
    j->serial = deflate || m->sink == CKPT__SINK_HASH;
    /* Memory takes boxes cut along the file's order (long reads, scattered
     * writes); a writer or a hash, along the output's (contiguous output). */
    if (m->sink == CKPT__SINK_MEMORY && n) piece_order(j, &j->pieces[0], j->order);
    else memcpy(j->order, j->perm, n * sizeof *j->order);
}

/* Whether the whole slice is one run of a dense, stored, little-endian
 * piece of a local file, and the output its very bytes.  Not in direct
 * mode: the kernel's copy goes through the page cache. */
static bool one_file_run(const ckpt_catalog *c, const job *j) {
    const ckpt__piece *p = &j->pieces[0];
    if (j->npieces != 1 || !j->same_bytes || p->strides || p->record_size || p->big_endian) return false;
    unsigned caps = ckpt__catalog_source(c, p->file)->caps;
    if (!(caps & CKPT__SRC_FD) || (caps & CKPT__SRC_DIRECT)) return false;
    for (uint32_t i = 0; i < j->n; i++)
        if (j->perm[i] != i) return false;
    ckpt__runs r;
    uint64_t buf[CKPT_MAX_DIMS];
    ckpt__runs_plan(&r, j->n, piece_count(j, p, buf), NULL, j->count, NULL, false);
    return r.runs <= 1;
}

/* Whether every box of a move into memory is read straight into place
 * from remote sources (no bounce): a remote read is one batch of range
 * requests that the source sends in parallel, so larger boxes keep more
 * of them in flight — and cost no memory. */
static bool remote_straight(const ckpt_catalog *c, const job *j) {
    if (j->m->sink != CKPT__SINK_MEMORY || !j->same_bytes) return false;
    for (uint32_t i = 0; i < j->n; i++)
        if (j->perm[i] != i) return false;
    for (uint32_t k = 0; k < j->npieces; k++) {
        const ckpt__piece *p = &j->pieces[k];
        const ckpt__source *src = ckpt__catalog_source(c, p->file);
        if (p->strides || p->record_size || p->big_endian || src->fd >= 0 || !(src->caps & CKPT__SRC_REMOTE))
            return false;
    }
    return true;
}

/* Whether every box of a move into memory copies runs of local files read
 * with O_DIRECT: such runs stream through the bounce buffer's slots
 * (direct_copy_run), so a box need not fit the buffer, and a larger one
 * keeps the thread's reads in flight for longer before they drain at its
 * end (8 GB cold into touched memory on a 2-vCPU VM, 5 alternating rounds:
 * 2.79 s median with 8 MiB boxes, 2.73 s with 32 MiB; fio's best on the
 * same disk was 2.9 GB/s, so this is within the device's ceiling). */
static bool direct_stream(const ckpt_catalog *c, const file_state *files, const job *j) {
    if (j->m->sink != CKPT__SINK_MEMORY || !j->same_bytes) return false;
    for (uint32_t i = 0; i < j->n; i++)
        if (j->perm[i] != i) return false;
    for (uint32_t k = 0; k < j->npieces; k++) {
        const ckpt__piece *p = &j->pieces[k];
        if (p->strides || p->record_size || p->big_endian || files[p->file].dfd < 0 ||
            !(ckpt__catalog_source(c, p->file)->caps & CKPT__SRC_FD))
            return false;
    }
    return true;
}

/* The piece that holds a whole box as one dense, stored, little-endian
 * run of a local file, and the run's offset; NULL when there is none
 * (pieces tile the tensor, so at most one can hold the box). */
static const ckpt__piece *box_run(ckpt_catalog *c, const job *j, const uint64_t *bstart, const uint64_t *bcount,
                                  uint64_t *offset) {
    for (uint32_t k = 0; k < j->npieces; k++) {
        const ckpt__piece *p = &j->pieces[k];
        const uint64_t *pc = p->count ? p->count : j->shape;
        bool inside = true;
        for (uint32_t a = 0; a < j->n && inside; a++) {
            uint64_t ps = p->start ? p->start[a] : 0;
            inside = bstart[a] >= ps && bstart[a] + bcount[a] <= ps + pc[a];
        }
        if (!inside) continue;
        if (p->strides || p->record_size || p->big_endian || !(ckpt__catalog_source(c, p->file)->caps & CKPT__SRC_FD))
            return NULL;
        ckpt__runs r;
        ckpt__runs_plan(&r, j->n, pc, NULL, bcount, NULL, false);
        if (r.runs > 1) return NULL;
        int64_t first = 0, s = 1;
        for (uint32_t a = j->n; a-- > 0;) {
            first += (int64_t)(bstart[a] - (p->start ? p->start[a] : 0)) * s;
            s *= (int64_t)pc[a];
        }
        *offset = p->offset + (uint64_t)first * j->in_size;
        return p;
    }
    return NULL;
}

/* A box of a box_copy job that crosses from one piece into the next along
 * the axis boxes are cut on (a Shard(0) chunk's last rows and the next
 * chunk's first): its part in each piece, each one run of a local file.
 * Returns how many, or 0 when some part is not one run of one piece (the
 * box then goes through the bounce buffer).  Pieces tile the tensor, so
 * the parts together are the box. */
enum { BOX_PARTS_MAX = 16 };
typedef struct box_part {
    const ckpt__piece *piece;
    uint64_t offset;   /* the run's, in the piece's file */
    uint64_t at;       /* bytes into the box's output */
    uint64_t bytes;
} box_part;

static size_t box_parts(ckpt_catalog *c, const job *j, const uint64_t *bstart, const uint64_t *bcount,
                        box_part *parts) {
    uint32_t s = j->order[j->split];
    uint64_t inner = j->out_size; /* output bytes of one index of axis s in the box */
    for (uint32_t a = s + 1; a < j->n; a++) inner *= bcount[a];
    uint64_t sub_start[CKPT_MAX_DIMS], sub_count[CKPT_MAX_DIMS], covered = 0;
    size_t n = 0;
    for (uint32_t k = 0; k < j->npieces; k++) {
        const ckpt__piece *p = &j->pieces[k];
        const uint64_t *pc = p->count ? p->count : j->shape;
        uint64_t ps = p->start ? p->start[s] : 0;
        uint64_t lo = bstart[s] > ps ? bstart[s] : ps;
        uint64_t hi = bstart[s] + bcount[s] < ps + pc[s] ? bstart[s] + bcount[s] : ps + pc[s];
        if (lo >= hi) continue;
        memcpy(sub_start, bstart, j->n * sizeof *sub_start);
        memcpy(sub_count, bcount, j->n * sizeof *sub_count);
        sub_start[s] = lo, sub_count[s] = hi - lo;
        uint64_t offset;
        const ckpt__piece *run = box_run(c, j, sub_start, sub_count, &offset);
        if (!run || n == BOX_PARTS_MAX) return 0;
        parts[n++] = (box_part){run, offset, (lo - bstart[s]) * inner, (hi - lo) * inner};
        covered += hi - lo;
    }
    return covered == bcount[s] ? n : 0;
}

/* Cuts the slice along `order`: the outermost axes one index at a time,
 * then rows of the axis where a chunk's worth of inner units fits. */
static void plan_boxes(job *j, uint64_t limit_units) {
    if (j->n == 0) {
        j->split = 0, j->rows = 1, j->per_outer = 1, j->boxes = 1;
        return;
    }
    uint64_t numel;
    ckpt__shape_numel(j->n, j->count, &numel); /* a slice of a checked shape: within bounds */
    if (numel == 0) {
        j->boxes = 0;
        return;
    }
    uint64_t inner = 1;
    uint32_t k = j->n - 1;
    while (k > 0 && inner * j->count[j->order[k]] <= limit_units) inner *= j->count[j->order[k--]];
    uint64_t rows = limit_units / inner;
    if (rows == 0) rows = 1;
    if (rows > j->count[j->order[k]]) rows = j->count[j->order[k]];
    uint64_t outer = 1;
    for (uint32_t d = 0; d < k; d++) outer *= j->count[j->order[d]];
    j->split = k, j->rows = rows, j->per_outer = (j->count[j->order[k]] + rows - 1) / rows;
    j->boxes = outer * j->per_outer;
}

/* Box i of a job: its start and extent per source axis (absolute), and
 * its origin in the output, in output units. */
static void box_of(const job *j, uint64_t i, uint64_t *bstart, uint64_t *bcount, uint64_t *origin) {
    uint64_t outer = i / j->per_outer, piece = i % j->per_outer;
    int64_t off = 0;
    for (uint32_t pos = j->n; pos-- > 0;) {
        uint32_t a = j->order[pos];
        uint64_t rel;
        if (pos > j->split) {
            rel = 0, bcount[a] = j->count[a];
        } else if (pos == j->split) {
            rel = piece * j->rows;
            bcount[a] = j->count[a] - rel < j->rows ? j->count[a] - rel : j->rows;
        } else {
            rel = outer % j->count[a];
            outer /= j->count[a];
            bcount[a] = 1;
        }
        bstart[a] = j->start[a] + rel;
        off += (int64_t)rel * j->dst_stride[a];
    }
    *origin = (uint64_t)off;
}

/* ---- the run ------------------------------------------------------------------ */

typedef struct engine {
    ckpt_catalog *catalog;
    const ckpt__engine_options *o;
    ckpt__move *moves;
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
    crc_track *tracks;
    size_t track_count;
    uint64_t *axes;          /* the jobs' per-axis arrays, 5 per axis */
    bool any_direct;         /* a file is read with O_DIRECT */
    bool need_bounce;        /* some task converts, scatters or reads O_DIRECT */
    bool need_slot;          /* some move goes to a writer or a hash */
    struct worker *workers;  /* threads of them, started of them allocated */
    size_t threads, started;
} engine;

typedef struct worker {
    engine *g;
    ckpt__reader reader;
    unsigned char *bounce; /* reads that convert land here */
    size_t bounce_cap;
    unsigned char *slot;   /* a box's output, for writers and hashes */
    struct {               /* a writer box streamed out as it converts (convert_out); writer NULL: gathered in the slot */
        ckpt_writer *writer;
        size_t index;
        uint64_t at;       /* the writer offset of the slot's first byte */
        bool done;         /* the box went out this way */
    } out;
    float *wide;           /* an elementwise rule's float32 values (grown as needed) */
    size_t wide_cap;
    ckpt__read_req reqs[BATCH];
    size_t nreq;
    ckpt__inflater *inflater;
    ckpt_error err;
    bool caller;           /* the calling thread: reports progress */
    uint64_t bytes_needed, inflated_in, last_report;
} worker;

static ckpt_status flush(worker *w, ckpt_error *err) {
    if (!w->nreq) return CKPT_OK;
    ckpt_status st = ckpt__reader_run(&w->reader, w->reqs, w->nreq, err);
    w->nreq = 0;
    return st;
}

/* Queues a read, in pieces when io_uring can overlap them. */
static ckpt_status queue_read(worker *w, const job *j, ckpt__source *src, int fd, uint64_t off, uint64_t len,
                              unsigned char *dst, ckpt_error *err) {
    uint64_t piece = w->reader.uring && fd >= 0 ? URING_PIECE : len;
    if (piece == 0) piece = 1;
    for (uint64_t at = 0; at < len; at += piece) {
        if (w->nreq == BATCH) {
            ckpt_status st = flush(w, err);
            if (st) return st;
        }
        uint64_t n = len - at < piece ? len - at : piece;
        w->reqs[w->nreq++] = (ckpt__read_req){src, fd, off + at, n, n, dst + at, j->name};
    }
    return CKPT_OK;
}

static uint64_t align_down(uint64_t v, uint64_t a) { return v / a * a; }
static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* Reads [off, off + len) with O_DIRECT into an aligned part of the bounce
 * buffer; *data is where byte `off` landed. */
static ckpt_status direct_into_bounce(worker *w, const job *j, ckpt__source *src, const file_state *f, uint64_t off,
                                      uint64_t len, unsigned char **data, ckpt_error *err) {
    uint64_t a = f->align, lo = align_down(off, a), hi = align_up(off + len, a);
    ckpt_status st = flush(w, err);
    if (st || (st = queue_read(w, j, src, f->dfd, lo, hi - lo, w->bounce, err))) return st;
    for (size_t i = 0; i < w->nreq; i++) { /* the file may end inside the last aligned block */
        ckpt__read_req *q = &w->reqs[i];
        uint64_t end = off + len;
        q->need = q->offset >= end ? 0 : (end - q->offset < q->len ? end - q->offset : q->len);
    }
    if ((st = flush(w, err))) return st;
    *data = w->bounce + (off - lo);
    return CKPT_OK;
}

/* Where the pieces of a direct stream go: file offset `off` lands at dst. */
typedef struct stream_copy {
    uint64_t off;
    unsigned char *dst;
} stream_copy;

static void copy_out_piece(uint64_t at, const unsigned char *data, uint64_t n, void *user) {
    const stream_copy *c = user;
    memcpy(c->dst + (at - c->off), data, (size_t)n);
}

/* A large run that needs no conversion, with O_DIRECT: aligned blocks go
 * straight into the destination when it lines up with the file, else
 * stream through the bounce buffer's slots, each copied out as it lands
 * while the others stay in flight; the unaligned ends through the page
 * cache. */
static ckpt_status direct_copy_run(worker *w, const job *j, ckpt__source *src, const file_state *f, uint64_t off,
                                   uint64_t len, unsigned char *dst, ckpt_error *err) {
    uint64_t a = f->align, mid_lo = align_up(off, a), mid_hi = align_down(off + len, a);
    ckpt_status st;
    if (mid_hi <= mid_lo) return queue_read(w, j, src, src->fd, off, len, dst, err);
    if ((st = queue_read(w, j, src, src->fd, off, mid_lo - off, dst, err))) return st;
    if ((st = queue_read(w, j, src, src->fd, mid_hi, off + len - mid_hi, dst + (mid_hi - off), err))) return st;
    unsigned char *mid = dst + (mid_lo - off);
    if ((uintptr_t)mid % a == 0) return queue_read(w, j, src, f->dfd, mid_lo, mid_hi - mid_lo, mid, err);
    if ((st = flush(w, err))) return st;
    uint64_t piece = URING_PIECE;
    size_t slots = (size_t)(w->bounce_cap / piece);
    if (slots == 0) slots = 1, piece = align_down(w->bounce_cap, a);
    stream_copy c = {off, dst};
    return ckpt__reader_stream(&w->reader, src, f->dfd, mid_lo, mid_hi - mid_lo, w->bounce, slots, piece, j->name,
                               copy_out_piece, &c, err);
}

/* The worker's inflater, on the DEFLATE record at `record` of src (kept
 * when it already reads it: it resumes when reads go forward, as a serial
 * job's do). */
static ckpt_status inflater_for(worker *w, ckpt__source *src, uint64_t record, uint64_t record_size, ckpt_error *err) {
    if (ckpt__inflater_is(w->inflater, src, record)) return CKPT_OK;
    if (w->inflater) w->inflated_in += ckpt__inflater_bytes_in(w->inflater);
    ckpt__inflater_free(w->inflater);
    w->inflater = NULL;
    return ckpt__inflater_create(src, record, record_size, &w->inflater, err);
}

/* Inflated bytes of a DEFLATE piece, through the worker's inflater. */
static ckpt_status inflate_read(worker *w, const job *j, ckpt__source *src, const ckpt__piece *p, uint64_t off,
                                uint64_t len, unsigned char *dst, ckpt_error *err) {
    ckpt_status st = inflater_for(w, src, p->record, p->record_size, err);
    return st ? st : ckpt__inflater_read(w->inflater, off, dst, len, j->name, err);
}

/* ---- CRC-32s of members (see engine.h) ------------------------------------------ */

/* A member read in more scattered segments than this is not followed: runs
 * under 1 KiB on average (a narrow tensor transposed in many boxes, a
 * storage shown through a column); 24 bytes a segment, at most 2.3% of
 * the member. */
static uint64_t max_segments(const ckpt__recorded_crc *r) { return 1024 + r->size / 1024; }

static void track_add(engine *g, crc_track *t, const crc_segment *seg) {
    pthread_mutex_lock(&g->lock);
    if (!t->dropped && t->count >= max_segments(t->r)) { /* too scattered: the member goes unchecked */
        t->dropped = true;
        free(t->segs);
        t->segs = NULL, t->count = t->cap = 0;
    }
    crc_segment *grown = t->dropped ? NULL : ckpt__grow(t->segs, t->count, &t->cap, sizeof *grown, 4);
    if (grown) t->segs = grown, t->segs[t->count++] = *seg;
    else if (!t->dropped) t->oom = t->dropped = true;
    pthread_mutex_unlock(&g->lock);
}

/* The CRC-32s of the runs a box of a checked job read: run i lies at file
 * offset base + its element offset, its bytes in the destination (copied)
 * or at dense_in + i * run_bytes (read to convert).  Runs that follow each
 * other in the file make one segment. */
static void note_runs(worker *w, const job *j, const ckpt__runs *r, uint64_t base, uint64_t run_bytes,
                      const unsigned char *copied, const unsigned char *dense_in) {
    const ckpt__recorded_crc *m = j->track->r;
    uint64_t idx[CKPT_MAX_DIMS] = {0};
    int64_t elem = 0, unit = 0;
    crc_segment cur = {0, 0, 0};
    for (uint64_t i = 0; i < r->runs; i++) {
        ckpt__runs_next(r, i, idx, &elem, &unit);
        uint64_t off = base + (uint64_t)(elem * (int64_t)j->in_size);
        const unsigned char *data = copied ? copied + unit * (int64_t)j->out_size : dense_in + i * run_bytes;
        if (off < m->offset || off - m->offset > m->size || m->size - (off - m->offset) < run_bytes) continue;
        uint64_t at = off - m->offset;
        if (cur.len && at != cur.at + cur.len) {
            track_add(w->g, j->track, &cur);
            cur.len = 0;
        }
        if (!cur.len) cur = (crc_segment){at, 0, 0};
        cur.crc = ckpt__crc32(cur.crc, data, (size_t)run_bytes);
        cur.len += run_bytes;
    }
    if (cur.len) track_add(w->g, j->track, &cur);
}

static int cmp_segment(const void *a, const void *b) {
    const crc_segment *x = a, *y = b;
    return x->at < y->at ? -1 : x->at > y->at ? 1 : x->len < y->len ? -1 : x->len > y->len;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static size_t point_of(const uint64_t *points, size_t n, uint64_t v) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (points[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && points[lo] == v ? lo : SIZE_MAX;
}

/* The CRC-32 of the member's bytes [0, size) from the segments, chained in
 * offset order from its start or from the end of its head (segments may
 * repeat or overlap, as tied tensors' do: any chain to the end gives it);
 * false when no chain covers the member. */
static bool chain_segments(crc_track *t, uint32_t *crc_out, bool *oom) {
    const ckpt__recorded_crc *r = t->r;
    *oom = false;
    if (r->head == r->size) {
        *crc_out = r->head_crc32;
        return true;
    }
    qsort(t->segs, t->count, sizeof *t->segs, cmp_segment);
    size_t n = 0;
    uint64_t *points = ckpt__malloc((2 * t->count + 2) * sizeof *points);
    uint32_t *crc = ckpt__malloc((2 * t->count + 2) * sizeof *crc);
    bool *reached = ckpt__calloc(2 * t->count + 2, sizeof *reached);
    bool covered = false;
    if (!points || !crc || !reached) {
        *oom = true;
    } else {
        points[n++] = 0;
        points[n++] = r->head;
        for (size_t i = 0; i < t->count; i++) points[n++] = t->segs[i].at, points[n++] = t->segs[i].at + t->segs[i].len;
        qsort(points, n, sizeof *points, cmp_u64);
        size_t u = 0;
        for (size_t i = 0; i < n; i++)
            if (!u || points[i] != points[u - 1]) points[u++] = points[i];
        n = u;
        size_t h = point_of(points, n, r->head);
        reached[0] = true, crc[0] = 0; /* the CRC-32 of no bytes */
        reached[h] = true, crc[h] = r->head ? r->head_crc32 : 0;
        /* In start order: every segment ending where one starts was seen. */
        for (size_t i = 0; i < t->count; i++) {
            const crc_segment *g = &t->segs[i];
            size_t a = point_of(points, n, g->at), b = point_of(points, n, g->at + g->len);
            if (!reached[a] || reached[b]) continue;
            reached[b] = true;
            crc[b] = (uint32_t)crc32_combine64(crc[a], g->crc, (z_off64_t)g->len);
        }
        size_t end = point_of(points, n, r->size);
        covered = end != SIZE_MAX && reached[end];
        if (covered) *crc_out = crc[end];
    }
    free(points);
    free(crc);
    free(reached);
    return covered;
}

static ckpt_status crc_mismatch(const engine *g, const ckpt__recorded_crc *r, uint32_t file, uint32_t number,
                                const char *tensor, uint32_t got, ckpt_error *err) {
    if (!tensor) tensor = ckpt__catalog_crc_tensor(g->catalog, number);
    return ckpt__fail(err, CKPT__D(CHECKSUM), ckpt_catalog_file_path(g->catalog, file), tensor, (int64_t)r->offset,
                      "ZIP member '%s' has CRC-32 %08x; the archive records %08x: its bytes changed", r->name, got,
                      r->crc32);
}

/* Every task that reads the member is done: its CRC-32, when the segments
 * cover it. */
static ckpt_status check_track(engine *g, crc_track *t, ckpt_error *err) {
    uint32_t got = 0;
    bool oom = t->oom, covered = !t->dropped && chain_segments(t, &got, &oom);
    if (oom) return ckpt__oom(err, ckpt_catalog_file_path(g->catalog, t->file), t->r->name);
    if (!covered || got == t->r->crc32) return CKPT_OK;
    return crc_mismatch(g, t->r, t->file, t->number, t->tensor, got, err);
}

/* Short runs that copy straight into the destination (the columns of a
 * row-major tensor a dim-1 slice takes): a read per run costs a request
 * each — a syscall, an HTTP range — for a few KiB.  Runs close together in
 * the file are read as one span into the bounce buffer instead and gathered
 * from there.  Spans go through the page cache, never O_DIRECT: the pages
 * between runs hold other ranks' or devices' columns, which other jobs read
 * from there rather than from the disk again.  From a file already in the
 * page cache (read without O_DIRECT), bridging long gaps measured no faster
 * (a rank of 4 along dim 1 of a 2 GB file: 0.31-0.36 s either way) and
 * copies every gap: only gaps up to a run long are bridged there. */
static ckpt_status read_runs_merged(worker *w, const job *j, ckpt__source *src, int fd, bool cached,
                                   const ckpt__runs *r, uint64_t base, uint64_t run_bytes, unsigned char *dst,
                                   ckpt_error *err) {
    uint64_t max_gap = cached && run_bytes < MERGE_GAP ? run_bytes : MERGE_GAP;
    uint64_t idx[CKPT_MAX_DIMS] = {0};
    int64_t elem = 0, unit = 0;
    ckpt_status st = CKPT_OK;
    for (uint64_t i = 0; i < r->runs && st == CKPT_OK;) {
        /* The group starts at run i (idx, elem, unit are its position). */
        uint64_t g_idx[CKPT_MAX_DIMS], first = i;
        memcpy(g_idx, idx, sizeof idx);
        int64_t g_elem = elem, g_unit = unit;
        uint64_t lo = base + (uint64_t)(elem * (int64_t)j->in_size), hi = lo + run_bytes;
        for (i++; i < r->runs; i++) {
            ckpt__runs_next(r, i, idx, &elem, &unit);
            uint64_t off = base + (uint64_t)(elem * (int64_t)j->in_size);
            if (off < hi || off - hi > max_gap || off + run_bytes - lo > w->bounce_cap) break;
            hi = off + run_bytes;
        }
        if (i - first == 1) { /* alone: straight into the destination, batched with the next */
            st = queue_read(w, j, src, fd, lo, run_bytes, dst + g_unit * (int64_t)j->out_size, err);
            continue;
        }
        if ((st = flush(w, err)) || (st = queue_read(w, j, src, fd, lo, hi - lo, w->bounce, err)) ||
            (st = flush(w, err)))
            break;
        for (uint64_t k = first; k < i; k++) {
            ckpt__runs_next(r, k - first ? k : 0, g_idx, &g_elem, &g_unit);
            uint64_t off = base + (uint64_t)(g_elem * (int64_t)j->in_size);
            memcpy(dst + g_unit * (int64_t)j->out_size, w->bounce + (off - lo), (size_t)run_bytes);
        }
    }
    if (st == CKPT_OK) st = flush(w, err);
    return st;
}

/* A gathered box of an elementwise rule's move: its units widened to
 * float32, the rule applied, then cast and scattered to dst.  The float32
 * buffer is the worker's, a few times the bounce buffer at most. */
static ckpt_status scatter_computed(worker *w, const job *j, const ckpt__runs *r, const unsigned char *dense_in,
                                    unsigned char *dst, ckpt_error *err) {
    size_t need = (size_t)r->units * j->wide_size;
    if (need > w->wide_cap) {
        float *grown = realloc(w->wide, need);
        if (!grown) return ckpt__oom(err, NULL, j->name);
        w->wide = grown, w->wide_cap = need;
    }
    j->widen(dense_in, w->wide, (size_t)r->units);
    ckpt__elementwise_apply(j->m->op, w->wide, (size_t)r->units * j->block);
    ckpt__scatter(j->fn, j->wide_size, j->out_size, (const unsigned char *)w->wide, r->n, r->count, dst, r->dst);
    return CKPT_OK;
}

/* Whether a converting box's output is one dense span in the order of its
 * gathered input, so that ckpt__scatter would be one call of the kernel. */
static bool dense_in_order(const ckpt__runs *r) {
    int64_t expect = 1;
    for (uint32_t d = r->n; d-- > 0;) {
        if (r->count[d] > 1 && r->dst[d] != expect) return false;
        expect *= (int64_t)r->count[d];
    }
    return true;
}

/* A gathered box converted into the slot's head and written to the
 * worker's writer a piece at a time, while it is in cache (dst is where the
 * box would have gone in the slot).  Pieces end on multiples of
 * CONVERT_PIECE in the output file, as ckpt__pwrite_full cuts its own (it
 * says why); the bytes of a unit that cross a piece's end wait in the slot
 * for the next piece. */
static ckpt_status convert_out(worker *w, const job *j, const unsigned char *in, uint64_t units, const unsigned char *dst,
                               ckpt_error *err) {
    uint64_t at = w->out.at + (uint64_t)(dst - w->slot), end = at + units * j->out_size, done = 0, held = 0;
    uint64_t phase = ckpt__writer_file_offset(w->out.writer, w->out.index, at) % CONVERT_PIECE;
    while (at < end) {
        uint64_t piece = CONVERT_PIECE - phase < end - at ? CONVERT_PIECE - phase : end - at;
        phase = 0;
        if (held < piece) { /* the units that complete the piece */
            uint64_t n = (piece - held + j->out_size - 1) / j->out_size;
            j->fn(in + done * j->in_size, w->slot + held, (size_t)n);
            done += n, held += n * j->out_size;
        }
        ckpt_status st = ckpt__writer_pwrite(w->out.writer, w->out.index, at, w->slot, (size_t)piece, err);
        if (st) return st;
        memmove(w->slot, w->slot + piece, (size_t)(held - piece));
        held -= piece, at += piece;
    }
    w->out.done = true;
    return CKPT_OK;
}

/* A box of one piece: rel/cnt in source axes relative to the piece; dst is
 * where the box's first unit goes, dst_stride the output strides. */
static ckpt_status read_piece(worker *w, const job *j, const ckpt__piece *p, const uint64_t *rel, const uint64_t *cnt,
                              unsigned char *dst, const int64_t *dst_stride, ckpt_error *err) {
    ckpt_catalog *c = w->g ? w->g->catalog : NULL;
    ckpt__source *src = ckpt__catalog_source(c, p->file);
    uint64_t pc_buf[CKPT_MAX_DIMS];
    const uint64_t *pc = piece_count(j, p, pc_buf);
    bool swap = p->big_endian && !packed(j->t->dtype) && (j->block > 1 || ckpt__swap_unit(j->t->dtype) > 1);
    bool copy = j->same_bytes && !swap;
    ckpt__runs r;
    ckpt__runs_plan(&r, j->n, pc, p->strides, cnt, dst_stride, copy);
    if (copy && !r.direct_ok) { /* a permuted destination: read long runs, then scatter */
        copy = false;
        ckpt__runs_plan(&r, j->n, pc, p->strides, cnt, dst_stride, false);
    }
    if (r.runs == 0) return CKPT_OK;
    /* The file offset of the box's first unit. */
    int64_t first = 0, dense[CKPT_MAX_DIMS];
    const int64_t *strides = p->strides;
    if (!strides) {
        int64_t s = 1;
        for (uint32_t a = j->n; a-- > 0;) dense[a] = s, s *= (int64_t)pc[a];
        strides = dense;
    }
    for (uint32_t a = 0; a < j->n; a++) first += (int64_t)rel[a] * strides[a];
    uint64_t base = p->offset + (uint64_t)first * j->in_size, run_bytes = r.run_units * j->in_size;
    w->bytes_needed += r.runs * run_bytes;
    const file_state *f = w->g && w->g->files ? &w->g->files[p->file] : NULL;
    bool direct = f && f->dfd >= 0 && !p->record_size;
    int fd = src->caps & CKPT__SRC_FD ? src->fd : -1;
    ckpt_status st = CKPT_OK;
    unsigned char *dense_in = w->bounce; /* where a converting box's units gather, in physical order */
    if (!copy && direct && r.runs == 1 && run_bytes >= DIRECT_MIN) {
        if ((st = direct_into_bounce(w, j, src, f, base, run_bytes, &dense_in, err))) return st;
    } else if (copy && r.runs > 1 && run_bytes < MERGE_RUN && !p->record_size && w->bounce &&
               w->bounce_cap >= 4 * run_bytes) {
        if ((st = read_runs_merged(w, j, src, fd, fd >= 0 && !direct, &r, base, run_bytes, dst, err))) return st;
    } else {
        uint64_t idx[CKPT_MAX_DIMS] = {0};
        int64_t elem = 0, unit = 0;
        for (uint64_t i = 0; i < r.runs && st == CKPT_OK; i++) {
            ckpt__runs_next(&r, i, idx, &elem, &unit);
            uint64_t off = base + (uint64_t)(elem * (int64_t)j->in_size);
            unsigned char *target = copy ? dst + unit * (int64_t)j->out_size : w->bounce + i * run_bytes;
            if (p->record_size) st = inflate_read(w, j, src, p, off, run_bytes, target, err);
            else if (copy && direct && run_bytes >= DIRECT_MIN) st = direct_copy_run(w, j, src, f, off, run_bytes, target, err);
            else st = queue_read(w, j, src, fd, off, run_bytes, target, err);
        }
        if (st == CKPT_OK) st = flush(w, err);
        if (st) return st;
    }
    if (j->track) note_runs(w, j, &r, base, run_bytes, copy ? dst : NULL, dense_in);
    if (copy) return CKPT_OK;
    if (swap) ckpt__swap_dtype(j->t->dtype, dense_in, r.units * j->in_size);
    if (j->m && j->m->op) return scatter_computed(w, j, &r, dense_in, dst, err);
    if (w->out.writer && r.n && dense_in_order(&r)) return convert_out(w, j, dense_in, r.units, dst, err);
    ckpt__scatter(j->fn, j->in_size, j->out_size, dense_in, r.n, r.count, dst, r.dst);
    return CKPT_OK;
}

/* A box of the slice (absolute start, extent per source axis) into dst,
 * from every piece it overlaps. */
static ckpt_status read_box(worker *w, const job *j, const uint64_t *bstart, const uint64_t *bcount, unsigned char *dst,
                            const int64_t *dst_stride, ckpt_error *err) {
    for (uint32_t k = 0; k < j->npieces; k++) {
        const ckpt__piece *p = &j->pieces[k];
        uint64_t rel[CKPT_MAX_DIMS], cnt[CKPT_MAX_DIMS];
        int64_t off = 0;
        bool empty = false;
        for (uint32_t a = 0; a < j->n && !empty; a++) {
            uint64_t div = a == j->n - 1 ? j->block : 1; /* block types: the innermost axis in blocks */
            uint64_t ps = p->start ? p->start[a] / div : 0, pe = ps + (p->count ? p->count[a] / div : j->shape[a]);
            uint64_t lo = bstart[a] > ps ? bstart[a] : ps, hi = bstart[a] + bcount[a] < pe ? bstart[a] + bcount[a] : pe;
            if (hi <= lo) empty = true;
            rel[a] = lo - ps, cnt[a] = hi - lo;
            off += (int64_t)(lo - bstart[a]) * dst_stride[a];
        }
        if (empty) continue;
        ckpt_status st = read_piece(w, j, p, rel, cnt, dst + off * (int64_t)j->out_size, dst_stride, err);
        if (st) return st;
    }
    return CKPT_OK;
}

/* A box's output laid dense, in output order, into `slot`. */
static ckpt_status read_box_dense(worker *w, const job *j, const uint64_t *bstart, const uint64_t *bcount,
                                  unsigned char *slot, ckpt_error *err) {
    int64_t slot_stride[CKPT_MAX_DIMS], s = 1;
    for (uint32_t k = j->n; k-- > 0;) slot_stride[j->perm[k]] = s, s *= (int64_t)bcount[j->perm[k]];
    return read_box(w, j, bstart, bcount, slot, slot_stride, err);
}

/* Bytes [off, off + len) of a file, unchanged, through a slot to the
 * move's dst + at. */
static ckpt_status stage_file_bytes(worker *w, const job *j, ckpt__source *src, uint64_t off, uint64_t at,
                                    uint64_t len, ckpt_error *err) {
    ckpt__stage *stage = j->m->stage;
    void *slot;
    ckpt_status st = stage->acquire(stage, &slot, err);
    if (st) return st;
    w->bytes_needed += len;
    if ((st = queue_read(w, j, src, src->fd, off, len, slot, err)) == CKPT_OK) st = flush(w, err);
    if (st) {
        stage->abandon(stage, slot);
        return st;
    }
    return stage->submit(stage, slot, j->m->dst, at, len, j->name, err);
}

/* A STAGE box that is one run of a local file, unchanged: its 4 KiB-aligned
 * middle read by the stage straight to the destination (GPUDirect
 * Storage), its unaligned head and tail through slots.  *done false: the
 * box is not such a run, or the stage does not read this file itself. */
static ckpt_status stage_direct_box(worker *w, const job *j, const uint64_t *bstart, const uint64_t *bcount,
                                    uint64_t at, uint64_t bytes, bool *done, ckpt_error *err) {
    *done = false;
    uint64_t off;
    const ckpt__piece *run = box_run(w->g->catalog, j, bstart, bcount, &off);
    const file_state *f = run ? &w->g->files[run->file] : NULL;
    if (!f || f->sfd < 0) return CKPT_OK;
    uint64_t lo = align_up(off, STAGE_DIRECT_ALIGN), hi = align_down(off + bytes, STAGE_DIRECT_ALIGN);
    if (hi <= lo || hi - lo < STAGE_DIRECT_MIN) return CKPT_OK;
    ckpt__source *src = ckpt__catalog_source(w->g->catalog, run->file);
    ckpt__stage *stage = j->m->stage;
    ckpt_status st = stage->read_direct(stage, f->sfd, src->name, lo, j->m->dst, at + (lo - off), hi - lo, j->name,
                                        done, err);
    if (st || !*done) return st;
    w->bytes_needed += hi - lo;
    ckpt__source_count(src, hi - lo);
    if (lo > off && (st = stage_file_bytes(w, j, src, off, at, lo - off, err))) return st;
    if (off + bytes > hi) st = stage_file_bytes(w, j, src, hi, at + (hi - off), off + bytes - hi, err);
    return st;
}

/* A box of a STAGE move: read by the stage itself where it can
 * (stage_direct_box), else into a slot the stage lends, then handed back
 * to it with where the bytes go. */
static ckpt_status stage_box(worker *w, const job *j, const uint64_t *bstart, const uint64_t *bcount, uint64_t at,
                             uint64_t bytes, ckpt_error *err) {
    ckpt__stage *stage = j->m->stage;
    bool done = false;
    ckpt_status st = j->stage_direct ? stage_direct_box(w, j, bstart, bcount, at, bytes, &done, err) : CKPT_OK;
    if (st || done) return st;
    void *slot;
    st = stage->acquire(stage, &slot, err);
    if (st) return st;
    if ((st = read_box_dense(w, j, bstart, bcount, slot, err))) {
        stage->abandon(stage, slot);
        return st;
    }
    return stage->submit(stage, slot, j->m->dst, at, bytes, j->name, err);
}

/* Box i of a job into its sink. */
/* A hash move's states: the whole tensor's, and its chunks' (chunks.state NULL: none). */
typedef struct hashes {
    XXH3_state_t *whole;
    ckpt__chunk_hash chunks;
} hashes;

static ckpt_status run_box(worker *w, job *j, uint64_t i, hashes *hash, ckpt_error *err) {
    const ckpt__engine_options *o = w->g->o;
    ckpt__move *m = j->m;
    uint64_t bstart[CKPT_MAX_DIMS], bcount[CKPT_MAX_DIMS], origin, units = 1;
    box_of(j, i, bstart, bcount, &origin);
    for (uint32_t a = 0; a < j->n; a++) units *= bcount[a];
    uint64_t at = origin * j->out_size, bytes = units * j->out_size;
    if (m->sink == CKPT__SINK_WRITER) at += m->writer_at;
    if (m->sink == CKPT__SINK_MEMORY)
        return read_box(w, j, bstart, bcount, (unsigned char *)m->dst + at, j->dst_stride, err);
    if (m->sink == CKPT__SINK_STAGE) return stage_box(w, j, bstart, bcount, at, bytes, err);
    if (j->kernel_copy) {
        const ckpt__piece *p = &j->pieces[0];
        int64_t dense[CKPT_MAX_DIMS], first = 0, s = 1;
        for (uint32_t a = j->n; a-- > 0;) dense[a] = s, s *= (int64_t)j->shape[a];
        for (uint32_t a = 0; a < j->n; a++) first += (int64_t)bstart[a] * dense[a];
        w->bytes_needed += bytes;
        ckpt__source *src = ckpt__catalog_source(w->g->catalog, p->file);
        ckpt_status st = ckpt__writer_pcopy(o->writer, m->writer_index, at, src, p->offset + (uint64_t)first * j->in_size,
                                            bytes, err);
        if (st == CKPT_OK) ckpt__source_count(src, bytes);
        return st;
    }
    uint64_t run_at;
    const ckpt__piece *run = j->box_copy ? box_run(w->g->catalog, j, bstart, bcount, &run_at) : NULL;
    box_part parts[BOX_PARTS_MAX];
    size_t nparts = run ? 1 : j->box_copy ? box_parts(w->g->catalog, j, bstart, bcount, parts) : 0;
    if (run) parts[0] = (box_part){run, run_at, 0, bytes};
    if (nparts) { /* row blocks of chunks (DCP): the kernel copies them */
        w->bytes_needed += bytes;
        for (size_t k = 0; k < nparts; k++) {
            ckpt__source *src = ckpt__catalog_source(w->g->catalog, parts[k].piece->file);
            ckpt_status st = ckpt__writer_pcopy(o->writer, m->writer_index, at + parts[k].at, src, parts[k].offset,
                                                parts[k].bytes, err);
            if (st) return st;
            ckpt__source_count(src, parts[k].bytes);
        }
        return CKPT_OK;
    }
    /* A writer or a hash takes the box's output contiguous: dense in the
     * slot, in output order; a box of one piece that converts goes to a
     * writer as it converts instead (convert_out). */
    if (m->sink == CKPT__SINK_WRITER && j->npieces == 1 && w->g->chunk >= CONVERT_PIECE + j->out_size)
        w->out.writer = o->writer, w->out.index = m->writer_index, w->out.at = at, w->out.done = false;
    ckpt_status st = read_box_dense(w, j, bstart, bcount, w->slot, err);
    bool streamed = w->out.writer && w->out.done;
    w->out.writer = NULL;
    if (st || streamed) return st;
    if (m->sink == CKPT__SINK_HASH) {
        XXH3_64bits_update(hash->whole, w->slot, (size_t)bytes);
        if (hash->chunks.state) ckpt__chunk_hash_update(&hash->chunks, w->slot, (size_t)bytes);
        return CKPT_OK;
    }
    return ckpt__writer_pwrite(o->writer, m->writer_index, at, w->slot, (size_t)bytes, err);
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

/* Progress, from the calling thread only (callbacks may not be
 * thread-safe). */
static ckpt_status report(worker *w, uint64_t bytes, ckpt_error *err) {
    engine *g = w->g;
    uint64_t done = atomic_fetch_add(&g->done_bytes, bytes) + bytes;
    if (!w->caller || !g->o->progress || done - w->last_report < PROGRESS_STEP) return CKPT_OK;
    w->last_report = done;
    if (g->o->progress(done, g->total_bytes, g->o->user))
        return ckpt__fail(err, CKPT_E_CANCELLED, NULL, NULL, -1, "cancelled by the progress callback");
    return CKPT_OK;
}

/* The job whose tasks hold `task`. */
static job *job_of(engine *g, uint64_t task) {
    size_t lo = 0, hi = g->job_count;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (g->jobs[mid].first_task <= task) lo = mid;
        else hi = mid;
    }
    return &g->jobs[lo];
}

/* A task of a member job: a chunk of a stored member (its CRC-32 a
 * segment), or the whole of a DEFLATE one. */
static ckpt_status run_member_task(worker *w, job *j, uint64_t task, ckpt_error *err) {
    engine *g = w->g;
    const ckpt__recorded_crc *r = j->member;
    uint32_t number = j->crc - 1, file;
    ckpt__catalog_crc(g->catalog, number, &file);
    ckpt__source *src = ckpt__catalog_source(g->catalog, file);
    ckpt_status st;
    if (r->deflate) {
        st = inflater_for(w, src, r->offset, r->stored_size, err);
        if (st == CKPT_OK) st = ckpt__inflater_check(w->inflater, r->size, r->crc32, r->name, NULL, err);
        if (st) return ckpt__error_in_tensor(err, st, ckpt__catalog_crc_tensor(g->catalog, number));
        return report(w, r->size, err);
    }
    uint64_t at = (task - j->first_task) * g->chunk, len = r->size - at < g->chunk ? r->size - at : g->chunk;
    int fd = src->caps & CKPT__SRC_FD ? src->fd : -1;
    w->bytes_needed += len;
    if ((st = queue_read(w, j, src, fd, r->offset + at, len, w->bounce, err)) || (st = flush(w, err))) return st;
    crc_segment seg = {at, len, ckpt__crc32(0, w->bounce, (size_t)len)};
    track_add(g, j->track, &seg);
    return report(w, len, err);
}

/* A hash move's states, started. */
static ckpt_status start_hashes(const ckpt__move *m, uint64_t nbytes, const char *name, hashes *h, ckpt_error *err) {
    if (!(h->whole = XXH3_createState()) || XXH3_64bits_reset(h->whole) == XXH_ERROR) {
        XXH3_freeState(h->whole);
        h->whole = NULL;
        return ckpt__oom(err, NULL, "a hash");
    }
    if (!m->chunk_digests) return CKPT_OK;
    ckpt_status st = ckpt__chunk_hash_init(&h->chunks, nbytes, m->chunk_bytes, m->chunk_phase,
                                           m->chunk_digests, name, err);
    if (st) XXH3_freeState(h->whole), h->whole = NULL;
    return st;
}

/* A task: one box of a parallel job, or every box of a serial one. */
static ckpt_status run_task(worker *w, job *j, uint64_t task, ckpt_error *err) {
    engine *g = w->g;
    ckpt_status st = CKPT_OK;
    if (j->member) return run_member_task(w, j, task, err);
    if (!j->serial) {
        uint64_t i = task - j->first_task, units = 1, bstart[CKPT_MAX_DIMS], bcount[CKPT_MAX_DIMS], origin;
        st = run_box(w, j, i, NULL, err);
        box_of(j, i, bstart, bcount, &origin);
        for (uint32_t a = 0; a < j->n; a++) units *= bcount[a];
        return st ? ckpt__error_in_tensor(err, st, j->name) : report(w, units * j->out_size, err);
    }
    hashes hash = {0};
    if (j->m->sink == CKPT__SINK_HASH && (st = start_hashes(j->m, j->nbytes, j->name, &hash, err))) return st;
    for (uint64_t i = 0; i < j->boxes && st == CKPT_OK && !atomic_load(&g->stop); i++) {
        uint64_t units = 1, bstart[CKPT_MAX_DIMS], bcount[CKPT_MAX_DIMS], origin;
        box_of(j, i, bstart, bcount, &origin);
        for (uint32_t a = 0; a < j->n; a++) units *= bcount[a];
        st = run_box(w, j, i, &hash, err);
        if (st) st = ckpt__error_in_tensor(err, st, j->name);
        else st = report(w, units * j->out_size, err);
    }
    if (hash.whole) {
        j->m->digest = XXH3_64bits_digest(hash.whole);
        XXH3_freeState(hash.whole);
    }
    if (hash.chunks.state) ckpt__chunk_hash_final(&hash.chunks), ckpt__chunk_hash_free(&hash.chunks);
    if (st == CKPT_OK && j->crc && !j->track && !atomic_load(&g->stop)) { /* a DEFLATE member, read whole */
        uint32_t file;
        const ckpt__recorded_crc *r = ckpt__catalog_crc(g->catalog, j->crc - 1, &file);
        ckpt__source *src = ckpt__catalog_source(g->catalog, file);
        st = inflater_for(w, src, r->offset, r->stored_size, err);
        if (st == CKPT_OK) st = ckpt__inflater_check(w->inflater, r->size, r->crc32, r->name, j->name, err);
    }
    return st;
}

/* A task finished: its member is checked when it was the last to read
 * it, and the move is done when it was its job's last. */
static ckpt_status task_done(engine *g, job *j, ckpt_error *err) {
    if (j->track && atomic_fetch_sub(&j->track->tasks_left, 1) == 1) {
        ckpt_status st = check_track(g, j->track, err);
        if (st) return st;
    }
    if (!j->m || !g->o->move_done || atomic_fetch_sub(&j->tasks_left, 1) != 1) return CKPT_OK;
    if (g->o->move_done((size_t)(j->m - g->moves), g->o->done_user))
        return ckpt__fail(err, CKPT_E_CANCELLED, NULL, j->name, -1, "cancelled by the item_done callback");
    return CKPT_OK;
}

static void work(void *arg) {
    worker *w = arg;
    engine *g = w->g;
    while (!atomic_load(&g->stop)) {
        uint64_t task = atomic_fetch_add(&g->next_task, 1);
        if (task >= g->task_count) break;
        ckpt_error_clear(&w->err);
        job *j = job_of(g, task);
        ckpt_status st = run_task(w, j, task, &w->err);
        if (st == CKPT_OK) st = task_done(g, j, &w->err);
        if (st) {
            record_failure(g, st, &w->err);
            break;
        }
    }
    if (w->inflater) w->inflated_in += ckpt__inflater_bytes_in(w->inflater);
    atomic_fetch_add(&g->bytes_needed, w->bytes_needed);
    atomic_fetch_add(&g->bytes_read, w->reader.bytes + w->inflated_in);
    atomic_fetch_add(&g->reads, w->reader.reads);
    if (w->reader.uring) atomic_store(&g->used_uring, 1);
}

/* ---- setup -------------------------------------------------------------------- */

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

static void close_files(file_state *files, size_t n) {
    for (size_t i = 0; files && i < n; i++) {
        if (files[i].sfd >= 0 && files[i].sfd != files[i].dfd) close(files[i].sfd);
        if (files[i].dfd >= 0) close(files[i].dfd);
    }
    free(files);
}

/* Chooses, per data file, O_DIRECT or the page cache; with `stage_direct`
 * (a stage reads files itself), an O_DIRECT descriptor of each local file
 * for it too, where the file system allows one with 4 KiB alignment. */
static file_state *open_files(ckpt_catalog *c, ckpt_io_mode mode, bool stage_direct, bool *any_direct) {
    size_t n = ckpt_catalog_file_count(c);
    file_state *files = ckpt__calloc(n ? n : 1, sizeof *files);
    if (!files) return NULL;
    *any_direct = false;
    for (size_t i = 0; i < n; i++) {
        files[i].dfd = files[i].sfd = -1;
        ckpt__source *src = ckpt__catalog_source(c, i);
        bool local = (src->caps & CKPT__SRC_FD) && !(src->caps & CKPT__SRC_REMOTE);
        /* A source opened in direct mode is read with O_DIRECT whatever the
         * mode (on a network file system too: it was asked for). */
        bool direct = (local && mode == CKPT_IO_DIRECT) || ((src->caps & CKPT__SRC_FD) && (src->caps & CKPT__SRC_DIRECT));
        if (local && mode == CKPT_IO_AUTO)
            direct = src->size >= (64u << 20) && ckpt__cached_fraction(src->fd, src->size, 0, src->size) < 0.5;
        if (direct) files[i].dfd = ckpt__open_direct(src->name, src->fd, &files[i].align);
        if (files[i].dfd >= 0 && files[i].align > BOUNCE_ALIGN) { /* more than the bounce buffers' slack */
            close(files[i].dfd);
            files[i].dfd = -1;
        }
        if (files[i].dfd >= 0) *any_direct = true;
        else if (src->caps & CKPT__SRC_FD) posix_fadvise(src->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        if (stage_direct && local) {
            uint32_t align = files[i].align;
            files[i].sfd = files[i].dfd >= 0 ? files[i].dfd : ckpt__open_direct(src->name, src->fd, &align);
            if (files[i].sfd >= 0 && align > STAGE_DIRECT_ALIGN) {
                if (files[i].sfd != files[i].dfd) close(files[i].sfd);
                files[i].sfd = -1;
            }
        }
    }
    return files;
}

/* The recorded CRC-32 (number + 1) a job checks: that of the member its
 * one piece lies in, when the move reads the whole tensor. */
static uint32_t whole_member(const job *j) {
    if (j->npieces != 1 || !j->pieces[0].crc) return 0;
    for (uint32_t a = 0; a < j->n; a++)
        if (j->start[a] != 0 || j->count[a] != j->shape[a]) return 0;
    return j->pieces[0].crc;
}

/* ckpt_verify's members, each a job of its own: a stored one in chunks
 * (parallel tasks), a DEFLATE one in one task. */
static ckpt_status add_member_jobs(engine *g, ckpt_error *err) {
    for (size_t i = 0; i < g->o->member_count; i++) {
        uint32_t file, number = g->o->members[i];
        const ckpt__recorded_crc *r = ckpt__catalog_crc(g->catalog, number, &file);
        if (!r) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "no recorded checksum %u", number);
        job *j = &g->jobs[g->job_count++];
        memset(j, 0, sizeof *j);
        j->member = r, j->crc = number + 1, j->name = r->name;
        j->boxes = r->deflate ? 1 : (r->size + g->chunk - 1) / g->chunk;
        j->tasks = j->boxes ? j->boxes : 1; /* an empty stored member: one task that reads nothing */
        j->first_task = g->task_count;
        atomic_init(&j->tasks_left, j->tasks);
        g->task_count += j->tasks;
        g->total_bytes += r->size;
    }
    return CKPT_OK;
}

static int cmp_job_crc(const void *a, const void *b) {
    const job *x = *(job *const *)a, *y = *(job *const *)b;
    return x->crc < y->crc ? -1 : x->crc > y->crc;
}

/* One track per stored member that jobs check, waiting for all their tasks. */
static ckpt_status make_tracks(engine *g, ckpt_error *err) {
    size_t n = 0;
    for (size_t i = 0; i < g->job_count; i++) n += g->jobs[i].crc && !ckpt__catalog_crc(g->catalog, g->jobs[i].crc - 1, NULL)->deflate;
    if (!n) return CKPT_OK;
    job **by_crc = ckpt__malloc(n * sizeof *by_crc);
    g->tracks = ckpt__calloc(n, sizeof *g->tracks);
    if (!by_crc || !g->tracks) {
        free(by_crc);
        return ckpt__oom(err, NULL, "the checksums' tracks");
    }
    n = 0;
    for (size_t i = 0; i < g->job_count; i++)
        if (g->jobs[i].crc && !ckpt__catalog_crc(g->catalog, g->jobs[i].crc - 1, NULL)->deflate) by_crc[n++] = &g->jobs[i];
    qsort(by_crc, n, sizeof *by_crc, cmp_job_crc);
    for (size_t i = 0; i < n; i++) {
        job *j = by_crc[i];
        crc_track *t = i && by_crc[i - 1]->crc == j->crc ? &g->tracks[g->track_count - 1] : NULL;
        if (!t) {
            t = &g->tracks[g->track_count++];
            t->number = j->crc - 1;
            t->r = ckpt__catalog_crc(g->catalog, t->number, &t->file);
            t->tensor = j->m ? j->name : NULL;
            atomic_init(&t->tasks_left, 0);
        }
        atomic_fetch_add(&t->tasks_left, j->tasks);
        j->track = t;
    }
    free(by_crc);
    return CKPT_OK;
}

static void free_worker(worker *w) {
    ckpt__reader_free(&w->reader);
    ckpt__inflater_free(w->inflater);
    w->inflater = NULL;
    free(w->bounce);
    free(w->slot);
    free(w->wide);
}

static ckpt_status alloc_worker(worker *w, engine *g, bool bounce, bool slot, ckpt_error *err) {
    ckpt__reader_init(&w->reader, g->o->io_uring >= 0);
    if (bounce) {
        w->bounce_cap = g->chunk + 2 * BOUNCE_ALIGN;
        if (posix_memalign((void **)&w->bounce, BOUNCE_ALIGN, w->bounce_cap) != 0) {
            w->bounce = NULL;
            return ckpt__oom(err, NULL, "a bounce buffer");
        }
    }
    if (slot && !(w->slot = ckpt__malloc(g->chunk))) return ckpt__oom(err, NULL, "an output buffer");
    return CKPT_OK;
}

/* ---- the run, in phases: allocate, size the chunks, plan every move's
 * tasks, start the workers, run them, report, release. -------------------- */

/* The jobs (one per move, plus whole ZIP members to check), the pool of
 * their per-axis arrays, and each data file opened for this run. */
static ckpt_status allocate(engine *g, size_t count) {
    const ckpt__engine_options *o = g->o;
    size_t dims = 0;
    for (size_t k = 0; k < count; k++) {
        uint32_t n = move_ndim(ckpt_catalog_tensor(g->catalog, g->moves[k].tensor), &g->moves[k]);
        dims += n ? n : 1;
    }
    g->jobs = ckpt__calloc(count + o->member_count ? count + o->member_count : 1, sizeof *g->jobs);
    g->axes = ckpt__malloc((dims ? dims : 1) * 5 * sizeof *g->axes);
    if (!g->jobs || !g->axes) return ckpt__oom(g->err, NULL, "the engine's tasks");
    bool stage_direct = false;
    for (size_t k = 0; k < count; k++)
        stage_direct |= g->moves[k].sink == CKPT__SINK_STAGE && g->moves[k].stage->read_direct;
    if (!(g->files = open_files(g->catalog, o->io, stage_direct, &g->any_direct)))
        return ckpt__oom(g->err, NULL, "the engine's files");
    g->need_bounce = g->any_direct;
    for (size_t k = 0; k < count; k++)
        g->need_slot |= g->moves[k].sink != CKPT__SINK_MEMORY && g->moves[k].sink != CKPT__SINK_STAGE;
    return CKPT_OK;
}

/* Without an explicit chunk size the ring stays within RING_BUDGET however
 * many threads run (chunks shrink to RING_MIN_CHUNK at most). */
static size_t chunk_size(const ckpt__engine_options *o, size_t threads, bool need_slot) {
    size_t chunk = o->chunk_bytes ? (size_t)o->chunk_bytes : DEFAULT_CHUNK;
    size_t per_thread = need_slot ? 2 : 1;
    if (!o->chunk_bytes && chunk * threads * per_thread > RING_BUDGET)
        chunk = RING_BUDGET / threads / per_thread < RING_MIN_CHUNK ? RING_MIN_CHUNK
                                                                    : RING_BUDGET / threads / per_thread / 4096 * 4096;
    return chunk < MIN_CHUNK ? MIN_CHUNK : chunk;
}

/* Move k's job: how its bytes are copied (kernel copy, boxes, serial for
 * ordered writers), cut into boxes of at most a chunk, and its tasks; an
 * empty tensor is done at once. */
static ckpt_status plan_move(engine *g, size_t k, size_t *axes_used) {
    const ckpt__engine_options *o = g->o;
    ckpt_catalog *c = g->catalog;
    ckpt__move *m = &g->moves[k];
    job *j = &g->jobs[g->job_count];
    const ckpt_tensor_info *t = ckpt_catalog_tensor(c, m->tensor);
    uint32_t n = move_ndim(t, m);
    make_job(c, m, j, g->axes + *axes_used);
    *axes_used += 5 * (size_t)(n ? n : 1);
    if (o->check_crc && m->sink != CKPT__SINK_HASH) j->crc = whole_member(j);
    if (m->sink == CKPT__SINK_WRITER) {
        j->serial |= o->ordered;
        j->kernel_copy = !o->ordered && !j->crc && one_file_run(c, j);
        bool identity = true;
        for (uint32_t a = 0; a < j->n; a++) identity &= j->perm[a] == a;
        j->box_copy = !o->ordered && !j->kernel_copy && j->npieces > 1 && j->same_bytes && identity && !packed(t->dtype);
    }
    if (m->sink == CKPT__SINK_STAGE && m->stage->read_direct) {
        bool identity = true;
        for (uint32_t a = 0; a < j->n; a++) identity &= j->perm[a] == a;
        j->stage_direct = j->same_bytes && identity && !packed(t->dtype) && j->block == 1 && !j->crc && !m->view_ndim;
    }
    unsigned size = j->in_size > j->out_size ? j->in_size : j->out_size;
    bool large = j->kernel_copy || (remote_straight(c, j) && g->chunk < COPY_CHUNK);
    uint64_t box_bytes = large ? COPY_CHUNK : direct_stream(c, g->files, j) ? STREAM_CHUNKS * g->chunk : g->chunk;
    uint64_t limit = box_bytes / (size ? size : 1);
    plan_boxes(j, limit ? limit : 1);
    g->total_bytes += j->nbytes;
    if (j->boxes == 0) {
        if (m->sink == CKPT__SINK_HASH) m->digest = XXH3_64bits(NULL, 0);
        if (o->move_done && o->move_done(k, o->done_user))
            return ckpt__fail(g->err, CKPT_E_CANCELLED, NULL, j->name, -1, "cancelled by the item_done callback");
        return CKPT_OK;
    }
    /* Any box may need to convert or scatter (a permuted output, a swapped
     * or strided piece): all but kernel copies get a bounce. */
    if (!j->kernel_copy) g->need_bounce = true;
    j->tasks = j->serial ? 1 : j->boxes;
    atomic_init(&j->tasks_left, j->tasks);
    j->first_task = g->task_count;
    g->task_count += j->tasks;
    g->job_count++;
    return CKPT_OK;
}

/* At most one thread per task; each with its buffers. */
static ckpt_status start_workers(engine *g, size_t threads) {
    if (threads > g->task_count) threads = g->task_count ? (size_t)g->task_count : 1;
    if (!(g->workers = ckpt__calloc(threads, sizeof *g->workers))) return ckpt__oom(g->err, NULL, "the engine's threads");
    g->threads = threads;
    for (size_t i = 0; i < threads; i++) {
        g->workers[i].g = g;
        g->workers[i].caller = i == 0;
        g->started = i + 1;
        ckpt_status st = alloc_worker(&g->workers[i], g, g->need_bounce, g->need_slot, g->err);
        if (st) return st;
    }
    return CKPT_OK;
}

/* The verdict of the files a job read whose bytes are checked only once
 * all have arrived (a Hub file read while it downloads:
 * ckpt__source_settle), so that a run succeeds only on bytes that pass. */
static ckpt_status settle_job(ckpt_catalog *c, const job *j, bool stop, ckpt_error *err) {
    ckpt_status st = CKPT_OK;
    for (uint32_t k = 0; st == CKPT_OK && k < j->npieces; k++)
        st = ckpt__source_settle(ckpt__catalog_source(c, j->pieces[k].file), stop, err);
    uint32_t file;
    if (st == CKPT_OK && j->member && ckpt__catalog_crc(c, j->crc - 1, &file))
        st = ckpt__source_settle(ckpt__catalog_source(c, file), stop, err);
    return st;
}

/* A run's end: the verdict of what it read, or, after a failure, nothing
 * more read for it once it returns. */
static ckpt_status settle_jobs(engine *g, ckpt_status st) {
    for (size_t k = 0; k < g->job_count; k++) {
        ckpt_status s = settle_job(g->catalog, &g->jobs[k], st != CKPT_OK, g->err);
        if (st == CKPT_OK) st = s;
    }
    return st;
}

/* The workers over every task, with progress at 0 and at the end. */
static ckpt_status run_workers(engine *g, size_t *running) {
    const ckpt__engine_options *o = g->o;
    if (o->progress && o->progress(0, g->total_bytes, o->user))
        return ckpt__fail(g->err, CKPT_E_CANCELLED, NULL, NULL, -1, "cancelled by the progress callback");
    *running = ckpt__pool_run(&(ckpt__pool_batch){work, g->workers, sizeof *g->workers, g->threads});
    ckpt_status st = settle_jobs(g, g->status);
    if (st) return st;
    if (o->progress && o->progress(g->total_bytes, g->total_bytes, o->user))
        return ckpt__fail(g->err, CKPT_E_CANCELLED, NULL, NULL, -1, "cancelled by the progress callback");
    return CKPT_OK;
}

static void report_stats(const engine *g, size_t running, ckpt_load_stats *stats) {
    memset(stats, 0, sizeof *stats);
    stats->bytes_needed = atomic_load(&g->bytes_needed);
    stats->bytes_read = atomic_load(&g->bytes_read);
    stats->reads = atomic_load(&g->reads);
    stats->tasks = g->task_count;
    stats->threads = (unsigned)running;
    stats->direct = g->any_direct;
    stats->io_uring = atomic_load(&g->used_uring);
    for (size_t i = 0; i < g->started; i++)
        stats->ring_bytes += g->workers[i].bounce_cap + (g->workers[i].slot ? g->chunk : 0);
}

static void release(engine *g) {
    for (size_t i = 0; i < g->started; i++) free_worker(&g->workers[i]);
    for (size_t k = 0; g->files && k < g->job_count; k++) /* before their descriptors close */
        if (g->jobs[k].stage_direct) g->jobs[k].m->stage->forget_files(g->jobs[k].m->stage);
    free(g->workers);
    for (size_t i = 0; i < g->track_count; i++) free(g->tracks[i].segs);
    free(g->tracks);
    close_files(g->files, ckpt_catalog_file_count(g->catalog));
    ckpt__catalog_drop_cache(g->catalog); /* direct mode: what small reads brought into the page cache */
    free(g->jobs);
    free(g->axes);
    pthread_mutex_destroy(&g->lock);
}

ckpt_status ckpt__engine_run(ckpt_catalog *c, ckpt__move *moves, size_t count, const ckpt__engine_options *o,
                             ckpt_load_stats *stats, ckpt_error *err) {
    engine g;
    memset(&g, 0, sizeof g);
    g.catalog = c, g.o = o, g.err = err, g.moves = moves;
    pthread_mutex_init(&g.lock, NULL);
    ckpt_status st = allocate(&g, count);
    size_t threads = o->threads ? o->threads : default_threads(g.any_direct);
    g.chunk = chunk_size(o, threads, g.need_slot);
    for (size_t k = 0; k < count; k++) /* a box fits in a stage's slot */
        if (moves[k].sink == CKPT__SINK_STAGE && moves[k].stage->slot_bytes < g.chunk)
            g.chunk = (size_t)moves[k].stage->slot_bytes;
    size_t axes_used = 0;
    for (size_t k = 0; st == CKPT_OK && k < count; k++) st = plan_move(&g, k, &axes_used);
    if (st == CKPT_OK) st = add_member_jobs(&g, err);
    if (st == CKPT_OK) st = make_tracks(&g, err);
    if (o->member_count) g.need_bounce = true;
    if (st == CKPT_OK) st = start_workers(&g, threads);
    size_t running = 0;
    if (st == CKPT_OK) st = run_workers(&g, &running);
    if (stats) report_stats(&g, running, stats);
    release(&g);
    return st;
}

/* ---- ckpt_catalog_read and ckpt_catalog_view -------------------------------- */

static ckpt_status check_tensor(const ckpt_catalog *c, const ckpt_tensor_info *t, size_t *index, ckpt_error *err) {
    *index = ckpt__catalog_index_of(c, t);
    if (*index == SIZE_MAX)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "tensor info does not belong to this catalog");
    return CKPT_OK;
}

/* Units [first, first + count) of a tensor, in row-major order, into dst
 * (dense): as boxes — whole inner axes from where `first` lies, a range of
 * the next one — each within the worker's buffer. */
static ckpt_status read_units(worker *w, job *j, uint64_t first, uint64_t count, unsigned char *dst, ckpt_error *err) {
    uint32_t n = j->n;
    uint64_t cap = w->bounce_cap / j->in_size;
    while (count) {
        uint64_t bstart[CKPT_MAX_DIMS], bcount[CKPT_MAX_DIMS], rest = first;
        for (uint32_t a = n; a-- > 0;) bstart[a] = rest % j->shape[a], rest /= j->shape[a], bcount[a] = 1;
        uint64_t units = 1;
        if (n) {
            uint32_t k = n - 1;
            uint64_t inner = 1;
            while (k > 0 && bstart[k] == 0 && inner * j->shape[k] <= count && inner * j->shape[k] <= cap)
                bcount[k] = j->shape[k], inner *= j->shape[k], k--;
            uint64_t along = count / inner, room = j->shape[k] - bstart[k];
            if (along > room) along = room;
            if (along * inner > cap) along = cap / inner ? cap / inner : 1;
            bcount[k] = along;
            units = along * inner;
        }
        int64_t box_stride[CKPT_MAX_DIMS], s = 1;
        for (uint32_t a = n; a-- > 0;) box_stride[a] = s, s *= (int64_t)bcount[a];
        ckpt_status st = read_box(w, j, bstart, bcount, dst, box_stride, err);
        if (st) return st;
        dst += units * j->out_size;
        first += units;
        count -= units;
    }
    return CKPT_OK;
}

/* One unit cut by the range: read whole, `take` of its bytes from `skip`. */
static ckpt_status read_cut_unit(worker *w, job *j, uint64_t unit_index, uint64_t skip, uint64_t take,
                                 unsigned char *dst, ckpt_error *err) {
    unsigned char tmp[16], *buf = j->in_size <= sizeof tmp ? tmp : ckpt__malloc(j->in_size);
    if (!buf) return ckpt__oom(err, NULL, NULL);
    ckpt_status st = read_units(w, j, unit_index, 1, buf, err);
    if (st == CKPT_OK) memcpy(dst, buf + skip, (size_t)take);
    if (buf != tmp) free(buf);
    return st;
}

static ckpt_status read_range(ckpt_catalog *c, size_t index, uint64_t byte_offset, unsigned char *dst, uint64_t nbytes,
                              ckpt_error *err) {
    ckpt__move m = {.tensor = index, .sink = CKPT__SINK_MEMORY};
    uint64_t pool[5 * CKPT_MAX_DIMS + 5];
    job j;
    make_job(c, &m, &j, pool);
    /* One call, one thread: plain reads (a ring per call costs more than
     * it gives). */
    ckpt__engine_options o = {.io = CKPT_IO_BUFFERED, .io_uring = -1};
    engine g;
    memset(&g, 0, sizeof g);
    g.catalog = c, g.o = &o;
    g.chunk = nbytes + 2 * j.in_size < DEFAULT_CHUNK ? (size_t)(nbytes + 2 * j.in_size) : DEFAULT_CHUNK;
    worker w;
    memset(&w, 0, sizeof w);
    w.g = &g;
    ckpt_status st = alloc_worker(&w, &g, true, false, err);
    const ckpt__piece *p0 = &j.pieces[0];
    /* A read of the whole tensor checks its ZIP member, as a load does. */
    uint32_t file = 0, crc = byte_offset == 0 && nbytes == j.t->nbytes ? whole_member(&j) : 0;
    const ckpt__recorded_crc *r = crc ? ckpt__catalog_crc(c, crc - 1, &file) : NULL;
    crc_track track = {.r = r, .number = crc - 1, .file = file, .tensor = j.name};
    if (r && !r->deflate) j.track = &track, pthread_mutex_init(&g.lock, NULL);
    if (p0->record_size) /* resume a compressed tensor where an earlier read stopped */
        w.inflater = ckpt__catalog_take_inflater(c, ckpt__catalog_source(c, p0->file), p0->record,
                                                 p0->offset + byte_offset / j.in_size * j.in_size);
    /* Whole units go straight to dst; the (at most two) units the range
     * cuts are read whole into a small buffer. */
    uint64_t unit = j.in_size, first = byte_offset / unit, head = byte_offset % unit, end = byte_offset + nbytes;
    uint64_t mid_lo = first + (head != 0), mid_hi = end / unit;
    if (st == CKPT_OK && head) st = read_cut_unit(&w, &j, first, head, unit - head < nbytes ? unit - head : nbytes, dst, err);
    if (st == CKPT_OK && mid_hi > mid_lo) st = read_units(&w, &j, mid_lo, mid_hi - mid_lo, dst + (mid_lo * unit - byte_offset), err);
    if (st == CKPT_OK && end % unit && mid_hi >= mid_lo)
        st = read_cut_unit(&w, &j, mid_hi, 0, end % unit, dst + (mid_hi * unit - byte_offset), err);
    ckpt_status settled = settle_job(c, &j, st != CKPT_OK, err);
    if (st == CKPT_OK) st = settled;
    if (st == CKPT_OK && j.track) st = check_track(&g, &track, err);
    if (st == CKPT_OK && r && r->deflate) st = ckpt__inflater_check(w.inflater, r->size, r->crc32, r->name, j.name, err);
    if (j.track) pthread_mutex_destroy(&g.lock);
    free(track.segs);
    ckpt__catalog_keep_inflater(c, w.inflater);
    w.inflater = NULL;
    free_worker(&w);
    return st;
}

ckpt_status ckpt_catalog_read(const ckpt_catalog *c, const ckpt_tensor_info *t, uint64_t byte_offset, void *dst,
                              uint64_t nbytes, ckpt_error *err) {
    size_t index;
    ckpt_status st = check_tensor(c, t, &index, err);
    if (st) return st;
    uint64_t end;
    if (!ckpt__add_u64(byte_offset, nbytes, &end) || end > t->nbytes)
        return ckpt__fail(err, CKPT_E_OUT_OF_RANGE, ckpt_catalog_file_path(c, t->file), t->name, -1,
                          "bytes [%llu, %llu + %llu) are outside the tensor's %llu bytes",
                          (unsigned long long)byte_offset, (unsigned long long)byte_offset,
                          (unsigned long long)nbytes, (unsigned long long)t->nbytes);
    if (nbytes && !dst) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, t->name, -1, "no destination buffer");
    if (!nbytes) return CKPT_OK;
    /* Reads only read the catalog: its files, its mappings' lock. */
    st = read_range((ckpt_catalog *)c, index, byte_offset, dst, nbytes, err);
    return st ? ckpt__error_in_tensor(err, st, t->name) : st;
}

ckpt_status ckpt_catalog_view(ckpt_catalog *c, const ckpt_tensor_info *t, const void **data, ckpt_error *err) {
    size_t index;
    ckpt_status st = check_tensor(c, t, &index, err);
    if (st) return st;
    if (!data) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, t->name, -1, "data is required");
    const char *path = ckpt_catalog_file_path(c, t->file);
    uint32_t pieces;
    ckpt__catalog_pieces(c, index, &pieces);
    if (t->strides || t->big_endian || t->compressed || pieces != 1)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, t->name, -1,
                          "the tensor is %s in the file: no view of it as a dense little-endian array; read it instead",
                          t->strides ? "a strided view" : t->big_endian ? "big-endian" : t->compressed ? "compressed"
                                                                                         : "in several pieces");
    const void *base;
    if ((st = ckpt__catalog_map(c, t->file, &base, err))) return ckpt__error_in_tensor(err, st, t->name);
    static const char empty[1];
    *data = base ? (const char *)base + t->offset : empty;
    return CKPT_OK;
}
