/* chunk_hash.c — per-chunk XXH3-64 digests of a tensor's bytes (see
 * chunk_hash.h for where the chunks' edges are). */
#include "chunk_hash.h"

uint32_t ckpt__chunk_count(uint64_t nbytes, uint64_t chunk) {
    return (uint32_t)(nbytes / chunk + (nbytes % chunk != 0) + 1);
}

void ckpt__chunk_range(uint64_t nbytes, uint64_t chunk, uint64_t phase, uint32_t k, uint64_t *begin,
                       uint64_t *end) {
    uint64_t lo = (uint64_t)k * chunk, hi = lo + chunk;
    *begin = lo > phase ? lo - phase : 0;
    *end = hi - phase < nbytes ? hi - phase : nbytes;
    if (*begin > nbytes) *begin = nbytes;
}

ckpt_status ckpt__chunk_hash_init(ckpt__chunk_hash *h, uint64_t nbytes, uint64_t chunk, uint64_t phase,
                                  uint64_t *digests, const char *path, ckpt_error *err) {
    *h = (ckpt__chunk_hash){.nbytes = nbytes, .chunk = chunk, .phase = phase % chunk, .digests = digests,
                            .count = ckpt__chunk_count(nbytes, chunk)};
    if (!(h->state = XXH3_createState()) || XXH3_64bits_reset(h->state) == XXH_ERROR) {
        ckpt__chunk_hash_free(h);
        return ckpt__oom(err, path, "a chunk hash");
    }
    uint64_t begin;
    ckpt__chunk_range(nbytes, chunk, h->phase, 0, &begin, &h->end);
    return CKPT_OK;
}

/* Chunk k is complete: its digest, and the next one begins. */
static void next_chunk(ckpt__chunk_hash *h) {
    h->digests[h->k++] = XXH3_64bits_digest(h->state);
    XXH3_64bits_reset(h->state);
    uint64_t begin;
    ckpt__chunk_range(h->nbytes, h->chunk, h->phase, h->k, &begin, &h->end);
}

void ckpt__chunk_hash_update(ckpt__chunk_hash *h, const void *data, size_t n) {
    const unsigned char *p = data;
    while (n) {
        uint64_t room = h->end - h->at;
        size_t take = room < n ? (size_t)room : n;
        XXH3_64bits_update(h->state, p, take);
        p += take, n -= take, h->at += take;
        if (h->at == h->end && h->at < h->nbytes) next_chunk(h);
    }
}

void ckpt__chunk_hash_final(ckpt__chunk_hash *h) {
    while (h->k < h->count) next_chunk(h); /* the last, and an empty one after it */
}

void ckpt__chunk_hash_free(ckpt__chunk_hash *h) {
    XXH3_freeState(h->state);
    h->state = NULL;
}
