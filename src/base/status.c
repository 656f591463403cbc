/* status.c — status names and messages, and filling a ckpt_error. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base.h"

typedef struct status_entry {
    ckpt_status status;
    const char *name;
    const char *message;
} status_entry;

#define ENTRY(code, text) {code, #code, text}
static const status_entry status_table[] = {
    ENTRY(CKPT_OK, "success"),
    ENTRY(CKPT_E_INVALID_ARGUMENT, "invalid argument"),
    ENTRY(CKPT_E_NO_MEMORY, "out of memory"),
    ENTRY(CKPT_E_IO, "input/output error"),
    ENTRY(CKPT_E_NOT_FOUND, "not found"),
    ENTRY(CKPT_E_EXISTS, "destination already exists"),
    ENTRY(CKPT_E_UNKNOWN_FORMAT, "not a checkpoint format ckpt can read"),
    ENTRY(CKPT_E_CANCELLED, "cancelled"),
    ENTRY(CKPT_E_OUT_OF_RANGE, "byte range outside the tensor"),
    ENTRY(CKPT_E_BAD_STATE, "call out of order"),
    ENTRY(CKPT_E_BAD_SIZE, "invalid size"),
    ENTRY(CKPT_E_NO_SPACE, "no space left on device"),
    ENTRY(CKPT_E_TRUNCATED, "file is truncated"),
    ENTRY(CKPT_E_LIMIT, "declared size beyond a safety limit"),
    ENTRY(CKPT_E_INCOMPLETE, "an interrupted commit that cannot be finished here"),
    ENTRY(CKPT_E_NO_MATCH, "a pattern matched no tensor"),
    ENTRY(CKPT_E_UNSAFE_PATH, "a name leads out of the checkpoint's directory, or is not a regular file"),
    ENTRY(CKPT_E_LOCKED, "another process is writing the destination"),
    ENTRY(CKPT_E_HEADER_TOO_SMALL, "file too small for a safetensors header"),
    ENTRY(CKPT_E_HEADER_TOO_LARGE, "safetensors header larger than 100,000,000 bytes"),
    ENTRY(CKPT_E_HEADER_PAST_END, "safetensors header length runs past the end of the file"),
    ENTRY(CKPT_E_HEADER_NOT_UTF8, "safetensors header is not valid UTF-8"),
    ENTRY(CKPT_E_HEADER_NOT_JSON, "safetensors header is not valid JSON"),
    ENTRY(CKPT_E_HEADER_SCHEMA, "safetensors header has an invalid structure"),
    ENTRY(CKPT_E_METADATA_NOT_STRING, "__metadata__ value is not a string"),
    ENTRY(CKPT_E_UNKNOWN_DTYPE, "unknown dtype"),
    ENTRY(CKPT_E_SHAPE_OVERFLOW, "tensor size overflows"),
    ENTRY(CKPT_E_PARTIAL_BYTE, "tensor size is not a whole number of bytes"),
    ENTRY(CKPT_E_SIZE_MISMATCH, "tensor shape and dtype do not match its data_offsets"),
    ENTRY(CKPT_E_DATA_HOLE, "bytes between tensors belong to no tensor"),
    ENTRY(CKPT_E_DATA_OVERLAP, "two tensors claim the same bytes"),
    ENTRY(CKPT_E_TRAILING_BYTES, "bytes after the last tensor"),
    ENTRY(CKPT_E_DUPLICATE_NAME, "duplicate tensor name"),
    ENTRY(CKPT_E_BAD_OFFSETS, "data_offsets end before they begin"),
    ENTRY(CKPT_E_INDEX_INVALID, "invalid checkpoint index"),
    ENTRY(CKPT_E_INDEX_MISMATCH, "index and shards disagree"),
    ENTRY(CKPT_E_ZIP_INVALID, "damaged or inconsistent ZIP archive"),
    ENTRY(CKPT_E_ZIP_UNSUPPORTED, "unsupported ZIP feature"),
    ENTRY(CKPT_E_CHECKSUM, "checksum mismatch"),
    ENTRY(CKPT_E_PICKLE_INVALID, "malformed pickle"),
    ENTRY(CKPT_E_PICKLE_FORBIDDEN, "pickle asks for something outside the allowlist"),
    ENTRY(CKPT_E_PEER_FAILED, "another rank failed"),
    ENTRY(CKPT_E_PEER_TIMEOUT, "a rank did not reach a collective step in time"),
    ENTRY(CKPT_E_COMM, "the communicator failed"),
    ENTRY(CKPT_E_COMM_DATA, "bytes from another rank are malformed, or ranks disagree"),
    ENTRY(CKPT_E_GGUF_VERSION, "unsupported GGUF version"),
    ENTRY(CKPT_E_GGUF_LENGTH, "GGUF string length past the end of the file, or not UTF-8"),
    ENTRY(CKPT_E_GGUF_COUNT, "GGUF count larger than the file can hold"),
    ENTRY(CKPT_E_GGUF_KV_TYPE, "invalid GGUF value type"),
    ENTRY(CKPT_E_GGUF_TENSOR_TYPE, "unknown ggml tensor type"),
    ENTRY(CKPT_E_GGUF_DIMS, "invalid GGUF tensor dimensions"),
    ENTRY(CKPT_E_GGUF_ALIGNMENT, "invalid GGUF alignment"),
    ENTRY(CKPT_E_GGUF_OFFSET, "GGUF tensor data outside the file or overlapping"),
    ENTRY(CKPT_E_GGUF_SPLIT, "GGUF split files do not fit together"),
    ENTRY(CKPT_E_UNSUPPORTED_DTYPE, "a dtype this operation or output format cannot take"),
    ENTRY(CKPT_E_NPY_INVALID, "malformed NumPy .npy header"),
    ENTRY(CKPT_E_MSGPACK_INVALID, "malformed msgpack document, or not a Flax one"),
    ENTRY(CKPT_E_HTTP_STATUS, "the server answered with an HTTP error status"),
    ENTRY(CKPT_E_HTTP_AUTH, "the server refused the credentials"),
    ENTRY(CKPT_E_REMOTE_CHANGED, "the remote file changed while it was read"),
    ENTRY(CKPT_E_NO_RANGES, "the server does not answer byte-range requests"),
    ENTRY(CKPT_E_NETWORK, "network transfer failed"),
    ENTRY(CKPT_E_TIMEOUT, "network transfer timed out"),
    ENTRY(CKPT_E_BAD_RESPONSE, "the server's response contradicts the request"),
    ENTRY(CKPT_E_UNSUPPORTED_SOURCE, "this build cannot read that kind of source"),
    ENTRY(CKPT_E_DCP_METADATA, "DCP .metadata has an invalid structure"),
    ENTRY(CKPT_E_DCP_CHUNK_HOLE, "DCP chunks leave elements of a tensor uncovered"),
    ENTRY(CKPT_E_DCP_CHUNK_OVERLAP, "two DCP chunks claim the same elements"),
    ENTRY(CKPT_E_DCP_CHUNK_BOUNDS, "a DCP chunk reaches outside its tensor"),
    ENTRY(CKPT_E_DCP_CHUNK_MISMATCH, "a DCP chunk's stored data differs from its declared sizes or dtype"),
    ENTRY(CKPT_E_DCP_PATH, "a DCP storage path leaves the checkpoint directory"),
    ENTRY(CKPT_E_DCP_UNSUPPORTED, "DCP storage transform or layout not supported"),
};
#undef ENTRY

static const status_entry *find_status(ckpt_status status) {
    for (size_t i = 0; i < sizeof status_table / sizeof status_table[0]; i++)
        if (status_table[i].status == status) return &status_table[i];
    return NULL;
}

const char *ckpt_status_name(ckpt_status status) {
    const status_entry *e = find_status(status);
    return e ? e->name : "CKPT_E_UNKNOWN_STATUS";
}

const char *ckpt_status_message(ckpt_status status) {
    const status_entry *e = find_status(status);
    return e ? e->message : "unknown status";
}

const char *ckpt_version(void) { return CKPT_VERSION_STRING; }

void ckpt_error_clear(ckpt_error *err) {
    if (!err) return;
    err->status = CKPT_OK;
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

static void fill(ckpt_error *err, ckpt_status status, int sys_errno, const char *path,
                 const char *tensor, int64_t offset, const char *fmt, va_list ap) {
    copy_field(err->path, sizeof err->path, path);
    copy_field(err->tensor, sizeof err->tensor, tensor);
    err->status = status;
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
    return status;
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
