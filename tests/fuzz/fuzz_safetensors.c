/* Fuzz target: a whole safetensors file, through the public catalog. */
#include <stdlib.h>

#include "ckpt.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = fuzz_memfile(data, size);
    if (fd < 0) return 0;
    char path[64];
    fuzz_fd_path(fd, path, sizeof path);
    ckpt_catalog *cat;
    ckpt_error err;
    if (ckpt_catalog_open(path, &cat, &err) == CKPT_OK) {
        /* Whatever validated must be readable exactly as declared. */
        for (size_t i = 0; i < ckpt_catalog_tensor_count(cat); i++) {
            const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
            if (t->nbytes > (1u << 20)) continue;
            unsigned char *buf = malloc(t->nbytes ? t->nbytes : 1);
            if (ckpt_catalog_read(cat, t, 0, buf, t->nbytes, &err) != CKPT_OK) abort();
            const void *view;
            if (ckpt_catalog_view(cat, t, &view, &err) != CKPT_OK) abort();
            free(buf);
        }
        ckpt_catalog_close(cat);
    }
    close(fd);
    return 0;
}
