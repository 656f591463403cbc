/* Fuzz target: tensors described by the input are written with the
 * streaming writer (single file or shards) and read back identical. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "fuzz_common.h"

static void remove_dir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    char dir[] = "/tmp/ckpt-fuzz-rt-XXXXXX";
    if (!mkdtemp(dir)) return 0;
    char out[256];
    bool sharded = data[0] & 1;
    snprintf(out, sizeof out, sharded ? "%s/ckpt" : "%s/m.safetensors", dir);
    ckpt_writer_options opt;
    ckpt_writer_options_init(&opt);
    opt.no_sync = 1;
    opt.max_shard_size = sharded ? 1 + data[1] * 4u : 0;
    ckpt_writer *w;
    ckpt_error err;
    if (ckpt_writer_create(out, &opt, &w, &err) != CKPT_OK) abort();
    /* Each 4 input bytes: dtype, two dims, a name byte. */
    size_t count = 0, pos = 2;
    uint64_t shapes[64][2];
    char names[64][8];
    ckpt_dtype dtypes[64];
    while (pos + 4 <= size && count < 64) {
        ckpt_dtype d = (ckpt_dtype)(1 + data[pos] % (CKPT_DTYPE_COUNT - 1));
        shapes[count][0] = data[pos + 1] % 5;
        shapes[count][1] = (data[pos + 2] % 4) * 2;
        snprintf(names[count], sizeof names[count], "t%02x%zu", data[pos + 3], count);
        dtypes[count] = d;
        if (ckpt_writer_add_tensor(w, names[count], d, 2, shapes[count], NULL, &err) == CKPT_OK) count++;
        pos += 4;
    }
    if (ckpt_writer_begin(w, &err) != CKPT_OK) abort();
    for (size_t i = 0; i < count; i++) {
        uint64_t bits = (uint64_t)ckpt_dtype_bits(dtypes[i]) * shapes[i][0] * shapes[i][1];
        unsigned char buf[512];
        for (uint64_t k = 0; k < bits / 8; k++) buf[k] = (unsigned char)(k * 13 + i);
        if (ckpt_writer_write(w, i, buf, bits / 8, &err) != CKPT_OK) abort();
    }
    if (ckpt_writer_commit(w, &err) != CKPT_OK) abort();
    ckpt_writer_free(w);
    ckpt_catalog *cat;
    if (ckpt_catalog_open(out, &cat, &err) != CKPT_OK) abort();
    if (ckpt_catalog_tensor_count(cat) != count) abort();
    for (size_t i = 0; i < count; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_find(cat, names[i]);
        unsigned char buf[512];
        if (!t || t->dtype != dtypes[i] || ckpt_catalog_read(cat, t, 0, buf, t->nbytes, &err) != CKPT_OK) abort();
        for (uint64_t k = 0; k < t->nbytes; k++)
            if (buf[k] != (unsigned char)(k * 13 + i)) abort();
    }
    ckpt_catalog_close(cat);
    remove_dir(dir);
    return 0;
}
