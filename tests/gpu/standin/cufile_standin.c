/*
 * cufile_standin.c — a stand-in for GPUDirect Storage's library
 * (libcufile), for the tests of ckpt's direct path (src/device/cufile.c).
 * Built by CMake for the tests only, linked against the stand-in CUDA
 * runtime (cudart_standin.c), whose "device" memory it reads into; the
 * library dlopens it through CKPT_CUFILE exactly as it dlopens
 * libcufile.so.0.
 *
 * It implements the calls ckpt makes, with NVIDIA's signatures and
 * numbers (cufile.h: CUfileError_t is {CUfileOpError err; CUresult cu_err},
 * CUfileDescr_t {type; union {int fd; void *handle}; fs_ops}; cuFileRead
 * returns the bytes read, -1 with errno set, or -CUfileOpError), declared
 * here: NVIDIA's headers are never a build dependency.  A read is a pread
 * into the device memory; like GDS, it checks what ckpt must give it:
 * the handle's descriptor opened with O_DIRECT, the buffer inside one
 * cudaMalloc block.  Offsets that are not 4 KiB-aligned are counted (GDS
 * bounces them through its own buffers; ckpt never sends any).
 *
 * Knobs (read at each call):
 *   CKPT_STANDIN_CUFILE_OPEN_FAILS=1      cuFileDriverOpen fails (no nvidia-fs: CU_FILE_DRIVER_NOT_INITIALIZED)
 *   CKPT_STANDIN_CUFILE_REGISTER_FAILS=1  cuFileHandleRegister fails (a file system GDS cannot read:
 *                                         CU_FILE_IO_NOT_SUPPORTED)
 *   CKPT_STANDIN_CUFILE_FAIL_READ=N       the N-th cuFileRead (1-based, since the last reset) returns -1, errno EIO
 *   CKPT_STANDIN_CUFILE_SHORT_READ=N      ... or reads half of what it was asked
 *
 * Counters for the tests: ckpt_standin_cufile_counters (and _reset).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT */
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define STANDIN_API __attribute__((visibility("default")))

/* cufile.h's numbers. */
typedef enum CUfileOpError {
    CU_FILE_SUCCESS = 0,
    CU_FILE_DRIVER_NOT_INITIALIZED = 5001,
    CU_FILE_IO_NOT_SUPPORTED = 5008,
    CU_FILE_CUDA_POINTER_INVALID = 5012,
    CU_FILE_INVALID_FILE_OPEN_FLAG = 5019,
    CU_FILE_INVALID_VALUE = 5022,
} CUfileOpError;

typedef struct CUfileError {
    CUfileOpError err;
    int cu_err; /* CUresult */
} CUfileError_t;

enum CUfileFileHandleType { CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1 };

typedef struct CUfileDescr_t {
    enum CUfileFileHandleType type;
    union {
        int fd;
        void *handle;
    } handle;
    const void *fs_ops;
} CUfileDescr_t;

typedef void *CUfileHandle_t;

/* The stand-in CUDA runtime's: whether memory is its device memory. */
int ckpt_standin_is_device(const void *p, size_t n);

typedef struct ckpt_standin_cufile_counters {
    uint64_t driver_opens; /* cuFileDriverOpen calls that succeeded          */
    uint64_t driver_open;  /* 1 while the driver is open                     */
    uint64_t handles;      /* live registered handles                        */
    uint64_t reads;        /* cuFileRead calls                               */
    uint64_t bytes;        /* bytes they read                                */
    uint64_t unaligned;    /* reads whose file offset or size is not 4 KiB-aligned */
} ckpt_standin_cufile_counters;

typedef struct handle {
    int fd;   /* the caller's O_DIRECT descriptor */
    int read; /* the same file without O_DIRECT: the stand-in's "DMA" reads any alignment */
} handle;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static ckpt_standin_cufile_counters counters;
static uint64_t read_number;

static long knob(const char *name) {
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : 0;
}

static CUfileError_t status(CUfileOpError e) {
    return (CUfileError_t){e, 0};
}

STANDIN_API CUfileError_t cuFileDriverOpen(void) {
    if (knob("CKPT_STANDIN_CUFILE_OPEN_FAILS")) return status(CU_FILE_DRIVER_NOT_INITIALIZED);
    pthread_mutex_lock(&lock);
    counters.driver_opens++, counters.driver_open = 1;
    pthread_mutex_unlock(&lock);
    return status(CU_FILE_SUCCESS);
}

STANDIN_API CUfileError_t cuFileDriverClose_v2(void) {
    pthread_mutex_lock(&lock);
    int was_open = counters.driver_open != 0;
    counters.driver_open = 0;
    pthread_mutex_unlock(&lock);
    return status(was_open ? CU_FILE_SUCCESS : CU_FILE_DRIVER_NOT_INITIALIZED);
}

STANDIN_API CUfileError_t cuFileDriverClose(void) {
    return cuFileDriverClose_v2();
}

STANDIN_API CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr) {
    if (!fh || !descr || descr->type != CU_FILE_HANDLE_TYPE_OPAQUE_FD) return status(CU_FILE_INVALID_VALUE);
    pthread_mutex_lock(&lock);
    int driver_open = counters.driver_open != 0;
    pthread_mutex_unlock(&lock);
    if (!driver_open) return status(CU_FILE_DRIVER_NOT_INITIALIZED);
    if (knob("CKPT_STANDIN_CUFILE_REGISTER_FAILS")) return status(CU_FILE_IO_NOT_SUPPORTED);
    int flags = fcntl(descr->handle.fd, F_GETFL);
    if (flags < 0) return status(CU_FILE_INVALID_VALUE);
    if (!(flags & O_DIRECT)) return status(CU_FILE_INVALID_FILE_OPEN_FLAG); /* GDS reads O_DIRECT files */
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", descr->handle.fd);
    handle *h = malloc(sizeof *h);
    if (!h) return status(CU_FILE_INVALID_VALUE);
    h->fd = descr->handle.fd;
    if ((h->read = open(self, O_RDONLY | O_CLOEXEC)) < 0) {
        free(h);
        return status(CU_FILE_INVALID_VALUE);
    }
    pthread_mutex_lock(&lock);
    counters.handles++;
    pthread_mutex_unlock(&lock);
    *fh = h;
    return status(CU_FILE_SUCCESS);
}

STANDIN_API void cuFileHandleDeregister(CUfileHandle_t fh) {
    handle *h = fh;
    if (!h) return;
    close(h->read);
    free(h);
    pthread_mutex_lock(&lock);
    counters.handles--;
    pthread_mutex_unlock(&lock);
}

STANDIN_API CUfileError_t cuFileBufRegister(const void *base, size_t length, int flags) {
    (void)flags;
    return status(ckpt_standin_is_device(base, length) ? CU_FILE_SUCCESS : CU_FILE_CUDA_POINTER_INVALID);
}

STANDIN_API CUfileError_t cuFileBufDeregister(const void *base) {
    (void)base;
    return status(CU_FILE_SUCCESS);
}

STANDIN_API ssize_t cuFileRead(CUfileHandle_t fh, void *base, size_t size, off_t file_offset, off_t buf_offset) {
    handle *h = fh;
    if (!h || !base || file_offset < 0 || buf_offset < 0) return -CU_FILE_INVALID_VALUE;
    unsigned char *dst = (unsigned char *)base + buf_offset;
    if (!ckpt_standin_is_device(dst, size)) return -CU_FILE_CUDA_POINTER_INVALID;
    pthread_mutex_lock(&lock);
    uint64_t n = ++read_number;
    counters.reads++;
    if (file_offset % 4096 || size % 4096) counters.unaligned++;
    pthread_mutex_unlock(&lock);
    if ((long)n == knob("CKPT_STANDIN_CUFILE_FAIL_READ")) {
        errno = EIO;
        return -1;
    }
    if ((long)n == knob("CKPT_STANDIN_CUFILE_SHORT_READ")) size /= 2;
    size_t got = 0;
    while (got < size) {
        ssize_t r = pread(h->read, dst + got, size - got, file_offset + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    pthread_mutex_lock(&lock);
    counters.bytes += got;
    pthread_mutex_unlock(&lock);
    return (ssize_t)got;
}

STANDIN_API void ckpt_standin_cufile_counters_get(ckpt_standin_cufile_counters *out) {
    pthread_mutex_lock(&lock);
    *out = counters;
    pthread_mutex_unlock(&lock);
}

/* Clears the read number the failure knobs count and the read counters. */
STANDIN_API void ckpt_standin_cufile_reset(void) {
    pthread_mutex_lock(&lock);
    read_number = 0;
    counters.reads = counters.bytes = counters.unaligned = counters.driver_opens = 0;
    pthread_mutex_unlock(&lock);
}
