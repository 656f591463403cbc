/* read_all — reads every tensor of a checkpoint into its own buffer (all
 * kept alive, as an importer holding the model would) and checksums every
 * byte.  Prints: tensors bytes checksum seconds.  For `make bench`. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ckpt.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: read_all PATH\n");
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ckpt_error err;
    ckpt_catalog *cat;
    if (ckpt_catalog_open(argv[1], &cat, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    size_t n = ckpt_catalog_tensor_count(cat);
    unsigned char **buffers = calloc(n ? n : 1, sizeof *buffers);
    uint64_t total = 0, sum = 0;
    for (size_t i = 0; i < n; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
        buffers[i] = malloc(t->nbytes ? t->nbytes : 1);
        if (!buffers[i] || ckpt_catalog_read(cat, t, 0, buffers[i], t->nbytes, &err)) {
            fprintf(stderr, "%s\n", buffers[i] ? err.message : "out of memory");
            return 1;
        }
        for (uint64_t k = 0; k < t->nbytes; k++) sum = sum * 31 + buffers[i][k];
        total += t->nbytes;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%zu %llu %016llx %.3f\n", n, (unsigned long long)total, (unsigned long long)sum,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    for (size_t i = 0; i < n; i++) free(buffers[i]);
    free(buffers);
    ckpt_catalog_close(cat);
    return 0;
}
