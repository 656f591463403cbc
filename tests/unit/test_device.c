/* test_device.c — the device destination (ckpt_device.h) driven through
 * the stand-in CUDA runtime (tests/gpu/standin/cudart_standin.c, named by
 * CKPT_CUDART): every dtype and transform byte for byte against a host
 * load, slot reuse, tensors larger than a slot, copies that overlap reads,
 * cancellation and failed copies with no copy left in flight, and a
 * runtime that is absent; GPUDirect Storage through the stand-in cuFile
 * (tests/gpu/standin/cufile_standin.c, named by CKPT_CUFILE): reads
 * straight to the device, the ring for what must change on the host, a
 * clean fallback when the driver or a file is refused, and a failed read
 * that names the tensor and the byte range. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "ckpt_collective.h"
#include "ckpt_device.h"
#include "helpers.h"
#include "plan_internal.h"
#include "threadcomm.h"

/* The stand-in's own calls (its "device" memory is host memory). */
typedef struct standin_counters {
    uint64_t copies, bytes, unpinned_copies, max_queued, host_allocs, host_bytes, device_allocs, streams, events,
        in_flight;
} standin_counters;

static struct {
    void *lib;
    int (*malloc_)(void **p, size_t n);
    int (*free_)(void *p);
    void (*counters)(standin_counters *c);
    void (*reset)(void);
} standin;

static void standin_load(void) {
    if (standin.lib) return;
    standin.lib = dlopen(CKPT_STANDIN, RTLD_NOW);
    assert_non_null(standin.lib);
    *(void **)&standin.malloc_ = dlsym(standin.lib, "cudaMalloc");
    *(void **)&standin.free_ = dlsym(standin.lib, "cudaFree");
    *(void **)&standin.counters = dlsym(standin.lib, "ckpt_standin_counters_get");
    *(void **)&standin.reset = dlsym(standin.lib, "ckpt_standin_reset");
    assert_true(standin.malloc_ && standin.free_ && standin.counters && standin.reset);
}

static void knobs(const char *delay_us, const char *fail_copy, const char *fail_sync) {
    setenv("CKPT_CUDART", CKPT_STANDIN, 1);
    if (delay_us) setenv("CKPT_STANDIN_COPY_DELAY_US", delay_us, 1);
    else unsetenv("CKPT_STANDIN_COPY_DELAY_US");
    if (fail_copy) setenv("CKPT_STANDIN_FAIL_COPY", fail_copy, 1);
    else unsetenv("CKPT_STANDIN_FAIL_COPY");
    if (fail_sync) setenv("CKPT_STANDIN_FAIL_SYNC", fail_sync, 1);
    else unsetenv("CKPT_STANDIN_FAIL_SYNC");
    unsetenv("CKPT_STANDIN_DEVICES");
    setenv("CKPT_CUFILE", "/nonexistent/libcufile.so.0", 1); /* the ring alone, whatever the machine has */
    standin_load();
    standin.reset();
}

static standin_counters counters(void) {
    standin_counters c;
    standin.counters(&c);
    return c;
}

/* Every dtype of whole or packed bytes ckpt reads from safetensors files,
 * as "t<dtype>" of 8×64 elements, and "big" (f32, 512×1024: 2 MiB, many
 * slots), each byte a pattern of its offset. */
enum { SMALL_ROWS = 8, SMALL_COLS = 64, BIG_ROWS = 512, BIG_COLS = 1024 };

static unsigned char pattern(size_t tensor, size_t i) { return (unsigned char)(i * 31 + tensor * 7 + (i >> 8)); }

/* A float pattern that stays finite in every float dtype and cast. */
static void fill_tensor(ckpt_dtype d, size_t tensor, unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = pattern(tensor, i);
    if (d == CKPT_F32 || d == CKPT_C64)
        for (size_t i = 0; i + 4 <= n; i += 4) {
            float f = (float)(i % 977) * 0.5f - 100.0f;
            memcpy(p + i, &f, 4);
        }
    if (d == CKPT_F64)
        for (size_t i = 0; i + 8 <= n; i += 8) {
            double f = (double)(i % 977) * 0.25 - 50.0;
            memcpy(p + i, &f, 8);
        }
    if (d == CKPT_F16 || d == CKPT_BF16)
        for (size_t i = 0; i + 2 <= n; i += 2) p[i + 1] = (unsigned char)(0x3c + (p[i + 1] & 3)); /* 1.x .. 8.x / 2^k */
    if (d == CKPT_BOOL)
        for (size_t i = 0; i < n; i++) p[i] &= 1;
}

static char *make_model(char **dir_out) {
    char *dir = scratch_dir();
    const char *path = in_dir(dir, "m.safetensors");
    ckpt_writer *w;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.no_sync = 1;
    assert_int_equal(ckpt_writer_create(path, &o, &w, NULL), CKPT_OK);
    uint64_t small[2] = {SMALL_ROWS, SMALL_COLS}, big[2] = {BIG_ROWS, BIG_COLS};
    size_t index[CKPT_U64 + 2];
    ckpt_dtype dtypes[CKPT_U64 + 2];
    size_t n = 0;
    for (int d = CKPT_BOOL; d <= CKPT_U64; d++) {
        char name[16];
        snprintf(name, sizeof name, "t%02d", d);
        ckpt_error err;
        assert_int_equal(ckpt_writer_add_tensor(w, name, (ckpt_dtype)d, 2, small, &index[n], &err), CKPT_OK);
        dtypes[n++] = (ckpt_dtype)d;
    }
    assert_int_equal(ckpt_writer_add_tensor(w, "big", CKPT_F32, 2, big, &index[n], NULL), CKPT_OK);
    dtypes[n++] = CKPT_F32;
    assert_int_equal(ckpt_writer_begin(w, NULL), CKPT_OK);
    for (size_t i = 0; i < n; i++) {
        uint64_t elems = i + 1 == n ? (uint64_t)BIG_ROWS * BIG_COLS : SMALL_ROWS * SMALL_COLS;
        size_t bytes = (size_t)(elems * ckpt_dtype_bits(dtypes[i]) / 8);
        unsigned char *data = malloc(bytes);
        fill_tensor(dtypes[i], i, data, bytes);
        assert_int_equal(ckpt_writer_write(w, index[i], data, bytes, NULL), CKPT_OK);
        free(data);
    }
    assert_int_equal(ckpt_writer_commit(w, NULL), CKPT_OK);
    ckpt_writer_free(w);
    *dir_out = dir;
    return strdup(path);
}

/* The model file, opened. */
typedef struct model {
    char *dir, *path;
    ckpt_catalog *cat;
} model;

static model model_open(void) {
    model m;
    m.path = make_model(&m.dir);
    assert_int_equal(ckpt_catalog_open(m.path, &m.cat, NULL), CKPT_OK);
    return m;
}

static void model_close(model *m) {
    ckpt_catalog_close(m->cat);
    free(m->path);
    scratch_free(m->dir);
}

/* The rules a round applies to the plan. */
typedef enum transforms { AS_STORED, CAST_TRANSPOSE_SLICE } transforms;

static ckpt_plan *make_plan(ckpt_catalog *cat, transforms t) {
    ckpt_plan *plan;
    ckpt_error err;
    assert_int_equal(ckpt_plan_create(cat, &plan, &err), CKPT_OK);
    if (t == CAST_TRANSPOSE_SLICE) {
        assert_int_equal(ckpt_plan_cast(plan, "t1[45]", CKPT_F32, &err), CKPT_OK);  /* f16, bf16 → f32 */
        assert_int_equal(ckpt_plan_cast(plan, "big", CKPT_BF16, &err), CKPT_OK);    /* f32 → bf16 */
        assert_int_equal(ckpt_plan_cast(plan, "t18", CKPT_F16, &err), CKPT_OK);     /* f32 → f16 */
        assert_int_equal(ckpt_plan_slice(plan, "big", 0, 3, 501, &err), CKPT_OK);
        assert_int_equal(ckpt_plan_transpose(plan, "big", &err), CKPT_OK);
        assert_int_equal(ckpt_plan_transpose(plan, "t2[01]", &err), CKPT_OK); /* f64, i64 */
    }
    return plan;
}

/* Loads `plan` into host memory; the bytes of every item, malloc'ed. */
static unsigned char **host_load(ckpt_plan *plan) {
    size_t n = ckpt_plan_count(plan);
    ckpt_error err;
    assert_int_equal(ckpt_load(plan, NULL, &err), CKPT_OK);
    unsigned char **out = calloc(n, sizeof *out);
    for (size_t i = 0; i < n; i++) {
        const ckpt_plan_item *it = ckpt_plan_item_at(plan, i);
        out[i] = malloc(it->nbytes + 1);
        memcpy(out[i], it->data, it->nbytes);
    }
    return out;
}

/* Device memory for every item of the plan. */
static void **device_buffers(ckpt_plan *plan, ckpt_device *dev) {
    size_t n = ckpt_plan_count(plan);
    void **bufs = calloc(n, sizeof *bufs);
    for (size_t i = 0; i < n; i++) {
        const ckpt_plan_item *it = ckpt_plan_item_at(plan, i);
        assert_int_equal(standin.malloc_(&bufs[i], it->nbytes ? it->nbytes : 1), 0);
        memset(bufs[i], 0xee, it->nbytes);
        ckpt_error err;
        assert_int_equal(ckpt_plan_set_device_buffer(plan, i, dev, bufs[i], it->nbytes, &err), CKPT_OK);
    }
    return bufs;
}

static void free_buffers(void **bufs, size_t n) {
    for (size_t i = 0; i < n; i++) standin.free_(bufs[i]);
    free(bufs);
}

static ckpt_device *open_device(unsigned slots, uint64_t slot_bytes) {
    ckpt_device_options o;
    ckpt_device_options_init(&o);
    o.slots = slots, o.slot_bytes = slot_bytes;
    ckpt_device *dev;
    ckpt_error err;
    ckpt_status st = ckpt_device_open("cuda:0", &o, &dev, &err);
    if (st) fail_msg("%s", err.message);
    return dev;
}

/* Every dtype, as stored and with casts, a transpose and a slice, arrives
 * on the device byte for byte as a host load gives it; with few small
 * slots every slot is reused many times and "big" spans many slots. */
static void test_bytes_of_every_dtype_and_transform(void **state) {
    (void)state;
    knobs(NULL, NULL, NULL);
    model m = model_open();
    ckpt_catalog *cat = m.cat;
    ckpt_device *dev = open_device(2, 64 << 10);
    for (transforms t = AS_STORED; t <= CAST_TRANSPOSE_SLICE; t++)
        for (unsigned threads = 1; threads <= 4; threads += 3) {
            ckpt_plan *host = make_plan(cat, t), *plan = make_plan(cat, t);
            size_t n = ckpt_plan_count(plan);
            assert_int_equal(n, CKPT_U64 + 1);
            unsigned char **want = host_load(host);
            void **bufs = device_buffers(plan, dev);
            ckpt_load_options o;
            ckpt_load_options_init(&o);
            o.threads = threads;
            o.views = CKPT_VIEWS_SHARED; /* never for device items */
            ckpt_error err;
            ckpt_device_stats ds = {.size = sizeof ds};
            ckpt_device_stats_get(dev, &ds, 1);
            standin.reset();
            assert_int_equal(ckpt_load(plan, &o, &err), CKPT_OK);
            uint64_t total = 0;
            for (size_t i = 0; i < n; i++) {
                const ckpt_plan_item *it = ckpt_plan_item_at(plan, i);
                assert_ptr_equal(it->data, bufs[i]);
                assert_int_equal(it->is_view, 0);
                assert_memory_equal(bufs[i], want[i], it->nbytes);
                total += it->nbytes;
                free(want[i]);
            }
            if (t == CAST_TRANSPOSE_SLICE) assert_int_equal(ckpt_plan_find(plan, "big", NULL)->shape[0], BIG_COLS);
            standin_counters c = counters();
            assert_int_equal(c.bytes, total);
            assert_int_equal(c.unpinned_copies, 0); /* every copy leaves a pinned slot */
            assert_int_equal(c.in_flight, 0);
            ckpt_device_stats_get(dev, &ds, 0);
            assert_int_equal(ds.path, CKPT_DEVICE_PATH_STAGED);
            assert_int_equal(ds.bytes_copied, total);
            assert_true(ds.copies > 2 * ds.slots); /* the slots were reused */
            assert_true(ds.slot_waits > 0);
            assert_int_equal(ds.slots, 2);
            assert_int_equal(ds.slot_bytes, 64 << 10);
            free(want);
            free_buffers(bufs, n);
            ckpt_plan_free(host);
            ckpt_plan_free(plan);
        }
    /* host memory of the ring: the slots, whatever the model's size */
    assert_int_equal(counters().host_bytes, 2 * (64 << 10));
    ckpt_device_close(dev);
    assert_int_equal(counters().host_allocs, 0);
    assert_int_equal(counters().streams, 0);
    assert_int_equal(counters().events, 0);
    model_close(&m);
}

/* With slow copies, reads run ahead of them: several copies are queued on
 * the stream at once (they overlap the reads), the ring still bounds them,
 * and the bytes arrive in order. */
static void test_copies_overlap_reads(void **state) {
    (void)state;
    knobs("2000", NULL, NULL);
    model m = model_open();
    ckpt_catalog *cat = m.cat;
    ckpt_device *dev = open_device(4, 64 << 10);
    ckpt_plan *host = make_plan(cat, AS_STORED), *plan = make_plan(cat, AS_STORED);
    assert_int_equal(ckpt_plan_select(host, "big", NULL), CKPT_OK);
    assert_int_equal(ckpt_plan_select(plan, "big", NULL), CKPT_OK);
    unsigned char **want = host_load(host);
    void **bufs = device_buffers(plan, dev);
    ckpt_load_options o;
    ckpt_load_options_init(&o);
    o.threads = 1;
    ckpt_error err;
    assert_int_equal(ckpt_load(plan, &o, &err), CKPT_OK);
    assert_memory_equal(bufs[0], want[0], (size_t)BIG_ROWS * BIG_COLS * 4);
    standin_counters c = counters();
    assert_int_equal(c.copies, (uint64_t)BIG_ROWS * BIG_COLS * 4 / (64 << 10));
    assert_true(c.max_queued >= 2); /* one thread read on while copies waited */
    assert_true(c.max_queued <= 4); /* never more than the slots */
    free(want[0]);
    free(want);
    free_buffers(bufs, 1);
    ckpt_plan_free(host);
    ckpt_plan_free(plan);
    ckpt_device_close(dev);
    model_close(&m);
}

static int cancel_at_once(uint64_t done, uint64_t total, void *user) {
    (void)total, (void)user;
    return done > 0;
}

static int cancel_first_item(size_t item, void *user) {
    (void)item, (void)user;
    return 1;
}

/* A cancel in the middle of a load — by the progress callback (every 16
 * MiB) or by item_done — returns CKPT_E_CANCELLED with no copy in flight,
 * and the device serves the next load. */
static void test_cancel_leaves_nothing_in_flight(void **state) {
    (void)state;
    knobs("3000", NULL, NULL);
    char *dir = scratch_dir();
    const char *path = in_dir(dir, "huge.safetensors");
    write_safetensors(path, "{\"huge\":{\"dtype\":\"U8\",\"shape\":[50331648],\"data_offsets\":[0,50331648]}}", 50331648);
    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(path, &cat, NULL), CKPT_OK);
    ckpt_device *dev = open_device(4, 1 << 20);
    ckpt_plan *plan = make_plan(cat, AS_STORED);
    void **bufs = device_buffers(plan, dev);
    ckpt_load_options o;
    ckpt_load_options_init(&o);
    o.threads = 2;
    o.progress = cancel_at_once;
    ckpt_error err;
    assert_int_equal(ckpt_load(plan, &o, &err), CKPT_E_CANCELLED);
    standin_counters c = counters();
    assert_true(c.copies >= 16);
    assert_true(c.bytes < 50331648); /* stopped part way */
    assert_int_equal(c.in_flight, 0);
    o.progress = NULL;
    assert_int_equal(ckpt_load(plan, &o, &err), CKPT_OK);
    for (size_t i = 0; i < 50331648; i += 4099) assert_int_equal(((unsigned char *)bufs[0])[i], (unsigned char)(i * 7 + 1));
    free_buffers(bufs, 1);
    ckpt_plan_free(plan);
    ckpt_catalog_close(cat);
    scratch_free(dir);

    model m = model_open();
    plan = make_plan(m.cat, AS_STORED);
    bufs = device_buffers(plan, dev);
    o.threads = 1;
    o.item_done = cancel_first_item;
    standin.reset();
    assert_int_equal(ckpt_load(plan, &o, &err), CKPT_E_CANCELLED);
    assert_int_equal(counters().in_flight, 0);
    free_buffers(bufs, ckpt_plan_count(plan));
    ckpt_plan_free(plan);
    ckpt_device_close(dev);
    model_close(&m);
}

/* A copy that fails — in the stream (CUDA's sticky error, seen at the
 * event) or at once — fails the load with CKPT_E_IO naming the tensor and
 * the byte range of the copy that broke, with no copy left in flight. */
/* The range a failed copy's message blames: its own, through the last of
 * the copies it says were queued behind it. */
static void blamed_range(const char *message, unsigned long long *from, unsigned long long *to) {
    unsigned long long a = 0, b = 0, c, d;
    const char *own = strstr(message, "copy of bytes [");
    if (!own || sscanf(own, "copy of bytes [%llu, %llu)", &a, &b) != 2) fail_msg("no copy's range in: %s", message);
    const char *last = strstr(message, "the last bytes [");
    if (!last || sscanf(last, "the last bytes [%llu, %llu)", &c, &d) != 2) c = a, d = b;
    *from = a, *to = d;
}

/* The third copy fails: at its submission (sync), the copy named is
 * exactly it; on the stream, CUDA tells only at a later call, so the
 * message may blame an earlier copy that was not yet seen complete, but its
 * range, through the copies it says were queued behind, must hold the
 * third's bytes.  With no delay on the stream the fault lands while later
 * copies are submitted, with 500 µs after them: both orders are run. */
static void test_failed_copy_names_tensor_and_range(void **state) {
    (void)state;
    model m = model_open();
    ckpt_catalog *cat = m.cat;
    const char *delays[] = {"500", "0"};
    for (int run = 0; run < 4; run++) {
        int sync = run & 1;
        knobs(delays[run >> 1], "3", sync ? "1" : NULL);
        ckpt_device *dev = open_device(2, 64 << 10);
        ckpt_plan *plan = make_plan(cat, AS_STORED);
        assert_int_equal(ckpt_plan_select(plan, "big", NULL), CKPT_OK);
        void **bufs = device_buffers(plan, dev);
        ckpt_load_options o;
        ckpt_load_options_init(&o);
        o.threads = 1; /* copies in file order: the third is big's bytes [128 KiB, 192 KiB) */
        ckpt_error err;
        assert_int_equal(ckpt_load(plan, &o, &err), CKPT_E_IO);
        assert_string_equal(err.tensor, "big");
        const char *words[] = {sync ? "invalid argument" : "illegal memory access", "cuda:0"};
        for (size_t w = 0; w < sizeof words / sizeof *words; w++)
            if (!strstr(err.message, words[w])) fail_msg("run %d: '%s' not in: %s", run, words[w], err.message);
        if (sync && !strstr(err.message, "copy of bytes [131072, 196608) of the tensor to cuda:0 failed: "))
            fail_msg("run %d: the failed submission is not named alone: %s", run, err.message);
        unsigned long long from, to;
        blamed_range(err.message, &from, &to);
        if (from > 131072 || to < 196608) fail_msg("run %d: [131072, 196608) not within the blamed copies: %s", run, err.message);
        assert_int_equal(counters().in_flight, 0);
        free_buffers(bufs, 1);
        ckpt_plan_free(plan);
        ckpt_device_close(dev);
    }
    model_close(&m);
}

typedef struct done_check {
    ckpt_plan *plan;
    unsigned char **want;
    void **bufs;
    atomic_size_t calls; /* item_done runs on the engine's threads */
} done_check;

static int check_item(size_t item, void *user) {
    done_check *d = user;
    const ckpt_plan_item *it = ckpt_plan_item_at(d->plan, item);
    atomic_fetch_add(&d->calls, 1);
    return memcmp(d->bufs[item], d->want[item], it->nbytes) != 0; /* not there yet: cancel */
}

/* item_done fires for a device item once its copies have completed. */
static void test_item_done_after_copies(void **state) {
    (void)state;
    knobs("1000", NULL, NULL);
    model m = model_open();
    ckpt_catalog *cat = m.cat;
    ckpt_device *dev = open_device(8, 64 << 10);
    ckpt_plan *host = make_plan(cat, AS_STORED), *plan = make_plan(cat, AS_STORED);
    done_check d = {plan, host_load(host), device_buffers(plan, dev), 0};
    ckpt_load_options o;
    ckpt_load_options_init(&o);
    o.threads = 3;
    o.item_done = check_item, o.item_done_user = &d;
    ckpt_error err;
    ckpt_status st = ckpt_load(plan, &o, &err);
    if (st) fail_msg("%s", err.message);
    assert_int_equal(atomic_load(&d.calls), ckpt_plan_count(plan));
    for (size_t i = 0; i < ckpt_plan_count(plan); i++) free(d.want[i]);
    free(d.want);
    free_buffers(d.bufs, ckpt_plan_count(plan));
    ckpt_plan_free(host);
    ckpt_plan_free(plan);
    ckpt_device_close(dev);
    model_close(&m);
}

/* A collective load that exchanges bytes between ranks broadcasts into
 * host memory: device items are refused, by name, on every rank, before
 * any copy. */
typedef struct collective_case {
    ckpt_catalog *cat;
    ckpt_device *dev;
    ckpt_comm comms[THREADCOMM_MAX];
    ckpt_status st[2];
    ckpt_error err[2];
} collective_case;

static void collective_rank(int rank, void *user) {
    collective_case *c = user;
    ckpt_plan *plan = make_plan(c->cat, AS_STORED);
    assert_int_equal(ckpt_plan_select(plan, "big", NULL), CKPT_OK);
    void **bufs = device_buffers(plan, c->dev);
    c->st[rank] = ckpt_load_collective(plan, NULL, &c->comms[rank], NULL, NULL, &c->err[rank]);
    free_buffers(bufs, 1);
    ckpt_plan_free(plan);
}

static void test_collective_load_refuses_device_items(void **state) {
    (void)state;
    knobs(NULL, NULL, NULL);
    model m = model_open();
    collective_case c = {.cat = m.cat, .dev = open_device(2, 64 << 10)};
    threadcomm *t = threadcomm_create(2, c.comms);
    threadcomm_run(2, collective_rank, &c);
    for (int r = 0; r < 2; r++) {
        assert_int_not_equal(c.st[r], CKPT_OK);
        assert_non_null(strstr(c.err[r].message, "host buffer"));
    }
    assert_int_equal(counters().copies, 0);
    threadcomm_free(t);
    ckpt_device_close(c.dev);
    model_close(&m);
}

/* No runtime, no device, no such device, a bad name: clear statuses that
 * say what was tried. */
static void test_absent_runtime_and_devices(void **state) {
    (void)state;
    ckpt_device *dev = (ckpt_device *)1;
    ckpt_error err;
    setenv("CKPT_CUDART", "/nonexistent/libcudart.so.12", 1);
    assert_int_equal(ckpt_device_open("cuda:0", NULL, &dev, &err), CKPT_E_NOT_FOUND);
    assert_null(dev);
    assert_non_null(strstr(err.message, "no CUDA runtime could be loaded"));
    assert_non_null(strstr(err.message, "/nonexistent/libcudart.so.12"));
    assert_non_null(strstr(err.message, "CKPT_CUDART"));
    knobs(NULL, NULL, NULL);
    setenv("CKPT_STANDIN_DEVICES", "0", 1);
    assert_int_equal(ckpt_device_open("cuda", NULL, &dev, &err), CKPT_E_NOT_FOUND);
    assert_non_null(strstr(err.message, "no CUDA device"));
    setenv("CKPT_STANDIN_DEVICES", "2", 1);
    assert_int_equal(ckpt_device_open("cuda:2", NULL, &dev, &err), CKPT_E_NOT_FOUND);
    assert_non_null(strstr(err.message, "cuda:2: no such device (2 CUDA devices: cuda:0 to cuda:1)"));
    assert_int_equal(ckpt_device_open("cuda:1", NULL, &dev, &err), CKPT_OK);
    assert_string_equal(ckpt_device_name(dev), "cuda:1");
    ckpt_device_close(dev);
    unsetenv("CKPT_STANDIN_DEVICES");
    assert_int_equal(ckpt_device_open("gpu:0", NULL, &dev, &err), CKPT_E_INVALID_ARGUMENT);
    assert_int_equal(ckpt_device_open("cuda:x", NULL, &dev, &err), CKPT_E_INVALID_ARGUMENT);
    ckpt_device_options o;
    ckpt_device_options_init(&o);
    o.slot_bytes = 100;
    assert_int_equal(ckpt_device_open("cuda:0", &o, &dev, &err), CKPT_E_INVALID_ARGUMENT);
    assert_int_equal(counters().host_allocs, 0);
}

/* ---- GPUDirect Storage, through the stand-in cuFile ------------------------ */

typedef struct cufile_counters {
    uint64_t driver_opens, driver_open, handles, reads, bytes, unaligned;
} cufile_counters;

static struct {
    void *lib;
    void (*counters)(cufile_counters *c);
    void (*reset)(void);
} cufile;

/* The ring's knobs (knobs()), then the stand-in cuFile with its own:
 * which call fails (OPEN_FAILS, REGISTER_FAILS) or which read (FAIL_READ,
 * SHORT_READ: "N"). */
static void cufile_knobs(const char *open_fails, const char *register_fails, const char *fail_read,
                         const char *short_read) {
    knobs(NULL, NULL, NULL);
    setenv("CKPT_CUFILE", CKPT_CUFILE_STANDIN, 1);
    const char *names[] = {"CKPT_STANDIN_CUFILE_OPEN_FAILS", "CKPT_STANDIN_CUFILE_REGISTER_FAILS",
                           "CKPT_STANDIN_CUFILE_FAIL_READ", "CKPT_STANDIN_CUFILE_SHORT_READ"};
    const char *values[] = {open_fails, register_fails, fail_read, short_read};
    for (int i = 0; i < 4; i++) {
        if (values[i]) setenv(names[i], values[i], 1);
        else unsetenv(names[i]);
    }
    if (!cufile.lib) {
        cufile.lib = dlopen(CKPT_CUFILE_STANDIN, RTLD_NOW);
        assert_non_null(cufile.lib);
        *(void **)&cufile.counters = dlsym(cufile.lib, "ckpt_standin_cufile_counters_get");
        *(void **)&cufile.reset = dlsym(cufile.lib, "ckpt_standin_cufile_reset");
        assert_true(cufile.counters && cufile.reset);
    }
    cufile.reset();
}

static cufile_counters cufile_now(void) {
    cufile_counters c;
    cufile.counters(&c);
    return c;
}

static ckpt_device_stats device_stats(ckpt_device *dev, int reset) {
    ckpt_device_stats ds = {.size = sizeof ds};
    ckpt_device_stats_get(dev, &ds, reset);
    return ds;
}

/* Loads `plan` onto `dev` and checks every byte against `host`'s load;
 * returns the load's status (its error in *err). */
static ckpt_status device_load_matches(ckpt_plan *host, ckpt_plan *plan, ckpt_device *dev, unsigned threads,
                                       ckpt_error *err) {
    size_t n = ckpt_plan_count(plan);
    unsigned char **want = host_load(host);
    void **bufs = device_buffers(plan, dev);
    ckpt_load_options o;
    ckpt_load_options_init(&o);
    o.threads = threads;
    ckpt_status st = ckpt_load(plan, &o, err);
    for (size_t i = 0; i < n; i++) {
        if (st == CKPT_OK) assert_memory_equal(bufs[i], want[i], ckpt_plan_item_at(plan, i)->nbytes);
        free(want[i]);
    }
    free(want);
    free_buffers(bufs, n);
    return st;
}

/* The model as stored: "big" (2 MiB, unchanged) is read by cuFile at
 * 4 KiB-aligned offsets straight into device memory, its unaligned ends
 * and the small tensors (under 64 KiB) through the ring — a MIXED load
 * whose two counts add up to the model; every byte as a host load gives
 * it; each file's handle deregistered after the load, the driver closed
 * with the device.  With casts and a transpose, nothing can go direct. */
static void test_cufile_reads_straight_to_the_device(void **state) {
    (void)state;
    cufile_knobs(NULL, NULL, NULL, NULL);
    model m = model_open();
    ckpt_device *dev = open_device(4, 256 << 10);
    ckpt_device_stats ds = device_stats(dev, 0);
    assert_int_equal(ds.cufile_found, 1);
    assert_int_equal(ds.cufile_open, 1);
    for (unsigned threads = 1; threads <= 3; threads += 2) {
        ckpt_plan *host = make_plan(m.cat, AS_STORED), *plan = make_plan(m.cat, AS_STORED);
        ckpt_error err;
        device_stats(dev, 1);
        cufile.reset();
        standin.reset();
        assert_int_equal(device_load_matches(host, plan, dev, threads, &err), CKPT_OK);
        uint64_t total = 0, big = (uint64_t)BIG_ROWS * BIG_COLS * 4;
        for (size_t i = 0; i < ckpt_plan_count(plan); i++) total += ckpt_plan_item_at(plan, i)->nbytes;
        ds = device_stats(dev, 0);
        cufile_counters c = cufile_now();
        assert_int_equal(ds.path, CKPT_DEVICE_PATH_MIXED);
        assert_int_equal(ds.bytes_direct + ds.bytes_copied, total);
        assert_true(ds.bytes_direct >= big - 8 * 4096); /* 8 boxes of 256 KiB, each at most 4 KiB around its middle */
        assert_int_equal(ds.direct_reads, c.reads);
        assert_int_equal(c.bytes, ds.bytes_direct);
        assert_int_equal(c.unaligned, 0);
        assert_int_equal(c.handles, 0); /* deregistered once the engine was done */
        assert_int_equal(counters().bytes, ds.bytes_copied);
        assert_int_equal(counters().unpinned_copies, 0);
        ckpt_plan_free(host);
        ckpt_plan_free(plan);
    }
    ckpt_plan *host = make_plan(m.cat, CAST_TRANSPOSE_SLICE), *plan = make_plan(m.cat, CAST_TRANSPOSE_SLICE);
    ckpt_error err;
    device_stats(dev, 1);
    cufile.reset();
    assert_int_equal(device_load_matches(host, plan, dev, 2, &err), CKPT_OK);
    ds = device_stats(dev, 0);
    assert_int_equal(ds.path, CKPT_DEVICE_PATH_STAGED); /* casts and transposes run on the host */
    assert_int_equal(ds.bytes_direct, 0);
    assert_int_equal(cufile_now().reads, 0);
    ckpt_plan_free(host);
    ckpt_plan_free(plan);
    assert_int_equal(cufile_now().driver_open, 1);
    ckpt_device_close(dev);
    assert_int_equal(cufile_now().driver_open, 0);
    model_close(&m);
}

/* A tensor at a 4 KiB-aligned offset of 1 MiB: every byte by cuFile, none
 * through the ring (DIRECT); with options.cufile = 0, all through it. */
static char *aligned_file(char **dir_out) {
    char *dir = scratch_dir();
    const char *path = in_dir(dir, "aligned.safetensors");
    char header[4096 - 8 + 1];
    int n = snprintf(header, sizeof header, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1048576],\"data_offsets\":[0,1048576]}}");
    memset(header + n, ' ', sizeof header - 1 - (size_t)n); /* data from byte 4096 */
    header[sizeof header - 1] = '\0';
    write_safetensors(path, header, 1 << 20);
    *dir_out = dir;
    return strdup(path);
}

static void test_cufile_aligned_tensor_all_direct(void **state) {
    (void)state;
    cufile_knobs(NULL, NULL, NULL, NULL);
    char *dir, *path = aligned_file(&dir);
    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(path, &cat, NULL), CKPT_OK);
    for (int use = 1; use >= 0; use--) {
        ckpt_device_options o;
        ckpt_device_options_init(&o);
        assert_int_equal(o.cufile, 1);
        o.slots = 2, o.slot_bytes = 256 << 10, o.cufile = use;
        ckpt_device *dev;
        assert_int_equal(ckpt_device_open("cuda:0", &o, &dev, NULL), CKPT_OK);
        ckpt_plan *host = make_plan(cat, AS_STORED), *plan = make_plan(cat, AS_STORED);
        ckpt_error err;
        cufile.reset();
        standin.reset();
        assert_int_equal(device_load_matches(host, plan, dev, 2, &err), CKPT_OK);
        ckpt_device_stats ds = device_stats(dev, 0);
        assert_int_equal(ds.cufile_open, use);
        assert_int_equal(ds.path, use ? CKPT_DEVICE_PATH_DIRECT : CKPT_DEVICE_PATH_STAGED);
        assert_int_equal(ds.bytes_direct, use ? 1 << 20 : 0);
        assert_int_equal(ds.bytes_copied, use ? 0 : 1 << 20);
        assert_int_equal(ds.direct_reads, use ? 4 : 0); /* a read per slot-sized box */
        assert_int_equal(counters().copies, use ? 0 : 4);
        ckpt_plan_free(host);
        ckpt_plan_free(plan);
        ckpt_device_close(dev);
    }
    ckpt_catalog_close(cat);
    free(path);
    scratch_free(dir);
}

/* No driver (cuFileDriverOpen fails), or a file cuFile will not register:
 * the ring carries every byte, and the stats say why. */
static void test_cufile_refused_falls_back_to_the_ring(void **state) {
    (void)state;
    model m = model_open();
    for (int which = 0; which < 2; which++) {
        cufile_knobs(which == 0 ? "1" : NULL, which == 1 ? "1" : NULL, NULL, NULL);
        ckpt_device *dev = open_device(4, 256 << 10);
        ckpt_plan *host = make_plan(m.cat, AS_STORED), *plan = make_plan(m.cat, AS_STORED);
        ckpt_error err;
        assert_int_equal(device_load_matches(host, plan, dev, 2, &err), CKPT_OK);
        ckpt_device_stats ds = device_stats(dev, 0);
        assert_int_equal(ds.cufile_found, 1);
        assert_int_equal(ds.cufile_open, which == 1);
        assert_int_equal(ds.cufile_files_refused, which == 1 ? 1 : 0);
        assert_int_equal(ds.path, CKPT_DEVICE_PATH_STAGED);
        assert_int_equal(ds.bytes_direct, 0);
        assert_int_equal(cufile_now().reads, 0);
        assert_int_equal(cufile_now().handles, 0);
        ckpt_plan_free(host);
        ckpt_plan_free(plan);
        ckpt_device_close(dev);
    }
    model_close(&m);
}

/* A cuFileRead that fails in the middle of a tensor fails the load with
 * CKPT_E_IO naming the file, the tensor, and the byte ranges; no copy is
 * left in flight and no handle registered.  A short read is continued. */
static void test_cufile_failed_read_names_tensor_and_range(void **state) {
    (void)state;
    char *dir, *path = aligned_file(&dir);
    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(path, &cat, NULL), CKPT_OK);
    cufile_knobs(NULL, NULL, "3", NULL);
    ckpt_device *dev = open_device(2, 256 << 10);
    ckpt_plan *host = make_plan(cat, AS_STORED), *plan = make_plan(cat, AS_STORED);
    ckpt_error err;
    assert_int_equal(device_load_matches(host, plan, dev, 1, &err), CKPT_E_IO);
    assert_string_equal(err.tensor, "a");
    assert_non_null(strstr(err.path, "aligned.safetensors"));
    assert_int_equal(err.offset, 4096 + (512 << 10)); /* the third box */
    assert_non_null(strstr(err.message, "cuFileRead of bytes [528384, 790528) of the file"));
    assert_non_null(strstr(err.message, "bytes [524288, 786432) of the tensor on cuda:0"));
    assert_non_null(strstr(err.message, "Input/output error"));
    assert_int_equal(counters().in_flight, 0);
    assert_int_equal(cufile_now().handles, 0);
    ckpt_plan_free(plan);
    ckpt_plan_free(host);
    cufile_knobs(NULL, NULL, NULL, "2"); /* the second read gets half: the rest is read on */
    host = make_plan(cat, AS_STORED), plan = make_plan(cat, AS_STORED);
    assert_int_equal(device_load_matches(host, plan, dev, 1, &err), CKPT_OK);
    assert_int_equal(cufile_now().reads, 5);
    assert_int_equal(device_stats(dev, 0).path, CKPT_DEVICE_PATH_DIRECT);
    ckpt_plan_free(plan);
    ckpt_plan_free(host);
    ckpt_device_close(dev);
    ckpt_catalog_close(cat);
    free(path);
    scratch_free(dir);
}

/* A computed tensor (the plan's elementwise rule, as a load of a Gemma
 * GGUF's norms applies it) onto the device equals a host load of the same
 * plan: the rule alone, with a cast, and with a slice and a transpose;
 * through the ring, and with cuFile offered (a computed tensor is not the
 * file's bytes, so it never goes to cuFile). */
static void test_computed_tensors_onto_the_device(void **state) {
    (void)state;
    for (int offered = 0; offered < 2; offered++) {
        knobs(NULL, NULL, NULL);
        if (offered) setenv("CKPT_CUFILE", CKPT_CUFILE_STANDIN, 1);
        model m = model_open();
        ckpt_device *dev = open_device(2, 64 << 10);
        size_t big = SIZE_MAX, t18 = SIZE_MAX;
        for (size_t i = 0; i < ckpt_catalog_tensor_count(m.cat); i++) {
            if (!strcmp(ckpt_catalog_tensor(m.cat, i)->name, "big")) big = i;
            if (!strcmp(ckpt_catalog_tensor(m.cat, i)->name, "t18")) t18 = i;
        }
        assert_true(big != SIZE_MAX && t18 != SIZE_MAX);
        for (int variant = 0; variant < 3; variant++) {
            ckpt_plan *plans[2];
            ckpt_error err;
            ckpt__elementwise rule = {.add = -1.0, .hold = CKPT_F32};
            for (int k = 0; k < 2; k++) {
                assert_int_equal(ckpt_plan_create(m.cat, &plans[k], &err), CKPT_OK);
                assert_int_equal(ckpt__plan_compute(plans[k], big, &rule, &err), CKPT_OK);
                assert_int_equal(ckpt__plan_compute(plans[k], t18, &rule, &err), CKPT_OK);
                if (variant >= 1) assert_int_equal(ckpt_plan_cast(plans[k], "big", CKPT_BF16, &err), CKPT_OK);
                if (variant == 2) {
                    assert_int_equal(ckpt_plan_slice(plans[k], "big", 0, 3, 501, &err), CKPT_OK);
                    assert_int_equal(ckpt_plan_transpose(plans[k], "big", &err), CKPT_OK);
                }
            }
            size_t n = ckpt_plan_count(plans[1]);
            unsigned char **want = host_load(plans[0]);
            void **bufs = device_buffers(plans[1], dev);
            ckpt_load_options o;
            ckpt_load_options_init(&o);
            o.threads = 3;
            if (ckpt_load(plans[1], &o, &err)) fail_msg("load: %s", err.message);
            for (size_t i = 0; i < n; i++) {
                const ckpt_plan_item *it = ckpt_plan_item_at(plans[1], i);
                if (memcmp(bufs[i], want[i], it->nbytes))
                    fail_msg("cuFile offered %d, variant %d: %s differs from the host load", offered, variant, it->name);
                free(want[i]);
            }
            free(want);
            free_buffers(bufs, n);
            ckpt_plan_free(plans[0]);
            ckpt_plan_free(plans[1]);
        }
        ckpt_device_close(dev);
        model_close(&m);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_computed_tensors_onto_the_device),
        cmocka_unit_test(test_bytes_of_every_dtype_and_transform),
        cmocka_unit_test(test_copies_overlap_reads),
        cmocka_unit_test(test_cancel_leaves_nothing_in_flight),
        cmocka_unit_test(test_failed_copy_names_tensor_and_range),
        cmocka_unit_test(test_item_done_after_copies),
        cmocka_unit_test(test_collective_load_refuses_device_items),
        cmocka_unit_test(test_absent_runtime_and_devices),
        cmocka_unit_test(test_cufile_reads_straight_to_the_device),
        cmocka_unit_test(test_cufile_aligned_tensor_all_direct),
        cmocka_unit_test(test_cufile_refused_falls_back_to_the_ring),
        cmocka_unit_test(test_cufile_failed_read_names_tensor_and_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
