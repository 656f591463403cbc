/* Fuzz target: the ZIP reader, every entry read back. */
#include <stdlib.h>

#include "formats/zip.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = fuzz_memfile(data, size);
    if (fd < 0) return 0;
    ckpt__arena arena = {0};
    ckpt__zip zip;
    ckpt_error err;
    if (ckpt__zip_open(fd, size, "fuzz.zip", (size & 1) != 0, &arena, &zip, &err) == CKPT_OK) {
        for (size_t i = 0; i < zip.count; i++) {
            char *text = NULL;
            if (ckpt__zip_read_entry(fd, &zip.entries[i], "fuzz.zip", 1 << 20, &text, &err) == CKPT_OK) free(text);
            unsigned char buf[64];
            uint64_t n = zip.entries[i].size < sizeof buf ? zip.entries[i].size : sizeof buf;
            if (zip.entries[i].method == 8)
                (void)ckpt__zip_inflate_range(fd, zip.entries[i].data_offset, zip.entries[i].comp_size, "fuzz.zip",
                                              zip.entries[i].name, 0, buf, n, &err);
        }
        ckpt__zip_close(&zip);
    }
    ckpt__arena_free(&arena);
    close(fd);
    return 0;
}
