/* inspect.c — `ckpt inspect PATH [--json]`. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_gguf.h" /* GGUF key-value pairs */
#include "cli.h"

const char inspect_usage[] =
    "usage: ckpt inspect PATH [--json] [--tree-depth N] [--tree-width N] [--direct]\n"
    "                         [remote options]\n"
    "\n"
    "List every tensor of a checkpoint (name, dtype, shape, size, file) with\n"
    "totals (tensors, parameters, bytes per dtype, files) and the metadata.\n"
    "Tensors sharing bytes (tied weights, views of one torch storage) are\n"
    "counted once in the totals, which say how many are such aliases.\n"
    "Reads headers only, never tensor data.\n"
    "\n"
    "PATH is any checkpoint ckpt reads:\n" CLI_READ_FORMATS
    "(a torch.distributed.checkpoint whose tensors were saved in chunks by several\n"
    "ranks shows the ranks; the full list is in --json)\n"
    "\n"
    "The object tree of a torch, DCP or Flax file (what is not a tensor: epochs,\n"
    "optimizer settings, the nesting of dicts) is shown as an outline: 3 levels,\n"
    "10 entries of each container (\"… 40 more\"), at most 200 lines.\n"
    "\n"
    "options:\n"
    "  --json            machine-readable output on stdout (strides, storages, the\n"
    "                    whole object tree)\n"
    "  --tree-depth N    levels of the object tree's outline (0: all; default 3)\n"
    "  --tree-width N    entries shown of each container (0: all; default 10);\n"
    "                    either option lifts the 200-line limit\n"
    "  -h, --help        show this help\n";

typedef struct dtype_total {
    uint64_t tensors, params, bytes;
} dtype_total;

static void shape_text(const ckpt_tensor_info *t, char *buf, size_t cap) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (uint32_t d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %" PRIu64 : "%" PRIu64, t->shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static const char *format_name(ckpt_format f) {
    switch (f) {
    case CKPT_FORMAT_SAFETENSORS_SHARDED: return "safetensors (sharded)";
    case CKPT_FORMAT_TORCH: return "torch.save";
    case CKPT_FORMAT_TORCH_SHARDED: return "torch.save (sharded)";
    case CKPT_FORMAT_GGUF: return "GGUF";
    case CKPT_FORMAT_NPY: return "NumPy .npy";
    case CKPT_FORMAT_NPZ: return "NumPy .npz";
    case CKPT_FORMAT_FLAX_MSGPACK: return "Flax msgpack";
    case CKPT_FORMAT_DCP: return "torch.distributed.checkpoint";
    default: return "safetensors";
    }
}

static const char *format_key(ckpt_format f) {
    switch (f) {
    case CKPT_FORMAT_SAFETENSORS_SHARDED: return "safetensors-sharded";
    case CKPT_FORMAT_TORCH: return "torch";
    case CKPT_FORMAT_TORCH_SHARDED: return "torch-sharded";
    case CKPT_FORMAT_GGUF: return "gguf";
    case CKPT_FORMAT_NPY: case CKPT_FORMAT_NPZ: case CKPT_FORMAT_FLAX_MSGPACK: return ckpt_format_name(f);
    case CKPT_FORMAT_DCP: return "dcp";
    default: return "safetensors";
    }
}

/* ---- aliases: tensors whose bytes another tensor already holds ---------- */

typedef struct extent {
    uint32_t storage;
    uint64_t begin, end; /* bytes in the file: element 0 to one past the last element */
    size_t index;
} extent;

static int by_extent(const void *a, const void *b) {
    const extent *x = a, *y = b;
    if (x->storage != y->storage) return x->storage < y->storage ? -1 : 1;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end > y->end ? -1 : 1; /* the widest first */
    return x->index < y->index ? -1 : x->index > y->index;
}

/* alias[i]: the tensor whose bytes tensor i's overlap (tied weights, views
 * of one torch storage), counted in its place; NULL when tensor i counts.
 * On one storage, tensors are taken by where they start (the widest first,
 * then in file order); one that starts before the bytes taken so far end is
 * an alias.  NULL when out of memory (then nothing is an alias). */
static const ckpt_tensor_info **find_aliases(const ckpt_catalog *cat, size_t *aliases) {
    size_t n = ckpt_catalog_tensor_count(cat), count = 0;
    const ckpt_tensor_info **alias = calloc(n ? n : 1, sizeof *alias);
    extent *e = malloc((n ? n : 1) * sizeof *e);
    *aliases = 0;
    if (!alias || !e) {
        free(alias);
        free(e);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
        if (!t->numel) continue; /* holds no bytes */
        uint64_t span = t->nbytes;
        if (t->strides) { /* to one past the last element, in element units */
            uint64_t last = 0, elem = t->nbytes / t->numel;
            for (uint32_t d = 0; d < t->ndim; d++) last += (t->shape[d] - 1) * (uint64_t)(t->strides[d] > 0 ? t->strides[d] : 0);
            span = (last + 1) * elem;
        }
        e[count++] = (extent){t->storage, t->offset, t->offset + span, i};
    }
    qsort(e, count, sizeof *e, by_extent);
    for (size_t k = 0, owner = 0; k < count; k++) {
        if (k && e[k].storage == e[owner].storage && e[k].begin < e[owner].end) {
            alias[e[k].index] = ckpt_catalog_tensor(cat, e[owner].index);
            ++*aliases;
            if (e[k].end > e[owner].end) e[owner].end = e[k].end;
        } else {
            owner = k;
        }
    }
    free(e);
    return alias;
}

/* The rank that wrote a DCP file: "__<rank>_<n>.distcp", or
 * "shard-<rank + 1>-model-…" of the Hugging Face storage layer; -1. */
static long file_rank(const ckpt_catalog *cat, uint32_t file) {
    const char *name = base_name(ckpt_catalog_file_path(cat, file));
    char *end;
    if (!strncmp(name, "__", 2)) {
        long r = strtol(name + 2, &end, 10);
        return end != name + 2 && *end == '_' ? r : -1;
    }
    if (!strncmp(name, "shard-", 6)) {
        long r = strtol(name + 6, &end, 10);
        return end != name + 6 && r > 0 && !strncmp(end, "-model-", 7) ? r - 1 : -1;
    }
    return -1;
}

/* "4 chunks, ranks 0-3" for a tensor stored in several chunks, else the
 * file's name. */
static const char *where_text(const ckpt_catalog *cat, const ckpt_tensor_info *t, char *buf, size_t cap) {
    size_t n = ckpt_catalog_chunk_count(cat, t);
    if (n <= 1) return printable(base_name(ckpt_catalog_file_path(cat, t->file)));
    long lo = -1, hi = -1;
    bool ranks = true;
    for (size_t k = 0; k < n; k++) {
        ckpt_chunk_info c;
        long r = ckpt_catalog_chunk(cat, t, k, &c, NULL) == CKPT_OK ? file_rank(cat, c.file) : -1;
        if (r < 0) ranks = false;
        if (lo < 0 || r < lo) lo = r;
        if (r > hi) hi = r;
    }
    if (!ranks) snprintf(buf, cap, "%zu chunks", n);
    else if (lo == hi) snprintf(buf, cap, "%zu chunks, rank %ld", n, lo);
    else snprintf(buf, cap, "%zu chunks, ranks %ld-%ld", n, lo, hi);
    return buf;
}

static void print_chunks_json(FILE *o, const ckpt_catalog *cat, const ckpt_tensor_info *t) {
    fputs(", \"chunks\": [", o);
    for (size_t k = 0; k < ckpt_catalog_chunk_count(cat, t); k++) {
        ckpt_chunk_info c;
        if (ckpt_catalog_chunk(cat, t, k, &c, NULL) != CKPT_OK) break;
        fprintf(o, "%s{\"file\": %u, ", k ? ", " : "", c.file);
        long r = file_rank(cat, c.file);
        if (r >= 0) fprintf(o, "\"rank\": %ld, ", r);
        fputs("\"offsets\": [", o);
        for (uint32_t d = 0; d < t->ndim; d++) fprintf(o, d ? ", %" PRIu64 : "%" PRIu64, c.start[d]);
        fputs("], \"sizes\": [", o);
        for (uint32_t d = 0; d < t->ndim; d++) fprintf(o, d ? ", %" PRIu64 : "%" PRIu64, c.count[d]);
        fprintf(o, "], \"offset\": %" PRIu64 "}", c.offset);
    }
    fputs("]", o);
}

static void print_json(const ckpt_catalog *cat, const char *path, const dtype_total *totals,
                       const ckpt_tensor_info *const *alias, size_t aliases) {
    size_t n = ckpt_catalog_tensor_count(cat);
    FILE *o = stdout;
    fputs("{\n  \"path\": ", o);
    print_json_string(o, path);
    fprintf(o, ",\n  \"format\": \"%s\",\n  \"index\": ", format_key(ckpt_catalog_format(cat)));
    if (ckpt_catalog_index_path(cat)) print_json_string(o, ckpt_catalog_index_path(cat));
    else fputs("null", o);
    fputs(",\n  \"files\": [", o);
    for (size_t f = 0; f < ckpt_catalog_file_count(cat); f++) {
        fputs(f ? ", {\"path\": " : "{\"path\": ", o);
        print_json_string(o, ckpt_catalog_file_path(cat, f));
        fprintf(o, ", \"size\": %" PRIu64 "}", ckpt_catalog_file_size(cat, f));
    }
    fputs("],\n  \"metadata\": {", o);
    for (size_t i = 0; i < ckpt_catalog_metadata_count(cat); i++) {
        const char *k, *v;
        ckpt_catalog_metadata_entry(cat, i, &k, &v);
        fputs(i ? ", " : "", o);
        print_json_string(o, k);
        fputs(": ", o);
        print_json_string(o, v);
    }
    fputs("},\n", o);
    if (ckpt_catalog_kv_count(cat)) { /* GGUF: every key-value, typed */
        fputs("  \"gguf\": {", o);
        for (size_t i = 0; i < ckpt_catalog_kv_count(cat); i++) {
            const ckpt_kv *kv = ckpt_catalog_kv(cat, i);
            fputs(i ? ",\n    " : "\n    ", o);
            print_json_string(o, kv->key);
            fprintf(o, ": %s", kv->json);
        }
        fputs("\n  },\n", o);
    }
    fputs("  \"tensors\": [", o);
    uint64_t params = 0, bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
        fputs(i ? ",\n    {\"name\": " : "\n    {\"name\": ", o);
        print_json_string(o, t->name);
        fprintf(o, ", \"dtype\": \"%s\", \"shape\": [", ckpt_dtype_name(t->dtype));
        for (uint32_t d = 0; d < t->ndim; d++) fprintf(o, d ? ", %" PRIu64 : "%" PRIu64, t->shape[d]);
        fprintf(o, "], \"nbytes\": %" PRIu64 ", \"file\": %u, \"offset\": %" PRIu64 ", \"storage\": %u", t->nbytes,
                t->file, t->offset, t->storage);
        if (t->strides) {
            fputs(", \"strides\": [", o);
            for (uint32_t d = 0; d < t->ndim; d++) fprintf(o, d ? ", %" PRId64 : "%" PRId64, t->strides[d]);
            fputs("]", o);
        }
        if (t->big_endian) fputs(", \"big_endian\": true", o);
        if (alias && alias[i]) {
            fputs(", \"alias_of\": ", o);
            print_json_string(o, alias[i]->name);
        }
        if (ckpt_catalog_format(cat) == CKPT_FORMAT_DCP) print_chunks_json(o, cat, t);
        fputs("}", o);
        if (alias && alias[i]) continue; /* its bytes are counted once */
        params += t->numel;
        bytes += t->nbytes;
    }
    fprintf(o, "%s],\n  \"totals\": {\"tensors\": %zu, \"aliases\": %zu, \"parameters\": %" PRIu64
               ", \"bytes\": %" PRIu64 ", \"files\": %zu, \"by_dtype\": {",
            n ? "\n  " : "", n, aliases, params, bytes, ckpt_catalog_file_count(cat));
    bool first = true;
    for (int d = CKPT_DTYPE_COUNT - 1; d > 0; d--) {
        if (!totals[d].tensors) continue;
        fprintf(o, "%s\"%s\": {\"tensors\": %" PRIu64 ", \"parameters\": %" PRIu64 ", \"bytes\": %" PRIu64 "}",
                first ? "" : ", ", ckpt_dtype_name((ckpt_dtype)d), totals[d].tensors, totals[d].params, totals[d].bytes);
        first = false;
    }
    fputs("}}", o);
    if (ckpt_catalog_tree_json(cat)) {
        fputs(",\n  \"tree\": ", o);
        fputs(ckpt_catalog_tree_json(cat), o);
    }
    fputs("\n}\n", o);
}

/* For each storage number, the first tensor on it (to tell tensors that
 * share bytes with an earlier one).  Caller frees. */
static const ckpt_tensor_info **first_on_storage(const ckpt_catalog *cat) {
    uint32_t max = 0;
    size_t n = ckpt_catalog_tensor_count(cat);
    for (size_t i = 0; i < n; i++)
        if (ckpt_catalog_tensor(cat, i)->storage > max) max = ckpt_catalog_tensor(cat, i)->storage;
    const ckpt_tensor_info **first = calloc((size_t)max + 1, sizeof *first);
    for (size_t i = 0; first && i < n; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
        if (!first[t->storage]) first[t->storage] = t;
    }
    return first;
}

/* How much of the object tree the outline shows. */
typedef struct tree_limits {
    int depth, width;
    long lines;
} tree_limits;

static void print_table(const ckpt_catalog *cat, const char *path, const dtype_total *totals,
                        const ckpt_tensor_info *const *alias, size_t aliases, const tree_limits *limits) {
    size_t n = ckpt_catalog_tensor_count(cat), files = ckpt_catalog_file_count(cat);
    int wname = 4, wshape = 5;
    char shape[512], size[32], where[96];
    for (size_t i = 0; i < n; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
        int len = text_columns(printable(t->name));
        if (len > wname) wname = len;
        shape_text(t, shape, sizeof shape);
        len = (int)strlen(shape);
        if (len > wshape) wshape = len;
    }
    if (wname > 60) wname = 60;
    printf("%s: %s, %zu file%s\n\n", printable(path), format_name(ckpt_catalog_format(cat)), files, files == 1 ? "" : "s");
    printf("%-*s  %-11s  %-*s  %10s  %s\n", wname, "NAME", "DTYPE", wshape, "SHAPE", "SIZE", "FILE");
    uint64_t params = 0, bytes = 0;
    const ckpt_tensor_info **first = first_on_storage(cat);
    for (size_t i = 0; i < n; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
        shape_text(t, shape, sizeof shape);
        print_padded(stdout, t->name, wname);
        printf("  %-11s  %-*s  %10s  %s", ckpt_dtype_name(t->dtype), wshape, shape,
               format_bytes(t->nbytes, size, sizeof size), where_text(cat, t, where, sizeof where));
        if (first && first[t->storage] != t) printf("  (shares storage with %s)", printable(first[t->storage]->name));
        else if (t->strides) printf("  (strided view)");
        putchar('\n');
        if (alias && alias[i]) continue; /* its bytes are counted once */
        params += t->numel;
        bytes += t->nbytes;
    }
    char count[32], count2[32], note[64] = "";
    free(first);
    if (aliases)
        snprintf(note, sizeof note, " (%s alias%s: shared bytes counted once)", format_count(aliases, count, sizeof count),
                 aliases == 1 ? "" : "es");
    printf("\nTotals: %s tensor%s%s, %s parameters, %s (%s bytes) in %zu file%s\n", format_count(n, count, sizeof count),
           n == 1 ? "" : "s", note, format_count(params, count2, sizeof count2), format_bytes(bytes, size, sizeof size),
           format_count(bytes, shape, sizeof shape), files, files == 1 ? "" : "s");
    for (int d = CKPT_DTYPE_COUNT - 1; d > 0; d--) {
        if (!totals[d].tensors) continue;
        printf("  %-11s %9s tensor%s %17s parameters  %10s\n", ckpt_dtype_name((ckpt_dtype)d),
               format_count(totals[d].tensors, count, sizeof count), totals[d].tensors == 1 ? " " : "s",
               format_count(totals[d].params, count2, sizeof count2), format_bytes(totals[d].bytes, size, sizeof size));
    }
    printf("Files:\n");
    for (size_t f = 0; f < files; f++)
        printf("  %s  %s\n", printable(ckpt_catalog_file_path(cat, f)),
               format_bytes(ckpt_catalog_file_size(cat, f), size, sizeof size));
    if (ckpt_catalog_index_path(cat)) printf("Index: %s\n", printable(ckpt_catalog_index_path(cat)));
    const char *tree = ckpt_catalog_tree_json(cat);
    if (tree && tree_is_state_dict(cat, tree)) {
        printf("Object tree: a state dict (a dict of the tensors above, in order)\n");
    } else if (tree) { /* the whole object tree is in --json; here, an outline */
        printf("Object tree:\n");
        print_tree_outline(stdout, cat, tree, limits->depth, limits->width, limits->lines);
    }
    size_t m = ckpt_catalog_metadata_count(cat), kvs = ckpt_catalog_kv_count(cat);
    if (kvs) { /* GGUF: typed key-values; long arrays (the tokenizer's) summarised */
        printf("Key-values:\n");
        for (size_t i = 0; i < kvs; i++) {
            const ckpt_kv *kv = ckpt_catalog_kv(cat, i);
            if (kv->type == CKPT_KV_ARRAY && (kv->count > 8 || strlen(kv->json) > 200))
                printf("  %s: array of %" PRIu64 " %s\n", printable(kv->key), kv->count, ckpt_kv_type_name(kv->element_type));
            else if (kv->type == CKPT_KV_STRING && kv->string_len > 200)
                printf("  %s: string of %" PRIu64 " bytes: %.80s…\n", printable(kv->key), kv->string_len,
                       printable(kv->string));
            else if (kv->type == CKPT_KV_STRING)
                printf("  %s: %s\n", printable(kv->key), printable(kv->string));
            else {
                const char *v = strstr(kv->json, "\"value\": ") + 9; /* the typed JSON's value, without its '}' */
                printf("  %s (%s%s%s): %.*s\n", printable(kv->key), ckpt_kv_type_name(kv->type), kv->type == CKPT_KV_ARRAY ? " of " : "",
                       kv->type == CKPT_KV_ARRAY ? ckpt_kv_type_name(kv->element_type) : "", (int)strlen(v) - 1, v);
            }
        }
        return;
    }
    printf("Metadata:%s\n", m ? "" : " (none)");
    for (size_t i = 0; i < m; i++) {
        const char *k, *v;
        ckpt_catalog_metadata_entry(cat, i, &k, &v);
        printf("  %s: %s\n", printable(k), printable(v));
    }
}

static int run_inspect(int argc, char **argv, source_options *so) {
    enum { OPT_HELP = 1, OPT_JSON, OPT_TREE_DEPTH, OPT_TREE_WIDTH };
    static const cli_option options[] = {{"help", 'h', false, OPT_HELP},
                                         {"json", 0, false, OPT_JSON},
                                         {"tree-depth", 0, true, OPT_TREE_DEPTH},
                                         {"tree-width", 0, true, OPT_TREE_WIDTH},
                                         CLI_SOURCE_OPTIONS,
                                         {NULL, 0, 0, 0}};
    const char *path = NULL, *value;
    bool json = false;
    tree_limits limits = {3, 10, 200};
    args_parser args;
    args_init(&args, "inspect", options, argc, argv);
    for (int id; (id = args_next(&args, &value)) != ARG_END;) {
        if (id == ARG_ERROR) return EXIT_USAGE;
        if (id == OPT_HELP) {
            print_usage(stdout, inspect_usage);
            fputs(source_options_help, stdout);
            return EXIT_OK;
        }
        if (id >= OPT_SOURCE_FIRST) {
            if (source_option("inspect", id, value, so) != EXIT_OK) return EXIT_USAGE;
        } else if (id == OPT_JSON) {
            json = true;
        } else if (id == OPT_TREE_DEPTH || id == OPT_TREE_WIDTH) {
            char *end;
            long v = strtol(value, &end, 10);
            if (!*value || *end || v < 0 || v > 1000000)
                return usage_error("inspect", "--%s needs a number (0: no limit), got '%s'",
                                   id == OPT_TREE_DEPTH ? "tree-depth" : "tree-width", value);
            *(id == OPT_TREE_DEPTH ? &limits.depth : &limits.width) = (int)v;
            limits.lines = 0; /* the outline asked for: no line limit */
        } else if (path) {
            char a[4096], b[4096];
            return usage_error("inspect", "one PATH expected, got '%s' and '%s'", display_name(path, a, sizeof a),
                               display_name(value, b, sizeof b));
        } else {
            path = value;
        }
    }
    if (!path) return usage_error("inspect", "missing PATH");

    ckpt_catalog *cat;
    int opened = open_checkpoint(path, source_options_get(so), true, &cat);
    if (opened != EXIT_OK) return opened;
    char shown[4096];
    path = display_name(path, shown, sizeof shown);
    dtype_total totals[CKPT_DTYPE_COUNT] = {0};
    size_t aliases;
    const ckpt_tensor_info **alias = find_aliases(cat, &aliases);
    for (size_t i = 0; i < ckpt_catalog_tensor_count(cat); i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, i);
        totals[t->dtype].tensors++;
        if (alias && alias[i]) continue;
        totals[t->dtype].params += t->numel;
        totals[t->dtype].bytes += t->nbytes;
    }
    if (json) print_json(cat, path, totals, alias, aliases);
    else print_table(cat, path, totals, alias, aliases, &limits);
    free(alias);
    ckpt_catalog_close(cat);
    return finish_stdout();
}

int cmd_inspect(int argc, char **argv) {
    source_options so;
    source_options_init(&so);
    int rc = run_inspect(argc, argv, &so);
    source_options_free(&so);
    return rc;
}
