/* status.c — status names and messages, and filling a ckpt_error. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base.h"

/* Built from the one table, ckpt_status.h. */
#define NAME_CASE(name, number, ...) case number: return #name;
#define STATUS_MESSAGE_CASE(name, number, message) case number: return message;
#define DETAIL_MESSAGE_CASE(name, number, category, message) case number: return message;

const char *ckpt_status_name(ckpt_status status) {
    switch ((int)status) { CKPT_CATEGORIES(NAME_CASE) default: return "CKPT_E_UNKNOWN_STATUS"; }
}

const char *ckpt_detail_name(ckpt_detail detail) {
    switch ((int)detail) { CKPT_DETAILS(NAME_CASE) default: return "CKPT_D_UNKNOWN_DETAIL"; }
}

const char *ckpt_status_message(ckpt_status status) {
    switch ((int)status) { CKPT_CATEGORIES(STATUS_MESSAGE_CASE) default: return "unknown status"; }
}

const char *ckpt_detail_message(ckpt_detail detail) {
    switch ((int)detail) { CKPT_DETAILS(DETAIL_MESSAGE_CASE) default: return "unknown detail"; }
}

/* One switch over both lists: two codes with one number are duplicate case
 * labels, which do not compile (CKPT_D_NONE shares CKPT_OK's 0: left out). */
#define SELF_CASE(name, number, message) case number: return code;
#define CATEGORY_CASE(name, number, category, message) case number ? number : -1: return category;
ckpt_status ckpt__category(ckpt_status code) {
    switch ((int)code) { CKPT_CATEGORIES(SELF_CASE) CKPT_DETAILS(CATEGORY_CASE) default: return code; }
}

ckpt_status ckpt_detail_status(ckpt_detail detail) {
    ckpt_status category = ckpt__category((ckpt_status)detail);
    return category == (ckpt_status)detail ? CKPT_OK : category;
}

ckpt_status ckpt__code_of(const ckpt_error *e, ckpt_status st) {
    return e && e->detail && ckpt_detail_status(e->detail) == st ? (ckpt_status)e->detail : st;
}

const char *ckpt_version(void) { return CKPT_VERSION_STRING; }

void ckpt_error_clear(ckpt_error *err) {
    if (!err) return;
    err->status = CKPT_OK;
    err->detail = CKPT_D_NONE;
    err->sys_errno = 0;
    err->offset = -1;
    err->path[0] = err->tensor[0] = err->message[0] = '\0';
}

static void copy_field(char *dst, size_t cap, const char *src) {
    if (!src) src = "";
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static void fill(ckpt_error *err, ckpt_status code, int sys_errno, const char *path,
                 const char *tensor, int64_t offset, const char *fmt, va_list ap) {
    copy_field(err->path, sizeof err->path, path);
    copy_field(err->tensor, sizeof err->tensor, tensor);
    err->status = ckpt__category(code);
    err->detail = err->status != code ? (ckpt_detail)code : CKPT_D_NONE;
    err->sys_errno = sys_errno;
    err->offset = offset;

    /* "<path>: tensor '<name>': at byte <offset>: <detail>" — each part only
     * when known, so the sentence always reads on its own. */
    char detail[1024];
    vsnprintf(detail, sizeof detail, fmt, ap);
    size_t cap = sizeof err->message, n = 0;
    char *m = err->message;
    m[0] = '\0';
#define APPEND(...)                                                           \
    do {                                                                      \
        if (n < cap) {                                                        \
            int w = snprintf(m + n, cap - n, __VA_ARGS__);                    \
            if (w > 0) n += (size_t)w < cap - n ? (size_t)w : cap - n - 1;    \
        }                                                                     \
    } while (0)
    if (path && *path) APPEND("%s: ", path);
    if (tensor && *tensor) APPEND("tensor '%s': ", tensor);
    if (offset >= 0) APPEND("at byte %lld: ", (long long)offset);
    APPEND("%s", detail);
    if (sys_errno) APPEND(" (%s)", strerror(sys_errno));
#undef APPEND
}

ckpt_status ckpt__fail(ckpt_error *err, ckpt_status status, const char *path, const char *tensor,
                       int64_t offset, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        fill(err, status, 0, path, tensor, offset, fmt, ap);
        va_end(ap);
    }
    return ckpt__category(status);
}

ckpt_status ckpt__fail_errno(ckpt_error *err, int sys_errno, const char *path, int64_t offset,
                             const char *fmt, ...) {
    ckpt_status status = CKPT_E_IO;
    if (sys_errno == ENOSPC || sys_errno == EDQUOT) status = CKPT_E_NO_SPACE;
    else if (sys_errno == ENOENT || sys_errno == ENOTDIR) status = CKPT_E_NOT_FOUND;
    else if (sys_errno == EEXIST) status = CKPT_E_EXISTS;
    else if (sys_errno == ENOMEM) status = CKPT_E_NO_MEMORY;
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        fill(err, status, sys_errno, path, NULL, offset, fmt, ap);
        va_end(ap);
    }
    return status;
}

ckpt_status ckpt__oom(ckpt_error *err, const char *path, const char *what) {
    if (what) return ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory for %s", what);
    return ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
}

ckpt_status ckpt__error_in_tensor(ckpt_error *err, ckpt_status status, const char *tensor) {
    status = ckpt__category(status);
    if (!err || !tensor || !*tensor || err->tensor[0]) return status;
    copy_field(err->tensor, sizeof err->tensor, tensor);
    /* Insert "tensor '<name>': " after the "<path>: " that starts the
     * message, as fill would have written it. */
    char rest[sizeof err->message];
    size_t skip = 0, plen = strlen(err->path);
    if (plen && !strncmp(err->message, err->path, plen) && !strncmp(err->message + plen, ": ", 2)) skip = plen + 2;
    copy_field(rest, sizeof rest, err->message + skip);
    snprintf(err->message + skip, sizeof err->message - skip, "tensor '%s': %s", tensor, rest);
    return status;
}
