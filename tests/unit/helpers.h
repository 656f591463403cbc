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

#include "base/base.h"
#include "ckpt.h"

/* A fresh directory under $TMPDIR, removed (recursively) by scratch_free. */
char *scratch_dir(void);
void scratch_free(char *dir);
/* A call that filled `err` failed with `code` (a status, or a detail as
 * CKPT__D(NAME)): it returned the code's category, and err.detail is the
 * detail (CKPT_D_NONE for a status). */
#define assert_code(got, err, code)                                                                   \
    do {                                                                                               \
        ckpt_status want_ = (code);                                                                    \
        assert_int_equal((got), ckpt__category(want_));                                                \
        if (want_) assert_int_equal((err).detail, ckpt__category(want_) != want_ ? (ckpt_detail)want_ : CKPT_D_NONE); \
    } while (0)

/* What a failure names: its detail as a code (CKPT__D(NAME)), else its
 * status; a code whose category is not `st` is returned as is, so that a
 * comparison with the expected code fails. */
static inline ckpt_status code_of(ckpt_status st, const ckpt_error *err) {
    return err->detail && ckpt_detail_status(err->detail) == st ? (ckpt_status)err->detail : st;
}

/* The name of such a code: "CKPT_D_DATA_HOLE", "CKPT_E_IO". */
static inline const char *code_name(ckpt_status code) {
    return ckpt__category(code) != code ? ckpt_detail_name((ckpt_detail)code) : ckpt_status_name(code);
}

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
