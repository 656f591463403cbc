/* fuzz_common.h — helpers shared by the fuzz targets: inputs as real files
 * (memfd), so the targets exercise the same code paths as ckpt on disk. */
#ifndef CKPT_FUZZ_COMMON_H
#define CKPT_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ckpt.h"
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

/* Opens the input as a file through the public catalog and reads every
 * tensor (up to 1 MiB each), whole and in part.  With `strict`, whatever
 * opened must read and view without error (safetensors guarantees it; a
 * torch file may fail later, e.g. a compressed record that lies). */
static inline void fuzz_read_catalog(const uint8_t *data, size_t size, bool strict) {
    int fd = fuzz_memfile(data, size);
    if (fd < 0) return;
    char path[64];
    fuzz_fd_path(fd, path, sizeof path);
    ckpt_catalog *cat;
    ckpt_error err;
    if (ckpt_catalog_open(path, &cat, &err) == CKPT_OK) {
        for (size_t i = 0; i < ckpt_catalog_tensor_count(cat); i++) {
            const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
            if (t->nbytes > (1u << 20)) continue;
            unsigned char *buf = malloc(t->nbytes ? t->nbytes : 1);
            const void *view;
            if (ckpt_catalog_read(cat, t, 0, buf, t->nbytes, &err) != CKPT_OK && strict) abort();
            if (t->nbytes > 3 && ckpt_catalog_read(cat, t, 1, buf, t->nbytes - 2, &err) != CKPT_OK && strict) abort();
            if (strict && ckpt_catalog_view(cat, t, &view, &err) != CKPT_OK) abort();
            free(buf);
        }
        ckpt_catalog_close(cat);
    }
    close(fd);
}

#endif
