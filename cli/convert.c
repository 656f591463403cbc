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
    "                            [--to safetensors|gguf|dcp] [--dcp-ranks N]\n"
    "                            [--gguf-kv FILE.json]\n"
    "                            [--split-max-size SIZE] [--split-max-tensors N]\n"
    "                            [--direct] [remote options]\n"
    "\n"
    "Re-shard, merge or transform a checkpoint, streaming tensor data from file\n"
    "to file (memory use does not depend on the checkpoint's size).\n"
    "\n"
    "SRC   a .safetensors file, a *.safetensors.index.json, a torch.save file, a\n"
    "      GGUF, .npy, .npz or Flax .msgpack file, a torch.distributed.checkpoint\n"
    "      (DCP) directory, or a directory holding one (or their http://,\n"
    "      https:// or s3:// URLs)\n"
    "DST   a file name ending in .safetensors: one file (merge); in .npz: a\n"
    "      NumPy archive (np.load reads it); in .msgpack: a Flax msgpack file\n"
    "      (flax.serialization.msgpack_restore reads it, names split at dots);\n"
    "      in .gguf (or --to gguf): GGUF as GGUFWriter writes it; with --to dcp:\n"
    "      a torch.distributed.checkpoint directory;\n"
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
    "  --ignore-unmatched     a pattern that matches no tensor is not an error\n"
    "  --no-extra-files       when SRC is a model directory, do not copy its other\n"
    "                         files (config.json, tokenizer files, ...) into DST\n"
    "  --allow-global MODULE.NAME\n"
    "                         allow this pickle global (repeatable), as torch's\n"
    "                         add_safe_globals: numpy scalars and dtypes,\n"
    "                         argparse.Namespace, dataclasses; nothing is executed\n"
    "  --to FORMAT            safetensors, gguf (see GGUF below) or dcp (default: by\n"
    "                         DST's extension, else safetensors); dcp: DST becomes a\n"
    "                         torch.distributed.checkpoint directory that\n"
    "                         torch.distributed.checkpoint.load reads on any number\n"
    "                         of ranks\n"
    "  --dcp-ranks N          with --to dcp: cut each tensor of at least N rows along\n"
    "                         its first axis into N chunks, as DTensor Shard(0) does,\n"
    "                         one __<rank>_0.distcp file per rank (default 1); smaller\n"
    "                         tensors and non-tensor values are written once\n"
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
    "  A pattern that matches no tensor is an error (see --ignore-unmatched); one\n"
    "  that names a single tensor the rule cannot apply to is an error too.\n"
    "\n"
    "GGUF:\n"
    "  --dtype q8_0 / q4_0    quantize float matrices (2 or more axes, rows of whole\n"
    "                         32-element blocks; vectors stay as they are), bit-exact\n"
    "                         with gguf.quants; --dtype bf16/f16/f32 dequantizes\n"
    "                         GGUF block types (quantized tensors written as\n"
    "                         safetensors are dequantized to f32 unless --dtype says)\n"
    "  --gguf-kv FILE.json    key-values to add or replace: {key: value}, a string,\n"
    "                         a number, a bool, a list, or a typed value such as\n"
    "                         {\"gguf_type\": \"u32\", \"value\": 4096}\n"
    "  --split-max-size SIZE  split as gguf-split does: 500M, 2G (powers of 1000),\n"
    "                         or any --max-shard-size form\n"
    "  --split-max-tensors N  at most N tensors per split file\n"
    "  Splits are DST-00001-of-0000N.gguf beside DST; SRC a first part merges.\n"
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
    for (int d = 1; d < CKPT_DTYPE_COUNT; d++) /* ggml's block types: q8_0, Q4_K, ... */
        if (ckpt_dtype_is_block((ckpt_dtype)d) && !strcasecmp(text, ckpt_dtype_name((ckpt_dtype)d))) return (ckpt_dtype)d;
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
    if (st != CKPT_OK) return report_error(err);
    /* A broad pattern leaves what it cannot apply to as it is: say so. */
    size_t matched, skipped;
    ckpt_plan_last_rule(plan, &matched, &skipped);
    if (skipped)
        fprintf(stderr, "ckpt: %s %s: %zu of the %zu matching tensors left as they are (%s)\n", r->option, r->value,
                skipped, matched,
                !strcmp(r->option, "--dtype") ? "not of a dtype it casts"
                : (!strcmp(r->option, "--slice") ? "no such dimension" : "another number of dimensions"));
    return EXIT_OK;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A whole file into a malloc'ed string, or NULL (errno set). */
static char *read_text_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (len + 1 < cap) break;
        char *bigger = realloc(buf, cap *= 2);
        if (!bigger) free(buf);
        buf = bigger;
    }
    fclose(f);
    if (buf) buf[len] = '\0';
    return buf;
}

/* gguf-split's sizes ("500M", "2G": powers of 1000), or ckpt_parse_size's. */
static ckpt_status parse_split_size(const char *text, uint64_t *bytes, ckpt_error *err) {
    size_t n = strlen(text);
    if (n > 1 && n < 60 && (text[n - 1] == 'M' || text[n - 1] == 'G') && text[n - 2] >= '0' && text[n - 2] <= '9') {
        char with_b[64];
        snprintf(with_b, sizeof with_b, "%sB", text);
        return ckpt_parse_size(with_b, bytes, err);
    }
    return ckpt_parse_size(text, bytes, err);
}

/* Glob-escapes a tensor name so that a pattern matches it alone. */
static void escape_name(const char *name, char *out, size_t cap) {
    size_t k = 0;
    for (; *name && k + 2 < cap; name++) {
        if (strchr("*?[]\\", *name)) out[k++] = '\\';
        out[k++] = *name;
    }
    out[k] = '\0';
}

/* safetensors has no block types: quantized tensors the rules left as they
 * are become f32 (lossless). */
static int dequantize_rest(ckpt_plan *plan, ckpt_error *err) {
    char pattern[8192];
    for (size_t i = 0; i < ckpt_plan_count(plan); i++) {
        const ckpt_plan_item *it = ckpt_plan_item_at(plan, i);
        if (!ckpt_dtype_is_block(it->dtype)) continue;
        escape_name(it->source->name, pattern, sizeof pattern);
        if (ckpt_plan_cast(plan, pattern, CKPT_F32, err) != CKPT_OK) return report_error(err);
    }
    return EXIT_OK;
}

/* The command, with room for one transform and one allowed global per
 * argument. */
static int run_convert(int argc, char **argv, rule *rules, const char **globals, source_options *so) {
    const char *src = NULL, *dst = NULL, *shard_size = NULL, *to = NULL, *kv_file = NULL, *split_size = NULL,
               *split_tensors = NULL;
    bool extra_files = true, ignore_unmatched = false;
    size_t global_count = 0;
    ckpt_writer_options opt;
    ckpt_writer_options_init(&opt);
    int show_progress = -1;
    bool verify = false;
    const char *ranks = NULL;
    size_t rule_count = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            fputs(source_options_help, stdout);
            return EXIT_OK;
        }
        int taken = source_option("convert", argc, argv, &i, so);
        if (taken < 0) return EXIT_USAGE;
        if (taken) continue;
        if (!strcmp(a, "--max-shard-size") || !strcmp(a, "--prefix")) {
            if (i + 1 >= argc) return usage_error("convert", "%s needs a value", a);
            if (!strcmp(a, "--prefix")) opt.prefix = argv[++i];
            else shard_size = argv[++i];
        } else if (!strncmp(a, "--max-shard-size=", 17)) {
            shard_size = a + 17;
        } else if (!strncmp(a, "--prefix=", 9)) {
            opt.prefix = a + 9;
        } else if (!strcmp(a, "--to") || !strcmp(a, "--gguf-kv") || !strcmp(a, "--split-max-size") ||
                   !strcmp(a, "--split-max-tensors") || !strcmp(a, "--dcp-ranks")) {
            if (i + 1 >= argc) return usage_error("convert", "%s needs a value", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--to")) to = v;
            else if (!strcmp(a, "--gguf-kv")) kv_file = v;
            else if (!strcmp(a, "--split-max-size")) split_size = v;
            else if (!strcmp(a, "--dcp-ranks")) ranks = v;
            else split_tensors = v;
        } else if (!strncmp(a, "--to=", 5)) {
            to = a + 5;
        } else if (!strncmp(a, "--dcp-ranks=", 12)) {
            ranks = a + 12;
        } else if (!strcmp(a, "--force")) {
            opt.overwrite = 1;
        } else if (!strcmp(a, "--no-sync")) {
            opt.no_sync = 1;
        } else if (!strcmp(a, "--ignore-unmatched")) {
            ignore_unmatched = true;
        } else if (!strcmp(a, "--no-extra-files")) {
            extra_files = false;
        } else if (!strcmp(a, "--allow-global") || !strncmp(a, "--allow-global=", 15)) {
            if (a[14] == '=') globals[global_count++] = a + 15;
            else if (i + 1 >= argc) return usage_error("convert", "%s needs a value", a);
            else globals[global_count++] = argv[++i];
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

    if (to && strcasecmp(to, "safetensors") && strcasecmp(to, "gguf") && strcasecmp(to, "dcp"))
        return usage_error("convert", "--to takes safetensors, gguf or dcp, not '%s'", to);
    bool dcp = to && !strcasecmp(to, "dcp");
    if (ranks && !dcp) return usage_error("convert", "--dcp-ranks goes with --to dcp");
    if (dcp) {
        const char *end;
        uint64_t n = 1;
        if (ranks && (!parse_u64(ranks, &end, &n) || *end || n == 0 || n > 65536))
            return usage_error("convert", "--dcp-ranks needs a number of ranks from 1 to 65536, got '%s'", ranks);
        if (shard_size || opt.prefix || opt.checksums)
            return usage_error("convert", "--to dcp writes one file per rank: no --max-shard-size, --prefix, "
                                          "--checksums or --verify");
        opt.format = CKPT_FORMAT_DCP;
        opt.dcp_ranks = (uint32_t)n;
    }

    ckpt_error err;
    ckpt_error_clear(&err);
    bool gguf = to ? !strcasecmp(to, "gguf") : ends_with(dst, ".gguf");
    char *kv_text = NULL;
    struct stat sb;
    if (gguf) {
        opt.format = CKPT_FORMAT_GGUF;
        if (shard_size) return usage_error("convert", "GGUF output splits with --split-max-size, not --max-shard-size");
        if (split_size && parse_split_size(split_size, &opt.max_shard_size, &err) != CKPT_OK)
            return usage_error("convert", "%s", err.message);
        if (split_tensors) {
            const char *e;
            if (!parse_u64(split_tensors, &e, &opt.split_max_tensors) || *e || !opt.split_max_tensors)
                return usage_error("convert", "--split-max-tensors needs a positive number, got '%s'", split_tensors);
        }
    } else {
        if (to && !dcp) opt.format = CKPT_FORMAT_SAFETENSORS;
        if (split_size || split_tensors)
            return usage_error("convert", "--split-max-size and --split-max-tensors are for GGUF output (DST *.gguf)");
    }
    if (kv_file) {
        if (!(kv_text = read_text_file(kv_file))) {
            fprintf(stderr, "ckpt: %s: %s\n", kv_file, strerror(errno));
            return EXIT_ERROR;
        }
        opt.metadata_json = kv_text;
    }
    if (gguf || dcp) goto open; /* no safetensors sharding */
    if (shard_size) {
        if (ckpt_parse_size(shard_size, &opt.max_shard_size, &err) != CKPT_OK)
            return usage_error("convert", "%s", err.message);
    }
    bool dst_is_dir = stat(dst, &sb) == 0 && S_ISDIR(sb.st_mode);
    /* DST ending in .npz or .msgpack: one NumPy archive or Flax msgpack file. */
    if (!dst_is_dir && ends_with(dst, ".npz")) opt.format = CKPT_FORMAT_NPZ;
    if (!dst_is_dir && ends_with(dst, ".msgpack")) opt.format = CKPT_FORMAT_FLAX_MSGPACK;
    bool one_file = !dst_is_dir && (ends_with(dst, ".safetensors") || opt.format);
    if (!shard_size && !one_file) opt.max_shard_size = CKPT_DEFAULT_MAX_SHARD_SIZE;
    if (shard_size && one_file)
        return usage_error("convert", "--max-shard-size writes a directory of shards; DST '%s' names a file", dst);
open:

    /* A model directory's other files (config.json, tokenizer files, …)
     * go along into a directory of shards, so that the output loads on its
     * own. */
    if (extra_files && !gguf && opt.max_shard_size && stat(src, &sb) == 0 && S_ISDIR(sb.st_mode)) opt.copy_files_from = src;
    ckpt_catalog_options copt = *source_options_get(so);
    copt.allowed_globals = globals;
    copt.allowed_global_count = global_count;
    ckpt_catalog *cat;
    if (ckpt_catalog_open_ex(src, &copt, &cat, &err) != CKPT_OK) {
        free(kv_text);
        return report_error(&err);
    }
    /* A conversion is a plan: the identity, or the rules in order. */
    ckpt_plan *plan = NULL;
    if (ckpt_plan_create(cat, &plan, &err) != CKPT_OK) {
        ckpt_catalog_close(cat);
        free(kv_text);
        return report_error(&err);
    }
    if (ignore_unmatched) ckpt_plan_set_flags(plan, CKPT_PLAN_IGNORE_UNMATCHED);
    {
        int rc = EXIT_OK;
        for (size_t i = 0; i < rule_count && rc == EXIT_OK; i++) rc = apply_rule(plan, &rules[i], &err);
        if (rc == EXIT_OK && !gguf) rc = dequantize_rest(plan, &err); /* safetensors has no block types */
        if (rc != EXIT_OK) {
            ckpt_plan_free(plan);
            ckpt_catalog_close(cat);
            free(kv_text);
            return rc;
        }
    }
    progress_bar bar;
    progress_start(&bar, "converting", show_progress);
    ckpt_status st = ckpt_convert_plan(plan, dst, &opt, progress_update, &bar, &err);
    progress_finish(&bar, st == CKPT_OK);
    ckpt_plan_free(plan);
    ckpt_catalog_close(cat);
    free(kv_text);
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
        ckpt_catalog_options local;
        ckpt_catalog_options_init(&local);
        local.direct = so->catalog.direct;
        if ((st = ckpt_catalog_open_ex(dst, &local, &cat, &err)) == CKPT_OK) {
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
    const char **globals = calloc((size_t)argc, sizeof *globals);
    source_options so;
    source_options_init(&so);
    int rc = EXIT_ERROR;
    if (!rules || !globals) fputs("ckpt: out of memory\n", stderr);
    else rc = run_convert(argc, argv, rules, globals, &so);
    source_options_free(&so);
    free(rules);
    free(globals);
    return rc;
}
