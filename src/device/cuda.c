/*
 * cuda.c — CUDA devices as destinations (ckpt_device.h): the runtime
 * loaded with dlopen (never a build dependency), a device opened by name,
 * a plan item given device memory.  The bytes move through the ring of
 * pinned slots (ring.c); load.c hands the engine the ring as a STAGE sink.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "../plan_internal.h"

/* 32 slots of 8 MiB (256 MiB pinned): measured on an H200 from the page
 * cache with 16 threads, 8 slots gave 31.7 GB/s and 32 slots 44.5 GB/s
 * (tests/gpu/probe.py); larger slots gave less (16 x 32 MiB 27 GB/s). */
enum { DEFAULT_SLOTS = 32, MAX_SLOTS = 1024, DEFAULT_SLOT_BYTES = 8 << 20, MIN_SLOT_BYTES = 64 << 10 };

/* Tried in order unless CKPT_CUDART names the one library to load. */
static const char *const cudart_names[] = {"libcudart.so", "libcudart.so.12", "libcudart.so.13"};

void ckpt_device_options_init_sized(ckpt_device_options *o, size_t size) {
    if (!o || size < sizeof o->size) return;
    ckpt_device_options d = {.size = size, .slots = DEFAULT_SLOTS, .slot_bytes = DEFAULT_SLOT_BYTES, .cufile = 1};
    memset(o, 0, size);
    memcpy(o, &d, size < sizeof d ? size : sizeof d);
    o->size = size;
}

/* Looks up every call the library makes; false names the first missing. */
static bool bind_calls(ckpt__cudart *rt, const char **missing) {
#define BIND(field, symbol)                                                                                            \
    if (!(*(void **)&rt->field = dlsym(rt->lib, symbol))) return *missing = symbol, false;
    BIND(GetDeviceCount, "cudaGetDeviceCount")
    BIND(SetDevice, "cudaSetDevice")
    BIND(HostAlloc, "cudaHostAlloc")
    BIND(FreeHost, "cudaFreeHost")
    BIND(MemcpyAsync, "cudaMemcpyAsync")
    BIND(StreamCreateWithFlags, "cudaStreamCreateWithFlags")
    BIND(StreamDestroy, "cudaStreamDestroy")
    BIND(EventCreateWithFlags, "cudaEventCreateWithFlags")
    BIND(EventRecord, "cudaEventRecord")
    BIND(EventSynchronize, "cudaEventSynchronize")
    BIND(EventDestroy, "cudaEventDestroy")
    BIND(GetErrorString, "cudaGetErrorString")
    BIND(GetLastError, "cudaGetLastError")
#undef BIND
    return true;
}

/* Loads the CUDA runtime: CKPT_CUDART's library, else the first of
 * cudart_names that loads.  The error names every library tried and why
 * each failed. */
static ckpt_status load_cudart(ckpt__cudart *rt, ckpt_error *err) {
    const char *forced = getenv("CKPT_CUDART");
    const char *const *names = cudart_names;
    size_t count = sizeof cudart_names / sizeof *cudart_names;
    if (forced && *forced) names = &forced, count = 1;
    char tried[1536] = "";
    size_t used = 0;
    for (size_t i = 0; i < count; i++) {
        if ((rt->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL))) {
            const char *missing = NULL;
            if (bind_calls(rt, &missing)) return CKPT_OK;
            ckpt_status st = ckpt__fail(err, CKPT_E_NOT_FOUND, names[i], NULL, -1,
                                        "%s is not a CUDA runtime: it lacks %s", names[i], missing);
            dlclose(rt->lib);
            memset(rt, 0, sizeof *rt);
            return st;
        }
        const char *why = dlerror();
        int n = snprintf(tried + used, sizeof tried - used, "%s%s (%s)", i ? "; " : "", names[i], why ? why : "not found");
        if (n > 0) used = used + (size_t)n < sizeof tried ? used + (size_t)n : sizeof tried - 1;
    }
    return ckpt__fail(err, CKPT_E_NOT_FOUND, NULL, NULL, -1,
                      "no CUDA runtime could be loaded: tried %s; install CUDA's runtime or set CKPT_CUDART to "
                      "libcudart's path",
                      tried);
}

/* "cuda" or "cuda:N", N a device number; -1 otherwise. */
static int parse_name(const char *name) {
    if (!strcmp(name, "cuda")) return 0;
    if (strncmp(name, "cuda:", 5) || name[5] < '0' || name[5] > '9') return -1;
    char *end;
    long n = strtol(name + 5, &end, 10);
    return *end || n > 4096 ? -1 : (int)n;
}

static ckpt_status check_options(const ckpt_device_options *o, ckpt_error *err) {
    if (o->slots < 1 || o->slots > MAX_SLOTS)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "a device ring of %u slots (1 to %d)", o->slots,
                          MAX_SLOTS);
    if (o->slot_bytes < MIN_SLOT_BYTES || o->slot_bytes > ((uint64_t)1 << 40))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1,
                          "device slots of %llu bytes (64 KiB to 1 TiB)", (unsigned long long)o->slot_bytes);
    return CKPT_OK;
}

/* The device exists: its number is below the runtime's count. */
static ckpt_status check_device(ckpt_device *d, ckpt_error *err) {
    int count = 0, rc = d->rt.GetDeviceCount(&count);
    if (rc == CKPT__CUDA_NO_DEVICE || (rc == CKPT__CUDA_SUCCESS && count == 0))
        return ckpt__fail(err, CKPT_E_NOT_FOUND, NULL, NULL, -1, "%s: no CUDA device is present", d->name);
    if (rc != CKPT__CUDA_SUCCESS) {
        ckpt__cuda_fail(d, err, rc, NULL, "%s: cudaGetDeviceCount failed", d->name);
        return err ? (err->status = CKPT_E_NOT_FOUND) : CKPT_E_NOT_FOUND; /* no usable device */
    }
    if (d->ordinal >= count)
        return ckpt__fail(err, CKPT_E_NOT_FOUND, NULL, NULL, -1, "%s: no such device (%d CUDA device%s: cuda:0%s%d)",
                          d->name, count, count == 1 ? "" : "s", count == 1 ? "" : " to cuda:", count == 1 ? 0 : count - 1);
    return CKPT_OK;
}

ckpt_status ckpt_device_open(const char *name, const ckpt_device_options *options, ckpt_device **out, ckpt_error *err) {
    if (out) *out = NULL;
    if (!name || !out) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "a device name and out are required");
    ckpt_device_options o;
    ckpt_device_options_init(&o);
    if (options) CKPT__TAKE_OPTIONS(&o, options);
    int ordinal = parse_name(name);
    if (ordinal < 0)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "device '%s': expected \"cuda\" or \"cuda:N\"",
                          name);
    ckpt_status st = check_options(&o, err);
    if (st) return st;
    ckpt_device *d = ckpt__calloc(1, sizeof *d);
    if (!d) return ckpt__oom(err, NULL, "a device");
    snprintf(d->name, sizeof d->name, "cuda:%d", ordinal);
    d->ordinal = ordinal;
    pthread_mutex_init(&d->busy, NULL);
    d->stats.slots = o.slots, d->stats.slot_bytes = o.slot_bytes;
    int rc;
    if ((st = load_cudart(&d->rt, err)) == CKPT_OK && (st = check_device(d, err)) == CKPT_OK) {
        if ((rc = d->rt.SetDevice(ordinal)) != CKPT__CUDA_SUCCESS)
            st = ckpt__cuda_fail(d, err, rc, NULL, "%s: cudaSetDevice failed", d->name);
        else if ((rc = d->rt.StreamCreateWithFlags(&d->stream, CKPT__CUDA_STREAM_NON_BLOCKING)) != CKPT__CUDA_SUCCESS)
            st = ckpt__cuda_fail(d, err, rc, NULL, "%s: cannot create a stream", d->name);
        else {
            ckpt__cufile_open(d, o.cufile != 0); /* after cudaSetDevice: the driver opens in its context */
            st = ckpt__ring_init(d, o.slots, o.slot_bytes, err);
        }
    }
    if (st) {
        ckpt_device_close(d);
        return st;
    }
    *out = d;
    return CKPT_OK;
}

void ckpt_device_close(ckpt_device *d) {
    if (!d) return;
    ckpt__cufile_close(d);
    if (d->ring.device) ckpt__ring_free(d);
    if (d->stream) d->rt.StreamDestroy(d->stream);
    if (d->rt.lib) dlclose(d->rt.lib);
    pthread_mutex_destroy(&d->busy);
    free(d);
}

const char *ckpt_device_name(const ckpt_device *d) { return d ? d->name : NULL; }

void ckpt_device_stats_get(ckpt_device *d, ckpt_device_stats *stats, int reset) {
    if (!d || !stats || stats->size < sizeof stats->size) return;
    size_t size = stats->size;
    pthread_mutex_lock(&d->ring.lock);
    ckpt_device_stats s = d->stats;
    if (reset)
        d->stats.copies = d->stats.bytes_copied = d->stats.slot_waits = d->stats.direct_reads = d->stats.bytes_direct =
            d->stats.cufile_files_refused = 0;
    pthread_mutex_unlock(&d->ring.lock);
    s.size = size;
    memcpy(stats, &s, size < sizeof s ? size : sizeof s);
}

ckpt_status ckpt_plan_set_device_buffer(ckpt_plan *p, size_t i, ckpt_device *device, void *device_ptr,
                                        uint64_t capacity, ckpt_error *err) {
    if (!p || i >= p->selected_count) return ckpt__fail(err, CKPT_E_OUT_OF_RANGE, NULL, NULL, -1, "no plan item %zu", i);
    ckpt__plan_entry *e = &p->entries[p->selected[i]];
    if (!device || (!device_ptr && e->pub.nbytes))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, e->pub.name, -1, "a device and a device pointer are required");
    if (capacity < e->pub.nbytes)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, e->pub.name, -1,
                          "device buffer of %llu bytes for a tensor of %llu bytes", (unsigned long long)capacity,
                          (unsigned long long)e->pub.nbytes);
    e->buffer = device_ptr, e->capacity = capacity, e->device = device;
    return CKPT_OK;
}
