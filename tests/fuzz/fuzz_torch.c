/* Fuzz target: a whole torch.save file (zip, legacy or re-zipped) through
 * the catalog: every tensor read, whole and in part. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_read_catalog(data, size, false);
    return 0;
}
