/* plan.c — ckpt_plan_*: which tensors to load and how (names, slices,
 * casts, axis orders), and the match report against a model skeleton. */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "catalog_internal.h"
#include "base/json.h"
#include "engine.h"
#include "formats/output.h"
#include "plan_internal.h"
#include "transform/cast.h"

static bool matches(const char *pattern, const char *name) {
    return !pattern || strcmp(pattern, "*") == 0 || fnmatch(pattern, name, 0) == 0;
}

/* The entries a pattern may match: the one tensor it names when it has no
 * glob character (found through the catalog's hash table, so that rules by
 * name cost O(1) however many tensors there are), else all of them. */
static void candidates(const ckpt_plan *p, const char *pattern, size_t *lo, size_t *hi) {
    *lo = 0, *hi = p->entry_count;
    if (!pattern || strpbrk(pattern, "*?[\\")) return;
    const ckpt_tensor_info *t = ckpt_catalog_find(p->catalog, pattern);
    size_t i = t ? ckpt__catalog_index_of(p->catalog, t) : SIZE_MAX;
    if (i >= p->entry_count) *lo = *hi = 0;
    else *lo = i, *hi = i + 1;
}

/* A pattern without an unescaped `*`, `?` or `[` names one tensor: a rule
 * naming an unsuitable tensor so is an error, where a broad pattern skips
 * it (and counts it). */
static bool explicit_pattern(const char *pattern) {
    if (!pattern) return false;
    for (const char *c = pattern; *c; c++) {
        if (*c == '\\' && c[1]) c++;
        else if (*c == '*' || *c == '?' || *c == '[') return false;
    }
    return true;
}

static void rule_begin(ckpt_plan *p) {
    p->rule_matched = p->rule_skipped = 0;
    memset(p->skipped_for, 0, sizeof p->skipped_for);
    memset(p->skip_example, 0, sizeof p->skip_example);
}

/* A broad rule leaves e as it is, for `why`. */
static void skip(ckpt_plan *p, const ckpt__plan_entry *e, ckpt__skip why) {
    p->rule_skipped++;
    if (!p->skipped_for[why]++) p->skip_example[why] = e->pub.source->name;
}

/* A pattern that matched no tensor is an error naming it, unless the plan
 * ignores unmatched patterns (every tensor, NULL or "*", never is). */
static ckpt_status rule_end(ckpt_plan *p, const char *rule, const char *pattern, ckpt_error *err) {
    if (p->rule_matched || !pattern || !strcmp(pattern, "*") || (p->flags & CKPT_PLAN_IGNORE_UNMATCHED)) return CKPT_OK;
    return ckpt__fail(err, CKPT_E_NO_MATCH, ckpt_catalog_file_path(p->catalog, 0), NULL, -1,
                      "%s pattern '%s' matched no tensor", rule, pattern);
}

void ckpt_plan_set_flags(ckpt_plan *p, unsigned flags) {
    if (p) p->flags = flags;
}

void ckpt_plan_last_rule(const ckpt_plan *p, size_t *matched, size_t *skipped) {
    if (matched) *matched = p ? p->rule_matched : 0;
    if (skipped) *skipped = p ? p->rule_skipped : 0;
}

size_t ckpt_plan_last_rule_skipped(const ckpt_plan *p, size_t group, const char **reason, const char **example) {
    /* Each phrase follows a count: "9 with fewer than 2 axes (…)". */
    static const char *const reasons[CKPT__SKIP_COUNT] = {
        [CKPT__SKIP_NOT_FLOAT] = "with a dtype that is not a float",
        [CKPT__SKIP_NOT_INTEGER] = "with a dtype that is not an integer",
        [CKPT__SKIP_VECTOR] = "with fewer than 2 axes (quantization keeps vectors as they are, as convert_hf_to_gguf does)",
        [CKPT__SKIP_PARTIAL_BLOCKS] = "with rows that are not whole quantization blocks",
        [CKPT__SKIP_LAST_AXIS_MOVED] = "with their last axis moved by an earlier rule (blocks lie along it)",
        [CKPT__SKIP_QUANTIZED] = "quantized already (ckpt does not requantize)",
        [CKPT__SKIP_BLOCK_TO_INTEGER] = "quantized (a block type dequantizes to a float dtype only)",
        [CKPT__SKIP_NO_DIMENSION] = "without that dimension",
        [CKPT__SKIP_PACKED] = "with packed sub-byte elements (F4, F6: loaded whole only)",
        [CKPT__SKIP_RANK] = "with another number of axes",
    };
    for (size_t why = 0; p && why < CKPT__SKIP_COUNT; why++) {
        if (!p->skipped_for[why] || group--) continue;
        if (reason) *reason = reasons[why];
        if (example) *example = p->skip_example[why];
        return p->skipped_for[why];
    }
    if (reason) *reason = NULL;
    if (example) *example = NULL;
    return 0;
}

static const char *source_path(const ckpt_plan *p, const ckpt__plan_entry *e) {
    return ckpt_catalog_file_path(p->catalog, e->pub.source->file);
}

/* Recomputes what derives from the slice, permutation and dtype. */
static void update(ckpt__plan_entry *e) {
    const ckpt_tensor_info *t = e->pub.source;
    uint64_t numel = 1;
    bool permuted = false;
    uint32_t lead = e->stacked ? 1 : 0; /* a stack's new leading axis */
    if (lead) e->shape[0] = e->join_extent, numel = e->join_extent;
    for (uint32_t i = 0; i < t->ndim; i++) {
        e->shape[lead + i] = e->part_count && !lead && i == e->join_axis ? e->join_extent : e->count[e->perm[i]];
        numel *= e->shape[lead + i];
        permuted |= e->perm[i] != i;
    }
    e->pub.ndim = t->ndim + lead;
    e->pub.numel = numel;
    /* A slice of the catalog's tensor in a dtype that cast_to checked:
     * cannot overflow. */
    ckpt__dtype_nbytes(e->pub.dtype, numel, &e->pub.nbytes);
    e->pub.transform = permuted || e->view_ndim || e->pub.dtype != t->dtype || t->big_endian || t->strides ||
                       t->compressed || e->part_count || e->has_op;
}

ckpt_status ckpt_plan_create(ckpt_catalog *catalog, ckpt_plan **out, ckpt_error *err) {
    if (!out) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "out is required");
    *out = NULL;
    if (!catalog) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "catalog is required");
    ckpt_plan *p = ckpt__calloc(1, sizeof *p);
    if (!p) return ckpt__oom(err, NULL, NULL);
    p->catalog = catalog;
    p->entry_count = ckpt_catalog_tensor_count(catalog);
    p->entries = ckpt__calloc(p->entry_count ? p->entry_count : 1, sizeof *p->entries);
    p->selected = ckpt__malloc((p->entry_count ? p->entry_count : 1) * sizeof *p->selected);
    if (!p->entries || !p->selected) {
        ckpt_plan_free(p);
        return ckpt__oom(err, NULL, NULL);
    }
    for (size_t i = 0; i < p->entry_count; i++) {
        ckpt__plan_entry *e = &p->entries[i];
        const ckpt_tensor_info *t = ckpt_catalog_tensor(catalog, i);
        uint32_t n = t->ndim;
        uint64_t *block = ckpt__arena_alloc(&p->arena, (3 * (size_t)n + 1) * sizeof(uint64_t) + ((size_t)n + 1) * 4);
        if (!block) {
            ckpt_plan_free(p);
            return ckpt__oom(err, NULL, NULL);
        }
        e->shape = block, e->start = block + n, e->count = block + 2 * n;
        e->perm = (uint32_t *)(block + 3 * n + 1);
        for (uint32_t d = 0; d < n; d++) e->start[d] = 0, e->count[d] = t->shape[d], e->perm[d] = d;
        e->pub = (ckpt_plan_item){.name = t->name, .source = t, .dtype = t->dtype, .ndim = n, .shape = e->shape,
                                  .slice_start = e->start, .slice_count = e->count, .perm = e->perm};
        e->selected = true;
        e->place = i;
        update(e);
    }
    p->selection_dirty = p->names_dirty = true;
    *out = p;
    return CKPT_OK;
}

void ckpt__plan_release(ckpt_plan *p) {
    for (size_t i = 0; i < p->entry_count; i++) {
        ckpt__plan_entry *e = &p->entries[i];
        free(e->owned);
        e->owned = NULL;
        e->pub.data = NULL;
        e->pub.is_view = 0;
    }
    for (size_t f = 0; p->maps && f < ckpt_catalog_file_count(p->catalog); f++) ckpt_mapping_free(p->maps[f]);
    free(p->maps);
    p->maps = NULL;
}

ckpt_status ckpt__plan_add_file(ckpt_plan *p, const char *name, const void *data, size_t len, ckpt_error *err) {
    struct ckpt__plan_file *f = ckpt__realloc(p->files, (p->file_count + 1) * sizeof *f);
    if (!f) return ckpt__oom(err, NULL, name);
    p->files = f;
    char *n = ckpt__arena_strndup(&p->arena, name, strlen(name));
    void *d = ckpt__arena_alloc(&p->arena, len ? len : 1);
    if (!n || !d) return ckpt__oom(err, NULL, name);
    memcpy(d, data, len);
    p->files[p->file_count++] = (struct ckpt__plan_file){n, d, len};
    return CKPT_OK;
}

ckpt_status ckpt__plan_add_kv(ckpt_plan *p, const char *key, const ckpt__encoded *value, ckpt_error *err) {
    if (!ckpt__arena_adopt(&p->arena, (void *)value->bytes)) return ckpt__oom(err, NULL, key);
    char *k = ckpt__arena_strndup(&p->arena, key, strlen(key));
    ckpt__encoded *v = ckpt__arena_alloc(&p->arena, sizeof *v);
    if (!k || !v) return ckpt__oom(err, NULL, key);
    *v = *value;
    if (!ckpt__pairs_push_value(&p->kvs, k, v)) return ckpt__oom(err, NULL, key);
    return CKPT_OK;
}

void ckpt_plan_free(ckpt_plan *p) {
    if (!p) return;
    ckpt__pairs_free(&p->kvs);
    if (p->entries) ckpt__plan_release(p);
    free(p->files);
    free(p->entries);
    free(p->selected);
    free(p->matches);
    ckpt__name_table_free(&p->names);
    ckpt__arena_free(&p->arena);
    free(p);
}

/* Whether entry x's output comes after entry y's: by place, then in the
 * order placed (an entry's own place first). */
static bool placed_after(const ckpt__plan_entry *x, const ckpt__plan_entry *y) {
    return x->place > y->place || (x->place == y->place && x->seq > y->seq);
}

void ckpt__plan_refresh(ckpt_plan *p) {
    if (!p->selection_dirty) return;
    size_t n = 0;
    for (size_t i = 0; i < p->entry_count; i++)
        if (p->entries[i].selected && !p->entries[i].absorbed) p->selected[n++] = i;
    /* placed entries: a stable insertion sort, short for the few that
     * move (a stack's output after its last part) */
    for (size_t k = 1; p->place_seq && k < n; k++) {
        size_t v = p->selected[k], j = k;
        while (j > 0 && placed_after(&p->entries[p->selected[j - 1]], &p->entries[v])) p->selected[j] = p->selected[j - 1], j--;
        p->selected[j] = v;
    }
    p->selected_count = n;
    p->selection_dirty = false;
    p->names_dirty = true;
}

/* Keeps a select or exclude rule for names that are not tensors'. */
static ckpt_status record_rule(ckpt_plan *p, const char *pattern, bool exclude, ckpt_error *err) {
    if (p->rule_count == p->rule_cap) {
        size_t cap = p->rule_cap ? p->rule_cap * 2 : 8;
        ckpt__plan_rule *r = ckpt__arena_alloc(&p->arena, cap * sizeof *r);
        if (!r) return ckpt__oom(err, NULL, "the plan's rules");
        if (p->rule_count) memcpy(r, p->rules, p->rule_count * sizeof *r);
        p->rules = r, p->rule_cap = cap;
    }
    const char *copy = pattern ? ckpt__arena_strndup(&p->arena, pattern, strlen(pattern)) : NULL;
    if (pattern && !copy) return ckpt__oom(err, NULL, "the plan's rules");
    p->rules[p->rule_count++] = (ckpt__plan_rule){copy, exclude};
    return CKPT_OK;
}

bool ckpt__plan_selects_name(const ckpt_plan *p, const char *name) {
    bool kept = true, selecting = false;
    for (size_t i = 0; i < p->rule_count; i++) {
        const ckpt__plan_rule *r = &p->rules[i];
        if (!r->exclude && !selecting) kept = false, selecting = true;
        if (matches(r->pattern, name)) kept = !r->exclude;
    }
    return kept;
}

ckpt_status ckpt_plan_select(ckpt_plan *p, const char *pattern, ckpt_error *err) {
    if (!p) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan is required");
    ckpt_status rst = record_rule(p, pattern, false, err);
    if (rst) return rst;
    if (!p->selecting)
        for (size_t i = 0; i < p->entry_count; i++) p->entries[i].selected = false;
    p->selecting = true;
    rule_begin(p);
    size_t lo, hi;
    candidates(p, pattern, &lo, &hi);
    for (size_t i = lo; i < hi; i++)
        if (matches(pattern, p->entries[i].pub.source->name)) p->entries[i].selected = true, p->rule_matched++;
    p->selection_dirty = true;
    return rule_end(p, "select", pattern, err);
}

ckpt_status ckpt_plan_exclude(ckpt_plan *p, const char *pattern, ckpt_error *err) {
    if (!p) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan is required");
    ckpt_status rst = record_rule(p, pattern, true, err);
    if (rst) return rst;
    rule_begin(p);
    size_t lo, hi;
    candidates(p, pattern, &lo, &hi);
    for (size_t i = lo; i < hi; i++)
        if (matches(pattern, p->entries[i].pub.source->name)) p->entries[i].selected = false, p->rule_matched++;
    p->selection_dirty = true;
    return rule_end(p, "exclude", pattern, err);
}

/* ---- renames ---------------------------------------------------------------- */

enum { MAX_CAPTURES = 16 };

/* Whole-name glob with `*` captures (and `?`); backtracking, bounded by the
 * pattern's stars. */
static bool glob_capture(const char *pat, const char *s, const char **cap, size_t *cap_len, int k) {
    for (;;) {
        if (*pat == '\0') return *s == '\0';
        if (*pat == '*') {
            if (k >= MAX_CAPTURES) return false;
            for (const char *t = s;; t++) {
                cap[k] = s, cap_len[k] = (size_t)(t - s);
                if (glob_capture(pat + 1, t, cap, cap_len, k + 1)) return true;
                if (*t == '\0') return false;
            }
        }
        if (*s == '\0' || (*pat != '?' && *pat != *s)) return false;
        pat++, s++;
    }
}

static ckpt_status rename_one(ckpt_plan *p, ckpt__plan_entry *e, const char *from, const char *to, ckpt_error *err) {
    size_t before = p->rule_matched;
    p->rule_matched++; /* taken back below when the name does not match */
    const char *name = e->pub.name;
    ckpt__buf out = {0};
    if (strchr(from, '*')) {
        const char *cap[MAX_CAPTURES];
        size_t len[MAX_CAPTURES];
        if (!glob_capture(from, name, cap, len, 0)) {
            p->rule_matched = before;
            return CKPT_OK;
        }
        int k = 0;
        for (const char *c = to; *c; c++) {
            if (*c == '*' && k < MAX_CAPTURES) {
                ckpt__buf_append(&out, cap[k], len[k]);
                k++;
            } else {
                ckpt__buf_append(&out, c, 1);
            }
        }
    } else {
        size_t n = strlen(from);
        bool prefix = n && from[n - 1] == '.';
        if (strncmp(name, from, n) != 0 || (!prefix && name[n] != '\0' && name[n] != '.')) {
            p->rule_matched = before;
            return CKPT_OK;
        }
        ckpt__buf_puts(&out, to);
        ckpt__buf_puts(&out, name + n);
    }
    char *copy = out.failed ? NULL : ckpt__arena_strndup(&p->arena, out.data ? out.data : "", out.len);
    free(out.data);
    if (!copy) return ckpt__oom(err, NULL, NULL);
    e->pub.name = copy;
    return CKPT_OK;
}

ckpt_status ckpt_plan_rename(ckpt_plan *p, const char *from, const char *to, ckpt_error *err) {
    if (!p || !from || !to)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan, from and to are required");
    if (!*from) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "an empty rename pattern");
    size_t stars_from = 0, stars_to = 0;
    for (const char *c = from; *c; c++) stars_from += *c == '*';
    for (const char *c = to; *c; c++) stars_to += *c == '*';
    if (stars_from > MAX_CAPTURES || stars_to > stars_from)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1,
                          "rename \"%s\" -> \"%s\": the new name uses %zu '*' but the pattern captures %zu (at most %d)",
                          from, to, stars_to, stars_from, MAX_CAPTURES);
    rule_begin(p);
    for (size_t i = 0; i < p->entry_count; i++) {
        if (!p->entries[i].selected) continue;
        ckpt_status st = rename_one(p, &p->entries[i], from, to, err);
        if (st) return st;
    }
    p->names_dirty = true;
    return rule_end(p, "rename", from, err);
}

ckpt_status ckpt__plan_set_name(ckpt_plan *p, size_t index, const char *name, ckpt_error *err) {
    char *copy = ckpt__arena_strndup(&p->arena, name, strlen(name));
    if (!copy) return ckpt__oom(err, NULL, name);
    p->entries[index].pub.name = copy;
    p->names_dirty = true;
    return CKPT_OK;
}

/* ---- casts -------------------------------------------------------------------- */

static bool is_float(ckpt_dtype d) {
    switch (d) {
    case CKPT_F64: case CKPT_F32: case CKPT_F16: case CKPT_BF16: case CKPT_F8_E4M3: case CKPT_F8_E5M2:
    case CKPT_F8_E4M3FNUZ: case CKPT_F8_E5M2FNUZ: case CKPT_F8_E8M0:
        return true;
    default:
        return false;
    }
}

ckpt_dtype ckpt__plan_one_float_dtype(const ckpt_plan *p) {
    ckpt_dtype one = CKPT_DTYPE_INVALID;
    bool cast = false;
    for (size_t k = 0; k < p->selected_count; k++) {
        const ckpt__plan_entry *e = &p->entries[p->selected[k]];
        if (!is_float(e->pub.dtype)) continue;
        if (one != CKPT_DTYPE_INVALID && e->pub.dtype != one) return CKPT_DTYPE_INVALID;
        one = e->pub.dtype;
        cast |= e->pub.dtype != e->pub.source->dtype;
    }
    return cast ? one : CKPT_DTYPE_INVALID;
}

static bool is_integer(ckpt_dtype d) {
    return d == CKPT_I8 || d == CKPT_U8 || d == CKPT_I16 || d == CKPT_U16 || d == CKPT_I32 || d == CKPT_U32 ||
           d == CKPT_I64 || d == CKPT_U64;
}

/* A cast to a block type (quantization) takes float tensors of two or
 * more axes whose rows are whole blocks, as convert_hf_to_gguf quantizes
 * matrices and keeps vectors; a cast to a float dtype dequantizes block
 * types.  True when the entry takes part, else *why says why not. */
static bool block_cast_applies(const ckpt__plan_entry *e, ckpt_dtype to, ckpt__skip *why) {
    ckpt_dtype from = e->pub.source->dtype;
    uint32_t n = e->pub.source->ndim; /* the source's axes (a stack adds a leading one) */
    if (ckpt_dtype_is_block(to)) {
        *why = ckpt_dtype_is_block(from)                            ? CKPT__SKIP_QUANTIZED
               : !is_float(from)                                    ? CKPT__SKIP_NOT_FLOAT
               : e->pub.ndim < 2 || !n                              ? CKPT__SKIP_VECTOR
               : e->perm[n - 1] != n - 1                            ? CKPT__SKIP_LAST_AXIS_MOVED
               : e->count[n - 1] % ckpt_dtype_block_elems(to)       ? CKPT__SKIP_PARTIAL_BLOCKS
                                                                    : CKPT__SKIP_COUNT;
    } else {
        *why = !ckpt_dtype_is_block(from) ? CKPT__SKIP_NOT_FLOAT : !is_float(to) ? CKPT__SKIP_BLOCK_TO_INTEGER
                                                                                 : CKPT__SKIP_COUNT;
    }
    return *why == CKPT__SKIP_COUNT;
}

/* An entry cast to `dtype`, unless its bytes would then pass what
 * ckpt__tensor_size allows (F8 → F64 multiplies them by 8). */
static ckpt_status cast_to(ckpt_plan *p, ckpt__plan_entry *e, ckpt_dtype dtype, ckpt_error *err) {
    uint64_t numel, nbytes;
    const ckpt_tensor_info *t = e->pub.source;
    if (ckpt__tensor_size(dtype, t->ndim, t->shape, &numel, &nbytes) == CKPT__D(SHAPE_OVERFLOW))
        return ckpt__fail(err, CKPT__D(SHAPE_OVERFLOW), source_path(p, e), t->name, -1,
                          "cast to %s, its nonzero axes would hold more than 2^63-1 bytes", ckpt_dtype_name(dtype));
    e->pub.dtype = dtype;
    update(e);
    return CKPT_OK;
}

ckpt_status ckpt_plan_cast(ckpt_plan *p, const char *pattern, ckpt_dtype dtype, ckpt_error *err) {
    if (!p) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan is required");
    if (ckpt_dtype_is_block(dtype) && !ckpt__cast_kernel(CKPT_F32, dtype))
        return ckpt__fail(err, CKPT__D(UNSUPPORTED_DTYPE), NULL, NULL, -1, "ckpt quantizes to Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K "
                          "and Q6_K, not to %s",
                          ckpt_dtype_name(dtype));
    if (!is_float(dtype) && !is_integer(dtype) && !ckpt_dtype_is_block(dtype))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "cannot cast to %s: not a float or integer dtype",
                          ckpt_dtype_name(dtype) ? ckpt_dtype_name(dtype) : "an invalid dtype");
    rule_begin(p);
    size_t lo, hi;
    candidates(p, pattern, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        ckpt__plan_entry *e = &p->entries[i];
        if (!e->selected || !matches(pattern, e->pub.source->name)) continue;
        p->rule_matched++;
        e->asked = dtype; /* asked, even where the cast is skipped below */
        ckpt_dtype from = e->pub.source->dtype;
        if (ckpt_dtype_is_block(from) || ckpt_dtype_is_block(dtype)) { /* GGUF block types */
            if (from == dtype) continue;
            ckpt__skip why;
            if (!block_cast_applies(e, dtype, &why)) {
                if (explicit_pattern(pattern))
                    return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), e->pub.source->name, -1,
                                      "cannot cast a %s tensor to %s: %s", ckpt_dtype_name(from), ckpt_dtype_name(dtype),
                                      ckpt_dtype_is_block(dtype)
                                          ? "quantization takes float tensors of 2 or more axes in whole blocks"
                                          : "a block type dequantizes to a float dtype");
                skip(p, e, why);
                continue;
            }
            if (!ckpt__cast_kernel(from, dtype))
                return ckpt__fail(err, CKPT__D(UNSUPPORTED_DTYPE), source_path(p, e), e->pub.source->name, -1,
                                  "ckpt does not dequantize %s (it dequantizes Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
                                  "Q2_K-Q6_K, TQ1_0, TQ2_0 and MXFP4)", ckpt_dtype_name(from));
            ckpt_status st = cast_to(p, e, dtype, err);
            if (st) return st;
            continue;
        }
        if (is_float(dtype) ? !is_float(from) : !(is_integer(from) || from == CKPT_BOOL)) {
            if (explicit_pattern(pattern))
                return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), e->pub.source->name, -1,
                                  "cannot cast a %s tensor to %s: %s", ckpt_dtype_name(from), ckpt_dtype_name(dtype),
                                  is_float(dtype) ? "float casts apply to float tensors" : "integers only widen");
            skip(p, e, is_float(dtype) ? CKPT__SKIP_NOT_FLOAT : CKPT__SKIP_NOT_INTEGER);
            continue;
        }
        if (!ckpt__cast_kernel(from, dtype))
            return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), e->pub.source->name, -1,
                              "cannot cast %s to %s (integers only widen)", ckpt_dtype_name(from), ckpt_dtype_name(dtype));
        ckpt_status st = cast_to(p, e, dtype, err);
        if (st) return st;
    }
    return rule_end(p, "cast", pattern, err);
}

/* Whether output format `f` holds tensor `e` in block type `d` (its own
 * accepts hook says so; its refusal's message is not wanted here). */
static bool output_holds(const ckpt__output_format *f, const ckpt__plan_entry *e, ckpt_dtype d) {
    ckpt_error scratch;
    ckpt_error_clear(&scratch);
    return !f->accepts || f->accepts(NULL, e->pub.name, d, e->pub.ndim, e->pub.shape, &scratch) == CKPT_OK;
}

ckpt_status ckpt_plan_dequantize_for(ckpt_plan *p, ckpt_format format, ckpt_error *err) {
    if (!p) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan is required");
    const ckpt__output_format *f = ckpt__output_format_for(format);
    if (!f) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "no output format of id %d", (int)format);
    for (size_t i = 0; i < p->entry_count; i++) {
        ckpt__plan_entry *e = &p->entries[i];
        ckpt_dtype d = e->pub.dtype;
        /* Blocks a rule cast or asked for are the rule's business: a block
         * type asked of an output without one is refused by tensor when
         * the writer declares it, and nothing is written. */
        if (!e->selected || !ckpt_dtype_is_block(d) || d != e->pub.source->dtype || ckpt_dtype_is_block(e->asked) ||
            output_holds(f, e, d))
            continue;
        if (!ckpt__cast_kernel(d, CKPT_F32))
            return ckpt__fail(err, CKPT__D(UNSUPPORTED_DTYPE), source_path(p, e), e->pub.source->name, -1,
                              "%s has no %s type, and ckpt does not dequantize %s", f->name, ckpt_dtype_name(d),
                              ckpt_dtype_name(d));
        ckpt_status st = cast_to(p, e, CKPT_F32, err); /* lossless: every block type's values are f32's */
        if (st) return st;
    }
    return CKPT_OK;
}

/* Packed sub-byte tensors (F4, F6) can only be loaded whole: their
 * elements do not start on bytes. */
static ckpt_status refuse_packed(ckpt_plan *p, ckpt__plan_entry *e, const char *what, ckpt_error *err) {
    if (ckpt_dtype_bits(e->pub.source->dtype) % 8 == 0) return CKPT_OK;
    return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), e->pub.source->name, -1,
                      "cannot %s a %s tensor: its elements are packed, %u bits each", what,
                      ckpt_dtype_name(e->pub.source->dtype), ckpt_dtype_bits(e->pub.source->dtype));
}

/* A tensor split into several outputs (ckpt__plan_unstack) keeps its
 * slices' boxes: a later slice or permutation of it is refused. */
static ckpt_status refuse_split(ckpt_plan *p, ckpt__plan_entry *e, const char *what, ckpt_error *err) {
    if (e->part_count) /* its pieces are its parts' reads, at offsets its shape gave */
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), e->pub.source->name, -1,
                          "cannot %s a tensor joined of %zu tensors", what, e->part_count);
    if (!e->split_count) return CKPT_OK;
    return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), e->pub.source->name, -1,
                      "cannot %s a tensor split into %zu outputs", what, e->split_count);
}

/* ---- slices --------------------------------------------------------------------- */

/* The axis `dim` names in e's source; a tensor without it (or packed
 * sub-byte data) is refused when the pattern names it, skipped
 * (*skipped) when the pattern is broad. */
static ckpt_status slice_dim(ckpt_plan *p, ckpt__plan_entry *e, const char *pattern, int dim, uint32_t *d,
                             bool *skipped, ckpt_error *err) {
    int64_t n = e->pub.source->ndim;
    int64_t k = dim < 0 ? n + dim : dim;
    bool packed = ckpt_dtype_bits(e->pub.source->dtype) % 8 != 0;
    *skipped = false;
    if (!packed && k >= 0 && k < n) {
        *d = (uint32_t)k;
        return CKPT_OK;
    }
    if (!explicit_pattern(pattern)) {
        *skipped = true;
        skip(p, e, packed ? CKPT__SKIP_PACKED : CKPT__SKIP_NO_DIMENSION);
        return CKPT_OK;
    }
    if (packed) return refuse_packed(p, e, "slice", err);
    return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), e->pub.source->name, -1,
                      "cannot slice dimension %d of a tensor with %lld dimensions", dim, (long long)n);
}

/* A slice of a viewed entry (ckpt__plan_view_permute: llama.cpp's Q/K
 * rows) reads a box of the view: rows of the source's axis 0 that are
 * whole indexes of the view's axis 0, which its permutation leaves first,
 * are the same rows of the output.  Any other slice would need the view's
 * elements from everywhere in the tensor: refused, naming it. */
static ckpt_status slice_view(ckpt_plan *p, ckpt__plan_entry *e, uint32_t d, uint64_t start, uint64_t stop,
                              ckpt_error *err) {
    const ckpt_tensor_info *t = e->pub.source;
    uint64_t rows = t->shape[0], band = e->view_shape[0] ? rows / e->view_shape[0] : 0; /* rows per view index */
    start += e->start[0], stop += e->start[0];
    if (d != 0 || e->view_perm[0] != 0 || !band || band * e->view_shape[0] != rows || start % band || stop % band)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), t->name, -1,
                          "a slice of this tensor, whose rows are reordered, must keep whole bands of %llu rows of "
                          "dimension 0",
                          (unsigned long long)band);
    e->view_start[0] = start / band, e->view_count[0] = (stop - start) / band;
    return CKPT_OK;
}

static ckpt_status apply_range(ckpt_plan *p, ckpt__plan_entry *e, uint32_t d, uint64_t start, uint64_t stop,
                               ckpt_error *err) {
    ckpt_dtype b = ckpt_dtype_is_block(e->pub.source->dtype) ? e->pub.source->dtype
                   : ckpt_dtype_is_block(e->pub.dtype)       ? e->pub.dtype
                                                             : CKPT_DTYPE_INVALID;
    ckpt_status st = refuse_split(p, e, "slice", err);
    if (st) return st;
    if (b && d == e->pub.source->ndim - 1 && start <= stop && stop <= e->count[d] &&
        ((e->start[d] + start) % ckpt_dtype_block_elems(b) || (stop - start) % ckpt_dtype_block_elems(b)))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), e->pub.source->name, -1,
                          "slice [%llu, %llu) of the last dimension of a %s tensor: it must keep whole blocks of %u",
                          (unsigned long long)start, (unsigned long long)stop, ckpt_dtype_name(b),
                          ckpt_dtype_block_elems(b));
    if (start > stop || stop > e->count[d])
        return ckpt__fail(err, CKPT_E_OUT_OF_RANGE, source_path(p, e), e->pub.source->name, -1,
                          "slice [%llu, %llu) of dimension %u is outside its %llu elements", (unsigned long long)start,
                          (unsigned long long)stop, d, (unsigned long long)e->count[d]);
    if (e->view_ndim && (st = slice_view(p, e, d, start, stop, err))) return st;
    e->start[d] += start;
    e->count[d] = stop - start;
    update(e);
    return CKPT_OK;
}

/* A slice or a split: each entry the pattern matches keeps [start, stop) of
 * dimension `dim`, or with `parts`, the start-th of that many near-equal
 * parts of it, as numpy.array_split cuts them (the first size % parts get
 * one more). */
static ckpt_status range_rule(ckpt_plan *p, const char *rule, const char *pattern, int dim, uint64_t start,
                              uint64_t stop, uint64_t parts, ckpt_error *err) {
    rule_begin(p);
    size_t lo, hi;
    candidates(p, pattern, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        ckpt__plan_entry *e = &p->entries[i];
        if (!e->selected || !matches(pattern, e->pub.source->name)) continue;
        p->rule_matched++;
        uint32_t d = 0;
        bool skipped;
        ckpt_status st = slice_dim(p, e, pattern, dim, &d, &skipped, err);
        if (st) return st;
        if (skipped) continue;
        uint64_t from = start, to = stop;
        if (parts) {
            uint64_t base = e->count[d] / parts, extra = e->count[d] % parts;
            from = start * base + (start < extra ? start : extra);
            to = from + base + (start < extra ? 1 : 0);
        }
        if ((st = apply_range(p, e, d, from, to, err))) return st;
    }
    return rule_end(p, rule, pattern, err);
}

ckpt_status ckpt_plan_slice(ckpt_plan *p, const char *pattern, int dim, uint64_t start, uint64_t stop, ckpt_error *err) {
    if (!p) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan is required");
    return range_rule(p, "slice", pattern, dim, start, stop, 0, err);
}

ckpt_status ckpt_plan_split(ckpt_plan *p, const char *pattern, int dim, uint64_t rank, uint64_t parts, ckpt_error *err) {
    if (!p) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan is required");
    if (parts == 0 || rank >= parts)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "rank %llu of %llu parts: need rank < parts",
                          (unsigned long long)rank, (unsigned long long)parts);
    return range_rule(p, "split", pattern, dim, rank, 0, parts, err);
}

/* ---- axis orders ------------------------------------------------------------------ */

static void permute_entry(ckpt__plan_entry *e, const uint32_t *perm) {
    uint32_t n = e->pub.ndim, composed[CKPT_MAX_DIMS];
    /* Output axis i of the new order is output axis perm[i] of the current
     * one, which is source axis e->perm[perm[i]]. */
    for (uint32_t i = 0; i < n; i++) composed[i] = e->perm[perm[i]];
    memcpy(e->perm, composed, n * sizeof *composed);
    update(e);
}

static ckpt_status check_perm(uint32_t ndim, const uint32_t *perm, ckpt_error *err) {
    bool seen[CKPT_MAX_DIMS] = {0};
    if (ndim > CKPT_MAX_DIMS || (ndim && !perm))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "invalid permutation");
    for (uint32_t i = 0; i < ndim; i++) {
        if (perm[i] >= ndim || seen[perm[i]])
            return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1,
                              "not a permutation of %u axes: axis %u appears twice or is out of range", ndim, perm[i]);
        seen[perm[i]] = true;
    }
    return CKPT_OK;
}

/* Permutes the selected tensors matching `pattern` that have `ndim` axes;
 * one with another rank is refused when the pattern names it, skipped
 * (and counted) when the pattern is broad. */
/* GGUF block types are rows of blocks: the innermost axis stays. */
static ckpt_status refuse_block_permute(ckpt_plan *p, ckpt__plan_entry *e, const uint32_t *perm, ckpt_error *err) {
    ckpt_dtype b = ckpt_dtype_is_block(e->pub.source->dtype) ? e->pub.source->dtype : e->pub.dtype;
    uint32_t n = e->pub.ndim;
    if (!ckpt_dtype_is_block(b) || n == 0 || e->perm[perm[n - 1]] == n - 1) return CKPT_OK;
    return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), e->pub.source->name, -1,
                      "cannot move the last axis of a %s tensor: its elements are stored in blocks along it "
                      "(load it, then transpose)", ckpt_dtype_name(b));
}

static ckpt_status permute_matching(ckpt_plan *p, const char *rule, const char *pattern, uint32_t ndim,
                                    const uint32_t *perm, ckpt_error *err) {
    rule_begin(p);
    size_t lo, hi;
    candidates(p, pattern, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        ckpt__plan_entry *e = &p->entries[i];
        if (!e->selected || !matches(pattern, e->pub.source->name)) continue;
        p->rule_matched++;
        if (e->pub.ndim != ndim) {
            if (explicit_pattern(pattern))
                return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), e->pub.source->name, -1,
                                  "%s needs %u axes and the tensor has %u", rule, ndim, e->pub.ndim);
            skip(p, e, CKPT__SKIP_RANK);
            continue;
        }
        ckpt_status st = refuse_packed(p, e, "permute", err);
        if (!st) st = refuse_split(p, e, "permute", err);
        if (!st) st = refuse_block_permute(p, e, perm, err);
        if (st) return st;
        permute_entry(e, perm);
    }
    return rule_end(p, rule, pattern, err);
}

ckpt_status ckpt_plan_permute(ckpt_plan *p, const char *pattern, uint32_t ndim, const uint32_t *perm, ckpt_error *err) {
    if (!p) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan is required");
    ckpt_status st = check_perm(ndim, perm, err);
    return st ? st : permute_matching(p, "permute", pattern, ndim, perm, err);
}

ckpt_status ckpt_plan_transpose(ckpt_plan *p, const char *pattern, ckpt_error *err) {
    if (!p) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan is required");
    static const uint32_t swap[2] = {1, 0};
    return permute_matching(p, "transpose", pattern, 2, swap, err);
}

ckpt_status ckpt_plan_layout(ckpt_plan *p, const char *pattern, const char *from, const char *to, ckpt_error *err) {
    if (!p || !from || !to) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan, from and to are required");
    size_t n = strlen(from);
    uint32_t perm[CKPT_MAX_DIMS];
    bool ok = n == strlen(to) && n <= CKPT_MAX_DIMS;
    for (size_t i = 0; ok && i < n; i++) {
        const char *at = strchr(from, to[i]);
        ok = at && to[i] && !strchr(to + i + 1, to[i]);
        if (ok) perm[i] = (uint32_t)(at - from);
    }
    if (ok) ok = check_perm((uint32_t)n, perm, NULL) == CKPT_OK;
    if (!ok)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1,
                          "layouts \"%s\" and \"%s\" must hold the same distinct letters", from, to);
    return permute_matching(p, "layout", pattern, (uint32_t)n, perm, err);
}

/* Whether an entry is its tensor whole, in the source's order, stored as
 * one dense little-endian piece of whole-byte elements: what a view of
 * other axes reads as it reads the tensor. */
static bool viewable(const ckpt_plan *p, const ckpt__plan_entry *e) {
    const ckpt_tensor_info *t = e->pub.source;
    uint32_t npieces;
    const ckpt__piece *pc = ckpt__catalog_pieces(p->catalog, ckpt__catalog_index_of(p->catalog, t), &npieces);
    if (e->view_ndim || e->split_count || npieces != 1 || pc->strides || pc->record_size || pc->big_endian || pc->start || pc->count ||
        ckpt_dtype_bits(t->dtype) % 8) /* sub-byte elements; a block type (0 bits) moves its rows as blocks */
        return false;
    for (uint32_t a = 0; a < t->ndim; a++)
        if (e->start[a] || e->count[a] != t->shape[a] || e->perm[a] != a) return false;
    return true;
}

ckpt_status ckpt__plan_view_permute(ckpt_plan *p, size_t index, uint32_t ndim, const uint64_t *shape,
                                    const uint32_t *perm, ckpt_error *err) {
    ckpt__plan_entry *e = &p->entries[index];
    const ckpt_tensor_info *t = e->pub.source;
    uint64_t numel = 1;
    for (uint32_t a = 0; a < ndim; a++) numel *= shape[a];
    ckpt_status st = check_perm(ndim, perm, err);
    if (st) return st;
    if (numel != t->numel || !ndim || perm[ndim - 1] != ndim - 1 || !t->ndim ||
        shape[ndim - 1] != t->shape[t->ndim - 1] || !viewable(p, e))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), t->name, -1,
                          "cannot reorder this tensor's rows through a view of %u axes", ndim);
    e->view_shape = ckpt__arena_alloc(&p->arena, 3 * (size_t)ndim * sizeof *e->view_shape);
    e->view_perm = ckpt__arena_alloc(&p->arena, ndim * sizeof *e->view_perm);
    if (!e->view_shape || !e->view_perm) return ckpt__oom(err, source_path(p, e), t->name);
    e->view_start = e->view_shape + ndim, e->view_count = e->view_shape + 2 * (size_t)ndim;
    memcpy(e->view_shape, shape, ndim * sizeof *shape);
    memcpy(e->view_count, shape, ndim * sizeof *shape);
    memset(e->view_start, 0, ndim * sizeof *e->view_start);
    memcpy(e->view_perm, perm, ndim * sizeof *perm);
    e->view_ndim = ndim;
    update(e);
    return CKPT_OK;
}

/* ---- outputs of another shape than one tensor's ------------------------------------ */

/* Whether selected entry `e` can take part in an assembled output: not
 * joined, absorbed, split, computed or placed yet. */
static bool plain_entry(const ckpt__plan_entry *e) {
    return e->selected && !e->absorbed && !e->part_count && !e->split_count && !e->has_op && !e->seq;
}

/* Why entry `e` does not read its source whole, in the source's axes and
 * order (its reads are then boxes of the source), or NULL. */
static const char *whole_refusal(const ckpt__plan_entry *e) {
    const ckpt_tensor_info *t = e->pub.source;
    if (e->view_ndim || e->pub.ndim != t->ndim) return "its axes are viewed otherwise";
    for (uint32_t a = 0; a < t->ndim; a++)
        if (e->start[a] || e->count[a] != t->shape[a] || e->perm[a] != a) return "it is sliced or permuted";
    return NULL;
}

/* Why entry `e` cannot be split into `n` outputs along its leading axis,
 * or NULL. */
static const char *unstack_refusal(const ckpt__plan_entry *e, size_t n) {
    const ckpt_tensor_info *t = e->pub.source;
    if (!plain_entry(e)) return "it is not a plain selected tensor (stacked, split, computed or placed already)";
    if (t->ndim < 2) return "it has fewer than 2 axes";
    if (ckpt_dtype_bits(t->dtype) % 8) return "its elements are packed below a byte";
    const char *why = whole_refusal(e);
    return why ? why : t->shape[0] != n ? "its leading axis is not one slice a name" : NULL;
}

ckpt_status ckpt__plan_unstack(ckpt_plan *p, size_t index, size_t n, const char *const *names, ckpt_error *err) {
    if (index >= p->entry_count || !n || !names)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "a split needs an entry and its outputs' names");
    ckpt__plan_entry *e = &p->entries[index];
    const ckpt_tensor_info *t = e->pub.source;
    const char *why = unstack_refusal(e, n);
    if (why)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), t->name, -1,
                          "cannot split it into %zu tensors along its leading axis (%llu): %s", n,
                          (unsigned long long)t->shape[0], why);
    uint32_t nd = t->ndim;
    const char **list = ckpt__arena_alloc(&p->arena, n * sizeof *list);
    uint64_t *starts = ckpt__arena_alloc(&p->arena, n * nd * sizeof *starts);
    uint64_t *box = ckpt__arena_alloc(&p->arena, nd * sizeof *box);
    if (!list || !starts || !box) return ckpt__oom(err, source_path(p, e), t->name);
    for (size_t k = 0; k < n; k++) {
        if (!(list[k] = ckpt__arena_strndup(&p->arena, names[k], strlen(names[k]))))
            return ckpt__oom(err, source_path(p, e), t->name);
        memset(starts + k * nd, 0, nd * sizeof *starts);
        starts[k * nd] = k;
    }
    box[0] = 1;
    memcpy(box + 1, t->shape + 1, (nd - 1) * sizeof *box);
    e->split_names = list, e->split_starts = starts, e->split_box = box, e->split_count = n;
    p->assembled = true;
    return CKPT_OK;
}

/* Why part `e` cannot join `head` along its axis `axis` (or stacked, along
 * a new one), or NULL. */
static const char *join_refusal(const ckpt__plan_entry *e, const ckpt__plan_entry *head, uint32_t axis) {
    const ckpt_tensor_info *t = e->pub.source, *h = head->pub.source;
    if (!plain_entry(e)) return "it is not a plain selected tensor (stacked, split, computed or placed already)";
    if (ckpt_dtype_bits(t->dtype) % 8) return "its elements are packed below a byte";
    if (t->dtype != h->dtype) return "its dtype is not the other parts' dtype";
    if (axis == CKPT__PLAN_NEW_AXIS) { /* each part read as its entry reads it */
        bool same = e->pub.ndim == head->pub.ndim;
        for (uint32_t d = 0; same && d < e->pub.ndim; d++) same = e->shape[d] == head->shape[d];
        return same ? NULL : "its shape is not the other parts' shape";
    }
    const char *why = whole_refusal(e); /* read whole, or a box for each index of the axes before `axis` */
    if (why) return why;
    if (axis >= t->ndim || t->ndim != h->ndim) return "it has not the other parts' axes, or not the joined one";
    for (uint32_t a = 0; a < t->ndim; a++)
        if (a != axis && t->shape[a] != h->shape[a]) return "its shape is not the other parts' but on the joined axis";
    return NULL;
}

/* The parts' checks: each one a plain tensor that can join `head`, once. */
static ckpt_status check_parts(ckpt_plan *p, ckpt__plan_entry *head, size_t n, const size_t *parts, uint32_t axis,
                               ckpt_error *err) {
    bool stack = axis == CKPT__PLAN_NEW_AXIS, has_head = false;
    for (size_t k = 0; k < n; k++) {
        if (parts[k] >= p->entry_count)
            return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, head), head->pub.source->name, -1,
                              "part %zu is no tensor", k);
        ckpt__plan_entry *e = &p->entries[parts[k]];
        const char *why = join_refusal(e, head, axis);
        for (size_t j = 0; !why && j < k; j++)
            if (parts[j] == parts[k]) why = "it is twice a part of one output";
        has_head |= e == head;
        if (why && stack)
            return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), e->pub.source->name, -1,
                              "cannot stack it into %s: %s", head->pub.name, why);
        if (why)
            return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), e->pub.source->name, -1,
                              "cannot join it to %s along axis %u: %s", head->pub.name, axis, why);
    }
    if (!has_head)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, head), head->pub.source->name, -1,
                          "a joined output is one of its parts");
    return CKPT_OK;
}

/* The boxes of `head` joined of `parts` along `axis`, when axes come
 * before it (`lead` indexes of them, > 1): for each part, one index of
 * those axes and the rest whole; for each index of those axes, its
 * coordinates, row-major. */
static ckpt_status join_boxes(ckpt_plan *p, ckpt__plan_entry *head, size_t n, const size_t *parts, uint32_t axis,
                              uint64_t lead, ckpt_error *err) {
    const ckpt_tensor_info *t = head->pub.source;
    uint32_t nd = t->ndim;
    uint64_t *boxes = ckpt__arena_alloc(&p->arena, n * nd * sizeof *boxes);
    uint64_t *starts = lead <= SIZE_MAX / nd / sizeof *starts ? ckpt__arena_alloc(&p->arena, (size_t)lead * nd * sizeof *starts)
                                                               : NULL;
    if (!boxes || !starts) return ckpt__oom(err, source_path(p, head), t->name);
    for (size_t k = 0; k < n; k++) {
        const ckpt_tensor_info *pt = p->entries[parts[k]].pub.source;
        for (uint32_t a = 0; a < nd; a++) boxes[k * nd + a] = a < axis ? 1 : pt->shape[a];
    }
    for (uint64_t l = 0; l < lead; l++) {
        uint64_t rest = l;
        for (uint32_t a = nd; a-- > 0;) {
            starts[l * nd + a] = a < axis ? rest % t->shape[a] : 0;
            if (a < axis) rest /= t->shape[a];
        }
    }
    head->join_boxes = boxes, head->join_starts = starts;
    return CKPT_OK;
}

ckpt_status ckpt__plan_join(ckpt_plan *p, size_t index, size_t n, const size_t *parts, uint32_t axis,
                            ckpt_error *err) {
    if (index >= p->entry_count || !n || !parts)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "a joined output needs an entry and its parts");
    ckpt__plan_entry *head = &p->entries[index];
    const ckpt_tensor_info *t = head->pub.source;
    ckpt_status st = check_parts(p, head, n, parts, axis, err);
    if (st) return st;
    bool stack = axis == CKPT__PLAN_NEW_AXIS;
    size_t *list = ckpt__arena_alloc(&p->arena, n * sizeof *list);
    uint64_t *before = ckpt__arena_alloc(&p->arena, n * sizeof *before);
    uint64_t *shape = ckpt__arena_alloc(&p->arena, ((size_t)t->ndim + stack) * sizeof *shape);
    if (!list || !before || !shape) return ckpt__oom(err, source_path(p, head), t->name);
    memcpy(list, parts, n * sizeof *list);
    uint64_t extent = 0, lead = 1;
    for (size_t k = 0; k < n; k++) before[k] = extent, extent += stack ? 1 : p->entries[parts[k]].pub.source->shape[axis];
    for (uint32_t a = 0; !stack && a < axis; a++) lead *= t->shape[a]; /* the file's shape: its elements fit in memory */
    if (lead > 1 && (st = join_boxes(p, head, n, parts, axis, lead, err))) return st;
    head->parts = list, head->part_count = n, head->stacked = stack;
    head->join_axis = stack ? 0 : axis, head->join_extent = extent, head->join_lead = lead, head->join_before = before;
    for (size_t k = 0; k < n; k++)
        if (parts[k] != index) p->entries[parts[k]].absorbed = true;
    head->shape = shape, head->pub.shape = shape;
    update(head);
    if (stack) p->assembled = true; /* what only llama.cpp's conversion makes */
    else p->joined = true;
    p->selection_dirty = true;
    return CKPT_OK;
}

void ckpt__plan_piece(const ckpt_plan *p, const ckpt__plan_entry *e, uint64_t j, ckpt__move *m, uint64_t *at) {
    uint64_t l = e->part_count ? j / e->part_count : 0, k = e->part_count ? j % e->part_count : 0;
    const ckpt__plan_entry *part = e->part_count ? &p->entries[e->parts[k]] : e;
    m->tensor = ckpt__catalog_index_of(p->catalog, part->pub.source);
    m->start = part->start, m->count = part->count, m->perm = part->perm;
    m->view_ndim = part->view_ndim, m->view_shape = part->view_shape;
    if (part->view_ndim) m->start = part->view_start, m->count = part->view_count, m->perm = part->view_perm;
    *at = 0;
    if (!e->part_count) return;
    uint32_t nd = part->pub.source->ndim;
    if (e->join_lead > 1) /* the part's box at lead index l (the part is read whole otherwise) */
        m->start = e->join_starts + l * nd, m->count = e->join_boxes + k * nd;
    uint64_t inner = 1; /* the output's elements per index of the joined axis */
    for (uint32_t a = e->join_axis + 1; a < e->pub.ndim; a++) inner *= e->shape[a];
    /* whole rows before it (whole blocks of a block type): exact bytes */
    ckpt__dtype_nbytes(e->pub.dtype, (l * e->join_extent + e->join_before[k]) * inner, at);
}

ckpt_status ckpt__plan_refuse_joined(const ckpt_plan *p, const char *what, ckpt_error *err) {
    if (!p->joined) return CKPT_OK;
    return ckpt__fail(err, CKPT_E_UNSUPPORTED, NULL, NULL, -1,
                      "%s: the plan joins tensors, which only a one-process load or conversion writes", what);
}

ckpt_status ckpt__plan_compute(ckpt_plan *p, size_t index, const ckpt__elementwise *rule, ckpt_error *err) {
    ckpt__plan_entry *e = &p->entries[index];
    const ckpt_tensor_info *t = e->pub.source;
    if (!ckpt__elementwise_valid(rule))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), t->name, -1,
                          "an elementwise rule adds a finite number and rounds to f32, f16 or bf16");
    if (e->has_op || !ckpt__cast_kernel(t->dtype, CKPT_F32) || ckpt_dtype_bits(t->dtype) % 8)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), t->name, -1,
                          "cannot compute an elementwise rule on it (%s)",
                          e->has_op ? "it has one already" : "its elements do not widen to f32");
    e->op = *rule, e->has_op = true;
    update(e);
    p->computed = true;
    return CKPT_OK;
}

void ckpt__plan_place(ckpt_plan *p, size_t index, size_t after) {
    ckpt__plan_entry *e = &p->entries[index];
    e->place = after, e->seq = ++p->place_seq;
    p->selection_dirty = true;
}

ckpt_status ckpt__plan_generate(ckpt_plan *p, const char *name, ckpt_dtype dtype, uint32_t ndim, const uint64_t *shape,
                                const void *data, uint64_t nbytes, ckpt_error *err) {
    uint64_t numel, want;
    if (!name || ndim > CKPT_MAX_DIMS || (ndim && !shape) || ckpt__tensor_size(dtype, ndim, shape, &numel, &want) ||
        want != nbytes || (nbytes && !data))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, name, -1,
                          "a generated tensor's bytes are its shape's elements in its dtype");
    if (p->generated_count == p->generated_cap) {
        size_t cap = p->generated_cap ? 2 * p->generated_cap : 4;
        ckpt__plan_generated *g = ckpt__arena_alloc(&p->arena, cap * sizeof *g);
        if (!g) return ckpt__oom(err, NULL, name);
        if (p->generated_count) memcpy(g, p->generated, p->generated_count * sizeof *g);
        p->generated = g, p->generated_cap = cap;
    }
    char *copy = ckpt__arena_strndup(&p->arena, name, strlen(name));
    uint64_t *dims = ckpt__arena_alloc(&p->arena, (ndim ? ndim : 1) * sizeof *dims);
    void *bytes = ckpt__arena_alloc(&p->arena, nbytes ? (size_t)nbytes : 1);
    if (!copy || !dims || !bytes) return ckpt__oom(err, NULL, name);
    if (ndim) memcpy(dims, shape, ndim * sizeof *dims);
    if (nbytes) memcpy(bytes, data, (size_t)nbytes);
    p->generated[p->generated_count++] =
        (ckpt__plan_generated){.name = copy, .dtype = dtype, .ndim = ndim, .shape = dims, .data = bytes, .nbytes = nbytes};
    p->assembled = true;
    return CKPT_OK;
}

ckpt_status ckpt__plan_refuse_assembled(const ckpt_plan *p, const char *what, bool computes, ckpt_error *err) {
    if (p->assembled)
        return ckpt__fail(err, CKPT_E_UNSUPPORTED, NULL, NULL, -1,
                          "%s: the plan stacks, splits or generates tensors, which only a conversion writes", what);
    if (p->joined && !computes) return ckpt__plan_refuse_joined(p, what, err);
    if (p->computed && !computes)
        return ckpt__fail(err, CKPT_E_UNSUPPORTED, NULL, NULL, -1,
                          "%s: the plan computes tensors (an elementwise rule), which only a one-process conversion "
                          "or a load applies", what);
    return CKPT_OK;
}

/* ---- items ------------------------------------------------------------------------ */

size_t ckpt_plan_count(const ckpt_plan *p) {
    if (!p) return 0;
    ckpt__plan_refresh((ckpt_plan *)p);
    return p->selected_count;
}

const ckpt_plan_item *ckpt_plan_item_at(const ckpt_plan *p, size_t i) {
    if (!p) return NULL;
    ckpt__plan_refresh((ckpt_plan *)p);
    return i < p->selected_count ? &p->entries[p->selected[i]].pub : NULL;
}

/* Builds the name table of selected items; reports the first duplicate. */
static ckpt_status index_names(ckpt_plan *p, ckpt_error *err) {
    ckpt__plan_refresh(p);
    if (!p->names_dirty) return CKPT_OK;
    ckpt__name_table_free(&p->names);
    if (!ckpt__name_table_init(&p->names, p->selected_count ? p->selected_count : 1)) return ckpt__oom(err, NULL, NULL);
    const char *const *names = &p->entries[0].pub.name;
    for (size_t k = 0; k < p->selected_count; k++) {
        uint32_t existing;
        ckpt__plan_entry *e = &p->entries[p->selected[k]];
        if (!ckpt__name_table_insert(&p->names, names, sizeof *p->entries, (uint32_t)p->selected[k], &existing)) {
            ckpt__name_table_free(&p->names);
            return ckpt__fail(err, CKPT__D(DUPLICATE_NAME), source_path(p, e), e->pub.name, -1,
                              "two tensors would be named \"%s\" (from \"%s\" and \"%s\")", e->pub.name,
                              p->entries[existing].pub.source->name, e->pub.source->name);
        }
    }
    p->names_dirty = false;
    return CKPT_OK;
}

ckpt_status ckpt__plan_check(ckpt_plan *p, ckpt_error *err) {
    ckpt__plan_refresh(p);
    if (!p->selected_count && p->entry_count && !(p->flags & CKPT_PLAN_IGNORE_UNMATCHED))
        return ckpt__fail(err, CKPT_E_NO_MATCH, ckpt_catalog_file_path(p->catalog, 0), NULL, -1,
                          "the plan selects none of the checkpoint's %zu tensors", p->entry_count);
    return index_names(p, err);
}

/* Position of entry `entry` in the selection (binary search). */
static size_t selected_position(const ckpt_plan *p, size_t entry) {
    if (p->place_seq) { /* placed entries: not in catalog order */
        size_t k = 0;
        while (k < p->selected_count && p->selected[k] != entry) k++;
        return k;
    }
    size_t lo = 0, hi = p->selected_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->selected[mid] < entry) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

const ckpt_plan_item *ckpt_plan_find(const ckpt_plan *p, const char *name, size_t *index) {
    if (!p || !name || index_names((ckpt_plan *)p, NULL) != CKPT_OK || !p->entry_count) return NULL;
    int64_t i = ckpt__name_table_find(&p->names, &p->entries[0].pub.name, sizeof *p->entries, name);
    if (i < 0) return NULL;
    if (index) *index = selected_position(p, (size_t)i);
    return &p->entries[i].pub;
}

static ckpt__plan_entry *selected_entry(ckpt_plan *p, size_t i) {
    ckpt__plan_refresh(p);
    return i < p->selected_count ? &p->entries[p->selected[i]] : NULL;
}

ckpt_status ckpt_plan_set_buffer(ckpt_plan *p, size_t i, void *buffer, uint64_t capacity, ckpt_error *err) {
    ckpt__plan_entry *e = p ? selected_entry(p, i) : NULL;
    if (!e) return ckpt__fail(err, CKPT_E_OUT_OF_RANGE, NULL, NULL, -1, "no plan item %zu", i);
    if (buffer && capacity < e->pub.nbytes)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, source_path(p, e), e->pub.name, -1,
                          "buffer of %llu bytes for a tensor of %llu bytes", (unsigned long long)capacity,
                          (unsigned long long)e->pub.nbytes);
    e->buffer = buffer;
    e->capacity = capacity;
    e->device = NULL; /* host memory, replacing a device buffer */
    return CKPT_OK;
}

void *ckpt_plan_take(ckpt_plan *p, size_t i) {
    ckpt__plan_entry *e = p ? selected_entry(p, i) : NULL;
    if (!e || !e->owned) return NULL;
    void *b = e->owned;
    e->owned = NULL;
    return b;
}

void ckpt_free(void *buffer) { free(buffer); }

void ckpt_plan_stats(const ckpt_plan *p, ckpt_load_stats *stats) {
    if (p && stats) *stats = p->stats;
}

/* ---- match report -------------------------------------------------------------------- */

static bool push_match(ckpt_plan *p, size_t *cap, ckpt_mismatch kind, const char *name, size_t expected, size_t item) {
    if (p->match_count == *cap) {
        size_t n = *cap ? *cap * 2 : 16;
        ckpt_match_entry *m = ckpt__realloc(p->matches, n * sizeof *m);
        if (!m) return false;
        p->matches = m, *cap = n;
    }
    p->matches[p->match_count++] = (ckpt_match_entry){kind, name, expected, item};
    return true;
}

ckpt_status ckpt_plan_match(ckpt_plan *p, const ckpt_expected *expected, size_t expected_count, unsigned flags,
                            const ckpt_match_entry **entries, size_t *count, ckpt_error *err) {
    if (!p || (expected_count && !expected) || !entries || !count)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan, expected, entries and count are required");
    ckpt_status st = index_names(p, err);
    if (st) return st;
    size_t cap = 0, n = p->selected_count;
    p->match_count = 0;
    free(p->matches);
    p->matches = NULL;
    unsigned char *state = ckpt__calloc(n ? n : 1, 1); /* 0 unexpected, 1 matched, 2 shape, 3 dtype */
    size_t *expected_of = ckpt__malloc((n ? n : 1) * sizeof *expected_of);
    if (!state || !expected_of) {
        free(state);
        free(expected_of);
        return ckpt__oom(err, NULL, NULL);
    }
    for (size_t k = 0; k < expected_count && st == CKPT_OK; k++) {
        const ckpt_expected *x = &expected[k];
        if (!x->name || (x->ndim && !x->shape) || x->ndim > CKPT_MAX_DIMS) {
            st = ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, x->name, -1, "expected tensor %zu is malformed", k);
            break;
        }
        size_t item;
        const ckpt_plan_item *it = ckpt_plan_find(p, x->name, &item);
        if (!it) {
            if (!push_match(p, &cap, CKPT_MATCH_MISSING, x->name, k, SIZE_MAX)) st = ckpt__oom(err, NULL, NULL);
            continue;
        }
        expected_of[item] = k;
        bool same_shape = it->ndim == x->ndim && (x->ndim == 0 || memcmp(it->shape, x->shape, x->ndim * 8) == 0);
        if (!same_shape) {
            state[item] = 2;
            continue;
        }
        if (x->dtype != CKPT_DTYPE_INVALID && x->dtype != it->dtype) {
            ckpt__plan_entry *e = &p->entries[p->selected[item]];
            ckpt_dtype from = e->pub.source->dtype;
            bool castable = is_float(from) || (ckpt_dtype_is_block(from) && ckpt__cast_kernel(from, x->dtype));
            if ((flags & CKPT_MATCH_CAST) && is_float(x->dtype) && castable) {
                if ((st = cast_to(p, e, x->dtype, err))) break;
            } else {
                state[item] = 3;
                continue;
            }
        }
        state[item] = 1;
    }
    for (size_t i = 0; i < n && st == CKPT_OK; i++) {
        if (state[i] == 1) continue;
        ckpt_mismatch kind = state[i] == 0 ? CKPT_MATCH_UNEXPECTED : state[i] == 2 ? CKPT_MATCH_SHAPE : CKPT_MATCH_DTYPE;
        const char *name = p->entries[p->selected[i]].pub.name;
        size_t x = kind == CKPT_MATCH_UNEXPECTED ? SIZE_MAX : expected_of[i];
        if (!push_match(p, &cap, kind, name, x, i)) st = ckpt__oom(err, NULL, NULL);
    }
    if (st == CKPT_OK && (flags & CKPT_MATCH_PRUNE)) {
        for (size_t i = 0; i < n; i++)
            if (state[i] != 1) p->entries[p->selected[i]].selected = false;
        p->selection_dirty = true;
    }
    free(state);
    free(expected_of);
    *entries = p->matches;
    *count = st == CKPT_OK ? p->match_count : 0;
    return st;
}
