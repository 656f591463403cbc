/* Fuzz target: a GGUF file (header, key-values, tensor infos) through the
 * public catalog: every key-value visited, every tensor read whole and in
 * part, and small quantized tensors dequantized through a plan. */
#include <string.h>

#include "ckpt_gguf.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = fuzz_memfile(data, size);
    if (fd < 0) return 0;
    char path[64];
    fuzz_fd_path(fd, path, sizeof path);
    ckpt_catalog *cat;
    ckpt_error err;
    if (ckpt_catalog_open(path, &cat, &err) == CKPT_OK) {
        size_t sum = 0;
        for (size_t i = 0; i < ckpt_catalog_kv_count(cat); i++) {
            const ckpt_kv *kv = ckpt_catalog_kv(cat, i);
            sum += strlen(kv->key) + strlen(kv->json) + (kv->string ? strlen(kv->string) : 0);
            if (ckpt_catalog_kv_find(cat, kv->key) == NULL) abort();
        }
        (void)sum;
        for (size_t i = 0; i < ckpt_catalog_tensor_count(cat); i++) {
            const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
            if (t->nbytes > (1u << 20)) continue;
            unsigned char *buf = malloc(t->nbytes ? t->nbytes : 1);
            /* Whatever opened lies inside the file: reads must succeed. */
            if (ckpt_catalog_read(cat, t, 0, buf, t->nbytes, &err) != CKPT_OK) abort();
            if (t->nbytes > 3 && ckpt_catalog_read(cat, t, 1, buf, t->nbytes - 2, &err) != CKPT_OK) abort();
            free(buf);
        }
        ckpt_plan *plan;
        if (ckpt_plan_create(cat, &plan, &err) == CKPT_OK) {
            uint64_t total = 0;
            for (size_t i = 0; i < ckpt_plan_count(plan); i++) total += ckpt_plan_item_at(plan, i)->numel;
            /* dequantize what ckpt can (others are refused by name) */
            if (total < (1u << 18) && ckpt_plan_cast(plan, NULL, CKPT_F32, &err) == CKPT_OK &&
                ckpt_load(plan, NULL, &err) != CKPT_OK)
                abort();
            ckpt_plan_free(plan);
        }
        ckpt_catalog_close(cat);
    }
    close(fd);
    return 0;
}
