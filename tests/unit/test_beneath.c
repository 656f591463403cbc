/* Opening the files of a checkpoint directory beneath it (io/beneath.c):
 * links that stay inside, links and names that lead out, special files,
 * the Hugging Face cache's links — each with openat2 and again with the
 * component walk that replaces it where the kernel has none. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include "helpers.h"
#include "io/beneath.h"

/* A FIFO opened for reading without O_NONBLOCK waits for a writer: a test
 * that hangs is killed by the alarm and fails. */
enum { HANG_SECONDS = 20 };

static void put(const char *path, const char *text) { write_bytes(path, text, strlen(text)); }

static void link_at(const char *target, const char *path) { assert_int_equal(symlink(target, path), 0); }

static void make_dir(const char *path) { assert_int_equal(mkdir(path, 0755), 0); }

/* Opens `name` beneath `b`: the status, and the file's text when read. */
static ckpt_status open_text(const ckpt__beneath *b, const char *name, char *text, size_t cap, ckpt_error *err) {
    int fd;
    uint64_t size;
    ckpt_status st = ckpt__beneath_open(b, name, false, &fd, &size, err);
    if (st) return st;
    assert_true(size < cap);
    assert_int_equal(read(fd, text, cap), (ssize_t)size);
    text[size] = '\0';
    /* A regular file's descriptor reads as usual (O_NONBLOCK cleared). */
    assert_false(fcntl(fd, F_GETFL) & O_NONBLOCK);
    close(fd);
    return st;
}

static void expect_text(const ckpt__beneath *b, const char *name, const char *want) {
    char text[256];
    ckpt_error err;
    assert_int_equal(open_text(b, name, text, sizeof text, &err), CKPT_OK);
    assert_string_equal(text, want);
}

static void expect_unsafe(const ckpt__beneath *b, const char *name, const char *words) {
    char text[256];
    ckpt_error err;
    assert_int_equal(open_text(b, name, text, sizeof text, &err), CKPT_E_UNSAFE_PATH);
    assert_string_equal(err.path, name);
    if (!strstr(err.message, words)) fail_msg("'%s' lacks '%s'", err.message, words);
}

/* model/ with regular files, links inside it, and a secret beside it. */
static char *make_model(char **model) {
    char *dir = scratch_dir();
    *model = strdup(in_dir(dir, "model"));
    make_dir(*model);
    put(in_dir(dir, "secret"), "secret");
    put(in_dir(*model, "a.safetensors"), "a");
    make_dir(in_dir(*model, "sub"));
    put(in_dir(*model, "sub/b"), "b");
    return dir;
}

/* Pairs of strings: a link's {target, name}, or a name and what opening
 * it gives (its text, or words of its refusal). */
typedef struct pair {
    const char *a, *b;
} pair;

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

static void make_links(const char *dir, const pair *links, size_t n) {
    for (size_t i = 0; i < n; i++) link_at(links[i].a, in_dir(dir, links[i].b));
}

/* Opens each name in `dir` beneath it: texts[i].b is what it reads, or —
 * with `refused` — words of its CKPT_E_UNSAFE_PATH. */
static void expect_each(const char *dir, const pair *cases, size_t n, bool refused) {
    ckpt__beneath *b;
    ckpt_error err;
    assert_int_equal(ckpt__beneath_open_root(dir, &b, &err), CKPT_OK);
    for (size_t i = 0; i < n; i++) {
        char name[4096];
        snprintf(name, sizeof name, "%s/%s", dir, cases[i].a);
        if (refused) expect_unsafe(b, name, cases[i].b);
        else expect_text(b, name, cases[i].b);
    }
    ckpt__beneath_close(b);
}

static void test_links_inside_are_followed(void **state) {
    (void)state;
    char *model, *dir = make_model(&model);
    static const pair links[] = {{"a.safetensors", "same-dir"}, {"../a.safetensors", "sub/up-one"},
                                 {"sub", "dir-link"},           {"./sub/../dir-link/b", "winding"},
                                 {"same-dir", "chain"}};
    static const pair reads[] = {{"a.safetensors", "a"}, {"same-dir", "a"}, {"sub/up-one", "a"},
                                 {"dir-link/b", "b"},    {"winding", "b"},  {"chain", "a"},
                                 {"/./sub/b", "b"}}; /* however the directory's part is spelled */
    make_links(model, links, COUNT(links));
    expect_each(model, reads, COUNT(reads), false);
    free(model);
    scratch_free(dir);
}

static void test_links_out_are_refused(void **state) {
    (void)state;
    char *model, *dir = make_model(&model);
    char secret[4096], inside[4096];
    snprintf(secret, sizeof secret, "%s/secret", dir);
    snprintf(inside, sizeof inside, "%s/a.safetensors", model);
    /* An absolute link to a file inside is refused too: a checkpoint's
     * links are relative (a moved directory keeps them right). */
    const pair links[] = {{"../secret", "up"},      {secret, "absolute"},        {"../../secret", "sub/up-two"},
                          {"..", "parent"},         {inside, "absolute-inside"}, {"loop", "loop"}};
    static const pair refusals[] = {{"up", "symbolic link to '../secret', which leads out"},
                                    {"absolute", "leads out of the checkpoint's directory"},
                                    {"sub/up-two", "'../../secret'"},
                                    {"parent/secret", "leads out"},
                                    {"absolute-inside", "leads out"}};
    make_links(model, links, COUNT(links));
    expect_each(model, refusals, COUNT(refusals), true);
    ckpt__beneath *b;
    ckpt_error err;
    char text[64];
    assert_int_equal(ckpt__beneath_open_root(model, &b, &err), CKPT_OK);
    assert_int_equal(open_text(b, in_dir(model, "loop"), text, sizeof text, &err), CKPT_E_IO);
    assert_int_equal(err.sys_errno, ELOOP);
    ckpt__beneath_close(b);
    free(model);
    scratch_free(dir);
}

static void test_names_that_leave_are_refused(void **state) {
    (void)state;
    char *model, *dir = make_model(&model);
    ckpt__beneath *b;
    ckpt_error err;
    assert_int_equal(ckpt__beneath_open_root(model, &b, &err), CKPT_OK);
    expect_unsafe(b, in_dir(model, "../secret"), "'..'");
    expect_unsafe(b, in_dir(model, "sub/../a.safetensors"), "'..'");
    expect_unsafe(b, in_dir(dir, "secret"), "is not inside the checkpoint's directory");
    expect_unsafe(b, "/etc/passwd", "is not inside");
    expect_unsafe(b, "secret", "is not inside");
    ckpt__beneath_close(b);
    /* A relative directory: relative names in it, and no absolute one. */
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(model), 0);
    assert_int_equal(ckpt__beneath_open_root(".", &b, &err), CKPT_OK);
    expect_text(b, "a.safetensors", "a");
    expect_text(b, "./sub/b", "b");
    expect_unsafe(b, "../secret", "'..'");
    expect_unsafe(b, in_dir(model, "a.safetensors"), "is not inside");
    ckpt__beneath_close(b);
    assert_int_equal(chdir(cwd), 0);
    free(model);
    scratch_free(dir);
}

static void test_special_files_are_refused_unopened(void **state) {
    (void)state;
    char *model, *dir = make_model(&model);
    assert_int_equal(mkfifo(in_dir(model, "fifo"), 0644), 0);
    link_at("fifo", in_dir(model, "to-fifo"));
    make_dir(in_dir(model, "directory"));
    bool root = mknod(in_dir(model, "null"), S_IFCHR | 0644, makedev(1, 3)) == 0;
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", in_dir(model, "sock"));
    assert_int_equal(bind(s, (struct sockaddr *)&addr, sizeof addr), 0);
    ckpt__beneath *b;
    ckpt_error err;
    assert_int_equal(ckpt__beneath_open_root(model, &b, &err), CKPT_OK);
    alarm(HANG_SECONDS);
    expect_unsafe(b, in_dir(model, "fifo"), "is a FIFO, not a regular file");
    expect_unsafe(b, in_dir(model, "to-fifo"), "is a FIFO");
    expect_unsafe(b, in_dir(model, "directory"), "is a directory");
    expect_unsafe(b, in_dir(model, "sock"), "is a socket");
    if (root) expect_unsafe(b, in_dir(model, "null"), "is a character device");
    alarm(0);
    /* A listing's subdirectories are skipped, not refused. */
    int fd = 0;
    uint64_t size;
    assert_int_equal(ckpt__beneath_open(b, in_dir(model, "directory"), true, &fd, &size, &err), CKPT_OK);
    assert_int_equal(fd, -1);
    ckpt__beneath_close(b);
    close(s);
    free(model);
    scratch_free(dir);
    if (!root) skip();
}

static void test_listing(void **state) {
    (void)state;
    char *model, *dir = make_model(&model);
    put(in_dir(model, ".hidden"), "h");
    link_at("../secret", in_dir(model, "z-out"));
    link_at("..", in_dir(model, "up"));
    ckpt__beneath *b;
    ckpt_error err;
    assert_int_equal(ckpt__beneath_open_root(model, &b, &err), CKPT_OK);
    char **names;
    size_t n;
    assert_int_equal(ckpt__beneath_list(b, model, false, &names, &n, &err), CKPT_OK);
    assert_int_equal(n, 4); /* sorted, without dot files; links listed by name */
    assert_string_equal(names[0], "a.safetensors");
    assert_string_equal(names[1], "sub");
    assert_string_equal(names[2], "up");
    assert_string_equal(names[3], "z-out");
    ckpt__beneath_free_names(names, n);
    /* With dots (a writer's replaced files: DCP's .metadata): every name but "." and "..". */
    assert_int_equal(ckpt__beneath_list(b, model, true, &names, &n, &err), CKPT_OK);
    assert_int_equal(n, 5);
    assert_string_equal(names[0], ".hidden");
    assert_string_equal(names[1], "a.safetensors");
    ckpt__beneath_free_names(names, n);
    assert_int_equal(ckpt__beneath_list(b, in_dir(model, "sub"), false, &names, &n, &err), CKPT_OK);
    assert_int_equal(n, 1);
    ckpt__beneath_free_names(names, n);
    assert_int_equal(ckpt__beneath_list(b, in_dir(model, "up"), false, &names, &n, &err), CKPT_E_UNSAFE_PATH);
    assert_true(ckpt__beneath_has(b, "z-out"));
    assert_true(ckpt__beneath_has(b, ".hidden"));
    assert_false(ckpt__beneath_has(b, "missing"));
    assert_false(ckpt__beneath_has(b, "sub/b"));
    ckpt__beneath_close(b);
    free(model);
    scratch_free(dir);
}

/* The Hugging Face cache, as huggingface_hub lays it out:
 * <cache>/models--org--name/{blobs/<etag>, refs/main, snapshots/<rev>/<file>
 * -> ../../blobs/<etag>}, and the cache-wide store of shared blobs
 * <cache>/blobs/<xx>/<hash> that a repo blob may link to. */
#define REV "0123456789abcdef0123456789abcdef01234567"
#define HASH "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"

static const pair links_to_e1[] = {{"../../blobs/e1", "model.safetensors"}};

static char *make_hub_cache(char **snapshot) {
    char *dir = scratch_dir();
    static const char *const dirs[] = {"models--org--name", "models--org--name/blobs", "models--org--name/refs",
                                       "models--org--name/snapshots", "models--org--name/snapshots/" REV,
                                       "models--org--name/snapshots/" REV "/sub", "blobs", "blobs/2d"};
    for (size_t i = 0; i < COUNT(dirs); i++) make_dir(in_dir(dir, dirs[i]));
    put(in_dir(dir, "models--org--name/refs/main"), REV);
    put(in_dir(dir, "models--org--name/blobs/e1"), "blob one");
    put(in_dir(dir, "models--org--name/blobs/e2"), "blob two");
    put(in_dir(dir, "secret"), "secret");
    /* the shared store, and a repo blob huggingface_hub moved into it */
    put(in_dir(dir, "blobs/2d/" HASH), "shared blob");
    static const pair repo_links[] = {{"../../secret", "models--org--name/blobs/e-out"},
                                      {"../../blobs/2d/" HASH, "models--org--name/blobs/shared"}};
    make_links(dir, repo_links, COUNT(repo_links));
    *snapshot = strdup(in_dir(dir, "models--org--name/snapshots/" REV));
    put(in_dir(*snapshot, "plain.json"), "plain");
    static const pair links[] = {
        links_to_e1[0],                            {"../../../blobs/e2", "sub/config.json"},
        {"../../refs/main", "to-refs"},            {"../../blobs/../refs/main", "through-blobs"},
        {"../../../blobs/e1", "too-far-up"},       {"../../blobs/e-out", "blob-out"},
        {"../../blobs/shared", "shared-blob"}};
    make_links(*snapshot, links, COUNT(links));
    return dir;
}

static void test_hub_cache(void **state) {
    (void)state;
    char *snap, *dir = make_hub_cache(&snap);
    /* Without the store's marker, a blob linking into it is refused. */
    static const pair unmarked[] = {{"shared-blob", "leads out"}};
    expect_each(snap, unmarked, COUNT(unmarked), true);
    put(in_dir(dir, "blobs/.huggingface-shared-blobs"), "1\n");
    static const pair reads[] = {{"model.safetensors", "blob one"}, {"sub/config.json", "blob two"},
                                 {"plain.json", "plain"},           {"shared-blob", "shared blob"}};
    expect_each(snap, reads, COUNT(reads), false);
    /* Only links into blobs/: not elsewhere in the repo folder, not out. */
    static const pair refusals[] = {{"to-refs", "only links to the repo's blobs/ are followed"},
                                    {"through-blobs", "leads out"},
                                    {"too-far-up", "leads out"},
                                    {"blob-out", "leads out"}};
    expect_each(snap, refusals, COUNT(refusals), true);
    /* A subfolder of the snapshot: its links climb one level more. */
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/sub", snap);
    static const pair in_sub[] = {{"config.json", "blob two"}};
    expect_each(sub, in_sub, COUNT(in_sub), false);
    /* Named through a relative path from inside the snapshot. */
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(snap), 0);
    expect_each(".", reads, 1, false);
    assert_int_equal(chdir(cwd), 0);
    /* The same links in a directory that is no snapshot lead out. */
    char other[4096];
    snprintf(other, sizeof other, "%s/models--org--name/notsnapshots", dir);
    make_dir(other);
    snprintf(other, sizeof other, "%s/models--org--name/notsnapshots/" REV, dir);
    make_dir(other);
    make_links(other, links_to_e1, 1);
    static const pair not_snapshot[] = {{"model.safetensors", "leads out"}};
    expect_each(other, not_snapshot, COUNT(not_snapshot), true);
    free(snap);
    scratch_free(dir);
}

/* Through the catalog: an index's shard that is a link out is refused,
 * naming it; the index the user named may itself be a link anywhere. */
static void test_catalog_opens_shards_beneath(void **state) {
    (void)state;
    char *model, *dir = make_model(&model);
    const char *index = "{\"weight_map\":{\"x\":\"model-00001-of-00001.safetensors\"}}";
    put(in_dir(model, "model.safetensors.index.json"), index);
    write_safetensors(in_dir(dir, "outside.safetensors"), "{\"x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
                      4);
    link_at("../outside.safetensors", in_dir(model, "model-00001-of-00001.safetensors"));
    ckpt_catalog *c;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(model, &c, &err), CKPT_E_UNSAFE_PATH);
    assert_string_equal(err.path, in_dir(model, "model-00001-of-00001.safetensors"));
    assert_int_equal(ckpt_catalog_open(in_dir(model, "model.safetensors.index.json"), &c, &err), CKPT_E_UNSAFE_PATH);
    /* The user may name the link themselves. */
    assert_int_equal(ckpt_catalog_open(in_dir(model, "model-00001-of-00001.safetensors"), &c, &err), CKPT_OK);
    ckpt_catalog_close(c);
    /* Moved inside and linked to from the same place: it loads. */
    assert_int_equal(unlink(in_dir(model, "model-00001-of-00001.safetensors")), 0);
    assert_int_equal(rename(in_dir(dir, "outside.safetensors"), in_dir(model, "sub/real.safetensors")), 0);
    link_at("sub/real.safetensors", in_dir(model, "model-00001-of-00001.safetensors"));
    assert_int_equal(ckpt_catalog_open(model, &c, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_tensor_count(c), 1);
    ckpt_catalog_close(c);
    /* A FIFO in its place is refused at once. */
    assert_int_equal(unlink(in_dir(model, "model-00001-of-00001.safetensors")), 0);
    assert_int_equal(mkfifo(in_dir(model, "model-00001-of-00001.safetensors"), 0644), 0);
    alarm(HANG_SECONDS);
    assert_int_equal(ckpt_catalog_open(model, &c, &err), CKPT_E_UNSAFE_PATH);
    assert_non_null(strstr(err.message, "FIFO"));
    alarm(0);
    free(model);
    scratch_free(dir);
}

/* A directory's checkpoint found by listing is opened beneath it too. */
static void test_directory_resolution(void **state) {
    (void)state;
    char *dir = scratch_dir();
    char *model = strdup(in_dir(dir, "model"));
    make_dir(model);
    write_safetensors(in_dir(dir, "elsewhere"), "{\"x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4);
    link_at("../elsewhere", in_dir(model, "model.safetensors"));
    ckpt_catalog *c;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(model, &c, &err), CKPT_E_UNSAFE_PATH);
    assert_string_equal(err.path, in_dir(model, "model.safetensors"));
    assert_int_equal(unlink(in_dir(model, "model.safetensors")), 0);
    assert_int_equal(mkfifo(in_dir(model, "weights.safetensors"), 0644), 0);
    alarm(HANG_SECONDS);
    assert_int_equal(ckpt_catalog_open(model, &c, &err), CKPT_E_UNSAFE_PATH);
    alarm(0);
    free(model);
    scratch_free(dir);
}

#define TESTS                                                                                                        \
    cmocka_unit_test(test_links_inside_are_followed), cmocka_unit_test(test_links_out_are_refused),                 \
        cmocka_unit_test(test_names_that_leave_are_refused), cmocka_unit_test(test_special_files_are_refused_unopened), \
        cmocka_unit_test(test_listing), cmocka_unit_test(test_hub_cache),                                             \
        cmocka_unit_test(test_catalog_opens_shards_beneath), cmocka_unit_test(test_directory_resolution)

int main(void) {
    /* The kernel's openat2 first (where this kernel has it), then the
     * component walk that stands in for it. */
    const struct CMUnitTest openat2_tests[] = {TESTS};
    const struct CMUnitTest walk_tests[] = {TESTS};
    unsetenv("CKPT_NO_OPENAT2");
    struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_BENEATH};
    int fd = (int)syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof how);
    if (fd < 0) print_message("no openat2 here (%s): both groups walk\n", strerror(errno));
    else close(fd);
    int failed = cmocka_run_group_tests_name("openat2", openat2_tests, NULL, NULL);
    setenv("CKPT_NO_OPENAT2", "1", 1);
    failed += cmocka_run_group_tests_name("walk", walk_tests, NULL, NULL);
    return failed;
}
