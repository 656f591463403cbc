/* Fuzz target: the ZIP reader, every entry read back. */
#include <stdlib.h>

#include "formats/zip.h"
#include "io/source.h"
#include "transform/inflate.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt__source *fd;
    ckpt_error err;
    if (ckpt__source_memory("fuzz.zip", data, size, &fd, &err) != CKPT_OK) return 0;
    ckpt__arena arena = {0};
    ckpt__zip zip;
    if (ckpt__zip_open(fd, (size & 1) != 0, &arena, &zip, &err) == CKPT_OK) {
        for (size_t i = 0; i < zip.count; i++) {
            char *text = NULL;
            if (ckpt__zip_read_entry(fd, &zip.entries[i], 1 << 20, &text, &err) == CKPT_OK) free(text);
            unsigned char buf[64];
            uint64_t n = zip.entries[i].size < sizeof buf ? zip.entries[i].size : sizeof buf;
            ckpt__inflater *f = NULL;
            if (zip.entries[i].method == 8 &&
                ckpt__inflater_create(fd, zip.entries[i].data_offset, zip.entries[i].comp_size, &f, &err) == CKPT_OK) {
                (void)ckpt__inflater_read(f, 0, buf, n, zip.entries[i].name, &err);
                (void)ckpt__inflater_read(f, n / 2, buf, n - n / 2, zip.entries[i].name, &err); /* behind: restarts */
            }
            ckpt__inflater_free(f);
        }
        ckpt__zip_close(&zip);
    }
    ckpt__arena_free(&arena);
    ckpt__source_close(fd);
    return 0;
}
