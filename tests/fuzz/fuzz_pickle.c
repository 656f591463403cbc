/* Fuzz target: the restricted unpickler with torch's allowlist. */
#include "formats/pickle.h"
#include "formats/torch.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt__arena arena = {0};
    ckpt__pk_source src = {"fuzz.pkl", "data.pkl", 0};
    ckpt__pk_value *root;
    size_t used;
    ckpt_error err;
    (void)ckpt__pk_load(data, size, &src, ckpt__torch_allow, NULL, &arena, &root, &used, &err);
    ckpt__arena_free(&arena);
    return 0;
}
