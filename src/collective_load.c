/* collective_load.c — ckpt_catalog_open_collective and ckpt_load_collective:
 * headers parsed once (rank 0's catalog broadcast as bytes, wire.c), each
 * rank reading only its slices, and the tensors every rank loads alike
 * read once — a disjoint share by each rank — then broadcast. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "catalog_internal.h"
#include "collective_internal.h"
#include "engine.h"
#include "plan_internal.h"

/* The largest catalog a rank accepts from rank 0. */
#define CATALOG_LIMIT ((uint64_t)1 << 32)
/* Replicated tensors at least this large, with at least a row per rank,
 * are read in row ranges by every rank; smaller ones whole by one. */
#define SPLIT_MIN ((uint64_t)4 << 20)

ckpt_status ckpt_catalog_open_collective(const char *path, const ckpt_catalog_options *options, const ckpt_comm *comm,
                                         const ckpt_collective_options *coll, ckpt_catalog **out, ckpt_error *err) {
    if (out) *out = NULL;
    if (!out) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "out is required");
    ckpt__coll c;
    ckpt_status st = ckpt__coll_init(&c, comm, coll, NULL, err);
    if (st) return st;
    if (!c.exchange || c.n == 1) return ckpt_catalog_open_ex(path, options, out, err);
    ckpt_catalog *cat = NULL;
    void *data = NULL;
    uint64_t n = 0;
    ckpt__buf b = {0};
    if (c.rank == 0) {
        st = ckpt_catalog_open_ex(path, options, &cat, err);
        if (st == CKPT_OK) st = ckpt__catalog_encode(cat, &b, err);
        data = b.data, n = b.len;
    }
    ckpt_error local;
    ckpt_error_clear(&local);
    if (c.rank == 0 && st) local = err ? *err : local;
    st = ckpt__coll_bcast_message(&c, 0, st, &local, &data, &n, CATALOG_LIMIT, "the catalog's broadcast", err);
    if (st == CKPT_OK && c.rank != 0) {
        st = ckpt__catalog_decode(data, (size_t)n, path, options, NULL, NULL, &cat, err);
        free(data);
        ckpt_error mine;
        if (err) mine = *err;
        st = ckpt__coll_agree(&c, st, err ? &mine : NULL, "opening the checkpoint from rank 0's catalog", err);
    } else if (st == CKPT_OK) {
        st = ckpt__coll_agree(&c, CKPT_OK, NULL, "opening the checkpoint from rank 0's catalog", err);
    }
    free(b.data);
    if (st) {
        ckpt_catalog_close(cat);
        return st;
    }
    *out = cat;
    return CKPT_OK;
}

/* ---- which tensors are replicated ------------------------------------------- */

/* Whether the entry loads its whole tensor. */
static bool whole(const ckpt__plan_entry *e) {
    const ckpt_tensor_info *t = e->pub.source;
    for (uint32_t d = 0; d < t->ndim; d++)
        if (e->count[d] != t->shape[d]) return false;
    return true;
}

/* What makes two ranks' entries load the same bytes. */
static uint64_t entry_key(const ckpt_plan *p, const ckpt__plan_entry *e) {
    const ckpt_tensor_info *t = e->pub.source;
    uint64_t head[3] = {ckpt__catalog_index_of(p->catalog, t), (uint64_t)e->pub.dtype, t->nbytes};
    uint64_t h = XXH3_64bits(head, sizeof head);
    h = XXH3_64bits_withSeed(t->name, strlen(t->name), h);
    return XXH3_64bits_withSeed(e->perm, t->ndim * sizeof *e->perm, h);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* rep[k] (per selected entry): whether every rank loads it alike.  The
 * common case — the same set everywhere — costs one 16-byte gather; else
 * every rank's keys are gathered and intersected. */
static ckpt_status find_replicated(ckpt__coll *c, ckpt_plan *p, bool *rep, ckpt_error *err) {
    size_t n = p->selected_count, m = 0;
    uint64_t *keys = ckpt__malloc((n ? n : 1) * sizeof *keys);
    if (!keys) return ckpt__oom(err, NULL, "replicated tensors");
    for (size_t k = 0; k < n; k++) {
        const ckpt__plan_entry *e = &p->entries[p->selected[k]];
        rep[k] = whole(e);
        if (rep[k]) keys[m++] = entry_key(p, e);
    }
    uint64_t digest[2] = {XXH3_64bits(keys, m * sizeof *keys), m};
    unsigned char *all = NULL;
    uint64_t *off = NULL;
    ckpt_status st = ckpt__coll_allgatherv(c, digest, sizeof digest, sizeof digest, &all, &off, "finding replicated tensors",
                                           err);
    bool same = true;
    for (int r = 0; st == CKPT_OK && r < c->n; r++) same &= !memcmp(all + off[r], digest, sizeof digest);
    free(all), free(off);
    all = NULL, off = NULL;
    if (st == CKPT_OK && !same) {
        /* Sets differ: a key is replicated when every rank has it. */
        st = ckpt__coll_allgatherv(c, keys, m * sizeof *keys, (uint64_t)1 << 30, &all, &off, "finding replicated tensors",
                                   err);
        uint64_t *common = NULL;
        size_t nc = m;
        if (st == CKPT_OK && !(common = ckpt__malloc((m ? m : 1) * sizeof *common))) st = ckpt__oom(err, NULL, NULL);
        if (st == CKPT_OK) {
            memcpy(common, keys, m * sizeof *keys);
            qsort(common, nc, sizeof *common, cmp_u64);
        }
        for (int r = 0; st == CKPT_OK && r < c->n; r++) {
            size_t len = (size_t)((off[r + 1] - off[r]) / sizeof(uint64_t)), kept = 0;
            uint64_t *theirs = ckpt__malloc((len ? len : 1) * sizeof *theirs);
            if (!theirs) {
                st = ckpt__oom(err, NULL, NULL);
                break;
            }
            memcpy(theirs, all + off[r], len * sizeof *theirs);
            qsort(theirs, len, sizeof *theirs, cmp_u64);
            for (size_t i = 0; i < nc; i++)
                if (bsearch(&common[i], theirs, len, sizeof *theirs, cmp_u64)) common[kept++] = common[i];
            nc = kept;
            free(theirs);
        }
        for (size_t k = 0; st == CKPT_OK && k < n; k++) {
            if (!rep[k]) continue;
            uint64_t key = entry_key(p, &p->entries[p->selected[k]]);
            rep[k] = bsearch(&key, common, nc, sizeof *common, cmp_u64) != NULL;
        }
        free(common);
        free(all), free(off);
    }
    free(keys);
    return st;
}

/* ---- who reads what of them ---------------------------------------------------- */

typedef struct share {
    size_t entry;       /* index in p->entries */
    uint64_t nbytes;    /* output bytes */
    uint64_t rows, row_bytes;
    bool split;         /* rows divided among all ranks; else one owner */
    int owner;
} share;

/* Rows [first, first + count) of part r of `rows` cut as torch.tensor_split. */
static void part_rows(uint64_t rows, int n, int r, uint64_t *first, uint64_t *count) {
    uint64_t q = rows / (uint64_t)n, rem = rows % (uint64_t)n, ur = (uint64_t)r;
    *first = ur * q + (ur < rem ? ur : rem);
    *count = q + (ur < rem ? 1 : 0);
}

/* Deterministic on every rank: large tensors split by rows of their
 * outermost output axis, the others whole to the least-loaded rank. */
static ckpt_status assign(ckpt__coll *c, ckpt_plan *p, const bool *rep, share **out, size_t *out_count,
                          ckpt_error *err) {
    size_t n = 0;
    for (size_t k = 0; k < p->selected_count; k++) n += rep[k];
    share *s = ckpt__calloc(n ? n : 1, sizeof *s);
    uint64_t *load = ckpt__calloc((size_t)c->n, sizeof *load);
    if (!s || !load) {
        free(s), free(load);
        return ckpt__oom(err, NULL, "replicated tensors");
    }
    size_t m = 0;
    for (size_t k = 0; k < p->selected_count; k++) {
        if (!rep[k]) continue;
        const ckpt__plan_entry *e = &p->entries[p->selected[k]];
        share *x = &s[m++];
        x->entry = p->selected[k];
        x->nbytes = e->pub.nbytes;
        bool packed = ckpt_dtype_bits(e->pub.dtype) % 8 != 0;
        x->rows = e->pub.ndim && !packed ? e->pub.shape[0] : 1;
        x->row_bytes = x->rows ? x->nbytes / x->rows : 0;
        x->split = !packed && e->pub.ndim && x->nbytes >= SPLIT_MIN && x->rows >= (uint64_t)c->n;
        if (x->split)
            for (int r = 0; r < c->n; r++) {
                uint64_t first, count;
                part_rows(x->rows, c->n, r, &first, &count);
                load[r] += count * x->row_bytes;
            }
    }
    for (size_t i = 0; i < m; i++) {
        if (s[i].split) continue;
        int best = 0;
        for (int r = 1; r < c->n; r++)
            if (load[r] < load[best]) best = r;
        s[i].owner = best;
        load[best] += s[i].nbytes;
    }
    free(load);
    *out = s, *out_count = m;
    return CKPT_OK;
}

/* ---- sharing -------------------------------------------------------------------- */

static ckpt_status broadcast_shares(ckpt__coll *c, ckpt_plan *p, const share *s, size_t m, ckpt_error *err) {
    ckpt_status st = CKPT_OK;
    /* Split tensors: each rank's rows, in place. */
    for (size_t i = 0; st == CKPT_OK && i < m; i++) {
        if (!s[i].split) continue;
        unsigned char *data = p->entries[s[i].entry].pub.data;
        for (int r = 0; st == CKPT_OK && r < c->n; r++) {
            uint64_t first, count;
            part_rows(s[i].rows, c->n, r, &first, &count);
            st = ckpt__coll_bcast(c, data + first * s[i].row_bytes, count * s[i].row_bytes, r,
                                  "broadcasting replicated tensors", err);
        }
    }
    /* Whole tensors: each owner's, packed into batches (large ones alone, in
     * place). */
    unsigned char *stage = NULL;
    uint64_t cap = 0;
    for (size_t i = 0; st == CKPT_OK && i < m; i++)
        if (!s[i].split && s[i].nbytes < CKPT__COMM_CHUNK && s[i].nbytes > cap) cap = s[i].nbytes;
    uint64_t batch_cap = cap ? (cap > (16u << 20) ? cap : (16u << 20)) : 0;
    if (batch_cap > CKPT__COMM_CHUNK) batch_cap = CKPT__COMM_CHUNK;
    if (st == CKPT_OK && batch_cap && !(stage = ckpt__malloc((size_t)batch_cap))) {
        c->broken = true; /* the others go on broadcasting */
        return ckpt__oom(err, NULL, "a staging buffer for broadcasts");
    }
    for (int r = 0; st == CKPT_OK && r < c->n; r++) {
        size_t i = 0;
        while (st == CKPT_OK && i < m) {
            if (s[i].split || s[i].owner != r) {
                i++;
                continue;
            }
            if (s[i].nbytes >= CKPT__COMM_CHUNK || s[i].nbytes > batch_cap) {
                st = ckpt__coll_bcast(c, p->entries[s[i].entry].pub.data, s[i].nbytes, r, "broadcasting replicated tensors",
                                      err);
                i++;
                continue;
            }
            /* A batch: consecutive small tensors of this owner. */
            size_t j = i;
            uint64_t used = 0;
            while (j < m && (s[j].split || s[j].owner != r ||
                             (s[j].nbytes < CKPT__COMM_CHUNK && s[j].nbytes <= batch_cap && used + s[j].nbytes <= batch_cap))) {
                if (!s[j].split && s[j].owner == r) used += s[j].nbytes;
                j++;
            }
            if (c->rank == r)
                for (size_t k = i, at = 0; k < j; k++)
                    if (!s[k].split && s[k].owner == r && s[k].nbytes)
                        memcpy(stage + at, p->entries[s[k].entry].pub.data, (size_t)s[k].nbytes), at += s[k].nbytes;
            st = ckpt__coll_bcast(c, stage, used, r, "broadcasting replicated tensors", err);
            if (st == CKPT_OK && c->rank != r)
                for (size_t k = i, at = 0; k < j; k++)
                    if (!s[k].split && s[k].owner == r && s[k].nbytes)
                        memcpy(p->entries[s[k].entry].pub.data, stage + at, (size_t)s[k].nbytes), at += s[k].nbytes;
            i = j;
        }
    }
    free(stage);
    return st;
}

/* ---- the load --------------------------------------------------------------------- */

static void fill_stats(ckpt__coll *c, const ckpt_load_stats *ls) {
    c->stats->bytes_needed += ls->bytes_needed;
    c->stats->bytes_read += ls->bytes_read;
}

ckpt_status ckpt_load_collective(ckpt_plan *p, const ckpt_load_options *options, const ckpt_comm *comm,
                                 const ckpt_collective_options *coll, ckpt_collective_stats *stats, ckpt_error *err) {
    ckpt__coll c;
    ckpt_status st = ckpt__coll_init(&c, comm, coll, stats, err);
    if (st) return st;
    if (!p) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan is required");
    ckpt_load_options o;
    ckpt_load_options_init(&o);
    if (options) CKPT__TAKE_OPTIONS(&o, options);
    o.size = sizeof o;
    double t0 = ckpt__now();
    if (!c.exchange || c.n == 1 || c.replicated == CKPT_REPLICATED_READ) {
        /* Every rank reads all it needs; one status for all when they can vote. */
        st = ckpt_load(p, &o, err);
        c.stats->io_seconds = ckpt__now() - t0;
        fill_stats(&c, &p->stats);
        if (c.exchange && c.n > 1) {
            ckpt_error mine;
            if (err) mine = *err;
            st = ckpt__coll_agree(&c, st, err ? &mine : NULL, "loading the checkpoint", err);
            if (st) ckpt__plan_release(p);
        }
        return st;
    }
    ckpt_error mine;
    ckpt_error_clear(&mine);
    st = ckpt__plan_check(p, &mine);
    /* a joined output's pieces are moves of other entries' tensors, which
     * the shares below do not follow */
    if (st == CKPT_OK) st = ckpt__plan_refuse_joined(p, "a collective load", &mine);
    /* From here every rank takes part in every step, whatever failed. */
    ckpt_status local = st;
    if (local == CKPT_OK) {
        memset(&p->stats, 0, sizeof p->stats);
        ckpt__plan_release(p);
    }
    st = ckpt__coll_agree(&c, local, &mine, "checking the plans", err);
    if (st) return st;
    size_t n = p->selected_count, m = 0, moves_used = 0;
    bool *rep = ckpt__calloc(n ? n : 1, sizeof *rep);
    share *shares = NULL;
    ckpt__move *moves = NULL;
    uint64_t views = 0;
    /* The replicated set is agreed through the gathers themselves. */
    st = rep ? find_replicated(&c, p, rep, err) : ckpt__oom(err, NULL, NULL);
    if (st) {
        free(rep);
        return st;
    }
    local = assign(&c, p, rep, &shares, &m, &mine);
    if (local == CKPT_OK) local = ckpt__load_moves(p, &o, rep, &moves, &moves_used, &views, NULL, &mine);
    if (local == CKPT_OK) {
        /* The moves of replicated entries become this rank's share of them. */
        size_t used = 0, si = 0;
        for (size_t k = 0; k < moves_used; k++) {
            ckpt__move mv = moves[k];
            ckpt__plan_entry *e = &p->entries[mv.tensor];
            while (si < m && shares[si].entry < mv.tensor) si++;
            if (si >= m || shares[si].entry != mv.tensor) {
                moves[used++] = mv;
                continue;
            }
            const share *x = &shares[si];
            if (!x->split) {
                if (x->owner == c.rank) moves[used++] = mv;
                continue;
            }
            uint64_t first, count;
            part_rows(x->rows, c.n, c.rank, &first, &count);
            if (!count) continue;
            /* Rows of the output's outer axis are source axis perm[0]. */
            uint32_t a = e->perm[0];
            uint64_t *sub = ckpt__arena_alloc(&p->arena, 2 * (size_t)e->pub.ndim * sizeof *sub);
            if (!sub) {
                local = ckpt__oom(&mine, NULL, NULL);
                break;
            }
            memcpy(sub, e->start, e->pub.ndim * sizeof *sub);
            memcpy(sub + e->pub.ndim, e->count, e->pub.ndim * sizeof *sub);
            sub[a] += first;
            sub[e->pub.ndim + a] = count;
            mv.start = sub, mv.count = sub + e->pub.ndim;
            mv.dst = (unsigned char *)e->pub.data + first * x->row_bytes;
            moves[used++] = mv;
        }
        moves_used = used;
    }
    if (local == CKPT_OK) {
        ckpt__engine_options eo = {.threads = o.threads, .chunk_bytes = o.chunk_bytes,
                                   .io = ckpt__catalog_io(p->catalog),
                                   .io_uring = o.io_uring, .progress = o.progress, .user = o.user,
                                   .check_crc = !o.skip_crc_check};
        local = ckpt__engine_run(p->catalog, moves, moves_used, &eo, &p->stats, &mine);
        p->stats.views = views;
    }
    c.stats->io_seconds = ckpt__now() - t0;
    fill_stats(&c, &p->stats);
    for (size_t i = 0; i < m; i++) c.stats->replicated_bytes += shares[i].nbytes;
    st = ckpt__coll_agree(&c, local, &mine, "reading the checkpoint", err);
    if (st == CKPT_OK) st = broadcast_shares(&c, p, shares, m, err);
    /* Items are whole only once the shares are exchanged: all handed over now. */
    for (size_t k = 0; st == CKPT_OK && o.item_done && k < p->selected_count; k++)
        if (o.item_done(k, o.item_done_user))
            st = ckpt__fail(err, CKPT_E_CANCELLED, NULL, p->entries[p->selected[k]].pub.name, -1,
                            "cancelled by the item_done callback");
    free(moves);
    free(shares);
    free(rep);
    if (st) ckpt__plan_release(p);
    return st;
}
