/* test_load.c — the engine from C, with many threads and tiny chunks (run
 * under ASan and TSan too): slices, casts and permutations against values
 * computed here element by element, rename collisions, caller buffers of
 * odd alignment, reloads and cancellation. */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "helpers.h"
#include "transform/cast.h"

enum { R = 300, C = 257 };

static float value(size_t r, size_t c) { return (float)r * 1000.0f + (float)c + 0.25f; }

/* Writes "w" (R×C f32) and "b" (R bf16) with the library's writer. */
static char *make_model(char **dir_out) {
    char *dir = scratch_dir();
    const char *path = in_dir(dir, "m.safetensors");
    ckpt_writer *w;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.no_sync = 1;
    assert_int_equal(ckpt_writer_create(path, &o, &w, NULL), CKPT_OK);
    uint64_t shape_w[2] = {R, C}, shape_b[1] = {R};
    size_t iw, ib;
    assert_int_equal(ckpt_writer_add_tensor(w, "w", CKPT_F32, 2, shape_w, &iw, NULL), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "b", CKPT_BF16, 1, shape_b, &ib, NULL), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, NULL), CKPT_OK);
    for (size_t r = 0; r < R; r++) {
        float row[C];
        for (size_t c = 0; c < C; c++) row[c] = value(r, c);
        assert_int_equal(ckpt_writer_write(w, iw, row, sizeof row, NULL), CKPT_OK);
    }
    for (size_t r = 0; r < R; r++) {
        uint16_t h = ckpt__f32_to_bf16((float)r);
        assert_int_equal(ckpt_writer_write(w, ib, &h, 2, NULL), CKPT_OK);
    }
    assert_int_equal(ckpt_writer_commit(w, NULL), CKPT_OK);
    ckpt_writer_free(w);
    *dir_out = dir;
    return strdup(path);
}

static void test_transposed_split_cast(void **state) {
    (void)state;
    char *dir, *path = make_model(&dir);
    ckpt_catalog *cats[2]; /* read with O_DIRECT, and through the page cache */
    ckpt_catalog_options co;
    ckpt_catalog_options_init(&co);
    for (int k = 0; k < 2; k++) {
        co.io = k ? CKPT_IO_DIRECT : CKPT_IO_BUFFERED;
        assert_int_equal(ckpt_catalog_open_ex(path, &co, &cats[k], NULL), CKPT_OK);
    }
    for (unsigned threads = 1; threads <= 4; threads++) {
        ckpt_plan *plan;
        ckpt_error err;
        assert_int_equal(ckpt_plan_create(cats[threads % 2], &plan, NULL), CKPT_OK);
        assert_int_equal(ckpt_plan_split(plan, "w", 1, 1, 3, &err), CKPT_OK); /* columns 86..171 */
        assert_int_equal(ckpt_plan_slice(plan, "w", 0, 7, 290, &err), CKPT_OK);
        assert_int_equal(ckpt_plan_cast(plan, NULL, CKPT_F16, &err), CKPT_OK);
        assert_int_equal(ckpt_plan_transpose(plan, NULL, &err), CKPT_OK);
        size_t iw;
        const ckpt_plan_item *it = ckpt_plan_find(plan, "w", &iw);
        assert_non_null(it);
        assert_int_equal(it->shape[0], 86);
        assert_int_equal(it->shape[1], 283);
        unsigned char *raw = malloc(it->nbytes + 1); /* odd alignment */
        assert_int_equal(ckpt_plan_set_buffer(plan, iw, raw + 1, it->nbytes, &err), CKPT_OK);
        ckpt_load_options o;
        ckpt_load_options_init(&o);
        o.threads = threads;
        o.chunk_bytes = 1; /* raised to the minimum: many tasks */
        for (int round = 0; round < 2; round++) /* a reload gives the same */
            assert_int_equal(ckpt_load(plan, &o, &err), CKPT_OK);
        for (size_t i = 0; i < 86; i++)
            for (size_t k = 0; k < 283; k++) {
                uint16_t h;
                memcpy(&h, raw + 1 + 2 * (i * 283 + k), 2);
                assert_int_equal(h, ckpt__f32_to_f16(value(7 + k, 86 + i)));
            }
        const ckpt_plan_item *b = ckpt_plan_find(plan, "b", NULL);
        for (size_t r = 0; r < R; r++) /* through bf16 first: 257 is 256 there */
            assert_int_equal(((uint16_t *)b->data)[r], ckpt__f32_to_f16(ckpt__bf16_to_f32(ckpt__f32_to_bf16((float)r))));
        ckpt_load_stats st;
        ckpt_plan_stats(plan, &st);
        assert_true(st.threads >= 1 && st.threads <= threads);
        assert_true(st.tasks > 1);
        free(raw);
        ckpt_plan_free(plan);
    }
    ckpt_catalog_close(cats[0]);
    ckpt_catalog_close(cats[1]);
    free(path);
    scratch_free(dir);
}

static int cancel_at_once(uint64_t done, uint64_t total, void *user) {
    (void)total;
    (void)user;
    return done > 0 || total > 0;
}

static void test_cancel_and_take(void **state) {
    (void)state;
    char *dir, *path = make_model(&dir);
    ckpt_catalog *cat;
    ckpt_plan *plan;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(path, &cat, NULL), CKPT_OK);
    assert_int_equal(ckpt_plan_create(cat, &plan, NULL), CKPT_OK);
    ckpt_load_options o;
    ckpt_load_options_init(&o);
    o.progress = cancel_at_once;
    o.threads = 3;
    assert_int_equal(ckpt_load(plan, &o, &err), CKPT_E_CANCELLED);
    assert_null(ckpt_plan_item_at(plan, 0)->data);
    o.progress = NULL;
    assert_int_equal(ckpt_load(plan, &o, &err), CKPT_OK);
    float *w = ckpt_plan_take(plan, 0);
    assert_non_null(w);
    assert_null(ckpt_plan_take(plan, 0));
    ckpt_plan_free(plan);
    assert_true(w[5 * C + 3] == value(5, 3)); /* still ours after the plan */
    ckpt_free(w);
    assert_int_equal(ckpt_plan_create(cat, &plan, NULL), CKPT_OK);
    assert_int_equal(ckpt_plan_rename(plan, "b", "w", &err), CKPT_OK);
    assert_code(ckpt_load(plan, NULL, &err), err, CKPT__D(DUPLICATE_NAME));
    ckpt_plan_free(plan);
    ckpt_catalog_close(cat);
    free(path);
    scratch_free(dir);
}

/* Fresh destinations above the prefault threshold (a 12 MiB f64 cast of a
 * 6 MiB f32 tensor): prefault threads fault them in before the engine
 * writes, the data is exact, a cancelled load frees them, and the engine's
 * writes find them mapped.  Private views count as loaded in progress. */
enum { BR = 1024, BC = 1536 };

typedef struct {
    uint64_t done, total, calls;
    int cancel;
} seen_progress;

static int record_progress(uint64_t done, uint64_t total, void *user) {
    seen_progress *s = user;
    s->done = done, s->total = total, s->calls++;
    return s->cancel == 2 || (s->cancel && done > 0);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1 /* shadow memory faults as the engine writes */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

/* item_done: called once per item, with its bytes all in place. */
typedef struct {
    ckpt_plan *plan;
    int calls, complete;
} seen_items;

static int record_item(size_t item, void *user) {
    seen_items *s = user;
    const ckpt_plan_item *it = ckpt_plan_item_at(s->plan, item);
    const double *d = it->data;
    bool ok = item == 0;
    for (size_t r = 0; ok && r < BR; r++)
        for (size_t c = 0; ok && c < BC; c++) ok = d[r * BC + c] == (double)value(r, c);
    s->calls++;
    s->complete += ok;
    return 0;
}

static bool populate_works(void) { /* MADV_POPULATE_WRITE: Linux 5.14 */
    long page = sysconf(_SC_PAGESIZE);
    void *p = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    bool ok = madvise(p, (size_t)page, 23 /* MADV_POPULATE_WRITE */) == 0;
    munmap(p, (size_t)page);
    return ok;
}

static void test_prefault_and_view_progress(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *path = in_dir(dir, "big.safetensors");
    ckpt_writer *w;
    ckpt_writer_options wo;
    ckpt_writer_options_init(&wo);
    wo.no_sync = 1;
    assert_int_equal(ckpt_writer_create(path, &wo, &w, NULL), CKPT_OK);
    uint64_t shape[2] = {BR, BC};
    size_t ib;
    assert_int_equal(ckpt_writer_add_tensor(w, "big", CKPT_F32, 2, shape, &ib, NULL), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, NULL), CKPT_OK);
    float *row = malloc(BC * sizeof *row);
    for (size_t r = 0; r < BR; r++) {
        for (size_t c = 0; c < BC; c++) row[c] = value(r, c);
        assert_int_equal(ckpt_writer_write(w, ib, row, BC * sizeof *row, NULL), CKPT_OK);
    }
    free(row);
    assert_int_equal(ckpt_writer_commit(w, NULL), CKPT_OK);
    ckpt_writer_free(w);
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(path, &cat, NULL), CKPT_OK);
    for (unsigned threads = 1; threads <= 3; threads++) {
        ckpt_plan *plan;
        assert_int_equal(ckpt_plan_create(cat, &plan, NULL), CKPT_OK);
        assert_int_equal(ckpt_plan_cast(plan, NULL, CKPT_F64, &err), CKPT_OK);
        ckpt_load_options o;
        ckpt_load_options_init(&o);
        o.threads = threads;
        seen_progress sp = {.cancel = 1};
        o.progress = record_progress;
        o.user = &sp;
        assert_int_equal(ckpt_load(plan, &o, &err), CKPT_E_CANCELLED);
        assert_null(ckpt_plan_item_at(plan, 0)->data);
        /* cancelled at the first call, while the destination is faulted in
         * or as the engine starts: nothing is read */
        sp = (seen_progress){.cancel = 2};
        assert_int_equal(ckpt_load(plan, &o, &err), CKPT_E_CANCELLED);
        assert_null(ckpt_plan_item_at(plan, 0)->data);
        ckpt_load_stats cs;
        ckpt_plan_stats(plan, &cs);
        assert_int_equal(cs.bytes_read, 0);
        sp = (seen_progress){0};
        assert_int_equal(ckpt_load(plan, &o, &err), CKPT_OK);
        assert_int_equal(sp.done, (uint64_t)BR * BC * 8);
        assert_int_equal(sp.total, (uint64_t)BR * BC * 8);
        /* item_done sees the item once, complete, however many threads */
        seen_items si = {plan, 0, 0};
        o.item_done = record_item, o.item_done_user = &si, o.chunk_bytes = 64 << 10;
        assert_int_equal(ckpt_load(plan, &o, &err), CKPT_OK);
        assert_int_equal(si.calls, 1);
        assert_int_equal(si.complete, 1);
        o.item_done = NULL, o.chunk_bytes = 0;
        const double *d = ckpt_plan_item_at(plan, 0)->data;
        for (size_t r = 0; r < BR; r++)
            for (size_t c = 0; c < BC; c++) assert_true(d[r * BC + c] == (double)value(r, c));
        ckpt_plan_free(plan);
    }
    /* The engine's writes find the destination mapped: few page faults in
     * this thread, where a one-thread engine runs (the prefault threads'
     * faults are theirs; each share starts on a page — an unaligned start
     * made madvise fail and left half the pages to the engine). */
    if (populate_works() && !SANITIZED) {
        ckpt_plan *pp;
        assert_int_equal(ckpt_plan_create(cat, &pp, NULL), CKPT_OK);
        assert_int_equal(ckpt_plan_cast(pp, NULL, CKPT_F64, &err), CKPT_OK);
        ckpt_load_options po;
        ckpt_load_options_init(&po);
        po.threads = 1, po.chunk_bytes = 256 << 10; /* a bounce buffer of 64 pages */
        struct rusage before, after;
        getrusage(RUSAGE_THREAD, &before);
        assert_int_equal(ckpt_load(pp, &po, &err), CKPT_OK);
        getrusage(RUSAGE_THREAD, &after);
        long faults = after.ru_minflt - before.ru_minflt, pages = (long)BR * BC * 8 / 4096;
        if (faults >= pages / 4) fail_msg("%ld page faults while loading into %ld prefaulted pages", faults, pages);
        ckpt_plan_free(pp);
    }
    /* Views only: the engine moves nothing, progress still ends at the total. */
    ckpt_plan *plan;
    assert_int_equal(ckpt_plan_create(cat, &plan, NULL), CKPT_OK);
    assert_int_equal(ckpt_plan_split(plan, "big", 0, 1, 4, &err), CKPT_OK); /* rows 256..511 */
    ckpt_load_options o;
    ckpt_load_options_init(&o);
    o.views = CKPT_VIEWS_PRIVATE;
    seen_progress sp = {0};
    o.progress = record_progress;
    o.user = &sp;
    assert_int_equal(ckpt_load(plan, &o, &err), CKPT_OK);
    const ckpt_plan_item *it = ckpt_plan_item_at(plan, 0);
    assert_int_equal(it->is_view, CKPT_VIEWS_PRIVATE);
    assert_true(sp.calls > 0);
    assert_int_equal(sp.done, it->nbytes);
    assert_int_equal(sp.total, it->nbytes);
    assert_true(((const float *)it->data)[3 * BC + 7] == value(259, 7));
    ckpt_load_stats st;
    ckpt_plan_stats(plan, &st);
    assert_int_equal(st.views, 1);
    ckpt_plan_free(plan);
    ckpt_catalog_close(cat);
    scratch_free(dir);
}

enum { STREAM_N = (12 << 20) + 12345 };

/* A byte of the streamed tensor: differs between any two pieces. */
static unsigned char stream_byte(size_t i) { return (unsigned char)((i ^ (i >> 9) ^ (i >> 17)) * 7 + 1); }

/* Writes "big", STREAM_N bytes of U8; returns where its data starts. */
static size_t write_stream_file(const char *path) {
    char header[128];
    int hl = snprintf(header, sizeof header, "{\"big\":{\"dtype\":\"U8\",\"shape\":[%d],\"data_offsets\":[0,%d]}}  ",
                      (int)STREAM_N, (int)STREAM_N);
    size_t start = 8 + (size_t)hl;
    unsigned char *file = malloc(start + STREAM_N);
    uint64_t hlen = (uint64_t)hl;
    memcpy(file, &hlen, 8);
    memcpy(file + 8, header, (size_t)hl);
    for (size_t i = 0; i < STREAM_N; i++) file[start + i] = stream_byte(i);
    write_bytes(path, file, start + STREAM_N);
    free(file);
    return start;
}

/* A direct load into an odd address: no block lands in place, so every
 * one streams through the bounce slots (2 MiB chunks: 2 slots, refilled
 * four times per box), with io_uring and with pread; then the file is cut
 * short under the catalog and both fail naming the tensor and where the
 * file now ends. */
static void test_direct_stream_through_slots(void **state) {
    (void)state;
    char *dir = scratch_dir();
    char *path = strdup(in_dir(dir, "s.safetensors"));
    unsigned char *raw = malloc(STREAM_N + 1);
    for (int uring = 0; uring >= -1; uring--) {
        size_t start = write_stream_file(path);
        ckpt_catalog *cat;
        ckpt_plan *plan;
        ckpt_error err;
        ckpt_catalog_options co;
        ckpt_catalog_options_init(&co);
        co.io = CKPT_IO_DIRECT;
        assert_int_equal(ckpt_catalog_open_ex(path, &co, &cat, NULL), CKPT_OK);
        assert_int_equal(ckpt_plan_create(cat, &plan, NULL), CKPT_OK);
        assert_int_equal(ckpt_plan_set_buffer(plan, 0, raw + 1, STREAM_N, &err), CKPT_OK);
        ckpt_load_options o;
        ckpt_load_options_init(&o);
        o.io_uring = uring, o.threads = 2, o.chunk_bytes = 2 << 20;
        memset(raw, 0, STREAM_N + 1);
        assert_int_equal(ckpt_load(plan, &o, &err), CKPT_OK);
        for (size_t i = 0; i < STREAM_N; i++)
            if (raw[1 + i] != stream_byte(i))
                fail_msg("byte %zu: %d, not %d (io_uring %d)", i, raw[1 + i], stream_byte(i), uring);
        ckpt_load_stats st;
        ckpt_plan_stats(plan, &st);
        int probe = open(path, O_RDONLY | O_DIRECT);
        assert_int_equal(st.direct, probe >= 0);
        if (probe >= 0) close(probe);
        if (st.direct) { /* a file system with O_DIRECT: boxes of 4 chunks, every byte read once */
            assert_int_equal(st.tasks, 2);
            assert_true(st.bytes_read >= STREAM_N && st.bytes_read < STREAM_N + 3 * 4096);
            if (st.io_uring) assert_true(st.reads >= 12); /* 1 MiB pieces */
        }
        assert_int_equal(truncate(path, (off_t)start + (5 << 20) + 1000), 0);
        ckpt_error_clear(&err);
        assert_int_equal(ckpt_load(plan, &o, &err), CKPT_E_TRUNCATED);
        assert_string_equal(err.tensor, "big");
        assert_int_equal(err.offset, start + (5 << 20) + 1000);
        assert_non_null(strstr(err.path, "s.safetensors"));
        ckpt_plan_free(plan);
        ckpt_catalog_close(cat);
    }
    free(raw);
    free(path);
    scratch_free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transposed_split_cast),
        cmocka_unit_test(test_cancel_and_take),
        cmocka_unit_test(test_prefault_and_view_progress),
        cmocka_unit_test(test_direct_stream_through_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
