/*
 * device.h — what the device destination shares inside the library: the
 * CUDA runtime's calls as loaded by dlopen (cuda.c), an open device, and
 * its ring of pinned slots (ring.c), which the engine drives as a STAGE
 * sink (engine.h) without knowing CUDA.
 */
#ifndef CKPT_DEVICE_INTERNAL_H
#define CKPT_DEVICE_INTERNAL_H

#include <pthread.h>
#include <sys/types.h>

#include "ckpt_device.h"
#include "../engine.h"

/* The runtime's calls, with CUDA's signatures (cudaError_t is an int, and
 * streams and events are opaque pointers); only these are looked up. */
typedef struct ckpt__cudart {
    void *lib;
    int (*GetDeviceCount)(int *count);
    int (*SetDevice)(int device);
    int (*HostAlloc)(void **ptr, size_t size, unsigned int flags);
    int (*FreeHost)(void *ptr);
    int (*MemcpyAsync)(void *dst, const void *src, size_t count, int kind, void *stream);
    int (*StreamCreateWithFlags)(void **stream, unsigned int flags);
    int (*StreamDestroy)(void *stream);
    int (*EventCreateWithFlags)(void **event, unsigned int flags);
    int (*EventRecord)(void *event, void *stream);
    int (*EventSynchronize)(void *event);
    int (*EventDestroy)(void *event);
    const char *(*GetErrorString)(int error);
    int (*GetLastError)(void);
} ckpt__cudart;

/* CUDA's numbers (driver_types.h). */
enum {
    CKPT__CUDA_SUCCESS = 0,
    CKPT__CUDA_MEMORY_ALLOCATION = 2,
    CKPT__CUDA_NO_DEVICE = 100,
    CKPT__CUDA_MEMCPY_HOST_TO_DEVICE = 1,
    CKPT__CUDA_STREAM_NON_BLOCKING = 1,
    CKPT__CUDA_EVENT_DISABLE_TIMING = 2,
};

/* GPUDirect Storage's calls (libcufile, loaded by dlopen), with the
 * signatures of NVIDIA's cufile.h: CUfileError_t is {CUfileOpError err;
 * CUresult cu_err} (two ints, returned by value), cuFileRead returns the
 * bytes read, -1 with errno set, or -CUfileOpError. */
typedef struct ckpt__cufile_error {
    int err;    /* CUfileOpError: 0 success, 5000 and up its errors */
    int cu_err; /* CUresult, when err is CU_FILE_CUDA_DRIVER_ERROR */
} ckpt__cufile_error;

/* CUfileDescr_t: a descriptor to register (type 1: a POSIX fd). */
typedef struct ckpt__cufile_descr {
    int type;
    union {
        int fd;
        void *handle;
    } handle;
    const void *fs_ops;
} ckpt__cufile_descr;

enum { CKPT__CUFILE_HANDLE_TYPE_OPAQUE_FD = 1 };

typedef struct ckpt__cufile {
    void *lib;
    ckpt__cufile_error (*DriverOpen)(void);
    ckpt__cufile_error (*DriverClose)(void);
    ckpt__cufile_error (*HandleRegister)(void **fh, ckpt__cufile_descr *descr);
    void (*HandleDeregister)(void *fh);
    ssize_t (*Read)(void *fh, void *base, size_t size, off_t file_offset, off_t base_offset);
} ckpt__cufile;

/* A file registered with cuFile during a load (or refused: handle NULL). */
typedef struct ckpt__cufile_file {
    int fd;
    void *handle;
} ckpt__cufile_file;

typedef enum ckpt__slot_state { CKPT__SLOT_FREE, CKPT__SLOT_FILLING, CKPT__SLOT_IN_FLIGHT, CKPT__SLOT_WAITED } ckpt__slot_state;

/* A pinned host slot and the copy that drains it. */
typedef struct ckpt__slot {
    unsigned char *host;
    void *event;            /* recorded after the slot's copy */
    ckpt__slot_state state;
    uint64_t seq;           /* submission order */
    const char *tensor;     /* what the copy carries, for errors */
    void *dst;
    uint64_t at, bytes;
} ckpt__slot;

/* The ring: slots lent to the engine's threads and drained by copies on
 * the device's stream.  `stage` first: the engine's handle is the ring. */
typedef struct ckpt__ring {
    ckpt__stage stage;
    ckpt_device *device;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    ckpt__slot *slots;
    unsigned count;
    uint64_t next_seq;
    /* The first copy (in submission order) that failed during this load. */
    ckpt_status failed;
    uint64_t failed_seq;
    ckpt_error failure;
    bool reported; /* an engine thread was handed the failure (it may not be the earliest yet) */
} ckpt__ring;

struct ckpt_device {
    char name[32];
    int ordinal;
    ckpt__cudart rt;
    ckpt__cufile gds;          /* .lib NULL: no GPUDirect Storage (absent, refused, or not asked for) */
    ckpt__cufile_file *files;  /* this load's files as cuFile saw them (lock: ring.lock) */
    size_t file_count, file_cap;
    void *stream;
    ckpt__ring ring;
    pthread_mutex_t busy; /* one load at a time */
    ckpt_device_stats stats;
    bool load_staged, load_direct; /* which paths this load's bytes took (lock: ring.lock) */
};

/* A CUDA call's failure as a status and an error naming the call. */
CKPT__HIDDEN ckpt_status ckpt__cuda_fail(const ckpt_device *d, ckpt_error *err, int rc, const char *tensor,
                                         const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The ring's slots, stream-side objects and stage operations (ring.c). */
CKPT__HIDDEN ckpt_status ckpt__ring_init(ckpt_device *d, unsigned slots, uint64_t slot_bytes, ckpt_error *err);
CKPT__HIDDEN void ckpt__ring_free(ckpt_device *d);

/* GPUDirect Storage (cufile.c): loaded and its driver opened at
 * ckpt_device_open when the options allow (else the device has no direct
 * path: the stats say whether the library was found and its driver
 * opened); closed with the device.  The ring's stage
 * reads through it (ckpt__stage.read_direct, forget_files). */
CKPT__HIDDEN void ckpt__cufile_open(ckpt_device *d, bool wanted);
CKPT__HIDDEN void ckpt__cufile_close(ckpt_device *d);
CKPT__HIDDEN ckpt_status ckpt__cufile_read(ckpt__stage *stage, int fd, const char *path, uint64_t offset, void *dst,
                                           uint64_t at, uint64_t bytes, const char *tensor, bool *taken,
                                           ckpt_error *err);
CKPT__HIDDEN void ckpt__cufile_forget_files(ckpt__stage *stage);

/* A load's use of the device: begin holds it for the load; flush waits
 * for every copy started so far; finish waits for the rest, releases the
 * device and turns a copy's failure into the load's status (it wins over
 * success and over the cancel it caused). */
CKPT__HIDDEN void ckpt__device_begin(ckpt_device *d);
CKPT__HIDDEN ckpt_status ckpt__device_flush(ckpt_device *d, ckpt_error *err);
CKPT__HIDDEN ckpt_status ckpt__device_finish(ckpt_device *d, ckpt_status st, ckpt_error *err);

#endif
