/* torch_write.c — the torch output format: a state dict as torch.save
 * writes it (torch_save.h), which torch.load(weights_only=True) reads.
 *
 * The file is `torch.save({name: tensor, …}, path)` of the declared
 * tensors in declaration order: a dict of _rebuild_tensor_v2 calls (v3
 * with an UntypedStorage and the dtype for the dtypes without a legacy
 * storage class: uint16-64, the float8s) on persistent-id storages
 * ('storage', class, key, 'cpu', numel), pickled as CPython's protocol-2
 * pickler memoizes; then one record per storage, in the order the pickle
 * first names them.  Byte for byte what torch.save writes for such a dict
 * when each tensor is its own Python object (model.state_dict(), a dict of
 * loaded tensors), the .data/serialization_id record included.
 *
 * Storages.  Tensors declared on one storage (ckpt_writer_add_tensor_shared:
 * tied weights, views) keep sharing it when one of them covers the whole
 * storage: that tensor's bytes are the record, and every other contiguous
 * tensor of its dtype on it is written as a view (its storage_offset, its
 * bytes not sent again).  torch.load then gives tensors on one storage, as
 * torch.save received them.  A tensor on a storage no single tensor covers
 * (a view into a tensor that is not saved) or a non-contiguous view is
 * written as a storage of its own, holding its bytes only — as
 * torch.save(t.clone()) would write it: torch.save would write the whole
 * storage, bytes no saved tensor reaches included, which a writer given
 * the tensors' bytes does not have.
 *
 * A torch file has no place for string metadata: a source's
 * `__metadata__` is not carried (nor the nesting of a source's object
 * tree: the output is the flat state dict). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../io/file.h"
#include "output.h"
#include "torch_save.h"

#define UNSET UINT32_MAX

typedef struct tw_tensor {
    size_t record; /* index into the archive's records */
    uint64_t offset; /* storage_offset, in elements */
} tw_tensor;

typedef struct tw_state {
    char *folder;               /* the archive's folder: the file's name without its extension */
    ckpt__torch_record *records; /* data.pkl, .format_version, .storage_alignment, byteorder, data/k…, version, id */
    const char **contents;      /* fixed records' bytes; NULL for a storage's, streamed by the writer */
    size_t *filler;             /* per record: the tensor whose bytes it holds (storages only) */
    size_t count;               /* records */
    char serial[41];
    ckpt__buf pickle;
    uint64_t cd_at;
} tw_state;

static tw_state *state_of(ckpt__output *o) { return *ckpt__out_format_state(o); }

static unsigned elem_bytes(ckpt_dtype d) { return ckpt_dtype_bits(d) / 8; }

/* torch.save's folder: the name after the last '/' or '\\', up to its last '.'. */
static char *archive_folder(ckpt__arena *a, const char *path) {
    const char *start = path;
    for (const char *p = path; *p; p++)
        if (*p == '/' || *p == '\\') start = p + 1;
    const char *dot = strrchr(start, '.');
    size_t n = dot && dot > start ? (size_t)(dot - start) : strlen(start);
    return ckpt__arena_strndup(a, start, n);
}

/* ---- storages ---------------------------------------------------------------------- */

static bool covers_storage(const ckpt__out_tensor *t) {
    const ckpt_tensor_storage *s = t->storage;
    return s && s->id && s->contiguous && s->begin == 0 && t->nbytes == s->nbytes;
}

/* Whether tensor t can be written as a view of filler f's storage. */
static bool view_of(const ckpt__out_tensor *t, const ckpt__out_tensor *f) {
    const ckpt_tensor_storage *s = t->storage;
    unsigned es = elem_bytes(t->dtype);
    return t->dtype == f->dtype && s->contiguous && es && s->begin % es == 0 && s->end - s->begin == t->nbytes;
}

/* Each tensor's record and storage offset; records' fillers.  Storage
 * records are numbered as torch numbers them: by the first tensor naming
 * each, in declaration order. */
static ckpt_status plan_storages(ckpt__output *o, tw_tensor *tt, size_t *filler_of, size_t *storages, ckpt_error *err) {
    size_t n = ckpt__out_count(o);
    size_t *rank = ckpt__malloc((n ? n : 1) * sizeof *rank), *cover = ckpt__malloc((n ? n : 1) * sizeof *cover),
           *record = ckpt__malloc((n ? n : 1) * sizeof *record);
    ckpt_status st = !rank || !cover || !record ? ckpt__oom(err, ckpt__out_path(o), NULL)
                                                : ckpt__out_storage_ranks(o, rank, true, err);
    for (size_t i = 0; st == CKPT_OK && i < n; i++) cover[i] = record[i] = SIZE_MAX;
    for (size_t i = 0; st == CKPT_OK && i < n; i++) /* each storage's first tensor that covers it */
        if (cover[rank[i]] == SIZE_MAX && covers_storage(ckpt__out_tensor_at(o, i))) cover[rank[i]] = i;
    *storages = 0;
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
        size_t f = cover[rank[i]];
        bool shared = f != SIZE_MAX && (f == i || view_of(t, ckpt__out_tensor_at(o, f)));
        size_t *slot = shared ? &record[rank[i]] : NULL;
        if (!slot || *slot == SIZE_MAX) {
            filler_of[*storages] = shared ? f : i;
            if (slot) *slot = *storages;
            tt[i].record = (*storages)++;
        } else {
            tt[i].record = *slot;
        }
        tt[i].offset = shared ? t->storage->begin / elem_bytes(t->dtype) : 0;
        if (shared && f != i) ckpt__out_same_bytes(o, i, f);
        else t->file = 0;
    }
    free(rank);
    free(cover);
    free(record);
    return st;
}

/* ---- the pickle -------------------------------------------------------------------- */

/* Memo indexes of what the pickle names more than once (UNSET: not yet
 * written).  CPython memoizes by identity: torch.save passes the same
 * 'storage' and 'cpu' strings, storage classes and storage keys (one str
 * per storage, from str(len(id_map))) each time, and new tuples. */
typedef struct pickler {
    ckpt__buf *b;
    uint32_t memo;
    uint32_t rebuild_v2, rebuild_v3, storage, cpu, untyped, ordered_dict;
    uint32_t storage_class[CKPT_DTYPE_COUNT], dtype[CKPT_DTYPE_COUNT];
    uint32_t *key; /* per storage record: its key's */
} pickler;

static void memo_or(pickler *p, uint32_t *slot, void (*write)(pickler *, const char *, const char *), const char *a,
                    const char *b) {
    if (*slot != UNSET) {
        ckpt__pkw_memo_get(p->b, *slot);
        return;
    }
    write(p, a, b);
    *slot = ckpt__pkw_memo_put(p->b, &p->memo);
}

static void write_global(pickler *p, const char *module, const char *name) { ckpt__pkw_global(p->b, module, name); }
static void write_str(pickler *p, const char *s, const char *unused) {
    (void)unused;
    ckpt__pkw_str(p->b, s, strlen(s));
}

/* A str: memoized in `slot` (NULL: a fresh object, memoized anew). */
static void pk_str(pickler *p, uint32_t *slot, const char *s) {
    uint32_t fresh = UNSET;
    memo_or(p, slot ? slot : &fresh, write_str, s, NULL);
}

static void pk_tuple(pickler *p, const uint64_t *v, uint32_t n) {
    ckpt__pkw_dims(p->b, v, n);
    if (n) ckpt__pkw_memo_put(p->b, &p->memo); /* the empty tuple is a constant, never memoized */
}

/* _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())
 * (v3 adds the dtype), as Tensor.__reduce_ex__ gives it. */
static void pk_tensor(pickler *p, const ckpt__out_tensor *t, const tw_tensor *tt, const char *key,
                      uint64_t record_bytes) {
    const ckpt__torch_type *type = ckpt__torch_type_of(t->dtype);
    bool v2 = type->storage != NULL;
    uint64_t strides[CKPT_MAX_DIMS], s = 1;
    for (uint32_t d = t->ndim; d-- > 0;) {
        strides[d] = s;
        s *= t->shape[d] ? t->shape[d] : 1; /* torch's contiguous strides count empty axes as 1 */
    }
    memo_or(p, v2 ? &p->rebuild_v2 : &p->rebuild_v3, write_global, "torch._utils",
            v2 ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
    ckpt__pkw_op(p->b, '(');
    ckpt__pkw_op(p->b, '('); /* the persistent id */
    pk_str(p, &p->storage, "storage");
    if (v2) memo_or(p, &p->storage_class[t->dtype], write_global, "torch", type->storage);
    else memo_or(p, &p->untyped, write_global, "torch.storage", "UntypedStorage");
    pk_str(p, &p->key[tt->record], key);
    pk_str(p, &p->cpu, "cpu");
    ckpt__pkw_int(p->b, (int64_t)(v2 ? record_bytes / elem_bytes(t->dtype) : record_bytes));
    ckpt__pkw_op(p->b, 't');
    ckpt__pkw_memo_put(p->b, &p->memo);
    ckpt__pkw_op(p->b, 'Q');
    ckpt__pkw_int(p->b, (int64_t)tt->offset);
    pk_tuple(p, t->shape, t->ndim);
    pk_tuple(p, strides, t->ndim);
    ckpt__pkw_op(p->b, 0x89); /* requires_grad=False */
    memo_or(p, &p->ordered_dict, write_global, "collections", "OrderedDict");
    ckpt__pkw_op(p->b, ')');
    ckpt__pkw_op(p->b, 'R');
    ckpt__pkw_memo_put(p->b, &p->memo);
    if (!v2) memo_or(p, &p->dtype[t->dtype], write_global, "torch", type->name);
    ckpt__pkw_op(p->b, 't');
    ckpt__pkw_memo_put(p->b, &p->memo);
    ckpt__pkw_op(p->b, 'R');
    ckpt__pkw_memo_put(p->b, &p->memo);
}

enum { BATCH = 1000 }; /* CPython's pickler: SETITEMS in batches of 1000 */

/* The dict, as CPython's batch_dict_exact writes it: one item with
 * SETITEM; more in MARK … SETITEMS batches of 1000 (a full last batch is
 * followed by an empty one). */
static ckpt_status render_pickle(ckpt__output *o, tw_state *s, const tw_tensor *tt, size_t storages, ckpt_error *err) {
    size_t n = ckpt__out_count(o);
    pickler p = {.b = &s->pickle};
    memset(&p.rebuild_v2, 0xFF, offsetof(pickler, key) - offsetof(pickler, rebuild_v2)); /* every slot UNSET */
    if (!(p.key = ckpt__malloc((storages ? storages : 1) * sizeof *p.key))) return ckpt__oom(err, ckpt__out_path(o), NULL);
    memset(p.key, 0xFF, (storages ? storages : 1) * sizeof *p.key);
    ckpt__pkw_op(p.b, 0x80);
    ckpt__pkw_op(p.b, 2);
    ckpt__pkw_op(p.b, '}');
    ckpt__pkw_memo_put(p.b, &p.memo);
    size_t i = 0, in_batch;
    do {
        if (n != 1) ckpt__pkw_op(p.b, '(');
        for (in_batch = 0; i < n && in_batch < BATCH; i++, in_batch++) {
            const ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
            const ckpt__torch_record *r = &s->records[4 + tt[i].record];
            pk_str(&p, NULL, t->name);
            pk_tensor(&p, t, &tt[i], r->name + 5, r->size); /* "data/<key>" */
        }
        ckpt__pkw_op(p.b, n == 1 ? 's' : 'u');
    } while (n > 1 && in_batch == BATCH);
    ckpt__pkw_op(p.b, '.');
    free(p.key);
    return p.b->failed ? ckpt__oom(err, ckpt__out_path(o), NULL) : CKPT_OK;
}

/* ---- the output format ------------------------------------------------------------ */

static const char *const fixed_before[] = {".format_version", "1", ".storage_alignment", "64", "byteorder", "little"};

static ckpt_status tw_plan(ckpt__output *o, ckpt_error *err) {
    const char *path = ckpt__out_path(o);
    if (ckpt__out_options(o)->checksums)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1,
                          "a torch.save file has no metadata to record checksums in (its records carry CRC-32s)");
    ckpt__arena *a = ckpt__out_arena(o);
    size_t n = ckpt__out_count(o), storages = 0;
    tw_state *s = ckpt__arena_alloc(a, sizeof *s);
    tw_tensor *tt = ckpt__malloc((n ? n : 1) * sizeof *tt);
    size_t *filler = ckpt__malloc((n ? n : 1) * sizeof *filler);
    if (!s || !tt || !filler) {
        free(tt), free(filler);
        return ckpt__oom(err, path, NULL);
    }
    memset(s, 0, sizeof *s);
    *ckpt__out_format_state(o) = s;
    ckpt_status st = plan_storages(o, tt, filler, &storages, err);
    s->count = storages + 6; /* data.pkl, three small records, the storages, version, the id */
    s->records = st ? NULL : ckpt__arena_alloc(a, s->count * sizeof *s->records);
    s->contents = st ? NULL : ckpt__arena_alloc(a, s->count * sizeof *s->contents);
    s->filler = st ? NULL : ckpt__arena_alloc(a, s->count * sizeof *s->filler);
    s->folder = st ? NULL : archive_folder(a, ckpt__path_basename(path));
    if (st == CKPT_OK && (!s->records || !s->contents || !s->filler || !s->folder)) st = ckpt__oom(err, path, NULL);
    if (st == CKPT_OK) {
        memset(s->records, 0, s->count * sizeof *s->records);
        memset(s->contents, 0, s->count * sizeof *s->contents);
        s->records[0].name = "data.pkl";
        for (size_t k = 0; k < 3; k++)
            s->records[1 + k] = (ckpt__torch_record){.name = fixed_before[2 * k], .size = strlen(fixed_before[2 * k + 1])},
            s->contents[1 + k] = fixed_before[2 * k + 1];
        for (size_t k = 0; k < storages && st == CKPT_OK; k++) {
            char name[32];
            snprintf(name, sizeof name, "data/%zu", k);
            s->records[4 + k].name = ckpt__arena_strndup(a, name, strlen(name));
            s->records[4 + k].size = ckpt__out_tensor_at(o, filler[k])->nbytes;
            s->filler[4 + k] = filler[k];
            if (!s->records[4 + k].name) st = ckpt__oom(err, path, NULL);
        }
        s->records[4 + storages] = (ckpt__torch_record){.name = "version", .size = 2};
        s->contents[4 + storages] = "3\n";
        s->records[5 + storages] = (ckpt__torch_record){.name = ".data/serialization_id", .size = 40};
        s->contents[5 + storages] = s->serial;
    }
    if (st == CKPT_OK) st = render_pickle(o, s, tt, storages, err);
    if (st == CKPT_OK) {
        s->records[0].size = s->pickle.len;
        s->contents[0] = s->pickle.data ? s->pickle.data : "";
        const char *base = ckpt__path_basename(path);
        st = ckpt__out_set_files(o, 1, &base, err);
    }
    free(tt);
    free(filler);
    return st;
}

/* The archive's bytes from record `from` up to the data of the next
 * storage record (or to the archive's end), appended to `b`: each local
 * header, then a fixed record's content and descriptor.  Returns the
 * index of the storage record reached (s->count at the end). */
static size_t render_from(tw_state *s, size_t from, ckpt__buf *b) {
    size_t i = from;
    for (; i < s->count; i++) {
        ckpt__torch_record *r = &s->records[i];
        if (r->name[0] == '.' && !strcmp(r->name, ".data/serialization_id") &&
            ckpt__torch_serialization_id(s->records, i, s->serial) != CKPT_OK)
            b->failed = true; /* out of memory: the caller reports it */
        if (s->contents[i]) r->crc = (uint32_t)crc32_z(0, (const unsigned char *)s->contents[i], (size_t)r->size);
        ckpt__torch_local_header(b, s->folder, r);
        if (!s->contents[i]) return i;
        ckpt__buf_append(b, s->contents[i], (size_t)r->size);
        ckpt__torch_descriptor(b, r);
    }
    ckpt__torch_directory(b, s->folder, s->records, s->count, s->cd_at);
    return i;
}

static ckpt_status tw_layout(ckpt__output *o, uint32_t file, ckpt__buf *head, ckpt_error *err) {
    tw_state *s = state_of(o);
    s->cd_at = ckpt__torch_records_place(s->folder, s->records, s->count, 0);
    for (size_t k = 4; k < s->count; k++)
        if (!s->contents[k]) ckpt__out_tensor_at(o, s->filler[k])->offset = s->records[k].data;
    render_from(s, 0, head); /* up to the first storage's data */
    ckpt__out_set_file_size(o, file, s->cd_at + ckpt__torch_directory_size(s->folder, s->records, s->count));
    return head->failed ? ckpt__oom(err, ckpt__out_path(o), NULL) : CKPT_OK;
}

/* After the data: each storage's descriptor (its CRC-32) and what follows
 * it up to the next storage's data; the id and the directory last. */
static ckpt_status tw_finish(ckpt__output *o, ckpt_error *err) {
    tw_state *s = state_of(o);
    ckpt_status st = CKPT_OK;
    for (size_t k = 4; k < s->count; k++)
        if (!s->contents[k]) s->records[k].crc = ckpt__out_tensor_at(o, s->filler[k])->crc32;
    for (size_t k = 4; st == CKPT_OK && k < s->count && !s->contents[k];) {
        ckpt__buf b = {0};
        ckpt__torch_descriptor(&b, &s->records[k]);
        size_t next = render_from(s, k + 1, &b);
        st = b.failed ? ckpt__oom(err, ckpt__out_path(o), NULL)
                      : ckpt__out_patch(o, 0, s->records[k].data + s->records[k].size, b.data, b.len, err);
        free(b.data);
        k = next;
    }
    free(s->pickle.data);
    s->pickle.data = NULL;
    return st;
}

static ckpt_status tw_accepts(const char *path, const char *name, ckpt_dtype dtype, uint32_t ndim,
                              const uint64_t *shape, ckpt_error *err) {
    (void)ndim, (void)shape;
    if (ckpt__torch_type_of(dtype)) return CKPT_OK;
    return ckpt__fail(err, CKPT_E_UNSUPPORTED_DTYPE, path, name, -1,
                      "torch has no %s dtype: cast it to a float dtype (e.g. BF16), or write GGUF",
                      ckpt_dtype_name(dtype));
}

/* transformers' pytorch_model.bin is a torch.save file too. */
static const char *const tw_suffixes[] = {".pt", ".pth", ".bin", NULL};

const ckpt__output_format ckpt__output_torch = {
    .name = "torch",
    .id = CKPT_FORMAT_TORCH,
    .suffixes = tw_suffixes,
    .layouts = CKPT__LAYOUT_FILE,
    .plan = tw_plan,
    .layout = tw_layout,
    .finish = tw_finish,
    .owns = ckpt__out_owns_none,
    .needs = ckpt__out_needs_crc32,
    .dedup = false, /* storages are shared by the format itself (plan_storages) */
    .accepts = tw_accepts,
};
