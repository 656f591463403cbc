/* registry.c — every format ckpt reads, and how a directory names its
 * checkpoint; every format ckpt writes, and the destination rule that
 * picks one from a path.  A new format is its own file and one line in
 * `formats` (plus its file names in `dir_names` if a directory can hold
 * it); a new output format one line in `writer_formats` (its suffixes and
 * layouts are declared in its own file). */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../base/cursor.h"
#include "../io/file.h"
#include "../io/source.h"
#include "dcp.h"
#include "format.h"
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

/* What people are told about each format ckpt reads, in the order help
 * texts list them: its title (errors list the titles), the line
 * ckpt_format_description gives ("title: which files"), and the output
 * format that writes it (writer_formats below say whether one does). */
static const struct format_text {
    ckpt_format id;
    const char *name, *title, *line; /* name: ckpt_format_name's */
    ckpt_format written_as;
} format_texts[] = {
#define FORMAT(id, name, title, files, written_as) {id, name, title, title ": " files, written_as}
    FORMAT(CKPT_FORMAT_SAFETENSORS, "safetensors", "safetensors", "a .safetensors file", CKPT_FORMAT_SAFETENSORS),
    FORMAT(CKPT_FORMAT_SAFETENSORS_SHARDED, "safetensors-sharded", "sharded safetensors",
           "a *.safetensors.index.json and its shards", CKPT_FORMAT_SAFETENSORS),
    FORMAT(CKPT_FORMAT_TORCH, "torch", "torch.save files (.bin, .pt, .pth)",
           "zip, legacy (before torch 1.6) and re-zipped (DEFLATE) archives, read without executing the pickle",
           CKPT_FORMAT_TORCH),
    FORMAT(CKPT_FORMAT_TORCH_SHARDED, "torch-sharded", "sharded torch files",
           "a pytorch_model.bin.index.json and its shards", CKPT_FORMAT_TORCH_SHARDED),
    FORMAT(CKPT_FORMAT_GGUF, "gguf", "GGUF", "a .gguf file, or the first of gguf-split's *-00001-of-0000N.gguf",
           CKPT_FORMAT_GGUF),
    FORMAT(CKPT_FORMAT_NPY, "npy", "NumPy .npy", "a .npy file, one array", CKPT_FORMAT_NPY),
    FORMAT(CKPT_FORMAT_NPZ, "npz", "NumPy .npz", "a .npz archive of arrays (stored or compressed)", CKPT_FORMAT_NPZ),
    FORMAT(CKPT_FORMAT_FLAX_MSGPACK, "flax-msgpack", "Flax msgpack",
           "a flax_model.msgpack (flax.serialization), or its index", CKPT_FORMAT_FLAX_MSGPACK),
    FORMAT(CKPT_FORMAT_DCP, "dcp", "torch.distributed.checkpoint", "a directory with .metadata and *.distcp",
           CKPT_FORMAT_DCP),
#undef FORMAT
};
enum { FORMAT_TEXTS = sizeof format_texts / sizeof format_texts[0] };

static const struct format_text *format_text(ckpt_format f) {
    for (size_t i = 0; i < FORMAT_TEXTS; i++)
        if (format_texts[i].id == f) return &format_texts[i];
    return NULL;
}

ckpt_format ckpt_format_at(size_t i) { return i < FORMAT_TEXTS ? format_texts[i].id : (ckpt_format)0; }

const char *ckpt_format_description(ckpt_format f) {
    const struct format_text *t = format_text(f);
    return t ? t->line : NULL;
}

int ckpt_format_writable(ckpt_format f) {
    const struct format_text *t = format_text(f);
    return t && ckpt__output_format_for(t->written_as) != NULL;
}

const ckpt__format *ckpt__format_probe(const unsigned char *head, size_t n, const char *name, int *score) {
    const ckpt__format *best = NULL;
    int best_score = CKPT__PROBE_NO;
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        int s = formats[i]->probe(head, n, name);
        if (s > best_score) best = formats[i], best_score = s;
    }
    if (score) *score = best_score;
    return best;
}

ckpt_status ckpt__format_verify(const ckpt_catalog *c, uint32_t file, ckpt__file_checks *checks, ckpt_error *err) {
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; st == CKPT_OK && i < sizeof formats / sizeof formats[0]; i++)
        if (formats[i]->verify) st = formats[i]->verify(c, file, checks, err);
    return st;
}

ckpt_format ckpt__format_id(const ckpt__format *f, const char *path) {
    if (f->id || f != &ckpt__format_index) return f->id;
    /* An index: the shards' format, as their index is usually named. */
    return strstr(path, ".msgpack.index.") ? CKPT_FORMAT_FLAX_MSGPACK
           : strstr(path, ".safetensors.index.") ? CKPT_FORMAT_SAFETENSORS_SHARDED
                                                  : CKPT_FORMAT_TORCH_SHARDED;
}

/* ---- files that no format claims ------------------------------------------ */

static bool starts_with(const unsigned char *head, size_t n, const char *magic, size_t len) {
    return n >= len && memcmp(head, magic, len) == 0;
}

/* Text: UTF-8 without control characters other than whitespace (a last
 * character cut by the end of `head` aside). */
static bool is_text(const unsigned char *head, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((head[i] < 0x20 && (!head[i] || !strchr("\t\n\v\f\r\033", head[i]))) || head[i] == 0x7F) return false;
    return n && ckpt__utf8_check(head, n) + 4 > n;
}

/* Text after a byte-order mark and white space starts with `word`, in any case. */
static bool text_starts_with(const unsigned char *head, size_t n, const char *word) {
    size_t i = starts_with(head, n, "\xEF\xBB\xBF", 3) ? 3 : 0;
    while (i < n && head[i] && strchr(" \t\r\n", head[i])) i++;
    return n - i >= strlen(word) && strncasecmp((const char *)head + i, word, strlen(word)) == 0;
}

/*
 * What a file that no format claims looks like ("text", "HTML, a web
 * page", "gzip-compressed data: …", …), for an error that says so instead of
 * judging it as a damaged safetensors file; NULL when it may be one (its
 * first 8 bytes a plausible header length, or its name .safetensors),
 * which safetensors' rules then judge, naming what is wrong.
 */
static const char *looks_like(const unsigned char *head, size_t n, uint64_t size, const char *name) {
    static const struct { const char *magic; size_t len; const char *what; } magics[] = {
        {"\x1F\x8B", 2, "gzip-compressed data: decompress it first"},
        {"BZh", 3, "bzip2-compressed data: decompress it first"},
        {"\xFD" "7zXZ\0", 6, "xz-compressed data: decompress it first"},
        {"\x28\xB5\x2F\xFD", 4, "zstd-compressed data: decompress it first"},
        {"7z\xBC\xAF\x27\x1C", 6, "a 7-Zip archive"},
        {"PK\3\4", 4, "a ZIP archive that is neither torch's nor NumPy's"},
        {"\x89HDF\r\n\x1A\n", 8, "HDF5, as Keras and TensorFlow save .h5 weights, which ckpt does not read"},
        {"\x7F" "ELF", 4, "an ELF executable or shared library"},
        {"%PDF", 4, "a PDF document"},
        {"\x89PNG", 4, "a PNG image"},
        {"\xFF\xD8\xFF", 3, "a JPEG image"},
    };
    if (n < 8) return NULL; /* "shorter than the 8-byte length" says it (safetensors' own error) */
    for (size_t i = 0; i < sizeof magics / sizeof magics[0]; i++)
        if (starts_with(head, n, magics[i].magic, magics[i].len)) return magics[i].what;
    if (n >= 8 && memcmp(head + 4, "TFL3", 4) == 0) return "a TensorFlow Lite model";
    if (is_text(head, n)) {
        if (text_starts_with(head, n, "version https://git-lfs"))
            return "a Git LFS pointer, not the file it stands for: git lfs pull fetches it";
        static const char *const html[] = {"<!doctype html", "<html", "<head", "<body", "<!--", "<title", "<meta"};
        for (size_t i = 0; i < sizeof html / sizeof html[0]; i++)
            if (text_starts_with(head, n, html[i])) return "HTML, a web page";
        if (text_starts_with(head, n, "<?xml")) return "XML";
        if (text_starts_with(head, n, "{") || text_starts_with(head, n, "[")) return "JSON that is no index of shards";
        return "text";
    }
    /* Binary: safetensors starts with its header's length, which is small
     * (below 2^48 even for a corrupted but real header). */
    uint64_t len = ckpt__load_le(head, n < 8 ? (unsigned)n : 8);
    size_t name_len = strlen(name);
    if (n < 8 || len < (1ULL << 48) || len <= size ||
        (name_len >= 12 && strcmp(name + name_len - 12, ".safetensors") == 0))
        return NULL;
    return "binary data of no format ckpt knows";
}

/* "safetensors, torch.save files (.bin, .pt, .pth), GGUF, …" into b. */
static void list_titles(ckpt__buf *b) {
    size_t count = 0, shown = 0;
    for (size_t i = 0; i < FORMAT_TEXTS; i++) count += !strstr(format_texts[i].title, "sharded");
    for (size_t i = 0; i < FORMAT_TEXTS; i++) {
        if (strstr(format_texts[i].title, "sharded")) continue; /* indexes are named once, below */
        ckpt__buf_puts(b, shown++ ? (shown == count ? " and " : ", ") : "");
        ckpt__buf_puts(b, format_texts[i].title);
    }
    ckpt__buf_puts(b, ", or an index of shards of them");
}

ckpt_status ckpt__format_check_unclaimed(const unsigned char *head, size_t n, uint64_t size, const char *path,
                                         ckpt_error *err) {
    const char *what = looks_like(head, n, size, ckpt__path_basename(path));
    if (!what) return CKPT_OK;
    ckpt__buf b = {0};
    ckpt__buf_puts(&b, "ckpt reads ");
    list_titles(&b);
    size_t len = strlen(path);
    /* A server's page for a directory (a listing, a repository's page):
     * the directory itself is named with a trailing '/'. */
    bool page = ckpt__source_is_remote_name(path) && len && path[len - 1] != '/' && strncmp(what, "HTML", 4) == 0;
    ckpt_status st = ckpt__fail(err, CKPT_E_UNKNOWN_FORMAT, path, NULL, -1,
                                "not a checkpoint ckpt reads (it looks like %s)%s%s%s; %s", what,
                                page ? "; if this URL is a directory, name it with a trailing '/': " : "",
                                page ? path : "", page ? "/" : "", b.failed ? "" : b.data);
    free(b.data);
    return st;
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

/* Whether a format says `name` stands for a set of files (ckpt__format's
 * first_of_set). */
static bool first_of_set(const char *name) {
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (formats[i]->first_of_set && formats[i]->first_of_set(name)) return true;
    return false;
}

/* The one file of `names` matching dir_names' "*suffix" (or, with `glob`,
 * "@glob": the first of those matching) into *match (malloc'ed); NULL when
 * none does.  A set's first file (gguf-split's parts) stands for it.  More
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
        if (!glob && first_of_set(name) && !first_parts++) first_part = name;
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

/* Whether directory `dir` of the place holds the file `file`. */
static bool place_has(const ckpt_source_ops *place, void *user, const char *dir, const char *file) {
    char *p = place ? ckpt__path_join(dir, file) : NULL;
    ckpt_source_kind kind = CKPT_SOURCE_MISSING;
    bool has = p && ckpt__source_stat_in(place, user, p, &kind, NULL) == CKPT_OK && kind == CKPT_SOURCE_FILE;
    free(p);
    return has;
}

/* The exact names tried in a directory that cannot be listed, for its
 * error: "a, b, … or z". */
static void exact_names(ckpt__buf *b) {
    const char *exact[sizeof dir_names / sizeof dir_names[0]];
    size_t n = 0;
    for (size_t i = 0; i < sizeof dir_names / sizeof dir_names[0]; i++)
        if (dir_names[i][0] != '*' && dir_names[i][0] != '@') exact[n++] = dir_names[i];
    for (size_t i = 0; i < n; i++) {
        if (i) ckpt__buf_puts(b, i + 1 == n ? " or " : ", ");
        ckpt__buf_puts(b, exact[i]);
    }
}

ckpt_status ckpt__format_find_in_dir(const ckpt_source_ops *place, void *user, const char *dir, char **found,
                                     ckpt_error *err) {
    *found = NULL;
    /* A directory that cannot be listed (a URL ending in '/') has only the
     * exact names tried, each with one question.  One that can is listed
     * once: an exact name counts whatever it is (a symbolic link, a FIFO:
     * opening it says whether it may be read). */
    bool listable = place && place->list, listed = false;
    char **names = NULL, *match = NULL;
    size_t count = 0;
    ckpt_status st = CKPT_OK;
    for (size_t step = 0; st == CKPT_OK && !match && step < sizeof dir_names / sizeof dir_names[0]; step++) {
        const char *want = dir_names[step];
        if (want[0] != '*' && want[0] != '@') {
            if (place_has(place, user, dir, want) && !(match = ckpt__path_join(dir, want))) st = ckpt__oom(err, dir, NULL);
            continue;
        }
        if (listable && !listed) /* listed once, when a pattern needs it (an exact name needs no read permission) */
            listed = (st = ckpt__source_list_in(place, user, dir, &names, &count, err)) == CKPT_OK;
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
    if (!listable) {
        ckpt__buf tried = {0};
        exact_names(&tried);
        st = ckpt__fail(err, CKPT_E_NOT_FOUND, dir, NULL, -1,
                        "no %s under this URL (remote directories cannot be listed: name the file)",
                        tried.failed || !tried.data ? "checkpoint" : tried.data);
        free(tried.data);
        return st;
    }
    if (listed && !count) /* an object store's prefix with nothing under it, or an empty directory */
        return ckpt__fail(err, CKPT_E_NOT_FOUND, dir, NULL, -1, "the directory is empty (nothing is under it)");
    return ckpt__fail(err, CKPT_E_NOT_FOUND, dir, NULL, -1,
                      "directory holds no checkpoint ckpt reads (*.safetensors, *.bin, an index of them, *.gguf, "
                      "*.msgpack, *.npz, *.npy, or a torch.distributed.checkpoint .metadata)");
}

const char *ckpt_format_name(ckpt_format format) {
    const struct format_text *t = format_text(format);
    return t ? t->name : NULL;
}

/* The formats ckpt writes, in the order the messages list them. */
static const ckpt__output_format *const writer_formats[] = {
    &ckpt__output_safetensors,
    &ckpt__output_gguf,
    &ckpt__output_torch,
    &ckpt__output_npy,
    &ckpt__output_npz,
    &ckpt__output_flax_msgpack,
    &ckpt__output_dcp,
};
#define WRITER_COUNT (sizeof writer_formats / sizeof writer_formats[0])

const ckpt__output_format *ckpt__output_format_for(ckpt_format id) {
    for (size_t i = 0; i < WRITER_COUNT; i++)
        if (writer_formats[i]->id == id) return writer_formats[i];
    return NULL;
}

ckpt_status ckpt__output_metadata_pairs(const ckpt__output_format *f, const char *json_text, char ***keys,
                                        char ***values, size_t *count, char *why, size_t why_len) {
    return (f->metadata_pairs ? f : &ckpt__output_gguf)->metadata_pairs(json_text, keys, values, count, why, why_len);
}

bool ckpt__output_owns_any(const char *name) {
    for (size_t i = 0; i < WRITER_COUNT; i++)
        if (writer_formats[i]->owns(NULL, name)) return true;
    return false;
}

/* ---- destinations ------------------------------------------------------------ */

/* Names of checkpoints that no output format writes under that name:
 * indexes (written with their shards, into a directory), DCP's parts, and
 * other frameworks' files.  A destination with one of them is refused; a
 * model directory's file with one is not copied along. */
static const char *const foreign_suffixes[] = {
    ".safetensors.index.json", ".bin.index.json", ".msgpack.index.json", ".distcp", ".ckpt", ".h5", ".hdf5",
    ".keras", ".onnx", ".pdparams", ".ot", ".tflite", ".pb",
};

static bool ends_with_nocase(const char *s, size_t n, const char *suffix) {
    size_t k = strlen(suffix);
    return n > k && strcasecmp(s + n - k, suffix) == 0;
}

/* The output format one of whose suffixes ends `name` (a file name), and
 * that suffix's length; NULL when none does. */
static const ckpt__output_format *format_by_suffix(const char *name, size_t *suffix_len) {
    size_t n = strlen(name);
    for (size_t i = 0; i < WRITER_COUNT; i++)
        for (const char *const *s = writer_formats[i]->suffixes; s && *s; s++)
            if (ends_with_nocase(name, n, *s)) {
                *suffix_len = strlen(*s);
                return writer_formats[i];
            }
    return NULL;
}

static const char *foreign_suffix(const char *name) {
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof foreign_suffixes / sizeof foreign_suffixes[0]; i++)
        if (ends_with_nocase(name, n, foreign_suffixes[i])) return foreign_suffixes[i];
    return NULL;
}

bool ckpt__checkpoint_file_name(const char *name) {
    size_t ignored;
    return format_by_suffix(name, &ignored) || foreign_suffix(name) || !strcmp(name, ".metadata");
}

/* What ckpt writes, for messages: ".safetensors (safetensors), .gguf
 * (gguf), .pt/.pth/.bin (torch), …, or a directory (a name ending in '/':
 * safetensors, dcp)". */
static void writable_list(ckpt__buf *b) {
    for (size_t i = 0, listed = 0; i < WRITER_COUNT; i++) {
        const ckpt__output_format *f = writer_formats[i];
        if (!f->suffixes || !f->suffixes[0]) continue;
        ckpt__buf_puts(b, listed++ ? ", " : "");
        for (const char *const *s = f->suffixes; *s; s++) {
            if (s != f->suffixes) ckpt__buf_puts(b, "/");
            ckpt__buf_puts(b, *s);
        }
        ckpt__buf_puts(b, " (");
        ckpt__buf_puts(b, f->name);
        ckpt__buf_puts(b, ")");
    }
    ckpt__buf_puts(b, ", or a directory (a name ending in '/':");
    for (size_t i = 0, listed = 0; i < WRITER_COUNT; i++)
        if (writer_formats[i]->layouts & CKPT__LAYOUT_DIR) {
            ckpt__buf_puts(b, listed++ ? ", " : " ");
            ckpt__buf_puts(b, writer_formats[i]->name);
        }
    ckpt__buf_puts(b, ")");
}

/* CKPT_E_INVALID_ARGUMENT naming `path`: `why`, then what ckpt writes. */
static ckpt_status refuse(ckpt_error *err, const char *path, const char *why) {
    ckpt__buf b = {0};
    writable_list(&b);
    ckpt_status st = ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1, "%s; ckpt writes %s", why,
                                b.failed || !b.data ? "" : b.data);
    free(b.data);
    return st;
}

static bool names_directory(const char *path) {
    return path[strlen(path) - 1] == '/' || ckpt__local_kind(path, NULL) == CKPT__NAME_DIR;
}

/* Rule 1: a directory of the asked format, else safetensors. */
static ckpt_status directory_destination(const char *path, const ckpt__output_format *asked, ckpt__destination *d,
                                         ckpt_error *err) {
    const ckpt__output_format *f = asked ? asked : &ckpt__output_safetensors;
    if (!(f->layouts & CKPT__LAYOUT_DIR)) {
        char why[512];
        snprintf(why, sizeof why, "names a directory, and %s output is one file%s: name the file (e.g. %s%smodel%s)",
                 f->name, f->layouts & CKPT__LAYOUT_PARTS ? " (or its split parts)" : "", path,
                 path[strlen(path) - 1] == '/' ? "" : "/", f->suffixes && f->suffixes[0] ? f->suffixes[0] : "");
        return refuse(err, path, why);
    }
    *d = (ckpt__destination){.fmt = f, .directory = true};
    return CKPT_OK;
}

/* exact_file: the one file at `path`, of the asked format, whatever its
 * name (its stem: the name without that format's suffix, if it has one). */
static ckpt_status exact_file(const char *path, const char *name, const ckpt__output_format *asked,
                              ckpt__destination *d, ckpt_error *err) {
    const ckpt__output_format *f = asked ? asked : &ckpt__output_safetensors;
    if (names_directory(path))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1, "names a directory; give a file name");
    if (!(f->layouts & CKPT__LAYOUT_FILE))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1, "%s output is a directory, not one file",
                          f->name);
    size_t suffix_len = 0;
    const ckpt__output_format *named = format_by_suffix(name, &suffix_len);
    *d = (ckpt__destination){.fmt = f, .suffix_len = named == f ? suffix_len : 0};
    return CKPT_OK;
}

/* "scheme://…": a URL, which a writer would otherwise take for a local
 * directory named "scheme:" (RFC 3986's scheme characters). */
static bool is_url(const char *path) {
    const char *p = path;
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) return false;
    while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '+' ||
           *p == '-' || *p == '.')
        p++;
    return strncmp(p, "://", 3) == 0;
}

ckpt_status ckpt__output_destination(const char *path, const ckpt_writer_options *o, ckpt__destination *d,
                                     ckpt_error *err) {
    memset(d, 0, sizeof *d);
    if (!path || !*path) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "a destination path is required");
    if (is_url(path)) {
        char shown[1024];
        ckpt_redact_name(path, shown, sizeof shown);
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, shown, NULL, -1,
                          "is a URL: ckpt reads from URLs but writes only to local paths (write here, then upload)");
    }
    const ckpt__output_format *asked = o && o->format ? ckpt__output_format_for(o->format) : NULL;
    if (o && o->format && !asked) {
        char why[128];
        snprintf(why, sizeof why, "ckpt cannot write the format %s",
                 ckpt_format_name(o->format) ? ckpt_format_name(o->format) : "(unknown)");
        return refuse(err, path, why);
    }
    const char *name = ckpt__path_basename(path);
    size_t suffix_len = 0;
    if (o && o->exact_file) return exact_file(path, name, asked, d, err);
    if (names_directory(path)) return directory_destination(path, asked, d, err);
    const ckpt__output_format *named = format_by_suffix(name, &suffix_len);
    const char *foreign = named ? NULL : foreign_suffix(name);
    char why[512];
    if (named && asked && named != asked) {
        snprintf(why, sizeof why, "names a %s file (%s), not %s output: give a name ending in %s, or a directory",
                 named->name, name + strlen(name) - suffix_len, asked->name,
                 asked->suffixes && asked->suffixes[0] ? asked->suffixes[0] : "'/'");
        return refuse(err, path, why);
    }
    if (named) {
        *d = (ckpt__destination){.fmt = named, .suffix_len = suffix_len};
        return CKPT_OK;
    }
    if (foreign) {
        snprintf(why, sizeof why, "ckpt cannot write '%s' files", foreign);
        return refuse(err, path, why);
    }
    /* Rule 4: no checkpoint suffix. */
    const ckpt__output_format *f = asked ? asked : &ckpt__output_safetensors;
    if (f->layouts & CKPT__LAYOUT_DIR) return directory_destination(path, f, d, err);
    *d = (ckpt__destination){.fmt = f};
    return CKPT_OK;
}

/* ---- the public face of formats and destinations ---------------------------- */

ckpt_format ckpt_format_for_path(const char *path) {
    size_t suffix_len;
    const ckpt__output_format *f = path ? format_by_suffix(ckpt__path_basename(path), &suffix_len) : NULL;
    return f ? f->id : (ckpt_format)0;
}

ckpt_format ckpt_format_from_name(const char *name) {
    for (int id = 1; name && ckpt_format_name((ckpt_format)id); id++)
        if (!strcasecmp(name, ckpt_format_name((ckpt_format)id))) return (ckpt_format)id;
    return (ckpt_format)0;
}
