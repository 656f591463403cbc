/* convert.c — `ckpt convert SRC DST [options]`. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "ckpt_dcp.h"
#include "ckpt_gguf.h"
#include "cli.h"

const char convert_usage[] =
    "usage: ckpt convert SRC DST [options]\n"
    "       ckpt convert SRC -o DST [options]\n"
    "\n"
    "Re-shard, merge, transform or convert a checkpoint, streaming tensor data\n"
    "from file to file (memory use does not depend on its size).\n"
    "\n"
    "SRC is any checkpoint ckpt reads:\n" CLI_READ_FORMATS
    "DST   a file name ending in .safetensors: one file (merge; with\n"
    "      --max-shard-size, DST-00001-of-0000N.safetensors and\n"
    "      DST.safetensors.index.json beside it when it does not fit); in .pt,\n"
    "      .pth or .bin: the file torch.save writes (torch.load reads it); in\n"
    "      .npy: one array as np.save writes it; in .npz: a NumPy archive\n"
    "      (np.load reads it); in .msgpack: a Flax msgpack file\n"
    "      (flax.serialization.msgpack_restore reads it, names split at dots);\n"
    "      in .gguf (or --to gguf): GGUF as GGUFWriter writes it; with --to dcp:\n"
    "      a torch.distributed.checkpoint directory; missing parents are made.\n"
    "      A name ending in '/', an existing directory or a name without a\n"
    "      checkpoint suffix is a directory that receives Hugging Face shards\n"
    "      <prefix>-00001-of-0000N.safetensors and <prefix>.safetensors.index.json\n"
    "      (or a single <prefix>.safetensors when everything fits in one shard);\n"
    "      other checkpoint suffixes (.ckpt, .h5, .onnx, an index) are refused\n"
    "\n"
    "options:\n"
    "  -o, --output DST       the destination (instead of the second argument)\n"
    "  --max-shard-size SIZE  largest shard, e.g. 5GB (default), 500MB, 2GiB or a\n"
    "                         number of bytes; units as huggingface_hub (KB, MB, GB,\n"
    "                         TB are powers of 1000) plus KiB, MiB, GiB, TiB\n"
    "  --prefix NAME          shard file prefix of a directory DST (default: model)\n"
    "  -f, --force            replace an existing checkpoint at DST (only once the\n"
    "                         new one is complete)\n"
    "  -q, --quiet            no summary line, no progress bar, no notes on what a\n"
    "                         broad rule left as it is (errors still go to stderr)\n"
    "  --progress / --no-progress\n"
    "                         force the progress bar on or off (default: on when\n"
    "                         stderr is a terminal)\n"
    "  --no-sync              skip fsync (scratch output; renames stay atomic)\n"
    "  --checksums            record each tensor's XXH3-64 in the output's metadata\n"
    "                         (key ckpt.xxh3_64), for ckpt verify; safetensors\n"
    "                         output only (other formats have no place for them)\n"
    "  --verify               re-read what was written and check it (implies\n"
    "                         --checksums: safetensors output only)\n"
    "  --no-check-crc         do not check the source's ZIP CRC-32s (torch.save\n"
    "                         files, .npz): by default each member read whole is\n"
    "                         checked as it streams, and a mismatch writes nothing\n"
    "  --mpi                  split the conversion across the ranks of an MPI job\n"
    "                         (automatic under mpirun -np N with N > 1): rank 0\n"
    "                         reads the headers and lays the output out, each rank\n"
    "                         converts its range of the output's bytes, rank 0\n"
    "                         commits once all succeeded (needs libckpt_mpi)\n"
    "  --ignore-unmatched     a pattern that matches no tensor is not an error\n"
    "  --no-extra-files       when SRC is a model directory, do not copy its other\n"
    "                         files (config.json, tokenizer files, ...) into DST\n"
    "  --allow-global MODULE.NAME\n"
    "                         allow this pickle global (repeatable), as torch's\n"
    "                         add_safe_globals: numpy scalars and dtypes,\n"
    "                         argparse.Namespace, dataclasses; nothing is executed\n"
    "  --to FORMAT            safetensors, gguf (see GGUF below), torch, npy, npz,\n"
    "                         flax-msgpack, dcp or hf (default: by DST's suffix,\n"
    "                         else safetensors; it must agree with the suffix); dcp:\n"
    "                         DST becomes a torch.distributed.checkpoint directory\n"
    "                         that torch.distributed.checkpoint.load reads on any\n"
    "                         number of ranks; hf: a llama.cpp GGUF SRC becomes a\n"
    "                         Hugging Face model directory DST (see GGUF below)\n"
    "  --dcp-ranks N          with --to dcp: cut each tensor of at least N rows along\n"
    "                         its first axis into N chunks, as DTensor Shard(0) does,\n"
    "                         one __<rank>_0.distcp file per rank (default 1); smaller\n"
    "                         tensors and non-tensor values are written once\n"
    "  -n, --dry-run          write nothing: list the tensors (names, dtypes, shapes\n"
    "                         after every rule) and the files the conversion would\n"
    "                         write, with the same checks\n"
    "  --json                 with --dry-run: that listing as JSON on stdout\n"
    "  -h, --help             show this help\n"
    "  Options taking a value accept --opt VALUE and --opt=VALUE.\n"
    "\n"
    "transforms (applied in the order given; PAT is a glob on the tensor's name in\n"
    "SRC, '*' matching dots too; without PAT, every tensor):\n"
    "  --select PAT           keep only matching tensors (repeat to add more)\n"
    "  --exclude PAT          drop matching tensors\n"
    "  --rename FROM=TO       rename: a prefix ('model.=' strips 'model.') or a\n"
    "                         glob whose '*' fill the '*' of TO\n"
    "  --dtype [PAT=]DTYPE    cast float tensors (bf16, f16, f32, f64, f8_e4m3,\n"
    "                         f8_e5m2, ... or safetensors names), bit-exact with\n"
    "                         torch's .to(); integer DTYPEs widen integer tensors;\n"
    "                         a model directory's config.json, copied along, gets\n"
    "                         the new dtype when every float tensor ends up of that\n"
    "                         one dtype (with several, it is copied as it is)\n"
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
    "  SRC a Hugging Face model directory (config.json beside the weights): the\n"
    "  file convert_hf_to_gguf.py writes, byte for byte (Llama, Mistral, Mixtral,\n"
    "  Qwen2, Qwen3 and their MoE, Phi-3, Gemma 2 and 3: docs/FORMATS.md): llama.cpp's\n"
    "  tensor names, llama's Q/K rows reordered, experts stacked per layer,\n"
    "  hyper-parameters and tokenizer as key-values;\n"
    "  --dtype f32, f16, bf16 or q8_0 is the script's --outtype (default: its\n"
    "  auto); --dtype q4_k_m, q5_k_m, q4_k_s, q5_k_s or q6_k is that f32 file\n"
    "  then llama-quantize's mix, byte for byte (no importance matrix); an\n"
    "  architecture ckpt does not convert is refused by name\n"
    "  --raw                  write SRC's tensors as they are, names and all\n"
    "  --dtype q8_0 / q4_0    quantize float matrices (2 or more axes, rows of whole\n"
    "                         32-element blocks; vectors stay as they are), bit-exact\n"
    "                         with gguf.quants; q5_0, q5_1, q4_k, q5_k, q6_k (blocks\n"
    "                         of 32 or 256) bit-exact with ggml's reference\n"
    "                         quantizers; --dtype bf16/f16/f32 dequantizes\n"
    "                         GGUF block types (quantized tensors written as\n"
    "                         safetensors are dequantized to f32 unless --dtype says)\n"
    "  --gguf-kv FILE.json    key-values to add or replace: {key: value}, a string,\n"
    "                         a number, a bool, a list, or a typed value such as\n"
    "                         {\"gguf_type\": \"u32\", \"value\": 4096}\n"
    "  --source-metadata      also write SRC's metadata as string key-values (a\n"
    "                         safetensors __metadata__, a torch file's format: pt);\n"
    "                         without it a GGUF gets only a GGUF SRC's key-values\n"
    "                         and --gguf-kv's\n"
    "  --split-max-size SIZE  split as gguf-split does: 500M, 2G (powers of 1000),\n"
    "                         or any --max-shard-size form\n"
    "  --split-max-tensors N  at most N tensors per split file\n"
    "  Splits are DST-00001-of-0000N.gguf beside DST; SRC a first part merges.\n"
    "  And back: SRC a llama.cpp GGUF (llama, Mixtral's too, qwen2, qwen3, phi3,\n"
    "  gemma2, gemma3, qwen2moe, qwen3moe) and DST a directory (or --to hf): a\n"
    "  Hugging Face model directory, Hugging Face's tensor names, llama's Q/K\n"
    "  rows put back, experts split, Gemma's norms less 1, config.json and the\n"
    "  tokenizer files (tokenizer.json, tokenizer_config.json; a SentencePiece\n"
    "  vocabulary's tokenizer.model too) from the key-values,\n"
    "  tensors dequantized to --dtype f32, f16 or bf16 (default: the GGUF's float\n"
    "  type, else bf16); --raw writes the tensors as they are\n"
    "\n"
    "On success a summary goes to stderr (tensors, bytes, files, time, GB/s).\n"
    "Output appears under its final name only when complete: an error or Ctrl-C\n"
    "leaves DST as it was.\n";

enum {
    OPT_HELP = 1, OPT_OUTPUT, OPT_FORCE, OPT_QUIET, OPT_MAX_SHARD_SIZE, OPT_PREFIX, OPT_NO_SYNC, OPT_CHECKSUMS,
    OPT_VERIFY, OPT_PROGRESS, OPT_NO_PROGRESS, OPT_IGNORE_UNMATCHED, OPT_NO_EXTRA_FILES, OPT_ALLOW_GLOBAL,
    OPT_DRY_RUN, OPT_JSON, OPT_MPI, OPT_NO_CHECK_CRC,
    OPT_TO, OPT_DCP_RANKS, OPT_GGUF_KV, OPT_RAW, OPT_SOURCE_METADATA, OPT_SPLIT_MAX_SIZE, OPT_SPLIT_MAX_TENSORS,
    /* transforms, kept in order as rules */
    OPT_SELECT, OPT_EXCLUDE, OPT_RENAME, OPT_DTYPE, OPT_SLICE, OPT_TRANSPOSE, OPT_LAYOUT
};

typedef struct rule {
    int option;
    const char *value;
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

/* Applies one transform option to the plan; a usage problem gives 2.
 * Unless quiet, says how many tensors a broad pattern left as they are. */
static int apply_rule(ckpt_plan *plan, const rule *r, bool quiet, ckpt_error *err) {
    char pattern[4096];
    const char *pat, *rest = split_pattern(r->value, pattern, sizeof pattern);
    pat = pattern[0] ? pattern : NULL;
    ckpt_status st = CKPT_OK;
    if (r->option == OPT_SELECT) {
        st = ckpt_plan_select(plan, r->value, err);
    } else if (r->option == OPT_EXCLUDE) {
        st = ckpt_plan_exclude(plan, r->value, err);
    } else if (r->option == OPT_TRANSPOSE) {
        st = ckpt_plan_transpose(plan, r->value, err);
    } else if (r->option == OPT_RENAME) {
        if (!pat) return usage_error("convert", "--rename needs FROM=TO, got '%s'", r->value);
        st = ckpt_plan_rename(plan, pat, rest, err);
    } else if (r->option == OPT_DTYPE) {
        ckpt_dtype d = parse_dtype(rest);
        if (d == CKPT_DTYPE_INVALID) return usage_error("convert", "unknown dtype '%s'", rest);
        st = ckpt_plan_cast(plan, pat, d, err);
    } else if (r->option == OPT_LAYOUT) {
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
    /* A broad pattern leaves what it cannot apply to as it is: say so,
     * and why (the library's reasons). */
    size_t matched, skipped;
    ckpt_plan_last_rule(plan, &matched, &skipped);
    if (skipped && !quiet) {
        static const char *const names[] = {[OPT_DTYPE] = "--dtype", [OPT_SLICE] = "--slice",
                                            [OPT_TRANSPOSE] = "--transpose", [OPT_LAYOUT] = "--layout"};
        const char *name = r->option < (int)(sizeof names / sizeof *names) ? names[r->option] : NULL;
        fprintf(stderr, "ckpt: %s %s: %zu of the %zu matching tensors left as they are:", name ? name : "rule",
                printable(r->value), skipped, matched);
        const char *why, *example;
        for (size_t g = 0, n; (n = ckpt_plan_last_rule_skipped(plan, g, &why, &example)); g++)
            fprintf(stderr, "%s %zu %s, e.g. %s", g ? ";" : "", n, why, printable(example));
        fputc('\n', stderr);
    }
    return EXIT_OK;
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

/* "[2, 3]" from a shape. */
static void shape_text(const ckpt_writer_tensor_info *t, char *buf, size_t cap) {
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < t->ndim && len < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, d ? ", %llu" : "%llu", (unsigned long long)t->shape[d]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
}

/* Where the dry run's tensor i would be written: its file, or, cut into
 * chunks for several ranks (--to dcp --dcp-ranks N), "4 chunks, ranks
 * 0-3" — as ckpt inspect says of the written checkpoint; NULL when it is
 * written once for several names. */
static const char *preview_where(const ckpt_writer *w, size_t i, const ckpt_writer_tensor_info *t, char *buf,
                                 size_t cap) {
    if (t->file == SIZE_MAX) return NULL;
    if (t->part_count < 2) return printable(ckpt_writer_name_at(w, CKPT_WRITER_DATA_FILES, t->file));
    long lo = -1, hi = -1;
    bool ranks = true;
    size_t f;
    for (uint32_t k = 0; ckpt_writer_tensor_part(w, i, k, &f, NULL, NULL, NULL); k++) {
        const char *name = ckpt_writer_name_at(w, CKPT_WRITER_DATA_FILES, f);
        char *end;
        long r = strncmp(name, "__", 2) ? -1 : strtol(name + 2, &end, 10); /* __<rank>_<n>.distcp */
        if (r < 0 || end == name + 2 || *end != '_') ranks = false, r = 0;
        if (lo < 0 || r < lo) lo = r;
        if (r > hi) hi = r;
    }
    if (!ranks) snprintf(buf, cap, "%u chunks", t->part_count);
    else if (lo == hi) snprintf(buf, cap, "%u chunks, rank %ld", t->part_count, lo);
    else snprintf(buf, cap, "%u chunks, ranks %ld-%ld", t->part_count, lo, hi);
    return buf;
}

/* The dry run's tensor i (writer index = plan item). */
static ckpt_writer_tensor_info preview_tensor(const ckpt_writer *w, size_t i) {
    ckpt_writer_tensor_info t = {.size = sizeof t};
    ckpt_writer_tensor_info_at(w, i, &t);
    return t;
}

/* The dry run's totals: tensors written (not deduplicated away), their
 * parameters, and each file's tensors (a tensor cut into parts counts in
 * each of their files); per_file: calloc'd, NULL when out of memory. */
static size_t *preview_counts(const ckpt_writer *w, uint64_t *written, uint64_t *params) {
    size_t *per_file = calloc(ckpt_writer_file_count(w) + 1, sizeof *per_file);
    *written = *params = 0;
    for (size_t i = 0; per_file && i < ckpt_writer_tensor_count(w); i++) {
        ckpt_writer_tensor_info t = preview_tensor(w, i);
        if (t.file == SIZE_MAX) continue;
        uint64_t numel = 1;
        for (uint32_t d = 0; d < t.ndim; d++) numel *= t.shape[d];
        *written += 1, *params += numel;
        size_t f, last = SIZE_MAX;
        for (uint32_t k = 0; ckpt_writer_tensor_part(w, i, k, &f, NULL, NULL, NULL); last = f, k++)
            if (f != last) per_file[f]++;
        if (!t.part_count) per_file[t.file]++;
    }
    return per_file;
}

/* `ckpt convert --dry-run --json`: the dry run as the JSON object
 * ckpt_convert_plan_preview documents. */
static void print_preview_json(const ckpt_writer *w, const ckpt_plan *plan, const size_t *per_file, uint64_t written,
                               uint64_t params) {
    printf("{\n  \"path\": ");
    print_json_string(stdout, ckpt_writer_path(w));
    printf(",\n  \"format\": ");
    print_json_string(stdout, ckpt_format_name(ckpt_writer_format(w)));
    printf(",\n  \"directory\": %s,\n  \"open\": ", ckpt_writer_is_directory(w) ? "true" : "false");
    print_json_string(stdout, ckpt_writer_open_path(w));
    printf(",\n  \"files\": [");
    size_t files = ckpt_writer_file_count(w), tensors = ckpt_writer_tensor_count(w);
    for (size_t f = 0; f < files; f++) {
        printf(f ? ",\n    {\"name\": " : "\n    {\"name\": ");
        print_json_string(stdout, ckpt_writer_name_at(w, CKPT_WRITER_DATA_FILES, f));
        printf(", \"path\": ");
        print_json_string(stdout, ckpt_writer_file_path(w, f));
        printf(", \"size\": %llu, \"tensors\": %zu}", (unsigned long long)ckpt_writer_file_size(w, f), per_file[f]);
    }
    printf(files ? "\n  ]" : "]");
    static const struct { const char *key; ckpt_writer_names which; } lists[] = {
        {"side_files", CKPT_WRITER_SIDE_FILES}, {"copied_files", CKPT_WRITER_COPIED_FILES},
        {"replaces", CKPT_WRITER_REPLACED_FILES}};
    for (size_t l = 0; l < sizeof lists / sizeof *lists; l++) {
        printf(",\n  \"%s\": [", lists[l].key);
        for (size_t k = 0; k < ckpt_writer_name_count(w, lists[l].which); k++) {
            if (k) printf(", ");
            print_json_string(stdout, ckpt_writer_name_at(w, lists[l].which, k));
        }
        printf("]");
    }
    printf(",\n  \"tensors\": [");
    for (size_t i = 0; i < tensors; i++) {
        ckpt_writer_tensor_info t = preview_tensor(w, i);
        char shape[4096];
        shape_text(&t, shape, sizeof shape);
        printf(i ? ",\n    {\"name\": " : "\n    {\"name\": ");
        print_json_string(stdout, t.name);
        printf(", \"source\": ");
        print_json_string(stdout, ckpt_plan_item_at(plan, i)->source->name);
        printf(", \"dtype\": ");
        print_json_string(stdout, ckpt_dtype_name(t.dtype));
        printf(", \"shape\": %s, \"nbytes\": %llu, \"file\": ", shape, (unsigned long long)t.nbytes);
        if (t.file == SIZE_MAX) printf("null, \"same_as\": "), print_json_string(stdout, t.kept);
        else print_json_string(stdout, ckpt_writer_name_at(w, CKPT_WRITER_DATA_FILES, t.file));
        if (t.part_count > 1) { /* cut across files: each part's */
            printf(", \"parts\": [");
            size_t f;
            uint64_t begin, nbytes;
            for (uint32_t k = 0; ckpt_writer_tensor_part(w, i, k, &f, &begin, &nbytes, NULL); k++) {
                printf(k ? ", {\"file\": " : "{\"file\": ");
                print_json_string(stdout, ckpt_writer_name_at(w, CKPT_WRITER_DATA_FILES, f));
                printf(", \"begin\": %llu, \"nbytes\": %llu}", (unsigned long long)begin, (unsigned long long)nbytes);
            }
            printf("]");
        }
        printf("}");
    }
    printf("%s\"totals\": {\"tensors\": %zu, \"written\": %llu, \"parameters\": %llu, \"bytes\": %llu}\n}\n",
           tensors ? "\n  ],\n  " : "],\n  ", tensors, (unsigned long long)written, (unsigned long long)params,
           (unsigned long long)ckpt_writer_total_bytes(w));
}

/* What the command line asks for. */
typedef struct convert_args {
    const char *src, *dst, *shard_size, *to, *kv_file, *split_size, *split_tensors, *ranks;
    ckpt_writer_options opt;
    ckpt_gguf_writer_options gguf_options; /* opt.gguf, with --split-max-tensors */
    ckpt_dcp_writer_options dcp_options;   /* opt.dcp, with --to dcp */
    rule *rules;
    size_t rule_count;
    const char **globals;
    size_t global_count;
    int show_progress; /* -1: on a terminal */
    bool verify, quiet, extra_files, ignore_unmatched, gguf, dcp, dry_run, json, help, mpi;
    bool raw;      /* --raw: GGUF output of SRC's tensors as they are */
    bool llamacpp; /* GGUF output of a Hugging Face model directory: llama.cpp's conversion */
    bool hf;       /* a llama.cpp GGUF into a directory: a Hugging Face model directory */
    ckpt_format format; /* the output's, as the destination rule gives it */
    char *dst_dir; /* --to hf's DST as a directory ("DST/") */
    source_options *so; /* where SRC's bytes come from */
    char *kv_text; /* --gguf-kv's file */
    char *written; /* what the conversion writes, for the summary: "DST/", a file, or "first … last" of parts */
    char *open_path; /* the path that opens it (the library's preview says which) */
} convert_args;

/* Step 1: the options, by the table. */
/* A third positional argument (a URL in it shown without credentials). */
static int unexpected_argument(const char *value) {
    char shown[4096];
    return usage_error("convert", "unexpected argument '%s'", display_name(value, shown, sizeof shown));
}

static int parse_args(int argc, char **argv, convert_args *a) {
    static const cli_option options[] = {
        {"help", 'h', false, OPT_HELP},
        {"output", 'o', true, OPT_OUTPUT},
        {"force", 'f', false, OPT_FORCE},
        {"quiet", 'q', false, OPT_QUIET},
        {"max-shard-size", 0, true, OPT_MAX_SHARD_SIZE},
        {"prefix", 0, true, OPT_PREFIX},
        {"no-sync", 0, false, OPT_NO_SYNC},
        {"checksums", 0, false, OPT_CHECKSUMS},
        {"verify", 0, false, OPT_VERIFY},
        {"no-check-crc", 0, false, OPT_NO_CHECK_CRC},
        {"ignore-unmatched", 0, false, OPT_IGNORE_UNMATCHED},
        {"no-extra-files", 0, false, OPT_NO_EXTRA_FILES},
        {"allow-global", 0, true, OPT_ALLOW_GLOBAL},
        {"dry-run", 'n', false, OPT_DRY_RUN},
        {"mpi", 0, false, OPT_MPI},
        {"json", 0, false, OPT_JSON},
        {"to", 0, true, OPT_TO},
        {"dcp-ranks", 0, true, OPT_DCP_RANKS},
        {"gguf-kv", 0, true, OPT_GGUF_KV},
        {"raw", 0, false, OPT_RAW},
        {"source-metadata", 0, false, OPT_SOURCE_METADATA},
        {"split-max-size", 0, true, OPT_SPLIT_MAX_SIZE},
        {"split-max-tensors", 0, true, OPT_SPLIT_MAX_TENSORS},
        {"progress", 0, false, OPT_PROGRESS},
        {"no-progress", 0, false, OPT_NO_PROGRESS},
        {"select", 0, true, OPT_SELECT},
        {"exclude", 0, true, OPT_EXCLUDE},
        {"rename", 0, true, OPT_RENAME},
        {"dtype", 0, true, OPT_DTYPE},
        {"slice", 0, true, OPT_SLICE},
        {"transpose", 0, true, OPT_TRANSPOSE},
        {"layout", 0, true, OPT_LAYOUT},
        CLI_SOURCE_OPTIONS,
        {NULL, 0, 0, 0},
    };
    const char *output = NULL, *value;
    args_parser args;
    args_init(&args, "convert", options, argc, argv);
    for (int id; (id = args_next(&args, &value)) != ARG_END;) {
        switch (id) {
        case ARG_ERROR: return EXIT_USAGE;
        case OPT_HELP: a->help = true; return EXIT_OK;
        case OPT_OUTPUT:
            if (output) return usage_error("convert", "-o/--output given twice ('%s' and '%s')", output, value);
            output = value;
            break;
        case OPT_FORCE: a->opt.overwrite = 1; break;
        case OPT_QUIET: a->quiet = true; break;
        case OPT_MAX_SHARD_SIZE: a->shard_size = value; break;
        case OPT_PREFIX: a->opt.prefix = value; break;
        case OPT_NO_SYNC: a->opt.no_sync = 1; break;
        case OPT_CHECKSUMS: a->opt.checksums = 1; break;
        case OPT_VERIFY: a->opt.checksums = 1, a->verify = true; break;
        case OPT_NO_CHECK_CRC: a->opt.skip_crc_check = 1; break;
        case OPT_IGNORE_UNMATCHED: a->ignore_unmatched = true; break;
        case OPT_NO_EXTRA_FILES: a->extra_files = false; break;
        case OPT_ALLOW_GLOBAL: a->globals[a->global_count++] = value; break;
        case OPT_DRY_RUN: a->dry_run = true; break;
        case OPT_MPI: a->mpi = true; break;
        case OPT_JSON: a->json = true; break;
        case OPT_TO: a->to = value; break;
        case OPT_DCP_RANKS: a->ranks = value; break;
        case OPT_GGUF_KV: a->kv_file = value; break;
        case OPT_RAW: a->raw = true; break;
        case OPT_SOURCE_METADATA: a->opt.source_metadata = 1; break;
        case OPT_SPLIT_MAX_SIZE: a->split_size = value; break;
        case OPT_SPLIT_MAX_TENSORS: a->split_tensors = value; break;
        case OPT_PROGRESS: a->show_progress = 1; break;
        case OPT_NO_PROGRESS: a->show_progress = 0; break;
        case ARG_POSITIONAL:
            if (!a->src) a->src = value;
            else if (!a->dst) a->dst = value;
            else return unexpected_argument(value);
            break;
        default:
            if (id >= OPT_SOURCE_FIRST) {
                if (source_option("convert", id, value, a->so) != EXIT_OK) return EXIT_USAGE;
            } else {
                a->rules[a->rule_count++] = (rule){id, value};
            }
            break;
        }
    }
    if (output && a->dst) {
        char d[4096], o[4096];
        return usage_error("convert", "DST given twice: '%s' and -o '%s'; give one of them",
                           display_name(a->dst, d, sizeof d), display_name(output, o, sizeof o));
    }
    if (output) a->dst = output;
    if (!a->src || !a->dst) return usage_error("convert", "SRC and DST are required");
    if (a->opt.prefix && (!*a->opt.prefix || strchr(a->opt.prefix, '/')))
        return usage_error("convert", "--prefix must be a non-empty file name without '/'");
    if (a->json && !a->dry_run) return usage_error("convert", "--json lists a dry run: give --dry-run too");
    if (a->dry_run && a->verify) return usage_error("convert", "--verify needs data written; a dry run writes none");
    if (a->dry_run && a->mpi) return usage_error("convert", "a dry run plans in one process: leave out --mpi");
    if (a->quiet && a->show_progress < 0) a->show_progress = 0;
    source_options_progress(a->so, a->show_progress);
    return EXIT_OK;
}

/* GGUF output of a Hugging Face model directory (config.json beside the
 * weights) is llama.cpp's conversion: the library's plan and key-values.
 * Its one option is the output dtype (--dtype without a pattern). */
static int choose_llamacpp(convert_args *a) {
    struct stat sb;
    char *config = malloc(strlen(a->src) + sizeof "/config.json");
    if (!config) return usage_error("convert", "out of memory");
    sprintf(config, "%s/config.json", a->src);
    bool model_dir = stat(a->src, &sb) == 0 && S_ISDIR(sb.st_mode) && stat(config, &sb) == 0;
    free(config);
    if (!model_dir) return EXIT_OK;
    a->llamacpp = true;
    for (size_t i = 0; i < a->rule_count; i++)
        if (a->rules[i].option != OPT_DTYPE || strchr(a->rules[i].value, '=') || i + 1 < a->rule_count)
            return usage_error("convert", "llama.cpp's conversion of a model directory takes --dtype DTYPE alone; "
                                          "give --raw to select, rename or cast tensors of your own");
    if (a->kv_file || a->opt.source_metadata || a->mpi)
        return usage_error("convert", "--gguf-kv, --source-metadata and --mpi go with --raw: llama.cpp's conversion "
                                      "writes the key-values convert_hf_to_gguf.py writes");
    return EXIT_OK;
}

/* A llama.cpp GGUF into a directory is a Hugging Face model directory:
 * the library's plan and config.json.  Its one option is the dtype. */
static int check_hf_options(const convert_args *a) {
    for (size_t i = 0; i < a->rule_count; i++)
        if (a->rules[i].option != OPT_DTYPE || strchr(a->rules[i].value, '=') || i + 1 < a->rule_count)
            return usage_error("convert", "a GGUF's conversion to a Hugging Face directory takes --dtype DTYPE alone; "
                                          "give --raw to select, rename or cast tensors of your own");
    if (a->mpi) return usage_error("convert", "a GGUF's conversion to a Hugging Face directory runs in one process");
    return EXIT_OK;
}

/* Whether SRC names a GGUF file. */
static bool gguf_source(const convert_args *a) {
    struct stat sb;
    return ckpt_format_for_path(a->src) == CKPT_FORMAT_GGUF && stat(a->src, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Step 2: the output's format, shards or splits, and what goes along. */
static int choose_output(convert_args *a) {
    ckpt_error err;
    ckpt_error_clear(&err);
    ckpt_writer_options *opt = &a->opt;
    bool to_hf = a->to && !strcmp(a->to, "hf"); /* a Hugging Face directory: safetensors and config.json */
    size_t dst_len = strlen(a->dst);
    if (to_hf && dst_len && a->dst[dst_len - 1] != '/') { /* a directory, as the destination rule reads "DST/" */
        /* ...but not a name the rule reads as a file: --to dcp refuses
         * x.safetensors, and "x.safetensors/" made a directory of that name. */
        struct stat sb;
        ckpt_format named = ckpt_format_for_path(a->dst);
        if (named && !(stat(a->dst, &sb) == 0 && S_ISDIR(sb.st_mode)))
            return usage_error("convert", "--to hf writes a Hugging Face model directory, and '%s' names a %s file: "
                                          "give a directory (a name ending in '/')", a->dst, ckpt_format_name(named));
        if (!(a->dst_dir = malloc(dst_len + 2))) return usage_error("convert", "out of memory");
        memcpy(a->dst_dir, a->dst, dst_len);
        memcpy(a->dst_dir + dst_len, "/", 2);
        a->dst = a->dst_dir;
    }
    if (to_hf) opt->format = CKPT_FORMAT_SAFETENSORS;
    else if (a->to && !(opt->format = ckpt_format_from_name(a->to)))
        return usage_error("convert", "--to takes safetensors, gguf, torch, npy, npz, flax-msgpack, dcp or hf, not '%s'",
                           a->to);
    /* The library's destination rule says what DST is (a file, its parts,
     * a directory) and in which format. */
    ckpt_format format;
    int directory;
    if (ckpt_destination_resolve(a->dst, opt, &format, &directory, &err) != CKPT_OK) return report_error(&err);
    a->dcp = format == CKPT_FORMAT_DCP;
    a->gguf = format == CKPT_FORMAT_GGUF;
    a->format = format;
    if (a->ranks && !a->dcp) return usage_error("convert", "--dcp-ranks goes with --to dcp");
    if (opt->source_metadata && !a->gguf)
        return usage_error("convert", "--source-metadata is for GGUF output (DST *.gguf); other formats always "
                                      "carry SRC's metadata");
    bool hf_dir = (to_hf || (directory && format != CKPT_FORMAT_DCP)) && !a->gguf && gguf_source(a);
    if (to_hf && !gguf_source(a)) return usage_error("convert", "--to hf converts a llama.cpp GGUF file (SRC *.gguf)");
    if (a->raw && !a->gguf && !hf_dir)
        return usage_error("convert", "--raw is for GGUF output (DST *.gguf) or a GGUF into a directory");
    a->hf = hf_dir && !a->raw; /* a GGUF of no llama.cpp model (no general.architecture) is written as it is */
    if (a->gguf && !a->raw) {
        int rc = choose_llamacpp(a);
        if (rc != EXIT_OK) return rc;
    }
    if ((a->split_size || a->split_tensors) && !a->gguf)
        return usage_error("convert", "--split-max-size and --split-max-tensors are for GGUF output (DST *.gguf)");
    if (a->dcp) {
        const char *end;
        uint64_t n = 1;
        if (a->ranks && (!parse_u64(a->ranks, &end, &n) || *end || n == 0 || n > 65536))
            return usage_error("convert", "--dcp-ranks needs a number of ranks from 1 to 65536, got '%s'", a->ranks);
        if (a->shard_size || opt->prefix || opt->checksums)
            return usage_error("convert", "--to dcp writes one file per rank: no --max-shard-size, --prefix, "
                                          "--checksums or --verify");
        ckpt_dcp_writer_options_init(&a->dcp_options);
        a->dcp_options.ranks = (uint32_t)n;
        opt->dcp = &a->dcp_options;
    } else if (a->gguf) {
        if (a->shard_size) return usage_error("convert", "GGUF output splits with --split-max-size, not --max-shard-size");
        if (a->split_size && parse_split_size(a->split_size, &opt->max_shard_size, &err) != CKPT_OK)
            return usage_error("convert", "%s", err.message);
        if (a->split_tensors) {
            const char *e;
            ckpt_gguf_writer_options_init(&a->gguf_options);
            if (!parse_u64(a->split_tensors, &e, &a->gguf_options.split_max_tensors) || *e || !a->gguf_options.split_max_tensors)
                return usage_error("convert", "--split-max-tensors needs a positive number, got '%s'", a->split_tensors);
            opt->gguf = &a->gguf_options;
        }
    } else if (a->shard_size && ckpt_parse_size(a->shard_size, &opt->max_shard_size, &err) != CKPT_OK) {
        return usage_error("convert", "%s", err.message);
    }
    /* A model directory's other files (config.json, tokenizer files, …)
     * go along into a directory destination, so that the output loads on
     * its own. */
    struct stat sb;
    if (a->extra_files && directory && !a->dcp && stat(a->src, &sb) == 0 && S_ISDIR(sb.st_mode))
        opt->copy_files_from = a->src;
    if (a->kv_file) {
        if (!(a->kv_text = read_text_file(a->kv_file))) {
            fprintf(stderr, "ckpt: %s: %s\n", a->kv_file, strerror(errno));
            return EXIT_ERROR;
        }
        opt->metadata_json = a->kv_text;
    }
    return EXIT_OK;
}

/* The command line's rules on a plan, in order (the library then turns
 * the source's block types that the output cannot hold, and no rule asked
 * for, into f32: ckpt_plan_dequantize_for).  One process and every rank of
 * an MPI job build the plan alike. */
static int apply_rules(ckpt_plan *plan, void *user, ckpt_error *err) {
    const convert_args *a = user;
    if (a->ignore_unmatched) ckpt_plan_set_flags(plan, CKPT_PLAN_IGNORE_UNMATCHED);
    int rc = EXIT_OK;
    for (size_t i = 0; i < a->rule_count && rc == EXIT_OK; i++) rc = apply_rule(plan, &a->rules[i], a->quiet, err);
    return rc;
}

/* llama.cpp's conversion: the library's plan, which carries its
 * key-values to the output (no text of them asked: a tokenizer's are
 * megabytes). */
static int llamacpp_plan(convert_args *a, ckpt_plan *plan, ckpt_error *err) {
    ckpt_dtype dtype = a->rule_count ? parse_dtype(a->rules[0].value) : CKPT_DTYPE_INVALID;
    /* q4_k_m, q6_k…: llama-quantize's mixes, which the library names */
    bool mix = a->rule_count && (dtype == CKPT_DTYPE_INVALID || (ckpt_dtype_is_block(dtype) && dtype != CKPT_Q8_0));
    ckpt_status st = mix ? ckpt_gguf_llamacpp_plan_mix(plan, a->src, a->rules[0].value, NULL, err)
                         : ckpt_gguf_llamacpp_plan(plan, a->src, dtype, NULL, err);
    if (st != CKPT_OK) return report_error(err);
    return EXIT_OK;
}

/* A GGUF's conversion to a Hugging Face directory: the library's plan. */
static int hf_plan(convert_args *a, ckpt_plan *plan, ckpt_error *err) {
    int rc = check_hf_options(a);
    if (rc != EXIT_OK) return rc;
    ckpt_dtype dtype = CKPT_DTYPE_INVALID;
    if (a->rule_count && (dtype = parse_dtype(a->rules[0].value)) == CKPT_DTYPE_INVALID)
        return usage_error("convert", "unknown dtype '%s'", a->rules[0].value);
    if (ckpt_gguf_hf_plan(plan, dtype, err) != CKPT_OK) return report_error(err);
    return EXIT_OK;
}

/* How SRC is opened: the source options and the allowed globals. */
static ckpt_catalog_options source_catalog_options(const convert_args *a) {
    ckpt_catalog_options copt = *source_options_get(a->so);
    copt.allowed_globals = a->globals;
    copt.allowed_global_count = a->global_count;
    return copt;
}

/* Step 3: SRC opened, and the plan: the identity, or the rules in order. */
static int build_plan(convert_args *a, ckpt_catalog **cat, ckpt_plan **plan) {
    ckpt_error err;
    ckpt_error_clear(&err);
    ckpt_catalog_options copt = source_catalog_options(a);
    *plan = NULL;
    if (ckpt_catalog_open_ex(a->src, &copt, cat, &err) != CKPT_OK) return report_error(&err);
    if (ckpt_plan_create(*cat, plan, &err) != CKPT_OK) {
        ckpt_catalog_close(*cat);
        return report_error(&err);
    }
    int rc = a->llamacpp ? llamacpp_plan(a, *plan, &err)
             : a->hf && ((a->to && !strcmp(a->to, "hf")) || ckpt_catalog_kv_find(*cat, "general.architecture"))
                 ? hf_plan(a, *plan, &err)
                         : apply_rules(*plan, (void *)a, &err);
    if (rc != EXIT_OK) {
        ckpt_plan_free(*plan);
        ckpt_catalog_close(*cat);
    }
    return rc;
}

/* Step 4, the dry run: what would be written, on stdout, read from the
 * library's dry-run writer. */
static int print_preview(const convert_args *a, const ckpt_writer *w, const ckpt_plan *plan) {
    uint64_t written, params;
    size_t *per_file = preview_counts(w, &written, &params);
    if (!per_file) {
        fputs("ckpt: out of memory\n", stderr);
        return EXIT_ERROR;
    }
    if (a->json) {
        print_preview_json(w, plan, per_file, written, params);
        free(per_file);
        return EXIT_OK;
    }
    size_t tensors = ckpt_writer_tensor_count(w);
    /* The tensors, as they would be written. */
    int wname = 4, wshape = 5;
    char shape[512], size[32], count[32], count2[32];
    for (size_t i = 0; i < tensors; i++) {
        ckpt_writer_tensor_info t = preview_tensor(w, i);
        int cols = text_columns(printable(t.name));
        shape_text(&t, shape, sizeof shape);
        if (cols > wname) wname = cols;
        if ((int)strlen(shape) > wshape) wshape = (int)strlen(shape);
    }
    if (wname > 60) wname = 60;
    printf("%-*s  %-11s  %-*s  %10s  %s\n", wname, "NAME", "DTYPE", wshape, "SHAPE", "SIZE", "FILE");
    uint64_t aliases = 0, bytes = ckpt_writer_total_bytes(w);
    for (size_t i = 0; i < tensors; i++) {
        ckpt_writer_tensor_info t = preview_tensor(w, i);
        const char *source = ckpt_plan_item_at(plan, i)->source->name;
        shape_text(&t, shape, sizeof shape);
        print_padded(stdout, t.name, wname);
        printf("  %-11s  %-*s  %10s  ", ckpt_dtype_name(t.dtype), wshape, shape, format_bytes(t.nbytes, size, sizeof size));
        char buf[96];
        const char *where = preview_where(w, i, &t, buf, sizeof buf);
        if (where) printf("%s", where);
        else printf("(written once, as %s)", printable(t.kept)), aliases++;
        if (strcmp(t.name, source)) printf("  (from %s)", printable(source));
        putchar('\n');
    }
    size_t nfiles = ckpt_writer_file_count(w);
    printf("\nWould write %s (%s): %s tensor%s", printable(a->dst), ckpt_format_name(ckpt_writer_format(w)),
           format_count(written, count, sizeof count), written == 1 ? "" : "s");
    if (aliases) printf(" (and %s written once for several names)", format_count(aliases, count2, sizeof count2));
    printf(", %s parameters, %s in %zu file%s:\n", format_count(params, count2, sizeof count2),
           format_bytes(bytes, size, sizeof size), nfiles, nfiles == 1 ? "" : "s");
    for (size_t f = 0; f < nfiles; f++)
        printf("  %s  %s, %s tensor%s\n", printable(ckpt_writer_file_path(w, f)),
               format_bytes(ckpt_writer_file_size(w, f), size, sizeof size), format_count(per_file[f], count, sizeof count),
               per_file[f] == 1 ? "" : "s");
    free(per_file);
    static const struct { ckpt_writer_names which; const char *note; } lists[] = {
        {CKPT_WRITER_SIDE_FILES, "index"}, {CKPT_WRITER_COPIED_FILES, "copied from SRC"},
        {CKPT_WRITER_REPLACED_FILES, "replaced: an existing checkpoint's"}};
    /* Side files lie beside the data files. */
    const char *first = nfiles ? ckpt_writer_file_path(w, 0) : "";
    const char *slash = strrchr(first, '/');
    char first_dir[4096];
    snprintf(first_dir, sizeof first_dir, "%.*s", slash ? (int)(slash - first) + 1 : 0, first);
    for (size_t l = 0; l < sizeof lists / sizeof *lists; l++)
        for (size_t k = 0; k < ckpt_writer_name_count(w, lists[l].which); k++)
            printf("  %s%s  (%s)\n", printable(first_dir), printable(ckpt_writer_name_at(w, lists[l].which, k)),
                   lists[l].note);
    printf("Dry run: nothing written.\n");
    return EXIT_OK;
}

/* Step 4: the conversion, with its progress bar. */
static int run_plan(const convert_args *a, ckpt_plan *plan, double start, double *elapsed) {
    ckpt_error err;
    ckpt_error_clear(&err);
    progress_bar bar;
    progress_start(&bar, "converting", a->show_progress);
    progress_set_final_note(&bar, a->opt.no_sync ? NULL : "syncing");
    ckpt_writer_options o = a->opt;
    o.progress = progress_update, o.user = &bar;
    ckpt_status st = ckpt_convert_plan(plan, a->dst, &o, &err);
    *elapsed = cli_now() - start;
    progress_finish(&bar, st == CKPT_OK);
    if (st == CKPT_E_CANCELLED) {
        fprintf(stderr, "ckpt: interrupted; %s left as it was\n", printable(a->dst));
        return EXIT_INTERRUPTED;
    }
    return st == CKPT_OK ? EXIT_OK : report_error(&err);
}

/* Before writing: what the conversion will write, from the library's own
 * dry run — the summary names those files, and reopens the path the
 * library says opens them (a directory, an index, a first part, a file). */
static int name_output(convert_args *a, ckpt_plan *plan) {
    ckpt_error err;
    ckpt_error_clear(&err);
    ckpt_writer *w;
    if (ckpt_convert_plan_preview(plan, a->dst, &a->opt, &w, &err) != CKPT_OK) return report_error(&err);
    size_t count = ckpt_writer_file_count(w);
    const char *first_path = count ? ckpt_writer_file_path(w, 0) : a->dst;
    const char *last_path = count ? ckpt_writer_file_path(w, count - 1) : a->dst;
    size_t cap = strlen(a->dst) + strlen(first_path) + strlen(last_path) + 16;
    a->written = malloc(cap);
    a->open_path = strdup(ckpt_writer_open_path(w));
    if (!strncmp(first_path, "./", 2) && strncmp(a->dst, "./", 2)) first_path += 2; /* as DST names its directory */
    if (a->written && ckpt_writer_is_directory(w))
        snprintf(a->written, cap, "%s%s", a->dst, a->dst[strlen(a->dst) - 1] == '/' ? "" : "/");
    else if (a->written && count > 1) /* split parts: the first and the last */
        snprintf(a->written, cap, "%s … %s", first_path, strrchr(last_path, '/') ? strrchr(last_path, '/') + 1 : last_path);
    else if (a->written) /* the file DST names */
        snprintf(a->written, cap, "%s", a->dst);
    ckpt_writer_free(w);
    if (!a->written || !a->open_path) {
        fputs("ckpt: out of memory\n", stderr);
        return EXIT_ERROR;
    }
    return EXIT_OK;
}

/* Step 5: the summary line, and --verify. */
static int report(const convert_args *a, double elapsed) {
    if (a->quiet && !a->verify) return EXIT_OK;
    ckpt_error err;
    ckpt_error_clear(&err);
    /* What was written, as a reader sees it. */
    ckpt_catalog *out = NULL;
    ckpt_catalog_options local; /* the output is local: read as the source was (--direct) */
    ckpt_catalog_options_init(&local);
    local.io = a->so->catalog.io;
    ckpt_status st = ckpt_catalog_open_ex(a->open_path, &local, &out, &err);
    if (st != CKPT_OK) return report_error(&err);
    if (!a->quiet) {
        uint64_t bytes = 0;
        size_t n = ckpt_catalog_tensor_count(out);
        for (size_t i = 0; i < n; i++) bytes += ckpt_catalog_tensor(out, i)->nbytes;
        char where[8192];
        snprintf(where, sizeof where, "to %s", printable(a->written));
        print_summary("wrote", n, bytes, ckpt_catalog_file_count(out), where, elapsed);
    }
    if (a->verify) {
        /* Re-read the committed output from disk against its checksums. */
        ckpt_verify_report r = {.size = sizeof r};
        st = ckpt_verify(out, NULL, &r, &err);
        if (st == CKPT_OK && !a->quiet)
            fprintf(stderr, "ckpt: verified %zu tensors in %s\n", r.tensor_digests, printable(a->written));
    }
    ckpt_catalog_close(out);
    return st == CKPT_OK ? EXIT_OK : report_error(&err);
}

static int run_convert(convert_args *a, int argc, char **argv) {
    int rc = parse_args(argc, argv, a);
    if (rc != EXIT_OK || a->help) {
        if (a->help) print_usage(stdout, convert_usage), fputs(source_options_help, stdout);
        return rc;
    }
    double start = cli_now(), elapsed = 0;
    if ((rc = choose_output(a)) != EXIT_OK) return rc;
    if (a->llamacpp && !a->dry_run && mpi_env_ranks() > 1)
        return usage_error("convert", "llama.cpp's conversion runs in one process; under mpirun give --raw");
    if (a->mpi || (!a->dry_run && mpi_env_ranks() > 1)) { /* many ranks: cli/mpi.c */
        ckpt_catalog_options copt = source_catalog_options(a);
        return convert_mpi(a->src, a->dst, &copt, &a->opt, a->show_progress, apply_rules, a);
    }
    ckpt_catalog *cat;
    ckpt_plan *plan;
    if ((rc = build_plan(a, &cat, &plan)) != EXIT_OK) return rc;
    if (a->dry_run) {
        ckpt_error err;
        ckpt_error_clear(&err);
        ckpt_writer *w = NULL;
        rc = ckpt_convert_plan_preview(plan, a->dst, &a->opt, &w, &err) == CKPT_OK ? print_preview(a, w, plan)
                                                                                   : report_error(&err);
        ckpt_writer_free(w);
    } else {
        rc = name_output(a, plan);
        if (rc == EXIT_OK) rc = run_plan(a, plan, start, &elapsed);
    }
    ckpt_plan_free(plan);
    ckpt_catalog_close(cat);
    return rc == EXIT_OK && !a->dry_run ? report(a, elapsed) : rc;
}

int cmd_convert(int argc, char **argv) {
    source_options so;
    source_options_init(&so);
    convert_args a = {.show_progress = -1, .extra_files = true, .so = &so};
    ckpt_writer_options_init(&a.opt);
    a.rules = calloc((size_t)argc, sizeof *a.rules); /* room for one rule and one global per argument */
    a.globals = calloc((size_t)argc, sizeof *a.globals);
    int rc = EXIT_ERROR;
    if (!a.rules || !a.globals) fputs("ckpt: out of memory\n", stderr);
    else rc = run_convert(&a, argc, argv);
    free(a.rules);
    free(a.globals);
    free(a.kv_text);
    free(a.dst_dir);
    free(a.written);
    free(a.open_path);
    source_options_free(&so);
    return rc;
}
