/* Fuzz target: a whole safetensors file, through the public catalog;
 * whatever validates must read and view exactly as declared. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_read_catalog(data, size, true);
    return 0;
}
