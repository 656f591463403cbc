/* mpi_driver.c — the MPI tests' program (run by tests/mpi/test_mpi.py under
 * `mpirun --oversubscribe -np N`): the same checks as the threaded unit
 * tests, between processes, over libckpt_mpi.
 *
 *   ckpt_mpi_test ok DIR      collective open + load (against each rank's
 *                             own single-process load), shard-writer save
 *                             and collective convert (against one
 *                             process's output, byte for byte)
 *   ckpt_mpi_test fail DIR    the last rank fails while writing: the others
 *                             fail naming it; nothing is published
 *   ckpt_mpi_test hang DIR    the last rank stops before the commit: the
 *                             others time out (10 s, so that a rank still
 *                             writing on a loaded machine is not taken for
 *                             a hung one) naming it
 *   ckpt_mpi_test kill DIR    the last rank is killed while writing
 *   ckpt_mpi_test fds DIR     a save into 64 shards, each rank writing a
 *                             block of 64 / N of them, every rank but 0
 *                             under an RLIMIT_NOFILE too low to open all 64:
 *                             it opens only its own (counted in /proc/self/fd
 *                             after every write), and the output is one
 *                             process's, byte for byte
 *
 * Every rank prints "rank R: RESULT" lines; the exit status is 0 when this
 * rank saw what it should. */
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_mpi.h"

typedef struct spec {
    const char *name;
    ckpt_dtype dtype;
    uint32_t ndim;
    uint64_t shape[3];
    int split; /* axis ranks split, -1: whole on every rank (replicated) */
} spec;

static const spec SPECS[] = {
    {"model.embed_tokens.weight", CKPT_BF16, 2, {96, 32}, 0},
    {"model.layers.0.self_attn.q_proj.weight", CKPT_BF16, 2, {64, 32}, 0},
    {"model.layers.0.self_attn.o_proj.weight", CKPT_BF16, 2, {32, 64}, 1},
    {"model.layers.0.mlp.up_proj.weight", CKPT_F32, 2, {1200, 1000}, 0}, /* 4.8 MB */
    {"model.layers.0.input_layernorm.weight", CKPT_F32, 1, {32}, -1},
    {"model.norm.weight", CKPT_F32, 1, {32}, -1},
    {"lm_head.weight", CKPT_F32, 2, {1100, 1000}, -1}, /* replicated and large: read in row ranges */
    {"step", CKPT_I64, 0, {0}, -1},
};
#define NSPECS (sizeof SPECS / sizeof SPECS[0])

static int rank, nranks, failures;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            failures++;                                                        \
            printf("rank %d: FAILED %s:%d: ", rank, __FILE__, __LINE__);       \
            printf(__VA_ARGS__);                                               \
            printf("\n");                                                      \
            fflush(stdout);                                                    \
        }                                                                      \
    } while (0)

static unsigned char value(size_t t, uint64_t i) { return (unsigned char)(i * 151 + t * 37 + (i >> 11) + 5); }

static void part_of(size_t t, int r, int n, uint64_t *start, uint64_t *count) {
    const spec *s = &SPECS[t];
    for (uint32_t a = 0; a < s->ndim; a++) start[a] = 0, count[a] = s->shape[a];
    if (s->split < 0) return;
    uint64_t size = s->shape[s->split], q = size / (uint64_t)n, rem = size % (uint64_t)n, ur = (uint64_t)r;
    start[s->split] = ur * q + (ur < rem ? ur : rem);
    count[s->split] = q + (ur < rem ? 1 : 0);
}

/* The part's dense bytes, cut from the tensor's. */
static unsigned char *part_data(size_t t, const uint64_t *start, const uint64_t *count, uint64_t *n) {
    const spec *s = &SPECS[t];
    uint64_t el = ckpt_dtype_bits(s->dtype) / 8, numel = 1;
    for (uint32_t a = 0; a < s->ndim; a++) numel *= count[a];
    unsigned char *out = malloc(numel * el + 1);
    for (uint64_t i = 0; i < numel; i++) {
        uint64_t rem = i, g = 0, stride = 1;
        for (uint32_t a = s->ndim; a-- > 0;) {
            g += (start[a] + rem % count[a]) * stride;
            rem /= count[a];
            stride *= s->shape[a];
        }
        for (uint64_t b = 0; b < el; b++) out[i * el + b] = value(t, g * el + b);
    }
    *n = numel * el;
    return out;
}

static ckpt_status write_reference(const char *path, uint64_t max_shard, ckpt_error *err) {
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = max_shard;
    o.no_sync = 1;
    ckpt_writer *w;
    ckpt_status st = ckpt_writer_create(path, &o, &w, err);
    if (st) return st;
    st = ckpt_writer_set_metadata(w, "format", "pt", err);
    for (size_t t = 0; st == CKPT_OK && t < NSPECS; t++)
        st = ckpt_writer_add_tensor(w, SPECS[t].name, SPECS[t].dtype, SPECS[t].ndim, SPECS[t].shape, NULL, err);
    if (st == CKPT_OK) st = ckpt_writer_begin(w, err);
    for (size_t t = 0; st == CKPT_OK && t < NSPECS; t++) {
        uint64_t start[3] = {0}, n;
        unsigned char *d = part_data(t, start, SPECS[t].shape, &n);
        st = ckpt_writer_write(w, t, d, n, err);
        free(d);
    }
    if (st == CKPT_OK) st = ckpt_writer_commit(w, err);
    ckpt_writer_free(w);
    return st;
}

static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = 0;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* Every file of `ref` is in `out` with the same bytes, and no other. */
static void check_same_dir(const char *ref, const char *out) {
    DIR *d = opendir(ref);
    CHECK(d != NULL, "cannot list %s", ref);
    if (!d) return;
    int n = 0, m = 0;
    struct dirent *e;
    char a[4096], b[4096];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(a, sizeof a, "%s/%s", ref, e->d_name);
        snprintf(b, sizeof b, "%s/%s", out, e->d_name);
        CHECK(same_file(a, b), "%s differs from %s", b, a);
        n++;
    }
    closedir(d);
    if ((d = opendir(out))) {
        while ((e = readdir(d))) m += e->d_name[0] != '.';
        closedir(d);
    }
    CHECK(n == m, "%s holds %d files, %s %d", out, m, ref, n);
}

static ckpt_status tp_plan(ckpt_catalog *cat, ckpt_plan **p, ckpt_error *err) {
    ckpt_status st = ckpt_plan_create(cat, p, err);
    if (st == CKPT_OK) st = ckpt_plan_split(*p, "*q_proj.weight", 0, (uint64_t)rank, (uint64_t)nranks, err);
    if (st == CKPT_OK) st = ckpt_plan_split(*p, "*up_proj.weight", 0, (uint64_t)rank, (uint64_t)nranks, err);
    if (st == CKPT_OK) st = ckpt_plan_split(*p, "*o_proj.weight", 1, (uint64_t)rank, (uint64_t)nranks, err);
    if (st == CKPT_OK) st = ckpt_plan_cast(*p, "model.embed_tokens.weight", CKPT_F32, err);
    return st;
}

static void check_load(const char *path, ckpt_comm *comm, ckpt_replicated mode) {
    ckpt_error err;
    ckpt_catalog *cat = NULL, *solo = NULL;
    ckpt_plan *p = NULL, *q = NULL;
    ckpt_collective_options co;
    ckpt_collective_options_init(&co);
    co.timeout_ms = 60000;
    co.replicated = mode;
    ckpt_collective_stats stats;
    ckpt_status st = ckpt_catalog_open_collective(path, NULL, comm, &co, &cat, &err);
    if (st == CKPT_OK) st = tp_plan(cat, &p, &err);
    if (st == CKPT_OK) st = ckpt_load_collective(p, NULL, comm, &co, &stats, &err);
    CHECK(st == CKPT_OK, "collective load: %s", err.message);
    if (st == CKPT_OK && ckpt_catalog_open(path, &solo, &err) == CKPT_OK && tp_plan(solo, &q, &err) == CKPT_OK &&
        ckpt_load(q, NULL, &err) == CKPT_OK) {
        CHECK(ckpt_plan_count(p) == ckpt_plan_count(q), "item counts differ");
        for (size_t i = 0; i < ckpt_plan_count(p) && i < ckpt_plan_count(q); i++) {
            const ckpt_plan_item *a = ckpt_plan_item_at(p, i), *b = ckpt_plan_item_at(q, i);
            CHECK(!strcmp(a->name, b->name) && a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes),
                  "%s differs from the single-process load", a->name);
        }
        printf("rank %d: load %s ok: read %llu of %llu needed, received %llu\n", rank,
               mode == CKPT_REPLICATED_BROADCAST ? "broadcast" : "read", (unsigned long long)stats.bytes_read,
               (unsigned long long)stats.bytes_needed, (unsigned long long)stats.bytes_received);
    }
    ckpt_plan_free(p);
    ckpt_plan_free(q);
    ckpt_catalog_close(cat);
    ckpt_catalog_close(solo);
}

typedef enum fault { NONE, FAIL, HANG, KILL } fault;

static ckpt_status save(const char *out, ckpt_comm *comm, uint64_t max_shard, fault f, uint32_t timeout_ms,
                        ckpt_error *err) {
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = max_shard;
    ckpt_collective_options co;
    ckpt_collective_options_init(&co);
    co.timeout_ms = timeout_ms;
    ckpt_shard_writer *sw;
    ckpt_status st = ckpt_shard_writer_create(out, &o, comm, &co, &sw, err);
    if (st) return st;
    bool culprit = f != NONE && rank == nranks - 1;
    st = ckpt_shard_writer_set_metadata(sw, "format", "pt", err);
    uint64_t start[NSPECS][3], count[NSPECS][3];
    for (size_t t = 0; st == CKPT_OK && t < NSPECS; t++) {
        part_of(t, rank, nranks, start[t], count[t]);
        st = ckpt_shard_writer_add(sw, SPECS[t].name, SPECS[t].dtype, SPECS[t].ndim, SPECS[t].shape, start[t], count[t],
                                   NULL, err);
    }
    if (st == CKPT_OK) st = ckpt_shard_writer_begin(sw, err);
    for (size_t t = 0; st == CKPT_OK && t < NSPECS; t++) {
        uint64_t n;
        unsigned char *d = part_data(t, start[t], count[t], &n);
        if (culprit && f == KILL && t == 3) { /* half written, then gone */
            ckpt_shard_writer_write(sw, t, 0, d, n / 2, err);
            fflush(stdout);
            raise(SIGKILL);
        }
        if (culprit && f == FAIL && t == 3) {
            ckpt_error reason;
            memset(&reason, 0, sizeof reason);
            reason.status = CKPT_E_NO_SPACE;
            reason.offset = -1;
            snprintf(reason.message, sizeof reason.message, "the GPU's copy failed on rank %d", rank);
            free(d);
            st = ckpt_shard_writer_abort(sw, &reason, err);
            ckpt_shard_writer_free(sw);
            return st;
        }
        st = ckpt_shard_writer_write(sw, t, 0, d, n, err);
        free(d);
    }
    if (culprit && f == HANG) sleep(timeout_ms / 1000 * 3);
    if (st == CKPT_OK) st = ckpt_shard_writer_commit(sw, err);
    ckpt_shard_writer_free(sw);
    return st;
}

/* ---- fds: a joined rank opens only the files it writes ---------------- */

#define FDS_TENSORS 64
#define FDS_ELEMS 1024 /* 4 KiB of float32: with shards of 5000 bytes, one tensor a shard */

static void fds_name(size_t t, char *name, size_t cap) { snprintf(name, cap, "layers.%02zu.weight", t); }

static ckpt_status fds_reference(const char *path, ckpt_error *err) {
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = 5000;
    o.no_sync = 1;
    ckpt_writer *w = NULL;
    ckpt_status st = ckpt_writer_create(path, &o, &w, err);
    uint64_t shape[1] = {FDS_ELEMS};
    unsigned char data[FDS_ELEMS * 4];
    char name[64];
    for (size_t t = 0; st == CKPT_OK && t < FDS_TENSORS; t++) {
        fds_name(t, name, sizeof name);
        st = ckpt_writer_add_tensor(w, name, CKPT_F32, 1, shape, NULL, err);
    }
    if (st == CKPT_OK) st = ckpt_writer_begin(w, err);
    for (size_t t = 0; st == CKPT_OK && t < FDS_TENSORS; t++) {
        for (uint64_t i = 0; i < sizeof data; i++) data[i] = value(t, i);
        st = ckpt_writer_write(w, t, data, sizeof data, err);
    }
    if (st == CKPT_OK) st = ckpt_writer_commit(w, err);
    ckpt_writer_free(w);
    return st;
}

/* Descriptors open now, and those naming a .safetensors file of output
 * `name` (staged beside it until the commit: a path that holds its name). */
static int open_fds(const char *name, int *under) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    *under = 0;
    struct dirent *e;
    char link[4096], target[4096];
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        n++;
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(link, target, sizeof target - 1);
        if (len > 0 && (target[len] = 0, strstr(target, name)) && strstr(target, ".safetensors")) ++*under;
    }
    if (d) closedir(d);
    return n;
}

static void check_fds(const char *dir, ckpt_comm *comm) {
    char ref[4096], out[4096];
    snprintf(ref, sizeof ref, "%s/fds-ref", dir);
    snprintf(out, sizeof out, "%s/fds-out", dir);
    ckpt_error err;
    if (rank == 0) CHECK(fds_reference(ref, &err) == CKPT_OK, "reference: %s", err.message);
    int per = FDS_TENSORS / nranks, first = rank * per, last = rank == nranks - 1 ? FDS_TENSORS : first + per;
    int under;
    if (rank > 0) { /* rank 0 creates every file and holds them to the commit */
        struct rlimit lim;
        getrlimit(RLIMIT_NOFILE, &lim);
        lim.rlim_cur = (rlim_t)(open_fds("fds-out", &under) + (last - first) + 8);
        CHECK(lim.rlim_cur < (rlim_t)(open_fds("fds-out", &under) + FDS_TENSORS), "the limit would allow every file");
        CHECK(setrlimit(RLIMIT_NOFILE, &lim) == 0, "setrlimit failed");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = 5000;
    ckpt_collective_options co;
    ckpt_collective_options_init(&co);
    co.timeout_ms = 60000;
    ckpt_shard_writer *sw;
    ckpt_status st = ckpt_shard_writer_create(out, &o, comm, &co, &sw, &err);
    uint64_t shape[1] = {FDS_ELEMS};
    unsigned char data[FDS_ELEMS * 4];
    char name[64];
    int most = 0;
    size_t part[FDS_TENSORS];
    for (int t = first; st == CKPT_OK && t < last; t++) {
        fds_name((size_t)t, name, sizeof name);
        st = ckpt_shard_writer_add(sw, name, CKPT_F32, 1, shape, NULL, NULL, &part[t], &err);
    }
    if (st == CKPT_OK) st = ckpt_shard_writer_begin(sw, &err);
    for (int t = first; st == CKPT_OK && t < last; t++) {
        for (uint64_t i = 0; i < sizeof data; i++) data[i] = value((size_t)t, i);
        st = ckpt_shard_writer_write(sw, part[t], 0, data, sizeof data, &err);
        open_fds("fds-out", &under);
        if (under > most) most = under;
    }
    if (st == CKPT_OK) st = ckpt_shard_writer_commit(sw, &err);
    ckpt_shard_writer_free(sw);
    CHECK(st == CKPT_OK, "save into %d shards: %s", FDS_TENSORS, err.message);
    if (rank > 0) CHECK(most == last - first, "held %d output files open, wrote %d", most, last - first);
    printf("rank %d: fds: held at most %d output files open\n", rank, most);
    if (st == CKPT_OK && rank == 0) check_same_dir(ref, out);
}

static int published(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static ckpt_status convert_plan(ckpt_catalog *cat, ckpt_plan **p, ckpt_error *err) {
    ckpt_status st = ckpt_plan_create(cat, p, err);
    if (st == CKPT_OK) st = ckpt_plan_cast(*p, "*", CKPT_BF16, err);
    if (st == CKPT_OK) st = ckpt_plan_transpose(*p, "*o_proj*", err);
    return st;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: ckpt_mpi_test ok|fail|hang|kill|fds DIR\n");
        return 2;
    }
    const char *scenario = argv[1], *dir = argv[2];
    ckpt_comm comm;
    ckpt_error err;
    if (ckpt_mpi_world(&comm, &err) != CKPT_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    rank = comm.rank, nranks = comm.nranks;
    char ref[4096], ref1[4096], out[4096], path[4096];
    snprintf(ref, sizeof ref, "%s/ref", dir);
    snprintf(ref1, sizeof ref1, "%s/ref.safetensors", dir);
    if (rank == 0) {
        CHECK(write_reference(ref, 3000000, &err) == CKPT_OK, "reference: %s", err.message);
        CHECK(write_reference(ref1, 0, &err) == CKPT_OK, "reference: %s", err.message);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (!strcmp(scenario, "ok")) {
        check_load(ref, &comm, CKPT_REPLICATED_BROADCAST);
        check_load(ref, &comm, CKPT_REPLICATED_READ);
        check_load(ref1, &comm, CKPT_REPLICATED_BROADCAST);
        snprintf(out, sizeof out, "%s/saved", dir);
        ckpt_status st = save(out, &comm, 3000000, NONE, 60000, &err);
        CHECK(st == CKPT_OK, "save: %s", err.message);
        if (st == CKPT_OK && rank == 0) check_same_dir(ref, out);
        snprintf(out, sizeof out, "%s/saved.safetensors", dir);
        st = save(out, &comm, 0, NONE, 60000, &err);
        CHECK(st == CKPT_OK, "save: %s", err.message);
        if (st == CKPT_OK && rank == 0) CHECK(same_file(ref1, out), "%s differs from %s", out, ref1);
        /* The collective convert against one process's. */
        ckpt_catalog *cat;
        ckpt_plan *p;
        ckpt_writer_options o;
        ckpt_writer_options_init(&o);
        o.max_shard_size = 2000000;
        snprintf(path, sizeof path, "%s/converted-ref", dir);
        if (rank == 0) {
            CHECK(ckpt_catalog_open(ref, &cat, &err) == CKPT_OK, "%s", err.message);
            CHECK(convert_plan(cat, &p, &err) == CKPT_OK, "%s", err.message);
            CHECK(ckpt_convert_plan(p, path, &o, &err) == CKPT_OK, "%s", err.message);
            ckpt_plan_free(p);
            ckpt_catalog_close(cat);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        snprintf(out, sizeof out, "%s/converted", dir);
        ckpt_collective_stats stats;
        st = ckpt_catalog_open_collective(ref, NULL, &comm, NULL, &cat, &err);
        if (st == CKPT_OK) st = convert_plan(cat, &p, &err);
        if (st == CKPT_OK) st = ckpt_convert_collective(p, out, &o, &comm, NULL, &stats, &err);
        CHECK(st == CKPT_OK, "collective convert: %s", err.message);
        if (st == CKPT_OK) {
            printf("rank %d: convert ok: wrote %llu bytes\n", rank, (unsigned long long)stats.bytes_written);
            ckpt_plan_free(p);
            ckpt_catalog_close(cat);
        }
        if (st == CKPT_OK && rank == 0) check_same_dir(path, out);
    } else if (!strcmp(scenario, "fds")) {
        check_fds(dir, &comm);
    } else {
        fault f = !strcmp(scenario, "fail") ? FAIL : !strcmp(scenario, "hang") ? HANG : KILL;
        snprintf(out, sizeof out, "%s/failed", dir);
        ckpt_status st = save(out, &comm, 3000000, f, f == HANG ? 10000 : 60000, &err);
        printf("rank %d: %s [%s]\n", rank, err.message, ckpt_status_name(st));
        bool culprit = rank == nranks - 1;
        if (f == FAIL && nranks > 1) {
            CHECK(st == (culprit ? CKPT_E_NO_SPACE : CKPT_E_PEER) && (culprit || err.detail == CKPT_D_PEER_FAILED), "status %s", ckpt_status_name(st));
            char want[64];
            snprintf(want, sizeof want, "rank %d failed (CKPT_E_NO_SPACE)", nranks - 1);
            CHECK(culprit || strstr(err.message, want), "message lacks '%s'", want);
        }
        if (f == HANG && !culprit) {
            char want[64];
            snprintf(want, sizeof want, "rank %d did not reach", nranks - 1);
            CHECK(st == CKPT_E_TIMEOUT && err.detail == CKPT_D_PEER_TIMEOUT && strstr(err.message, want), "wanted a timeout naming rank %d", nranks - 1);
        }
        CHECK(!published(out), "%s was published", out);
    }
    printf("rank %d: %s\n", rank, failures ? "FAILED" : "passed");
    fflush(stdout);
    ckpt_mpi_world_end(&comm, failures ? 1 : 0);
    return failures ? 1 : 0;
}
