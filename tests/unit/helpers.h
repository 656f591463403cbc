/* helpers.h — scratch directories and hand-made safetensors files for the
 * unit tests. */
#ifndef CKPT_TEST_HELPERS_H
#define CKPT_TEST_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "ckpt.h"

/* A fresh directory under $TMPDIR, removed (recursively) by scratch_free. */
char *scratch_dir(void);
void scratch_free(char *dir);
/* dir + "/" + name, in a static rotating buffer (valid for a few calls). */
const char *in_dir(const char *dir, const char *name);
void write_bytes(const char *path, const void *data, size_t n);
/* Writes u64 LE len(header) + header + `data_len` bytes of pattern data
 * (byte i = i * 7 + 1). */
void write_safetensors(const char *path, const char *header, size_t data_len);
/* Reads a whole file (malloc'ed) or returns NULL. */
char *read_all(const char *path, size_t *n);
int file_exists(const char *path);
/* Number of entries in a directory, "." and ".." excluded. */
int dir_entries(const char *dir);
/* The whole catalog converted (a plan with no rule, ckpt_convert_plan),
 * with `progress` and `user` in a copy of `options` (which may be NULL). */
ckpt_status convert_all(ckpt_catalog *cat, const char *dst, const ckpt_writer_options *options,
                        ckpt_progress_fn progress, void *user, ckpt_error *err);

#endif
