/* recover.c — ckpt_commit_recover: finishing a commit a crash cut short
 * (io/commit.h), with the output formats' rule on the names a journal may
 * touch (formats/output.h). */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "formats/output.h"
#include "io/commit.h"
#include "io/file.h"

ckpt_status ckpt_commit_recover(const char *dir, unsigned flags, int *found, ckpt_error *err) {
    if (found) *found = 0;
    if (!dir || !*dir) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "dir is required");
    if (flags & ~(unsigned)CKPT_RECOVER_CHECK)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, dir, NULL, -1, "unknown flags 0x%x", flags);
    struct stat sb;
    if (stat(dir, &sb) != 0) return ckpt__fail_errno(err, errno, dir, -1, "cannot open");
    char *d = S_ISDIR(sb.st_mode) ? ckpt__strdup(dir) : ckpt__path_dirname(dir); /* a file: its directory */
    if (!d) return ckpt__oom(err, dir, NULL);
    bool was = false;
    ckpt_status st = ckpt__commit_recover(d, ckpt__output_owns_any,
                                          flags & CKPT_RECOVER_CHECK ? CKPT__RECOVER_CHECK : CKPT__RECOVER, &was, err);
    free(d);
    if (found) *found = was;
    return st;
}
