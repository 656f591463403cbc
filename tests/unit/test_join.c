/* test_join.c — several tensors joined along an axis into one output
 * (ckpt__plan_join, plan_internal.h): each piece's box and offset, the
 * bytes a load and a conversion put there, the parts a join refuses, and
 * the joined item handed over once, whole.
 *
 * The parts are U8 tensors of a hand-made safetensors file whose data
 * byte i is i * 7 + 1 (write_safetensors): below 256 bytes every byte is
 * distinct, so a byte in the wrong place shows. */
#include <string.h>

#include "helpers.h"
#include "engine.h"
#include "plan_internal.h"

#define MAX_PARTS 3

/* One case: parts of these shapes (ndim axes each) joined along `axis`,
 * given to the join in the order `order` (catalog indexes), the output
 * being catalog entry `head`. */
typedef struct join_case {
    uint32_t ndim, axis;
    size_t n;
    uint64_t shape[MAX_PARTS][3];
    size_t order[MAX_PARTS];
    size_t head;
} join_case;

/* The safetensors file of the case's parts, named p0, p1…, in catalog
 * order, each part's data after the previous one's; part k's first data
 * byte in first[k]. */
static void write_parts(const char *path, const join_case *c, uint64_t *first) {
    char header[1024] = "{";
    uint64_t at = 0;
    for (size_t k = 0; k < c->n; k++) {
        uint64_t numel = 1;
        char shape[64] = "[";
        for (uint32_t a = 0; a < c->ndim; a++) {
            numel *= c->shape[k][a];
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%llu", a ? "," : "",
                     (unsigned long long)c->shape[k][a]);
        }
        strcat(shape, "]");
        snprintf(header + strlen(header), sizeof header - strlen(header),
                 "%s\"p%zu\":{\"dtype\":\"U8\",\"shape\":%s,\"data_offsets\":[%llu,%llu]}", k ? "," : "", k, shape,
                 (unsigned long long)at, (unsigned long long)(at + numel));
        first[k] = at, at += numel;
    }
    strcat(header, "}");
    assert_true(at < 256);
    write_safetensors(path, header, (size_t)at);
}

/* The file's data byte i (write_safetensors' pattern). */
static unsigned char data_byte(uint64_t i) { return (unsigned char)(i * 7 + 1); }

/* The joined output computed here, element by element (malloc'ed, *len
 * bytes), and its extent along the axis in *extent. */
static unsigned char *expected_join(const join_case *c, const uint64_t *first, uint64_t *extent, size_t *len) {
    uint64_t lead = 1, inner = 1;
    *extent = 0;
    for (uint32_t a = 0; a < c->axis; a++) lead *= c->shape[0][a];
    for (uint32_t a = c->axis + 1; a < c->ndim; a++) inner *= c->shape[0][a];
    for (size_t k = 0; k < c->n; k++) *extent += c->shape[c->order[k]][c->axis];
    *len = (size_t)(lead * *extent * inner);
    unsigned char *out = malloc(*len), *w = out;
    for (uint64_t l = 0; l < lead; l++)
        for (size_t k = 0; k < c->n; k++) { /* part order[k]'s rows at lead index l */
            size_t part = c->order[k];
            uint64_t rows = c->shape[part][c->axis];
            for (uint64_t r = 0; r < rows; r++)
                for (uint64_t i = 0; i < inner; i++) *w++ = data_byte(first[part] + (l * rows + r) * inner + i);
        }
    return out;
}

typedef struct handed {
    const ckpt_plan *plan;
    const unsigned char *want;
    size_t len;
    int calls, whole;
} handed;

/* item_done: counts the calls, and whether the item's bytes were all in
 * place at the call. */
static int item_done(size_t item, void *user) {
    handed *h = user;
    const ckpt_plan_item *it = ckpt_plan_item_at(h->plan, item);
    h->calls++;
    h->whole += it->nbytes == h->len && !memcmp(it->data, h->want, h->len);
    return 0;
}

static void check_case(const join_case *c) {
    char *dir = scratch_dir();
    const char *src = strdup(in_dir(dir, "parts.safetensors"));
    uint64_t first[MAX_PARTS], extent;
    write_parts(src, c, first);
    size_t len;
    unsigned char *want = expected_join(c, first, &extent, &len);
    ckpt_catalog *cat;
    ckpt_plan *p;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(src, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_create(cat, &p, &err), CKPT_OK);
    assert_int_equal(ckpt__plan_join(p, c->head, c->n, c->order, c->axis, &err), CKPT_OK);

    /* the item: one output, the parts' shape but the joined extent */
    assert_int_equal(ckpt_plan_count(p), 1);
    const ckpt_plan_item *it = ckpt_plan_item_at(p, 0);
    assert_int_equal(it->ndim, c->ndim);
    for (uint32_t a = 0; a < c->ndim; a++) assert_int_equal(it->shape[a], a == c->axis ? extent : c->shape[0][a]);
    assert_int_equal(it->nbytes, len);

    /* the pieces: for each index of the axes before the joined one, each
     * part's box, at its offset */
    const ckpt__plan_entry *e = &p->entries[c->head];
    uint64_t lead = 1, inner = 1;
    for (uint32_t a = 0; a < c->axis; a++) lead *= c->shape[0][a];
    for (uint32_t a = c->axis + 1; a < c->ndim; a++) inner *= c->shape[0][a];
    assert_int_equal(ckpt__plan_pieces(e), lead * c->n);
    for (uint64_t j = 0; j < ckpt__plan_pieces(e); j++) {
        uint64_t l = j / c->n, before = 0, at;
        size_t k = (size_t)(j % c->n), part = c->order[k];
        for (size_t q = 0; q < k; q++) before += c->shape[c->order[q]][c->axis];
        ckpt__move m = {0};
        ckpt__plan_piece(p, e, j, &m, &at);
        assert_int_equal(m.tensor, part);
        assert_int_equal(at, (l * extent + before) * inner);
        uint64_t box = 1;
        for (uint32_t a = 0; a < c->ndim; a++) box *= m.count[a];
        assert_int_equal(box, c->shape[part][c->axis] * inner); /* one index of the lead axes */
        for (uint32_t a = 0; a < c->axis; a++) assert_int_equal(m.count[a], 1);
    }

    /* a load: the bytes in place, the item handed over once, whole */
    handed h = {p, want, len, 0, 0};
    ckpt_load_options lo;
    ckpt_load_options_init(&lo);
    lo.item_done = item_done, lo.item_done_user = &h;
    lo.chunk_bytes = 4096; /* the smallest: every piece its own run of the engine */
    assert_int_equal(ckpt_load(p, &lo, &err), CKPT_OK);
    assert_memory_equal(ckpt_plan_item_at(p, 0)->data, want, len);
    assert_int_equal(h.calls, 1);
    assert_int_equal(h.whole, 1);

    /* a conversion: the same bytes in the file */
    const char *dst = strdup(in_dir(dir, "joined.safetensors"));
    assert_int_equal(ckpt_convert_plan(p, dst, NULL, &err), CKPT_OK);
    ckpt_plan_free(p);
    ckpt_catalog_close(cat);
    ckpt_catalog *out;
    assert_int_equal(ckpt_catalog_open(dst, &out, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_tensor_count(out), 1);
    const ckpt_tensor_info *t = ckpt_catalog_tensor(out, 0);
    char name[8];
    snprintf(name, sizeof name, "p%zu", c->head);
    assert_string_equal(t->name, name);
    assert_int_equal(t->nbytes, len);
    unsigned char *got = malloc(len);
    assert_int_equal(ckpt_catalog_read(out, t, 0, got, len, &err), CKPT_OK);
    assert_memory_equal(got, want, len);
    ckpt_catalog_close(out);
    free(got);
    free(want);
    free((void *)dst);
    free((void *)src);
    scratch_free(dir);
}

static void test_join_two_parts_along_axis_0(void **state) {
    (void)state;
    join_case c = {.ndim = 2, .axis = 0, .n = 2, .shape = {{2, 3}, {1, 3}}, .order = {0, 1}, .head = 0};
    check_case(&c);
}

static void test_join_three_parts_along_axis_0(void **state) {
    (void)state;
    join_case c = {.ndim = 2, .axis = 0, .n = 3, .shape = {{2, 3}, {1, 3}, {3, 3}}, .order = {0, 1, 2}, .head = 0};
    check_case(&c);
}

static void test_join_two_parts_along_axis_1(void **state) {
    (void)state;
    /* transformers' gate_up_proj: (experts, gate rows then up rows, hidden) */
    join_case c = {.ndim = 3, .axis = 1, .n = 2, .shape = {{3, 2, 4}, {3, 2, 4}}, .order = {0, 1}, .head = 0};
    check_case(&c);
}

static void test_join_three_parts_along_axis_1(void **state) {
    (void)state;
    join_case c = {.ndim = 3, .axis = 1, .n = 3, .shape = {{2, 3, 4}, {2, 1, 4}, {2, 2, 4}}, .order = {0, 1, 2},
                   .head = 0};
    check_case(&c);
}

static void test_join_in_the_callers_order(void **state) {
    (void)state;
    /* the output is entry 0, its parts' order the caller's: p2, p0, p1 */
    join_case c = {.ndim = 3, .axis = 1, .n = 3, .shape = {{2, 3, 4}, {2, 1, 4}, {2, 2, 4}}, .order = {2, 0, 1},
                   .head = 0};
    check_case(&c);
}

static void test_join_refuses_a_part_of_another_shape(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *src = strdup(in_dir(dir, "parts.safetensors"));
    /* p1's leading axis (3) contradicts p0's (2): only the joined axis may differ */
    join_case c = {.ndim = 3, .n = 3, .shape = {{2, 3, 4}, {3, 1, 4}, {2, 2, 4}}};
    uint64_t first[MAX_PARTS];
    write_parts(src, &c, first);
    ckpt_catalog *cat;
    ckpt_plan *p;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(src, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_create(cat, &p, &err), CKPT_OK);
    size_t parts[] = {0, 1, 2};
    assert_int_equal(ckpt__plan_join(p, 0, 3, parts, 1, &err), CKPT_E_INVALID_ARGUMENT);
    assert_string_equal(err.tensor, "p1");
    assert_string_equal(err.path, src);
    assert_non_null(strstr(err.message, "cannot join it to p0 along axis 1"));
    assert_non_null(strstr(err.message, "shape"));
    /* an axis the parts lack */
    size_t two[] = {0, 2};
    assert_int_equal(ckpt__plan_join(p, 0, 2, two, 3, &err), CKPT_E_INVALID_ARGUMENT);
    assert_string_equal(err.tensor, "p0");
    /* nothing joined: the plan is as it was */
    assert_int_equal(ckpt_plan_count(p), 3);
    assert_int_equal(ckpt_plan_item_at(p, 0)->shape[1], 3);
    assert_int_equal(ckpt__plan_join(p, 0, 2, two, 1, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_count(p), 2);
    assert_int_equal(ckpt_plan_item_at(p, 0)->shape[1], 5);
    /* a joined output is joined once, and its parts are no one else's */
    assert_int_equal(ckpt__plan_join(p, 0, 2, two, 1, &err), CKPT_E_INVALID_ARGUMENT);
    size_t again[] = {1, 2};
    assert_int_equal(ckpt__plan_join(p, 1, 2, again, 0, &err), CKPT_E_INVALID_ARGUMENT);
    assert_string_equal(err.tensor, "p2");
    ckpt_plan_free(p);
    ckpt_catalog_close(cat);
    free((void *)src);
    scratch_free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_join_two_parts_along_axis_0),
        cmocka_unit_test(test_join_three_parts_along_axis_0),
        cmocka_unit_test(test_join_two_parts_along_axis_1),
        cmocka_unit_test(test_join_three_parts_along_axis_1),
        cmocka_unit_test(test_join_in_the_callers_order),
        cmocka_unit_test(test_join_refuses_a_part_of_another_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
