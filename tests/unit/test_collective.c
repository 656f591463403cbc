/* Collective operations between threads (threadcomm.c stands in for MPI or
 * torch.distributed): the catalog's encoding, collective opens and loads
 * against single-process loads, the shard writer and the collective
 * convert against single-process writers (byte for byte), and failures —
 * a rank that fails, a rank that never comes — ending with clear errors
 * naming the rank and nothing published. */
#include <dirent.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/wire.h"
#include "catalog_internal.h"
#include "collective_internal.h"
#include "helpers.h"
#include "threadcomm.h"
#include "writer_internal.h"

#ifndef CKPT_FIXTURES
#error "CKPT_FIXTURES must name tests/fault/fixtures"
#endif

/* ---- a test checkpoint ---------------------------------------------------------- */

typedef struct spec {
    const char *name;
    ckpt_dtype dtype;
    uint32_t ndim;
    uint64_t shape[3];
} spec;

static const spec SPECS[] = {
    {"model.embed.weight", CKPT_F32, 2, {64, 16}},
    {"model.layers.0.q_proj.weight", CKPT_BF16, 2, {32, 24}},
    {"model.layers.0.o_proj.weight", CKPT_BF16, 2, {24, 32}},
    {"model.layers.0.norm.weight", CKPT_F32, 1, {16}},
    {"model.big.weight", CKPT_F32, 2, {1100, 1000}}, /* 4.4 MB: replicated ones this large are read in row ranges */
    {"model.step", CKPT_I64, 0, {0}},
    {"model.empty", CKPT_F16, 2, {0, 5}},
    {"model.cube", CKPT_I16, 3, {5, 6, 7}},
};
#define NSPECS (sizeof SPECS / sizeof SPECS[0])

static uint64_t spec_bytes(const spec *s) {
    uint64_t n = ckpt_dtype_bits(s->dtype) / 8;
    for (uint32_t a = 0; a < s->ndim; a++) n *= s->shape[a];
    return n;
}

static unsigned char pattern(size_t tensor, uint64_t i) { return (unsigned char)(i * 131 + tensor * 29 + (i >> 9) + 3); }

static unsigned char *spec_data(size_t t) {
    uint64_t n = spec_bytes(&SPECS[t]);
    unsigned char *d = malloc(n ? n : 1);
    for (uint64_t i = 0; i < n; i++) d[i] = pattern(t, i);
    return d;
}

/* Writes the test checkpoint with one process's writer. */
static void write_reference(const char *path, uint64_t max_shard) {
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = max_shard;
    o.no_sync = 1;
    ckpt_writer *w;
    ckpt_error err;
    assert_int_equal(ckpt_writer_create(path, &o, &w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_set_metadata(w, "format", "pt", &err), CKPT_OK);
    for (size_t i = 0; i < NSPECS; i++)
        assert_int_equal(ckpt_writer_add_tensor(w, SPECS[i].name, SPECS[i].dtype, SPECS[i].ndim, SPECS[i].shape, NULL, &err),
                         CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    for (size_t i = 0; i < NSPECS; i++) {
        unsigned char *d = spec_data(i);
        assert_int_equal(ckpt_writer_write(w, i, d, spec_bytes(&SPECS[i]), &err), CKPT_OK);
        free(d);
    }
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
}

/* Every file of two directories (or two files) byte for byte. */
static void assert_same_tree(const char *a, const char *b) {
    DIR *d = opendir(a);
    if (!d) {
        size_t n1, n2;
        char *x = read_all(a, &n1), *y = read_all(b, &n2);
        assert_non_null(x);
        assert_non_null(y);
        assert_int_equal(n1, n2);
        assert_memory_equal(x, y, n1);
        free(x), free(y);
        return;
    }
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char pa[1024], pb[1024];
        snprintf(pa, sizeof pa, "%s/%s", a, e->d_name);
        snprintf(pb, sizeof pb, "%s/%s", b, e->d_name);
        assert_same_tree(pa, pb);
        count++;
    }
    closedir(d);
    assert_int_equal(count, dir_entries(b));
}

/* ---- the catalog's encoding ------------------------------------------------------- */

static void assert_same_catalog(const ckpt_catalog *a, const ckpt_catalog *b) {
    assert_int_equal(ckpt_catalog_format(a), ckpt_catalog_format(b));
    assert_int_equal(ckpt_catalog_tensor_count(a), ckpt_catalog_tensor_count(b));
    assert_int_equal(ckpt_catalog_file_count(a), ckpt_catalog_file_count(b));
    const char *ia = ckpt_catalog_index_path(a), *ib = ckpt_catalog_index_path(b);
    assert_true((!ia && !ib) || (ia && ib && !strcmp(ia, ib)));
    const char *ta = ckpt_catalog_tree_json(a), *tb = ckpt_catalog_tree_json(b);
    assert_true((!ta && !tb) || (ta && tb && !strcmp(ta, tb)));
    for (size_t f = 0; f < ckpt_catalog_file_count(a); f++) {
        assert_string_equal(ckpt_catalog_file_path(a, f), ckpt_catalog_file_path(b, f));
        assert_int_equal(ckpt_catalog_file_size(a, f), ckpt_catalog_file_size(b, f));
        const ckpt__pairs *ma = ckpt__cat_file_metadata(a, f), *mb = ckpt__cat_file_metadata(b, f);
        assert_int_equal(ma->count, mb->count);
        for (size_t i = 0; i < ma->count; i++) {
            assert_string_equal(ma->keys[i], mb->keys[i]);
            assert_string_equal(ma->values[i], mb->values[i]);
        }
    }
    assert_int_equal(ckpt_catalog_metadata_count(a), ckpt_catalog_metadata_count(b));
    for (size_t i = 0; i < ckpt_catalog_metadata_count(a); i++) {
        const char *ka, *va, *kb, *vb;
        ckpt_catalog_metadata_entry(a, i, &ka, &va);
        ckpt_catalog_metadata_entry(b, i, &kb, &vb);
        assert_string_equal(ka, kb);
        assert_string_equal(va, vb);
    }
    assert_int_equal(ckpt__catalog_storage_count(a), ckpt__catalog_storage_count(b));
    for (size_t i = 0; i < ckpt__catalog_storage_count(a); i++) {
        uint32_t fa, fb;
        uint64_t ba, bb, na, nb;
        ckpt__catalog_storage_at(a, i, &fa, &ba, &na);
        ckpt__catalog_storage_at(b, i, &fb, &bb, &nb);
        assert_int_equal(fa, fb);
        assert_int_equal(ba, bb);
        assert_int_equal(na, nb);
    }
    for (size_t i = 0; i < ckpt_catalog_tensor_count(a); i++) {
        const ckpt_tensor_info *x = ckpt_catalog_tensor(a, i), *y = ckpt_catalog_tensor(b, i);
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->dtype, y->dtype);
        assert_int_equal(x->ndim, y->ndim);
        assert_memory_equal(x->shape, y->shape, x->ndim * sizeof *x->shape);
        assert_int_equal(x->nbytes, y->nbytes);
        assert_int_equal(x->file, y->file);
        assert_int_equal(x->offset, y->offset);
        assert_int_equal(x->storage, y->storage);
        assert_int_equal(x->big_endian, y->big_endian);
        assert_int_equal(x->compressed, y->compressed);
        assert_true(!x->strides == !y->strides);
        if (x->strides) assert_memory_equal(x->strides, y->strides, x->ndim * sizeof *x->strides);
        uint32_t pa, pb;
        const ckpt__piece *qa = ckpt__catalog_pieces(a, i, &pa), *qb = ckpt__catalog_pieces(b, i, &pb);
        assert_int_equal(pa, pb);
        for (uint32_t k = 0; k < pa; k++) {
            assert_int_equal(qa[k].file, qb[k].file);
            assert_int_equal(qa[k].offset, qb[k].offset);
            assert_int_equal(qa[k].record, qb[k].record);
            assert_int_equal(qa[k].record_size, qb[k].record_size);
            assert_int_equal(qa[k].big_endian, qb[k].big_endian);
        }
        /* And the bytes read through each. */
        unsigned char *da = malloc(x->nbytes + 1), *db = malloc(x->nbytes + 1);
        ckpt_error err;
        assert_int_equal(ckpt_catalog_read(a, x, 0, da, x->nbytes, &err), CKPT_OK);
        assert_int_equal(ckpt_catalog_read(b, y, 0, db, y->nbytes, &err), CKPT_OK);
        assert_memory_equal(da, db, x->nbytes);
        free(da), free(db);
    }
}

static void round_trip(const char *path) {
    ckpt_catalog *a, *b;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(path, &a, &err), CKPT_OK);
    ckpt__buf buf = {0};
    assert_int_equal(ckpt__catalog_encode(a, &buf, &err), CKPT_OK);
    assert_int_equal(ckpt__catalog_decode(buf.data, buf.len, path, NULL, NULL, NULL, &b, &err), CKPT_OK);
    assert_same_catalog(a, b);
    /* Every cut of the bytes is refused as malformed, never a crash. */
    for (size_t n = 0; n < buf.len; n += 1 + n / 64) {
        ckpt_catalog *c = NULL;
        ckpt_status st = ckpt__catalog_decode(buf.data, n, path, NULL, NULL, NULL, &c, &err);
        assert_code(st, err, CKPT__D(COMM_DATA));
        assert_null(c);
    }
    free(buf.data);
    ckpt_catalog_close(a);
    ckpt_catalog_close(b);
}

static void test_catalog_encoding_round_trip(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_reference(in_dir(dir, "sharded"), 4000);
    round_trip(in_dir(dir, "sharded"));
    write_reference(in_dir(dir, "one.safetensors"), 0);
    round_trip(in_dir(dir, "one.safetensors"));
    /* torch files: storages shared by views with strides, a legacy stream,
     * and DEFLATE records. */
    round_trip(CKPT_FIXTURES "/model.pt");
    round_trip(CKPT_FIXTURES "/legacy.pt");
    round_trip(CKPT_FIXTURES "/rezipped.pt");
    scratch_free(dir);
}

static void test_catalog_decode_checks_files(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *path = strdup(in_dir(dir, "one.safetensors"));
    write_reference(path, 0);
    ckpt_catalog *a, *b = NULL;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(path, &a, &err), CKPT_OK);
    ckpt__buf buf = {0};
    assert_int_equal(ckpt__catalog_encode(a, &buf, &err), CKPT_OK);
    ckpt_catalog_close(a);
    /* The file changed size between rank 0's open and this rank's. */
    FILE *f = fopen(path, "ab");
    fputc(0, f);
    fclose(f);
    assert_code(ckpt__catalog_decode(buf.data, buf.len, path, NULL, NULL, NULL, &b, &err), err, CKPT__D(COMM_DATA));
    assert_non_null(strstr(err.message, "do not see the same files"));
    assert_null(b);
    /* A piece past the end of its file: the first tensor's offset, moved. */
    remove(path);
    write_reference(path, 0);
    ckpt__rd r = {.p = (const unsigned char *)buf.data, .n = buf.len};
    (void)r;
    char *bad = malloc(buf.len);
    memcpy(bad, buf.data, buf.len);
    /* Find the first piece's offset: after "model.embed.weight"'s name,
     * dtype, ndim, shape, storage, piece count and file. */
    const char *name = "model.embed.weight";
    char *at = memmem(bad, buf.len, name, strlen(name));
    assert_non_null(at);
    at += strlen(name) + 4 + 4 + 2 * 8 + 4 + 4 + 4;
    at[7] = 0x7f; /* offset += 2^62 */
    assert_code(ckpt__catalog_decode(bad, buf.len, path, NULL, NULL, NULL, &b, &err), err, CKPT__D(COMM_DATA));
    assert_non_null(strstr(err.message, "outside its file"));
    free(bad);
    free(buf.data);
    free((char *)path);
    scratch_free(dir);
}

/* ---- collective opens and loads ----------------------------------------------------- */

typedef struct load_job {
    const char *path;
    int n;
    ckpt_replicated mode;
    ckpt_comm comms[THREADCOMM_MAX];
    ckpt_status st[THREADCOMM_MAX];
    char msg[THREADCOMM_MAX][2048];
    int mismatches[THREADCOMM_MAX];
    ckpt_collective_stats stats[THREADCOMM_MAX];
    uint64_t replicated_read[THREADCOMM_MAX];
    atomic_uint_fast64_t done_calls[THREADCOMM_MAX], done_index_sum[THREADCOMM_MAX]; /* item_done */
} load_job;

typedef struct {
    load_job *job;
    int rank;
} done_ctx;

/* The other ranks open the files rank 0 names as ckpt_catalog_open would:
 * beneath the directory they were given, so that a shard that is a link
 * out of it there, or a name outside it, is refused. */
static void test_catalog_decode_opens_files_beneath(void **state) {
    (void)state;
    char *dir = scratch_dir();
    char *sharded = strdup(in_dir(dir, "sharded"));
    write_reference(sharded, 4000);
    ckpt_catalog *a, *b = NULL;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(sharded, &a, &err), CKPT_OK);
    ckpt__buf buf = {0};
    assert_int_equal(ckpt__catalog_encode(a, &buf, &err), CKPT_OK);
    char *shard = strdup(ckpt_catalog_file_path(a, 1));
    ckpt_catalog_close(a);
    /* Given another directory, or none: rank 0's names are not inside it. */
    char *elsewhere = strdup(in_dir(dir, "elsewhere"));
    assert_int_equal(mkdir(elsewhere, 0755), 0);
    assert_int_equal(ckpt__catalog_decode(buf.data, buf.len, elsewhere, NULL, NULL, NULL, &b, &err), CKPT_E_UNSAFE_PATH);
    assert_non_null(strstr(err.message, "is not inside the checkpoint's directory"));
    assert_int_equal(ckpt__catalog_decode(buf.data, buf.len, NULL, NULL, NULL, NULL, &b, &err), CKPT_E_UNSAFE_PATH);
    /* A shard that is, on this rank, a link out of the directory. */
    assert_int_equal(rename(shard, in_dir(dir, "moved.safetensors")), 0);
    assert_int_equal(symlink("../moved.safetensors", shard), 0);
    assert_int_equal(ckpt__catalog_decode(buf.data, buf.len, sharded, NULL, NULL, NULL, &b, &err), CKPT_E_UNSAFE_PATH);
    assert_string_equal(err.path, shard);
    assert_null(b);
    free(buf.data);
    free(shard);
    free(elsewhere);
    free(sharded);
    scratch_free(dir);
}

static int count_done(size_t item, void *user) {
    done_ctx *d = user;
    atomic_fetch_add(&d->job->done_calls[d->rank], 1);
    atomic_fetch_add(&d->job->done_index_sum[d->rank], item);
    return 0;
}

/* The plan of rank r of n: q/o projections split (dim 0 / dim 1), the
 * cube's middle axis sliced, the rest whole. */
static ckpt_status make_plan(ckpt_catalog *cat, int r, int n, ckpt_plan **out, ckpt_error *err) {
    ckpt_plan *p;
    ckpt_status st = ckpt_plan_create(cat, &p, err);
    if (st == CKPT_OK) st = ckpt_plan_split(p, "*q_proj.weight", 0, (uint64_t)r, (uint64_t)n, err);
    if (st == CKPT_OK) st = ckpt_plan_split(p, "*o_proj.weight", 1, (uint64_t)r, (uint64_t)n, err);
    if (st == CKPT_OK) st = ckpt_plan_split(p, "model.cube", 1, (uint64_t)r, (uint64_t)n, err);
    if (st == CKPT_OK) st = ckpt_plan_cast(p, "model.embed.weight", CKPT_BF16, err);
    if (st) ckpt_plan_free(p), p = NULL;
    *out = p;
    return st;
}

static void load_rank(int r, void *user) {
    load_job *j = user;
    ckpt_error err;
    ckpt_catalog *cat = NULL, *solo = NULL;
    ckpt_plan *p = NULL, *q = NULL;
    ckpt_collective_options co;
    ckpt_collective_options_init(&co);
    co.timeout_ms = 20000;
    co.replicated = j->mode;
    ckpt_status st = ckpt_catalog_open_collective(j->path, NULL, &j->comms[r], &co, &cat, &err);
    if (st == CKPT_OK) st = make_plan(cat, r, j->n, &p, &err);
    ckpt_load_options lo;
    ckpt_load_options_init(&lo);
    lo.threads = 2;
    done_ctx dc = {j, r};
    lo.item_done = count_done, lo.item_done_user = &dc;
    if (st == CKPT_OK) st = ckpt_load_collective(p, &lo, &j->comms[r], &co, &j->stats[r], &err);
    /* every item handed over once, whichever path the load took */
    uint64_t items = st == CKPT_OK ? ckpt_plan_count(p) : 0;
    if (st == CKPT_OK && (atomic_load(&j->done_calls[r]) != items ||
                          atomic_load(&j->done_index_sum[r]) != items * (items - 1) / 2))
        j->mismatches[r]++;
    lo.item_done = NULL;
    j->st[r] = st;
    if (st) snprintf(j->msg[r], sizeof j->msg[r], "%s", err.message);
    /* The same plan loaded alone. */
    if (st == CKPT_OK && ckpt_catalog_open(j->path, &solo, &err) == CKPT_OK && make_plan(solo, r, j->n, &q, &err) == CKPT_OK &&
        ckpt_load(q, &lo, &err) == CKPT_OK) {
        if (ckpt_plan_count(p) != ckpt_plan_count(q)) j->mismatches[r]++;
        for (size_t i = 0; i < ckpt_plan_count(p) && i < ckpt_plan_count(q); i++) {
            const ckpt_plan_item *a = ckpt_plan_item_at(p, i), *b = ckpt_plan_item_at(q, i);
            if (strcmp(a->name, b->name) || a->nbytes != b->nbytes || (a->nbytes && memcmp(a->data, b->data, a->nbytes)))
                j->mismatches[r]++;
        }
    } else if (st == CKPT_OK) {
        j->mismatches[r] = -1;
    }
    ckpt_plan_free(p);
    ckpt_plan_free(q);
    ckpt_catalog_close(cat);
    ckpt_catalog_close(solo);
}

static void run_load(const char *path, int n, ckpt_replicated mode, load_job *j) {
    memset(j, 0, sizeof *j);
    j->path = path, j->n = n, j->mode = mode;
    threadcomm *t = threadcomm_create(n, j->comms);
    threadcomm_run(n, load_rank, j);
    threadcomm_free(t);
    for (int r = 0; r < n; r++) {
        if (j->st[r]) fprintf(stderr, "rank %d: %s\n", r, j->msg[r]);
        assert_int_equal(j->st[r], CKPT_OK);
        assert_int_equal(j->mismatches[r], 0);
    }
}

static void test_load_collective_equals_single_loads(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *path = strdup(in_dir(dir, "sharded"));
    write_reference(path, 4000000);
    uint64_t replicated = 0;
    for (size_t i = 0; i < NSPECS; i++)
        if (!strstr(SPECS[i].name, "proj") && strcmp(SPECS[i].name, "model.cube"))
            replicated += strcmp(SPECS[i].name, "model.embed.weight") ? spec_bytes(&SPECS[i]) : spec_bytes(&SPECS[i]) / 2;
    for (int n = 1; n <= 4; n++) {
        load_job j;
        run_load(path, n, CKPT_REPLICATED_BROADCAST, &j);
        /* Replicated bytes are read once in all: every rank reads less than
         * all of them (except alone), and together no more than them plus
         * the slices. */
        uint64_t read = 0, needed = 0;
        for (int r = 0; r < n; r++) {
            assert_int_equal(j.stats[r].replicated_bytes, n > 1 ? replicated : 0);
            read += j.stats[r].bytes_read;
            needed += j.stats[r].bytes_needed;
            if (n > 1) assert_true(j.stats[r].bytes_received > 0);
        }
        uint64_t embed_src = spec_bytes(&SPECS[0]) / 2; /* the cast reads F32 for a BF16 output */
        uint64_t sliced = spec_bytes(&SPECS[1]) + spec_bytes(&SPECS[2]) + spec_bytes(&SPECS[7]);
        assert_true(needed <= replicated + embed_src + sliced);
        assert_true(read >= needed);
        run_load(path, n, CKPT_REPLICATED_READ, &j);
        for (int r = 0; r < n; r++) assert_int_equal(j.stats[r].bytes_received, 0);
    }
    free((char *)path);
    scratch_free(dir);
}

static void open_missing_rank(int r, void *user) {
    load_job *j = user;
    ckpt_error err;
    ckpt_catalog *cat = NULL;
    ckpt_collective_options co;
    ckpt_collective_options_init(&co);
    co.timeout_ms = 20000;
    j->st[r] = ckpt_catalog_open_collective(j->path, NULL, &j->comms[r], &co, &cat, &err);
    snprintf(j->msg[r], sizeof j->msg[r], "%s", err.message);
    if (cat) j->mismatches[r]++, ckpt_catalog_close(cat);
}

static void test_open_collective_failure_reaches_every_rank(void **state) {
    (void)state;
    load_job j;
    memset(&j, 0, sizeof j);
    j.path = "/nonexistent/ckpt/model";
    j.n = 3;
    threadcomm *t = threadcomm_create(3, j.comms);
    threadcomm_run(3, open_missing_rank, &j);
    threadcomm_free(t);
    for (int r = 0; r < 3; r++) assert_int_equal(j.mismatches[r], 0);
    assert_int_equal(j.st[0], CKPT_E_NOT_FOUND);
    for (int r = 1; r < 3; r++) {
        assert_int_equal(j.st[r], CKPT_E_PEER); /* CKPT_D_PEER_FAILED: the message says it */
        assert_non_null(strstr(j.msg[r], "rank 0 failed (CKPT_E_NOT_FOUND)"));
    }
}

/* ---- the shard writer ----------------------------------------------------------- */

typedef enum fault { NONE, OVERLAP, HOLE, SHAPE, ABORT_WRITING, VANISH, ABORT_DECLARING } fault;

typedef struct save_job {
    const char *path;
    int n;
    fault fault;
    int culprit;
    uint64_t max_shard;
    ckpt_comm comms[THREADCOMM_MAX];
    ckpt_status st[THREADCOMM_MAX];
    char msg[THREADCOMM_MAX][2048];
    ckpt_collective_stats stats[THREADCOMM_MAX];
} save_job;

/* Rank r's part of tensor t: rows of dim 0 (q_proj, embed), columns of
 * dim 1 (o_proj), the cube's middle axis; the others whole on every rank
 * (replicated). */
static void part_of(size_t t, int r, int n, uint64_t *start, uint64_t *count) {
    const spec *s = &SPECS[t];
    for (uint32_t a = 0; a < s->ndim; a++) start[a] = 0, count[a] = s->shape[a];
    int axis = strstr(s->name, "o_proj") || !strcmp(s->name, "model.cube") ? 1
               : strstr(s->name, "q_proj") || strstr(s->name, "embed") ? 0
                                                                         : -1;
    if (axis < 0) return;
    uint64_t size = s->shape[axis], q = size / (uint64_t)n, rem = size % (uint64_t)n, ur = (uint64_t)r;
    start[axis] = ur * q + (ur < rem ? ur : rem);
    count[axis] = q + (ur < rem ? 1 : 0);
}

/* The part's bytes, cut from the whole tensor. */
static unsigned char *part_data(size_t t, const uint64_t *start, const uint64_t *count) {
    const spec *s = &SPECS[t];
    uint64_t el = ckpt_dtype_bits(s->dtype) / 8, numel = 1;
    for (uint32_t a = 0; a < s->ndim; a++) numel *= count[a];
    unsigned char *whole = spec_data(t), *out = malloc(numel * el + 1);
    for (uint64_t i = 0; i < numel; i++) {
        uint64_t rem = i, g = 0, stride = 1;
        for (uint32_t a = s->ndim; a-- > 0;) {
            g += (start[a] + rem % count[a]) * stride;
            rem /= count[a];
            stride *= s->shape[a];
        }
        memcpy(out + i * el, whole + g * el, el);
    }
    free(whole);
    return out;
}

static void save_rank(int r, void *user) {
    save_job *j = user;
    ckpt_error err;
    ckpt_error_clear(&err);
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = j->max_shard;
    o.no_sync = 1;
    ckpt_collective_options co;
    ckpt_collective_options_init(&co);
    co.timeout_ms = j->fault == VANISH ? 1500 : 20000;
    ckpt_shard_writer *sw = NULL;
    ckpt_status st = ckpt_shard_writer_create(j->path, &o, &j->comms[r], &co, &sw, &err);
    if (st == CKPT_OK) st = ckpt_shard_writer_set_metadata(sw, "format", "pt", &err);
    uint64_t starts[NSPECS][3], counts[NSPECS][3];
    size_t idx[NSPECS];
    for (size_t t = 0; st == CKPT_OK && t < NSPECS; t++) {
        part_of(t, r, j->n, starts[t], counts[t]);
        if (j->fault == OVERLAP && r == j->culprit && t == 0) counts[t][0] += 1; /* one row into the next rank's */
        if (j->fault == HOLE && r == j->culprit && t == 1) counts[t][0] -= 1;
        uint64_t shape[3];
        memcpy(shape, SPECS[t].shape, sizeof shape);
        if (j->fault == SHAPE && r == j->culprit && t == 3) shape[0] += 1, counts[t][0] += 1;
        st = ckpt_shard_writer_add(sw, SPECS[t].name, SPECS[t].dtype, SPECS[t].ndim, shape, starts[t], counts[t], &idx[t],
                                   &err);
    }
    if (j->fault == ABORT_DECLARING && r == j->culprit) {
        ckpt_error reason;
        ckpt__fail(&reason, CKPT_E_IO, "/dev/gpu", NULL, -1, "the device fell off the bus");
        j->st[r] = ckpt_shard_writer_abort(sw, &reason, &err);
        snprintf(j->msg[r], sizeof j->msg[r], "%s", err.message);
        ckpt_shard_writer_free(sw);
        return;
    }
    if (st == CKPT_OK) st = ckpt_shard_writer_begin(sw, &err);
    for (size_t t = 0; st == CKPT_OK && t < NSPECS; t++) {
        unsigned char *d = part_data(t, starts[t], counts[t]);
        uint64_t nb = ckpt_dtype_bits(SPECS[t].dtype) / 8;
        for (uint32_t a = 0; a < SPECS[t].ndim; a++) nb *= counts[t][a];
        /* In two pieces, the second first, from this thread. */
        uint64_t half = nb / 2;
        st = ckpt_shard_writer_write(sw, idx[t], half, d + half, nb - half, &err);
        if (st == CKPT_OK && !(j->fault == ABORT_WRITING && r == j->culprit && t == 4))
            st = ckpt_shard_writer_write(sw, idx[t], 0, d, half, &err);
        free(d);
    }
    if (j->fault == VANISH && r == j->culprit && st == CKPT_OK) { /* dies before commit */
        j->st[r] = CKPT_OK;
        ckpt_shard_writer_free(sw);
        return;
    }
    if (st == CKPT_OK) st = ckpt_shard_writer_commit(sw, &err);
    j->st[r] = st;
    snprintf(j->msg[r], sizeof j->msg[r], "%s", err.message);
    ckpt_shard_writer_stats(sw, &j->stats[r]);
    ckpt_shard_writer_free(sw);
}

static void run_save(save_job *j, const char *path, int n, fault f, int culprit, uint64_t max_shard) {
    memset(j, 0, sizeof *j);
    j->path = path, j->n = n, j->fault = f, j->culprit = culprit, j->max_shard = max_shard;
    threadcomm *t = threadcomm_create(n, j->comms);
    threadcomm_run(n, save_rank, j);
    threadcomm_free(t);
}

static void test_shard_writer_equals_single_writer(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_reference(in_dir(dir, "ref-sharded"), 3000000);
    write_reference(in_dir(dir, "ref.safetensors"), 0);
    for (int n = 1; n <= 4; n++) {
        char name[64];
        save_job j;
        snprintf(name, sizeof name, "sharded-%d", n);
        const char *out = strdup(in_dir(dir, name));
        run_save(&j, out, n, NONE, 0, 3000000);
        uint64_t written = 0;
        for (int r = 0; r < n; r++) {
            if (j.st[r]) fprintf(stderr, "rank %d: %s\n", r, j.msg[r]);
            assert_int_equal(j.st[r], CKPT_OK);
            written += j.stats[r].bytes_written;
        }
        uint64_t total = 0;
        for (size_t t = 0; t < NSPECS; t++) total += spec_bytes(&SPECS[t]);
        assert_int_equal(written, total); /* replicated tensors written once, shared among their holders */
        assert_same_tree(in_dir(dir, "ref-sharded"), out);
        free((char *)out);
        snprintf(name, sizeof name, "one-%d.safetensors", n);
        out = strdup(in_dir(dir, name));
        run_save(&j, out, n, NONE, 0, 0);
        for (int r = 0; r < n; r++) assert_int_equal(j.st[r], CKPT_OK);
        assert_same_tree(in_dir(dir, "ref.safetensors"), out);
        free((char *)out);
    }
    scratch_free(dir);
}

/* Nothing under the final name, no temporaries left beside it. */
static void assert_nothing_published(const char *dir, const char *out) {
    assert_false(file_exists(out));
    DIR *d = opendir(dir);
    struct dirent *e;
    while ((e = readdir(d))) assert_null(strstr(e->d_name, "ckpt-tmp"));
    closedir(d);
}

static void check_failure(fault f, int n, int culprit, ckpt_status culprit_status, ckpt_status others, const char *says) {
    char *dir = scratch_dir();
    const char *out = strdup(in_dir(dir, "out"));
    save_job j;
    run_save(&j, out, n, f, culprit, 3000000);
    for (int r = 0; r < n; r++) {
        ckpt_status want = ckpt__category(r == culprit ? culprit_status : others);
        if (f == VANISH && culprit == 0 && r != culprit && j.st[r] == CKPT_E_PEER) {
            assert_non_null(strstr(j.msg[r], "rank 0 abandoned the save"));
            continue;
        }
        if (j.st[r] != want) fprintf(stderr, "fault %d rank %d: %s [%s]\n", (int)f, r, j.msg[r], ckpt_status_name(j.st[r]));
        if (f == VANISH && r == culprit) continue;
        assert_int_equal(j.st[r], want);
        if (r != culprit || f == OVERLAP || f == HOLE || f == SHAPE) assert_non_null(strstr(j.msg[r], says));
    }
    assert_nothing_published(dir, out);
    free((char *)out);
    scratch_free(dir);
}

/* ---- the order of a rank's writes -------------------------------------------------- */

typedef struct order_job {
    ckpt_comm comms[THREADCOMM_MAX];
    const char *path;
    ckpt_status st[THREADCOMM_MAX];
    size_t order[THREADCOMM_MAX][8];
} order_job;

/* 8 tensors of 64 × 64 F32 (16 KiB), declared in reverse name order,
 * rows split among 4 ranks; shards of at most 40 KB hold two each. */
static void order_rank(int r, void *user) {
    order_job *j = user;
    ckpt_error err;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = 40000;
    o.no_sync = 1;
    ckpt_shard_writer *sw = NULL;
    ckpt_status st = ckpt_shard_writer_create(j->path, &o, &j->comms[r], NULL, &sw, &err);
    uint64_t shape[2] = {64, 64}, start[2] = {16 * (uint64_t)r, 0}, count[2] = {16, 64};
    float *rows = calloc(16 * 64, sizeof *rows);
    for (int t = 7; st == CKPT_OK && t >= 0; t--) {
        char name[32];
        snprintf(name, sizeof name, "layers.%d.weight", t);
        st = ckpt_shard_writer_add(sw, name, CKPT_F32, 2, shape, start, count, NULL, &err);
    }
    if (st == CKPT_OK) st = ckpt_shard_writer_begin(sw, &err);
    if (st == CKPT_OK) st = ckpt_shard_writer_order(sw, j->order[r], 8, &err);
    for (size_t k = 0; st == CKPT_OK && k < 8; k++)
        st = ckpt_shard_writer_write(sw, j->order[r][k], 0, rows, 16 * 64 * sizeof *rows, &err);
    if (st == CKPT_OK) st = ckpt_shard_writer_commit(sw, &err);
    if (st) fprintf(stderr, "rank %d: %s\n", r, err.message);
    j->st[r] = st;
    free(rows);
    ckpt_shard_writer_free(sw);
}

/* Issue 32 §4: ranks that hold rows of the same tensors and write them in
 * one order write into the same file at the same time, where the file
 * system's inode lock makes them take turns.  The writer gives each rank an
 * order by the output's layout (files in order, not the declarations')
 * that begins at its own share of its bytes: rank r's first part lies in
 * shard r, and every part comes once. */
static void test_shard_writer_order_begins_each_rank_in_its_own_file(void **state) {
    (void)state;
    char *dir = scratch_dir();
    order_job j;
    memset(&j, 0, sizeof j);
    j.path = in_dir(dir, "out");
    threadcomm *t = threadcomm_create(4, j.comms);
    threadcomm_run(4, order_rank, &j);
    threadcomm_free(t);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(j.st[r], CKPT_OK);
        bool seen[8] = {false};
        for (size_t k = 0; k < 8; k++) {
            assert_true(j.order[r][k] < 8 && !seen[j.order[r][k]]);
            seen[j.order[r][k]] = true;
            /* Part i declares layers.(7 - i); the output keeps the
             * declarations' order, two to a shard (shard f: layers.(7 - 2f)
             * and layers.(6 - 2f)), and orders each shard's tensors by name:
             * layers.(6 - 2f) first. */
            size_t f = ((size_t)r + k / 2) % 4, want = k % 2 ? 7 - 2 * f : 6 - 2 * f;
            assert_int_equal(7 - j.order[r][k], want);
        }
    }
    scratch_free(dir);
}

static void test_shard_writer_refuses_bad_tilings(void **state) {
    (void)state;
    check_failure(OVERLAP, 3, 1, CKPT__D(COMM_DATA), CKPT__D(COMM_DATA), "overlap without being the same part");
    check_failure(HOLE, 3, 2, CKPT__D(COMM_DATA), CKPT__D(COMM_DATA), "cover");
    check_failure(SHAPE, 2, 1, CKPT__D(COMM_DATA), CKPT__D(COMM_DATA), "declares the tensor as");
}

static void test_shard_writer_failures_name_the_rank(void **state) {
    (void)state;
    /* A rank that gives up while declaring, or that writes too little. */
    check_failure(ABORT_DECLARING, 3, 2, CKPT_E_IO, CKPT__D(PEER_FAILED), "rank 2 failed (CKPT_E_IO)");
    check_failure(ABORT_WRITING, 4, 1, CKPT_E_BAD_STATE, CKPT__D(PEER_FAILED), "rank 1 failed (CKPT_E_BAD_STATE)");
    /* A rank that never comes to the commit: the others wait the timeout. */
    check_failure(VANISH, 3, 1, CKPT_OK, CKPT__D(PEER_TIMEOUT), "rank 1 did not reach the vote after writing the tensors");
    /* Rank 0 leaving removes the files it created: a rank that writes after
     * that fails at once naming rank 0 (ranks open a file at their first
     * write to it); one that wrote before waits for the vote. */
    check_failure(VANISH, 3, 0, CKPT_OK, CKPT__D(PEER_TIMEOUT), "rank 0 did not reach the vote after writing the tensors");
}

/* ---- the collective convert ------------------------------------------------------- */

typedef struct convert_job {
    const char *src, *dst;
    int n;
    uint64_t max_shard;
    ckpt_comm comms[THREADCOMM_MAX];
    ckpt_status st[THREADCOMM_MAX];
    char msg[THREADCOMM_MAX][2048];
    ckpt_collective_stats stats[THREADCOMM_MAX];
} convert_job;

static ckpt_status convert_plan(ckpt_catalog *cat, ckpt_plan **p, ckpt_error *err) {
    ckpt_status st = ckpt_plan_create(cat, p, err);
    if (st == CKPT_OK) st = ckpt_plan_cast(*p, "*", CKPT_F16, err);
    if (st == CKPT_OK) st = ckpt_plan_slice(*p, "model.cube", 2, 1, 6, err);
    if (st == CKPT_OK) st = ckpt_plan_transpose(*p, "*o_proj*", err);
    return st;
}

static void convert_rank(int r, void *user) {
    convert_job *j = user;
    ckpt_error err;
    ckpt_catalog *cat = NULL;
    ckpt_plan *p = NULL;
    ckpt_collective_options co;
    ckpt_collective_options_init(&co);
    co.timeout_ms = 20000;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = j->max_shard;
    o.no_sync = 1;
    ckpt_status st = ckpt_catalog_open_collective(j->src, NULL, &j->comms[r], &co, &cat, &err);
    if (st == CKPT_OK) st = convert_plan(cat, &p, &err);
    if (st == CKPT_OK) st = ckpt_convert_collective(p, j->dst, &o, &j->comms[r], &co, &j->stats[r], &err);
    j->st[r] = st;
    snprintf(j->msg[r], sizeof j->msg[r], "%s", err.message);
    ckpt_plan_free(p);
    ckpt_catalog_close(cat);
}

static void test_convert_collective_equals_convert(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *src = strdup(in_dir(dir, "src"));
    write_reference(src, 2000000);
    ckpt_catalog *cat;
    ckpt_plan *p;
    ckpt_error err;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.no_sync = 1;
    o.max_shard_size = 1000000;
    assert_int_equal(ckpt_catalog_open(src, &cat, &err), CKPT_OK);
    assert_int_equal(convert_plan(cat, &p, &err), CKPT_OK);
    assert_int_equal(ckpt_convert_plan(p, in_dir(dir, "ref"), &o, &err), CKPT_OK);
    ckpt_plan_free(p);
    assert_int_equal(convert_plan(cat, &p, &err), CKPT_OK);
    o.max_shard_size = 0;
    assert_int_equal(ckpt_convert_plan(p, in_dir(dir, "ref.safetensors"), &o, &err), CKPT_OK);
    ckpt_plan_free(p);
    ckpt_catalog_close(cat);
    for (int n = 1; n <= 4; n++)
        for (int single = 0; single < 2; single++) {
            char name[64];
            snprintf(name, sizeof name, single ? "out-%d.safetensors" : "out-%d", n);
            convert_job j;
            memset(&j, 0, sizeof j);
            j.src = src, j.dst = strdup(in_dir(dir, name)), j.n = n, j.max_shard = single ? 0 : 1000000;
            threadcomm *t = threadcomm_create(n, j.comms);
            threadcomm_run(n, convert_rank, &j);
            threadcomm_free(t);
            uint64_t written = 0;
            for (int r = 0; r < n; r++) {
                if (j.st[r]) fprintf(stderr, "rank %d: %s\n", r, j.msg[r]);
                assert_int_equal(j.st[r], CKPT_OK);
                written += j.stats[r].bytes_written;
                if (n > 1) assert_true(j.stats[r].bytes_written > 0);
            }
            assert_same_tree(in_dir(dir, single ? "ref.safetensors" : "ref"), j.dst);
            free((char *)j.dst);
        }
    free((char *)src);
    scratch_free(dir);
}

/* ---- the "none" communicator ------------------------------------------------------ */

static void test_comm_from_env(void **state) {
    (void)state;
    ckpt_comm c;
    ckpt_error err;
    unsetenv("RANK"), unsetenv("WORLD_SIZE"), unsetenv("OMPI_COMM_WORLD_RANK"), unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMI_RANK"), unsetenv("PMI_SIZE"), unsetenv("SLURM_PROCID"), unsetenv("SLURM_NTASKS");
    assert_int_equal(ckpt_comm_from_env(&c, -1, 0, &err), CKPT_OK);
    assert_int_equal(c.rank, 0);
    assert_int_equal(c.nranks, 1);
    setenv("SLURM_PROCID", "3", 1), setenv("SLURM_NTASKS", "8", 1);
    assert_int_equal(ckpt_comm_from_env(&c, -1, 0, &err), CKPT_OK);
    assert_int_equal(c.rank, 3);
    assert_int_equal(c.nranks, 8);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1), setenv("OMPI_COMM_WORLD_SIZE", "2", 1); /* before SLURM's */
    assert_int_equal(ckpt_comm_from_env(&c, -1, 0, &err), CKPT_OK);
    assert_int_equal(c.rank, 1);
    assert_int_equal(c.nranks, 2);
    setenv("RANK", "x", 1), setenv("WORLD_SIZE", "2", 1);
    assert_int_equal(ckpt_comm_from_env(&c, -1, 0, &err), CKPT_E_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "RANK=\"x\""));
    setenv("RANK", "2", 1);
    assert_int_equal(ckpt_comm_from_env(&c, -1, 0, &err), CKPT_E_INVALID_ARGUMENT);
    unsetenv("WORLD_SIZE");
    assert_int_equal(ckpt_comm_from_env(&c, -1, 0, &err), CKPT_E_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "RANK is set without WORLD_SIZE"));
    assert_int_equal(ckpt_comm_from_env(&c, 5, 6, &err), CKPT_OK);
    assert_int_equal(c.rank, 5);
    unsetenv("RANK"), unsetenv("OMPI_COMM_WORLD_RANK"), unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("SLURM_PROCID"), unsetenv("SLURM_NTASKS");
    /* "none" loads: each rank alone.  It cannot save with several ranks. */
    char *dir = scratch_dir();
    write_reference(in_dir(dir, "m.safetensors"), 0);
    ckpt_comm none;
    assert_int_equal(ckpt_comm_from_env(&none, 1, 2, &err), CKPT_OK);
    ckpt_catalog *cat;
    ckpt_plan *p;
    assert_int_equal(ckpt_catalog_open_collective(in_dir(dir, "m.safetensors"), NULL, &none, NULL, &cat, &err), CKPT_OK);
    assert_int_equal(make_plan(cat, 1, 2, &p, &err), CKPT_OK);
    ckpt_collective_stats s;
    assert_int_equal(ckpt_load_collective(p, NULL, &none, NULL, &s, &err), CKPT_OK);
    assert_int_equal(s.bytes_received, 0);
    const ckpt_plan_item *q = ckpt_plan_find(p, "model.layers.0.q_proj.weight", NULL);
    assert_non_null(q);
    assert_int_equal(q->shape[0], 16); /* rank 1 of 2 */
    ckpt_plan_free(p);
    ckpt_catalog_close(cat);
    ckpt_shard_writer *sw;
    assert_int_equal(ckpt_shard_writer_create(in_dir(dir, "o"), NULL, &none, NULL, &sw, &err), CKPT_E_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "\"none\" communicator"));
    scratch_free(dir);
}

/* ---- fuzz seeds ------------------------------------------------------------------- */

/* With CKPT_WIRE_SEEDS=DIR, writes the encodings the wire fuzz target reads
 * (its first byte picks the decoder) into DIR; without, checks that each
 * decodes. */
static void seed(const char *dir, int n, unsigned char kind, const ckpt__buf *b) {
    if (!dir) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/seed-%u-%d", dir, kind, n);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputc(kind, f);
    fwrite(b->data, 1, b->len, f);
    fclose(f);
}

static void test_wire_seeds(void **state) {
    (void)state;
    const char *out = getenv("CKPT_WIRE_SEEDS");
    char *dir = scratch_dir();
    ckpt_error err;
    const char *paths[] = {in_dir(dir, "sharded"), NULL, CKPT_FIXTURES "/model.pt", CKPT_FIXTURES "/legacy.pt",
                           CKPT_FIXTURES "/rezipped.pt"};
    char *sharded = strdup(paths[0]);
    write_reference(sharded, 4000);
    paths[0] = sharded;
    char *one = strdup(in_dir(dir, "one.safetensors"));
    write_reference(one, 0);
    paths[1] = one;
    for (int i = 0; i < 5; i++) {
        ckpt_catalog *c;
        assert_int_equal(ckpt_catalog_open(paths[i], &c, &err), CKPT_OK);
        ckpt__buf b = {0};
        assert_int_equal(ckpt__catalog_encode(c, &b, &err), CKPT_OK);
        seed(out, i, 0, &b);
        free(b.data);
        ckpt_catalog_close(c);
    }
    for (int r = 0; r < 3; r++) {
        ckpt__wire_part parts[NSPECS];
        uint64_t starts[NSPECS][3], counts[NSPECS][3];
        for (size_t t = 0; t < NSPECS; t++) {
            part_of(t, r, 3, starts[t], counts[t]);
            parts[t] = (ckpt__wire_part){SPECS[t].name, SPECS[t].dtype, SPECS[t].ndim, SPECS[t].shape, starts[t],
                                         counts[t]};
        }
        ckpt__buf b = {0};
        assert_int_equal(ckpt__parts_encode(parts, NSPECS, &b, &err), CKPT_OK);
        ckpt__arena arena = {0};
        ckpt__wire_part *back;
        size_t n;
        assert_int_equal(ckpt__parts_decode(b.data, b.len, r, &arena, &back, &n, &err), CKPT_OK);
        assert_int_equal(n, NSPECS);
        assert_string_equal(back[2].name, SPECS[2].name);
        ckpt__arena_free(&arena);
        seed(out, r, 1, &b);
        free(b.data);
    }
    for (int k = 0; k < 2; k++) {
        ckpt_writer_options o;
        ckpt_writer_options_init(&o);
        o.max_shard_size = k ? 3000000 : 0;
        o.no_sync = 1;
        ckpt_writer *w, *j;
        assert_int_equal(ckpt_writer_create(in_dir(dir, k ? "w" : "w.safetensors"), &o, &w, &err), CKPT_OK);
        for (size_t t = 0; t < NSPECS; t++)
            assert_int_equal(ckpt_writer_add_tensor(w, SPECS[t].name, SPECS[t].dtype, SPECS[t].ndim, SPECS[t].shape,
                                                    NULL, &err),
                             CKPT_OK);
        assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
        ckpt__buf b = {0};
        assert_int_equal(ckpt__writer_join_encode(w, &b, &err), CKPT_OK);
        assert_int_equal(ckpt__writer_join(b.data, b.len, true, &j, &err), CKPT_OK);
        assert_int_equal(ckpt_writer_file_count(j), ckpt_writer_file_count(w));
        assert_int_equal(ckpt_writer_commit(j, &err), CKPT_E_BAD_STATE); /* only rank 0 commits */
        ckpt_writer_free(j);
        for (size_t cut = 0; cut < b.len; cut += 7)
            assert_code(ckpt__writer_join(b.data, cut, false, &j, &err), err, CKPT__D(COMM_DATA));
        seed(out, k, 2, &b);
        free(b.data);
        ckpt_writer_free(w);
    }
    free(sharded);
    free(one);
    scratch_free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_catalog_encoding_round_trip),
        cmocka_unit_test(test_catalog_decode_checks_files),
        cmocka_unit_test(test_catalog_decode_opens_files_beneath),
        cmocka_unit_test(test_load_collective_equals_single_loads),
        cmocka_unit_test(test_open_collective_failure_reaches_every_rank),
        cmocka_unit_test(test_shard_writer_equals_single_writer),
        cmocka_unit_test(test_shard_writer_order_begins_each_rank_in_its_own_file),
        cmocka_unit_test(test_shard_writer_refuses_bad_tilings),
        cmocka_unit_test(test_shard_writer_failures_name_the_rank),
        cmocka_unit_test(test_convert_collective_equals_convert),
        cmocka_unit_test(test_comm_from_env),
        cmocka_unit_test(test_wire_seeds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
