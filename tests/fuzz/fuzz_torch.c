/* Fuzz target: a whole torch.save file (zip or legacy) through the
 * catalog: every tensor read, the tree rendered. */
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = fuzz_memfile(data, size);
    if (fd < 0) return 0;
    char path[64];
    fuzz_fd_path(fd, path, sizeof path);
    ckpt_catalog *cat;
    ckpt_error err;
    if (ckpt_catalog_open(path, &cat, &err) == CKPT_OK) {
        for (size_t i = 0; i < ckpt_catalog_tensor_count(cat); i++) {
            const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
            if (t->nbytes > (1u << 20)) continue;
            unsigned char *buf = malloc(t->nbytes ? t->nbytes : 1);
            (void)ckpt_catalog_read(cat, t, 0, buf, t->nbytes, &err);
            if (t->nbytes > 3) (void)ckpt_catalog_read(cat, t, 1, buf, t->nbytes - 2, &err);
            free(buf);
        }
        const char *tree = ckpt_catalog_tree_json(cat);
        if (tree && strlen(tree) == (size_t)-1) abort();
        ckpt_catalog_close(cat);
    }
    close(fd);
    return 0;
}
