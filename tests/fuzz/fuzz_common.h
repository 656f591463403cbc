/* fuzz_common.h — helpers shared by the fuzz targets: inputs as real files
 * (memfd), so the targets exercise the same code paths as ckpt on disk. */
#ifndef CKPT_FUZZ_COMMON_H
#define CKPT_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An anonymous in-memory file holding `data`; -1 on failure. */
static inline int fuzz_memfile(const uint8_t *data, size_t size) {
    int fd = memfd_create("ckpt-fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    return fd;
}

/* "/proc/self/fd/N": a path to open the memfd through the public API. */
static inline void fuzz_fd_path(int fd, char *buf, size_t cap) { snprintf(buf, cap, "/proc/self/fd/%d", fd); }

#endif
