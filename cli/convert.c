/* convert.c — `ckpt convert SRC DST [--max-shard-size SIZE] [--force]`. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli.h"

static const char usage[] =
    "usage: ckpt convert SRC DST [--max-shard-size SIZE] [--prefix NAME] [--force]\n"
    "                            [--checksums] [--verify]\n"
    "                            [--select PAT] [--exclude PAT] [--rename FROM=TO]\n"
    "                            [--dtype [PAT=]DTYPE] [--slice [PAT=]SPEC]\n"
    "                            [--transpose PAT] [--layout [PAT=]FROM:TO]\n"
    "\n"
    "Re-shard, merge or transform a checkpoint, streaming tensor data from file\n"
    "to file (memory use does not depend on the checkpoint's size).\n"
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
    "  --mpi                  split the conversion across the ranks of an MPI job\n"
    "                         (automatic under mpirun -np N with N > 1): rank 0\n"
    "                         reads the headers and lays the output out, each rank\n"
    "                         converts its range of the output's bytes, rank 0\n"
    "                         commits once all succeeded (needs libckpt_mpi)\n"
    "\n"
    "transforms (applied in the order given; PAT is a glob on the tensor's name in\n"
    "SRC, '*' matching dots too; without PAT, every tensor):\n"
    "  --select PAT           keep only matching tensors (repeat to add more)\n"
    "  --exclude PAT          drop matching tensors\n"
    "  --rename FROM=TO       rename: a prefix ('model.=' strips 'model.') or a\n"
    "                         glob whose '*' fill the '*' of TO\n"
    "  --dtype [PAT=]DTYPE    cast float tensors (bf16, f16, f32, f64, f8_e4m3,\n"
    "                         f8_e5m2, ... or safetensors names), bit-exact with\n"
    "                         torch's .to(); integer DTYPEs widen integer tensors\n"
    "  --slice [PAT=]DIM:RANK/PARTS   keep part RANK of PARTS along DIM (uneven\n"
    "                         splits as torch.tensor_split); DIM may be negative\n"
    "  --slice [PAT=]DIM:START:STOP   keep elements [START, STOP) of DIM\n"
    "  --transpose PAT        transpose matching 2-D tensors (dense kernels), once,\n"
    "                         so that loaders need not on every load\n"
    "  --layout [PAT=]FROM:TO reorder axes by letters, e.g. OIHW:HWIO (conv kernels\n"
    "                         of torch to TensorFlow/Flax); other ranks untouched\n"
    "  With transforms, tensors sharing storage in a torch file are each written.\n"
    "  -h, --help             show this help\n"
    "\n"
    "Output appears under its final name only when complete: an error or Ctrl-C\n"
    "leaves DST as it was.\n";

typedef struct rule {
    const char *option, *value;
} rule;

/* Splits "PAT=REST" at the last '=' (no '=': no pattern). */
static const char *split_pattern(const char *value, char *pattern, size_t cap) {
    const char *eq = strrchr(value, '=');
    if (!eq || (size_t)(eq - value) >= cap) {
        pattern[0] = '\0';
        return value;
    }
    memcpy(pattern, value, (size_t)(eq - value));
    pattern[eq - value] = '\0';
    return eq + 1;
}

static ckpt_dtype parse_dtype(const char *text) {
    static const struct { const char *alias; ckpt_dtype dtype; } aliases[] = {
        {"bf16", CKPT_BF16}, {"bfloat16", CKPT_BF16}, {"f16", CKPT_F16}, {"fp16", CKPT_F16}, {"float16", CKPT_F16},
        {"half", CKPT_F16}, {"f32", CKPT_F32}, {"fp32", CKPT_F32}, {"float32", CKPT_F32}, {"float", CKPT_F32},
        {"f64", CKPT_F64}, {"float64", CKPT_F64}, {"double", CKPT_F64}, {"f8_e4m3", CKPT_F8_E4M3},
        {"float8_e4m3fn", CKPT_F8_E4M3}, {"f8_e5m2", CKPT_F8_E5M2}, {"float8_e5m2", CKPT_F8_E5M2},
        {"f8_e4m3fnuz", CKPT_F8_E4M3FNUZ}, {"float8_e4m3fnuz", CKPT_F8_E4M3FNUZ}, {"f8_e5m2fnuz", CKPT_F8_E5M2FNUZ},
        {"float8_e5m2fnuz", CKPT_F8_E5M2FNUZ}, {"f8_e8m0", CKPT_F8_E8M0}, {"float8_e8m0fnu", CKPT_F8_E8M0},
        {"i16", CKPT_I16}, {"int16", CKPT_I16}, {"i32", CKPT_I32}, {"int32", CKPT_I32}, {"i64", CKPT_I64},
        {"int64", CKPT_I64}, {"u16", CKPT_U16}, {"u32", CKPT_U32}, {"u64", CKPT_U64},
    };
    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
        if (!strcasecmp(text, aliases[i].alias)) return aliases[i].dtype;
    return ckpt_dtype_from_name(text);
}

static bool parse_u64(const char *s, const char **end, uint64_t *out) {
    char *e;
    errno = 0;
    if (*s < '0' || *s > '9') return false;
    unsigned long long v = strtoull(s, &e, 10);
    if (errno) return false;
    *out = v, *end = e;
    return true;
}

/* Applies one transform option to the plan; a usage problem gives 2. */
static int apply_rule(ckpt_plan *plan, const rule *r, ckpt_error *err) {
    char pattern[4096];
    const char *pat, *rest = split_pattern(r->value, pattern, sizeof pattern);
    pat = pattern[0] ? pattern : NULL;
    ckpt_status st = CKPT_OK;
    if (!strcmp(r->option, "--select")) {
        st = ckpt_plan_select(plan, r->value, err);
    } else if (!strcmp(r->option, "--exclude")) {
        st = ckpt_plan_exclude(plan, r->value, err);
    } else if (!strcmp(r->option, "--transpose")) {
        st = ckpt_plan_transpose(plan, r->value, err);
    } else if (!strcmp(r->option, "--rename")) {
        if (!pat) return usage_error("convert", "--rename needs FROM=TO, got '%s'", r->value);
        st = ckpt_plan_rename(plan, pat, rest, err);
    } else if (!strcmp(r->option, "--dtype")) {
        ckpt_dtype d = parse_dtype(rest);
        if (d == CKPT_DTYPE_INVALID) return usage_error("convert", "unknown dtype '%s'", rest);
        st = ckpt_plan_cast(plan, pat, d, err);
    } else if (!strcmp(r->option, "--layout")) {
        const char *colon = strchr(rest, ':');
        char from[CKPT_MAX_DIMS + 1];
        if (!colon || (size_t)(colon - rest) > CKPT_MAX_DIMS)
            return usage_error("convert", "--layout needs FROM:TO such as OIHW:HWIO, got '%s'", rest);
        memcpy(from, rest, (size_t)(colon - rest));
        from[colon - rest] = '\0';
        st = ckpt_plan_layout(plan, pat, from, colon + 1, err);
    } else { /* --slice DIM:RANK/PARTS or DIM:START:STOP */
        const char *p = rest, *e;
        int sign = 1;
        uint64_t dim, a, b;
        if (*p == '-') sign = -1, p++;
        if (!parse_u64(p, &e, &dim) || *e != ':' || dim > 64 || !parse_u64(e + 1, &e, &a) || (*e != '/' && *e != ':') ||
            !parse_u64(e + 1, &p, &b) || *p)
            return usage_error("convert", "--slice needs DIM:RANK/PARTS or DIM:START:STOP, got '%s'", rest);
        int d = sign * (int)dim;
        st = *e == '/' ? ckpt_plan_split(plan, pat, d, a, b, err) : ckpt_plan_slice(plan, pat, d, a, b, err);
    }
    return st == CKPT_OK ? EXIT_OK : report_error(err);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

typedef struct rule_list {
    const rule *rules;
    size_t count;
} rule_list;

/* Every transform of the command line, for the MPI path. */
static int apply_rules(ckpt_plan *plan, void *user, ckpt_error *err) {
    const rule_list *l = user;
    for (size_t i = 0; i < l->count; i++) {
        int rc = apply_rule(plan, &l->rules[i], err);
        if (rc != EXIT_OK) return rc;
    }
    return EXIT_OK;
}

/* The command, with room for one transform per argument. */
static int run_convert(int argc, char **argv, rule *rules) {
    const char *src = NULL, *dst = NULL, *shard_size = NULL;
    ckpt_writer_options opt;
    ckpt_writer_options_init(&opt);
    int show_progress = -1;
    bool verify = false, mpi = false;
    size_t rule_count = 0;
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
        } else if (!strcmp(a, "--select") || !strcmp(a, "--exclude") || !strcmp(a, "--rename") ||
                   !strcmp(a, "--dtype") || !strcmp(a, "--slice") || !strcmp(a, "--transpose") ||
                   !strcmp(a, "--layout")) {
            if (i + 1 >= argc) return usage_error("convert", "%s needs a value", a);
            rules[rule_count++] = (rule){a, argv[++i]};
        } else if (!strcmp(a, "--mpi")) {
            mpi = true;
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

    if (mpi || mpi_env_ranks() > 1) {
        rule_list l = {rules, rule_count};
        return convert_mpi(src, dst, &opt, show_progress, rule_count ? apply_rules : NULL, &l);
    }
    ckpt_catalog *cat;
    if (ckpt_catalog_open(src, &cat, &err) != CKPT_OK) return report_error(&err);
    ckpt_plan *plan = NULL;
    if (rule_count) {
        if (ckpt_plan_create(cat, &plan, &err) != CKPT_OK) {
            ckpt_catalog_close(cat);
            return report_error(&err);
        }
        for (size_t i = 0; i < rule_count; i++) {
            int rc = apply_rule(plan, &rules[i], &err);
            if (rc != EXIT_OK) {
                ckpt_plan_free(plan);
                ckpt_catalog_close(cat);
                return rc;
            }
        }
    }
    progress_bar bar;
    progress_start(&bar, "converting", show_progress);
    ckpt_status st = plan ? ckpt_convert_plan(plan, dst, &opt, progress_update, &bar, &err)
                          : ckpt_convert(cat, dst, &opt, progress_update, &bar, &err);
    progress_finish(&bar, st == CKPT_OK);
    ckpt_plan_free(plan);
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

int cmd_convert(int argc, char **argv) {
    rule *rules = calloc((size_t)argc, sizeof *rules);
    if (!rules) {
        fputs("ckpt: out of memory\n", stderr);
        return EXIT_ERROR;
    }
    int rc = run_convert(argc, argv, rules);
    free(rules);
    return rc;
}
