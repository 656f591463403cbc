/* dcp_write.c — the bytes of a torch.distributed.checkpoint directory (see
 * dcp.h): the .metadata pickle, the torch.save archive around each chunk,
 * and the pickles of objects.  Only rendering: where the bytes go is the
 * output format's business (dcp_output.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "dcp.h"
#include "../base/value.h"
#include "torch_save.h"

/* ---- a minimal, deterministic pickler (torch_save.h's opcodes) ------------------ */

static void put(ckpt__buf *b, const void *p, size_t n) { ckpt__buf_append(b, (const char *)p, n); }

/* ---- torch.save archives ------------------------------------------------------------ */

/* The archive, as torch.save writes into a buffer (folder "archive"):
 * data.pkl, .format_version, .storage_alignment, byteorder, [data/0,]
 * version, .data/serialization_id.  `head` receives the bytes before
 * data/0's data (the whole archive without one), `tail` those after it,
 * which hold its CRC. */
static void render_archive(const ckpt__buf *pickle, bool with_data, uint64_t data_size, uint32_t data_crc,
                           uint64_t id, ckpt__buf *head, ckpt__buf *tail, uint64_t *total) {
    char serial[41];
    for (int i = 39; i >= 0; i--, id /= 10) serial[i] = (char)('0' + id % 10);
    serial[40] = '\0';
    const ckpt__torch_record all[7] = {
        {"data.pkl", pickle->len, 0, 0, 0}, {".format_version", 1, 0, 0, 0}, {".storage_alignment", 2, 0, 0, 0},
        {"byteorder", 6, 0, 0, 0},          {"data/0", data_size, data_crc, 0, 0}, {"version", 2, 0, 0, 0},
        {".data/serialization_id", 40, 0, 0, 0},
    };
    const char *const contents[7] = {pickle->data ? pickle->data : "", "1", "64", "little", NULL, "3\n", serial};
    ckpt__torch_record r[7];
    const char *data[7];
    size_t n = 0;
    for (size_t i = 0; i < 7; i++)
        if (contents[i] || with_data) {
            r[n] = all[i], data[n] = contents[i];
            if (data[n]) r[n].crc = (uint32_t)crc32_z(0, (const Bytef *)data[n], (z_size_t)r[n].size);
            n++;
        }
    uint64_t cd_at = ckpt__torch_records_place("archive", r, n, 0);
    ckpt__buf *b = head;
    for (size_t i = 0; i < n; i++) {
        ckpt__torch_local_header(b, "archive", &r[i]);
        if (data[i]) put(b, data[i], (size_t)r[i].size);
        else b = tail; /* the data: streamed by the writer; the rest follows it */
        ckpt__torch_descriptor(b, &r[i]);
    }
    ckpt__torch_directory(b, "archive", r, n, cd_at);
    *total = cd_at + ckpt__torch_directory_size("archive", r, n);
}

/* torch.save(tensor)'s pickle: _rebuild_tensor_v2(persistent storage, 0,
 * size, stride, False, OrderedDict()), or _rebuild_tensor_v3 with an
 * untyped storage and the dtype for dtypes without a legacy storage. */
static ckpt_status tensor_pickle(ckpt__buf *b, ckpt_dtype dtype, uint32_t ndim, const uint64_t *sizes,
                                 uint64_t nbytes) {
    const ckpt__torch_type *t = ckpt__torch_type_of(dtype);
    if (!t) return CKPT__D(UNKNOWN_DTYPE);
    uint64_t strides[CKPT_MAX_DIMS], s = 1, numel = 1;
    for (uint32_t d = ndim; d-- > 0;) {
        strides[d] = s;
        s *= sizes[d] ? sizes[d] : 1; /* torch's contiguous strides count empty axes as 1 */
        numel *= sizes[d];
    }
    ckpt__pkw_op(b, 0x80);
    ckpt__pkw_op(b, 2);
    ckpt__pkw_global(b, "torch._utils", t->storage ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
    ckpt__pkw_op(b, '(');
    ckpt__pkw_op(b, '(');
    ckpt__pkw_str(b, "storage", 7);
    ckpt__pkw_global(b, t->storage ? "torch" : "torch.storage", t->storage ? t->storage : "UntypedStorage");
    ckpt__pkw_str(b, "0", 1);
    ckpt__pkw_str(b, "cpu", 3);
    ckpt__pkw_int(b, (int64_t)(t->storage ? numel : nbytes));
    ckpt__pkw_op(b, 't');
    ckpt__pkw_op(b, 'Q');
    ckpt__pkw_int(b, 0);
    ckpt__pkw_dims(b, sizes, ndim);
    ckpt__pkw_dims(b, strides, ndim);
    ckpt__pkw_op(b, 0x89);
    ckpt__pkw_global(b, "collections", "OrderedDict");
    ckpt__pkw_op(b, ')');
    ckpt__pkw_op(b, 'R');
    if (!t->storage) ckpt__pkw_global(b, "torch", t->name);
    ckpt__pkw_op(b, 't');
    ckpt__pkw_op(b, 'R');
    ckpt__pkw_op(b, '.');
    return b->failed ? CKPT_E_NO_MEMORY : CKPT_OK;
}

ckpt_status ckpt__dcp_chunk_archive(ckpt__dcp_archive *a, ckpt_dtype dtype, uint32_t ndim, const uint64_t *sizes,
                                    uint64_t nbytes, uint64_t id) {
    memset(a, 0, sizeof *a);
    ckpt__buf pickle = {0}, tail = {0};
    ckpt_status st = tensor_pickle(&pickle, dtype, ndim, sizes, nbytes);
    if (st == CKPT_OK) {
        render_archive(&pickle, true, nbytes, 0, id, &a->head, &tail, &a->size);
        if (a->head.failed || tail.failed) st = CKPT_E_NO_MEMORY;
    }
    a->pickle = pickle;
    a->nbytes = nbytes;
    a->id = id;
    a->has_data = true;
    free(tail.data);
    if (st) ckpt__dcp_archive_free(a);
    return st;
}

ckpt_status ckpt__dcp_archive_tail(const ckpt__dcp_archive *a, uint32_t crc, ckpt__buf *tail) {
    ckpt__buf head = {0};
    uint64_t total;
    render_archive(&a->pickle, a->has_data, a->nbytes, crc, a->id, &head, tail, &total);
    bool failed = head.failed || tail->failed;
    free(head.data);
    return failed ? CKPT_E_NO_MEMORY : CKPT_OK;
}

void ckpt__dcp_archive_free(ckpt__dcp_archive *a) {
    free(a->head.data);
    free(a->pickle.data);
    memset(a, 0, sizeof *a);
}

/* ---- objects: the tree's values back to a pickle ----------------------------------------- */

typedef struct obj_writer {
    ckpt__buf *b;
    const char *fqn;
    ckpt_error *err;
} obj_writer;

static ckpt_status refuse(obj_writer *w, const char *what) {
    return ckpt__fail(w->err, CKPT__D(DCP_UNSUPPORTED), NULL, w->fqn, -1,
                      "the object holds %s, which ckpt cannot write into a DCP checkpoint", what);
}

/* A container being written: its items in turn (a dict's: each key, then
 * its value), and the opcodes that close it. */
typedef struct open_value {
    const ckpt__value *v;
    uint32_t next;
    const char *close; /* NUL-terminated opcodes */
} open_value;

static ckpt_status push_open(obj_writer *w, ckpt__stack *open, const ckpt__value *v, const char *close) {
    open_value *o = ckpt__stack_push(open);
    if (!o) return ckpt__oom(w->err, NULL, w->fqn);
    *o = (open_value){v, 0, close};
    return CKPT_OK;
}

/* Protocol 2 pickles bytes as _codecs.encode(latin-1 text, "latin1"). */
static ckpt_status obj_bytes(obj_writer *w, const ckpt__value *v) {
    ckpt__buf text = {0};
    ckpt__pkw_latin1(&text, v->u.s.data, v->u.s.len);
    ckpt__pkw_global(w->b, "_codecs", "encode");
    ckpt__pkw_str(w->b, text.data ? text.data : "", text.len);
    ckpt__pkw_str(w->b, "latin1", 6);
    ckpt__pkw_op(w->b, 0x86);
    ckpt__pkw_op(w->b, 'R');
    bool failed = text.failed;
    free(text.data);
    return failed ? ckpt__oom(w->err, NULL, w->fqn) : CKPT_OK;
}

/* Scalars and the leaves written whole (bytes, big integers); anything
 * else refused. */
static ckpt_status obj_leaf(obj_writer *w, const ckpt__value *v) {
    ckpt__buf *b = w->b;
    char what[300];
    switch (v->kind) {
    case CKPT__V_NULL: ckpt__pkw_op(b, 'N'); return CKPT_OK;
    case CKPT__V_BOOL: ckpt__pkw_op(b, v->u.b ? 0x88 : 0x89); return CKPT_OK;
    case CKPT__V_STR: ckpt__pkw_str(b, v->u.s.data, v->u.s.len); return CKPT_OK;
    case CKPT__V_INT: ckpt__pkw_int(b, v->u.i); return CKPT_OK;
    case CKPT__V_FLOAT: ckpt__pkw_float(b, v->u.f); return CKPT_OK;
    case CKPT__V_NUMBER: return ckpt__pkw_number(b, v->u.s.data) ? CKPT_OK : refuse(w, "an integer outside 64 bits");
    case CKPT__V_BYTES: return obj_bytes(w, v);
    case CKPT__V_BIGINT:
        if (v->u.s.len > 0xFFFFFFFFu) return refuse(w, "a malformed integer");
        ckpt__pkw_op(b, 0x8b); /* LONG4 */
        ckpt__put_le(b, v->u.s.len, 4);
        put(b, v->u.s.data, v->u.s.len);
        return CKPT_OK;
    case CKPT__V_TENSOR:
        return refuse(w, "a tensor inside a tuple or other object (DCP keeps tensors only at dict and list entries)");
    case CKPT__V_CALL:
    case CKPT__V_GLOBAL:
        snprintf(what, sizeof what, "an object of %s", v->kind == CKPT__V_CALL ? v->cls : v->u.s.data);
        return refuse(w, what);
    default: return refuse(w, "a value of unknown kind");
    }
}

/* A container's opening opcodes (its items follow, see obj_value; the
 * class of an OrderedDict or a torch.Size is not kept), anything else whole. */
static ckpt_status obj_open(obj_writer *w, ckpt__stack *open, const ckpt__value *v) {
    ckpt__buf *b = w->b;
    if (open->len >= 200) return refuse(w, "values nested deeper than 200");
    switch (v->kind) {
    case CKPT__V_LIST:
        ckpt__pkw_op(b, ']');
        if (v->count) ckpt__pkw_op(b, '(');
        return push_open(w, open, v, v->count ? "e" : "");
    case CKPT__V_TUPLE: ckpt__pkw_op(b, '('); return push_open(w, open, v, "t");
    case CKPT__V_SET:
        ckpt__pkw_global(b, "builtins", "set");
        ckpt__pkw_op(b, ']');
        if (v->count) ckpt__pkw_op(b, '(');
        return push_open(w, open, v, v->count ? "e\x85R" : "\x85R");
    case CKPT__V_DICT:
        ckpt__pkw_op(b, '}');
        if (v->count) ckpt__pkw_op(b, '(');
        return push_open(w, open, v, v->count ? "u" : "");
    default: return obj_leaf(w, v);
    }
}

/* v as pickle opcodes; the containers being written wait on a heap stack. */
static ckpt_status obj_value(obj_writer *w, const ckpt__value *v) {
    ckpt__stack open = CKPT__STACK(open_value);
    ckpt_status st = obj_open(w, &open, v);
    while (st == CKPT_OK && open.len) {
        open_value *o = ckpt__stack_top(&open);
        if (o->next == o->v->count) {
            for (const char *c = o->close; *c; c++) ckpt__pkw_op(w->b, (unsigned char)*c);
            ckpt__stack_pop(&open);
            continue;
        }
        uint32_t i = o->next++;
        if (o->v->kind != CKPT__V_DICT) {
            st = obj_open(w, &open, o->v->u.items[i]);
            continue;
        }
        st = obj_leaf(w, ckpt__value_key(o->v, i)); /* keys are scalars */
        if (st == CKPT_OK) st = obj_open(w, &open, ckpt__value_at(o->v, i));
    }
    ckpt__stack_free(&open);
    return st;
}

ckpt_status ckpt__dcp_object_archive(ckpt__dcp_archive *a, const ckpt__value *object, const char *fqn, uint64_t id,
                                     ckpt_error *err) {
    memset(a, 0, sizeof *a);
    ckpt__buf pickle = {0}, tail = {0};
    ckpt__pkw_op(&pickle, 0x80);
    ckpt__pkw_op(&pickle, 2);
    obj_writer w = {&pickle, fqn, err};
    ckpt_status st = obj_value(&w, object);
    ckpt__pkw_op(&pickle, '.');
    if (st == CKPT_OK && pickle.failed) st = ckpt__oom(err, NULL, fqn);
    if (st == CKPT_OK) {
        a->pickle = pickle;
        pickle.data = NULL;
        a->id = id;
        render_archive(&a->pickle, false, 0, 0, id, &a->head, &tail, &a->size);
        if (a->head.failed || tail.failed) st = ckpt__oom(err, NULL, fqn);
        if (st == CKPT_OK && tail.len) { /* no data record: the whole archive is the head */
            ckpt__buf_append(&a->head, tail.data, tail.len);
            if (a->head.failed) st = ckpt__oom(err, NULL, fqn);
        }
    }
    free(pickle.data);
    free(tail.data);
    if (st) ckpt__dcp_archive_free(a);
    return st;
}

/* ---- .metadata --------------------------------------------------------------------------- */

/* Protocol 4: globals by STACK_GLOBAL, each memoized once. */
typedef struct meta_pickler {
    ckpt__buf *b;
    const char *memo_names[16];
    size_t memo_count;
} meta_pickler;

static void pk_short_str(ckpt__buf *b, const char *s) {
    size_t n = strlen(s);
    if (n < 256) {
        ckpt__pkw_op(b, 0x8c);
        ckpt__put_le(b, n, 1);
    } else {
        ckpt__pkw_op(b, 'X');
        ckpt__put_le(b, n, 4);
    }
    put(b, s, n);
}

static void pk_global4(meta_pickler *p, const char *module, const char *name) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", module, name);
    for (size_t i = 0; i < p->memo_count; i++)
        if (!strcmp(p->memo_names[i], key)) {
            ckpt__pkw_op(p->b, 'j'); /* LONG_BINGET */
            ckpt__put_le(p->b, i, 4);
            return;
        }
    pk_short_str(p->b, module);
    pk_short_str(p->b, name);
    ckpt__pkw_op(p->b, 0x93);
    if (p->memo_count < sizeof p->memo_names / sizeof p->memo_names[0]) {
        /* Names are literals or live as long as the pickler's caller. */
        static const char *const known[] = {
            "torch.distributed.checkpoint.metadata.Metadata",
            "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
            "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
            "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
            "torch.distributed.checkpoint.metadata.TensorProperties",
            "torch.distributed.checkpoint.metadata.MetadataIndex",
            "torch.distributed.checkpoint.metadata.StorageMeta",
            "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
            "torch.distributed.checkpoint.filesystem._StorageInfo",
            "torch.serialization._get_layout",
            "torch.Size",
        };
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            if (!strcmp(known[i], key)) {
                ckpt__pkw_op(p->b, 0x94); /* MEMOIZE */
                p->memo_names[p->memo_count++] = known[i];
                break;
            }
    }
}

static const char MD[] = "torch.distributed.checkpoint.metadata";

/* cls.__new__(cls), the dict state follows (the caller closes it with
 * SETITEMS and BUILD). */
static void pk_new(meta_pickler *p, const char *module, const char *cls) {
    pk_global4(p, module, cls);
    ckpt__pkw_op(p->b, ')');
    ckpt__pkw_op(p->b, 0x81);
}

static void pk_size(meta_pickler *p, const uint64_t *v, uint32_t n) {
    pk_global4(p, "torch", "Size");
    ckpt__pkw_dims(p->b, v, n);
    ckpt__pkw_op(p->b, 0x85);
    ckpt__pkw_op(p->b, 'R');
}

static void pk_tuple_path(ckpt__buf *b, const ckpt__dcp_path_part *parts, uint32_t n) {
    if (n > 3 || n == 0) ckpt__pkw_op(b, n ? '(' : ')');
    if (!n) return;
    for (uint32_t i = 0; i < n; i++) {
        if (parts[i].key) pk_short_str(b, parts[i].key);
        else ckpt__pkw_int(b, (int64_t)parts[i].index);
    }
    ckpt__pkw_op(b, n == 1 ? 0x85 : n == 2 ? 0x86 : n == 3 ? 0x87 : 't');
}

ckpt_status ckpt__dcp_render_metadata(const ckpt__dcp_item_meta *items, size_t count, ckpt__buf *out) {
    meta_pickler p = {.b = out};
    ckpt__buf *b = out;
    ckpt__pkw_op(b, 0x80);
    ckpt__pkw_op(b, 4);
    pk_new(&p, MD, "Metadata");
    ckpt__pkw_op(b, '}');
    ckpt__pkw_op(b, '(');
    pk_short_str(b, "state_dict_metadata");
    ckpt__pkw_op(b, '}');
    for (size_t i = 0; i < count; i++) {
        const ckpt__dcp_item_meta *it = &items[i];
        if (i % 1000 == 0) ckpt__pkw_op(b, '(');
        pk_short_str(b, it->fqn);
        if (it->chunk_count == 0) { /* an object */
            pk_new(&p, MD, "BytesStorageMetadata");
        } else {
            pk_new(&p, MD, "TensorStorageMetadata");
            ckpt__pkw_op(b, '}');
            ckpt__pkw_op(b, '(');
            pk_short_str(b, "properties");
            pk_new(&p, MD, "TensorProperties");
            ckpt__pkw_op(b, '(');
            pk_global4(&p, "torch", ckpt__torch_type_of(it->dtype)->name);
            pk_global4(&p, "torch.serialization", "_get_layout");
            pk_short_str(b, "torch.strided");
            ckpt__pkw_op(b, 0x85);
            ckpt__pkw_op(b, 'R');
            ckpt__pkw_op(b, 0x89);
            pk_global4(&p, MD, "_MEM_FORMAT_ENCODING");
            ckpt__pkw_int(b, 0);
            ckpt__pkw_op(b, 0x85);
            ckpt__pkw_op(b, 'R');
            ckpt__pkw_op(b, 0x89);
            ckpt__pkw_op(b, 't');
            ckpt__pkw_op(b, 'b');
            pk_short_str(b, "size");
            pk_size(&p, it->shape, it->ndim);
            pk_short_str(b, "chunks");
            ckpt__pkw_op(b, ']');
            ckpt__pkw_op(b, '(');
            for (uint32_t k = 0; k < it->chunk_count; k++) {
                pk_new(&p, MD, "ChunkStorageMetadata");
                ckpt__pkw_op(b, '}');
                ckpt__pkw_op(b, '(');
                pk_short_str(b, "offsets");
                pk_size(&p, it->chunks[k].offsets, it->ndim);
                pk_short_str(b, "sizes");
                pk_size(&p, it->chunks[k].sizes, it->ndim);
                ckpt__pkw_op(b, 'u');
                ckpt__pkw_op(b, 'b');
            }
            ckpt__pkw_op(b, 'e');
            ckpt__pkw_op(b, 'u');
            ckpt__pkw_op(b, 'b');
        }
        if (i % 1000 == 999 || i + 1 == count) ckpt__pkw_op(b, 'u');
    }
    pk_short_str(b, "planner_data");
    ckpt__pkw_op(b, '}');
    for (size_t i = 0; i < count; i++) {
        if (i % 1000 == 0) ckpt__pkw_op(b, '(');
        pk_short_str(b, items[i].fqn);
        pk_tuple_path(b, items[i].path, items[i].path_len);
        if (i % 1000 == 999 || i + 1 == count) ckpt__pkw_op(b, 'u');
    }
    pk_short_str(b, "storage_data");
    ckpt__pkw_op(b, '}');
    size_t entry = 0;
    for (size_t i = 0; i < count; i++) {
        const ckpt__dcp_item_meta *it = &items[i];
        uint32_t n = it->chunk_count ? it->chunk_count : 1;
        for (uint32_t k = 0; k < n; k++, entry++) {
            const ckpt__dcp_stored *s = it->chunk_count ? &it->chunks[k].stored : &it->object;
            if (entry % 1000 == 0) ckpt__pkw_op(b, '(');
            pk_new(&p, MD, "MetadataIndex");
            ckpt__pkw_op(b, '}');
            ckpt__pkw_op(b, '(');
            pk_short_str(b, "fqn");
            pk_short_str(b, it->fqn);
            pk_short_str(b, "index");
            if (it->chunk_count) ckpt__pkw_int(b, k);
            else ckpt__pkw_op(b, 'N');
            if (it->chunk_count) {
                pk_short_str(b, "offset");
                pk_size(&p, it->chunks[k].offsets, it->ndim);
            }
            ckpt__pkw_op(b, 'u');
            ckpt__pkw_op(b, 'b');
            pk_new(&p, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
            ckpt__pkw_op(b, '}');
            ckpt__pkw_op(b, '(');
            pk_short_str(b, "relative_path");
            pk_short_str(b, s->relative_path);
            pk_short_str(b, "offset");
            ckpt__pkw_int(b, (int64_t)s->offset);
            pk_short_str(b, "length");
            ckpt__pkw_int(b, (int64_t)s->length);
            ckpt__pkw_op(b, 'u');
            ckpt__pkw_op(b, 'b');
            if (entry % 1000 == 999) ckpt__pkw_op(b, 'u');
        }
    }
    if (entry % 1000) ckpt__pkw_op(b, 'u');
    /* StorageMeta without an id or a path: the same checkpoint renders to
     * the same bytes wherever it is written. */
    pk_short_str(b, "storage_meta");
    pk_new(&p, MD, "StorageMeta");
    ckpt__pkw_op(b, '}');
    ckpt__pkw_op(b, '(');
    pk_short_str(b, "checkpoint_id");
    ckpt__pkw_op(b, 'N');
    pk_short_str(b, "save_id");
    ckpt__pkw_op(b, 'N');
    pk_short_str(b, "load_id");
    ckpt__pkw_op(b, 'N');
    pk_short_str(b, "modules");
    ckpt__pkw_op(b, ']');
    ckpt__pkw_op(b, 'u');
    ckpt__pkw_op(b, 'b');
    pk_short_str(b, "version");
    pk_short_str(b, "1.0.0");
    ckpt__pkw_op(b, 'u');
    ckpt__pkw_op(b, 'b');
    ckpt__pkw_op(b, '.');
    return b->failed ? CKPT_E_NO_MEMORY : CKPT_OK;
}
