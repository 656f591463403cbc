/*
 * base64.h — Base64 (RFC 4648) in its two alphabets: the standard one,
 * padded (Azure's account keys and signatures), and the URL-safe one
 * without padding (the parts of a JSON Web Token).  Depends on base only.
 */
#ifndef CKPT_BASE_BASE64_H
#define CKPT_BASE_BASE64_H

#include <stddef.h>

#include "base.h"

/* Appends `n` bytes at `data` to `b`, encoded (`url`: the URL-safe alphabet, no padding). */
CKPT__HIDDEN void ckpt__base64_encode(ckpt__buf *b, const void *data, size_t n, bool url);

/* Decodes standard Base64 text (padding optional, no blanks) into `b`;
 * false when the text is not Base64. */
CKPT__HIDDEN bool ckpt__base64_decode(ckpt__buf *b, const char *text, size_t len);

#endif
