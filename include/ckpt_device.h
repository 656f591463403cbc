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
 * GPUDirect Storage (cuFile): where libcufile loads (libcufile.so.0, then
 * libcufile.so, used only while the nvidia-fs module is loaded —
 * /proc/driver/nvidia-fs —, since without it cuFile's compatibility mode
 * only redoes what the ring does; or only the library CKPT_CUFILE names,
 * used either way) and its driver opens (cuFileDriverOpen), bytes that
 * need no change on the host go from the file straight into device
 * memory, with no slot:
 *
 *   file ──cuFileRead (O_DIRECT, 4 KiB-aligned)──▶ device
 *
 * A tensor qualifies when its bytes are the file's unchanged — no cast,
 * byte swap, slice of an inner axis, transpose or axis order, no ZIP
 * CRC-32 to check (pass skip_crc_check to ckpt_load for torch .bin files),
 * a local file — in boxes of at most a slot; each box's 4 KiB-aligned
 * middle (64 KiB or more) is read by cuFileRead on an O_DIRECT descriptor
 * registered with cuFileHandleRegister, its unaligned head and tail (under
 * 4 KiB each) go through the ring.  Everything else goes through the ring,
 * and so does every file cuFile refuses to register (a file system GDS
 * cannot read, one that refuses O_DIRECT): the fallback is silent and
 * clean, and the stats count it.  A cuFileRead that fails is the load's
 * error (CKPT_E_IO, naming the file, the tensor, the file's and the
 * tensor's byte ranges and cuFile's reason): an I/O error never falls back.
 * ckpt_device_options.cufile = 0 never uses cuFile.  The tests point
 * CKPT_CUFILE at a stand-in over pread (tests/gpu/standin/cufile_standin.c).
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
    unsigned slots;      /* pinned host slots in the ring; 0: 32 (256 MiB with 8 MiB slots) */
    uint64_t slot_bytes; /* bytes per slot; 0: 8 MiB; at least 64 KiB.  A load's
                            chunk (ckpt_load_options.chunk_bytes) is at most one slot */
    int cufile;          /* 1 (the default): read through GPUDirect Storage where
                            libcufile and the file allow; 0: only through the ring */
} ckpt_device_options;

CKPT_API void ckpt_device_options_init_sized(ckpt_device_options *options, size_t size);
static inline void ckpt_device_options_init(ckpt_device_options *options) {
    ckpt_device_options_init_sized(options, sizeof *options);
}

/*
 * Opens device `name` — "cuda:N" (N the CUDA device number) or "cuda"
 * (device 0) — with `options` (NULL: the defaults): loads libcudart,
 * checks the device exists, creates the device's copy stream, opens
 * GPUDirect Storage when options->cufile and libcufile allow (its absence
 * or refusal is no failure: the stats say), and allocates the ring's
 * pinned slots.  Failures:
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
 * device memory then holds partial data.  CUDA reports a copy that faults
 * on the stream only at a later call, so such a message names the earliest
 * copy not yet seen complete and, when copies were queued behind it, says
 * how many and the range of the last: the one that broke is among them. */
CKPT_API ckpt_status ckpt_plan_set_device_buffer(ckpt_plan *plan, size_t i, ckpt_device *device, void *device_ptr,
                                                 uint64_t capacity, ckpt_error *err);

/* How bytes reached the device in the last load. */
typedef enum ckpt_device_path {
    CKPT_DEVICE_PATH_NONE = 0,   /* no load has used the device yet */
    CKPT_DEVICE_PATH_STAGED = 1, /* all read into pinned host slots, then copied (the ring) */
    CKPT_DEVICE_PATH_DIRECT = 2, /* all read by cuFile straight into device memory (GPUDirect Storage) */
    CKPT_DEVICE_PATH_MIXED = 3   /* some each way: bytes_direct and bytes_copied say how many */
} ckpt_device_path;

/* What a device has done since it was opened (or since the last reset). */
typedef struct ckpt_device_stats {
    size_t size;              /* sizeof(ckpt_device_stats), set by the caller */
    ckpt_device_path path;    /* the path the last load took                 */
    int cufile_found;         /* libcufile was loaded, with every call ckpt makes */
    unsigned slots;           /* the ring's slots                           */
    uint64_t slot_bytes;      /* and their size: the host memory of the ring */
    uint64_t copies;          /* host-to-device copies started (the ring)    */
    uint64_t bytes_copied;    /* their bytes                                 */
    uint64_t slot_waits;      /* times a read waited for a slot's copy to complete */
    int cufile_open;          /* cuFile's driver opened: the direct path is available */
    uint64_t direct_reads;    /* cuFileRead calls (GPUDirect Storage)        */
    uint64_t bytes_direct;    /* their bytes                                 */
    uint64_t cufile_files_refused; /* files cuFile would not register: read through the ring */
} ckpt_device_stats;

/* Fills `stats` (its `size` set by the caller to sizeof *stats: a newer
 * library writes only the fields the caller has); reset: then zero the
 * counters. */
CKPT_API void ckpt_device_stats_get(ckpt_device *device, ckpt_device_stats *stats, int reset);

#ifdef __cplusplus
}
#endif

#endif
