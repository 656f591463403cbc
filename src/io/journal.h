/*
 * journal.h — the journal of a commit (.ckpt-commit.json, see commit.h),
 * parsed and checked from its bytes alone, without touching the file
 * system, so that it can be fuzzed (tests/fuzz/fuzz_journal.c).
 *
 * A journal is untrusted input: a checkpoint directory from elsewhere (a
 * download, a tarball, a clone) may carry one.  It is executed only when it
 * is provably a journal ckpt wrote (the rules below, then commit.c's checks
 * of the directory); anything else is refused as a whole and left alone.
 * Depends on base and io/file.
 */
#ifndef CKPT_IO_JOURNAL_H
#define CKPT_IO_JOURNAL_H

#include "../base/base.h"

/* The journal's name inside a directory. */
#define CKPT__JOURNAL ".ckpt-commit.json"

/* The final name a commit's staging directory is made for (file.c's
 * temporary directory naming then gives "..commit.ckpt-tmp-<pid>-d<n>"). */
#define CKPT__STAGE_BASE ".commit"

/* Journals larger than this, or with more entries, are not ckpt's (one
 * entry per file of a checkpoint, a name at most NAME_MAX bytes; the Hub
 * holds at most 100,000 files per repository).  The bounds also bound the
 * work a planted journal costs a read: one fstatat or two per entry. */
#define CKPT__JOURNAL_MAX (16u << 20)
#define CKPT__JOURNAL_MAX_ENTRIES 100000u

/* Which names a journal may remove or publish: true for a name an output
 * format owns (formats/output.h: ckpt__output_owns_any).  Passed in by the
 * layers above, which know the formats. */
typedef bool (*ckpt__name_rule)(const char *name);

typedef struct ckpt__journal {
    const char *stage;                /* the staging directory's name (points into the parsed bytes) */
    uint64_t stage_at;                /* byte offset of its field */
    const char **remove, **publish;   /* names, in order (into the bytes) */
    uint64_t *remove_at, *publish_at; /* byte offsets of their fields */
    size_t remove_count, publish_count;
} ckpt__journal;

/*
 * Parses a journal's `len` bytes (which must outlive *out).  The grammar,
 * every field ending in one NUL byte (so any file name fits), nothing
 * after the last:
 *     "ckpt-commit-1" "stage" STAGE ("remove" NAME)* ("publish" NAME)* "end"
 * and the rules on the names:
 *   - STAGE is exactly the name ckpt gives a commit's staging directory:
 *     "..commit.ckpt-tmp-<pid>-d<n>" (ckpt__temp_dir_name_is);
 *   - each NAME is a plain name — not empty, not "." or "..", no '/', at
 *     most NAME_MAX bytes — that `owned` accepts;
 *   - at most CKPT__JOURNAL_MAX_ENTRIES entries.
 * On success *out holds the fields (free with ckpt__journal_free).  A
 * broken rule gives CKPT_E_INCOMPLETE naming `path` (for messages only),
 * with err->offset the byte offset of the field at fault and the rule in
 * the message; *out is then empty.
 */
CKPT__HIDDEN ckpt_status ckpt__journal_parse(const char *bytes, size_t len, ckpt__name_rule owned, const char *path,
                                             ckpt__journal *out, ckpt_error *err);

/* Frees what ckpt__journal_parse allocated (not the bytes). */
CKPT__HIDDEN void ckpt__journal_free(ckpt__journal *j);

/* CKPT_E_INCOMPLETE for journal `path`: "not a journal ckpt wrote: <why>
 * '<name>'" (name may be NULL; control bytes shown as \xNN) at byte `at`. */
CKPT__HIDDEN ckpt_status ckpt__journal_refuse(ckpt_error *err, const char *path, uint64_t at, const char *why,
                                              const char *name);

/* The journal's bytes for a commit (what ckpt__journal_parse reads back),
 * appended to `b`. */
CKPT__HIDDEN void ckpt__journal_encode(ckpt__buf *b, const char *stage, const char *const *remove, size_t remove_count,
                                       const char *const *publish, size_t publish_count);

#endif
