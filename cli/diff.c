/* diff.c — `ckpt diff A B [--json] [-q]`: what differs between two
 * checkpoints, tensor by tensor, reading both in bounded chunks. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_gguf.h"
#include "cli.h"

const char diff_usage[] =
    "usage: ckpt diff A B [--json] [-q] [--as-hf] [--direct] [remote options]\n"
    "\n"
    "Compare the tensors of two checkpoints, of any formats ckpt reads: names\n"
    "only in A or only in B, dtype and shape changes, and tensors whose values\n"
    "differ, with how many elements differ, the largest absolute difference and\n"
    "where it is, and for floats the largest difference in ULPs (units in the\n"
    "last place) and the root mean square of the differences.  Tensors with the\n"
    "same shape and float dtypes that differ (f32 against bf16) are compared by\n"
    "value, their ULPs counted in F32 (F64 when one side is F64); GGUF block types\n"
    "(Q8_0, Q4_0, Q4_K, ...) are dequantized to F32 first, as gguf.quants does, so\n"
    "that a quantized file compares with its source.  Data is read in chunks of a\n"
    "few MiB, never a whole tensor; metadata and the object tree are not compared.\n"
    "\n"
    "A llama.cpp GGUF (general.architecture set) names its tensors as llama.cpp\n"
    "does (blk.0.attn_q.weight), a Hugging Face model as transformers does\n"
    "(model.layers.0.self_attn.q_proj.weight): --as-hf views each llama.cpp GGUF\n"
    "side as the Hugging Face model it was converted from, the tensors of the\n"
    "directory `ckpt convert --to hf` writes without writing it — Hugging Face's\n"
    "names, llama's Q/K rows put back, Gemma's norms less the 1 the script added,\n"
    "block types dequantized to F32 (float tensors keep their dtype) — so that\n"
    "a model and its GGUF compare value by value, read a few MiB of rows at a\n"
    "time as well; a mixture of experts' stacked tensors are refused, as\n"
    "a load refuses them.  When no name matches and one side is a llama.cpp\n"
    "GGUF, a hint says so.\n"
    "\n"
    "A and B are any checkpoints ckpt reads:\n" CLI_READ_FORMATS
    "\n"
    "options:\n"
    "  --json                 machine-readable report on stdout\n"
    "  -q, --quiet            print nothing; stop at the first difference\n"
    "  --as-hf                view a llama.cpp GGUF as its Hugging Face model\n"
    "  --allow-global MODULE.NAME\n"
    "                         allow this pickle global in torch files (repeatable),\n"
    "                         as torch's add_safe_globals; nothing is executed\n"
    "  --progress / --no-progress\n"
    "                         force the progress bar on or off (default: on when\n"
    "                         stderr is a terminal)\n"
    "  -h, --help             show this help\n"
    "\n"
    "Exit status (cmp's and diff's): 0 identical, 1 different, 2 trouble (an\n"
    "unreadable input, with an error on stderr, or a usage error), 130\n"
    "interrupted.\n";

/* Elements per chunk: 8 MiB of the widest dtype, and of each float64 copy. */
enum { CHUNK_ELEMS = 1 << 20, CHUNK_BYTES = 8 << 20 };

typedef enum kind { ONLY_A, ONLY_B, SHAPE, DTYPE, VALUES } kind;

/* How two tensors' elements compare. */
typedef enum family { FAM_BYTES, FAM_FLOAT, FAM_SIGNED, FAM_UNSIGNED } family;

typedef struct diff_entry {
    kind kind;
    const ckpt_tensor_info *a, *b; /* a or b NULL for ONLY_B / ONLY_A */
    bool compared;                 /* values were read */
    family fam;
    uint64_t elements, differ;     /* elements (bytes for FAM_BYTES) compared, and how many differ */
    uint64_t nan_mismatch;         /* a NaN on one side only */
    double max_abs;                /* FAM_FLOAT: the largest |a - b| (NaN pairs aside) */
    double sum_sq;                 /* FAM_FLOAT: the sum of (a - b)², for the RMS */
    uint64_t max_abs_int;          /* integers: the largest |a - b| */
    uint64_t max_ulp;              /* in the units of ulp_dtype */
    bool has_ulp;
    ckpt_dtype ulp_dtype;          /* the dtype both sides are exact in (dequantized: F32) */
    uint64_t at;                   /* element (byte) of the largest difference, else of the first */
    bool has_at;
} diff_entry;

/* One side of the comparison: a catalog's tensors as they are, or, with
 * --as-hf and a llama.cpp GGUF, the Hugging Face model it was converted
 * from — the library's view (ckpt_gguf_hf_plan_tensors), whose tensors
 * are plan items, read by loading the source tensor they come from. */
typedef struct side {
    ckpt_catalog *catalog;
    ckpt_plan *view;            /* the view's tensors; NULL: the catalog's own */
    ckpt_tensor_info *tensors;  /* the view's, described as the catalog describes its own */
    const char **sources;       /* each one's tensor in the GGUF */
    size_t *by_name;            /* indexes sorted by name, for find */
    size_t count;
    ckpt_plan *loaded;          /* the plan last loaded: rows of one tensor of the view */
    const ckpt_tensor_info *loaded_tensor; /* that tensor, NULL: none */
    uint64_t loaded_from, loaded_to; /* the bytes of it loaded: whole rows */
    uint64_t band;              /* the rows its slices keep whole (view_band) */
} side;

typedef struct differ {
    side a, b;
    const char *path_a, *path_b;
    unsigned char *raw_a, *raw_b;
    double *val_a, *val_b;
    progress_bar bar;
    uint64_t done, total;
    bool quiet;
    char hint;             /* 'A' or 'B': the one side that is a llama.cpp GGUF, seen under its own names */
    const char *hint_arch; /* its general.architecture */
    ckpt_error err;
} differ;

static bool is_float(ckpt_dtype d) {
    switch (d) {
    case CKPT_F16: case CKPT_BF16: case CKPT_F32: case CKPT_F64: case CKPT_C64: case CKPT_F8_E5M2:
    case CKPT_F8_E4M3: case CKPT_F8_E8M0: case CKPT_F8_E4M3FNUZ: case CKPT_F8_E5M2FNUZ: return true;
    default: return false;
    }
}

static bool is_signed_int(ckpt_dtype d) { return d == CKPT_I8 || d == CKPT_I16 || d == CKPT_I32 || d == CKPT_I64; }
static bool is_unsigned_int(ckpt_dtype d) { return d == CKPT_U8 || d == CKPT_U16 || d == CKPT_U32 || d == CKPT_U64; }

/* GGUF block types that ckpt dequantizes: compared by their values. */
static bool dequantizes(ckpt_dtype d) { return ckpt_dtype_is_block(d) && ckpt_can_cast(d, CKPT_F32); }

/* Bytes of one compared element: a float component of C64 is an element. */
static unsigned elem_bytes(ckpt_dtype d) { return d == CKPT_C64 ? 4 : ckpt_dtype_bits(d) / 8; }

/* Bytes of `count` elements (block types: whole blocks). */
static uint64_t bytes_of(ckpt_dtype d, uint64_t count) {
    if (ckpt_dtype_is_block(d)) return count / ckpt_dtype_block_elems(d) * ckpt_dtype_block_bytes(d);
    return count * elem_bytes(d);
}
static ckpt_dtype elem_dtype(ckpt_dtype d) { return d == CKPT_C64 ? CKPT_F32 : d; }

static bool same_shape(const ckpt_tensor_info *a, const ckpt_tensor_info *b) {
    if (a->ndim != b->ndim) return false;
    for (uint32_t d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* The bit pattern of element i of a little-endian buffer. */
static inline uint64_t bits_at(const unsigned char *p, unsigned size, uint64_t i) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    switch (size) {
    case 1: return p[i];
    case 2: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    case 8: { uint64_t v; memcpy(&v, p + 8 * i, 8); return v; }
    default: break;
    }
#endif
    uint64_t v = 0;
    for (unsigned k = 0; k < size; k++) v |= (uint64_t)p[i * size + k] << (8 * k);
    return v;
}

/* The distance in representable values between two non-NaN floats of one
 * dtype, from their bit patterns (sign-magnitude ordering, so that -0 and
 * +0 are 0 apart and the smallest negative and positive subnormals 2). */
static uint64_t ulp_distance(uint64_t x, uint64_t y, unsigned bits, bool has_sign) {
    if (!has_sign) return x > y ? x - y : y - x;
    uint64_t sign = 1ULL << (bits - 1), mask = sign - 1;
    uint64_t mx = x & mask, my = y & mask;
    if ((x & sign) == (y & sign)) return mx > my ? mx - my : my - mx;
    return mx + my;
}

static int64_t signed_at(const unsigned char *p, unsigned size, uint64_t i) {
    uint64_t v = bits_at(p, size, i);
    if (size < 8 && (v >> (8 * size - 1)) & 1) v |= ~0ULL << (8 * size);
    return (int64_t)v;
}

/* Decodes `count` float elements of dtype d into doubles; a block type is
 * dequantized to float32 (as gguf.quants does), widened in place. */
static ckpt_status decode_floats(ckpt_dtype d, const unsigned char *raw, double *out, uint64_t count, ckpt_error *err) {
    if (d == CKPT_F64) {
        memcpy(out, raw, count * 8);
        return CKPT_OK;
    }
    if (!ckpt_dtype_is_block(d)) return ckpt_cast(d, raw, CKPT_F64, out, count, err);
    float *f = (float *)(void *)out;
    ckpt_status st = ckpt_cast(d, raw, CKPT_F32, f, count, err);
    for (uint64_t i = count; st == CKPT_OK && i-- > 0;) out[i] = f[i]; /* from the end: nothing read is overwritten */
    return st;
}

static int tick(differ *df, uint64_t bytes) {
    df->done += bytes;
    return progress_update(df->done, df->total, &df->bar);
}

static ckpt_status cancelled(differ *df) {
    df->err.status = CKPT_E_CANCELLED;
    snprintf(df->err.message, sizeof df->err.message, "interrupted");
    return CKPT_E_CANCELLED;
}

/* One chunk of elements of `size` bytes whose raw bytes differ somewhere:
 * counts and extremes into e.  Written once per size so that loads and
 * the ULP arithmetic have constant widths, with the running values in
 * locals (the buffers are unsigned char, which may alias anything). */
#define DEFINE_SCAN(size)                                                                                              \
    static void scan_##size(const unsigned char *ra, const unsigned char *rb, const double *va, const double *vb,     \
                            uint64_t count, uint64_t first, family fam, bool has_sign, diff_entry *e) {               \
        uint64_t ndiffer = e->differ, nan_mismatch = e->nan_mismatch, max_ulp = e->max_ulp;                           \
        uint64_t max_int = e->max_abs_int, at = e->at;                                                              \
        double max_abs = e->max_abs, sum_sq = e->sum_sq;                                                             \
        bool has_at = e->has_at;                                                                                     \
        for (uint64_t i = 0; i < count; i++) {                                                                      \
            uint64_t x = bits_at(ra, size, i), y = bits_at(rb, size, i);                                             \
            if (x == y) continue;                                                                                    \
            ndiffer++;                                                                                               \
            if (!has_at) at = first + i, has_at = true;                                                              \
            if (fam == FAM_FLOAT) {                                                                                  \
                double fa = va[i], fb = vb[i];                                                                       \
                if (isnan(fa) || isnan(fb)) {                                                                        \
                    nan_mismatch += isnan(fa) != isnan(fb);                                                          \
                    continue; /* two NaNs of different payloads: differ, no distance */                              \
                }                                                                                                    \
                double d = fabs(fa - fb);                                                                            \
                sum_sq += d * d;                                                                                     \
                if (d > max_abs) max_abs = d, at = first + i;                                                        \
                uint64_t u = ulp_distance(x, y, 8 * size, has_sign);                                                 \
                if (u > max_ulp) max_ulp = u;                                                                        \
            } else if (fam == FAM_SIGNED) {                                                                          \
                int64_t sa = signed_at(ra, size, i), sb = signed_at(rb, size, i);                                    \
                uint64_t d = sa > sb ? (uint64_t)sa - (uint64_t)sb : (uint64_t)sb - (uint64_t)sa;                    \
                if (d > max_int) max_int = d, at = first + i;                                                        \
            } else if (fam == FAM_UNSIGNED) {                                                                        \
                uint64_t d = x > y ? x - y : y - x;                                                                  \
                if (d > max_int) max_int = d, at = first + i;                                                        \
            }                                                                                                        \
        }                                                                                                            \
        e->differ = ndiffer, e->nan_mismatch = nan_mismatch, e->max_ulp = max_ulp, e->max_abs_int = max_int;          \
        e->at = at, e->max_abs = max_abs, e->sum_sq = sum_sq, e->has_at = has_at;                                    \
    }
DEFINE_SCAN(1)
DEFINE_SCAN(2)
DEFINE_SCAN(4)
DEFINE_SCAN(8)

/* ---- the sides ---------------------------------------------------------- */

/* A llama.cpp GGUF: its architecture (general.architecture), else NULL. */
static const char *llamacpp_arch(const ckpt_catalog *c) {
    return ckpt_catalog_format(c) == CKPT_FORMAT_GGUF ? ckpt_catalog_metadata_get(c, "general.architecture") : NULL;
}

static bool is_float_dtype(ckpt_dtype d) { return d == CKPT_F16 || d == CKPT_BF16 || d == CKPT_F32 || d == CKPT_F64; }

/* The view's plan: every tensor (or only those made of `source`) in
 * Hugging Face's terms, block types dequantized to F32 (exact), float
 * tensors of their own dtype, so that an F16 GGUF compares with an F16
 * model as equal. */
static ckpt_status view_plan(ckpt_catalog *c, const char *source, ckpt_plan **out, ckpt_error *err) {
    char pattern[8192];
    ckpt_plan *p = NULL;
    ckpt_status st = ckpt_plan_create(c, &p, err);
    if (st == CKPT_OK) st = ckpt_gguf_hf_plan_tensors(p, CKPT_F32, err);
    if (st == CKPT_OK && source) {
        glob_escape(source, pattern, sizeof pattern);
        st = ckpt_plan_select(p, pattern, err);
    }
    for (size_t i = 0; st == CKPT_OK && i < ckpt_plan_count(p); i++) {
        const ckpt_plan_item *it = ckpt_plan_item_at(p, i);
        if (!is_float_dtype(it->source->dtype) || it->dtype == it->source->dtype) continue;
        glob_escape(it->source->name, pattern, sizeof pattern);
        st = ckpt_plan_cast(p, pattern, it->source->dtype, err);
    }
    if (st != CKPT_OK) ckpt_plan_free(p), p = NULL;
    *out = p;
    return st;
}

/* A failure of the CLI's own, as the library reports one. */
static ckpt_status fail(ckpt_error *err, ckpt_status st, const char *tensor, const char *message) {
    ckpt_error_clear(err);
    err->status = st;
    snprintf(err->tensor, sizeof err->tensor, "%s", tensor ? tensor : "");
    snprintf(err->message, sizeof err->message, "%s%s%s", tensor ? tensor : "", tensor ? ": " : "", message);
    return st;
}

static const side *sort_side;
static int by_name(const void *x, const void *y) {
    return strcmp(sort_side->tensors[*(const size_t *)x].name, sort_side->tensors[*(const size_t *)y].name);
}

/* Makes `s` the view of its llama.cpp GGUF. */
static ckpt_status side_view(side *s, ckpt_error *err) {
    ckpt_status st = view_plan(s->catalog, NULL, &s->view, err);
    if (st != CKPT_OK) return st;
    size_t n = ckpt_plan_count(s->view);
    s->tensors = calloc(n + 1, sizeof *s->tensors);
    s->sources = calloc(n + 1, sizeof *s->sources);
    s->by_name = calloc(n + 1, sizeof *s->by_name);
    if (!s->tensors || !s->sources || !s->by_name)
        return fail(err, CKPT_E_NO_MEMORY, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const ckpt_plan_item *it = ckpt_plan_item_at(s->view, i);
        s->tensors[i] = (ckpt_tensor_info){.name = it->name, .dtype = it->dtype, .ndim = it->ndim,
                                           .shape = it->shape, .numel = it->numel, .nbytes = it->nbytes};
        s->sources[i] = it->source->name;
        s->by_name[i] = i;
    }
    s->count = n;
    sort_side = s;
    qsort(s->by_name, n, sizeof *s->by_name, by_name);
    return CKPT_OK;
}

static size_t side_count(const side *s) { return s->view ? s->count : ckpt_catalog_tensor_count(s->catalog); }

static const ckpt_tensor_info *side_tensor(const side *s, size_t i) {
    return s->view ? &s->tensors[i] : ckpt_catalog_tensor(s->catalog, i);
}

static const ckpt_tensor_info *side_find(const side *s, const char *name) {
    if (!s->view) return ckpt_catalog_find(s->catalog, name);
    for (size_t lo = 0, hi = s->count; lo < hi;) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, s->tensors[s->by_name[mid]].name);
        if (!c) return &s->tensors[s->by_name[mid]];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

/* The rows of the view's tensor t (of its source, `source`) that a slice
 * must keep whole: 1, or the band of rows the view reorders among
 * themselves (llama.cpp's Q/K rows: a head's), the smallest count of
 * leading rows the library slices it at (a probe: no bytes are read). */
static ckpt_status view_band(side *s, const ckpt_tensor_info *t, const char *source, uint64_t *band,
                             ckpt_error *err) {
    char pattern[8192];
    ckpt_plan *p;
    uint64_t rows = t->ndim ? t->shape[0] : 1;
    *band = rows ? rows : 1;
    if (t->ndim < 2) return CKPT_OK; /* a vector or a scalar: read whole (small) */
    ckpt_status st = view_plan(s->catalog, source, &p, err);
    if (st != CKPT_OK) return st;
    glob_escape(source, pattern, sizeof pattern);
    ckpt_error refused;
    for (uint64_t b = 1; b < rows; b++)
        if (rows % b == 0 && ckpt_plan_slice(p, pattern, 0, 0, b, &refused) == CKPT_OK) {
            *band = b;
            break;
        }
    ckpt_plan_free(p);
    return CKPT_OK;
}

/* `len` bytes of tensor `t` from byte `off`: the catalog's read, or, for a
 * view's tensor, copied from the rows of it that hold them, loaded through
 * the view as a slice of its leading axis (in whole bands where the view
 * reorders rows, view_band) — a chunk's worth at a time, never the tensor
 * whole: a vocabulary's embedding dequantized to F32 is gigabytes. */
static ckpt_status side_read(side *s, const ckpt_tensor_info *t, uint64_t off, void *buf, uint64_t len,
                             ckpt_error *err) {
    if (!s->view) return ckpt_catalog_read(s->catalog, t, off, buf, len, err);
    const char *source = s->sources[t - s->tensors];
    ckpt_status st = CKPT_OK;
    if (s->loaded_tensor != t) {
        s->loaded_tensor = NULL;
        if ((st = view_band(s, t, source, &s->band, err)) != CKPT_OK) return st;
        s->loaded_tensor = t, s->loaded_from = s->loaded_to = 0;
    }
    if (off < s->loaded_from || off + len > s->loaded_to) { /* the band of rows holding [off, off + len) */
        uint64_t rows = t->ndim ? t->shape[0] : 1, row = t->nbytes / (rows ? rows : 1);
        uint64_t r0 = off / row / s->band * s->band, r1 = (off + len + row - 1) / row;
        r1 = (r1 + s->band - 1) / s->band * s->band;
        if (r1 > rows) r1 = rows;
        char pattern[8192];
        ckpt_plan_free(s->loaded);
        s->loaded = NULL, s->loaded_from = s->loaded_to = 0;
        st = view_plan(s->catalog, source, &s->loaded, err);
        glob_escape(source, pattern, sizeof pattern);
        if (st == CKPT_OK && t->ndim && (r0 || r1 < rows)) st = ckpt_plan_slice(s->loaded, pattern, 0, r0, r1, err);
        ckpt_load_options o;
        ckpt_load_options_init(&o);
        o.views = 0;
        if (st == CKPT_OK) st = ckpt_load(s->loaded, &o, err);
        if (st != CKPT_OK) return st;
        s->loaded_from = r0 * row, s->loaded_to = r1 * row;
    }
    size_t k;
    const ckpt_plan_item *it = ckpt_plan_find(s->loaded, t->name, &k);
    if (!it || !it->data || it->nbytes != s->loaded_to - s->loaded_from || off + len > s->loaded_to)
        return fail(err, CKPT_E_BAD_STATE, t->name, "the Hugging Face view did not load this tensor");
    memcpy(buf, (const unsigned char *)it->data + (off - s->loaded_from), (size_t)len);
    return CKPT_OK;
}

static void side_close(side *s) {
    ckpt_plan_free(s->loaded);
    ckpt_plan_free(s->view);
    free(s->tensors);
    free(s->sources);
    free(s->by_name);
    ckpt_catalog_close(s->catalog);
}

/* Same dtype, same shape: raw chunks compared, decoded only where they
 * differ. */
static ckpt_status compare_same(differ *df, diff_entry *e) {
    const ckpt_tensor_info *a = e->a, *b = e->b;
    ckpt_dtype d = a->dtype;
    unsigned size = elem_bytes(d);
    family fam = is_float(d) ? FAM_FLOAT : is_signed_int(d) ? FAM_SIGNED : is_unsigned_int(d) ? FAM_UNSIGNED : FAM_BYTES;
    if (!size) fam = FAM_BYTES; /* F4, F6: packed */
    if (fam == FAM_BYTES) size = 1;
    e->fam = fam;
    e->elements = a->nbytes / size;
    e->has_ulp = fam == FAM_FLOAT;
    ckpt_dtype ed = elem_dtype(d);
    e->ulp_dtype = ed;
    bool has_sign = ed != CKPT_F8_E8M0;
    uint64_t step = fam == FAM_BYTES ? CHUNK_BYTES : (uint64_t)CHUNK_ELEMS * size;
    for (uint64_t off = 0; off < a->nbytes; off += step) {
        uint64_t len = a->nbytes - off < step ? a->nbytes - off : step, count = len / size, first = off / size;
        ckpt_status st = side_read(&df->a, a, off, df->raw_a, len, &df->err);
        if (st == CKPT_OK) st = side_read(&df->b, b, off, df->raw_b, len, &df->err);
        if (st != CKPT_OK) return st;
        if (tick(df, 2 * len)) return cancelled(df);
        if (!memcmp(df->raw_a, df->raw_b, (size_t)len)) continue;
        if (fam == FAM_FLOAT && (st = decode_floats(ed, df->raw_a, df->val_a, count, &df->err)) == CKPT_OK)
            st = decode_floats(ed, df->raw_b, df->val_b, count, &df->err);
        if (st != CKPT_OK) return st;
        switch (fam == FAM_BYTES ? 0 : size) {
        case 1: scan_1(df->raw_a, df->raw_b, df->val_a, df->val_b, count, first, fam, has_sign, e); break;
        case 2: scan_2(df->raw_a, df->raw_b, df->val_a, df->val_b, count, first, fam, has_sign, e); break;
        case 4: scan_4(df->raw_a, df->raw_b, df->val_a, df->val_b, count, first, fam, has_sign, e); break;
        case 8: scan_8(df->raw_a, df->raw_b, df->val_a, df->val_b, count, first, fam, has_sign, e); break;
        default: scan_1(df->raw_a, df->raw_b, NULL, NULL, count, first, FAM_BYTES, false, e); break;
        }
        if (df->quiet) return CKPT_OK;
    }
    return CKPT_OK;
}

/* The bit pattern of v in `ulp_dtype` (F32 or F64), where it is exact. */
static uint64_t ulp_bits(double v, ckpt_dtype ulp_dtype) {
    if (ulp_dtype == CKPT_F64) {
        uint64_t u;
        memcpy(&u, &v, 8);
        return u;
    }
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* One chunk of decoded values of two dtypes: counts, extremes, the sum of
 * squares and ULPs (in e->ulp_dtype) into e. */
static void compare_float_chunk(diff_entry *e, const double *va, const double *vb, uint64_t count, uint64_t first) {
    unsigned bits = e->ulp_dtype == CKPT_F64 ? 64 : 32;
    for (uint64_t i = 0; i < count; i++) {
        double x = va[i], y = vb[i];
        if (isnan(x) && isnan(y)) continue;
        if (x == y && signbit(x) == signbit(y)) continue;
        e->differ++;
        if (!e->has_at) e->at = first + i, e->has_at = true;
        if (isnan(x) || isnan(y)) {
            e->nan_mismatch++;
            continue;
        }
        double abs = fabs(x - y);
        e->sum_sq += abs * abs;
        if (abs > e->max_abs) e->max_abs = abs, e->at = first + i;
        uint64_t u = ulp_distance(ulp_bits(x, e->ulp_dtype), ulp_bits(y, e->ulp_dtype), bits, true);
        if (u > e->max_ulp) e->max_ulp = u;
    }
}

/* Integers of two dtypes: BOOL and unsigned values are non-negative; a
 * U64 above INT64_MAX cannot equal a signed value. */
static void compare_int_chunk(diff_entry *e, const unsigned char *ra, const unsigned char *rb, uint64_t count,
                              uint64_t first) {
    ckpt_dtype da = e->a->dtype, db = e->b->dtype;
    unsigned sa = elem_bytes(da), sb = elem_bytes(db);
    for (uint64_t i = 0; i < count; i++) {
        uint64_t ua = bits_at(ra, sa, i), ub = bits_at(rb, sb, i);
        bool neg_a = is_signed_int(da) && (ua >> (8 * sa - 1)) & 1, neg_b = is_signed_int(db) && (ub >> (8 * sb - 1)) & 1;
        if (neg_a) ua = (uint64_t)signed_at(ra, sa, i);
        if (neg_b) ub = (uint64_t)signed_at(rb, sb, i);
        if (ua == ub && neg_a == neg_b) continue;
        e->differ++;
        if (!e->has_at) e->at = first + i, e->has_at = true;
        uint64_t abs;
        if (neg_a == neg_b) abs = ua > ub ? ua - ub : ub - ua;
        else abs = neg_a ? ub - ua : ua - ub; /* |neg| + pos, as unsigned wraps exactly */
        if (abs > e->max_abs_int) e->max_abs_int = abs, e->at = first + i;
    }
}

/* Same shape, two float dtypes — GGUF block types dequantized to F32 — or
 * two integer ones: values compared as float64 (as 64-bit integers),
 * chunk by chunk. */
static ckpt_status compare_values(differ *df, diff_entry *e) {
    const ckpt_tensor_info *a = e->a, *b = e->b;
    ckpt_dtype da = a->dtype, db = b->dtype;
    bool floats = is_float(da) || dequantizes(da);
    e->fam = floats ? FAM_FLOAT : FAM_SIGNED;
    e->elements = a->numel;
    e->has_ulp = floats;
    e->ulp_dtype = da == CKPT_F64 || db == CKPT_F64 ? CKPT_F64 : CKPT_F32; /* every other float is exact in F32 */
    for (uint64_t first = 0; first < e->elements; first += CHUNK_ELEMS) {
        uint64_t count = e->elements - first < CHUNK_ELEMS ? e->elements - first : CHUNK_ELEMS;
        uint64_t la = bytes_of(da, count), lb = bytes_of(db, count);
        ckpt_status st = side_read(&df->a, a, bytes_of(da, first), df->raw_a, la, &df->err);
        if (st == CKPT_OK) st = side_read(&df->b, b, bytes_of(db, first), df->raw_b, lb, &df->err);
        if (st != CKPT_OK) return st;
        if (tick(df, la + lb)) return cancelled(df);
        if (floats) {
            if ((st = decode_floats(da, df->raw_a, df->val_a, count, &df->err)) != CKPT_OK ||
                (st = decode_floats(db, df->raw_b, df->val_b, count, &df->err)) != CKPT_OK)
                return st;
            compare_float_chunk(e, df->val_a, df->val_b, count, first);
        } else {
            compare_int_chunk(e, df->raw_a, df->raw_b, count, first);
        }
        if (df->quiet && e->differ) return CKPT_OK;
    }
    return CKPT_OK;
}

static bool comparable_values(ckpt_dtype a, ckpt_dtype b) {
    if (a == CKPT_C64 || b == CKPT_C64) return false;
    if ((is_float(a) || dequantizes(a)) && (is_float(b) || dequantizes(b))) return true;
    bool ia = is_signed_int(a) || is_unsigned_int(a) || a == CKPT_BOOL, ib = is_signed_int(b) || is_unsigned_int(b) || b == CKPT_BOOL;
    return ia && ib;
}

/* ---- output ------------------------------------------------------------- */

static const char *kind_key(kind k) {
    static const char *const keys[] = {"only_in_a", "only_in_b", "shape", "dtype", "values"};
    return keys[k];
}

static void shape_text(const ckpt_tensor_info *t, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %" PRIu64 : "%" PRIu64, t->shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Element `at` of a tensor as "[i, j, k]" (row-major). */
static void index_text(const ckpt_tensor_info *t, uint64_t at, bool components, char *buf, size_t cap) {
    uint64_t idx[CKPT_MAX_DIMS], rest = components ? at / 2 : at;
    for (uint32_t d = t->ndim; d-- > 0;) {
        idx[d] = t->shape[d] ? rest % t->shape[d] : 0;
        rest = t->shape[d] ? rest / t->shape[d] : 0;
    }
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %" PRIu64 : "%" PRIu64, idx[d]);
    if (n < cap) n += (size_t)snprintf(buf + n, cap - n, "]");
    if (components && n < cap) snprintf(buf + n, cap - n, "%s", at % 2 ? ".imag" : ".real");
}

/* The root mean square of the differences (NaN pairs aside). */
static double rms(const diff_entry *e) {
    uint64_t n = e->elements - e->nan_mismatch;
    return n ? sqrt(e->sum_sq / (double)n) : 0;
}

static void print_detail(FILE *o, const diff_entry *e) {
    char count[32], total[32], at[600], num[64];
    const char *unit = e->fam == FAM_BYTES ? "bytes" : e->a->dtype == CKPT_C64 ? "components" : "values";
    format_count(e->differ, count, sizeof count);
    format_count(e->elements, total, sizeof total);
    fprintf(o, "%s of %s %s differ", count, total, unit);
    if (e->fam == FAM_BYTES) {
        fprintf(o, ", first at byte %" PRIu64, e->at);
        return;
    }
    index_text(e->a, e->at, e->a->dtype == CKPT_C64 && e->a->dtype == e->b->dtype, at, sizeof at);
    if (e->fam == FAM_FLOAT) {
        if (e->nan_mismatch < e->differ) fprintf(o, ", max abs diff %.6g at %s", e->max_abs, at);
        if (e->has_ulp && e->nan_mismatch < e->differ)
            fprintf(o, ", max %s ULP%s%s", format_count(e->max_ulp, num, sizeof num),
                    e->a->dtype != e->b->dtype ? " of " : "", e->a->dtype != e->b->dtype ? ckpt_dtype_name(e->ulp_dtype) : "");
        if (e->nan_mismatch < e->differ) fprintf(o, ", RMS %.6g", rms(e));
        if (e->nan_mismatch) fprintf(o, ", %s NaN on one side only", format_count(e->nan_mismatch, num, sizeof num));
        if (e->nan_mismatch == e->differ && e->nan_mismatch) fprintf(o, ", first at %s", at);
    } else {
        fprintf(o, ", max abs diff %s at %s", format_count(e->max_abs_int, num, sizeof num), at);
    }
}

static void print_text(const differ *df, const diff_entry *list, size_t count, const size_t counts[5], size_t identical,
                       uint64_t identical_bytes) {
    FILE *o = stdout;
    char sa[600], sb[600], size[32];
    int w = 0;
    for (size_t i = 0; i < count; i++) {
        const ckpt_tensor_info *t = list[i].a ? list[i].a : list[i].b;
        int c = text_columns(printable(t->name));
        if (c > w) w = c;
    }
    if (w > 50) w = 50;
    if (count) {
        fprintf(o, "--- A: %s (%zu tensors)\n", printable(df->path_a), side_count(&df->a));
        fprintf(o, "+++ B: %s (%zu tensors)\n", printable(df->path_b), side_count(&df->b));
    }
    for (size_t i = 0; i < count; i++) {
        const diff_entry *e = &list[i];
        const ckpt_tensor_info *t = e->a ? e->a : e->b;
        static const char marks[] = {'-', '+', '~', '~', '~'};
        fprintf(o, "%c ", marks[e->kind]);
        print_padded(o, t->name, w);
        fputs("  ", o);
        switch (e->kind) {
        case ONLY_A:
        case ONLY_B:
            shape_text(t, sa, sizeof sa);
            fprintf(o, "%s %s  only in %s", ckpt_dtype_name(t->dtype), sa, e->kind == ONLY_A ? "A" : "B");
            break;
        case SHAPE:
            shape_text(e->a, sa, sizeof sa);
            shape_text(e->b, sb, sizeof sb);
            if (e->a->dtype != e->b->dtype)
                fprintf(o, "dtype %s -> %s, ", ckpt_dtype_name(e->a->dtype), ckpt_dtype_name(e->b->dtype));
            fprintf(o, "shape %s -> %s", sa, sb);
            break;
        case DTYPE:
            shape_text(e->a, sa, sizeof sa);
            fprintf(o, "dtype %s -> %s %s", ckpt_dtype_name(e->a->dtype), ckpt_dtype_name(e->b->dtype), sa);
            if (e->compared && e->differ) {
                fputs(": ", o);
                print_detail(o, e);
            } else if (e->compared) {
                fputs(": equal values", o);
            }
            break;
        case VALUES:
            shape_text(e->a, sa, sizeof sa);
            fprintf(o, "%s %s: ", ckpt_dtype_name(e->a->dtype), sa);
            print_detail(o, e);
            break;
        }
        fputc('\n', o);
    }
    format_bytes(identical_bytes, size, sizeof size);
    if (!count) {
        fprintf(o, "identical: %zu tensor%s, %s\n", identical, identical == 1 ? "" : "s", size);
        return;
    }
    static const char *const words[] = {"only in A", "only in B", "shape", "dtype", "values"};
    fputs("differ:", o);
    bool first = true;
    for (int k = 0; k < 5; k++) {
        if (!counts[k]) continue;
        fprintf(o, "%s %zu %s", first ? "" : ",", counts[k], words[k]);
        first = false;
    }
    fprintf(o, "; %zu identical (%s)\n", identical, size);
}

static void json_shape(FILE *o, const ckpt_tensor_info *t) {
    fputc('[', o);
    for (uint32_t d = 0; d < t->ndim; d++) fprintf(o, d ? ", %" PRIu64 : "%" PRIu64, t->shape[d]);
    fputc(']', o);
}

static void json_double(FILE *o, double v) {
    if (isinf(v)) fputs("\"inf\"", o);
    else {
        char shortest[32]; /* the shortest digits that read back as v, as every float ckpt writes */
        ckpt__shortest_float(shortest, sizeof shortest, v, false);
        fputs(shortest, o);
    }
}

static void print_json(const differ *df, const diff_entry *list, size_t count, const size_t counts[5], size_t identical) {
    FILE *o = stdout;
    fputs("{\n  \"a\": ", o);
    print_json_string(o, df->path_a);
    fputs(",\n  \"b\": ", o);
    print_json_string(o, df->path_b);
    fprintf(o, ",\n  \"identical\": %s,\n  \"tensors_a\": %zu,\n  \"tensors_b\": %zu,\n  \"identical_tensors\": %zu,\n",
            count ? "false" : "true", side_count(&df->a), side_count(&df->b), identical);
    fputs("  \"counts\": {", o);
    for (int k = 0; k < 5; k++) fprintf(o, "%s\"%s\": %zu", k ? ", " : "", kind_key((kind)k), counts[k]);
    fputs("},\n  \"differences\": [", o);
    for (size_t i = 0; i < count; i++) {
        const diff_entry *e = &list[i];
        const ckpt_tensor_info *t = e->a ? e->a : e->b;
        fputs(i ? ",\n    {\"name\": " : "\n    {\"name\": ", o);
        print_json_string(o, t->name);
        fprintf(o, ", \"kind\": \"%s\"", kind_key(e->kind));
        if (e->a) {
            fprintf(o, ", \"a\": {\"dtype\": \"%s\", \"shape\": ", ckpt_dtype_name(e->a->dtype));
            json_shape(o, e->a);
            fputc('}', o);
        }
        if (e->b) {
            fprintf(o, ", \"b\": {\"dtype\": \"%s\", \"shape\": ", ckpt_dtype_name(e->b->dtype));
            json_shape(o, e->b);
            fputc('}', o);
        }
        if (e->compared) {
            fprintf(o, ", \"compared\": \"%s\", \"elements\": %" PRIu64 ", \"differ\": %" PRIu64,
                    e->fam == FAM_BYTES ? "bytes" : "values", e->elements, e->differ);
            if (e->fam == FAM_FLOAT) {
                fputs(", \"max_abs_diff\": ", o);
                if (e->nan_mismatch < e->differ) json_double(o, e->max_abs);
                else fputs("null", o);
                fputs(", \"rms_diff\": ", o);
                json_double(o, rms(e));
                fprintf(o, ", \"nan_mismatch\": %" PRIu64, e->nan_mismatch);
                if (e->has_ulp)
                    fprintf(o, ", \"max_ulp_diff\": %" PRIu64 ", \"ulp_dtype\": \"%s\"", e->max_ulp,
                            ckpt_dtype_name(e->ulp_dtype));
            } else if (e->fam != FAM_BYTES) {
                fprintf(o, ", \"max_abs_diff\": %" PRIu64, e->max_abs_int);
            }
            if (e->has_at) {
                if (e->fam == FAM_BYTES) {
                    fprintf(o, ", \"at_byte\": %" PRIu64, e->at);
                } else {
                    bool comp = e->a->dtype == CKPT_C64 && e->b->dtype == CKPT_C64;
                    uint64_t rest = comp ? e->at / 2 : e->at, idx[CKPT_MAX_DIMS];
                    for (uint32_t d = e->a->ndim; d-- > 0;) {
                        idx[d] = e->a->shape[d] ? rest % e->a->shape[d] : 0;
                        rest = e->a->shape[d] ? rest / e->a->shape[d] : 0;
                    }
                    fputs(", \"at\": [", o);
                    for (uint32_t d = 0; d < e->a->ndim; d++) fprintf(o, d ? ", %" PRIu64 : "%" PRIu64, idx[d]);
                    fputc(']', o);
                    if (comp) fprintf(o, ", \"component\": \"%s\"", e->at % 2 ? "imag" : "real");
                }
            }
        }
        fputc('}', o);
    }
    fprintf(o, "%s]\n}\n", count ? "\n  " : "");
}

/* ---- the command -------------------------------------------------------- */

/* diff's exit status is cmp(1)'s and diff(1)'s, so that a script tells a
 * difference from a failure: 0 identical, 1 different, 2 trouble (what the
 * other commands exit 1 for: a file that cannot be read, a usage error).
 * DIFFERENT stands apart from EXIT_ERROR until cmd_diff maps them. */
enum { DIFFERENT = -1, DIFF_EXIT_DIFFERENT = 1, DIFF_EXIT_TROUBLE = 2 };


static int run(differ *df, bool json) {
    size_t na = side_count(&df->a), nb = side_count(&df->b);
    diff_entry *list = calloc(na + nb + 1, sizeof *list);
    if (!list) {
        fputs("ckpt: out of memory\n", stderr);
        return EXIT_ERROR;
    }
    size_t count = 0, counts[5] = {0}, identical = 0;
    uint64_t identical_bytes = 0;
    /* What will be read, for the progress bar. */
    for (size_t i = 0; i < na; i++) {
        const ckpt_tensor_info *a = side_tensor(&df->a, i), *b = side_find(&df->b, a->name);
        if (b && same_shape(a, b) && (a->dtype == b->dtype || comparable_values(a->dtype, b->dtype)))
            df->total += a->nbytes + b->nbytes;
    }
    progress_update(0, df->total, &df->bar);
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; i < na && st == CKPT_OK; i++) {
        const ckpt_tensor_info *a = side_tensor(&df->a, i), *b = side_find(&df->b, a->name);
        diff_entry e = {.a = a, .b = b};
        if (!b) {
            e.kind = ONLY_A;
        } else if (!same_shape(a, b)) {
            e.kind = SHAPE;
        } else if (a->dtype != b->dtype) {
            e.kind = DTYPE;
            if (comparable_values(a->dtype, b->dtype)) {
                e.compared = true;
                st = compare_values(df, &e);
            }
        } else {
            e.kind = VALUES;
            e.compared = true;
            st = compare_same(df, &e);
            if (st == CKPT_OK && !e.differ) {
                identical++;
                identical_bytes += a->nbytes;
                continue;
            }
        }
        if (st != CKPT_OK) break;
        list[count++] = e;
        counts[e.kind]++;
        if (df->quiet) break;
    }
    for (size_t i = 0; i < nb && st == CKPT_OK && !(df->quiet && count); i++) {
        const ckpt_tensor_info *b = side_tensor(&df->b, i);
        if (side_find(&df->a, b->name)) continue;
        list[count++] = (diff_entry){.kind = ONLY_B, .b = b};
        counts[ONLY_B]++;
    }
    progress_finish(&df->bar, st == CKPT_OK);
    /* A Hugging Face model against its llama.cpp GGUF shares no name: every
     * tensor only in A and only in B, which says nothing of the values. */
    if (st == CKPT_OK && df->hint && na && nb && counts[ONLY_A] == na && counts[ONLY_B] == nb)
        fprintf(stderr,
                "ckpt: hint: no tensor name matches; %s is a llama.cpp GGUF (general.architecture '%s') with "
                "llama.cpp's names: --as-hf compares it as the Hugging Face model it was converted from\n",
                df->hint == 'A' ? "A" : "B", printable(df->hint_arch));
    int rc;
    if (st != CKPT_OK) {
        rc = report_error(&df->err);
    } else {
        if (!df->quiet) {
            if (json) print_json(df, list, count, counts, identical);
            else print_text(df, list, count, counts, identical, identical_bytes);
        }
        rc = finish_stdout() != EXIT_OK ? EXIT_ERROR : count ? DIFFERENT : EXIT_OK;
    }
    free(list);
    return rc;
}

/* Parses the arguments and compares, with room for one allowed global per
 * argument. */
static int parse_and_run(int argc, char **argv, const char **globals, source_options *so) {
    enum { OPT_HELP = 1, OPT_JSON, OPT_QUIET, OPT_PROGRESS, OPT_NO_PROGRESS, OPT_ALLOW_GLOBAL, OPT_AS_HF };
    static const cli_option options[] = {{"help", 'h', false, OPT_HELP},
                                         {"json", 0, false, OPT_JSON},
                                         {"quiet", 'q', false, OPT_QUIET},
                                         {"progress", 0, false, OPT_PROGRESS},
                                         {"no-progress", 0, false, OPT_NO_PROGRESS},
                                         {"allow-global", 0, true, OPT_ALLOW_GLOBAL},
                                         {"as-hf", 0, false, OPT_AS_HF},
                                         CLI_SOURCE_OPTIONS,
                                         {NULL, 0, 0, 0}};
    const char *paths[2] = {NULL, NULL}, *value;
    bool json = false, quiet = false, as_hf = false;
    int show_progress = -1;
    size_t global_count = 0;
    args_parser args;
    args_init(&args, "diff", options, argc, argv);
    for (int id; (id = args_next(&args, &value)) != ARG_END;) {
        switch (id) {
        case ARG_ERROR: return EXIT_USAGE;
        case OPT_HELP:
            print_usage(stdout, diff_usage);
            fputs(source_options_help, stdout);
            return EXIT_OK;
        case OPT_JSON: json = true; break;
        case OPT_QUIET: quiet = true; break;
        case OPT_AS_HF: as_hf = true; break;
        case OPT_PROGRESS: show_progress = 1; break;
        case OPT_NO_PROGRESS: show_progress = 0; break;
        case OPT_ALLOW_GLOBAL: globals[global_count++] = value; break;
        default:
            if (id >= OPT_SOURCE_FIRST) {
                if (source_option("diff", id, value, so) != EXIT_OK) return EXIT_USAGE;
                break;
            }
            char c[4096];
            if (paths[1])
                return usage_error("diff", "two checkpoints expected, got a third: '%s'", display_name(value, c, sizeof c));
            paths[paths[0] ? 1 : 0] = value;
        }
    }
    if (!paths[1]) return usage_error("diff", paths[0] ? "missing B" : "missing A and B");
    if (quiet && show_progress < 0) show_progress = 0;
    source_options_progress(so, show_progress);

    char shown_a[4096], shown_b[4096];
    differ df = {.path_a = display_name(paths[0], shown_a, sizeof shown_a),
                 .path_b = display_name(paths[1], shown_b, sizeof shown_b), .quiet = quiet};
    ckpt_error_clear(&df.err);
    ckpt_catalog_options copt = *source_options_get(so);
    copt.allowed_globals = globals;
    copt.allowed_global_count = global_count;
    int rc = open_checkpoint(paths[0], &copt, false, &df.a.catalog);
    if (rc == EXIT_OK) rc = open_checkpoint(paths[1], &copt, false, &df.b.catalog);
    if (rc != EXIT_OK) goto out;
    const char *arch_a = llamacpp_arch(df.a.catalog), *arch_b = llamacpp_arch(df.b.catalog);
    if (as_hf && !arch_a && !arch_b) {
        rc = usage_error("diff", "--as-hf views a llama.cpp GGUF (general.architecture set) as its Hugging Face "
                                 "model, and neither A nor B is one");
        goto out;
    }
    if (as_hf && ((arch_a && side_view(&df.a, &df.err) != CKPT_OK) || (arch_b && side_view(&df.b, &df.err) != CKPT_OK))) {
        rc = report_error(&df.err);
        goto out;
    }
    df.hint = !as_hf && !quiet && !arch_a != !arch_b ? (arch_a ? 'A' : 'B') : 0;
    df.hint_arch = arch_a ? arch_a : arch_b;
    rc = EXIT_ERROR;
    df.raw_a = malloc(CHUNK_BYTES);
    df.raw_b = malloc(CHUNK_BYTES);
    df.val_a = malloc(CHUNK_ELEMS * sizeof(double));
    df.val_b = malloc(CHUNK_ELEMS * sizeof(double));
    if (!df.raw_a || !df.raw_b || !df.val_a || !df.val_b) {
        fputs("ckpt: out of memory\n", stderr);
        goto out;
    }
    progress_start(&df.bar, "comparing", show_progress);
    rc = run(&df, json);
out:
    free(df.raw_a);
    free(df.raw_b);
    free(df.val_a);
    free(df.val_b);
    side_close(&df.a);
    side_close(&df.b);
    return rc;
}

int cmd_diff(int argc, char **argv) {
    const char **globals = calloc((size_t)argc, sizeof *globals);
    if (!globals) {
        fputs("ckpt: out of memory\n", stderr);
        return DIFF_EXIT_TROUBLE;
    }
    source_options so;
    source_options_init(&so);
    int rc = parse_and_run(argc, argv, globals, &so);
    source_options_free(&so);
    free(globals);
    return rc == DIFFERENT ? DIFF_EXIT_DIFFERENT : rc == EXIT_ERROR ? DIFF_EXIT_TROUBLE : rc;
}
