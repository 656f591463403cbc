/* collective_write.c — many ranks writing one checkpoint: the shard writer
 * (each rank holding parts of the tensors) and ckpt_convert_collective
 * (each rank converting a range of the output).  Rank 0 lays the output
 * out and creates its files (writer.c); the others join that writer
 * (ckpt__writer_join: its temporaries opened for writing, nothing
 * created) and write their bytes in place; rank 0 commits once every rank
 * has voted success.  Any failure, anywhere, leaves nothing under a final
 * name: rank 0's writer removes its temporaries when it is freed
 * uncommitted. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "collective_internal.h"
#include "engine.h"
#include "plan_internal.h"
#include "writer_internal.h"

#define PARTS_LIMIT ((uint64_t)1 << 30)
#define LAYOUT_LIMIT ((uint64_t)1 << 32)

/* ---- the output's layout, from rank 0 ----------------------------------------- */

/* Rank 0: `w` (begun, or NULL when creating it failed with `st`) is sent
 * to every rank; the others join it.  Every rank then votes. */
static ckpt_status share_writer(ckpt__coll *c, ckpt_writer **w, ckpt_status st, ckpt_error *err) {
    ckpt__buf b = {0};
    ckpt_error local;
    ckpt_error_clear(&local);
    if (c->rank == 0 && st == CKPT_OK) st = ckpt__writer_join_encode(*w, &b, err);
    if (c->rank == 0 && st && err) local = *err;
    void *data = b.data;
    uint64_t n = b.len;
    st = ckpt__coll_bcast_message(c, 0, st, &local, &data, &n, LAYOUT_LIMIT, "the output's layout from rank 0", err);
    if (c->rank == 0) {
        free(b.data);
        if (st) return st;
        return ckpt__coll_agree(c, CKPT_OK, NULL, "opening the output files", err);
    }
    if (st) return st;
    ckpt_error mine;
    ckpt_error_clear(&mine);
    st = ckpt__writer_join(data, (size_t)n, true, w, &mine);
    free(data);
    st = ckpt__coll_agree(c, st, &mine, "opening the output files", err);
    if (st) {
        ckpt_writer_free(*w);
        *w = NULL;
    }
    return st;
}

/* After the data: every rank's status, then rank 0's commit, whose
 * outcome every rank returns.  `local` is this rank's status so far. */
static ckpt_status finish(ckpt__coll *c, ckpt_writer *w, bool sync, ckpt_status local, ckpt_error *mine,
                          ckpt_error *err) {
    double t0 = ckpt__now();
    /* Every rank, rank 0 too, makes its bytes durable before it votes, all
     * at once: rank 0 used to fsync its bytes only in the commit, alone,
     * after every other rank's fsyncs and the vote (issue 32 §4).  Its
     * commit's fsyncs then find the data clean. */
    if (local == CKPT_OK) local = ckpt__writer_sync_written(w, sync, &c->stats->files_synced, mine);
    c->stats->io_seconds += ckpt__now() - t0;
    ckpt_status st = ckpt__coll_agree(c, local, mine, "the vote after writing the tensors", err);
    if (st) return st;
    ckpt_error commit_err;
    ckpt_error_clear(&commit_err);
    ckpt_status cs = CKPT_OK;
    if (c->rank == 0) {
        t0 = ckpt__now();
        cs = ckpt_writer_commit(w, &commit_err);
        c->stats->io_seconds += ckpt__now() - t0;
    }
    void *data = NULL;
    uint64_t n = 0;
    st = ckpt__coll_bcast_message(c, 0, cs, &commit_err, &data, &n, 0, "publishing the checkpoint (rank 0)", err);
    free(data);
    return st;
}

/* ---- the shard writer ------------------------------------------------------------ */

typedef struct part {
    ckpt__wire_part d;
    uint64_t nbytes, row_bytes;
    uint64_t lo, hi;     /* the bytes of the part this rank writes (replicated parts are shared) */
    size_t global;       /* the tensor's index in the output */
    uint64_t written;    /* of [lo, hi) (atomic) */
} part;

typedef enum sw_state { SW_DECLARING, SW_WRITING, SW_DONE, SW_FAILED } sw_state;

struct ckpt_shard_writer {
    ckpt__coll c;
    ckpt_collective_stats stats;
    char *path;
    ckpt_writer_options opt;
    ckpt__format_options format_options; /* what opt.gguf and opt.dcp point at */
    ckpt__arena arena;
    part *parts;
    size_t count, cap;
    ckpt__pairs meta, ckpt_meta;
    ckpt_writer *w;
    sw_state state;
    uint64_t io_ns, written; /* by write, from any thread (atomic) */
};

ckpt_status ckpt_shard_writer_create(const char *path, const ckpt_writer_options *options, const ckpt_comm *comm,
                                     const ckpt_collective_options *coll, ckpt_shard_writer **out, ckpt_error *err) {
    if (out) *out = NULL;
    if (!path || !*path || !out)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "path and out are required");
    ckpt_shard_writer *sw = ckpt__calloc(1, sizeof *sw);
    if (!sw) return ckpt__oom(err, path, NULL);
    ckpt_status st = ckpt__coll_init(&sw->c, comm, coll, &sw->stats, err);
    ckpt_writer_options_init(&sw->opt);
    if (options) CKPT__TAKE_OPTIONS(&sw->opt, options);
    sw->opt.size = sizeof sw->opt;
    ckpt__writer_take_format_options(&sw->opt, &sw->format_options);
    if (st == CKPT_OK && sw->opt.checksums)
        st = ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1,
                        "checksums need each tensor's bytes in order in one process: not with a collective save");
    if (st == CKPT_OK && !sw->c.exchange && sw->c.n > 1)
        st = ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1,
                        "a collective save of %d ranks needs a communicator that exchanges bytes (MPI, "
                        "torch.distributed): the \"none\" communicator cannot agree on a commit",
                        sw->c.n);
    if (st == CKPT_OK && !(sw->path = ckpt__strdup(path))) st = ckpt__oom(err, path, NULL);
    if (st == CKPT_OK && sw->opt.prefix && !(sw->opt.prefix = ckpt__arena_strndup(&sw->arena, sw->opt.prefix, strlen(sw->opt.prefix))))
        st = ckpt__oom(err, path, NULL);
    if (st == CKPT_OK && sw->opt.copy_files_from &&
        !(sw->opt.copy_files_from = ckpt__arena_strndup(&sw->arena, sw->opt.copy_files_from, strlen(sw->opt.copy_files_from))))
        st = ckpt__oom(err, path, NULL);
    if (st) {
        ckpt_shard_writer_free(sw);
        return st;
    }
    *out = sw;
    return CKPT_OK;
}

static ckpt_status check_state(ckpt_shard_writer *sw, sw_state want, const char *what, ckpt_error *err) {
    if (!sw) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "writer is NULL");
    if (sw->state != want)
        return ckpt__fail(err, CKPT_E_BAD_STATE, sw->path, NULL, -1, "%s: %s", what,
                          sw->state == SW_DECLARING ? "the writer has not begun"
                          : sw->state == SW_WRITING ? "the writer has begun"
                                                    : "the writer is committed or has failed");
    return CKPT_OK;
}

static ckpt_status add_pair(ckpt_shard_writer *sw, ckpt__pairs *pairs, const char *key, const char *value,
                            ckpt_error *err) {
    ckpt_status st = check_state(sw, SW_DECLARING, "metadata", err);
    if (st) return st;
    if (!key || !value) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, sw->path, NULL, -1, "key and value are required");
    const char *k = ckpt__arena_strndup(&sw->arena, key, strlen(key));
    const char *v = ckpt__arena_strndup(&sw->arena, value, strlen(value));
    if (!k || !v || !ckpt__pairs_push(pairs, k, v)) return ckpt__oom(err, sw->path, NULL);
    return CKPT_OK;
}

ckpt_status ckpt_shard_writer_set_metadata(ckpt_shard_writer *sw, const char *key, const char *value, ckpt_error *err) {
    return add_pair(sw, sw ? &sw->meta : NULL, key, value, err);
}

ckpt_status ckpt_shard_writer_set_checkpoint_metadata(ckpt_shard_writer *sw, const char *key, const char *value,
                                                      ckpt_error *err) {
    return add_pair(sw, sw ? &sw->ckpt_meta : NULL, key, value, err);
}

ckpt_status ckpt_shard_writer_add(ckpt_shard_writer *sw, const char *name, ckpt_dtype dtype, uint32_t ndim,
                                  const uint64_t *shape, const uint64_t *start, const uint64_t *count, size_t *index,
                                  ckpt_error *err) {
    ckpt_status st = check_state(sw, SW_DECLARING, "declarations", err);
    if (st) return st;
    if (!name || !*name || !ckpt_dtype_name(dtype) || ndim > CKPT_MAX_DIMS || (ndim && !shape))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, sw->path, name, -1,
                          "a part needs a name, a dtype and a shape of at most %d axes", CKPT_MAX_DIMS);
    size_t nlen = strlen(name);
    if (ckpt__utf8_check((const unsigned char *)name, nlen) != nlen)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, sw->path, NULL, -1, "tensor names must be UTF-8");
    for (size_t i = 0; i < sw->count; i++)
        if (!strcmp(sw->parts[i].d.name, name))
            return ckpt__fail(err, CKPT__D(DUPLICATE_NAME), sw->path, name, -1, "a part of this tensor is declared twice");
    uint64_t numel = 1, x;
    bool packed = ckpt_dtype_bits(dtype) % 8 != 0;
    for (uint32_t a = 0; a < ndim; a++) {
        uint64_t s = start ? start[a] : 0, k = count ? count[a] : shape[a];
        if (!ckpt__add_u64(s, k, &x) || x > shape[a])
            return ckpt__fail(err, CKPT_E_OUT_OF_RANGE, sw->path, name, -1,
                              "the part's axis %u, [%llu, %llu + %llu), is outside the tensor's %llu", a,
                              (unsigned long long)s, (unsigned long long)s, (unsigned long long)k,
                              (unsigned long long)shape[a]);
        if (packed && (s || k != shape[a]))
            return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, sw->path, name, -1,
                              "%s elements are packed: a rank holds such a tensor whole or not at all",
                              ckpt_dtype_name(dtype));
        if (!ckpt__mul_u64(numel, k, &numel))
            return ckpt__fail(err, CKPT__D(SHAPE_OVERFLOW), sw->path, name, -1, "the part's size overflows");
    }
    uint64_t nbytes, gnumel;
    if (ckpt__tensor_size(dtype, ndim, shape, &gnumel, &x) || (st = ckpt__dtype_nbytes(dtype, numel, &nbytes)))
        return ckpt__fail(err, CKPT__D(SHAPE_OVERFLOW), sw->path, name, -1, "the tensor's size overflows or is not whole bytes");
    part *grown = ckpt__grow(sw->parts, sw->count, &sw->cap, sizeof *grown, 64);
    if (!grown) return ckpt__oom(err, sw->path, NULL);
    sw->parts = grown;
    uint64_t *v = ckpt__arena_alloc(&sw->arena, (3 * (size_t)ndim + 1) * sizeof *v);
    char *nm = ckpt__arena_strndup(&sw->arena, name, nlen);
    if (!v || !nm) return ckpt__oom(err, sw->path, NULL);
    part *p = &sw->parts[sw->count];
    memset(p, 0, sizeof *p);
    for (uint32_t a = 0; a < ndim; a++)
        v[a] = shape[a], v[ndim + a] = start ? start[a] : 0, v[2 * ndim + a] = count ? count[a] : shape[a];
    p->d = (ckpt__wire_part){nm, dtype, ndim, v, v + ndim, v + 2 * ndim};
    p->nbytes = nbytes;
    if (index) *index = sw->count;
    sw->count++;
    return CKPT_OK;
}

/* ---- begin: agreeing on the tensors ------------------------------------------------ */

typedef struct holder {
    int rank;
    const ckpt__wire_part *d;
} holder;

typedef struct gtensor {
    const char *name;         /* first: the name table reads it here */
    const ckpt__wire_part *d; /* the first declaration: dtype, shape */
    holder *h;
    size_t nh, caph;
} gtensor;

static int by_box(const void *a, const void *b, void *ndim_p) {
    const holder *x = a, *y = b;
    uint32_t n = *(const uint32_t *)ndim_p;
    for (uint32_t i = 0; i < n; i++)
        if (x->d->start[i] != y->d->start[i]) return x->d->start[i] < y->d->start[i] ? -1 : 1;
    for (uint32_t i = 0; i < n; i++)
        if (x->d->count[i] != y->d->count[i]) return x->d->count[i] < y->d->count[i] ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static bool same_box(const ckpt__wire_part *a, const ckpt__wire_part *b) {
    for (uint32_t i = 0; i < a->ndim; i++)
        if (a->start[i] != b->start[i] || a->count[i] != b->count[i]) return false;
    return true;
}

static bool boxes_overlap(const ckpt__wire_part *a, const ckpt__wire_part *b) {
    for (uint32_t i = 0; i < a->ndim; i++) {
        uint64_t lo = a->start[i] > b->start[i] ? a->start[i] : b->start[i];
        uint64_t ea = a->start[i] + a->count[i], eb = b->start[i] + b->count[i];
        if ((ea < eb ? ea : eb) <= lo) return false;
    }
    return true;
}

static void part_rows(uint64_t rows, uint64_t n, uint64_t r, uint64_t *first, uint64_t *count) {
    uint64_t q = rows / n, rem = rows % n;
    *first = r * q + (r < rem ? r : rem);
    *count = q + (r < rem ? 1 : 0);
}

static ckpt_status check_tensor(ckpt_shard_writer *sw, gtensor *g, ckpt_error *err) {
    const ckpt__wire_part *d = g->d;
    uint32_t ndim = d->ndim;
    qsort_r(g->h, g->nh, sizeof *g->h, by_box, &ndim);
    uint64_t covered = 0, numel = 1;
    for (uint32_t a = 0; a < ndim; a++) numel *= d->shape[a]; /* checked when declared */
    size_t distinct = 0;
    for (size_t i = 0; i < g->nh; i++) {
        const holder *x = &g->h[i];
        if (i && same_box(x->d, g->h[i - 1].d)) continue;
        uint64_t v = 1;
        for (uint32_t a = 0; a < ndim; a++) v *= x->d->count[a];
        covered += v;
        /* Distinct boxes must not overlap (replicated ones are identical). */
        for (size_t j = 0; j < i; j++) {
            if (same_box(g->h[j].d, x->d) || !boxes_overlap(g->h[j].d, x->d)) continue;
            return ckpt__fail(err, CKPT__D(COMM_DATA), sw->path, d->name, -1,
                              "ranks %d and %d declare parts of the tensor that overlap without being the same part",
                              g->h[j].rank, x->rank);
        }
        distinct++;
    }
    if (covered != numel)
        return ckpt__fail(err, CKPT__D(COMM_DATA), sw->path, d->name, -1,
                          "the ranks' parts of the tensor cover %llu of its %llu elements (declared by %zu ranks)",
                          (unsigned long long)covered, (unsigned long long)numel, g->nh);
    (void)distinct;
    return CKPT_OK;
}

/* The global tensors, in order, from every rank's declarations; each of
 * this rank's parts gets its range and its global index. */
static ckpt_status agree_tensors(ckpt_shard_writer *sw, const unsigned char *all, const uint64_t *off, gtensor **out,
                                 size_t *out_count, ckpt_error *err) {
    ckpt__coll *c = &sw->c;
    ckpt_status st = CKPT_OK;
    size_t ng = 0, capg = 0;
    gtensor *g = NULL;
    ckpt__name_table names = {0};
    size_t names_cap = 0;
    for (int r = 0; st == CKPT_OK && r < c->n; r++) {
        ckpt__wire_part *parts;
        size_t count;
        st = ckpt__parts_decode(all + off[r], (size_t)(off[r + 1] - off[r]), r, &sw->arena, &parts, &count, err);
        for (size_t i = 0; st == CKPT_OK && i < count; i++) {
            const ckpt__wire_part *p = &parts[i];
            uint64_t numel, nb, x;
            bool packed = ckpt_dtype_bits(p->dtype) % 8 != 0;
            if (ckpt__tensor_size(p->dtype, p->ndim, p->shape, &numel, &nb)) {
                st = ckpt__fail(err, CKPT__D(COMM_DATA), sw->path, p->name, -1, "rank %d declares a tensor whose size overflows", r);
                break;
            }
            for (uint32_t a = 0; a < p->ndim && st == CKPT_OK; a++)
                if (!ckpt__add_u64(p->start[a], p->count[a], &x) || x > p->shape[a] ||
                    (packed && (p->start[a] || p->count[a] != p->shape[a])))
                    st = ckpt__fail(err, CKPT__D(COMM_DATA), sw->path, p->name, -1,
                                    "rank %d declares a part outside the tensor", r);
            if (st) break;
            int64_t k = ng ? ckpt__name_table_find(&names, &g[0].name, sizeof *g, p->name) : -1;
            if (k < 0) {
                gtensor *grown = ckpt__grow(g, ng, &capg, sizeof *g, 64);
                if (!grown) {
                    st = ckpt__oom(err, sw->path, NULL);
                    break;
                }
                g = grown;
                memset(&g[ng], 0, sizeof g[ng]);
                g[ng].d = p;
                g[ng].name = p->name;
                if (ng + 1 > names_cap / 2) {
                    size_t want = names_cap ? names_cap * 2 : 256;
                    ckpt__name_table t;
                    if (!ckpt__name_table_init(&t, want)) {
                        st = ckpt__oom(err, sw->path, NULL);
                        break;
                    }
                    ckpt__name_table_free(&names);
                    names = t, names_cap = want;
                    for (size_t j = 0; j < ng; j++) ckpt__name_table_insert(&names, &g[0].name, sizeof *g, (uint32_t)j, NULL);
                }
                ckpt__name_table_insert(&names, &g[0].name, sizeof *g, (uint32_t)ng, NULL);
                k = (int64_t)ng++;
            }
            gtensor *t = &g[k];
            if (t->d->dtype != p->dtype || t->d->ndim != p->ndim ||
                memcmp(t->d->shape, p->shape, p->ndim * sizeof *p->shape)) {
                st = ckpt__fail(err, CKPT__D(COMM_DATA), sw->path, p->name, -1,
                                "rank %d declares the tensor as %s with %u axes, rank %d as %s with %u axes (or "
                                "another shape)",
                                t->h[0].rank, ckpt_dtype_name(t->d->dtype), t->d->ndim, r, ckpt_dtype_name(p->dtype),
                                p->ndim);
                break;
            }
            holder *h = ckpt__grow(t->h, t->nh, &t->caph, sizeof *h, 4);
            if (!h) {
                st = ckpt__oom(err, sw->path, NULL);
                break;
            }
            t->h = h;
            t->h[t->nh++] = (holder){r, p};
        }
    }
    for (size_t i = 0; st == CKPT_OK && i < ng; i++) st = check_tensor(sw, &g[i], err);
    /* This rank's parts: their place in the output and the rows it writes. */
    for (size_t i = 0; st == CKPT_OK && i < sw->count; i++) {
        part *p = &sw->parts[i];
        int64_t k = ng ? ckpt__name_table_find(&names, &g[0].name, sizeof *g, p->d.name) : -1;
        if (k < 0) {
            st = ckpt__fail(err, CKPT__D(COMM_DATA), sw->path, p->d.name, -1, "this rank's part went missing in the exchange");
            break;
        }
        const gtensor *t = &g[k];
        p->global = (size_t)k;
        /* The holders of this very box, in rank order (sorted by box, then rank). */
        size_t first = SIZE_MAX, holders = 0, mine = 0;
        for (size_t j = 0; j < t->nh; j++) {
            if (!same_box(t->h[j].d, &p->d)) continue;
            if (first == SIZE_MAX) first = j;
            if (t->h[j].rank == c->rank) mine = holders;
            holders++;
        }
        bool packed = ckpt_dtype_bits(p->d.dtype) % 8 != 0;
        uint64_t rows = p->d.ndim && !packed ? p->d.count[0] : 1;
        p->row_bytes = rows ? p->nbytes / rows : 0;
        uint64_t r0, rc;
        part_rows(rows, holders ? holders : 1, mine, &r0, &rc);
        if (!p->d.ndim || packed) r0 = 0, rc = mine == 0 ? 1 : 0;
        p->lo = r0 * p->row_bytes;
        p->hi = (r0 + rc) * p->row_bytes;
        if (!p->d.ndim || packed) p->lo = 0, p->hi = rc ? p->nbytes : 0;
    }
    ckpt__name_table_free(&names);
    if (st) {
        for (size_t i = 0; i < ng; i++) free(g[i].h);
        free(g);
        return st;
    }
    *out = g, *out_count = ng;
    return CKPT_OK;
}

static ckpt_status create_output(ckpt_shard_writer *sw, const gtensor *g, size_t ng, ckpt_writer **out,
                                 ckpt_error *err) {
    ckpt_writer *w;
    ckpt_status st = ckpt_writer_create(sw->path, &sw->opt, &w, err);
    if (st) return st;
    st = ckpt__writer_set_shared(w, err);
    for (size_t i = 0; st == CKPT_OK && i < sw->meta.count; i++)
        st = ckpt_writer_set_metadata(w, sw->meta.keys[i], sw->meta.values[i], err);
    for (size_t i = 0; st == CKPT_OK && i < sw->ckpt_meta.count; i++)
        st = ckpt_writer_set_checkpoint_metadata(w, sw->ckpt_meta.keys[i], sw->ckpt_meta.values[i], err);
    for (size_t i = 0; st == CKPT_OK && i < ng; i++)
        st = ckpt_writer_add_tensor(w, g[i].d->name, g[i].d->dtype, g[i].d->ndim, g[i].d->shape, NULL, err);
    if (st == CKPT_OK) st = ckpt_writer_begin(w, err);
    if (st) {
        ckpt_writer_free(w);
        return st;
    }
    *out = w;
    return CKPT_OK;
}

ckpt_status ckpt_shard_writer_begin(ckpt_shard_writer *sw, ckpt_error *err) {
    ckpt_status st = check_state(sw, SW_DECLARING, "begin", err);
    if (st) return st;
    ckpt__coll *c = &sw->c;
    sw->state = SW_FAILED; /* until every step succeeds */
    st = ckpt__coll_agree(c, CKPT_OK, NULL, "declaring the tensors", err);
    if (st) return st;
    ckpt__buf b = {0};
    ckpt_error mine;
    ckpt_error_clear(&mine);
    ckpt__wire_part *flat = ckpt__malloc((sw->count ? sw->count : 1) * sizeof *flat);
    if (!flat) st = ckpt__oom(err, sw->path, NULL);
    for (size_t i = 0; st == CKPT_OK && i < sw->count; i++) flat[i] = sw->parts[i].d;
    if (st == CKPT_OK) st = ckpt__parts_encode(flat, sw->count, &b, err);
    free(flat);
    if (st) { /* nothing to send: this rank cannot take part; the others time out on it */
        free(b.data);
        c->broken = true;
        return st;
    }
    unsigned char *all;
    uint64_t *off;
    st = ckpt__coll_allgatherv(c, b.data, b.len, PARTS_LIMIT, &all, &off, "exchanging the declarations", err);
    free(b.data);
    if (st) return st;
    gtensor *g = NULL;
    size_t ng = 0;
    ckpt_status local = agree_tensors(sw, all, off, &g, &ng, &mine);
    free(all), free(off);
    st = ckpt__coll_agree(c, local, &mine, "checking the declarations", err);
    if (st == CKPT_OK) {
        ckpt_status cs = CKPT_OK;
        if (c->rank == 0) {
            double t0 = ckpt__now();
            cs = create_output(sw, g, ng, &sw->w, err);
            c->stats->io_seconds += ckpt__now() - t0;
        }
        st = share_writer(c, &sw->w, cs, err);
    }
    for (size_t i = 0; i < ng; i++) free(g[i].h);
    free(g);
    if (st) {
        ckpt_writer_free(sw->w); /* rank 0: its temporaries go */
        sw->w = NULL;
        return st;
    }
    /* Each range a rank writes starts its write-back at once and leaves the
     * page cache once on disk (ckpt__writer_drop_behind), on every rank.
     * Without it the disk stayed idle while the ranks filled the cache, and
     * then every byte was written at the fsyncs before the vote: per-phase
     * timestamps of 4 ranks saving 4 GB on 2 cores put the writes at 1.0-1.9
     * s and the fsyncs after them at 1.9 s more (issue 32 §4).  Now the
     * writes and the write-back overlap, and the fsyncs find a rank's last
     * few ranges dirty at most (their median fell from 1.81 s to 0.08 s).
     * The save stays disk-bound, so its total time did not change beyond
     * noise (medians 3.05 s and 2.99 s over 6 runs), but it varies less
     * (2.6-3.2 s against 2.9-5.4 s), and the rank's bytes leave the cache:
     * a training job's checkpoint need not evict its data.  Not with
     * no_sync: that caller asked not to wait for the disk, and drop-behind
     * waits for each range's write-back (the MPI simulation's 16 MiB save
     * took 2-3x as long with it). */
    if (!sw->opt.no_sync) ckpt__writer_drop_behind(sw->w);
    sw->state = SW_WRITING;
    return CKPT_OK;
}

/* ---- writing -------------------------------------------------------------------- */

/* Where byte `at` of a part lies in its tensor (row-major bytes of the
 * whole tensor), and how many of the part's bytes from there run on in the
 * tensor: a part's rows run in the tensor where the axes inside them are
 * whole. */
static uint64_t tensor_byte(const part *p, uint64_t at, uint64_t *run_left) {
    const ckpt__wire_part *d = &p->d;
    bool packed = ckpt_dtype_bits(d->dtype) % 8 != 0;
    *run_left = p->nbytes - at;
    if (packed || d->ndim == 0) return at;
    uint64_t el = ckpt_dtype_bits(d->dtype) / 8;
    /* q: the innermost axis that is not whole; a run is count[q] × the
     * axes after it. */
    int q = (int)d->ndim - 1;
    while (q >= 0 && d->count[q] == d->shape[q]) q--;
    if (q < 0) return at;
    uint64_t inner = 1;
    for (uint32_t a = (uint32_t)q + 1; a < d->ndim; a++) inner *= d->shape[a];
    uint64_t run = d->count[q] * inner * el;
    uint64_t gstride[CKPT_MAX_DIMS];
    uint64_t s = el;
    for (int a = (int)d->ndim - 1; a >= 0; a--) gstride[a] = s, s *= d->shape[a];
    uint64_t r = at / run, within = at % run;
    /* Run r's index over axes [0, q) of the part, row-major. */
    uint64_t off = d->start[q] * gstride[q], rem = r;
    for (int a = q - 1; a >= 0; a--) {
        off += (d->start[a] + rem % d->count[a]) * gstride[a];
        rem /= d->count[a];
    }
    *run_left = run - within;
    return off + within;
}

/* Bytes [at, at + n) of a part into the output. */
static ckpt_status write_runs(ckpt_shard_writer *sw, const part *p, uint64_t at, const unsigned char *data, uint64_t n,
                              ckpt_error *err) {
    while (n) {
        uint64_t left, off = tensor_byte(p, at, &left), take = left < n ? left : n;
        ckpt_status st = ckpt__writer_pwrite(sw->w, p->global, off, data, (size_t)take, err);
        if (st) return st;
        at += take, data += take, n -= take;
    }
    return CKPT_OK;
}

ckpt_status ckpt_shard_writer_write(ckpt_shard_writer *sw, size_t index, uint64_t at, const void *data, uint64_t nbytes,
                                    ckpt_error *err) {
    ckpt_status st = check_state(sw, SW_WRITING, "write", err);
    if (st) return st;
    if (index >= sw->count) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, sw->path, NULL, -1, "no part %zu", index);
    part *p = &sw->parts[index];
    uint64_t end;
    if (!ckpt__add_u64(at, nbytes, &end) || end > p->nbytes)
        return ckpt__fail(err, CKPT_E_OUT_OF_RANGE, sw->path, p->d.name, -1, "bytes [%llu, %llu) are outside the part's %llu",
                          (unsigned long long)at, (unsigned long long)end, (unsigned long long)p->nbytes);
    if (nbytes && !data) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, sw->path, p->d.name, -1, "data is NULL");
    uint64_t lo = at > p->lo ? at : p->lo, hi = end < p->hi ? end : p->hi;
    if (lo >= hi) return CKPT_OK; /* another rank writes these bytes */
    double t0 = ckpt__now();
    st = write_runs(sw, p, lo, (const unsigned char *)data + (lo - at), hi - lo, err);
    __atomic_add_fetch(&sw->io_ns, (uint64_t)((ckpt__now() - t0) * 1e9), __ATOMIC_RELAXED);
    if (st == CKPT_OK) {
        __atomic_add_fetch(&p->written, hi - lo, __ATOMIC_ACQ_REL);
        __atomic_add_fetch(&sw->written, hi - lo, __ATOMIC_RELAXED);
    }
    return st;
}

typedef struct placed_part {
    size_t index;
    uint64_t file, offset; /* of the part's first byte this rank writes; UINT64_MAX: none */
} placed_part;

static int by_output_place(const void *a, const void *b) {
    const placed_part *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

ckpt_status ckpt_shard_writer_order(const ckpt_shard_writer *sw, size_t *order, size_t count, ckpt_error *err) {
    ckpt_status st = check_state((ckpt_shard_writer *)sw, SW_WRITING, "the order of the writes", err);
    if (st) return st;
    if (count != sw->count || (count && !order))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, sw->path, NULL, -1,
                          "the order has room for %zu parts; this rank declared %zu", count, sw->count);
    if (!count) return CKPT_OK;
    placed_part *pl = ckpt__malloc(count * sizeof *pl);
    if (!pl) return ckpt__oom(err, sw->path, NULL);
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) {
        const part *p = &sw->parts[i];
        uint64_t run;
        size_t file = p->hi > p->lo ? ckpt_writer_tensor_file(sw->w, p->global) : SIZE_MAX;
        pl[i] = (placed_part){i, UINT64_MAX, UINT64_MAX};
        if (file != SIZE_MAX) /* bytes this rank writes, not deduplicated away */
            pl[i].file = file, pl[i].offset = ckpt__writer_file_offset(sw->w, p->global, tensor_byte(p, p->lo, &run));
        total += p->hi - p->lo;
    }
    qsort(pl, count, sizeof *pl, by_output_place);
    /* The first part at or past byte rank/size of this rank's bytes. */
    uint64_t start = sw->c.n > 1 ? total / (uint64_t)sw->c.n * (uint64_t)sw->c.rank +
                                       total % (uint64_t)sw->c.n * (uint64_t)sw->c.rank / (uint64_t)sw->c.n
                                 : 0;
    size_t k = 0;
    for (uint64_t acc = 0; k < count && acc < start; k++) acc += sw->parts[pl[k].index].hi - sw->parts[pl[k].index].lo;
    /* Parts this rank writes nothing of stay last, out of the rotation. */
    size_t live = count;
    while (live && pl[live - 1].file == UINT64_MAX) live--;
    if (k > live) k = live;
    size_t u = 0;
    for (size_t i = k; i < live; i++) order[u++] = pl[i].index;
    for (size_t i = 0; i < k; i++) order[u++] = pl[i].index;
    for (size_t i = live; i < count; i++) order[u++] = pl[i].index;
    free(pl);
    return CKPT_OK;
}

ckpt_status ckpt_shard_writer_commit(ckpt_shard_writer *sw, ckpt_error *err) {
    ckpt_status st = check_state(sw, SW_WRITING, "commit", err);
    if (st) return st;
    sw->state = SW_FAILED;
    ckpt_error mine;
    ckpt_error_clear(&mine);
    ckpt_status local = CKPT_OK;
    for (size_t i = 0; local == CKPT_OK && i < sw->count; i++) {
        const part *p = &sw->parts[i];
        uint64_t w = __atomic_load_n(&p->written, __ATOMIC_ACQUIRE);
        if (w != p->hi - p->lo)
            local = ckpt__fail(&mine, CKPT_E_BAD_STATE, sw->path, p->d.name, -1,
                               "rank %d wrote %llu of the %llu bytes of its part of the tensor", sw->c.rank,
                               (unsigned long long)w, (unsigned long long)(p->hi - p->lo));
    }
    st = finish(&sw->c, sw->w, !sw->opt.no_sync, local, &mine, err);
    if (st == CKPT_OK) sw->state = SW_DONE;
    return st;
}

ckpt_status ckpt_shard_writer_abort(ckpt_shard_writer *sw, const ckpt_error *reason, ckpt_error *err) {
    if (!sw) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "writer is NULL");
    if (sw->state != SW_DECLARING && sw->state != SW_WRITING) return CKPT_OK;
    const char *what = sw->state == SW_DECLARING ? "declaring the tensors" : "the vote after writing the tensors";
    bool writing = sw->state == SW_WRITING;
    sw->state = SW_FAILED;
    ckpt_error mine;
    if (reason) mine = *reason;
    else ckpt__fail(&mine, CKPT_E_CANCELLED, sw->path, NULL, -1, "rank %d gave up", sw->c.rank);
    if (mine.status == CKPT_OK) mine.status = CKPT_E_CANCELLED;
    ckpt_status st = ckpt__coll_agree(&sw->c, mine.status, &mine, what, err);
    (void)writing;
    ckpt_writer_free(sw->w);
    sw->w = NULL;
    return st;
}

void ckpt_shard_writer_stats(const ckpt_shard_writer *sw, ckpt_collective_stats *stats) {
    if (!sw || !stats) return;
    *stats = sw->stats;
    stats->bytes_written += __atomic_load_n(&sw->written, __ATOMIC_RELAXED);
    stats->io_seconds += (double)__atomic_load_n(&sw->io_ns, __ATOMIC_RELAXED) * 1e-9;
}

void ckpt_shard_writer_free(ckpt_shard_writer *sw) {
    if (!sw) return;
    ckpt_writer_free(sw->w);
    free(sw->parts);
    ckpt__pairs_free(&sw->meta);
    ckpt__pairs_free(&sw->ckpt_meta);
    ckpt__arena_free(&sw->arena);
    free(sw->path);
    free(sw);
}

ckpt_status ckpt_save_collective(const char *path, const ckpt_shard *shards, size_t count,
                                 const ckpt_writer_options *options, const ckpt_comm *comm,
                                 const ckpt_collective_options *coll, ckpt_collective_stats *stats, ckpt_error *err) {
    if (count && !shards) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1, "shards is NULL");
    ckpt_shard_writer *sw;
    ckpt_status st = ckpt_shard_writer_create(path, options, comm, coll, &sw, err);
    if (st) return st;
    for (size_t i = 0; st == CKPT_OK && i < count; i++) {
        const ckpt_shard *s = &shards[i];
        st = ckpt_shard_writer_add(sw, s->name, s->dtype, s->ndim, s->shape, s->start, s->count, NULL, err);
    }
    if (st) {
        ckpt_error reason = err ? *err : (ckpt_error){.status = st};
        ckpt_shard_writer_abort(sw, &reason, NULL);
        ckpt_shard_writer_free(sw);
        return st;
    }
    st = ckpt_shard_writer_begin(sw, err);
    size_t *order = st == CKPT_OK ? ckpt__malloc((count ? count : 1) * sizeof *order) : NULL;
    if (st == CKPT_OK && !order) st = ckpt__oom(err, path, NULL);
    if (st == CKPT_OK) st = ckpt_shard_writer_order(sw, order, count, err);
    for (size_t i = 0; st == CKPT_OK && i < count; i++)
        st = ckpt_shard_writer_write(sw, order[i], 0, shards[order[i]].data, sw->parts[order[i]].nbytes, err);
    free(order);
    if (st == CKPT_OK) st = ckpt_shard_writer_commit(sw, err);
    else if (sw->state == SW_WRITING) {
        ckpt_error reason = err ? *err : (ckpt_error){.status = st};
        ckpt_shard_writer_abort(sw, &reason, NULL);
    }
    ckpt_shard_writer_stats(sw, stats);
    ckpt_shard_writer_free(sw);
    return st;
}

/* ---- converting on many ranks ------------------------------------------------------ */

/* A digest of what a plan produces, to check that every rank holds the
 * same plan. */
static uint64_t plan_digest(const ckpt_plan *p) {
    uint64_t h = p->selected_count;
    for (size_t k = 0; k < p->selected_count; k++) {
        const ckpt__plan_entry *e = &p->entries[p->selected[k]];
        uint32_t n = e->pub.source->ndim;
        uint64_t head[4] = {h, p->selected[k], (uint64_t)e->pub.dtype, n};
        h = XXH3_64bits(head, sizeof head);
        h = XXH3_64bits_withSeed(e->pub.name, strlen(e->pub.name), h);
        h = XXH3_64bits_withSeed(e->start, n * sizeof *e->start, h);
        h = XXH3_64bits_withSeed(e->count, n * sizeof *e->count, h);
        h = XXH3_64bits_withSeed(e->perm, n * sizeof *e->perm, h);
    }
    return h;
}

typedef struct placed {
    size_t k;           /* move */
    uint32_t file;
    uint64_t offset;
} placed;

static int by_place(const void *a, const void *b) {
    const placed *x = a, *y = b;
    if (x->file != y->file) return x->file < y->file ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* This rank's moves: its range of the output's bytes (files in order,
 * tensors by offset), cut at rows of the output's outer axis. */
static ckpt_status my_moves(ckpt__coll *c, ckpt_plan *p, ckpt_writer *w, ckpt__move *moves, size_t n, size_t *used,
                            ckpt_error *err) {
    placed *pl = ckpt__malloc((n ? n : 1) * sizeof *pl);
    ckpt__move *mine = ckpt__malloc((n ? n : 1) * sizeof *mine);
    if (!pl || !mine) {
        free(pl), free(mine);
        return ckpt__oom(err, NULL, NULL);
    }
    size_t m = 0;
    uint64_t total = 0;
    for (size_t k = 0; k < n; k++) {
        size_t file = ckpt_writer_tensor_file(w, moves[k].writer_index);
        if (file == SIZE_MAX) continue; /* deduplicated away */
        pl[m++] = (placed){k, (uint32_t)file, 0};
        total += p->entries[moves[k].tensor].pub.nbytes;
    }
    /* The order of the bytes: files in order, tensors by offset. */
    for (size_t i = 0; i < m; i++) pl[i].offset = ckpt__writer_tensor_offset(w, moves[pl[i].k].writer_index);
    qsort(pl, m, sizeof *pl, by_place);
    uint64_t lo = total / (uint64_t)c->n * (uint64_t)c->rank + (total % (uint64_t)c->n) * (uint64_t)c->rank / (uint64_t)c->n;
    uint64_t hi = c->rank + 1 == c->n ? total
                                     : total / (uint64_t)c->n * (uint64_t)(c->rank + 1) +
                                           (total % (uint64_t)c->n) * (uint64_t)(c->rank + 1) / (uint64_t)c->n;
    uint64_t at = 0;
    size_t u = 0;
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; st == CKPT_OK && i < m; i++) {
        ckpt__move mv = moves[pl[i].k];
        ckpt__plan_entry *e = &p->entries[mv.tensor];
        uint64_t nb = e->pub.nbytes, o = at;
        at += nb;
        bool packed = ckpt_dtype_bits(e->pub.dtype) % 8 != 0;
        uint64_t rows = e->pub.ndim && !packed ? e->pub.shape[0] : 0;
        if (!rows || !nb) { /* whole, to the rank whose range holds its first byte */
            if (o >= lo && (o < hi || (c->rank + 1 == c->n && o == hi))) mine[u++] = mv;
            continue;
        }
        uint64_t rb = nb / rows;
        /* Rows whose first byte lies in [lo, hi). */
        uint64_t j0 = lo <= o ? 0 : (lo - o + rb - 1) / rb;
        uint64_t j1 = hi <= o ? 0 : (hi - o + rb - 1) / rb;
        if (c->rank + 1 == c->n) j1 = rows;
        if (j1 > rows) j1 = rows;
        if (j0 >= j1) continue;
        if (j0 == 0 && j1 == rows) {
            mine[u++] = mv;
            continue;
        }
        uint32_t nd = e->pub.source->ndim, a = e->perm[0];
        uint64_t *sub = ckpt__arena_alloc(&p->arena, 2 * (size_t)nd * sizeof *sub);
        if (!sub) {
            st = ckpt__oom(err, NULL, NULL);
            break;
        }
        memcpy(sub, e->start, nd * sizeof *sub);
        memcpy(sub + nd, e->count, nd * sizeof *sub);
        sub[a] += j0;
        sub[nd + a] = j1 - j0;
        mv.start = sub, mv.count = sub + nd, mv.writer_at = j0 * rb;
        mine[u++] = mv;
    }
    if (st == CKPT_OK) {
        memcpy(moves, mine, u * sizeof *mine);
        *used = u;
        for (size_t k = 0; k < u; k++) c->stats->bytes_needed += ckpt__move_nbytes(p->catalog, &moves[k]);
    }
    free(pl), free(mine);
    return st;
}

ckpt_status ckpt_convert_collective(ckpt_plan *p, const char *dst_path, const ckpt_writer_options *options,
                                    const ckpt_comm *comm, const ckpt_collective_options *coll,
                                    ckpt_collective_stats *stats, ckpt_error *err) {
    ckpt__coll c;
    ckpt_status st = ckpt__coll_init(&c, comm, coll, stats, err);
    if (st) return st;
    if (!p || !dst_path)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan and destination are required");
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    if (options) CKPT__TAKE_OPTIONS(&o, options);
    o.size = sizeof o;
    ckpt_error mine;
    ckpt_error_clear(&mine);
    ckpt_status local = CKPT_OK;
    if (o.checksums)
        local = ckpt__fail(&mine, CKPT_E_INVALID_ARGUMENT, dst_path, NULL, -1,
                           "checksums need each tensor's bytes in order in one process: not with a collective convert");
    if (local == CKPT_OK && !c.exchange && c.n > 1)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, dst_path, NULL, -1,
                          "a collective convert of %d ranks needs a communicator that exchanges bytes (MPI, "
                          "torch.distributed)",
                          c.n);
    if (local == CKPT_OK) local = ckpt__plan_check(p, &mine);
    if (local == CKPT_OK) local = ckpt__plan_refuse_assembled(p, "a collective conversion", false, &mine);
    /* The rule ckpt_convert_plan applies: blocks the destination's format
     * cannot hold, that no rule asked a block type of, become f32 — on
     * every rank alike (a destination its rule refuses is left for the
     * writer to name). */
    ckpt_format format;
    int directory;
    ckpt_error unresolved;
    if (local == CKPT_OK && ckpt_destination_resolve(dst_path, &o, &format, &directory, &unresolved) == CKPT_OK)
        local = ckpt_plan_dequantize_for(p, format, &mine);
    st = ckpt__coll_agree(&c, local, &mine, "checking the plans", err);
    if (st) return st;
    /* Every rank must hold the same plan. */
    uint64_t digest = plan_digest(p);
    unsigned char *all;
    uint64_t *off;
    st = ckpt__coll_allgatherv(&c, &digest, sizeof digest, sizeof digest, &all, &off, "comparing the plans", err);
    if (st) return st;
    for (int r = 1; r < c.n && local == CKPT_OK; r++)
        if (memcmp(all + off[r], all, sizeof digest))
            local = ckpt__fail(&mine, CKPT__D(COMM_DATA), dst_path, NULL, -1,
                               "rank %d's plan differs from rank 0's (the same rules over the same checkpoint "
                               "are needed)",
                               r);
    free(all), free(off);
    st = ckpt__coll_agree(&c, local, &mine, "comparing the plans", err);
    if (st) return st;
    ckpt_writer *w = NULL;
    ckpt_status cs = CKPT_OK;
    double t0 = ckpt__now();
    if (c.rank == 0) {
        cs = ckpt__convert_writer(p, dst_path, &o, &w, err);
        if (cs == CKPT_OK && (cs = ckpt__writer_set_shared(w, err))) {
            ckpt_writer_free(w); /* its temporaries go */
            w = NULL;
        }
    }
    c.stats->io_seconds += ckpt__now() - t0;
    st = share_writer(&c, &w, cs, err);
    if (st) {
        ckpt_writer_free(w);
        return st;
    }
    ckpt__move *moves = NULL;
    size_t used = 0, count = 0;
    local = ckpt__convert_moves(p, &moves, &count, &mine);
    if (local == CKPT_OK) local = my_moves(&c, p, w, moves, count, &used, &mine);
    if (local == CKPT_OK) {
        ckpt_load_stats ls;
        memset(&ls, 0, sizeof ls);
        ckpt__engine_options eo = {.io = CKPT_IO_BUFFERED, .progress = o.progress, .user = o.user, .writer = w,
                                   .check_crc = !o.skip_crc_check};
        t0 = ckpt__now();
        local = ckpt__engine_run(p->catalog, moves, used, &eo, &ls, &mine);
        c.stats->io_seconds += ckpt__now() - t0;
        c.stats->bytes_read += ls.bytes_read;
        for (size_t k = 0; local == CKPT_OK && k < used; k++)
            c.stats->bytes_written += ckpt__move_nbytes(p->catalog, &moves[k]);
    }
    free(moves);
    st = finish(&c, w, !o.no_sync, local, &mine, err);
    ckpt_writer_free(w);
    return st;
}
