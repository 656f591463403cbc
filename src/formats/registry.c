/* registry.c — every format ckpt reads, and how a directory names its
 * checkpoint.  A new format is its own file and one line in `formats`
 * (plus its file names in `dir_names` if a directory can hold it). */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "../io/file.h"
#include "dcp.h"
#include "format.h"
#include "gguf.h"
#include "output.h"

static const ckpt__format *const formats[] = {
    &ckpt__format_distcp, /* before the torch zip its first item looks like */
    &ckpt__format_index,
    &ckpt__format_npz, /* before torch: both are ZIP archives; an .npz holds .npy members */
    &ckpt__format_torch_zip,
    &ckpt__format_torch_legacy,
    &ckpt__format_torch_tar,
    &ckpt__format_gguf,
    &ckpt__format_npy,
    &ckpt__format_flax_msgpack,
    &ckpt__format_dcp,
    &ckpt__format_dcp_hf, /* before safetensors: a safetensors file whose header says it is a DCP shard */
    &ckpt__format_safetensors, /* last: what nothing else claims is read, and judged, as safetensors */
};

const ckpt__format *ckpt__format_probe(const unsigned char *head, size_t n, const char *name) {
    const ckpt__format *best = NULL;
    int best_score = CKPT__PROBE_NO;
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        int score = formats[i]->probe(head, n, name);
        if (score > best_score) best = formats[i], best_score = score;
    }
    return best;
}

/* A directory's checkpoint, in order of preference: an exact name,
 * "*suffix" matching exactly one file (the Hugging Face layout prefers
 * safetensors, as transformers does), or "@glob" matching one or more
 * files, the first in name order standing for the set. */
static const char *const dir_names[] = {
    ".metadata", /* torch.distributed.checkpoint */
    "model.safetensors.index.json", "*.safetensors.index.json",
    "model.safetensors",
    "@shard-[0-9][0-9][0-9][0-9][0-9]-model-*.safetensors", /* DCP's Hugging Face storage layer, one file per rank */
    "*.safetensors",
    "pytorch_model.bin.index.json", "*.bin.index.json",
    "pytorch_model.bin",            "*.bin",
    "*.gguf",
    "flax_model.msgpack.index.json", "flax_model.msgpack",          "*.msgpack",
    "*.npz",                        "*.npy",
};

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The one file of `names` matching dir_names' "*suffix" (or, with `glob`,
 * "@glob": the first of those matching) into *match (malloc'ed); NULL when
 * none does.  gguf-split parts: the first one stands for them all.  More
 * than one match is CKPT_E_UNKNOWN_FORMAT. */
static ckpt_status match_listed(const char *dir, char *const *names, size_t count, const char *want, char **match,
                                ckpt_error *err) {
    const char *suffix = want + 1;
    bool glob = want[0] == '@';
    const char *one = NULL, *first_part = NULL;
    int matches = 0, first_parts = 0;
    for (size_t i = 0; i < count; i++) { /* names are sorted: a glob's first match is the set's */
        const char *name = names[i];
        if (glob ? fnmatch(suffix, name, 0) != 0 : !ends_with(name, suffix)) continue;
        if (!matches++) one = name;
        if (!glob && strcmp(suffix, ".gguf") == 0 && ckpt__gguf_is_split_name(name) &&
            strstr(name + strlen(name) - 20, "-00001-of-") && !first_parts++)
            first_part = name;
    }
    if (matches > 1 && first_parts == 1) one = first_part, matches = 1;
    *match = NULL;
    if (matches > 1 && !glob)
        return ckpt__fail(err, CKPT_E_UNKNOWN_FORMAT, dir, NULL, -1,
                          "directory holds %d '*%s' files and no model.safetensors.index.json; "
                          "open one of them, or its index",
                          matches, suffix);
    if (matches && !(*match = ckpt__strdup(one))) return ckpt__oom(err, dir, NULL);
    return CKPT_OK;
}

ckpt_status ckpt__format_find_in_dir(const char *dir, const ckpt__source_options *o, const ckpt__beneath *root,
                                     char **found, ckpt_error *err) {
    *found = NULL;
    /* A remote "directory" (a URL ending in '/') cannot be listed: only
     * the exact names are tried, each with one request.  A local one is
     * listed once, through the descriptor its files are opened beneath: an
     * exact name counts whatever it is (a symbolic link, a FIFO: opening
     * it says whether it may be read). */
    bool remote = ckpt__source_is_remote_name(dir), listed = false;
    char **names = NULL, *match = NULL;
    size_t count = 0;
    ckpt_status st = CKPT_OK;
    for (size_t step = 0; st == CKPT_OK && !match && step < sizeof dir_names / sizeof dir_names[0]; step++) {
        const char *want = dir_names[step];
        if (want[0] != '*' && want[0] != '@') {
            char *p = ckpt__path_join(dir, want);
            if (!p) st = ckpt__oom(err, dir, NULL);
            else if (remote ? ckpt__source_stat(p, o) == CKPT__NAME_FILE : ckpt__beneath_has(root, want)) match = p;
            else free(p);
            continue;
        }
        if (!remote && !listed) /* listed once, when a pattern needs it (an exact name needs no read permission) */
            listed = (st = ckpt__beneath_list(root, dir, &names, &count, err)) == CKPT_OK;
        if (listed && (st = match_listed(dir, names, count, want, &match, err)) == CKPT_OK && match) {
            char *p = ckpt__path_join(dir, match);
            free(match);
            match = p;
            if (!p) st = ckpt__oom(err, dir, NULL);
        }
    }
    ckpt__beneath_free_names(names, count);
    if (st || match) {
        *found = match;
        return st;
    }
    if (remote)
        return ckpt__fail(err, CKPT_E_NOT_FOUND, dir, NULL, -1,
                          "no model.safetensors.index.json, model.safetensors, pytorch_model.bin.index.json or "
                          "pytorch_model.bin under this URL (remote directories cannot be listed: name the file)");
    return ckpt__fail(err, CKPT_E_NOT_FOUND, dir, NULL, -1,
                      "directory holds no checkpoint ckpt reads (*.safetensors, *.bin, an index of them, *.gguf, "
                      "*.msgpack, *.npz, *.npy, or a torch.distributed.checkpoint .metadata)");
}

const char *ckpt_format_name(ckpt_format format) {
    switch (format) {
    case CKPT_FORMAT_SAFETENSORS: return "safetensors";
    case CKPT_FORMAT_SAFETENSORS_SHARDED: return "safetensors-sharded";
    case CKPT_FORMAT_TORCH: return "torch";
    case CKPT_FORMAT_TORCH_SHARDED: return "torch-sharded";
    case CKPT_FORMAT_GGUF: return "gguf";
    case CKPT_FORMAT_NPY: return "npy";
    case CKPT_FORMAT_NPZ: return "npz";
    case CKPT_FORMAT_FLAX_MSGPACK: return "flax-msgpack";
    case CKPT_FORMAT_DCP: return "dcp";
    }
    return NULL;
}

/* The formats ckpt writes. */
static const ckpt__output_format *const writer_formats[] = {
    &ckpt__output_safetensors,
    &ckpt__output_gguf,
    &ckpt__output_npz,
    &ckpt__output_flax_msgpack,
    &ckpt__output_dcp,
};

const ckpt__output_format *ckpt__output_format_for(ckpt_format id) {
    for (size_t i = 0; i < sizeof writer_formats / sizeof writer_formats[0]; i++)
        if (writer_formats[i]->id == id) return writer_formats[i];
    return NULL;
}

bool ckpt__output_owns_any(const char *name) {
    for (size_t i = 0; i < sizeof writer_formats / sizeof writer_formats[0]; i++)
        if (writer_formats[i]->owns(NULL, name)) return true;
    return false;
}
