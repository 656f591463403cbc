/* Fuzz target: the commit journal's parser (src/io/journal.c) — bytes
 * from a checkpoint directory, which may come from anywhere.  What it
 * accepts must keep every rule recovery relies on (checked here again,
 * independently): the stage named exactly as ckpt names a commit's stage,
 * each name plain and owned by an output format, every pointer inside the
 * input; and an accepted journal is exactly the canonical encoding of what
 * it says (no byte ignored, no second reading).  What it refuses is
 * CKPT_E_INCOMPLETE at a byte offset inside the input. */
#include <string.h>

#include "formats/output.h"
#include "fuzz_common.h"
#include "io/file.h"
#include "io/journal.h"

static bool inside(const char *s, const char *base, size_t size) {
    return s >= base && s < base + size && s + strlen(s) < base + size;
}

static bool plain_and_owned(const char *name, const char *base, size_t size) {
    return inside(name, base, size) && *name && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..") &&
           ckpt__output_owns_any(name);
}

static void check_accepted(const ckpt__journal *j, const char *copy, size_t size) {
    if (!inside(j->stage, copy, size) || !ckpt__temp_dir_name_is(j->stage, CKPT__STAGE_BASE) || strchr(j->stage, '/'))
        abort();
    for (size_t i = 0; i < j->remove_count; i++)
        if (!plain_and_owned(j->remove[i], copy, size) || j->remove_at[i] >= size) abort();
    for (size_t i = 0; i < j->publish_count; i++)
        if (!plain_and_owned(j->publish[i], copy, size) || j->publish_at[i] >= size) abort();
    ckpt__buf again = {0};
    ckpt__journal_encode(&again, j->stage, j->remove, j->remove_count, j->publish, j->publish_count);
    if (!again.failed && (again.len != size || memcmp(again.data, copy, size))) abort();
    free(again.data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* An exact-size copy: a read past the end shows under ASan. */
    char *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    ckpt__journal j;
    ckpt_error err;
    ckpt_error_clear(&err);
    if (ckpt__journal_parse(copy, size, ckpt__output_owns_any, "fuzz", &j, &err) == CKPT_OK) {
        check_accepted(&j, copy, size);
        ckpt__journal_free(&j);
    } else if (err.status != CKPT_E_NO_MEMORY &&
               (err.status != CKPT_E_INCOMPLETE || err.offset < 0 || (uint64_t)err.offset > size || j.remove)) {
        abort();
    }
    free(copy);
    return 0;
}
