/*
 * ring.c — the ring of pinned host slots between the engine and a device.
 *
 * A worker thread of the engine acquires a free slot, reads a box of a
 * tensor into it (casts and swaps done on the way, on the host), and
 * submits it: an asynchronous host-to-device copy on the device's stream,
 * then an event recorded behind it.  The slot is in flight until that
 * event completes; a thread that finds no free slot waits on the oldest
 * in-flight one's event and takes it.  So reads run while earlier slots are
 * copied, and host memory is the slots whatever the model's size.
 *
 * Copies and their events are queued under the ring's lock, so that each
 * event follows exactly its own copy on the stream: a copy that fails
 * makes the events after it fail too (CUDA's errors after a faulting copy
 * are sticky), and the failure kept is the one earliest in submission
 * order.  CUDA reports a faulting copy only at a later call (the wait on an
 * event, or the next copy's submission), and from then on every call fails,
 * so the wait on copy k failing says only that k or a copy queued behind it
 * broke: the message names k by tensor and byte range and, where copies
 * were still queued behind it, how many and the last of them.  A
 * submission that fails first waits for the copies before it, so that an
 * earlier copy's sticky error is not blamed on it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "device.h"

ckpt_status ckpt__cuda_fail(const ckpt_device *d, ckpt_error *err, int rc, const char *tensor, const char *fmt, ...) {
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    const char *why = d->rt.GetErrorString ? d->rt.GetErrorString(rc) : NULL;
    ckpt_status st = rc == CKPT__CUDA_MEMORY_ALLOCATION ? CKPT_E_NO_MEMORY : CKPT_E_IO;
    return ckpt__fail(err, st, NULL, tensor, -1, "%s: %s (cudaError %d)", what, why ? why : "unknown CUDA error", rc);
}

static ckpt__ring *ring_of(ckpt__stage *s) { return (ckpt__ring *)s; }

static ckpt__slot *slot_of(ckpt__ring *r, const void *host) {
    for (unsigned i = 0; i < r->count; i++)
        if (r->slots[i].host == host) return &r->slots[i];
    return NULL;
}

/* Keeps the failure of the copy earliest in submission order (lock held). */
static void note_failure(ckpt__ring *r, uint64_t seq, ckpt_status st, const ckpt_error *err) {
    if (r->failed && r->failed_seq <= seq) return;
    r->failed = st, r->failed_seq = seq;
    if (err) r->failure = *err;
    else ckpt_error_clear(&r->failure);
}

static ckpt_status failure(const ckpt__ring *r, ckpt_error *err) {
    if (err) *err = r->failure;
    return r->failed;
}

/* Notes the failure of s's copy (lock held).  queued: seen at the wait on
 * its event, so the copies submitted after it and not yet seen complete
 * may be the one that broke; else its own submission failed. */
static ckpt_status copy_failed(ckpt__ring *r, const ckpt__slot *s, int rc, bool queued) {
    const ckpt__slot *last = s;
    unsigned behind = 0;
    for (unsigned i = 0; queued && i < r->count; i++) {
        const ckpt__slot *o = &r->slots[i];
        if (o->seq > s->seq && (o->state == CKPT__SLOT_IN_FLIGHT || o->state == CKPT__SLOT_WAITED)) {
            behind++;
            if (o->seq > last->seq) last = o;
        }
    }
    char also[320] = "";
    if (behind)
        snprintf(also, sizeof also, ", or one of the %u cop%s queued behind it, the last bytes [%llu, %llu) of '%s'",
                 behind, behind == 1 ? "y" : "ies", (unsigned long long)last->at,
                 (unsigned long long)(last->at + last->bytes), last->tensor);
    ckpt_error e;
    ckpt_error_clear(&e);
    ckpt_status st = ckpt__cuda_fail(r->device, &e, rc, s->tensor, "copy of bytes [%llu, %llu) of the tensor to %s failed%s",
                                     (unsigned long long)s->at, (unsigned long long)(s->at + s->bytes),
                                     r->device->name, also);
    note_failure(r, s->seq, st, &e);
    return st;
}

/* Waits for the oldest copy in flight submitted before `before` and frees
 * its slot, which the caller may then claim (lock held, released during
 * the wait).  false: none is in flight. */
static bool wait_oldest(ckpt__ring *r, uint64_t before, ckpt__slot **freed) {
    ckpt__slot *oldest = NULL;
    for (unsigned i = 0; i < r->count; i++)
        if (r->slots[i].state == CKPT__SLOT_IN_FLIGHT && r->slots[i].seq < before &&
            (!oldest || r->slots[i].seq < oldest->seq))
            oldest = &r->slots[i];
    if (!oldest) return false;
    oldest->state = CKPT__SLOT_WAITED;
    pthread_mutex_unlock(&r->lock);
    int rc = r->device->rt.EventSynchronize(oldest->event);
    pthread_mutex_lock(&r->lock);
    if (rc != CKPT__CUDA_SUCCESS) copy_failed(r, oldest, rc, true);
    oldest->state = CKPT__SLOT_FREE;
    pthread_cond_broadcast(&r->changed);
    *freed = oldest;
    return true;
}

static ckpt_status ring_acquire(ckpt__stage *stage, void **slot, ckpt_error *err) {
    ckpt__ring *r = ring_of(stage);
    pthread_mutex_lock(&r->lock);
    ckpt__slot *got = NULL;
    while (!got && !r->failed) {
        for (unsigned i = 0; i < r->count && !got; i++)
            if (r->slots[i].state == CKPT__SLOT_FREE) got = &r->slots[i];
        if (got) break;
        ckpt__slot *freed;
        if (wait_oldest(r, UINT64_MAX, &freed)) {
            r->device->stats.slot_waits++;
            if (freed->state == CKPT__SLOT_FREE) got = freed;
        } else {
            pthread_cond_wait(&r->changed, &r->lock); /* every slot is being filled */
        }
    }
    ckpt_status st = CKPT_OK;
    if (r->failed) st = failure(r, err), r->reported = true; /* no new copies after one failed: the load stops */
    else got->state = CKPT__SLOT_FILLING, *slot = got->host;
    pthread_mutex_unlock(&r->lock);
    return st;
}

static void ring_abandon(ckpt__stage *stage, void *slot) {
    ckpt__ring *r = ring_of(stage);
    pthread_mutex_lock(&r->lock);
    ckpt__slot *s = slot_of(r, slot);
    if (s) s->state = CKPT__SLOT_FREE;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
}

static ckpt_status ring_submit(ckpt__stage *stage, void *slot, void *dst, uint64_t at, uint64_t bytes,
                               const char *tensor, ckpt_error *err) {
    ckpt__ring *r = ring_of(stage);
    ckpt_device *d = r->device;
    /* The current device is per thread in CUDA: the engine's threads set it. */
    int rc = d->rt.SetDevice(d->ordinal);
    pthread_mutex_lock(&r->lock);
    ckpt__slot *s = slot_of(r, slot);
    s->seq = r->next_seq++, s->tensor = tensor, s->dst = dst, s->at = at, s->bytes = bytes;
    if (rc == CKPT__CUDA_SUCCESS)
        rc = d->rt.MemcpyAsync((unsigned char *)dst + at, s->host, (size_t)bytes, CKPT__CUDA_MEMCPY_HOST_TO_DEVICE,
                               d->stream);
    if (rc == CKPT__CUDA_SUCCESS) rc = d->rt.EventRecord(s->event, d->stream);
    ckpt_status st = CKPT_OK;
    if (rc != CKPT__CUDA_SUCCESS) {
        /* An earlier copy's sticky error fails this submission too: wait for
         * the copies before it, whose failure wait_oldest then notes as the
         * earlier one; if they all completed, the failure is this copy's. */
        ckpt__slot *freed;
        while (wait_oldest(r, s->seq, &freed)) continue;
        copy_failed(r, s, rc, false);
        st = failure(r, err), r->reported = true;
        s->state = CKPT__SLOT_FREE;
    } else {
        s->state = CKPT__SLOT_IN_FLIGHT;
        d->stats.copies++, d->stats.bytes_copied += bytes;
        d->load_staged = true;
    }
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
    return st;
}

ckpt_status ckpt__ring_init(ckpt_device *d, unsigned slots, uint64_t slot_bytes, ckpt_error *err) {
    ckpt__ring *r = &d->ring;
    r->device = d;
    r->stage = (ckpt__stage){slot_bytes, ring_acquire, ring_submit, ring_abandon, NULL, NULL};
    if (d->gds.lib) r->stage.read_direct = ckpt__cufile_read, r->stage.forget_files = ckpt__cufile_forget_files;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->changed, NULL);
    if (!(r->slots = ckpt__calloc(slots, sizeof *r->slots))) return ckpt__oom(err, NULL, "the device's slots");
    for (; r->count < slots; r->count++) {
        ckpt__slot *s = &r->slots[r->count];
        int rc = d->rt.HostAlloc((void **)&s->host, (size_t)slot_bytes, 0);
        if (rc != CKPT__CUDA_SUCCESS)
            return ckpt__cuda_fail(d, err, rc, NULL, "cannot allocate %u pinned slots of %llu bytes", slots,
                                   (unsigned long long)slot_bytes);
        if ((rc = d->rt.EventCreateWithFlags(&s->event, CKPT__CUDA_EVENT_DISABLE_TIMING)) != CKPT__CUDA_SUCCESS) {
            d->rt.FreeHost(s->host);
            return ckpt__cuda_fail(d, err, rc, NULL, "cannot create an event");
        }
    }
    return CKPT_OK;
}

void ckpt__ring_free(ckpt_device *d) {
    ckpt__ring *r = &d->ring;
    for (unsigned i = 0; i < r->count; i++) {
        if (r->slots[i].state == CKPT__SLOT_IN_FLIGHT) d->rt.EventSynchronize(r->slots[i].event);
        d->rt.EventDestroy(r->slots[i].event);
        d->rt.FreeHost(r->slots[i].host);
    }
    free(r->slots);
    pthread_cond_destroy(&r->changed);
    pthread_mutex_destroy(&r->lock);
}

void ckpt__device_begin(ckpt_device *d) {
    pthread_mutex_lock(&d->busy);
    pthread_mutex_lock(&d->ring.lock);
    d->ring.failed = CKPT_OK, d->ring.reported = false;
    d->load_staged = d->load_direct = false;
    pthread_mutex_unlock(&d->ring.lock);
}

ckpt_status ckpt__device_flush(ckpt_device *d, ckpt_error *err) {
    ckpt__ring *r = &d->ring;
    pthread_mutex_lock(&r->lock);
    ckpt__slot *freed;
    uint64_t before = r->next_seq; /* not the copies other threads submit meanwhile */
    for (;;) {
        if (wait_oldest(r, before, &freed)) continue;
        bool waited_elsewhere = false; /* another thread is waiting for one: wait for it to finish */
        for (unsigned i = 0; i < r->count; i++)
            waited_elsewhere |= r->slots[i].state == CKPT__SLOT_WAITED && r->slots[i].seq < before;
        if (!waited_elsewhere) break;
        pthread_cond_wait(&r->changed, &r->lock);
    }
    ckpt_status st = r->failed ? failure(r, err) : CKPT_OK;
    pthread_mutex_unlock(&r->lock);
    return st;
}

ckpt_status ckpt__device_finish(ckpt_device *d, ckpt_status st, ckpt_error *err) {
    ckpt_error flushed;
    ckpt_status copy = ckpt__device_flush(d, &flushed);
    pthread_mutex_lock(&d->ring.lock);
    /* The ring's failure as the flush left it, the earliest copy's, over
     * the one it told an engine thread while other copies were in flight. */
    bool reported = d->ring.reported;
    d->stats.path = !d->load_direct ? CKPT_DEVICE_PATH_STAGED
                    : d->load_staged ? CKPT_DEVICE_PATH_MIXED
                                     : CKPT_DEVICE_PATH_DIRECT;
    pthread_mutex_unlock(&d->ring.lock);
    pthread_mutex_unlock(&d->busy);
    if (copy && (st == CKPT_OK || st == CKPT_E_CANCELLED || reported)) {
        if (err) *err = flushed;
        return copy;
    }
    return st;
}
