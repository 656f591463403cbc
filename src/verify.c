/* verify.c — ckpt_verify: every checksum the files record, re-read: what
 * each format's verify hook finds (safetensors: ckpt's XXH3-64 digests of
 * headers and tensors, the tensors hashed here by the engine) and the
 * CRC-32s the formats declared (ZIP members', ckpt__cat_add_crc), each
 * member read whole by the engine. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "catalog_internal.h"
#include "engine.h"

/* Every tensor to hash, as the formats' verify hooks gave them (format.h). */
static ckpt_status hash_moves(const ckpt_catalog *cat, const ckpt__digest *want, size_t count, ckpt__move **moves,
                              ckpt_error *err) {
    *moves = ckpt__malloc((count ? count : 1) * sizeof **moves);
    if (!*moves) return ckpt__oom(err, NULL, "the recorded checksums");
    for (size_t i = 0; i < count; i++)
        (*moves)[i] = (ckpt__move){.tensor = ckpt__catalog_index_of(cat, want[i].tensor), .sink = CKPT__SINK_HASH};
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
    ckpt_status st = CKPT_OK;
    for (size_t f = 0; f < ckpt_catalog_file_count(cat) && st == CKPT_OK; f++)
        st = ckpt__format_verify(cat, (uint32_t)f, &checks, err);
    const ckpt__digest *want = (const ckpt__digest *)checks.digests.data;
    size_t count = checks.digests.len / sizeof *want, checked = 0;
    if (st == CKPT_OK && checks.digests.failed) st = ckpt__oom(err, NULL, "the recorded checksums");
    if (st == CKPT_OK) st = hash_moves(cat, want, count, &moves, err);
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
    ckpt__engine_options o = {.io = CKPT_IO_AUTO, .progress = vo.progress, .user = vo.user, .members = numbers,
                              .member_count = members};
    if (st == CKPT_OK) st = ckpt__engine_run((ckpt_catalog *)cat, moves, count, &o, NULL, err);
    free(numbers);
    if (st == CKPT_OK) r.zip_crc32 = members, r.header_digests = checks.headers;
    for (size_t i = 0; st == CKPT_OK && i < count; i++, checked++) {
        const ckpt_tensor_info *t = want[i].tensor;
        if (moves[i].digest != want[i].xxh3)
            st = ckpt__fail(err, CKPT__D(CHECKSUM), ckpt_catalog_file_path(cat, t->file), t->name, (int64_t)t->offset,
                            "data checksum is %016llx, the file records %016llx: the tensor's bytes changed",
                            (unsigned long long)moves[i].digest, (unsigned long long)want[i].xxh3);
    }
    for (size_t i = 0; i < checked; i++) r.bytes += want[i].tensor->nbytes;
    if (st == CKPT_OK) r.tensors = checked + tensors_in_members(cat);
    free(moves);
    free(checks.digests.data);
    r.tensor_digests = checked;
    if (report) {
        size_t size = report->size < sizeof r ? report->size : sizeof r;
        r.size = report->size;
        memcpy(report, &r, size);
    }
    return st;
}
