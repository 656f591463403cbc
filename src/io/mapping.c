/* mapping.c — see mapping.h. */
#include "mapping.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../base/pool.h"

struct ckpt_mapping {
    ckpt__source *src; /* while it is created: a mapping outlives its source */
    void *base;
    uint64_t size;
    atomic_int owners;
    bool prefetching;
};

/* Bytes the machine has available (MemAvailable), or 0 when unknown. */
static uint64_t memory_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

typedef struct prefetch_job {
    int fd;
    size_t count;
    ckpt__range ranges[]; /* sorted, disjoint */
} prefetch_job;

/* One WILLNEED call per readahead window; the calls block once the device
 * queue is full, hence a thread of their own, with a descriptor of their
 * own (the mapping may go away meanwhile). */
static void prefetch_worker(void *arg) {
    prefetch_job *job = arg;
    const uint64_t step = 8u << 20;
    for (size_t i = 0; i < job->count; i++) {
        uint64_t at = job->ranges[i].offset, end = at + job->ranges[i].len;
        for (; at < end; at += step)
            if (posix_fadvise(job->fd, (off_t)at, (off_t)(end - at < step ? end - at : step), POSIX_FADV_WILLNEED))
                break;
    }
    close(job->fd);
    free(job);
}

static int by_offset(const void *a, const void *b) {
    const ckpt__range *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Sorts ranges and merges those that overlap or touch; returns the count. */
static size_t merge_ranges(ckpt__range *r, size_t n) {
    qsort(r, n, sizeof *r, by_offset);
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (!r[i].len) continue;
        if (out && r[i].offset <= r[out - 1].offset + r[out - 1].len) {
            uint64_t end = r[i].offset + r[i].len;
            if (end > r[out - 1].offset + r[out - 1].len) r[out - 1].len = end - r[out - 1].offset;
        } else {
            r[out++] = r[i];
        }
    }
    return out;
}

/* Whether 64 pages spread over the ranges (sorted) are all cached. */
static bool ranges_cached(void *base, const ckpt__range *r, size_t n, uint64_t total) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || !total) return true;
    size_t k = 0;
    uint64_t before = 0; /* bytes of ranges before r[k] */
    unsigned char vec;
    for (int i = 0; i < 64; i++) {
        uint64_t at = total / 64 * (uint64_t)i;
        while (k < n && at >= before + r[k].len) before += r[k++].len;
        if (k == n) break;
        uintptr_t p = ((uintptr_t)base + r[k].offset + (at - before)) & ~(uintptr_t)(page - 1);
        if (mincore((void *)p, (size_t)page, &vec) != 0 || !(vec & 1)) return false;
    }
    return true;
}

static bool start_prefetch_job(ckpt__mapping *m, ckpt__source *src, const ckpt__range *ranges, size_t n) {
    if (!(src->caps & CKPT__SRC_FD) || (src->caps & CKPT__SRC_REMOTE) || !n) return false;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += ranges[i].len;
    uint64_t available = memory_available();
    if (total > available / 2 || ranges_cached(m->base, ranges, n, total)) return false;
    prefetch_job *job = ckpt__malloc(sizeof *job + n * sizeof *ranges);
    int fd = job ? fcntl(src->fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (fd < 0) {
        free(job);
        return false;
    }
    job->fd = fd;
    job->count = n;
    memcpy(job->ranges, ranges, n * sizeof *ranges);
    if (!ckpt__pool_detach(prefetch_worker, job)) { /* still works, through page faults */
        close(fd);
        free(job);
        return false;
    }
    return true;
}

static bool start_prefetch(ckpt__mapping *m) {
    ckpt__range whole = {0, m->size};
    return start_prefetch_job(m, m->src, &whole, 1);
}

bool ckpt__mapping_prefetch(ckpt__mapping *m, ckpt__source *src, ckpt__range *ranges, size_t n) {
    for (size_t i = 0; i < n; i++) /* within the mapping */
        if (ranges[i].offset >= m->size) ranges[i].len = 0;
        else if (ranges[i].len > m->size - ranges[i].offset) ranges[i].len = m->size - ranges[i].offset;
    n = merge_ranges(ranges, n);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += ranges[i].len;
    /* The first window now, so that the first touches find it in flight. */
    if (n && (src->caps & CKPT__SRC_FD) && !(src->caps & CKPT__SRC_REMOTE))
        posix_fadvise(src->fd, (off_t)ranges[0].offset, (off_t)(ranges[0].len < (8u << 20) ? ranges[0].len : 8u << 20),
                      POSIX_FADV_WILLNEED);
    bool started = start_prefetch_job(m, src, ranges, n);
    if (started) m->prefetching = true;
    /* Only part of the file is wanted: a fault that outruns the prefetch
     * reads its page, not a readahead window around it (8 MiB here) that
     * would spill past the wanted rows. */
    if (started && total < m->size && m->base) madvise(m->base, (size_t)m->size, MADV_RANDOM);
    return started;
}

ckpt_status ckpt__mapping_create(ckpt__source *src, bool prefetch, ckpt__mapping **out, ckpt_error *err) {
    *out = NULL;
    if (!(src->caps & CKPT__SRC_MAP) || (src->caps & CKPT__SRC_REMOTE) || !src->ops->map)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, src->name, NULL, -1,
                          "this file cannot be mapped (a network file system or a remote source): read it instead");
    ckpt__mapping *m = ckpt__calloc(1, sizeof *m);
    if (!m) return ckpt__oom(err, src->name, NULL);
    m->src = src;
    m->size = src->size;
    atomic_init(&m->owners, 1);
    ckpt_status st = src->size ? src->ops->map(src->user, src->file, 1, &m->base, err) : CKPT_OK;
    if (st) {
        free(m);
        return st;
    }
    if (prefetch && m->size) m->prefetching = start_prefetch(m);
    m->src = NULL;
    *out = m;
    return CKPT_OK;
}

void *ckpt__mapping_data(const ckpt__mapping *m) { return m->base; }
uint64_t ckpt__mapping_size(const ckpt__mapping *m) { return m->size; }
bool ckpt__mapping_prefetching(const ckpt__mapping *m) { return m->prefetching; }

void ckpt__mapping_release(ckpt__mapping *m) {
    if (!m || atomic_fetch_sub(&m->owners, 1) != 1) return;
    if (m->base) munmap(m->base, (size_t)m->size); /* writable mappings are the file kind's mmap */
    free(m);
}
