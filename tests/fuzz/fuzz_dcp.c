/* Fuzz target: a torch.distributed.checkpoint directory through the public
 * catalog — the .metadata's validation, the chunk assembly and every read —
 * or a set of DCP Hugging Face storage-layer shards.  Input:
 *   'D' u32le n | n bytes of .metadata | the bytes every __<r>_0.distcp
 *                                        (r = 0…3) holds
 *   'H' u32le n | n bytes of shard 1   | shard 2
 * written into a fresh directory, opened as a user would open it. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"

static void write_file(const char *dir, const char *name, const uint8_t *data, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static void remove_file(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static const char *const dcp_files[] = {".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp"};
static const char *const hf_files[] = {"shard-00001-model-00001-of-00001.safetensors",
                                       "shard-00002-model-00001-of-00001.safetensors"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 5 || (data[0] != 'D' && data[0] != 'H')) return 0;
    size_t n = (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 | (size_t)data[4] << 24;
    const uint8_t *first = data + 5;
    size_t left = size - 5;
    if (n > left) n = left;
    char dir[] = "/tmp/ckpt-fuzz-dcp-XXXXXX";
    if (!mkdtemp(dir)) return 0;
    bool dcp = data[0] == 'D';
    const char *const *names = dcp ? dcp_files : hf_files;
    size_t count = dcp ? 5 : 2;
    write_file(dir, names[0], first, n);
    for (size_t i = 1; i < count; i++) write_file(dir, names[i], first + n, left - n);

    ckpt_catalog *cat;
    ckpt_error err;
    if (ckpt_catalog_open(dir, &cat, &err) == CKPT_OK) {
        (void)ckpt_catalog_tree_json(cat);
        for (size_t i = 0; i < ckpt_catalog_tensor_count(cat); i++) {
            const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
            for (size_t k = 0; k < ckpt_catalog_chunk_count(cat, t); k++) {
                ckpt_chunk_info c;
                if (ckpt_catalog_chunk(cat, t, k, &c, &err) != CKPT_OK) abort(); /* every chunk listed is there */
            }
            if (t->nbytes > (1u << 20)) continue;
            unsigned char *buf = malloc(t->nbytes ? t->nbytes : 1);
            ckpt_catalog_read(cat, t, 0, buf, t->nbytes, &err);
            if (t->nbytes > 3) ckpt_catalog_read(cat, t, 1, buf, t->nbytes - 2, &err);
            free(buf);
        }
        ckpt_catalog_close(cat);
    }
    for (size_t i = 0; i < count; i++) remove_file(dir, names[i]);
    rmdir(dir);
    return 0;
}
