/*
 * Fault injection, SQLite style: for every operation and every kind of
 * fault, make the N-th allocation or I/O call fail, for N = 1, 2, … until
 * the operation succeeds.  Each run must end in success or a clear error
 * (never a crash, hang or leak — the sanitizer build checks those), must
 * leave nothing under a final output name when it fails, no temporary in
 * any case, and the sources untouched.  EINTR and short transfers must not
 * fail an operation at all: ckpt retries them.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "base/base.h"
#include "helpers.h"
#include "io/file.h"
#include "memdir.h"

#ifndef FIXTURES
#error FIXTURES must name tests/fault/fixtures
#endif

#define T(name, dtype, shape, b, e) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static char *work;   /* scratch directory with the inputs */
static char *outdir; /* where conversions write */
static memdir held;  /* "sharded", held by a caller's source (tests/unit/memdir.c) */
static ckpt_memory_source single; /* single.safetensors, in memory */

/* ---- operations ---------------------------------------------------------- */

static ckpt_status op_open(const char *path, ckpt_error *err) {
    ckpt_catalog *cat;
    ckpt_status st = ckpt_catalog_open(path, &cat, err);
    if (st == CKPT_OK) {
        if (!ckpt_catalog_tensor_count(cat)) st = CKPT_E_BAD_STATE;
        ckpt_catalog_close(cat);
    }
    return st;
}

/* Open (a path, or through a source: "memdir:" the caller's directory, "memory:"
 * the library's memory source), then read every tensor whole and in part. */
static ckpt_status op_load(const char *path, ckpt_error *err) {
    ckpt_catalog *cat = NULL;
    const char *name = path + 7; /* after the scheme, when there is one */
    ckpt_status st = !strncmp(path, "memdir:", 7)   ? ckpt_catalog_open_source(&memdir_ops, &held, name, NULL, &cat, err)
                     : !strncmp(path, "memory:", 7) ? ckpt_catalog_open_source(&ckpt_memory_source_ops, &single, name,
                                                                               NULL, &cat, err)
                                                    : ckpt_catalog_open(path, &cat, err);
    for (size_t i = 0; st == CKPT_OK && i < ckpt_catalog_tensor_count(cat); i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
        unsigned char *buf = malloc(t->nbytes + 1);
        st = ckpt_catalog_read(cat, t, 0, buf, t->nbytes, err);
        if (st == CKPT_OK && t->nbytes > 2) st = ckpt_catalog_read(cat, t, 1, buf, t->nbytes - 2, err);
        free(buf);
    }
    ckpt_catalog_close(cat); /* NULL when the open failed */
    return st;
}

static ckpt_status op_convert(const char *src, const char *dst, uint64_t shard, int checksums, ckpt_error *err) {
    ckpt_catalog *cat;
    ckpt_status st = ckpt_catalog_open(src, &cat, err);
    if (st) return st;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = shard;
    o.checksums = checksums;
    st = convert_all(cat, dst, &o, NULL, NULL, err);
    ckpt_catalog_close(cat);
    return st;
}

/* The engine: a plan with a slice, a cast and a transpose, one thread
 * (injection points stay deterministic), pread rather than io_uring (whose
 * reads the injector cannot see); then the same plan converted. */
static ckpt_status op_engine(const char *src, const char *dst, bool convert, ckpt_error *err) {
    ckpt_catalog *cat;
    ckpt_plan *plan = NULL;
    ckpt_status st = ckpt_catalog_open(src, &cat, err);
    if (st) return st;
    if ((st = ckpt_plan_create(cat, &plan, err)) == CKPT_OK) /* the same rules for every fixture */
        ckpt_plan_set_flags(plan, CKPT_PLAN_IGNORE_UNMATCHED);
    if (st == CKPT_OK && (st = ckpt_plan_cast(plan, NULL, CKPT_F16, err)) == CKPT_OK &&
        (st = ckpt_plan_transpose(plan, NULL, err)) == CKPT_OK && (st = ckpt_plan_exclude(plan, "c", err)) == CKPT_OK &&
        (st = ckpt_plan_slice(plan, "b", 0, 2, 9, err)) == CKPT_OK) {
        if (convert) {
            ckpt_writer_options o;
            ckpt_writer_options_init(&o);
            st = ckpt_convert_plan(plan, dst, &o, err);
        } else {
            ckpt_load_options o;
            ckpt_load_options_init(&o);
            o.threads = 1;
            o.io_uring = -1;
            st = ckpt_load(plan, &o, err);
        }
    }
    ckpt_plan_free(plan);
    ckpt_catalog_close(cat);
    return st;
}

/* ---- the loop ---------------------------------------------------------------- */

typedef struct op {
    const char *name;
    int kind; /* 0 open, 1 load, 2 convert, 3 engine load, 4 engine convert */
    const char *src;
    const char *dst; /* relative to outdir */
    uint64_t shard;
    int checksums;
} op;

static ckpt_status run_op(const op *o, ckpt_error *err) {
    char src[4096], dst[4096];
    if (o->src[0] == '/' || strchr(o->src, ':')) snprintf(src, sizeof src, "%s", o->src); /* a fixture, a source */
    else snprintf(src, sizeof src, "%s/%s", work, o->src);          /* made in setup */
    snprintf(dst, sizeof dst, "%s/%s", outdir, o->dst ? o->dst : "");
    switch (o->kind) {
    case 0: return op_open(src, err);
    case 1: return op_load(src, err);
    case 3: return op_engine(src, dst, false, err);
    case 4: return op_engine(src, dst, true, err);
    default: return op_convert(src, dst, o->shard, o->checksums, err);
    }
}

static void clear_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[4096];
        snprintf(p, sizeof p, "rm -rf '%s/%s'", dir, e->d_name);
        if (system(p)) fail_msg("cannot clean %s", p);
    }
    if (d) closedir(d);
}

/* Everything in a directory tree as one string, to compare before/after. */
static unsigned long long tree_hash(const char *dir) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && find . -type f -print0 | sort -z | xargs -0 -r cat | cksum", dir);
    FILE *p = popen(cmd, "r");
    unsigned long long h = 0;
    if (!p || fscanf(p, "%llu", &h) != 1) fail_msg("cannot hash %s", dir);
    pclose(p);
    return h;
}

static int count_temps(const char *dir) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "find '%s' -name '*.ckpt-tmp-*' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (!p || fscanf(p, "%d", &n) != 1) fail_msg("cannot list %s", dir);
    pclose(p);
    return n;
}

static const char *mode_name(ckpt__fault_mode m) {
    static const char *const names[] = {"none", "alloc", "EIO", "ENOSPC", "short", "EINTR"};
    return names[m];
}

static long total_points;

static long exercise(const op *o, ckpt__fault_mode mode) {
    unsigned long long sources = tree_hash(work);
    long n;
    for (n = 1; n < 100000; n++) {
        clear_dir(outdir);
        ckpt_error err;
        ckpt_error_clear(&err);
        ckpt__fault_arm(mode, n);
        ckpt_status st = run_op(o, &err);
        int fired = ckpt__fault_fired();
        ckpt__fault_arm(CKPT__FAULT_NONE, 0);
        if (st != CKPT_OK) {
            if (mode == CKPT__FAULT_SHORT || mode == CKPT__FAULT_EINTR)
                fail_msg("%s, %s at call %ld: a retryable fault failed the operation: %s", o->name, mode_name(mode),
                         n, err.message);
            if (!err.message[0]) fail_msg("%s, %s at call %ld: failure without a message", o->name, mode_name(mode), n);
            /* Nothing published: the output directory holds nothing. */
            if (o->kind == 2 && dir_entries(outdir) != 0) {
                char cmd[4200];
                snprintf(cmd, sizeof cmd, "find '%s' >&2", outdir);
                if (system(cmd)) {
                }
                fail_msg("%s, %s at call %ld failed (%s) but left output", o->name, mode_name(mode), n, err.message);
            }
        }
        if (count_temps(outdir) || count_temps(work))
            fail_msg("%s, %s at call %ld: temporaries left behind", o->name, mode_name(mode), n);
        if (tree_hash(work) != sources) fail_msg("%s, %s at call %ld: a source changed", o->name, mode_name(mode), n);
        if (!fired) {
            if (st != CKPT_OK) fail_msg("%s: fails with no fault: %s", o->name, err.message);
            break;
        }
    }
    printf("  %-26s %-7s %5ld injection points\n", o->name, mode_name(mode), n - 1);
    total_points += n - 1;
    return n - 1;
}

static void test_every_fault_point(void **state) {
    (void)state;
    static const op ops[] = {
        {"open sharded safetensors", 0, "sharded", NULL, 0, 0},
        {"open torch zip", 0, FIXTURES "/model.pt", NULL, 0, 0},
        {"open torch legacy", 0, FIXTURES "/legacy.pt", NULL, 0, 0},
        {"load sharded safetensors", 1, "sharded", NULL, 0, 0},
        {"load torch (views)", 1, FIXTURES "/model.pt", NULL, 0, 0},
        {"load re-zipped torch", 1, FIXTURES "/rezipped.pt", NULL, 0, 0},
        {"load shards, caller's source", 1, "memdir:ckpt", NULL, 0, 0},
        {"load from memory", 1, "memory:single.safetensors", NULL, 0, 0},
        {"convert to shards", 2, "single.safetensors", "shards", 40, 0},
        {"convert with checksums", 2, "single.safetensors", "c.safetensors", 0, 1},
        {"convert torch", 2, FIXTURES "/model.pt", "t.safetensors", 0, 0},
        {"engine load, sliced, cast, transposed", 3, "sharded", NULL, 0, 0},
        {"engine load of torch views", 3, FIXTURES "/model.pt", NULL, 0, 0},
        {"engine convert, transformed", 4, "single.safetensors", "e.safetensors", 0, 0},
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        for (int m = CKPT__FAULT_ALLOC; m <= CKPT__FAULT_EINTR; m++) {
            long points = exercise(&ops[i], (ckpt__fault_mode)m);
            /* A source with no descriptor (the caller's, memory) is faulted
             * as every kind is: each of its reads is an injection point. */
            if (strchr(ops[i].src, ':') && m == CKPT__FAULT_EIO && points == 0)
                fail_msg("%s: no read of the source was faulted", ops[i].name);
        }
    printf("  %ld injection points in all\n", total_points);
}

/* A long write goes to the page cache in 32 KiB calls (src/io/file.c,
 * WRITE_PIECE: large writes make large folios, slow to allocate), each
 * ending on a multiple of 32 KiB in the file (a call that ends inside a
 * page of a hole costs a zeroing and a second visit): the second call
 * failing fails the write, naming the byte where that call began, the
 * first such multiple after the write's start.  On tmpfs (TMPDIR there)
 * the write is one call: no second call to fail. */
static void test_write_in_pieces(void **state) {
    (void)state;
    enum { PIECE = 32 << 10, LEN = 3 * PIECE + 100 };
    unsigned char *buf = malloc(LEN);
    memset(buf, 7, LEN);
    const char *path = in_dir(outdir, "pieces.bin");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    ckpt_error err;
    ckpt_error_clear(&err);
    struct statfs fs;
    assert_int_equal(fstatfs(fd, &fs), 0);
    bool tmpfs = (unsigned long)fs.f_type == 0x01021994;
    ckpt__fault_arm(CKPT__FAULT_EIO, 2);
    ckpt_status st = ckpt__pwrite_full(fd, buf, LEN, 4096, path, &err);
    int fired = ckpt__fault_fired();
    ckpt__fault_arm(CKPT__FAULT_NONE, 0);
    assert_int_equal(fired, !tmpfs);
    assert_int_equal(st, tmpfs ? CKPT_OK : CKPT_E_IO);
    if (!tmpfs) assert_int_equal(err.offset, PIECE);
    /* The third call begins a whole piece later. */
    ckpt__fault_arm(CKPT__FAULT_EIO, 3);
    st = ckpt__pwrite_full(fd, buf, LEN, 4096, path, &err);
    fired = ckpt__fault_fired();
    ckpt__fault_arm(CKPT__FAULT_NONE, 0);
    assert_int_equal(fired, !tmpfs);
    if (!tmpfs) assert_int_equal(err.offset, 2 * PIECE);
    /* Short pieces are resumed: every byte arrives. */
    assert_int_equal(ftruncate(fd, 0), 0);
    ckpt__fault_arm(CKPT__FAULT_SHORT, tmpfs ? 1 : 3);
    st = ckpt__pwrite_full(fd, buf, LEN, 0, path, &err);
    fired = ckpt__fault_fired();
    ckpt__fault_arm(CKPT__FAULT_NONE, 0);
    assert_true(fired);
    assert_int_equal(st, CKPT_OK);
    struct stat sb;
    assert_int_equal(fstat(fd, &sb), 0);
    assert_int_equal(sb.st_size, LEN);
    close(fd);
    size_t n;
    char *back = read_all(path, &n);
    assert_int_equal(n, LEN);
    assert_memory_equal(back, buf, LEN);
    free(back);
    free(buf);
    unlink(path);
}

static int setup(void **state) {
    (void)state;
    work = scratch_dir();
    outdir = scratch_dir();
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"}," T("a", "F32", "[4,4]", 0, 64) "," T("b", "U8", "[10]", 64, 74) ","
                      T("c", "I16", "[3]", 74, 80) "}";
    write_safetensors(in_dir(work, "single.safetensors"), hdr, 80);
    /* A sharded checkpoint, made by ckpt itself before any fault is armed. */
    ckpt_catalog *cat;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = 40;
    assert_int_equal(ckpt_catalog_open(in_dir(work, "single.safetensors"), &cat, NULL), CKPT_OK);
    assert_int_equal(convert_all(cat, in_dir(work, "sharded"), &o, NULL, NULL, NULL), CKPT_OK);
    ckpt_catalog_close(cat);
    memdir_load(&held, "ckpt", in_dir(work, "sharded"));
    size_t n;
    single.data = read_all(in_dir(work, "single.safetensors"), &n);
    single.size = n;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    memdir_free(&held);
    free((void *)single.data);
    scratch_free(work);
    scratch_free(outdir);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_write_in_pieces), cmocka_unit_test(test_every_fault_point)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
