/* Fuzz target: a .npy file — its header parsed on its own, then the file
 * through the catalog (Fortran order, byte order, every tensor read). */
#include "formats/numpy.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt__arena arena = {0};
    ckpt__npy_header h;
    ckpt_error err;
    uint64_t off;
    if (ckpt__npy_preamble(data, size, "fuzz.npy", NULL, 0, &off, &err) == CKPT_OK && off <= size)
        (void)ckpt__npy_parse(data, (size_t)off, "fuzz.npy", NULL, 0, &arena, &h, &err);
    ckpt__arena_free(&arena);
    fuzz_read_catalog(data, size, false);
    return 0;
}
