/* verify.c — `ckpt verify PATH`. */
#include <string.h>

#include "cli.h"

const char verify_usage[] =
    "usage: ckpt verify PATH [--json] [-q] [--progress | --no-progress] [--direct] [remote options]\n"
    "\n"
    "Check a checkpoint: its structure (every offset and size, index and\n"
    "shards, each tensor present exactly once, every file complete) and every\n"
    "checksum its files record, re-reading every byte one covers: the XXH3-64\n"
    "digests `ckpt convert --checksums` writes, and the CRC-32 of every ZIP\n"
    "member of torch.save files, DCP files' torch.save items and .npz archives\n"
    "(a DEFLATE member's declared size too).  Names the file, tensor and member\n"
    "at fault.  GGUF files, plain safetensors files and DCP files saved with\n"
    "safetensors serialization record none.\n"
    "\n"
    "On success one line on stdout says what was checked: the structure (how\n"
    "many tensors in how many files), then the checksums (\"the CRC-32 of 39 ZIP\n"
    "members\", \"the XXH3-64 of 5 tensors and 1 header\"), the tensors they\n"
    "cover and the bytes re-read, or that the format records none.  stderr\n"
    "carries only the progress bar (on a terminal), warnings and errors.\n"
    "\n"
    "PATH is any checkpoint ckpt reads:\n" CLI_READ_FORMATS
    "\n"
    "options:\n"
    "  --json                 the same counts as JSON on stdout: tensors, files and\n"
    "                         checksums (tensor_digests, header_digests, zip_crc32,\n"
    "                         bytes, tensors: as ckpt_verify's report)\n"
    "  -q, --quiet            print nothing on success (errors still go to stderr)\n"
    "  --progress / --no-progress\n"
    "                         force the progress bar on or off (default: on when\n"
    "                         stderr is a terminal)\n"
    "  -h, --help             show this help\n"
    "\n"
    "Exit status: 0 intact, 1 damaged or unreadable, 2 usage error.\n";

static const char *plural(size_t n, const char *one, const char *many) { return n == 1 ? one : many; }

/* The checksums checked: "the XXH3-64 of 5 tensors and 1 header" (with
 * chunk digests, "of 5 tensors, 26 chunks and 1 header"), "the CRC-32 of
 * 39 ZIP members", or both joined by "and"; "" when none. */
static void name_checksums(const ckpt_verify_report *r, char *out, size_t size) {
    size_t len = 0;
    out[0] = 0;
    if (r->tensor_digests || r->header_digests) {
        len += (size_t)snprintf(out, size, "the XXH3-64 of ");
        if (r->tensor_digests && len < size)
            len += (size_t)snprintf(out + len, size - len, "%zu %s", r->tensor_digests,
                                    plural(r->tensor_digests, "tensor", "tensors"));
        if (r->chunk_digests && len < size)
            len += (size_t)snprintf(out + len, size - len, "%s%zu %s", r->header_digests ? ", " : " and ",
                                    r->chunk_digests, plural(r->chunk_digests, "chunk", "chunks"));
        if (r->header_digests && len < size)
            len += (size_t)snprintf(out + len, size - len, "%s%zu %s", r->tensor_digests ? " and " : "",
                                    r->header_digests, plural(r->header_digests, "header", "headers"));
    }
    if (r->zip_crc32 && len < size)
        len += (size_t)snprintf(out + len, size - len, "%sthe CRC-32 of %zu ZIP %s", len ? " and " : "", r->zip_crc32,
                                plural(r->zip_crc32, "member", "members"));
    if (r->file_sha256 && len < size)
        snprintf(out + len, size - len, "%sthe SHA-256 of %zu %s", len ? " and " : "", r->file_sha256,
                 plural(r->file_sha256, "file", "files"));
}

/* The one summary line: the structure, then every checksum checked and
 * what it covered, or that the format records none. */
static void print_verified(const char *path, const char *format, size_t tensors, size_t files,
                           const ckpt_verify_report *r, double seconds) {
    char names[256], size[32], elapsed[64], covering[96] = "";
    printf("%s: OK: structure valid (%zu %s in %zu %s); ", printable(path), tensors, plural(tensors, "tensor", "tensors"),
           files, plural(files, "file", "files"));
    name_checksums(r, names, sizeof names);
    if (!names[0]) {
        printf("none recorded to check (this %s checkpoint records no checksums; convert with --checksums to add "
               "them)\n", format);
        return;
    }
    if (r->tensors == tensors && tensors > 1) snprintf(covering, sizeof covering, ", covering all %zu tensors", tensors);
    else if (r->tensors == tensors && tensors == 1) snprintf(covering, sizeof covering, ", covering its tensor");
    else if (tensors) snprintf(covering, sizeof covering, ", covering %zu of %zu tensors (the others have none)", r->tensors, tensors);
    printf("checked %s%s: %s re-read %s\n", names, covering, format_bytes(r->bytes, size, sizeof size),
           format_elapsed(r->bytes, seconds, elapsed, sizeof elapsed));
}

/* --json: the same counts; "checksums" is ckpt_verify_report's, as
 * Python's Checkpoint.verify(report=True) gives it. */
static void print_verified_json(const char *path, const char *format, size_t tensors, size_t files,
                                const ckpt_verify_report *r, double seconds) {
    fputs("{\n  \"path\": ", stdout);
    print_json_string(stdout, path);
    printf(",\n  \"format\": \"%s\",\n  \"tensors\": %zu,\n  \"files\": %zu,\n", format, tensors, files);
    printf("  \"checksums\": {\"tensor_digests\": %zu, \"chunk_digests\": %zu, \"header_digests\": %zu, \"zip_crc32\": %zu, "
           "\"file_sha256\": %zu, \"bytes\": %llu, \"tensors\": %zu},\n",
           r->tensor_digests, r->chunk_digests, r->header_digests, r->zip_crc32, r->file_sha256,
           (unsigned long long)r->bytes, r->tensors);
    printf("  \"seconds\": %.6f\n}\n", seconds);
}

static int run_verify(int argc, char **argv, source_options *so) {
    enum { OPT_HELP = 1, OPT_QUIET, OPT_JSON, OPT_PROGRESS, OPT_NO_PROGRESS };
    static const cli_option options[] = {{"help", 'h', false, OPT_HELP},
                                         {"quiet", 'q', false, OPT_QUIET},
                                         {"json", 0, false, OPT_JSON},
                                         {"progress", 0, false, OPT_PROGRESS},
                                         {"no-progress", 0, false, OPT_NO_PROGRESS},
                                         CLI_SOURCE_OPTIONS,
                                         {NULL, 0, 0, 0}};
    const char *path = NULL, *value;
    int show_progress = -1;
    bool quiet = false, json = false;
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
        case OPT_JSON: json = true; break;
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
    ckpt_catalog *cat;
    int opened = open_checkpoint(path, source_options_get(so), true, &cat);
    if (opened != EXIT_OK) return opened;
    ckpt_error err;
    ckpt_error_clear(&err);
    char shown[4096];
    path = display_name(path, shown, sizeof shown);
    progress_bar bar;
    progress_start(&bar, "verifying", show_progress);
    ckpt_verify_report r = {.size = sizeof r};
    ckpt_verify_options vo;
    ckpt_verify_options_init(&vo);
    vo.progress = progress_update, vo.user = &bar;
    ckpt_status st = ckpt_verify(cat, &vo, &r, &err);
    progress_finish(&bar, st == CKPT_OK);
    size_t n = ckpt_catalog_tensor_count(cat), files = ckpt_catalog_file_count(cat);
    const char *format = ckpt_format_name(ckpt_catalog_format(cat));
    ckpt_catalog_close(cat);
    if (st != CKPT_OK) return report_error(&err);
    if (quiet) return EXIT_OK;
    (json ? print_verified_json : print_verified)(path, format, n, files, &r, cli_now() - start);
    return finish_stdout();
}

int cmd_verify(int argc, char **argv) {
    source_options so;
    source_options_init(&so);
    int rc = run_verify(argc, argv, &so);
    source_options_free(&so);
    return rc;
}
