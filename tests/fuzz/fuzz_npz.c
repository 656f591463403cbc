/* Fuzz target: an .npz archive (stored and DEFLATE members, each a .npy)
 * through the catalog: every array read, whole and in part. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_read_catalog(data, size, false);
    return 0;
}
