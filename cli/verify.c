/* verify.c — `ckpt verify PATH`. */
#include <string.h>

#include "cli.h"

const char verify_usage[] =
    "usage: ckpt verify PATH [-q] [--progress | --no-progress] [--direct] [remote options]\n"
    "\n"
    "Check a checkpoint: its structure (every offset and size, index and\n"
    "shards, each tensor present exactly once, every file complete) and the\n"
    "per-tensor checksums that `ckpt convert --checksums` records, re-reading\n"
    "every tensor that has one.  Names the tensor and file at fault.\n"
    "\n"
    "PATH is any checkpoint ckpt reads:\n" CLI_READ_FORMATS
    "\n"
    "options:\n"
    "  -q, --quiet            print nothing on success (errors still go to stderr)\n"
    "  --progress / --no-progress\n"
    "                         force the progress bar on or off (default: on when\n"
    "                         stderr is a terminal)\n"
    "  -h, --help             show this help\n"
    "\n"
    "Exit status: 0 intact, 1 damaged or unreadable, 2 usage error.\n";

static int run_verify(int argc, char **argv, source_options *so) {
    enum { OPT_HELP = 1, OPT_QUIET, OPT_PROGRESS, OPT_NO_PROGRESS };
    static const cli_option options[] = {{"help", 'h', false, OPT_HELP},
                                         {"quiet", 'q', false, OPT_QUIET},
                                         {"progress", 0, false, OPT_PROGRESS},
                                         {"no-progress", 0, false, OPT_NO_PROGRESS},
                                         CLI_SOURCE_OPTIONS,
                                         {NULL, 0, 0, 0}};
    const char *path = NULL, *value;
    int show_progress = -1;
    bool quiet = false;
    args_parser args;
    args_init(&args, "verify", options, argc, argv);
    for (int id; (id = args_next(&args, &value)) != ARG_END;) {
        switch (id) {
        case ARG_ERROR: return EXIT_USAGE;
        case OPT_HELP:
            fputs(verify_usage, stdout);
            fputs(source_options_help, stdout);
            return EXIT_OK;
        case OPT_QUIET: quiet = true; break;
        case OPT_PROGRESS: show_progress = 1; break;
        case OPT_NO_PROGRESS: show_progress = 0; break;
        default:
            if (id >= OPT_SOURCE_FIRST) {
                if (source_option("verify", id, value, so) != EXIT_OK) return EXIT_USAGE;
                break;
            }
            if (path) return usage_error("verify", "one PATH expected, got '%s' and '%s'", path, value);
            path = value;
        }
    }
    if (!path) return usage_error("verify", "missing PATH");
    if (quiet && show_progress < 0) show_progress = 0;
    double start = cli_now();
    ckpt_error err;
    ckpt_error_clear(&err);
    ckpt_catalog *cat;
    if (ckpt_catalog_open_ex(path, source_options_get(so), &cat, &err) != CKPT_OK) return report_error(&err);
    note_unfinished_commit(path);
    char shown[4096];
    path = display_name(path, shown, sizeof shown);
    progress_bar bar;
    progress_start(&bar, "verifying", show_progress);
    size_t checked = 0;
    ckpt_status st = ckpt_verify(cat, progress_update, &bar, &checked, &err);
    progress_finish(&bar, st == CKPT_OK);
    size_t n = ckpt_catalog_tensor_count(cat), files = ckpt_catalog_file_count(cat);
    /* Bytes read: those of the tensors whose file records checksums. */
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
        if (ckpt_catalog_file_metadata(cat, t->file, CKPT_CHECKSUM_METADATA_KEY)) bytes += t->nbytes;
    }
    ckpt_catalog_close(cat);
    if (st != CKPT_OK) return report_error(&err);
    if (quiet) return EXIT_OK;
    print_summary("verified", checked, bytes, files, NULL, cli_now() - start);
    printf("%s: OK: %zu tensors in %zu file%s, structure valid; %zu checksum%s verified%s\n", printable(path), n, files,
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
