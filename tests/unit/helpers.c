#include "helpers.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *scratch_dir(void) {
    const char *tmp = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/ckpt-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

static void remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            remove_tree(p);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

void scratch_free(char *dir) {
    if (!dir) return;
    remove_tree(dir);
    free(dir);
}

const char *in_dir(const char *dir, const char *name) {
    static char bufs[4][4096];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, 4096, "%s/%s", dir, name);
    return b;
}

void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

void write_safetensors(const char *path, const char *header, size_t data_len) {
    size_t h = strlen(header);
    unsigned char *buf = malloc(8 + h + data_len + 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, header, h);
    for (size_t i = 0; i < data_len; i++) buf[8 + h + i] = (unsigned char)(i * 7 + 1);
    write_bytes(path, buf, 8 + h + data_len);
    free(buf);
}

char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    size_t got = fread(buf, 1, (size_t)len, f);
    fclose(f);
    buf[got] = '\0';
    if (n) *n = got;
    return buf;
}

int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

ckpt_status convert_all(ckpt_catalog *cat, const char *dst, const ckpt_writer_options *options,
                        ckpt_progress_fn progress, void *user, ckpt_error *err) {
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    if (options) o = *options;
    o.progress = progress, o.user = user;
    ckpt_plan *plan = NULL;
    ckpt_status st = cat ? ckpt_plan_create(cat, &plan, err) : CKPT_E_INVALID_ARGUMENT;
    if (st == CKPT_OK) st = ckpt_convert_plan(plan, dst, &o, err);
    ckpt_plan_free(plan);
    return st;
}
