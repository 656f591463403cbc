/* convert.c — `ckpt convert SRC DST [--max-shard-size SIZE] [--force]`. */
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const char usage[] =
    "usage: ckpt convert SRC DST [--max-shard-size SIZE] [--prefix NAME] [--force]\n"
    "                            [--checksums] [--verify]\n"
    "\n"
    "Re-shard or merge a checkpoint, streaming tensor data from file to file\n"
    "(memory use does not depend on the checkpoint's size).\n"
    "\n"
    "SRC   a .safetensors file, a *.safetensors.index.json, or a directory\n"
    "DST   a file name ending in .safetensors: one file (merge);\n"
    "      otherwise a directory that receives Hugging Face shards\n"
    "      <prefix>-00001-of-0000N.safetensors and <prefix>.safetensors.index.json\n"
    "      (or a single <prefix>.safetensors when everything fits in one shard)\n"
    "\n"
    "options:\n"
    "  --max-shard-size SIZE  largest shard, e.g. 5GB (default), 500MB, 2GiB or a\n"
    "                         number of bytes; units as huggingface_hub (KB, MB, GB,\n"
    "                         TB are powers of 1000) plus KiB, MiB, GiB, TiB\n"
    "  --prefix NAME          shard file prefix (default: model)\n"
    "  --force                replace an existing checkpoint at DST (only once the\n"
    "                         new one is complete)\n"
    "  --progress / --no-progress\n"
    "                         force the progress bar on or off (default: on when\n"
    "                         stderr is a terminal)\n"
    "  --no-sync              skip fsync (scratch output; renames stay atomic)\n"
    "  --checksums            record each tensor's XXH3-64 in the output's metadata\n"
    "                         (key ckpt.xxh3_64), for ckpt verify\n"
    "  --verify               re-read what was written and check it (implies\n"
    "                         --checksums)\n"
    "  -h, --help             show this help\n"
    "\n"
    "Output appears under its final name only when complete: an error or Ctrl-C\n"
    "leaves DST as it was.\n";

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

int cmd_convert(int argc, char **argv) {
    const char *src = NULL, *dst = NULL, *shard_size = NULL;
    ckpt_writer_options opt;
    ckpt_writer_options_init(&opt);
    int show_progress = -1;
    bool verify = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            return EXIT_OK;
        }
        if (!strcmp(a, "--max-shard-size") || !strcmp(a, "--prefix")) {
            if (i + 1 >= argc) return usage_error("convert", "%s needs a value", a);
            if (!strcmp(a, "--prefix")) opt.prefix = argv[++i];
            else shard_size = argv[++i];
        } else if (!strncmp(a, "--max-shard-size=", 17)) {
            shard_size = a + 17;
        } else if (!strncmp(a, "--prefix=", 9)) {
            opt.prefix = a + 9;
        } else if (!strcmp(a, "--force")) {
            opt.overwrite = 1;
        } else if (!strcmp(a, "--no-sync")) {
            opt.no_sync = 1;
        } else if (!strcmp(a, "--checksums")) {
            opt.checksums = 1;
        } else if (!strcmp(a, "--verify")) {
            opt.checksums = 1;
            verify = true;
        } else if (!strcmp(a, "--progress") || !strcmp(a, "--no-progress")) {
            show_progress = !strcmp(a, "--progress");
        } else if (a[0] == '-' && a[1]) {
            return usage_error("convert", "unknown option '%s'", a);
        } else if (!src) {
            src = a;
        } else if (!dst) {
            dst = a;
        } else {
            return usage_error("convert", "unexpected argument '%s'", a);
        }
    }
    if (!src || !dst) return usage_error("convert", "SRC and DST are required");
    if (opt.prefix && (!*opt.prefix || strchr(opt.prefix, '/')))
        return usage_error("convert", "--prefix must be a non-empty file name without '/'");

    ckpt_error err;
    ckpt_error_clear(&err);
    if (shard_size) {
        if (ckpt_parse_size(shard_size, &opt.max_shard_size, &err) != CKPT_OK)
            return usage_error("convert", "%s", err.message);
    }
    struct stat sb;
    bool dst_is_dir = stat(dst, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (!shard_size && (dst_is_dir || !ends_with(dst, ".safetensors")))
        opt.max_shard_size = CKPT_DEFAULT_MAX_SHARD_SIZE;
    if (shard_size && ends_with(dst, ".safetensors") && !dst_is_dir)
        return usage_error("convert", "--max-shard-size writes a directory of shards; DST '%s' names a file", dst);

    ckpt_catalog *cat;
    if (ckpt_catalog_open(src, &cat, &err) != CKPT_OK) return report_error(&err);
    progress_bar bar;
    progress_start(&bar, "converting", show_progress);
    ckpt_status st = ckpt_convert(cat, dst, &opt, progress_update, &bar, &err);
    progress_finish(&bar, st == CKPT_OK);
    ckpt_catalog_close(cat);
    if (st != CKPT_OK) {
        if (st == CKPT_E_CANCELLED) {
            fprintf(stderr, "ckpt: interrupted; %s left as it was\n", dst);
            return EXIT_INTERRUPTED;
        }
        return report_error(&err);
    }
    if (verify) {
        /* Re-read the committed output from disk against its checksums. */
        size_t checked = 0;
        if ((st = ckpt_catalog_open(dst, &cat, &err)) == CKPT_OK) {
            st = ckpt_verify(cat, NULL, NULL, &checked, &err);
            ckpt_catalog_close(cat);
        }
        if (st != CKPT_OK) return report_error(&err);
        fprintf(stderr, "ckpt: verified %zu tensors in %s\n", checked, dst);
    }
    return EXIT_OK;
}
