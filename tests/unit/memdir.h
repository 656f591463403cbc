/* memdir.h — a source written against the public interface
 * (ckpt_source_ops): the regular files of a local directory, held in
 * memory under the name "<root>/<file>", with the faults and lies the
 * tests ask of it. */
#ifndef CKPT_TEST_MEMDIR_H
#define CKPT_TEST_MEMDIR_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"

typedef struct memfile {
    char *name; /* "<root>/<file>" */
    unsigned char *data;
    size_t size;
} memfile;

typedef struct memdir {
    char *root;
    memfile *files;
    size_t count;
    /* Faults and lies: a read of `fail_file` covering byte `fail_offset`
     * fails (CKPT_E_IO); sizes are told `short_by` bytes short; `extra` is
     * listed besides the files. */
    const char *fail_file;
    uint64_t fail_offset;
    uint64_t short_by;
    const char *extra;
    int listings; /* calls of list */
} memdir;

/* Loads the regular files of `local_dir` as directory `root`. */
void memdir_load(memdir *d, const char *root, const char *local_dir);
void memdir_free(memdir *d);

extern const ckpt_source_ops memdir_ops; /* user: a memdir */

#endif
