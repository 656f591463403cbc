/* verify.c — `ckpt verify PATH`. */
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: ckpt verify PATH [--progress | --no-progress] [--direct] [remote options]\n"
    "\n"
    "Check a checkpoint: its structure (every offset and size, index and\n"
    "shards, each tensor present exactly once, every file complete) and the\n"
    "per-tensor checksums that `ckpt convert --checksums` records, re-reading\n"
    "every tensor that has one.  Names the tensor and file at fault.\n"
    "\n"
    "Exit status: 0 intact, 1 damaged or unreadable, 2 usage error.\n";

static int run_verify(int argc, char **argv, source_options *so) {
    const char *path = NULL;
    int show_progress = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            fputs(source_options_help, stdout);
            return EXIT_OK;
        }
        int taken = source_option("verify", argc, argv, &i, so);
        if (taken < 0) return EXIT_USAGE;
        if (taken) continue;
        if (!strcmp(argv[i], "--progress") || !strcmp(argv[i], "--no-progress")) show_progress = !strcmp(argv[i], "--progress");
        else if (argv[i][0] == '-' && argv[i][1]) return usage_error("verify", "unknown option '%s'", argv[i]);
        else if (path) return usage_error("verify", "one PATH expected");
        else path = argv[i];
    }
    if (!path) return usage_error("verify", "missing PATH");
    ckpt_error err;
    ckpt_error_clear(&err);
    ckpt_catalog *cat;
    if (ckpt_catalog_open_ex(path, source_options_get(so), &cat, &err) != CKPT_OK) return report_error(&err);
    char shown[4096];
    path = display_name(path, shown, sizeof shown);
    progress_bar bar;
    progress_start(&bar, "verifying", show_progress);
    size_t checked = 0;
    ckpt_status st = ckpt_verify(cat, progress_update, &bar, &checked, &err);
    progress_finish(&bar, st == CKPT_OK);
    size_t n = ckpt_catalog_tensor_count(cat), files = ckpt_catalog_file_count(cat);
    ckpt_catalog_close(cat);
    if (st != CKPT_OK) return report_error(&err);
    printf("%s: OK: %zu tensors in %zu file%s, structure valid; %zu checksum%s verified%s\n", path, n, files,
           files == 1 ? "" : "s", checked, checked == 1 ? "" : "s",
           checked < n ? (checked ? " (the other tensors have none)" : " (none recorded: convert with --checksums)") : "");
    return EXIT_OK;
}

int cmd_verify(int argc, char **argv) {
    source_options so;
    source_options_init(&so);
    int rc = run_verify(argc, argv, &so);
    source_options_free(&so);
    return rc;
}
