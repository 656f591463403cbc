/*
 * cudart_standin.c — a stand-in for the CUDA runtime (libcudart), over host
 * memory, for the tests of ckpt's device destination (src/device/).  Built
 * by CMake for the tests only, never linked into libckpt: the library
 * dlopens it through CKPT_CUDART exactly as it dlopens libcudart.so.
 *
 * It implements the calls src/device/cuda.c uses, with the real signatures
 * and the real numeric values of cudaError_t, cudaMemcpyKind and the flags
 * (declared here: CUDA's headers are never a build dependency).  "Device"
 * memory is host memory from malloc; each stream has a worker thread that
 * runs its copies and event records asynchronously, in order.  Errors are
 * CUDA's: an out-of-bounds copy or a copy the knob fails sets a sticky
 * error (cudaErrorIllegalAddress, 700) that every later synchronising call
 * returns, as a real context does after a faulting copy.
 *
 * Knobs (read at each cudaMemcpyAsync):
 *   CKPT_STANDIN_DEVICES=N        devices cudaGetDeviceCount reports (default 1; 0: no device)
 *   CKPT_STANDIN_COPY_DELAY_US=N  each copy sleeps N microseconds on the stream's thread first
 *   CKPT_STANDIN_FAIL_COPY=N      the N-th copy (1-based, counted since the last
 *                                 ckpt_standin_reset) fails asynchronously
 *   CKPT_STANDIN_FAIL_SYNC=1      ... and fails in cudaMemcpyAsync itself instead
 *                                 (cudaErrorInvalidValue, not sticky)
 *
 * Counters for the tests: ckpt_standin_counters (and ckpt_standin_reset).
 * ckpt_standin_is_device tells the stand-in cuFile (cufile_standin.c,
 * linked against this library) what is device memory.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STANDIN_API __attribute__((visibility("default")))

/* cudaError_t's values, as driver_types.h numbers them. */
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
} cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

/* What the tests read back. */
typedef struct ckpt_standin_counters {
    uint64_t copies;          /* cudaMemcpyAsync calls that were queued        */
    uint64_t bytes;           /* bytes those copies moved                      */
    uint64_t unpinned_copies; /* copies whose source was not cudaHostAlloc'ed  */
    uint64_t max_queued;      /* the most copies ever queued and not yet run (in_flight's peak) */
    uint64_t host_allocs;     /* live cudaHostAlloc blocks                     */
    uint64_t host_bytes;      /* their bytes                                   */
    uint64_t device_allocs;   /* live cudaMalloc blocks                        */
    uint64_t streams;         /* live streams                                  */
    uint64_t events;          /* live events                                   */
    uint64_t in_flight;       /* copies queued and not yet run, all streams    */
} ckpt_standin_counters;

typedef struct block {
    struct block *next;
    unsigned char *p;
    size_t n;
} block;

typedef struct op {
    struct op *next;
    cudaEvent_t event; /* a record when set, else a copy */
    uint64_t ticket;
    void *dst;
    const void *src;
    size_t n;
    unsigned delay_us;
    int fail; /* the knob fails this copy */
} op;

struct CUstream_st {
    pthread_t thread;
    op *head, *tail;
    int quit;
    uint64_t queued; /* ops not yet run */
};

struct CUevent_st {
    uint64_t recorded, completed; /* tickets */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static block *host_blocks, *device_blocks;
static ckpt_standin_counters counters;
static uint64_t copy_number; /* copies since the last reset */
static cudaError_t sticky, last_error;
static __thread int current_device;

static const char *knob(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static long knob_number(const char *name, long fallback) {
    const char *v = knob(name);
    return v ? strtol(v, NULL, 10) : fallback;
}

static cudaError_t fail(cudaError_t e) {
    if (e) last_error = e;
    return e;
}

/* Whether [p, p + n) lies inside one block of the list (lock held). */
static int inside(const block *b, const void *p, size_t n) {
    for (; b; b = b->next)
        if ((const unsigned char *)p >= b->p && (const unsigned char *)p + n <= b->p + b->n) return 1;
    return 0;
}

static cudaError_t add_block(block **list, void **out, size_t n) {
    block *b = malloc(sizeof *b);
    unsigned char *p = malloc(n ? n : 1);
    if (!b || !p) {
        free(b), free(p);
        return fail(cudaErrorMemoryAllocation);
    }
    b->p = p, b->n = n;
    pthread_mutex_lock(&lock);
    b->next = *list, *list = b;
    pthread_mutex_unlock(&lock);
    *out = p;
    return cudaSuccess;
}

static cudaError_t remove_block(block **list, void *p, uint64_t *live, uint64_t *bytes) {
    if (!p) return cudaSuccess;
    pthread_mutex_lock(&lock);
    for (block **at = list; *at; at = &(*at)->next) {
        if ((*at)->p != p) continue;
        block *b = *at;
        *at = b->next;
        (*live)--;
        if (bytes) *bytes -= b->n;
        pthread_mutex_unlock(&lock);
        free(b->p);
        free(b);
        return cudaSuccess;
    }
    pthread_mutex_unlock(&lock);
    return fail(cudaErrorInvalidValue);
}

STANDIN_API const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    }
    return "unrecognized error code";
}

STANDIN_API cudaError_t cudaGetLastError(void) {
    pthread_mutex_lock(&lock);
    cudaError_t e = sticky ? sticky : last_error;
    last_error = cudaSuccess;
    pthread_mutex_unlock(&lock);
    return e;
}

STANDIN_API cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return fail(cudaErrorInvalidValue);
    long n = knob_number("CKPT_STANDIN_DEVICES", 1);
    *count = n > 0 ? (int)n : 0;
    return n > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

STANDIN_API cudaError_t cudaSetDevice(int device) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e) return e;
    if (device < 0 || device >= count) return fail(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}

STANDIN_API cudaError_t cudaGetDevice(int *device) {
    if (!device) return fail(cudaErrorInvalidValue);
    *device = current_device;
    return cudaSuccess;
}

STANDIN_API cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
    (void)flags;
    if (!p) return fail(cudaErrorInvalidValue);
    cudaError_t e = add_block(&host_blocks, p, n);
    if (e == cudaSuccess) {
        pthread_mutex_lock(&lock);
        counters.host_allocs++, counters.host_bytes += n;
        pthread_mutex_unlock(&lock);
    }
    return e;
}

STANDIN_API cudaError_t cudaFreeHost(void *p) {
    return remove_block(&host_blocks, p, &counters.host_allocs, &counters.host_bytes);
}

STANDIN_API cudaError_t cudaMalloc(void **p, size_t n) {
    if (!p) return fail(cudaErrorInvalidValue);
    cudaError_t e = add_block(&device_blocks, p, n);
    if (e == cudaSuccess) {
        pthread_mutex_lock(&lock);
        counters.device_allocs++;
        pthread_mutex_unlock(&lock);
    }
    return e;
}

STANDIN_API cudaError_t cudaFree(void *p) { return remove_block(&device_blocks, p, &counters.device_allocs, NULL); }

/* The stream's thread: runs its ops in order. */
static void *stream_main(void *arg) {
    cudaStream_t s = arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!s->head && !s->quit) pthread_cond_wait(&changed, &lock);
        if (!s->head) break;
        op *o = s->head;
        pthread_mutex_unlock(&lock);
        if (!o->event && o->delay_us) {
            struct timespec ts = {o->delay_us / 1000000u, (long)(o->delay_us % 1000000u) * 1000};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&lock);
        if (o->event) {
            o->event->completed = o->ticket;
        } else if (o->fail || !inside(device_blocks, o->dst, o->n)) {
            sticky = cudaErrorIllegalAddress;
        } else if (!sticky) {
            memcpy(o->dst, o->src, o->n);
        }
        if (!o->event) counters.in_flight--;
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        s->queued--;
        free(o);
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

STANDIN_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags) {
    (void)flags;
    if (!out) return fail(cudaErrorInvalidValue);
    cudaStream_t s = calloc(1, sizeof *s);
    if (!s) return fail(cudaErrorMemoryAllocation);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        free(s);
        return fail(cudaErrorMemoryAllocation);
    }
    pthread_mutex_lock(&lock);
    counters.streams++;
    pthread_mutex_unlock(&lock);
    *out = s;
    return cudaSuccess;
}

STANDIN_API cudaError_t cudaStreamCreate(cudaStream_t *out) { return cudaStreamCreateWithFlags(out, 0); }

/* Waits until the stream has run everything queued so far (lock held). */
static void drain(cudaStream_t s) {
    while (s->head) pthread_cond_wait(&changed, &lock);
}

STANDIN_API cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&lock);
    drain(s);
    cudaError_t e = sticky;
    pthread_mutex_unlock(&lock);
    return e;
}

STANDIN_API cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&lock);
    drain(s); /* CUDA lets queued work finish, then releases the stream */
    s->quit = 1;
    counters.streams--;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    pthread_join(s->thread, NULL);
    free(s);
    return cudaSuccess;
}

static void enqueue(cudaStream_t s, op *o) {
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
    s->queued++;
    if (!o->event && ++counters.in_flight > counters.max_queued) counters.max_queued = counters.in_flight;
    pthread_cond_broadcast(&changed);
}

STANDIN_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                        cudaStream_t s) {
    if (!s || kind != cudaMemcpyHostToDevice || !dst || !src) return fail(cudaErrorInvalidValue);
    long fail_at = knob_number("CKPT_STANDIN_FAIL_COPY", 0);
    op *o = calloc(1, sizeof *o);
    if (!o) return fail(cudaErrorMemoryAllocation);
    o->dst = dst, o->src = src, o->n = n;
    o->delay_us = (unsigned)knob_number("CKPT_STANDIN_COPY_DELAY_US", 0);
    pthread_mutex_lock(&lock);
    if (sticky) {
        cudaError_t e = sticky;
        pthread_mutex_unlock(&lock);
        free(o);
        return e;
    }
    copy_number++;
    o->fail = fail_at > 0 && copy_number == (uint64_t)fail_at;
    if (o->fail && knob("CKPT_STANDIN_FAIL_SYNC")) {
        last_error = cudaErrorInvalidValue;
        pthread_mutex_unlock(&lock);
        free(o);
        return cudaErrorInvalidValue;
    }
    counters.copies++, counters.bytes += n;
    if (!inside(host_blocks, src, n)) counters.unpinned_copies++;
    enqueue(s, o);
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

STANDIN_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned int flags) {
    (void)flags;
    if (!out) return fail(cudaErrorInvalidValue);
    if (!(*out = calloc(1, sizeof **out))) return fail(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&lock);
    counters.events++;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

STANDIN_API cudaError_t cudaEventCreate(cudaEvent_t *out) { return cudaEventCreateWithFlags(out, 0); }

STANDIN_API cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
    if (!ev || !s) return fail(cudaErrorInvalidResourceHandle);
    op *o = calloc(1, sizeof *o);
    if (!o) return fail(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&lock);
    o->event = ev, o->ticket = ++ev->recorded;
    enqueue(s, o);
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

STANDIN_API cudaError_t cudaEventQuery(cudaEvent_t ev) {
    if (!ev) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&lock);
    cudaError_t e = ev->completed < ev->recorded ? cudaErrorNotReady : sticky;
    pthread_mutex_unlock(&lock);
    return e;
}

STANDIN_API cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    if (!ev) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&lock);
    while (ev->completed < ev->recorded) pthread_cond_wait(&changed, &lock);
    cudaError_t e = sticky;
    pthread_mutex_unlock(&lock);
    return e;
}

STANDIN_API cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    if (!ev) return fail(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&lock);
    /* CUDA defers the release of an event still pending; the tests never
     * destroy one that is, and the stand-in waits rather than free it. */
    while (ev->completed < ev->recorded) pthread_cond_wait(&changed, &lock);
    counters.events--;
    pthread_mutex_unlock(&lock);
    free(ev);
    return cudaSuccess;
}

/* Whether [p, p + n) is the stand-in's device memory: for the stand-in
 * cuFile (cufile_standin.c), which writes there as GPUDirect Storage does. */
STANDIN_API int ckpt_standin_is_device(const void *p, size_t n) {
    pthread_mutex_lock(&lock);
    int yes = inside(device_blocks, p, n);
    pthread_mutex_unlock(&lock);
    return yes;
}

STANDIN_API void ckpt_standin_counters_get(ckpt_standin_counters *out) {
    pthread_mutex_lock(&lock);
    *out = counters;
    pthread_mutex_unlock(&lock);
}

/* Clears the sticky error, the copy number the failure knob counts, and
 * the copy counters (live allocations stay counted). */
STANDIN_API void ckpt_standin_reset(void) {
    pthread_mutex_lock(&lock);
    sticky = last_error = cudaSuccess;
    copy_number = 0;
    counters.copies = counters.bytes = counters.unpinned_copies = counters.max_queued = 0;
    pthread_mutex_unlock(&lock);
}
