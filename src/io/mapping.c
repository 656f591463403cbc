/* mapping.c — see mapping.h. */
#include "mapping.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct ckpt_mapping {
    ckpt__source *src; /* while it is created: a mapping outlives its source */
    void *base;
    uint64_t size;
    atomic_int owners;
    bool prefetching;
};

uint64_t ckpt__memory_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* Whether 64 pages spread over the mapping are all in the page cache. */
static bool cached(void *start, uint64_t len) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return true;
    unsigned char vec;
    for (int i = 0; i < 64; i++) {
        uintptr_t p = ((uintptr_t)start + len / 64 * (uint64_t)i) & ~(uintptr_t)(page - 1);
        if (mincore((void *)p, (size_t)page, &vec) != 0 || !(vec & 1)) return false;
    }
    return true;
}

typedef struct prefetch_job {
    int fd;
    uint64_t end;
} prefetch_job;

/* One WILLNEED call per readahead window; the calls block once the device
 * queue is full, hence a thread of their own, with a descriptor of their
 * own (the mapping may go away meanwhile). */
static void *prefetch_worker(void *arg) {
    prefetch_job *job = arg;
    const uint64_t step = 8u << 20;
    for (uint64_t at = 0; at < job->end; at += step)
        if (posix_fadvise(job->fd, (off_t)at, (off_t)(job->end - at < step ? job->end - at : step), POSIX_FADV_WILLNEED))
            break;
    close(job->fd);
    free(job);
    return NULL;
}

static bool start_prefetch(ckpt__mapping *m) {
    if (!(m->src->caps & CKPT__SRC_FD) || (m->src->caps & CKPT__SRC_REMOTE)) return false;
    uint64_t available = ckpt__memory_available();
    if (m->size > available / 2 || cached(m->base, m->size)) return false;
    prefetch_job *job = ckpt__malloc(sizeof *job);
    int fd = job ? fcntl(m->src->fd, F_DUPFD_CLOEXEC, 0) : -1;
    if (fd < 0) {
        free(job);
        return false;
    }
    *job = (prefetch_job){fd, m->size};
    pthread_attr_t attr;
    pthread_t tid;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&tid, &attr, prefetch_worker, job);
        pthread_attr_destroy(&attr);
    }
    if (rc != 0) { /* still works, through page faults */
        close(fd);
        free(job);
        return false;
    }
    return true;
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
    ckpt_status st = src->size ? src->ops->map(src, 1, &m->base, err) : CKPT_OK;
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
void ckpt__mapping_retain(ckpt__mapping *m) { atomic_fetch_add(&m->owners, 1); }

void ckpt__mapping_release(ckpt__mapping *m) {
    if (!m || atomic_fetch_sub(&m->owners, 1) != 1) return;
    if (m->base) munmap(m->base, (size_t)m->size); /* writable mappings are the file kind's mmap */
    free(m);
}
