/* source.c — what every source shares: closing one, batched reads through
 * its table, reading a small file whole, and the meter of a download's
 * progress.  The kinds (file_source.c, http_source.c, …) call these; the
 * registry that picks a kind by name is sources.c. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http.h"
#include "source.h"

void ckpt__source_close(ckpt__source *src) {
    if (!src) return;
    if (src->ops && src->ops->close) src->ops->close(src->user, src->file);
    free(src->name);
    free(src);
}

ckpt_status ckpt__source_read_many(ckpt__source *src, const ckpt__read_req *reqs, size_t n, ckpt_error *err) {
    ckpt_source_request stack[64], *q = n <= 64 ? stack : ckpt__malloc(n * sizeof *q);
    if (!q) return ckpt__oom(err, src->name, NULL);
    for (size_t i = 0; i < n; i++) q[i] = (ckpt_source_request){reqs[i].dst, reqs[i].offset, reqs[i].len, reqs[i].need, reqs[i].tensor};
    int fault = ckpt__io_source_fault();
    ckpt_status st = fault ? ckpt__fail_errno(err, fault, src->name, (int64_t)reqs[0].offset, "cannot read")
                           : src->ops->read_many(src->user, src->file, q, n, err);
    if (q != stack) free(q);
    return st;
}

ckpt_status ckpt__source_slurp(ckpt__source *src, uint64_t limit, ckpt_status too_large_status, char **data,
                               ckpt_error *err) {
    if (src->size > limit)
        return ckpt__fail(err, too_large_status, src->name, NULL, -1, "file is %llu bytes, more than the %llu allowed",
                          (unsigned long long)src->size, (unsigned long long)limit);
    char *buf = ckpt__malloc((size_t)src->size + 1);
    if (!buf) return ckpt__oom(err, src->name, NULL);
    ckpt_status st = ckpt__source_read(src, buf, src->size, 0, err);
    /* Its callers close the file once it is read (a DCP's .metadata, an
     * index), so the catalog's settle at the end of the open never sees
     * it: the verdict on the bytes (a Hub file's SHA-256, known only at
     * its last byte: hf_stream.c) is asked here, and a read that failed
     * stops the download instead. */
    if (st) (void)ckpt__source_settle(src, true, NULL);
    else st = ckpt__source_settle(src, false, err);
    if (st) {
        free(buf);
        return st;
    }
    buf[src->size] = '\0';
    *data = buf;
    return CKPT_OK;
}

/* ---- the progress of whole downloads ------------------------------------- */

enum { METER_STEP_MS = 100 };

static int64_t meter_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Calls the callback (under the lock: never twice at once). */
static void meter_call(ckpt__download_meter *m, int64_t now) {
    m->last_ms = now;
    if (!m->cancelled && m->fn && m->fn(m->done, m->total, m->user)) m->cancelled = true;
}

bool ckpt__download_begin(ckpt__download_meter *m, uint64_t size) {
    if (!m) return true;
    pthread_mutex_lock(&m->lock);
    if (!m->running++) m->cancelled = false;
    m->total += size;
    meter_call(m, meter_now_ms());
    bool go_on = !m->cancelled;
    pthread_mutex_unlock(&m->lock);
    return go_on;
}

bool ckpt__download_report(ckpt__download_meter *m, int64_t done, bool force) {
    if (!m) return true;
    int64_t now = meter_now_ms();
    pthread_mutex_lock(&m->lock);
    m->done = (uint64_t)((int64_t)m->done + done);
    if (force || now - m->last_ms >= METER_STEP_MS) meter_call(m, now);
    bool go_on = !m->cancelled;
    pthread_mutex_unlock(&m->lock);
    return go_on;
}

void ckpt__download_end(ckpt__download_meter *m, bool failed, uint64_t received, uint64_t size) {
    if (!m) return;
    pthread_mutex_lock(&m->lock);
    m->running--;
    if (failed) m->done -= received, m->total -= size;
    pthread_mutex_unlock(&m->lock);
}
