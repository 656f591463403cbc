/* Status names and messages; filling the error struct. */
#include <errno.h>
#include <string.h>

#include "base/base.h"
#include "helpers.h"

static void test_every_status_has_a_distinct_name_and_message(void **state) {
    (void)state;
    int seen = 0;
    for (int s = 0; s < 1000; s++) {
        const char *name = ckpt_status_name((ckpt_status)s);
        if (!strcmp(name, "CKPT_E_UNKNOWN_STATUS")) continue;
        seen++;
        assert_true(s < 100); /* categories stay below 100 */
        assert_true(!strncmp(name, s ? "CKPT_E_" : "CKPT_OK", 6));
        assert_string_not_equal(ckpt_status_message((ckpt_status)s), "unknown status");
        for (int t = 0; t < s; t++) assert_string_not_equal(name, ckpt_status_name((ckpt_status)t));
    }
    assert_int_equal(seen, 1 + 17 + 9); /* OK, the general statuses and the categories of the formats' details */
    assert_string_equal(ckpt_status_name(CKPT_E_CORRUPT), "CKPT_E_CORRUPT");
    assert_string_equal(ckpt_status_name((ckpt_status)999), "CKPT_E_UNKNOWN_STATUS");
}

/* Every detail belongs to one category below 100 that is not CKPT_OK; no
 * number names both a category and a detail; names and messages are
 * distinct. */
static void test_every_detail_has_one_category(void **state) {
    (void)state;
    int seen = 0;
    for (int d = 1; d < 1000; d++) {
        const char *name = ckpt_detail_name((ckpt_detail)d);
        if (!strcmp(name, "CKPT_D_UNKNOWN_DETAIL")) {
            assert_int_equal(ckpt_detail_status((ckpt_detail)d), CKPT_OK);
            continue;
        }
        seen++;
        assert_true(!strncmp(name, "CKPT_D_", 7));
        ckpt_status category = ckpt_detail_status((ckpt_detail)d);
        assert_true(category > CKPT_OK && category < 100);
        assert_string_not_equal(ckpt_status_name(category), "CKPT_E_UNKNOWN_STATUS");
        assert_string_equal(ckpt_status_name((ckpt_status)d), "CKPT_E_UNKNOWN_STATUS");
        assert_string_not_equal(ckpt_detail_message((ckpt_detail)d), "unknown detail");
        for (int e = 1; e < d; e++) assert_string_not_equal(name, ckpt_detail_name((ckpt_detail)e));
    }
    assert_int_equal(seen, 54); /* each of the per-format statuses that were */
    assert_string_equal(ckpt_detail_name(CKPT_D_NONE), "CKPT_D_NONE");
    assert_int_equal(ckpt_detail_status(CKPT_D_NONE), CKPT_OK);
    assert_string_equal(ckpt_detail_name(CKPT_D_DATA_HOLE), "CKPT_D_DATA_HOLE");
    assert_string_equal(ckpt_detail_message(CKPT_D_DATA_HOLE), "bytes between tensors belong to no tensor");
    assert_string_equal(ckpt_detail_name((ckpt_detail)999), "CKPT_D_UNKNOWN_DETAIL");
}

static void test_numbers_are_stable(void **state) {
    (void)state;
    /* Published numbers never change: details keep the numbers they had as
     * statuses. */
    assert_int_equal(CKPT_E_IO, 3);
    assert_int_equal(CKPT_E_LOCKED, 17);
    assert_int_equal(CKPT_E_CORRUPT, 18);
    assert_int_equal(CKPT_E_UNSUPPORTED, 19);
    assert_int_equal(CKPT_E_FORBIDDEN, 36);
    assert_int_equal(CKPT_E_CHECKSUM, 37);
    assert_int_equal(CKPT_E_PEER, 44);
    assert_int_equal(CKPT_D_HEADER_TOO_SMALL, 20);
    assert_int_equal(CKPT_D_HEADER_TOO_LARGE, 21);
    assert_int_equal(CKPT_D_DUPLICATE_NAME, 34);
    assert_int_equal(CKPT_D_INDEX_MISMATCH, 41);
    assert_int_equal(CKPT_D_ZIP_INVALID, 50);
    assert_int_equal(CKPT_D_CHECKSUM, 52);
    assert_int_equal(CKPT_D_GGUF_VERSION, 70);
    assert_int_equal(CKPT_D_UNSUPPORTED_DTYPE, 79);
    assert_int_equal(CKPT_D_NPY_INVALID, 90);
    assert_int_equal(CKPT_D_MSGPACK_INVALID, 91);
    assert_int_equal(CKPT_D_HTTP_STATUS, 100);
    assert_int_equal(CKPT_D_COMM_DATA, 113);
    assert_int_equal(CKPT_FORMAT_NPY, 7);
    assert_int_equal(CKPT_FORMAT_NPZ, 8);
    assert_int_equal(CKPT_FORMAT_FLAX_MSGPACK, 9);
    assert_int_equal(CKPT_D_DCP_METADATA, 80);
    assert_int_equal(CKPT_D_DCP_UNSUPPORTED, 86);
    /* What a caller acts on. */
    assert_int_equal(ckpt_detail_status(CKPT_D_HEADER_TOO_LARGE), CKPT_E_CORRUPT);
    assert_int_equal(ckpt_detail_status(CKPT_D_PICKLE_FORBIDDEN), CKPT_E_FORBIDDEN);
    assert_int_equal(ckpt_detail_status(CKPT_D_GGUF_VERSION), CKPT_E_UNSUPPORTED);
    assert_int_equal(ckpt_detail_status(CKPT_D_DCP_PATH), CKPT_E_UNSAFE_PATH);
    assert_int_equal(ckpt_detail_status(CKPT_D_HTTP_AUTH), CKPT_E_AUTH);
    assert_int_equal(ckpt_detail_status(CKPT_D_PEER_TIMEOUT), CKPT_E_TIMEOUT);
}

static void test_fail_fills_every_field(void **state) {
    (void)state;
    ckpt_error err;
    ckpt_error_clear(&err);
    assert_int_equal(err.offset, -1);
    ckpt_status st = ckpt__fail(&err, CKPT__D(DATA_HOLE), "m.safetensors", "w", 123, "gap of %d bytes", 4);
    assert_int_equal(st, CKPT_E_CORRUPT); /* a detail given: its category returned */
    assert_int_equal(err.status, CKPT_E_CORRUPT);
    assert_int_equal(err.detail, CKPT_D_DATA_HOLE);
    assert_string_equal(err.path, "m.safetensors");
    assert_string_equal(err.tensor, "w");
    assert_int_equal(err.offset, 123);
    assert_string_equal(err.message, "m.safetensors: tensor 'w': at byte 123: gap of 4 bytes");
    /* NULL error: only the status comes back. */
    assert_int_equal(ckpt__fail(NULL, CKPT_E_IO, NULL, NULL, -1, "x"), CKPT_E_IO);
    assert_int_equal(ckpt__fail(NULL, CKPT__D(HTTP_AUTH), NULL, NULL, -1, "x"), CKPT_E_AUTH);
    /* A status given: no detail, also after an error that had one. */
    assert_int_equal(ckpt__fail(&err, CKPT_E_CORRUPT, NULL, NULL, -1, "x"), CKPT_E_CORRUPT);
    assert_int_equal(err.detail, CKPT_D_NONE);
}

static void test_errno_mapping(void **state) {
    (void)state;
    ckpt_error err;
    assert_int_equal(ckpt__fail_errno(&err, ENOSPC, "out", 8, "write failed"), CKPT_E_NO_SPACE);
    assert_int_equal(err.sys_errno, ENOSPC);
    assert_non_null(strstr(err.message, "out: at byte 8: write failed ("));
    assert_int_equal(ckpt__fail_errno(&err, ENOENT, "x", -1, "open"), CKPT_E_NOT_FOUND);
    assert_int_equal(ckpt__fail_errno(&err, EIO, "x", -1, "read"), CKPT_E_IO);
}

static void test_long_fields_are_truncated_safely(void **state) {
    (void)state;
    char big[5000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ckpt_error err;
    ckpt__fail(&err, CKPT_E_IO, big, big, 1, "%s", big);
    assert_int_equal(strlen(err.path), sizeof err.path - 1);
    assert_int_equal(strlen(err.tensor), sizeof err.tensor - 1);
    assert_true(strlen(err.message) < sizeof err.message);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_status_has_a_distinct_name_and_message),
        cmocka_unit_test(test_every_detail_has_one_category),
        cmocka_unit_test(test_numbers_are_stable),
        cmocka_unit_test(test_fail_fills_every_field),
        cmocka_unit_test(test_errno_mapping),
        cmocka_unit_test(test_long_fields_are_truncated_safely),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
