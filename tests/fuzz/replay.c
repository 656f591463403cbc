/* replay — runs every input of the given corpora through a fuzz target, as
 * an ordinary test: the corpora are regression tests in CI, with the
 * sanitizers of the build.  An argument is a packed corpus (<target>.tar.gz,
 * as tests/fuzz/corpus.sh packs it: read straight from the archive, without
 * unpacking it to disk), a directory of inputs (libFuzzer's), or one input. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "fuzz_common.h"

enum { TAR_BLOCK = 512, LARGEST_INPUT = 64 << 20 };

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = fread(buf, 1, (size_t)(n > 0 ? n : 0), f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

static int run_directory(const char *path, int *files) {
    int failures = 0;
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char file[4096];
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        failures += run_file(file);
        (*files)++;
    }
    if (d) closedir(d);
    return failures;
}

static int read_exactly(gzFile gz, void *buf, size_t n) {
    return gzread(gz, buf, (unsigned)n) == (int)n ? 0 : -1;
}

/* A ustar header's size field: octal digits, NUL- or space-terminated. */
static int tar_size(const char *field, size_t *size) {
    size_t v = 0;
    int digits = 0;
    for (int i = 0; i < 12 && field[i] >= '0' && field[i] <= '7'; i++, digits++) v = v * 8 + (size_t)(field[i] - '0');
    *size = v;
    return digits > 0 && v <= LARGEST_INPUT ? 0 : -1;
}

/* Every regular member of a gzip'd ustar archive; a damaged or cut archive
 * counts as a failure, so an input can never be skipped silently. */
static int run_archive(const char *path, int *files) {
    gzFile gz = gzopen(path, "rb");
    if (!gz) return 1;
    char header[TAR_BLOCK];
    int failures = 1;
    while (read_exactly(gz, header, sizeof header) == 0) {
        if (header[0] == '\0') { /* the end-of-archive blocks */
            failures = 0;
            break;
        }
        size_t size;
        if (tar_size(header + 124, &size) != 0) break;
        /* exactly the input's size, so that ASan sees a read one byte past it */
        uint8_t *buf = malloc(size ? size : 1);
        char padding[TAR_BLOCK];
        if (!buf || read_exactly(gz, buf, size) != 0 || read_exactly(gz, padding, (TAR_BLOCK - size % TAR_BLOCK) % TAR_BLOCK) != 0) {
            free(buf);
            break;
        }
        if (header[156] == '0' || header[156] == '\0') { /* a regular file */
            LLVMFuzzerTestOneInput(buf, size);
            (*files)++;
        }
        free(buf);
    }
    gzclose(gz);
    if (failures) fprintf(stderr, "replay: %s: not a whole gzip'd tar archive\n", path);
    return failures;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

int main(int argc, char **argv) {
    int files = 0, failures = 0;
    for (int a = 1; a < argc; a++) {
        struct stat st;
        if (stat(argv[a], &st) != 0) {
            fprintf(stderr, "replay: %s: not found\n", argv[a]);
            failures++;
        } else if (S_ISDIR(st.st_mode)) {
            failures += run_directory(argv[a], &files);
        } else if (ends_with(argv[a], ".tar.gz")) {
            failures += run_archive(argv[a], &files);
        } else {
            failures += run_file(argv[a]);
            files++;
        }
    }
    printf("replayed %d files, %d unreadable\n", files, failures);
    return files == 0 || failures ? 1 : 0;
}
