/*
 * ckpt_status.h — the one table of ckpt's statuses, included by ckpt.h (see
 * "Statuses" there): the categories, X(name, number, message), and the
 * details, X(name, number, category, message).  Numbers are stable, and no
 * category shares its number with a detail.  The C enums, the names, the
 * messages and each detail's category are built from it; the Python, Rust
 * and Elixir bindings read or check it too.
 */
#ifndef CKPT_STATUS_H
#define CKPT_STATUS_H

#define CKPT_CATEGORIES(X)                                                                                  \
    X(CKPT_OK, 0, "success")                                                                                \
    X(CKPT_E_INVALID_ARGUMENT, 1, "invalid argument") /* a NULL pointer, an unknown option, misuse */       \
    X(CKPT_E_NO_MEMORY, 2, "out of memory")                                                                 \
    X(CKPT_E_IO, 3, "input/output error") /* a system call failed (errno in the error) */                   \
    X(CKPT_E_NOT_FOUND, 4, "not found") /* no such file, directory or tensor */                             \
    X(CKPT_E_EXISTS, 5, "destination already exists")                                                       \
    X(CKPT_E_UNKNOWN_FORMAT, 6, "not a checkpoint format ckpt can read")                                    \
    X(CKPT_E_CANCELLED, 7, "cancelled") /* a progress callback asked to stop */                             \
    X(CKPT_E_OUT_OF_RANGE, 8, "byte range outside the tensor")                                              \
    X(CKPT_E_BAD_STATE, 9, "call out of order") /* e.g. data before begin */                                \
    X(CKPT_E_BAD_SIZE, 10, "invalid size") /* a size string such as "5GB" that cannot be parsed */          \
    X(CKPT_E_NO_SPACE, 11, "no space left on device") /* ENOSPC / EDQUOT */                                 \
    X(CKPT_E_TRUNCATED, 12, "file is truncated") /* the file ends before the data it declares */            \
    /* also metadata beyond 8 times the input plus 64 MiB (an amplification: the error names the byte) */   \
    X(CKPT_E_LIMIT, 13, "declared size beyond a safety limit")                                              \
    X(CKPT_E_INCOMPLETE, 14, "an interrupted commit that cannot be finished here")                          \
    X(CKPT_E_NO_MATCH, 15, "a pattern matched no tensor") /* or a plan selects none */                      \
    /* a symlink, "..", an absolute name; a FIFO, a device */                                               \
    X(CKPT_E_UNSAFE_PATH, 16, "a name leads out of the checkpoint's directory, or is not a regular file")   \
    X(CKPT_E_LOCKED, 17, "another process is writing the destination") /* the error names it */             \
    X(CKPT_E_CORRUPT, 18, "the file breaks its format's rules") /* the detail says which */                 \
    /* Valid, but a feature, dtype, transform or source kind ckpt or the output does not take (named) */    \
    X(CKPT_E_UNSUPPORTED, 19, "something ckpt or the output format does not support")                       \
    X(CKPT_E_FORBIDDEN, 36, "pickle asks for something outside the allowlist") /* nothing is executed */    \
    X(CKPT_E_CHECKSUM, 37, "checksum mismatch") /* data does not match its recorded checksum */             \
    /* Remote sources (http://, https://, s3://); errors name the URL (never its credentials) */            \
    X(CKPT_E_REMOTE, 38, "the server answered with an error, or contradicted itself")                       \
    X(CKPT_E_AUTH, 39, "the server refused the credentials") /* 401, 403: fix the credentials */            \
    X(CKPT_E_NETWORK, 42, "network transfer failed") /* after retries: try again later */                   \
    X(CKPT_E_TIMEOUT, 43, "timed out") /* a transfer after retries, or a collective step */                 \
    /* Collective operations (many processes, see ckpt_comm) */                                             \
    X(CKPT_E_PEER, 44, "another rank or the communicator failed")

#define CKPT_DETAILS(X)                                                                                     \
    X(CKPT_D_NONE, 0, CKPT_OK, "no detail")                                                                 \
    /* safetensors header validation (huggingface/safetensors rules) */                                     \
    X(CKPT_D_HEADER_TOO_SMALL, 20, CKPT_E_CORRUPT, "file too small for a safetensors header")               \
    X(CKPT_D_HEADER_TOO_LARGE, 21, CKPT_E_CORRUPT, "safetensors header larger than 100,000,000 bytes")      \
    X(CKPT_D_HEADER_PAST_END, 22, CKPT_E_CORRUPT, "safetensors header length runs past the end of the file") \
    X(CKPT_D_HEADER_NOT_UTF8, 23, CKPT_E_CORRUPT, "safetensors header is not valid UTF-8")                  \
    X(CKPT_D_HEADER_NOT_JSON, 24, CKPT_E_CORRUPT, "safetensors header is not valid JSON")                   \
    X(CKPT_D_HEADER_SCHEMA, 25, CKPT_E_CORRUPT, "safetensors header has an invalid structure")              \
    X(CKPT_D_METADATA_NOT_STRING, 26, CKPT_E_CORRUPT, "__metadata__ value is not a string")                 \
    X(CKPT_D_UNKNOWN_DTYPE, 27, CKPT_E_UNSUPPORTED, "unknown dtype")                                        \
    X(CKPT_D_SHAPE_OVERFLOW, 28, CKPT_E_CORRUPT, "tensor size overflows")                                   \
    X(CKPT_D_PARTIAL_BYTE, 29, CKPT_E_CORRUPT, "tensor size is not a whole number of bytes")                \
    X(CKPT_D_SIZE_MISMATCH, 30, CKPT_E_CORRUPT, "tensor shape and dtype do not match its data_offsets")     \
    X(CKPT_D_DATA_HOLE, 31, CKPT_E_CORRUPT, "bytes between tensors belong to no tensor")                    \
    X(CKPT_D_DATA_OVERLAP, 32, CKPT_E_CORRUPT, "two tensors claim the same bytes")                          \
    X(CKPT_D_TRAILING_BYTES, 33, CKPT_E_CORRUPT, "bytes after the last tensor")                             \
    X(CKPT_D_DUPLICATE_NAME, 34, CKPT_E_CORRUPT, "duplicate tensor name")                                   \
    X(CKPT_D_BAD_OFFSETS, 35, CKPT_E_CORRUPT, "data_offsets end before they begin")                         \
    X(CKPT_D_INDEX_INVALID, 40, CKPT_E_CORRUPT, "invalid checkpoint index")                                 \
    X(CKPT_D_INDEX_MISMATCH, 41, CKPT_E_CORRUPT, "index and shards disagree")                               \
    /* ZIP archives (torch.save files) */                                                                   \
    X(CKPT_D_ZIP_INVALID, 50, CKPT_E_CORRUPT, "damaged or inconsistent ZIP archive")                        \
    X(CKPT_D_ZIP_UNSUPPORTED, 51, CKPT_E_UNSUPPORTED, "unsupported ZIP feature") /* encrypted, multi-disk */ \
    X(CKPT_D_CHECKSUM, 52, CKPT_E_CHECKSUM, "checksum mismatch")                                            \
    /* Pickles (torch.save files): nothing is ever executed */                                              \
    X(CKPT_D_PICKLE_INVALID, 60, CKPT_E_CORRUPT, "malformed pickle")                                        \
    X(CKPT_D_PICKLE_FORBIDDEN, 61, CKPT_E_FORBIDDEN, "pickle asks for something outside the allowlist")     \
    /* GGUF (ggml's docs/gguf.md, checked against the gguf package) */                                      \
    X(CKPT_D_GGUF_VERSION, 70, CKPT_E_UNSUPPORTED, "unsupported GGUF version") /* other than 2 and 3 */     \
    X(CKPT_D_GGUF_LENGTH, 71, CKPT_E_CORRUPT, "GGUF string length past the end of the file, or not UTF-8")  \
    X(CKPT_D_GGUF_COUNT, 72, CKPT_E_CORRUPT, "GGUF count larger than the file can hold")                    \
    X(CKPT_D_GGUF_KV_TYPE, 73, CKPT_E_CORRUPT, "invalid GGUF value type") /* or a known key's wrong type */ \
    X(CKPT_D_GGUF_TENSOR_TYPE, 74, CKPT_E_UNSUPPORTED, "unknown ggml tensor type")                          \
    X(CKPT_D_GGUF_DIMS, 75, CKPT_E_CORRUPT, "invalid GGUF tensor dimensions")                               \
    X(CKPT_D_GGUF_ALIGNMENT, 76, CKPT_E_CORRUPT, "invalid GGUF alignment")                                  \
    X(CKPT_D_GGUF_OFFSET, 77, CKPT_E_CORRUPT, "GGUF tensor data outside the file or overlapping")           \
    X(CKPT_D_GGUF_SPLIT, 78, CKPT_E_CORRUPT, "GGUF split files do not fit together")                        \
    X(CKPT_D_UNSUPPORTED_DTYPE, 79, CKPT_E_UNSUPPORTED, "a dtype this operation or output format cannot take") \
    /* PyTorch distributed checkpoints (DCP) */                                                             \
    X(CKPT_D_DCP_METADATA, 80, CKPT_E_CORRUPT, "DCP .metadata has an invalid structure")                    \
    X(CKPT_D_DCP_CHUNK_HOLE, 81, CKPT_E_CORRUPT, "DCP chunks leave elements of a tensor uncovered")         \
    X(CKPT_D_DCP_CHUNK_OVERLAP, 82, CKPT_E_CORRUPT, "two DCP chunks claim the same elements")               \
    X(CKPT_D_DCP_CHUNK_BOUNDS, 83, CKPT_E_CORRUPT, "a DCP chunk reaches outside its tensor")                \
    X(CKPT_D_DCP_CHUNK_MISMATCH, 84, CKPT_E_CORRUPT, "a DCP chunk's stored data differs from its declared sizes or dtype") \
    X(CKPT_D_DCP_PATH, 85, CKPT_E_UNSAFE_PATH, "a DCP storage path leaves the checkpoint directory")        \
    X(CKPT_D_DCP_UNSUPPORTED, 86, CKPT_E_UNSUPPORTED, "DCP storage transform or layout not supported")      \
    /* NumPy .npy/.npz files and Flax msgpack files */                                                      \
    X(CKPT_D_NPY_INVALID, 90, CKPT_E_CORRUPT, "malformed NumPy .npy header")                                \
    X(CKPT_D_MSGPACK_INVALID, 91, CKPT_E_CORRUPT, "malformed msgpack document, or not a Flax one")          \
    /* Remote sources: the errors also name the HTTP status and the byte range */                           \
    X(CKPT_D_HTTP_STATUS, 100, CKPT_E_REMOTE, "the server answered with an HTTP error status")              \
    X(CKPT_D_HTTP_AUTH, 101, CKPT_E_AUTH, "the server refused the credentials")                             \
    X(CKPT_D_REMOTE_CHANGED, 102, CKPT_E_REMOTE, "the remote file changed while it was read")               \
    X(CKPT_D_NO_RANGES, 103, CKPT_E_REMOTE, "the server does not answer byte-range requests")               \
    X(CKPT_D_NETWORK, 104, CKPT_E_NETWORK, "network transfer failed")                                       \
    X(CKPT_D_TIMEOUT, 105, CKPT_E_TIMEOUT, "network transfer timed out")                                    \
    X(CKPT_D_BAD_RESPONSE, 106, CKPT_E_REMOTE, "the server's response contradicts the request")             \
    X(CKPT_D_UNSUPPORTED_SOURCE, 107, CKPT_E_UNSUPPORTED, "this build cannot read that kind of source")     \
    X(CKPT_D_PEER_FAILED, 110, CKPT_E_PEER, "another rank failed") /* the error names it and its reason */  \
    X(CKPT_D_PEER_TIMEOUT, 111, CKPT_E_TIMEOUT, "a rank did not reach a collective step in time")           \
    X(CKPT_D_COMM, 112, CKPT_E_PEER, "the communicator failed") /* MPI, torch.distributed */                \
    X(CKPT_D_COMM_DATA, 113, CKPT_E_PEER, "bytes from another rank are malformed, or ranks disagree")

#endif
