/*
 * cufile.c — GPUDirect Storage (cuFile): file bytes read by the NVMe or
 * the file system straight into device memory, with no host slot.
 *
 * libcufile is loaded with dlopen when a device is opened (never a build
 * dependency; CKPT_CUFILE names it, which the tests point at the stand-in
 * tests/gpu/standin/cufile_standin.c) and its driver opened; the ring's
 * stage then offers the engine read_direct.  Found on the search path, it
 * is used only where the nvidia-fs kernel module is loaded
 * (/proc/driver/nvidia-fs): without it cuFile runs in its compatibility
 * mode, POSIX reads into its own bounce buffers then copies — what the
 * ring does, with less overlap.  A library CKPT_CUFILE names is used
 * either way (the caller chose it).  The engine hands it the
 * 4 KiB-aligned middle of each box that is the file's bytes unchanged, on
 * an O_DIRECT descriptor; each descriptor is registered with cuFile once
 * per load (a file system GDS refuses: that file goes through the ring)
 * and deregistered when the engine is done with it (forget_files).  A
 * read that fails is the load's error, naming the file, the tensor and
 * the byte range: it never falls back, so that an I/O error is never
 * hidden.  Device buffers are not registered (cuFileBufRegister): cuFile
 * reads unregistered memory through its own staging, and registering
 * every tensor costs more than one read of it.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "../io/source.h"

/* Tried in order unless CKPT_CUFILE names the one library to load. */
static const char *const cufile_names[] = {"libcufile.so.0", "libcufile.so"};

/* Present while the nvidia-fs module (GPUDirect Storage's DMA path) is loaded. */
#define NVIDIA_FS "/proc/driver/nvidia-fs"

static bool bind_calls(ckpt__cufile *g) {
#define BIND(field, symbol) (*(void **)&g->field = dlsym(g->lib, symbol))
    /* CUDA 12.x's cufile.h defines cuFileDriverClose as cuFileDriverClose_v2 */
    if (!BIND(DriverClose, "cuFileDriverClose_v2")) BIND(DriverClose, "cuFileDriverClose");
    return BIND(DriverOpen, "cuFileDriverOpen") && g->DriverClose && BIND(HandleRegister, "cuFileHandleRegister") &&
           BIND(HandleDeregister, "cuFileHandleDeregister") && BIND(Read, "cuFileRead");
#undef BIND
}

void ckpt__cufile_open(ckpt_device *d, bool wanted) {
    const char *forced = getenv("CKPT_CUFILE");
    const char *const *names = cufile_names;
    size_t count = sizeof cufile_names / sizeof *cufile_names;
    if (forced && *forced) names = &forced, count = 1;
    /* no nvidia-fs: compatibility mode only, unless the caller named the library */
    if (!(forced && *forced) && ckpt__local_kind(NVIDIA_FS, NULL) == CKPT__NAME_MISSING) wanted = false;
    ckpt__cufile g = {0};
    for (size_t i = 0; i < count && !g.lib; i++) {
        if (!(g.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL))) continue;
        if (!bind_calls(&g)) {
            dlclose(g.lib);
            memset(&g, 0, sizeof g);
        }
    }
    d->stats.cufile_found = g.lib != NULL;
    if (!g.lib) return;
    /* no nvidia-fs, no GDS-capable device: the ring carries everything */
    if (!wanted || g.DriverOpen().err != 0) {
        dlclose(g.lib);
        return;
    }
    d->gds = g;
    d->stats.cufile_open = 1;
}

void ckpt__cufile_close(ckpt_device *d) {
    if (!d->gds.lib) return;
    ckpt__cufile_forget_files(&d->ring.stage);
    free(d->files);
    d->gds.DriverClose();
    dlclose(d->gds.lib);
    memset(&d->gds, 0, sizeof d->gds);
}

/* The cuFile handle of descriptor fd, registered on first use (lock held);
 * NULL when cuFile refuses the file (it is read through the ring). */
static void *handle_of(ckpt_device *d, int fd) {
    for (size_t i = 0; i < d->file_count; i++)
        if (d->files[i].fd == fd) return d->files[i].handle;
    ckpt__cufile_file *grown = ckpt__grow(d->files, d->file_count, &d->file_cap, sizeof *grown, 8);
    if (!grown) return NULL; /* no room to remember it: the ring reads it */
    d->files = grown;
    ckpt__cufile_descr descr = {.type = CKPT__CUFILE_HANDLE_TYPE_OPAQUE_FD, .handle.fd = fd};
    void *handle = NULL;
    if (d->gds.HandleRegister(&handle, &descr).err != 0) handle = NULL;
    d->files[d->file_count++] = (ckpt__cufile_file){fd, handle};
    if (!handle) d->stats.cufile_files_refused++;
    return handle;
}

void ckpt__cufile_forget_files(ckpt__stage *stage) {
    ckpt_device *d = ((ckpt__ring *)stage)->device;
    pthread_mutex_lock(&d->ring.lock);
    for (size_t i = 0; i < d->file_count; i++)
        if (d->files[i].handle) d->gds.HandleDeregister(d->files[i].handle);
    d->file_count = 0;
    pthread_mutex_unlock(&d->ring.lock);
}

/* cufile.h's words for the CUfileOpError values a read may return. */
static const char *op_error(long e) {
    switch (e) {
    case 5001: return "the cuFile driver is not initialized";
    case 5008: return "the file system does not support GPUDirect Storage I/O";
    case 5009: return "the device does not support GPUDirect Storage";
    case 5010: return "nvidia-fs driver error";
    case 5011: return "CUDA driver error";
    case 5012: return "invalid device pointer";
    case 5014: return "device pointer out of its allocation's range";
    case 5019: return "the file was not opened with O_DIRECT";
    case 5022: return "invalid argument";
    }
    return "cuFile error";
}

ckpt_status ckpt__cufile_read(ckpt__stage *stage, int fd, const char *path, uint64_t offset, void *dst, uint64_t at,
                              uint64_t bytes, const char *tensor, bool *taken, ckpt_error *err) {
    ckpt_device *d = ((ckpt__ring *)stage)->device;
    pthread_mutex_lock(&d->ring.lock);
    void *handle = d->ring.failed ? NULL : handle_of(d, fd);
    pthread_mutex_unlock(&d->ring.lock);
    *taken = handle != NULL;
    if (!handle) return CKPT_OK;
    d->rt.SetDevice(d->ordinal); /* cuFile reads into the thread's current device's context */
    uint64_t done = 0;
    while (done < bytes) {
        errno = 0;
        ssize_t n = d->gds.Read(handle, dst, (size_t)(bytes - done), (off_t)(offset + done), (off_t)(at + done));
        if (n > 0) {
            done += (uint64_t)n;
            continue;
        }
        int sys = errno;
        char why[160];
        if (n == 0)
            snprintf(why, sizeof why, "the file ends first");
        else if (n == -1)
            snprintf(why, sizeof why, "%s", strerror(sys ? sys : EIO));
        else
            snprintf(why, sizeof why, "%s (CUfileOpError %ld)", op_error(-(long)n), -(long)n);
        return ckpt__fail(err, CKPT_E_IO, path, tensor, (int64_t)(offset + done),
                          "cuFileRead of bytes [%llu, %llu) of the file into bytes [%llu, %llu) of the tensor on %s "
                          "failed at byte %llu: %s",
                          (unsigned long long)offset, (unsigned long long)(offset + bytes), (unsigned long long)at,
                          (unsigned long long)(at + bytes), d->name, (unsigned long long)(offset + done), why);
    }
    pthread_mutex_lock(&d->ring.lock);
    d->stats.direct_reads++, d->stats.bytes_direct += bytes;
    d->load_direct = true;
    pthread_mutex_unlock(&d->ring.lock);
    return CKPT_OK;
}
