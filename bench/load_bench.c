/* load_bench.c — the C side of `make bench`'s load suite: ckpt loads and the
 * machine's ceilings, timed inside the process, each ending with the same
 * checksum over every loaded byte (so that nothing wins by not reading).
 * Prints one JSON object.
 *
 *   ckpt_load_bench load PATH THREADS PRETOUCH IO CAST [CRC]   IO: auto|buffered|direct, CAST: none|BF16|F32|...,
 *                                     CRC: crc (default: ZIP CRC-32s checked) | nocrc (skip_crc_check)
 *   ckpt_load_bench pread PATH THREADS DIRECT             every data file, in 8 MiB reads, into one pre-touched buffer
 *   ckpt_load_bench memcpy BYTES | firsttouch BYTES | firsttouch_huge BYTES | cast FROM TO COUNT
 *   ckpt_load_bench prefault BYTES    fresh memory faulted in as ckpt_load does its own buffers: one
 *                                     thread per core, MADV_POPULATE_WRITE (the floor of any load
 *                                     into new memory)
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t checksum(const void *p, uint64_t n) {
    const unsigned char *b = p;
    uint64_t s = 0, w;
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, b + i, 8);
        s += w;
    }
    for (; i < n; i++) s += b[i];
    return s;
}

static void die(const ckpt_error *e) {
    fprintf(stderr, "%s\n", e->message);
    exit(1);
}

static int load(const char *path, unsigned threads, int pretouch, const char *io, const char *cast, int crc) {
    ckpt_error err;
    ckpt_catalog *cat;
    ckpt_plan *plan;
    ckpt_catalog_options co; /* IO: how the catalog reads its files */
    ckpt_catalog_options_init(&co);
    co.io = !strcmp(io, "direct") ? CKPT_IO_DIRECT : !strcmp(io, "buffered") ? CKPT_IO_BUFFERED : CKPT_IO_AUTO;
    if (ckpt_catalog_open_ex(path, &co, &cat, &err) || ckpt_plan_create(cat, &plan, &err)) die(&err);
    if (strcmp(cast, "none") && ckpt_plan_cast(plan, NULL, ckpt_dtype_from_name(cast), &err)) die(&err);
    size_t n = ckpt_plan_count(plan);
    void **mine = calloc(n, sizeof *mine);
    if (pretouch)
        for (size_t i = 0; i < n; i++) {
            const ckpt_plan_item *it = ckpt_plan_item_at(plan, i);
            mine[i] = malloc(it->nbytes ? it->nbytes : 1);
            memset(mine[i], 1, it->nbytes);
            if (ckpt_plan_set_buffer(plan, i, mine[i], it->nbytes, &err)) die(&err);
        }
    ckpt_load_options o;
    ckpt_load_options_init(&o);
    o.threads = threads;
    o.skip_crc_check = !crc;
    double t0 = now();
    if (ckpt_load(plan, &o, &err)) die(&err);
    double t1 = now();
    uint64_t sum = 0, bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const ckpt_plan_item *it = ckpt_plan_item_at(plan, i);
        sum += checksum(it->data, it->nbytes);
        bytes += it->nbytes;
    }
    double t2 = now();
    ckpt_load_stats st;
    ckpt_plan_stats(plan, &st);
    printf("{\"seconds\": %.6f, \"load_seconds\": %.6f, \"bytes\": %llu, \"checksum\": %llu, \"direct\": %d, "
           "\"io_uring\": %d, \"threads\": %u, \"ring_bytes\": %llu, \"bytes_read\": %llu}\n",
           t2 - t0, t1 - t0, (unsigned long long)bytes, (unsigned long long)sum, st.direct, st.io_uring, st.threads,
           (unsigned long long)st.ring_bytes, (unsigned long long)st.bytes_read);
    ckpt_plan_free(plan);
    for (size_t i = 0; i < n; i++) free(mine[i]);
    free(mine);
    ckpt_catalog_close(cat);
    return 0;
}

/* ---- prefault floor ------------------------------------------------------------------ */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

typedef struct share {
    unsigned char *p;
    size_t n;
    pthread_t t;
} share;

static void *populate(void *arg) {
    share *s = arg;
    if (madvise(s->p, s->n, MADV_POPULATE_WRITE) != 0) memset(s->p, 1, s->n); /* an older kernel: touch */
    return NULL;
}

static int prefault_floor(uint64_t n) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN), page = sysconf(_SC_PAGESIZE);
    if (cpus < 1) cpus = 1;
    if (cpus > 64) cpus = 64;
    unsigned char *b;
    if (posix_memalign((void **)&b, (size_t)page, n)) return 1;
    share s[64];
    size_t per = n / (size_t)cpus / (size_t)page * (size_t)page;
    double t0 = now();
    for (long i = 0; i < cpus; i++) {
        s[i].p = b + per * (size_t)i;
        s[i].n = i + 1 == cpus ? n - per * (size_t)i : per;
        pthread_create(&s[i].t, NULL, populate, &s[i]);
    }
    for (long i = 0; i < cpus; i++) pthread_join(s[i].t, NULL);
    double t1 = now();
    printf("{\"seconds\": %.6f, \"bytes\": %llu, \"threads\": %ld}\n", t1 - t0, (unsigned long long)n, cpus);
    free(b);
    return 0;
}

/* ---- pread ceiling ---------------------------------------------------------------------- */

typedef struct span { int fd; uint64_t size; unsigned char *dst; } span;
static span *spans;
static size_t span_count;
static atomic_uint_fast64_t next_piece;
static uint64_t piece_bytes = 8u << 20;
static uint64_t *piece_start; /* prefix sums of pieces per span */

static void *reader(void *arg) {
    (void)arg;
    for (;;) {
        uint64_t k = atomic_fetch_add(&next_piece, 1);
        size_t s = 0;
        while (s < span_count && k >= piece_start[s + 1]) s++;
        if (s == span_count) return NULL;
        uint64_t off = (k - piece_start[s]) * piece_bytes, len = spans[s].size - off;
        if (len > piece_bytes) len = piece_bytes;
        uint64_t done = 0;
        while (done < len) {
            ssize_t r = pread(spans[s].fd, spans[s].dst + off + done, (size_t)(piece_bytes - done), (off_t)(off + done));
            if (r <= 0) break;
            done += (uint64_t)r;
        }
    }
}

static int ceiling_pread(const char *path, unsigned threads, int direct) {
    ckpt_error err;
    ckpt_catalog *cat;
    if (ckpt_catalog_open(path, &cat, &err)) die(&err);
    span_count = ckpt_catalog_file_count(cat);
    spans = calloc(span_count, sizeof *spans);
    piece_start = calloc(span_count + 1, sizeof *piece_start);
    uint64_t total = 0;
    for (size_t i = 0; i < span_count; i++) {
        spans[i].fd = open(ckpt_catalog_file_path(cat, i), O_RDONLY | (direct ? O_DIRECT : 0));
        if (spans[i].fd < 0) { perror("open"); return 1; }
        spans[i].size = ckpt_catalog_file_size(cat, i);
        uint64_t cap = (spans[i].size + piece_bytes) / 4096 * 4096 + 4096;
        if (posix_memalign((void **)&spans[i].dst, 4096, cap)) return 1;
        memset(spans[i].dst, 1, cap);
        piece_start[i + 1] = piece_start[i] + (spans[i].size + piece_bytes - 1) / piece_bytes;
        total += spans[i].size;
    }
    pthread_t t[64];
    double t0 = now();
    for (unsigned i = 1; i < threads; i++) pthread_create(&t[i], NULL, reader, NULL);
    reader(NULL);
    for (unsigned i = 1; i < threads; i++) pthread_join(t[i], NULL);
    uint64_t sum = 0;
    for (size_t i = 0; i < span_count; i++) sum += checksum(spans[i].dst, spans[i].size);
    double t1 = now();
    printf("{\"seconds\": %.6f, \"bytes\": %llu, \"checksum\": %llu}\n", t1 - t0, (unsigned long long)total,
           (unsigned long long)sum);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 7 && !strcmp(argv[1], "load"))
        return load(argv[2], (unsigned)atoi(argv[3]), atoi(argv[4]), argv[5], argv[6], argc < 8 || strcmp(argv[7], "nocrc"));
    if (argc >= 5 && !strcmp(argv[1], "pread")) return ceiling_pread(argv[2], (unsigned)atoi(argv[3]), atoi(argv[4]));
    if (argc >= 3 && !strcmp(argv[1], "prefault")) return prefault_floor(strtoull(argv[2], NULL, 10));
    if (argc >= 3 && (!strcmp(argv[1], "memcpy") || !strcmp(argv[1], "firsttouch") ||
                      !strcmp(argv[1], "firsttouch_huge") || !strcmp(argv[1], "firsttouch_populate"))) {
        uint64_t n = strtoull(argv[2], NULL, 10);
        unsigned char *a = malloc(n), *b = NULL;
        if (!strcmp(argv[1], "firsttouch_populate")) { /* populated by the kernel at mmap, timed */
            double p0 = now();
            b = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
            if (b == MAP_FAILED) return 1;
            memset(b, 1, n);
            double p1 = now();
            printf("{\"seconds\": %.6f, \"bytes\": %llu, \"checksum\": %llu}\n", p1 - p0, (unsigned long long)n,
                   (unsigned long long)checksum(b, 64));
            return 0;
        }
        if (!strcmp(argv[1], "firsttouch_huge")) { /* 2 MiB-aligned with MADV_HUGEPAGE */
            if (posix_memalign((void **)&b, 2u << 20, n)) b = NULL;
            else madvise(b, n, MADV_HUGEPAGE);
        } else {
            b = malloc(n);
        }
        if (!a || !b) return 1;
        memset(a, 3, n);
        double t0 = now();
        if (!strcmp(argv[1], "memcpy")) {
            memset(b, 1, n); /* pre-touched: only the copy is timed */
            t0 = now();
            memcpy(b, a, n);
        } else {
            memset(b, 1, n); /* the page faults of fresh memory */
        }
        double t1 = now();
        printf("{\"seconds\": %.6f, \"bytes\": %llu, \"checksum\": %llu}\n", t1 - t0, (unsigned long long)n,
               (unsigned long long)checksum(b, 64));
        return 0;
    }
    if (argc >= 5 && !strcmp(argv[1], "cast")) {
        ckpt_dtype from = ckpt_dtype_from_name(argv[2]), to = ckpt_dtype_from_name(argv[3]);
        uint64_t n = strtoull(argv[4], NULL, 10);
        uint64_t in = n * ckpt_dtype_bits(from) / 8, out = n * ckpt_dtype_bits(to) / 8;
        unsigned char *a = malloc(in), *b = malloc(out);
        memset(a, 0x3c, in);
        memset(b, 1, out);
        ckpt_cast(from, a, to, b, n, NULL); /* warm */
        double t0 = now();
        ckpt_cast(from, a, to, b, n, NULL);
        double t1 = now();
        printf("{\"seconds\": %.6f, \"bytes\": %llu, \"out_bytes\": %llu}\n", t1 - t0,
               (unsigned long long)(n * ckpt_dtype_bits(from) / 8), (unsigned long long)(n * ckpt_dtype_bits(to) / 8));
        return 0;
    }
    fprintf(stderr, "usage: see the comment at the top of bench/load_bench.c\n");
    return 2;
}
