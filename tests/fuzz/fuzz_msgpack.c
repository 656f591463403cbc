/* Fuzz target: a Flax msgpack document through the catalog: Flax's
 * extension types, chunked arrays (several pieces), the object tree; every
 * tensor read, whole and in part. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_read_catalog(data, size, false);
    return 0;
}
