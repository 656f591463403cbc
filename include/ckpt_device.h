/*
 * ckpt_device.h — loading tensors straight into GPU memory.
 *
 * A plan item's destination may be device memory: ckpt_device_open opens
 * a CUDA device, ckpt_plan_set_device_buffer gives an item a device
 * pointer, and ckpt_load (<ckpt.h>, which this header includes) moves its
 * bytes there through a ring of pinned host slots:
 *
 *   file ──read──▶ slot (pinned host memory) ──cudaMemcpyAsync──▶ device
 *
 * A read lands in a free slot (casts, byte swaps and axis orders are done
 * on the host, as the bytes land); an asynchronous host-to-device copy on
 * the device's own stream drains it, and the slot is reused once the
 * copy's event has completed.  Threads read while earlier slots are being
 * copied, so reads and copies overlap.  Host memory is the ring — `slots`
 * × `slot_bytes`, plus the engine's bounce buffers when bytes change (see
 * ckpt_load) — whatever the size of the model.  A plan's slices already
 * read only their rows: a tensor-parallel rank that slices its share moves
 * only its own bytes.
 *
 * CUDA is never a build dependency: libcudart is loaded with dlopen when a
 * device is opened (the names libcudart.so, libcudart.so.12,
 * libcudart.so.13, in that order; or only the file or name the environment
 * variable CKPT_CUDART gives).  The tests point CKPT_CUDART at a stand-in
 * that implements the same calls over host memory
 * (tests/gpu/standin/cudart_standin.c).
 *
 * GPUDirect Storage (cuFile): ckpt_device_open looks for libcufile and the
 * stats say whether it was found, but this build always reads through the
 * ring (CKPT_DEVICE_PATH_STAGED): reads straight from the disk into device
 * memory are not implemented.
 *
 * Example (error handling shortened):
 *
 *     ckpt_device *dev;
 *     if (ckpt_device_open("cuda:0", NULL, &dev, &err)) { ... err.message ... }
 *     ckpt_plan_create(catalog, &plan, &err);
 *     for (size_t i = 0; i < ckpt_plan_count(plan); i++) {
 *         const ckpt_plan_item *it = ckpt_plan_item_at(plan, i);
 *         void *d;
 *         cudaMalloc(&d, it->nbytes);              // or torch.empty(..., device=)
 *         ckpt_plan_set_device_buffer(plan, i, dev, d, it->nbytes, &err);
 *     }
 *     ckpt_load(plan, NULL, &err);                 // every copy has completed
 *     ckpt_plan_free(plan);
 *     ckpt_device_close(dev);
 */
#ifndef CKPT_DEVICE_H
#define CKPT_DEVICE_H

#include "ckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An open device: the loaded CUDA runtime, a stream, the ring of pinned
 * slots.  One load at a time uses a device (a second waits for the first);
 * a device may serve any number of plans, one after the other. */
typedef struct ckpt_device ckpt_device;

typedef struct ckpt_device_options {
    size_t size;         /* sizeof(ckpt_device_options), set by ckpt_device_options_init */
    unsigned slots;      /* pinned host slots in the ring; 0: 8 */
    uint64_t slot_bytes; /* bytes per slot; 0: 8 MiB; at least 64 KiB.  A load's
                            chunk (ckpt_load_options.chunk_bytes) is at most one slot */
} ckpt_device_options;

CKPT_API void ckpt_device_options_init_sized(ckpt_device_options *options, size_t size);
static inline void ckpt_device_options_init(ckpt_device_options *options) {
    ckpt_device_options_init_sized(options, sizeof *options);
}

/*
 * Opens device `name` — "cuda:N" (N the CUDA device number) or "cuda"
 * (device 0) — with `options` (NULL: the defaults): loads libcudart,
 * checks the device exists, creates the device's copy stream and
 * allocates the ring's pinned slots.  Failures:
 *   CKPT_E_INVALID_ARGUMENT  a name that is not "cuda" or "cuda:N", slots
 *                            or slot_bytes out of range;
 *   CKPT_E_NOT_FOUND         no CUDA runtime could be loaded (the message
 *                            names every library tried and dlopen's reason),
 *                            no CUDA device, or no device N (the message says
 *                            how many there are);
 *   CKPT_E_NO_MEMORY         the pinned slots could not be allocated;
 *   CKPT_E_IO                another CUDA call failed (the message quotes
 *                            cudaGetErrorString).
 */
CKPT_API ckpt_status ckpt_device_open(const char *name, const ckpt_device_options *options, ckpt_device **device,
                                      ckpt_error *err);

/* Releases the device's stream and slots (after waiting for any copy still
 * running, which a finished ckpt_load never leaves).  Accepts NULL.  Plans
 * whose items point at the device must not be loaded afterwards. */
CKPT_API void ckpt_device_close(ckpt_device *device);

/* The name the device was opened as, e.g. "cuda:0". */
CKPT_API const char *ckpt_device_name(const ckpt_device *device);

/*
 * Makes device memory the destination of plan item i: `device_ptr` (a
 * pointer from cudaMalloc, or a torch tensor's data_ptr(), on `device`)
 * must hold `capacity` ≥ item->nbytes bytes.  ckpt_load then writes the
 * item's bytes (dense, row-major, in the item's dtype) there, and the
 * item's `data` is the device pointer after the load.  Replaces a buffer
 * given with ckpt_plan_set_buffer, and ckpt_plan_set_buffer replaces this
 * one; views never apply to device items.  ckpt_load returns only when
 * every copy it started has completed (or failed): the memory is ready for
 * any stream, and nothing is in flight after a failure or a cancel
 * either.  Its item_done callback fires for a device item once the item's
 * copies have completed.  A failed copy fails the load with CKPT_E_IO
 * naming the tensor, the byte range of its output and CUDA's message; the
 * device memory then holds partial data.
 */
CKPT_API ckpt_status ckpt_plan_set_device_buffer(ckpt_plan *plan, size_t i, ckpt_device *device, void *device_ptr,
                                                 uint64_t capacity, ckpt_error *err);

/* How bytes reach the device. */
typedef enum ckpt_device_path {
    CKPT_DEVICE_PATH_NONE = 0,  /* no load has used the device yet */
    CKPT_DEVICE_PATH_STAGED = 1 /* read into pinned host slots, then copied (the ring) */
} ckpt_device_path;

/* What a device has done since it was opened (or since the last reset). */
typedef struct ckpt_device_stats {
    size_t size;              /* sizeof(ckpt_device_stats), set by the caller */
    ckpt_device_path path;    /* the path the last load took                 */
    int cufile_found;         /* libcufile could be loaded (GDS not used by this build) */
    unsigned slots;           /* the ring's slots                           */
    uint64_t slot_bytes;      /* and their size: the host memory of the ring */
    uint64_t copies;          /* host-to-device copies started               */
    uint64_t bytes_copied;    /* their bytes                                 */
    uint64_t slot_waits;      /* times a read waited for a slot's copy to complete */
} ckpt_device_stats;

/* Fills `stats` (its `size` set by the caller to sizeof *stats: a newer
 * library writes only the fields the caller has); reset: then zero the
 * counters. */
CKPT_API void ckpt_device_stats_get(ckpt_device *device, ckpt_device_stats *stats, int reset);

#ifdef __cplusplus
}
#endif

#endif
