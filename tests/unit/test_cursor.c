/* The bounded cursor (base/cursor.h): every read of a truncated record
 * fails where the truncated field starts, its error sticks, big-endian and
 * little-endian integers of every width, varints and counted strings. */
#include <string.h>

#include "base/cursor.h"
#include "helpers.h"

/* One record of every kind of field, and where each field starts. */
static const unsigned char record[] = {
    0x7F,                                           /* u8 */
    0x34, 0x12,                                     /* u16 */
    0x12, 0x34, 0x56, 0x78,                         /* u32 big-endian */
    0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* u64 */
    0xAC, 0x02,                                     /* varint 300 */
    0x03, 'a', 'b', 'c',                            /* 1-byte length, then bytes */
    'E', 'N', 'D',                                  /* a marker */
};
static const size_t starts[] = {0, 1, 3, 7, 15, 17, 21, sizeof record};

typedef struct decoded {
    uint64_t u8, u16, u32be, u64, varint;
    size_t len;
    const unsigned char *s;
    bool marker;
} decoded;

static decoded decode(ckpt__rd *r) {
    decoded d = {0};
    d.u8 = ckpt__rd_u8(r);
    d.u16 = ckpt__rd_u16(r);
    d.u32be = ckpt__rd_be(r, 4);
    d.u64 = ckpt__rd_u64(r);
    d.varint = ckpt__rd_uvarint(r);
    d.s = ckpt__rd_counted(r, 1, false, &d.len);
    d.marker = ckpt__rd_expect(r, "END", 3);
    return d;
}

static void test_whole_record(void **state) {
    (void)state;
    ckpt__rd r = ckpt__rd_over(record, sizeof record, 0);
    decoded d = decode(&r);
    assert_false(r.bad);
    assert_int_equal(d.u8, 0x7F);
    assert_int_equal(d.u16, 0x1234);
    assert_int_equal(d.u32be, 0x12345678);
    assert_int_equal(d.u64, 0x0102030405060708ULL);
    assert_int_equal(d.varint, 300);
    assert_int_equal(d.len, 3);
    assert_memory_equal(d.s, "abc", 3);
    assert_true(d.marker);
    assert_int_equal(ckpt__rd_left(&r), 0);
    assert_int_equal(ckpt__rd_offset(&r), sizeof record);
}

/* Cut at every byte: the cursor goes bad at the start of the field the cut
 * falls in (the file offset counts the window's base), and every field
 * from there on reads as zero. */
static void test_truncation_at_every_byte(void **state) {
    (void)state;
    for (size_t cut = 0; cut < sizeof record; cut++) {
        ckpt__rd r = ckpt__rd_over(record, cut, 1000);
        decoded d = decode(&r);
        assert_true(r.bad);
        size_t field = 0;
        while (starts[field + 1] <= cut) field++;
        assert_int_equal(ckpt__rd_error_at(&r), 1000 + starts[field]);
        uint64_t after[] = {d.u8, d.u16, d.u32be, d.u64, d.varint, d.len};
        for (size_t f = field; f < 6; f++) assert_int_equal(after[f], 0);
        if (field <= 5) assert_null(d.s);
        assert_false(d.marker);
    }
}

/* A failed read leaves the cursor bad even for reads that would fit, and
 * the first failure's offset is the one kept. */
static void test_error_is_sticky(void **state) {
    (void)state;
    const unsigned char three[] = {1, 2, 3};
    ckpt__rd r = ckpt__rd_over(three, sizeof three, 40);
    assert_int_equal(ckpt__rd_u8(&r), 1);
    assert_int_equal(ckpt__rd_u32(&r), 0); /* 2 bytes left */
    assert_true(r.bad);
    assert_int_equal(ckpt__rd_u8(&r), 0); /* would fit */
    assert_false(ckpt__rd_skip(&r, 1));
    assert_int_equal(ckpt__rd_offset(&r), 41);
    assert_int_equal(ckpt__rd_error_at(&r), 41);
    ckpt__rd_fail_at(&r, 2); /* a later failure does not move the offset */
    assert_int_equal(ckpt__rd_error_at(&r), 41);

    ckpt__rd v = ckpt__rd_over(three, sizeof three, 0);
    ckpt__rd_u8(&v);
    ckpt__rd_fail(&v); /* a value its decoder finds invalid */
    assert_true(v.bad);
    assert_int_equal(ckpt__rd_u8(&v), 0);
    assert_int_equal(ckpt__rd_error_at(&v), 1);
}

static void test_big_and_little_endian(void **state) {
    (void)state;
    const unsigned char b[] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
    ckpt__rd r = ckpt__rd_over(b, sizeof b, 0);
    assert_int_equal(ckpt__rd_be(&r, 2), 0x0102);
    assert_int_equal(ckpt__rd_u16(&r), 0x0403);
    assert_int_equal(ckpt__rd_be(&r, 3), 0x050607);
    assert_int_equal(ckpt__rd_le(&r, 1), 0x08);
    r = ckpt__rd_over(b, sizeof b, 0);
    assert_int_equal(ckpt__rd_u64be(&r), 0x0102030405060708ULL);
    r = ckpt__rd_over(b, sizeof b, 0);
    assert_int_equal(ckpt__rd_be(&r, 4), 0x01020304);
    assert_int_equal(ckpt__rd_u32(&r), 0x08070605);
    assert_false(r.bad);
    assert_int_equal(ckpt__le64(b), 0x0807060504030201ULL);
    assert_int_equal(ckpt__load_be(b, 8), 0x0102030405060708ULL);
    unsigned char out[4];
    ckpt__store_le(out, 0x0A0B0C0D, 4);
    assert_int_equal(ckpt__le32(out), 0x0A0B0C0D);
}

/* The largest varint is ten bytes; a value past 64 bits, or an eleventh
 * byte, is invalid where the varint starts. */
static void test_varint_overflow(void **state) {
    (void)state;
    unsigned char max[] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01};
    ckpt__rd r = ckpt__rd_over(max, sizeof max, 0);
    assert_int_equal(ckpt__rd_uvarint(&r), UINT64_MAX);
    assert_false(r.bad);

    unsigned char past[] = {0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02};
    r = ckpt__rd_over(past, sizeof past, 0);
    assert_int_equal(ckpt__rd_u8(&r), 0);
    assert_int_equal(ckpt__rd_uvarint(&r), 0);
    assert_true(r.bad);
    assert_int_equal(ckpt__rd_error_at(&r), 1);

    unsigned char eleven[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x81, 0x00};
    r = ckpt__rd_over(eleven, sizeof eleven, 0);
    assert_int_equal(ckpt__rd_uvarint(&r), 0);
    assert_true(r.bad);
    assert_int_equal(ckpt__rd_error_at(&r), 0);
}

/* Lengths and counts that promise more than is left fail where they start. */
static void test_lengths_beyond_the_end(void **state) {
    (void)state;
    const unsigned char lying[] = {0xAA, 0x05, 0x00, 0x00, 0x00, 'x', 'y'};
    ckpt__rd r = ckpt__rd_over(lying, sizeof lying, 0);
    size_t len = 99;
    ckpt__rd_u8(&r);
    assert_null(ckpt__rd_counted(&r, 4, false, &len));
    assert_int_equal(len, 0);
    assert_true(r.bad);
    assert_int_equal(ckpt__rd_error_at(&r), 1);

    r = ckpt__rd_over(lying, sizeof lying, 0);
    ckpt__rd_u8(&r);
    assert_int_equal(ckpt__rd_count(&r, 1), 0); /* 5 items of a byte, 2 bytes left */
    assert_true(r.bad);
    assert_int_equal(ckpt__rd_error_at(&r), 1);

    r = ckpt__rd_over(lying + 1, 6, 0);
    assert_int_equal(ckpt__rd_count(&r, 0), 5); /* no minimum: any count */
    assert_false(r.bad);

    r = ckpt__rd_over(lying, sizeof lying, 0);
    assert_false(ckpt__rd_expect(&r, "\xAB", 1));
    assert_int_equal(ckpt__rd_error_at(&r), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_record),
        cmocka_unit_test(test_truncation_at_every_byte),
        cmocka_unit_test(test_error_is_sticky),
        cmocka_unit_test(test_big_and_little_endian),
        cmocka_unit_test(test_varint_overflow),
        cmocka_unit_test(test_lengths_beyond_the_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
