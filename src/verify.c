/* verify.c — ckpt_verify: every checksum the files record, re-read: what
 * each format's verify hook finds (safetensors: ckpt's XXH3-64 digests of
 * headers and tensors, the tensors hashed here by the engine) and the
 * CRC-32s the formats declared (ZIP members', ckpt__cat_add_crc), each
 * member read whole by the engine. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "base/chunk_hash.h"
#include "base/sha256.h"
#include "catalog_internal.h"
#include "engine.h"
#include "io/source.h"

enum { HASH_CHUNK = 4 << 20 };

/* A file whose source states its SHA-256 (an hf:// LFS file): every byte
 * read and hashed, and compared. */
static ckpt_status check_sha256(ckpt__source *src, unsigned char *buf, ckpt_error *err) {
    ckpt__sha256 s;
    ckpt__sha256_init(&s);
    for (uint64_t at = 0; at < src->size;) {
        uint64_t n = src->size - at < HASH_CHUNK ? src->size - at : HASH_CHUNK;
        ckpt_status st = ckpt__source_read(src, buf, n, at, err);
        if (st) return st;
        ckpt__sha256_update(&s, buf, (size_t)n);
        at += n;
    }
    unsigned char digest[32];
    char hex[65];
    ckpt__sha256_final(&s, digest);
    ckpt__sha256_hex(digest, hex);
    if (strcmp(hex, src->sha256) != 0)
        return ckpt__fail(err, CKPT__D(CHECKSUM), src->name, NULL, -1,
                          "its SHA-256 is %s, but its source states %s: the bytes changed", hex, src->sha256);
    return CKPT_OK;
}

/* Every file with a stated SHA-256, checked; their count and bytes. */
static ckpt_status check_files(const ckpt_catalog *cat, size_t *files, uint64_t *bytes, ckpt_error *err) {
    unsigned char *buf = NULL;
    ckpt_status st = CKPT_OK;
    for (size_t f = 0; st == CKPT_OK && f < ckpt_catalog_file_count(cat); f++) {
        ckpt__source *src = ckpt__cat_source(cat, (uint32_t)f);
        if (!src->sha256[0]) continue;
        if (!buf && !(buf = ckpt__malloc(HASH_CHUNK))) st = ckpt__oom(err, src->name, NULL);
        if (st == CKPT_OK) st = check_sha256(src, buf, err);
        if (st == CKPT_OK) ++*files, *bytes += src->size;
    }
    free(buf);
    return st;
}

/* Every tensor to hash, as the formats' verify hooks gave them (format.h). */
static ckpt_status hash_moves(const ckpt_catalog *cat, const ckpt__digest *want, size_t count, ckpt__move **moves,
                              ckpt_error *err) {
    *moves = ckpt__malloc((count ? count : 1) * sizeof **moves);
    if (!*moves) return ckpt__oom(err, NULL, "the recorded checksums");
    for (size_t i = 0; i < count; i++)
        (*moves)[i] = (ckpt__move){.tensor = ckpt__catalog_index_of(cat, want[i].tensor), .sink = CKPT__SINK_HASH};
    return CKPT_OK;
}

/* The moves of tensors with recorded chunk digests hash their chunks too,
 * into `got` (as many as the records hold). */
static ckpt_status hash_chunks_too(const ckpt_catalog *cat, const ckpt__file_checks *checks, ckpt__move *moves,
                                   size_t count, uint64_t **got, ckpt_error *err) {
    const ckpt__chunk_digests *rec = (const ckpt__chunk_digests *)checks->chunks.data;
    size_t records = checks->chunks.len / sizeof *rec, total = checks->chunk_xxh3.len / sizeof(uint64_t);
    *got = ckpt__malloc((total ? total : 1) * sizeof **got);
    if (!*got) return ckpt__oom(err, NULL, "the recorded checksums");
    for (size_t r = 0; r < records; r++) {
        size_t tensor = ckpt__catalog_index_of(cat, rec[r].tensor), i = 0;
        while (i < count && moves[i].tensor != tensor) i++;
        if (i == count)
            return ckpt__fail(err, CKPT__D(CHECKSUM), ckpt_catalog_file_path(cat, rec[r].tensor->file),
                              rec[r].tensor->name, -1, "the chunk map names a tensor the checksum map does not");
        moves[i].chunk_digests = *got + rec[r].first;
        moves[i].chunk_bytes = rec[r].chunk_bytes;
        moves[i].chunk_phase = rec[r].phase;
    }
    return CKPT_OK;
}

/* Each recorded chunk digest against the one hashed: a changed chunk
 * named by its tensor and byte range; *matched counts those that agree. */
static ckpt_status compare_chunks(const ckpt_catalog *cat, const ckpt__file_checks *checks, const uint64_t *got,
                                  size_t *matched, ckpt_error *err) {
    const ckpt__chunk_digests *rec = (const ckpt__chunk_digests *)checks->chunks.data;
    const uint64_t *want = (const uint64_t *)checks->chunk_xxh3.data;
    for (size_t r = 0; r < checks->chunks.len / sizeof *rec; r++) {
        const ckpt_tensor_info *t = rec[r].tensor;
        for (uint32_t k = 0; k < rec[r].count; k++) {
            uint64_t i = rec[r].first + k, begin, end;
            if (got[i] == want[i]) {
                ++*matched;
                continue;
            }
            ckpt__chunk_range(t->nbytes, rec[r].chunk_bytes, rec[r].phase, k, &begin, &end);
            return ckpt__fail(err, CKPT__D(CHECKSUM), ckpt_catalog_file_path(cat, t->file), t->name,
                              (int64_t)(t->offset + begin),
                              "chunk %u, the tensor's bytes [%llu, %llu), has checksum %016llx, the file records "
                              "%016llx: those bytes changed", (unsigned)k, (unsigned long long)begin,
                              (unsigned long long)end, (unsigned long long)got[i], (unsigned long long)want[i]);
        }
    }
    return CKPT_OK;
}

/* Tensors whose bytes lie in members with a recorded CRC-32. */
static size_t tensors_in_members(const ckpt_catalog *cat) {
    size_t n = 0;
    for (size_t i = 0; i < ckpt_catalog_tensor_count(cat); i++) {
        uint32_t count;
        const ckpt__piece *p = ckpt__catalog_pieces(cat, i, &count);
        bool in = count > 0;
        for (uint32_t k = 0; k < count; k++) in &= p[k].crc != 0;
        n += in;
    }
    return n;
}

void ckpt_verify_options_init_sized(ckpt_verify_options *o, size_t size) {
    if (!o || size < sizeof o->size) return;
    memset(o, 0, size); /* a newer header's longer struct: zeros in what this library does not know */
    o->size = size;
}

/* The checksums every file records, as its format reads them. */
static ckpt_status recorded_checks(const ckpt_catalog *cat, ckpt__file_checks *checks, ckpt_error *err) {
    ckpt_status st = CKPT_OK;
    for (size_t f = 0; f < ckpt_catalog_file_count(cat) && st == CKPT_OK; f++)
        st = ckpt__format_verify(cat, (uint32_t)f, checks, err);
    if (st == CKPT_OK && ckpt__file_checks_failed(checks)) st = ckpt__oom(err, NULL, "the recorded checksums");
    return st;
}

ckpt_status ckpt_verify(const ckpt_catalog *cat, const ckpt_verify_options *options, ckpt_verify_report *report,
                        ckpt_error *err) {
    ckpt_verify_options vo;
    ckpt_verify_options_init(&vo);
    if (options) CKPT__TAKE_OPTIONS(&vo, options);
    ckpt_verify_report r;
    memset(&r, 0, sizeof r);
    if (report && report->size < sizeof report->size)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "report->size is not set");
    if (report) memset((char *)report + sizeof report->size, 0, report->size - sizeof report->size);
    if (!cat) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "catalog is NULL");
    ckpt__file_checks checks = {0};
    ckpt__move *moves = NULL;
    uint64_t *chunks = NULL;
    ckpt_status st = recorded_checks(cat, &checks, err);
    const ckpt__digest *want = (const ckpt__digest *)checks.digests.data;
    size_t count = checks.digests.len / sizeof *want, checked = 0;
    if (st == CKPT_OK) st = hash_moves(cat, want, count, &moves, err);
    if (st == CKPT_OK) st = hash_chunks_too(cat, &checks, moves, count, &chunks, err);
    /* The members whose CRC-32s the files record, each read whole. */
    size_t members = ckpt__catalog_crc_count(cat);
    uint32_t *numbers = ckpt__malloc((members ? members : 1) * sizeof *numbers);
    if (st == CKPT_OK && !numbers) st = ckpt__oom(err, NULL, "the recorded checksums");
    for (size_t i = 0; st == CKPT_OK && i < members; i++) {
        numbers[i] = (uint32_t)i;
        r.bytes += ckpt__catalog_crc(cat, i, NULL)->size;
    }
    /* Every tensor hashed and every member checked by the engine (in
     * parallel); the digests then compared in the files' order. */
    ckpt__engine_options o = {.io = ckpt__catalog_io(cat), .progress = vo.progress, .user = vo.user, .members = numbers,
                              .member_count = members};
    if (st == CKPT_OK) st = ckpt__engine_run((ckpt_catalog *)cat, moves, count, &o, NULL, err);
    free(numbers);
    if (st == CKPT_OK) r.zip_crc32 = members, r.header_digests = checks.headers;
    if (st == CKPT_OK) st = compare_chunks(cat, &checks, chunks, &r.chunk_digests, err); /* first: they say where the bytes changed */
    for (size_t i = 0; st == CKPT_OK && i < count; i++, checked++) {
        const ckpt_tensor_info *t = want[i].tensor;
        if (moves[i].digest != want[i].xxh3)
            st = ckpt__fail(err, CKPT__D(CHECKSUM), ckpt_catalog_file_path(cat, t->file), t->name, (int64_t)t->offset,
                            "data checksum is %016llx, the file records %016llx: the tensor's bytes changed",
                            (unsigned long long)moves[i].digest, (unsigned long long)want[i].xxh3);
    }
    for (size_t i = 0; i < checked; i++) r.bytes += want[i].tensor->nbytes;
    if (st == CKPT_OK) r.tensors = checked + tensors_in_members(cat);
    if (st == CKPT_OK) st = check_files(cat, &r.file_sha256, &r.bytes, err);
    free(moves);
    free(chunks);
    ckpt__file_checks_free(&checks);
    r.tensor_digests = checked;
    if (report) {
        size_t size = report->size < sizeof r ? report->size : sizeof r;
        r.size = report->size;
        memcpy(report, &r, size);
    }
    return st;
}

ckpt_status ckpt_catalog_recorded_digests(const ckpt_catalog *cat, uint64_t *digests, unsigned char *recorded,
                                          ckpt_error *err) {
    if (!cat || !digests || !recorded)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "a catalog, digests and recorded are required");
    size_t n = ckpt_catalog_tensor_count(cat);
    memset(digests, 0, n * sizeof *digests);
    memset(recorded, 0, n);
    ckpt__file_checks checks = {0};
    ckpt_status st = recorded_checks(cat, &checks, err);
    const ckpt__digest *d = (const ckpt__digest *)checks.digests.data;
    for (size_t i = 0; st == CKPT_OK && i < checks.digests.len / sizeof *d; i++) {
        size_t k = ckpt__catalog_index_of(cat, d[i].tensor);
        digests[k] = d[i].xxh3;
        recorded[k] = 1;
    }
    ckpt__file_checks_free(&checks);
    return st;
}

ckpt_status ckpt_catalog_recorded_chunks(const ckpt_catalog *cat, ckpt_chunk_record *records, uint64_t *digests,
                                         size_t capacity, size_t *total, ckpt_error *err) {
    if (!cat || !records || !total)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "a catalog, records and total are required");
    memset(records, 0, ckpt_catalog_tensor_count(cat) * sizeof *records);
    ckpt__file_checks checks = {0};
    ckpt_status st = recorded_checks(cat, &checks, err);
    const ckpt__chunk_digests *rec = (const ckpt__chunk_digests *)checks.chunks.data;
    for (size_t r = 0; st == CKPT_OK && r < checks.chunks.len / sizeof *rec; r++)
        records[ckpt__catalog_index_of(cat, rec[r].tensor)] =
            (ckpt_chunk_record){rec[r].chunk_bytes, rec[r].phase, rec[r].first, rec[r].count};
    *total = st == CKPT_OK ? checks.chunk_xxh3.len / sizeof(uint64_t) : 0;
    if (st == CKPT_OK && digests && capacity >= *total && *total) memcpy(digests, checks.chunk_xxh3.data, *total * sizeof *digests);
    ckpt__file_checks_free(&checks);
    return st;
}
