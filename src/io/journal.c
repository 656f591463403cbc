/* journal.c — see journal.h. */
#include "journal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"

static const char MAGIC[] = "ckpt-commit-1";

/* One NUL-terminated field after another. */
typedef struct fields {
    const char *bytes;
    size_t len, at;
} fields;

/* The next field and its offset; false at the end of the bytes or when the
 * last field has no NUL (*at then names where it starts). */
static bool next_field(fields *f, const char **s, uint64_t *at) {
    *at = f->at;
    if (f->at >= f->len) return false;
    const char *nul = memchr(f->bytes + f->at, '\0', f->len - f->at);
    if (!nul) return false;
    *s = f->bytes + f->at;
    f->at = (size_t)(nul - f->bytes) + 1;
    return true;
}

/* Not empty, not "." or "..", no '/', at most NAME_MAX bytes. */
static bool plain_name(const char *name) {
    size_t n = strlen(name);
    return n > 0 && n <= NAME_MAX && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
}

void ckpt__journal_free(ckpt__journal *j) {
    free(j->remove);
    free(j->publish);
    free(j->remove_at);
    free(j->publish_at);
    memset(j, 0, sizeof *j);
}

/* `name` as a message shows it: control bytes as \xNN, at most 160 bytes. */
static void shown(const char *name, char *out, size_t cap) {
    size_t k = 0;
    for (const unsigned char *s = (const unsigned char *)name; *s && k + 5 < cap && k < 160; s++) {
        if (*s < 0x20 || *s == 0x7f)
            k += (size_t)snprintf(out + k, cap - k, "\\x%02x", *s);
        else
            out[k++] = (char)*s;
    }
    out[k] = '\0';
}

ckpt_status ckpt__journal_refuse(ckpt_error *err, const char *path, uint64_t at, const char *why, const char *name) {
    char name_shown[200] = "";
    if (name) shown(name, name_shown, sizeof name_shown);
    return ckpt__fail(err, CKPT_E_INCOMPLETE, path, NULL, (int64_t)at, "not a journal ckpt wrote: %s%s%s%s", why,
                      name ? " '" : "", name_shown, name ? "'" : "");
}

ckpt_status ckpt__journal_parse(const char *bytes, size_t len, ckpt__name_rule owned, const char *path,
                                ckpt__journal *out, ckpt_error *err) {
    memset(out, 0, sizeof *out);
    fields f = {bytes, len, 0};
    const char *s = NULL;
    uint64_t at;
    if (!next_field(&f, &s, &at) || strcmp(s, MAGIC))
        return ckpt__journal_refuse(err, path, at, "it does not start with \"ckpt-commit-1\"", NULL);
    if (!next_field(&f, &s, &at) || strcmp(s, "stage"))
        return ckpt__journal_refuse(err, path, at, "no \"stage\" field", NULL);
    if (!next_field(&f, &s, &at))
        return ckpt__journal_refuse(err, path, at, "the stage's name is missing or unterminated", NULL);
    if (!ckpt__temp_dir_name_is(s, CKPT__STAGE_BASE))
        return ckpt__journal_refuse(err, path, at, "the stage is not named as ckpt names a commit's staging directory",
                                    s);
    out->stage = s;
    out->stage_at = at;
    /* Each entry is two fields, 9 bytes at least ("remove" NUL x NUL):
     * arrays for what the bytes can hold, allocated once. */
    size_t cap = len / 9 < CKPT__JOURNAL_MAX_ENTRIES ? len / 9 + 1 : CKPT__JOURNAL_MAX_ENTRIES;
    out->remove = ckpt__malloc(cap * sizeof *out->remove);
    out->publish = ckpt__malloc(cap * sizeof *out->publish);
    out->remove_at = ckpt__malloc(cap * sizeof *out->remove_at);
    out->publish_at = ckpt__malloc(cap * sizeof *out->publish_at);
    if (!out->remove || !out->publish || !out->remove_at || !out->publish_at) {
        ckpt__journal_free(out);
        return ckpt__oom(err, path, NULL);
    }
    ckpt_status st = CKPT_OK;
    bool ended = false;
    while (st == CKPT_OK && !ended) {
        const char *kind;
        if (!next_field(&f, &kind, &at)) {
            st = ckpt__journal_refuse(err, path, at, "it ends before its \"end\" field (an unfinished write)", NULL);
            break;
        }
        bool is_remove = !strcmp(kind, "remove"), is_publish = !strcmp(kind, "publish");
        if (!strcmp(kind, "end")) {
            ended = true;
        } else if (!is_remove && !is_publish) {
            st =
                ckpt__journal_refuse(err, path, at, "a field that is none of \"remove\", \"publish\" or \"end\"", NULL);
        } else if (out->remove_count + out->publish_count == cap) {
            st =
                ckpt__journal_refuse(err, path, at, "more entries than ckpt writes (or than its bytes can hold)", NULL);
        } else if (is_remove && out->publish_count) {
            st = ckpt__journal_refuse(err, path, at, "a \"remove\" after a \"publish\" (ckpt writes removals first)",
                                      NULL);
        } else if (!next_field(&f, &s, &at)) {
            st = ckpt__journal_refuse(err, path, at, "an entry without its name", NULL);
        } else if (!plain_name(s)) {
            st = ckpt__journal_refuse(err, path, at,
                                      "a name that is not a plain file name in the directory (empty, \".\", \"..\", "
                                      "with a '/', or too long)",
                                      s);
        } else if (!owned(s)) {
            st = ckpt__journal_refuse(err, path, at,
                                      "a name no checkpoint format ckpt writes owns (recovery touches only "
                                      "checkpoint files)",
                                      s);
        } else if (is_remove) {
            out->remove_at[out->remove_count] = at;
            out->remove[out->remove_count++] = s;
        } else {
            out->publish_at[out->publish_count] = at;
            out->publish[out->publish_count++] = s;
        }
    }
    if (st == CKPT_OK && f.at != len) st = ckpt__journal_refuse(err, path, f.at, "bytes after its \"end\" field", NULL);
    if (st) ckpt__journal_free(out);
    return st;
}

static void field(ckpt__buf *b, const char *s) {
    ckpt__buf_append(b, s, strlen(s) + 1);
}

void ckpt__journal_encode(ckpt__buf *b, const char *stage, const char *const *remove, size_t remove_count,
                          const char *const *publish, size_t publish_count) {
    field(b, MAGIC);
    field(b, "stage");
    field(b, stage);
    for (size_t i = 0; i < remove_count; i++)
        field(b, "remove"), field(b, remove[i]);
    for (size_t i = 0; i < publish_count; i++)
        field(b, "publish"), field(b, publish[i]);
    field(b, "end");
}
