/* File helpers: full reads, kernel copies, temporaries, paths. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "io/file.h"

static void test_pread_reports_truncation(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_bytes(in_dir(dir, "f"), "0123456789", 10);
    int fd;
    uint64_t size;
    ckpt_error err;
    assert_int_equal(ckpt__file_open_read(in_dir(dir, "f"), &fd, &size, &err), CKPT_OK);
    assert_int_equal(size, 10);
    char buf[16];
    assert_int_equal(ckpt__pread_full(fd, buf, 4, 3, "f", &err), CKPT_OK);
    assert_memory_equal(buf, "3456", 4);
    assert_int_equal(ckpt__pread_full(fd, buf, 8, 6, "f", &err), CKPT_E_TRUNCATED);
    assert_int_equal(err.offset, 10);
    close(fd);
    assert_int_equal(ckpt__file_open_read(dir, &fd, &size, &err), CKPT_E_INVALID_ARGUMENT);
    assert_int_equal(ckpt__file_open_read(in_dir(dir, "missing"), &fd, &size, &err), CKPT_E_NOT_FOUND);
    scratch_free(dir);
}

static int ticks;
static int count_ticks(uint64_t copied, void *user) {
    (void)copied;
    ticks++;
    return user != NULL; /* cancel when asked */
}

static void test_copy_range(void **state) {
    (void)state;
    char *dir = scratch_dir();
    enum { N = 3 << 20 };
    char *data = malloc(N);
    for (int i = 0; i < N; i++) data[i] = (char)(i * 31);
    write_bytes(in_dir(dir, "src"), data, N);
    int src, dst;
    uint64_t size;
    ckpt_error err;
    assert_int_equal(ckpt__file_open_read(in_dir(dir, "src"), &src, &size, &err), CKPT_OK);
    dst = open(in_dir(dir, "dst"), O_RDWR | O_CREAT, 0644);
    ticks = 0;
    assert_int_equal(ckpt__copy_range(src, 100, "src", dst, 8, "dst", N - 100, count_ticks, NULL, &err), CKPT_OK);
    assert_true(ticks >= 1);
    size_t n;
    char *out = read_all(in_dir(dir, "dst"), &n);
    assert_int_equal(n, N - 100 + 8);
    assert_memory_equal(out + 8, data + 100, N - 100);
    free(out);
    /* Past the end of the source: truncation, naming the source offset. */
    assert_int_equal(ckpt__copy_range(src, N - 10, "src", dst, 0, "dst", 20, NULL, NULL, &err), CKPT_E_TRUNCATED);
    assert_string_equal(err.path, "src");
    /* A tick that asks to stop cancels. */
    assert_int_equal(ckpt__copy_range(src, 0, "src", dst, 0, "dst", 1000, count_ticks, (void *)1, &err),
                     CKPT_E_CANCELLED);
    close(src);
    close(dst);
    free(data);
    scratch_free(dir);
}

static void test_temporaries_are_hidden_and_unique(void **state) {
    (void)state;
    char *dir = scratch_dir();
    char *a, *b;
    int fa, fb;
    ckpt_error err;
    assert_int_equal(ckpt__temp_create(in_dir(dir, "model.safetensors"), &a, &fa, &err), CKPT_OK);
    assert_int_equal(ckpt__temp_create(in_dir(dir, "model.safetensors"), &b, &fb, &err), CKPT_OK);
    assert_string_not_equal(a, b);
    assert_non_null(strstr(a, "/.model.safetensors.ckpt-tmp-"));
    assert_int_equal(ckpt__reserve(fa, 4096, a, &err), CKPT_OK);
    close(fa);
    close(fb);
    unlink(a);
    unlink(b);
    free(a);
    free(b);
    assert_int_equal(ckpt__temp_create(in_dir(dir, "no/such/dir/x"), &a, &fa, &err), CKPT_E_NOT_FOUND);
    scratch_free(dir);
}

static void test_paths(void **state) {
    (void)state;
    char *p = ckpt__path_join("a/b", "c");
    assert_string_equal(p, "a/b/c");
    free(p);
    p = ckpt__path_join("a/", "c");
    assert_string_equal(p, "a/c");
    free(p);
    p = ckpt__path_dirname("x");
    assert_string_equal(p, ".");
    free(p);
    p = ckpt__path_dirname("/x");
    assert_string_equal(p, "/");
    free(p);
    p = ckpt__path_dirname("d/e/f");
    assert_string_equal(p, "d/e");
    free(p);
    assert_string_equal(ckpt__path_basename("d/e/f"), "f");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pread_reports_truncation),
        cmocka_unit_test(test_copy_range),
        cmocka_unit_test(test_temporaries_are_hidden_and_unique),
        cmocka_unit_test(test_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
