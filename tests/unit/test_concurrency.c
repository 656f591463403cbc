/* Many threads reading one catalog at once: every read and view agrees
 * with a single-threaded read.  Run under ThreadSanitizer by make test. */
#include <pthread.h>
#include <string.h>

#include "helpers.h"

#define T(name, dtype, shape, b, e) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

enum { THREADS = 8, ROUNDS = 300 };

typedef struct shared {
    ckpt_catalog *cat;
    unsigned char *expect[8];
    int failures[THREADS];
} shared;

typedef struct arg {
    shared *s;
    int id;
} arg;

static void *reader(void *p) {
    arg *a = p;
    ckpt_catalog *cat = a->s->cat;
    size_t n = ckpt_catalog_tensor_count(cat);
    unsigned char buf[4096];
    for (int r = 0; r < ROUNDS; r++) {
        size_t i = (size_t)(r + a->id) % n;
        const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
        if (ckpt_catalog_find(cat, t->name) != t) a->s->failures[a->id]++;
        uint64_t off = (uint64_t)(r % 5), len = t->nbytes > off ? t->nbytes - off : 0;
        if (ckpt_catalog_read(cat, t, off, buf, len, NULL) != CKPT_OK || memcmp(buf, a->s->expect[i] + off, len))
            a->s->failures[a->id]++;
        const void *view;
        if (ckpt_catalog_view(cat, t, &view, NULL) != CKPT_OK || memcmp(view, a->s->expect[i], t->nbytes))
            a->s->failures[a->id]++;
    }
    return NULL;
}

static void test_threads_share_a_catalog(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *hdr = "{" T("a", "F32", "[16,16]", 0, 1024) "," T("b", "U8", "[100]", 1024, 1124) ","
                      T("c", "I64", "[64]", 1124, 1636) "," T("d", "BF16", "[3,7]", 1636, 1678) "}";
    /* Several files, so first views of different files race to map them. */
    for (int f = 0; f < 3; f++) {
        char name[32];
        snprintf(name, sizeof name, "m%d.safetensors", f);
        write_safetensors(in_dir(dir, name), hdr, 1678);
    }
    for (int f = 0; f < 3; f++) {
        char name[32];
        snprintf(name, sizeof name, "m%d.safetensors", f);
        shared s = {0};
        assert_int_equal(ckpt_catalog_open(in_dir(dir, name), &s.cat, NULL), CKPT_OK);
        for (size_t i = 0; i < ckpt_catalog_tensor_count(s.cat); i++) {
            const ckpt_tensor_info *t = ckpt_catalog_tensor(s.cat, i);
            s.expect[i] = malloc(t->nbytes);
            assert_int_equal(ckpt_catalog_read(s.cat, t, 0, s.expect[i], t->nbytes, NULL), CKPT_OK);
        }
        pthread_t th[THREADS];
        arg args[THREADS];
        for (int i = 0; i < THREADS; i++) {
            args[i] = (arg){&s, i};
            pthread_create(&th[i], NULL, reader, &args[i]);
        }
        for (int i = 0; i < THREADS; i++) {
            pthread_join(th[i], NULL);
            assert_int_equal(s.failures[i], 0);
        }
        for (size_t i = 0; i < ckpt_catalog_tensor_count(s.cat); i++) free(s.expect[i]);
        ckpt_catalog_close(s.cat);
    }
    scratch_free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_threads_share_a_catalog)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
