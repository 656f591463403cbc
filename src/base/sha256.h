/*
 * sha256.h — SHA-256 (FIPS 180-4), for what servers state about a file's
 * bytes (the Hugging Face Hub's X-Linked-Etag is the SHA-256 of an LFS
 * file) and for names that must not reveal what they were made from (the
 * cache's file names hash URLs that may carry tokens).  Depends on nothing
 * but libc.
 */
#ifndef CKPT_BASE_SHA256_H
#define CKPT_BASE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "base.h"

typedef struct ckpt__sha256 {
    uint32_t h[8];
    uint64_t bytes;       /* hashed so far */
    unsigned char block[64];
    size_t fill;          /* bytes waiting in block */
} ckpt__sha256;

CKPT__HIDDEN void ckpt__sha256_init(ckpt__sha256 *s);
CKPT__HIDDEN void ckpt__sha256_update(ckpt__sha256 *s, const void *data, size_t n);
CKPT__HIDDEN void ckpt__sha256_final(ckpt__sha256 *s, unsigned char digest[32]);

/* The digest as 64 lower-case hex digits and a NUL. */
CKPT__HIDDEN void ckpt__sha256_hex(const unsigned char digest[32], char hex[65]);

/* HMAC-SHA256 (RFC 2104) of `msg` under `key`: what the object stores'
 * request signatures are made of (Azure's SharedKey, io/sign.c). */
CKPT__HIDDEN void ckpt__hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                                    unsigned char mac[32]);

#endif
