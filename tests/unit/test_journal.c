/* Commit journals (io/journal.c, io/commit.c): the parser's rules, each
 * broken on its own and refused at the byte offset of the field at fault;
 * recovery on disk refusing every journal that is not provably ckpt's with
 * nothing touched (inside the directory or outside it); reads that never
 * write; the destination lock; stale temporaries removed without ever
 * following a symlink. */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "formats/output.h"
#include "helpers.h"
#include "io/commit.h"
#include "io/file.h"
#include "io/journal.h"
#include "io/lock.h"

#define STAGE "..commit.ckpt-tmp-4242-d7"
#define J(...) journal_bytes((const char *[]){__VA_ARGS__, NULL})

/* Fields joined with their NUL bytes, into a static buffer. */
static size_t journal_len;
static const char *journal_bytes(const char **fields) {
    static char buf[8192];
    size_t n = 0;
    for (; *fields; fields++) {
        size_t k = strlen(*fields) + 1;
        memcpy(buf + n, *fields, k);
        n += k;
    }
    journal_len = n;
    return buf;
}

/* Parses `bytes` (journal_len of them) expecting a refusal at `offset`. */
static void refused_at(const char *bytes, size_t len, int64_t offset, const char *why) {
    ckpt__journal j;
    ckpt_error err;
    ckpt_error_clear(&err);
    ckpt_status st = ckpt__journal_parse(bytes, len, ckpt__output_owns_any, "J", &j, &err);
    if (st != CKPT_E_INCOMPLETE) fail_msg("%s: parsed (%d)", why, st);
    if (err.offset != offset)
        fail_msg("%s: refused at byte %lld, not %lld: %s", why, (long long)err.offset, (long long)offset, err.message);
    assert_non_null(strstr(err.message, "not a journal ckpt wrote"));
    assert_null(j.remove);
}

static void test_parse_valid(void **state) {
    (void)state;
    const char *b = J("ckpt-commit-1", "stage", STAGE, "remove", "model.safetensors.index.json", "remove",
                      "model-00003-of-00003.safetensors", "publish", "model-00001-of-00002.safetensors", "publish",
                      "model-00002-of-00002.safetensors", "publish", "model.safetensors.index.json", "end");
    ckpt__journal j;
    ckpt_error err;
    assert_int_equal(ckpt__journal_parse(b, journal_len, ckpt__output_owns_any, "J", &j, &err), CKPT_OK);
    assert_string_equal(j.stage, STAGE);
    assert_int_equal(j.stage_at, 20);
    assert_int_equal(j.remove_count, 2);
    assert_int_equal(j.publish_count, 3);
    assert_string_equal(j.remove[1], "model-00003-of-00003.safetensors");
    assert_string_equal(j.publish[2], "model.safetensors.index.json");
    ckpt__journal_free(&j);
    /* What the writer encodes reads back. */
    const char *rm[] = {".metadata"}, *pub[] = {"__0_0.distcp", ".metadata", "x-00001-of-00002.gguf"};
    ckpt__buf out = {0};
    ckpt__journal_encode(&out, STAGE, rm, 1, pub, 3);
    assert_int_equal(ckpt__journal_parse(out.data, out.len, ckpt__output_owns_any, "J", &j, &err), CKPT_OK);
    assert_int_equal(j.publish_count, 3);
    ckpt__journal_free(&j);
    free(out.data);
    /* Nothing to remove or publish is a journal too. */
    b = J("ckpt-commit-1", "stage", STAGE, "end");
    assert_int_equal(ckpt__journal_parse(b, journal_len, ckpt__output_owns_any, "J", &j, &err), CKPT_OK);
    ckpt__journal_free(&j);
}

static void test_parse_refuses_each_rule(void **state) {
    (void)state;
    refused_at("", 0, 0, "empty");
    const char *b = J("ckpt-commit-2", "stage", STAGE, "end");
    refused_at(b, journal_len, 0, "another magic");
    refused_at("ckpt-commit-1", 13, 0, "a magic without its NUL");
    b = J("ckpt-commit-1", "stag", STAGE, "end");
    refused_at(b, journal_len, 14, "no stage field");
    b = J("ckpt-commit-1", "stage");
    refused_at(b, journal_len, 20, "no stage name");
    /* The stage: only the exact name ckpt gives a commit's stage. */
    static const char *const stages[] = {"..",
                                         ".",
                                         "",
                                         "/tmp",
                                         "../x",
                                         "x",
                                         ".commit.ckpt-tmp-1-d0",
                                         "..commit.ckpt-tmp-0-d1",
                                         "..commit.ckpt-tmp-012-d1",
                                         "..commit.ckpt-tmp-12-d",
                                         "..commit.ckpt-tmp-12-d01",
                                         "..commit.ckpt-tmp-12-d1x",
                                         "..commit.ckpt-tmp-12-1",
                                         "..commit.ckpt-tmp--1-d1",
                                         ".model.ckpt-tmp-12-d1",
                                         "..commit.ckpt-tmp-99999999999-d1",
                                         "..commit.ckpt-tmp-12-d1/.."};
    for (size_t i = 0; i < sizeof stages / sizeof *stages; i++) {
        b = J("ckpt-commit-1", "stage", stages[i], "end");
        refused_at(b, journal_len, 20, stages[i]);
    }
    /* Names: plain, and owned by an output format. */
    static const char *const names[] = {"notes.txt",
                                        "config.json",
                                        "",
                                        ".",
                                        "..",
                                        "/etc/model.safetensors",
                                        "../model.safetensors",
                                        "a/model.safetensors",
                                        "model.safetensors/",
                                        ".ckpt-commit.json",
                                        STAGE,
                                        "model.safetensors.bak"};
    const size_t name_at = 20 + sizeof STAGE + 7; /* after "remove" */
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        b = J("ckpt-commit-1", "stage", STAGE, "remove", names[i], "end");
        refused_at(b, journal_len, (int64_t)name_at, names[i]);
        b = J("ckpt-commit-1", "stage", STAGE, "publish", names[i], "end");
        refused_at(b, journal_len, (int64_t)name_at + 1, names[i]);
    }
    char longname[300];
    memset(longname, 'a', sizeof longname);
    strcpy(longname + 300 - 13, ".safetensors");
    b = J("ckpt-commit-1", "stage", STAGE, "publish", longname, "end");
    refused_at(b, journal_len, (int64_t)name_at + 1, "a name longer than NAME_MAX");
    /* Structure. */
    const size_t entry_at = 20 + sizeof STAGE;
    b = J("ckpt-commit-1", "stage", STAGE, "delete", "model.safetensors", "end");
    refused_at(b, journal_len, (int64_t)entry_at, "an unknown field");
    b = J("ckpt-commit-1", "stage", STAGE, "publish", "model.safetensors", "remove", "x.safetensors", "end");
    refused_at(b, journal_len, (int64_t)entry_at + 26, "remove after publish");
    b = J("ckpt-commit-1", "stage", STAGE, "publish", "model.safetensors");
    refused_at(b, journal_len, (int64_t)entry_at + 26, "no end");
    refused_at(b, journal_len - 1, (int64_t)entry_at + 8, "the last name without its NUL");
    b = J("ckpt-commit-1", "stage", STAGE, "remove");
    refused_at(b, journal_len, (int64_t)entry_at + 7, "an entry without its name");
    b = J("ckpt-commit-1", "stage", STAGE, "end");
    refused_at(b, journal_len - 1, (int64_t)entry_at, "an end without its NUL");
    b = J("ckpt-commit-1", "stage", STAGE, "end", "publish", "model.safetensors");
    refused_at(b, journal_len, (int64_t)entry_at + 4, "fields after end");
    /* More entries than ckpt writes: refused at the first one too many. */
    const char head[] = "ckpt-commit-1\0stage\0" STAGE "\0", entry[] = "publish\0x.distcp\0";
    size_t many = CKPT__JOURNAL_MAX_ENTRIES + 1, n = sizeof head - 1 + many * (sizeof entry - 1) + 4;
    char *big = malloc(n), *at = big;
    memcpy(at, head, sizeof head - 1), at += sizeof head - 1;
    for (size_t i = 0; i < many; i++) memcpy(at, entry, sizeof entry - 1), at += sizeof entry - 1;
    memcpy(at, "end", 4);
    refused_at(big, n, (int64_t)(entry_at + CKPT__JOURNAL_MAX_ENTRIES * (sizeof entry - 1)), "too many entries");
    /* As many as ckpt writes at most: a journal. */
    memcpy(at - (sizeof entry - 1), "end", 4);
    ckpt__journal j;
    ckpt_error err;
    assert_int_equal(ckpt__journal_parse(big, n - (sizeof entry - 1), ckpt__output_owns_any, "J", &j, &err), CKPT_OK);
    assert_int_equal(j.publish_count, CKPT__JOURNAL_MAX_ENTRIES);
    ckpt__journal_free(&j);
    free(big);
    /* A name with a NUL inside: its second half is a field of its own. */
    static const char nul_in_name[] = "ckpt-commit-1\0stage\0" STAGE "\0remove\0model\0.safetensors\0end";
    refused_at(nul_in_name, sizeof nul_in_name, (int64_t)name_at, "a NUL inside a name");
}

/* ---- recovery on disk -------------------------------------------------------- */

/* A sandbox: root/outside (sentinel files a journal must never reach) and
 * root/ckpt (the checkpoint directory, with a user's notes.txt). */
typedef struct sandbox {
    char *root;
    char outside[2048], dir[2048], stage[4096];
} sandbox;

static unsigned long long tree_hash(const char *dir) {
    char cmd[8400];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && find . -printf '%%p %%y %%s %%l\\n' | sort | cksum && "
             "find . -type f -print0 | sort -z | xargs -0 -r cat | cksum",
             dir);
    FILE *p = popen(cmd, "r");
    unsigned long long a = 0, b = 0, n;
    if (!p || fscanf(p, "%llu %llu %llu %llu", &a, &n, &b, &n) != 4) fail_msg("cannot hash %s", dir);
    pclose(p);
    return a * 31 + b;
}

static void sandbox_make(sandbox *s) {
    s->root = scratch_dir();
    snprintf(s->outside, sizeof s->outside, "%s/outside", s->root);
    snprintf(s->dir, sizeof s->dir, "%s/ckpt", s->root);
    snprintf(s->stage, sizeof s->stage, "%s/%s", s->dir, STAGE);
    assert_int_equal(mkdir(s->outside, 0777), 0);
    assert_int_equal(mkdir(s->dir, 0777), 0);
    write_bytes(in_dir(s->outside, "model.safetensors"), "sentinel", 8);
    write_bytes(in_dir(s->outside, "precious.txt"), "sentinel", 8);
    write_bytes(in_dir(s->dir, "notes.txt"), "the user's notes", 16);
    write_safetensors(in_dir(s->dir, "model.safetensors"), "{}", 0);
}

static void plant(const sandbox *s, const char *bytes, size_t n) {
    write_bytes(in_dir(s->dir, CKPT__JOURNAL), bytes, n);
}

/* Every way in: recovery (lock, check), a writer's recovery, a read's
 * check.  Recovery refuses at `offset`; nothing anywhere changes. */
static void refused_on_disk(sandbox *s, int64_t offset, const char *why) {
    unsigned long long before = tree_hash(s->root);
    ckpt_error err;
    bool found;
    for (int how = CKPT__RECOVER; how <= CKPT__RECOVER_CHECK; how++) {
        ckpt_error_clear(&err);
        ckpt_status st = ckpt__commit_recover(s->dir, ckpt__output_owns_any, (ckpt__recover_mode)how, &found, &err);
        if (st != CKPT_E_INCOMPLETE) fail_msg("%s: recovery (%d) gave %d: %s", why, how, st, err.message);
        if (offset >= 0 && err.offset != offset)
            fail_msg("%s: refused at byte %lld, not %lld: %s", why, (long long)err.offset, (long long)offset,
                     err.message);
        assert_non_null(strstr(err.message, "left alone"));
        assert_non_null(strstr(err.message, CKPT__JOURNAL));
    }
    /* A read ignores it. */
    assert_int_equal(ckpt__commit_check_read(s->dir, NULL, ckpt__output_owns_any, &err), CKPT_OK);
    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(s->dir, &cat, &err), CKPT_OK);
    ckpt_catalog_close(cat);
    /* A writer refuses to start. */
    ckpt_writer *w;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = 1 << 20;
    o.overwrite = 1;
    assert_int_equal(ckpt_writer_create(s->dir, &o, &w, &err), CKPT_E_INCOMPLETE);
    int found_public;
    assert_int_equal(ckpt_commit_recover(s->dir, 0, &found_public, &err), CKPT_E_INCOMPLETE);
    if (tree_hash(s->root) != before) fail_msg("%s: something changed", why);
}

static void test_recover_refuses_what_is_not_ckpts(void **state) {
    (void)state;
    sandbox s;
    sandbox_make(&s);
    const size_t name_at = 20 + sizeof STAGE + 8; /* a publish's name */
    /* The cases: "..", ".", a user's file. */
    const char *b = J("ckpt-commit-1", "stage", "..", "remove", "precious.txt", "end");
    plant(&s, b, journal_len);
    refused_on_disk(&s, 20, "stage ..");
    b = J("ckpt-commit-1", "stage", ".", "publish", "model.safetensors", "end");
    plant(&s, b, journal_len);
    refused_on_disk(&s, 20, "stage .");
    b = J("ckpt-commit-1", "stage", STAGE, "remove", "notes.txt", "end");
    plant(&s, b, journal_len);
    refused_on_disk(&s, (int64_t)name_at - 1, "remove notes.txt");
    /* A stage that is a symlink to a directory outside. */
    assert_int_equal(symlink(s.outside, s.stage), 0);
    b = J("ckpt-commit-1", "stage", STAGE, "remove", "model.safetensors", "publish", "model.safetensors", "end");
    plant(&s, b, journal_len);
    refused_on_disk(&s, 20, "a symlinked stage");
    /* A stage that is a regular file. */
    assert_int_equal(unlink(s.stage), 0);
    write_bytes(s.stage, "x", 1);
    refused_on_disk(&s, 20, "a stage that is a file");
    assert_int_equal(unlink(s.stage), 0);
    /* A real stage whose file to publish is a symlink out, a FIFO, a directory. */
    assert_int_equal(mkdir(s.stage, 0777), 0);
    const char *entry = in_dir(s.stage, "model.safetensors");
    b = J("ckpt-commit-1", "stage", STAGE, "publish", "model.safetensors", "end");
    plant(&s, b, journal_len);
    assert_int_equal(symlink(in_dir(s.outside, "model.safetensors"), entry), 0);
    refused_on_disk(&s, (int64_t)name_at, "a symlink to publish");
    assert_int_equal(unlink(entry), 0);
    assert_int_equal(mkfifo(entry, 0666), 0);
    refused_on_disk(&s, (int64_t)name_at, "a FIFO to publish");
    assert_int_equal(unlink(entry), 0);
    assert_int_equal(mkdir(entry, 0777), 0);
    refused_on_disk(&s, (int64_t)name_at, "a directory to publish");
    assert_int_equal(rmdir(entry), 0);
    /* Replacing or removing a directory. */
    write_bytes(entry, "new", 3);
    write_bytes(in_dir(s.stage, "x.safetensors"), "new", 3);
    assert_int_equal(mkdir(in_dir(s.dir, "x.safetensors"), 0777), 0);
    b = J("ckpt-commit-1", "stage", STAGE, "publish", "x.safetensors", "end");
    plant(&s, b, journal_len);
    refused_on_disk(&s, (int64_t)name_at, "publishing over a directory");
    b = J("ckpt-commit-1", "stage", STAGE, "remove", "x.safetensors", "end");
    plant(&s, b, journal_len);
    refused_on_disk(&s, (int64_t)name_at - 1, "removing a directory");
    assert_int_equal(rmdir(in_dir(s.dir, "x.safetensors")), 0);
    /* The journal itself: a symlink to a valid one, a FIFO (no hang), too large. */
    b = J("ckpt-commit-1", "stage", STAGE, "publish", "model.safetensors", "end");
    write_bytes(in_dir(s.outside, "journal"), b, journal_len);
    assert_int_equal(unlink(in_dir(s.dir, CKPT__JOURNAL)), 0);
    assert_int_equal(symlink(in_dir(s.outside, "journal"), in_dir(s.dir, CKPT__JOURNAL)), 0);
    refused_on_disk(&s, 0, "a symlinked journal");
    assert_int_equal(unlink(in_dir(s.dir, CKPT__JOURNAL)), 0);
    assert_int_equal(mkfifo(in_dir(s.dir, CKPT__JOURNAL), 0666), 0);
    refused_on_disk(&s, 0, "a FIFO journal");
    assert_int_equal(unlink(in_dir(s.dir, CKPT__JOURNAL)), 0);
    plant(&s, b, journal_len);
    assert_int_equal(truncate(in_dir(s.dir, CKPT__JOURNAL), CKPT__JOURNAL_MAX + 1), 0);
    refused_on_disk(&s, CKPT__JOURNAL_MAX, "a journal too large");
    scratch_free(s.root);
}

static void test_recover_finishes_a_genuine_commit(void **state) {
    (void)state;
    sandbox s;
    sandbox_make(&s);
    write_safetensors(in_dir(s.dir, "model.safetensors.index.json"), "{}", 0);
    assert_int_equal(mkdir(s.stage, 0777), 0);
    write_bytes(in_dir(s.stage, "model-00001-of-00001.safetensors"), "new shard", 9);
    write_bytes(in_dir(s.stage, "model.safetensors.index.json"), "new index", 9);
    const char *b =
        J("ckpt-commit-1", "stage", STAGE, "remove", "model.safetensors.index.json", "remove", "model.safetensors",
          "publish", "model-00001-of-00001.safetensors", "publish", "model.safetensors.index.json", "end");
    plant(&s, b, journal_len);
    unsigned long long outside = tree_hash(s.outside);
    ckpt_error err;
    /* Reads refuse, naming the fix, and change nothing. */
    unsigned long long before = tree_hash(s.root);
    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(s.dir, &cat, &err), CKPT_E_INCOMPLETE);
    assert_non_null(strstr(err.message, "ckpt recover"));
    assert_int_equal(ckpt_catalog_open(in_dir(s.dir, "model.safetensors.index.json"), &cat, &err), CKPT_E_INCOMPLETE);
    assert_int_equal(ckpt_catalog_open(in_dir(s.dir, "model.safetensors"), &cat, &err), CKPT_E_INCOMPLETE);
    /* A file the journal does not name opens (it is no part of the commit). */
    write_safetensors(in_dir(s.dir, "other.bin.safetensors"), "{}", 0);
    assert_int_equal(ckpt_catalog_open(in_dir(s.dir, "other.bin.safetensors"), &cat, &err), CKPT_OK);
    ckpt_catalog_close(cat);
    assert_int_equal(unlink(in_dir(s.dir, "other.bin.safetensors")), 0);
    int found = 0;
    assert_int_equal(ckpt_commit_recover(s.dir, CKPT_RECOVER_CHECK, &found, &err), CKPT_OK);
    assert_int_equal(found, 1);
    assert_true(tree_hash(s.root) == before);
    /* Recovery finishes it. */
    assert_int_equal(ckpt_commit_recover(s.dir, 0, &found, &err), CKPT_OK);
    assert_int_equal(found, 1);
    assert_int_equal(dir_entries(s.dir), 3); /* notes.txt, the new shard, the new index */
    size_t n;
    char *data = read_all(in_dir(s.dir, "model.safetensors.index.json"), &n);
    assert_memory_equal(data, "new index", 9);
    free(data);
    data = read_all(in_dir(s.dir, "notes.txt"), &n);
    assert_memory_equal(data, "the user's notes", 16);
    free(data);
    assert_true(tree_hash(s.outside) == outside);
    assert_int_equal(ckpt_commit_recover(s.dir, 0, &found, &err), CKPT_OK);
    assert_int_equal(found, 0);
    /* Interrupted after the stage went: the journal alone is finished. */
    plant(&s, b, journal_len);
    assert_int_equal(ckpt_commit_recover(s.dir, 0, &found, &err), CKPT_OK);
    assert_int_equal(found, 1);
    assert_int_equal(dir_entries(s.dir), 3); /* the published files stay */
    scratch_free(s.root);
}

/* ---- locks ---------------------------------------------------------------------- */

static void test_destination_locked(void **state) {
    (void)state;
    char *root = scratch_dir();
    const char *dir = strdup(in_dir(root, "out"));
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = 1 << 20;
    ckpt_writer *a, *b;
    ckpt_error err;
    /* A directory still to make: the lock file stands for it. */
    assert_int_equal(ckpt_writer_create(dir, &o, &a, &err), CKPT_OK);
    assert_true(file_exists(in_dir(root, ".out.ckpt-lock")));
    assert_int_equal(ckpt_writer_create(dir, &o, &b, &err), CKPT_E_LOCKED);
    assert_non_null(strstr(err.message, pid));
    ckpt_writer_free(a);
    assert_int_equal(dir_entries(root), 0); /* no lock file left */
    /* An existing directory: locked itself, nothing created. */
    assert_int_equal(mkdir(dir, 0777), 0);
    assert_int_equal(ckpt_writer_create(dir, &o, &a, &err), CKPT_OK);
    assert_int_equal(dir_entries(root), 1);
    assert_int_equal(dir_entries(dir), 0);
    assert_int_equal(ckpt_writer_create(dir, &o, &b, &err), CKPT_E_LOCKED);
    assert_non_null(strstr(err.message, pid));
    bool found;
    assert_int_equal(ckpt__commit_recover(dir, ckpt__output_owns_any, CKPT__RECOVER, &found, &err), CKPT_E_LOCKED);
    ckpt_writer_free(a);
    /* A lock another process holds (a flock on the directory). */
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    assert_int_equal(flock(fd, LOCK_EX), 0);
    assert_int_equal(ckpt_writer_create(dir, &o, &b, &err), CKPT_E_LOCKED);
    assert_non_null(strstr(err.message, pid));
    close(fd);
    /* A lock file a killed writer left: taken over and removed. */
    write_bytes(in_dir(root, ".out.ckpt-lock"), "999999\n", 7);
    assert_int_equal(ckpt_writer_create(dir, &o, &a, &err), CKPT_OK);
    assert_false(file_exists(in_dir(root, ".out.ckpt-lock")));
    ckpt_writer_free(a);
    /* Stale lock files of other destinations: removed by a writer into
     * their directory; one a live writer holds stays. */
    write_bytes(in_dir(root, ".gone.ckpt-lock"), "999999\n", 7);
    write_bytes(in_dir(root, ".held.ckpt-lock"), "", 0);
    fd = open(in_dir(root, ".held.ckpt-lock"), O_RDONLY);
    assert_int_equal(flock(fd, LOCK_EX), 0);
    assert_int_equal(ckpt_writer_create(dir, &o, &a, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(a, &err), CKPT_OK); /* where a writer cleans up what killed ones left */
    ckpt_writer_free(a);
    assert_false(file_exists(in_dir(root, ".gone.ckpt-lock")));
    assert_true(file_exists(in_dir(root, ".held.ckpt-lock")));
    close(fd);
    assert_int_equal(unlink(in_dir(root, ".held.ckpt-lock")), 0);
    /* A single file: the lock file beside it, removed after. */
    o.max_shard_size = 0;
    const char *file = strdup(in_dir(dir, "m.safetensors"));
    assert_int_equal(ckpt_writer_create(file, &o, &a, &err), CKPT_OK);
    assert_true(file_exists(in_dir(dir, ".m.safetensors.ckpt-lock")));
    assert_int_equal(ckpt_writer_create(file, &o, &b, &err), CKPT_E_LOCKED);
    ckpt_writer_free(a);
    assert_int_equal(dir_entries(dir), 0);
    free((char *)file);
    free((char *)dir);
    scratch_free(root);
}

/* ---- stale temporaries ---------------------------------------------------------- */

static long dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return (long)p;
}

static void test_stale_temps_never_followed(void **state) {
    (void)state;
    sandbox s;
    sandbox_make(&s);
    unsigned long long outside = tree_hash(s.outside);
    long pid = dead_pid();
    char name[256];
    /* A symlink named as a stale temporary directory, to a directory outside. */
    snprintf(name, sizeof name, ".model.ckpt-tmp-%ld-d1", pid);
    assert_int_equal(symlink(s.outside, in_dir(s.dir, name)), 0);
    /* A stale temporary directory holding a symlink to a file outside, and a subdirectory. */
    snprintf(name, sizeof name, ".model.ckpt-tmp-%ld-d2", pid);
    char tmpdir[8192];
    snprintf(tmpdir, sizeof tmpdir, "%s/%s", s.dir, name);
    assert_int_equal(mkdir(tmpdir, 0777), 0);
    assert_int_equal(symlink(in_dir(s.outside, "precious.txt"), in_dir(tmpdir, "link")), 0);
    write_bytes(in_dir(tmpdir, "part"), "x", 1);
    /* A symlink named as a stale temporary file. */
    snprintf(name, sizeof name, ".model.ckpt-tmp-%ld-3", pid);
    assert_int_equal(symlink(in_dir(s.outside, "precious.txt"), in_dir(s.dir, name)), 0);
    assert_int_equal(ckpt__remove_stale_temps(s.dir), 3);
    assert_int_equal(dir_entries(s.dir), 2); /* notes.txt, model.safetensors */
    assert_true(tree_hash(s.outside) == outside);
    /* A subdirectory inside keeps a stale temporary directory (never recursed into). */
    snprintf(name, sizeof name, ".model.ckpt-tmp-%ld-d4", pid);
    snprintf(tmpdir, sizeof tmpdir, "%s/%s", s.dir, name);
    assert_int_equal(mkdir(tmpdir, 0777), 0);
    assert_int_equal(mkdir(in_dir(tmpdir, "sub"), 0777), 0);
    write_bytes(in_dir(in_dir(tmpdir, "sub"), "deep"), "x", 1);
    ckpt__remove_stale_temps(s.dir);
    assert_true(file_exists(in_dir(in_dir(tmpdir, "sub"), "deep")));
    /* A live process's temporaries stay. */
    snprintf(name, sizeof name, ".model.ckpt-tmp-%ld-5", (long)getpid());
    write_bytes(in_dir(s.dir, name), "x", 1);
    ckpt__remove_stale_temps(s.dir);
    assert_true(file_exists(in_dir(s.dir, name)));
    scratch_free(s.root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),
        cmocka_unit_test(test_parse_refuses_each_rule),
        cmocka_unit_test(test_recover_refuses_what_is_not_ckpts),
        cmocka_unit_test(test_recover_finishes_a_genuine_commit),
        cmocka_unit_test(test_destination_locked),
        cmocka_unit_test(test_stale_temps_never_followed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
