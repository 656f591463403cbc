/* Fuzz target: a *.safetensors.index.json document. */
#include <stdlib.h>
#include <string.h>

#include "formats/shards.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    ckpt__arena arena = {0};
    ckpt__index idx;
    ckpt_error err;
    if (ckpt__index_parse(text, size, "fuzz.json", &arena, &idx, &err) == CKPT_OK) {
        for (size_t i = 0; i < idx.count; i++)
            if (idx.file_of[i] >= idx.file_count || !idx.names[i]) abort();
        ckpt__index_free(&idx);
    }
    ckpt__arena_free(&arena);
    free(text);
    return 0;
}
