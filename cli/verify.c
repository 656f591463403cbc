/* verify.c — `ckpt verify PATH`. */
#include <string.h>

#include "cli.h"

const char verify_usage[] =
    "usage: ckpt verify PATH [-q] [--progress | --no-progress] [--direct] [remote options]\n"
    "\n"
    "Check a checkpoint: its structure (every offset and size, index and\n"
    "shards, each tensor present exactly once, every file complete) and every\n"
    "checksum its files record, re-reading every byte one covers: the XXH3-64\n"
    "digests `ckpt convert --checksums` writes, and the CRC-32 of every ZIP\n"
    "member of torch.save files, DCP files' torch.save items and .npz archives\n"
    "(a DEFLATE member's declared size too).  Says which it checked; names the\n"
    "file, tensor and member at fault.  GGUF files, plain safetensors files\n"
    "and DCP files saved with safetensors serialization record none.\n"
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

static const char *plural(size_t n, const char *one, const char *many) { return n == 1 ? one : many; }

/* "checked the CRC-32 of 39 ZIP members", "checked the XXH3-64 of 5
 * tensors and 1 header (the other tensors have none)", or what the format
 * does not record. */
static void describe_checks(const ckpt_verify_report *r, size_t tensors, const char *format, char *out, size_t size) {
    size_t len = 0;
    if (r->tensor_digests || r->header_digests) {
        len += (size_t)snprintf(out + len, size - len, "checked the XXH3-64 of %zu %s and %zu %s", r->tensor_digests,
                                plural(r->tensor_digests, "tensor", "tensors"), r->header_digests,
                                plural(r->header_digests, "header", "headers"));
    }
    if (r->zip_crc32 && len < size)
        len += (size_t)snprintf(out + len, size - len, "%s the CRC-32 of %zu ZIP %s", len ? " and" : "checked",
                                r->zip_crc32, plural(r->zip_crc32, "member", "members"));
    if (!len)
        snprintf(out, size, "none recorded to check (this %s checkpoint records no checksums; convert with "
                            "--checksums to add them)", format);
    else if (r->tensors < tensors && len < size)
        snprintf(out + len, size - len, " (the other tensors have none)");
}

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
            print_usage(stdout, verify_usage);
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
            char a[4096], b[4096];
            if (path)
                return usage_error("verify", "one PATH expected, got '%s' and '%s'", display_name(path, a, sizeof a),
                                   display_name(value, b, sizeof b));
            path = value;
        }
    }
    if (!path) return usage_error("verify", "missing PATH");
    if (quiet && show_progress < 0) show_progress = 0;
    source_options_progress(so, show_progress);
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
    ckpt_verify_report r = {.size = sizeof r};
    ckpt_status st = ckpt_verify_ex(cat, progress_update, &bar, &r, &err);
    progress_finish(&bar, st == CKPT_OK);
    size_t n = ckpt_catalog_tensor_count(cat), files = ckpt_catalog_file_count(cat);
    const char *format = ckpt_format_name(ckpt_catalog_format(cat));
    ckpt_catalog_close(cat);
    if (st != CKPT_OK) return report_error(&err);
    if (quiet) return EXIT_OK;
    print_summary("verified", r.tensors, r.bytes, files, NULL, cli_now() - start);
    char what[256];
    describe_checks(&r, n, format, what, sizeof what);
    printf("%s: OK: %zu tensors in %zu file%s, structure valid; %s\n", printable(path), n, files, files == 1 ? "" : "s", what);
    return EXIT_OK;
}

int cmd_verify(int argc, char **argv) {
    source_options so;
    source_options_init(&so);
    int rc = run_verify(argc, argv, &so);
    source_options_free(&so);
    return rc;
}
