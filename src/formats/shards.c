/* shards.c — see shards.h. */
#include "shards.h"

#include "../io/file.h"
#include "format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t ckpt__shards_pack(const uint64_t *sizes, size_t count, uint64_t max_shard_size, uint32_t *shard_of) {
    /* Shard numbers are only known once all big tensors are seen, because a
     * big tensor takes the next number while a smaller shard stays open.
     * Record, for the open shard, which tensors it holds and number it when
     * it closes. */
    size_t shards = 0, open_first = 0;
    bool open = false;
    uint64_t open_size = 0;
    const uint32_t OPEN = UINT32_MAX;
    for (size_t i = 0; i < count; i++) {
        if (sizes[i] > max_shard_size) {
            shard_of[i] = (uint32_t)shards++;
            continue;
        }
        if (open && open_size + sizes[i] > max_shard_size) {
            for (size_t j = open_first; j < i; j++)
                if (shard_of[j] == OPEN) shard_of[j] = (uint32_t)shards;
            shards++;
            open = false;
        }
        if (!open) {
            open = true;
            open_first = i;
            open_size = 0;
        }
        shard_of[i] = OPEN;
        open_size += sizes[i];
    }
    if (open) {
        for (size_t j = open_first; j < count; j++)
            if (shard_of[j] == OPEN) shard_of[j] = (uint32_t)shards;
        shards++;
    }
    return shards;
}

char *ckpt__shard_file_name(const char *prefix, size_t index, size_t total) {
    char suffix[64] = "";
    if (total > 1) snprintf(suffix, sizeof suffix, "-%05zu-of-%05zu", index + 1, total);
    size_t n = strlen(prefix) + strlen(suffix) + sizeof ".safetensors";
    char *name = ckpt__malloc(n);
    if (name) snprintf(name, n, "%s%s.safetensors", prefix, suffix);
    return name;
}

static bool digits5(const char *s) {
    for (int i = 0; i < 5; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

bool ckpt__shards_is_own_file(const char *prefix, const char *name) {
    size_t p = strlen(prefix);
    if (strncmp(name, prefix, p) != 0) return false;
    name += p;
    if (name[0] == '-' && strlen(name) >= 15 && digits5(name + 1) && strncmp(name + 6, "-of-", 4) == 0 &&
        digits5(name + 10))
        name += 15;
    if (strncmp(name, ".safetensors", 12) != 0) return false;
    name += 12;
    return *name == '\0' || strcmp(name, ".index.json") == 0;
}

bool ckpt__shards_file_key(const char *key) {
    return !strcmp(key, "format") || !strcmp(key, CKPT_CHECKSUM_METADATA_KEY) || !strcmp(key, CKPT_CHUNK_METADATA_KEY);
}

static bool safe_relative(const char *name) {
    if (!*name || name[0] == '/') return false;
    for (const char *s = name; *s;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 2 && s[0] == '.' && s[1] == '.') return false;
        if (!e) break;
        s = e + 1;
    }
    return true;
}

/* Orders shard files by name (model-00001 before model-00002), whatever
 * order the weight map lists them in, and renumbers file_of to match. */
static void sort_files(ckpt__index *idx) {
    /* Insertion sort of a permutation: shard counts are small. */
    uint32_t *rank = ckpt__malloc((idx->file_count + 1) * sizeof *rank);
    const char **sorted = ckpt__malloc((idx->file_count + 1) * sizeof *sorted);
    if (!rank || !sorted) { /* keep first-appearance order */
        free(rank);
        free(sorted);
        return;
    }
    for (size_t i = 0; i < idx->file_count; i++) {
        size_t j = i;
        while (j > 0 && strcmp(sorted[j - 1], idx->files[i]) > 0) {
            sorted[j] = sorted[j - 1];
            j--;
        }
        sorted[j] = idx->files[i];
    }
    for (size_t i = 0; i < idx->file_count; i++)
        for (size_t j = 0; j < idx->file_count; j++)
            if (sorted[j] == idx->files[i]) rank[i] = (uint32_t)j;
    for (size_t k = 0; k < idx->count; k++) idx->file_of[k] = rank[idx->file_of[k]];
    memcpy(idx->files, sorted, idx->file_count * sizeof *sorted);
    free(rank);
    free(sorted);
}

ckpt_status ckpt__index_parse(char *text, size_t len, const char *path, ckpt__arena *arena,
                              ckpt__index *out, ckpt_error *err) {
    memset(out, 0, sizeof *out);
    size_t bad = ckpt__utf8_check((const unsigned char *)text, len);
    if (bad != len)
        return ckpt__fail(err, CKPT__D(INDEX_INVALID), path, NULL, (int64_t)bad, "index is not valid UTF-8");
    ckpt__json_doc doc;
    size_t at;
    const char *why;
    ckpt_status st = ckpt__json_parse_in(text, len, arena->budget, &doc, &at, &why);
    if (st == CKPT_E_NO_MEMORY) return ckpt__fail(err, st, path, NULL, -1, "out of memory");
    if (st == CKPT_E_LIMIT) return ckpt__fail(err, st, path, NULL, (int64_t)at, "index: %s", why);
    if (st) return ckpt__fail(err, CKPT__D(INDEX_INVALID), path, NULL, (int64_t)at, "index is not JSON: %s", why);

    const ckpt__json_node *root = &doc.nodes[0], *map = NULL;
    size_t map_index = 0;
    if (root->kind == CKPT__JSON_OBJECT) {
        size_t i = 1;
        for (uint32_t k = 0; k < root->count; k++) {
            size_t v = doc.nodes[i].end;
            if (strcmp(doc.nodes[i].str, "weight_map") == 0) map = &doc.nodes[map_index = v];
            else if (strcmp(doc.nodes[i].str, "metadata") == 0 && doc.nodes[v].kind != CKPT__JSON_OBJECT &&
                     doc.nodes[v].kind != CKPT__JSON_NULL) {
                st = ckpt__fail(err, CKPT__D(INDEX_INVALID), path, NULL, (int64_t)doc.nodes[v].offset,
                                "\"metadata\" must be an object");
                goto done;
            } else if (strcmp(doc.nodes[i].str, "metadata") == 0 && doc.nodes[v].kind == CKPT__JSON_OBJECT) {
                /* The checkpoint's own string entries (total_size, a number,
                 * is the index's bookkeeping). */
                out->meta_keys = ckpt__arena_alloc(arena, (doc.nodes[v].count + 1) * sizeof(char *));
                out->meta_values = ckpt__arena_alloc(arena, (doc.nodes[v].count + 1) * sizeof(char *));
                if (!out->meta_keys || !out->meta_values) {
                    st = ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
                    goto done;
                }
                size_t m = v + 1;
                for (uint32_t e = 0; e < doc.nodes[v].count; e++) {
                    const ckpt__json_node *key = &doc.nodes[m], *val = &doc.nodes[key->end];
                    if (val->kind == CKPT__JSON_NUMBER && !strcmp(key->str, "total_parameters"))
                        out->total_parameters = true;
                    if (val->kind == CKPT__JSON_STRING) { /* copied: they outlive the index's text */
                        const char *mk = ckpt__arena_strndup(arena, key->str, key->len);
                        const char *mv = ckpt__arena_strndup(arena, val->str, val->len);
                        if (!mk || !mv) {
                            st = ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
                            goto done;
                        }
                        out->meta_keys[out->meta_count] = mk, out->meta_values[out->meta_count++] = mv;
                    }
                    m = val->end;
                }
            }
            i = doc.nodes[v].end;
        }
    }
    if (!map || map->kind != CKPT__JSON_OBJECT) {
        st = ckpt__fail(err, CKPT__D(INDEX_INVALID), path, NULL, (int64_t)(map ? map->offset : root->offset),
                        "expected a JSON object with a \"weight_map\" object");
        goto done;
    }
    out->count = map->count;
    out->names = ckpt__arena_alloc(arena, (map->count + 1) * sizeof(char *));
    out->file_of = ckpt__malloc((map->count + 1) * sizeof(uint32_t));
    out->files = ckpt__malloc((map->count + 1) * sizeof(char *));
    ckpt__name_table names = {0}, files = {0};
    if (!out->names || !out->file_of || !out->files || !ckpt__name_table_init(&names, map->count) ||
        !ckpt__name_table_init(&files, map->count)) {
        st = ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
        goto tables;
    }
    size_t i = map_index + 1;
    for (uint32_t k = 0; k < map->count; k++) {
        const ckpt__json_node *key = &doc.nodes[i], *val = &doc.nodes[key->end];
        if (val->kind != CKPT__JSON_STRING) {
            st = ckpt__fail(err, CKPT__D(INDEX_INVALID), path, key->str, (int64_t)val->offset,
                            "weight_map values must be shard file names (strings)");
            goto tables;
        }
        if (!safe_relative(val->str) || strlen(val->str) != val->len) {
            st = ckpt__fail(err, CKPT__D(INDEX_INVALID), path, key->str, (int64_t)val->offset,
                            "shard file name '%s' must be relative and must not contain '..'", val->str);
            goto tables;
        }
        out->names[k] = key->str;
        uint32_t prev;
        if (!ckpt__name_table_insert(&names, out->names, sizeof(char *), k, &prev)) {
            st = ckpt__fail(err, CKPT__D(DUPLICATE_NAME), path, key->str, (int64_t)key->offset,
                            "tensor listed twice in weight_map");
            goto tables;
        }
        /* Consecutive entries usually name the same shard. */
        if (k > 0 && strcmp(val->str, out->files[out->file_of[k - 1]]) == 0) {
            out->file_of[k] = out->file_of[k - 1];
            i = val->end;
            continue;
        }
        out->files[out->file_count] = val->str;
        if (ckpt__name_table_insert(&files, out->files, sizeof(char *), (uint32_t)out->file_count, &prev))
            out->file_of[k] = (uint32_t)out->file_count++;
        else
            out->file_of[k] = prev;
        i = val->end;
    }
    sort_files(out);
tables:
    ckpt__name_table_free(&names);
    ckpt__name_table_free(&files);
done:
    ckpt__json_free(&doc);
    if (st) ckpt__index_free(out);
    return st;
}

void ckpt__index_free(ckpt__index *index) {
    free(index->file_of);
    free(index->files);
    index->file_of = NULL;
    index->files = NULL;
    index->count = index->file_count = 0;
}

void ckpt__index_render(ckpt__buf *out, const uint64_t *total_parameters, uint64_t total_size,
                        const char *const *meta_keys,
                        const char *const *meta_values, size_t meta_count, const char *const *names,
                        const char *const *files, size_t count) {
    ckpt__buf_puts(out, "{\n  \"metadata\": {\n    ");
    if (total_parameters) {
        ckpt__buf_puts(out, "\"total_parameters\": ");
        ckpt__buf_u64(out, *total_parameters);
        ckpt__buf_puts(out, ",\n    ");
    }
    ckpt__buf_puts(out, "\"total_size\": ");
    ckpt__buf_u64(out, total_size);
    for (size_t i = 0; i < meta_count; i++) {
        if (!strcmp(meta_keys[i], "total_size") || (total_parameters && !strcmp(meta_keys[i], "total_parameters")))
            continue;
        ckpt__buf_puts(out, ",\n    ");
        ckpt__buf_json_string_ascii(out, meta_keys[i]);
        ckpt__buf_puts(out, ": ");
        ckpt__buf_json_string_ascii(out, meta_values[i]);
    }
    ckpt__buf_puts(out, "\n  },\n  \"weight_map\": {");
    for (size_t i = 0; i < count; i++) {
        ckpt__buf_puts(out, i ? ",\n    " : "\n    ");
        ckpt__buf_json_string_ascii(out, names[i]);
        ckpt__buf_puts(out, ": ");
        ckpt__buf_json_string_ascii(out, files[i]);
    }
    ckpt__buf_puts(out, count ? "\n  }\n}" : "}\n}");
}

/* ---- the format: an index and its shards ---------------------------------- */

static int index_probe(const unsigned char *head, size_t n, const char *name) {
    (void)head, (void)n;
    size_t len = strlen(name);
    return len >= 5 && !strcmp(name + len - 5, ".json") ? CKPT__PROBE_NAME : CKPT__PROBE_NO;
}

/* Every weight_map entry must be in the shard it names; the counts then
 * tell whether a shard holds a tensor the index does not list. */
static ckpt_status check_weight_map(ckpt_catalog *c, const ckpt__index *idx, const char *index_path,
                                    ckpt_error *err) {
    for (size_t i = 0; i < idx->count; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_find(c, idx->names[i]);
        if (!t)
            return ckpt__fail(err, CKPT__D(INDEX_MISMATCH), index_path, idx->names[i], -1,
                              "weight_map puts this tensor in %s, but no shard holds it", idx->files[idx->file_of[i]]);
        if (t->file != idx->file_of[i])
            return ckpt__fail(err, CKPT__D(INDEX_MISMATCH), index_path, idx->names[i], -1,
                              "weight_map puts this tensor in %s, but it is in %s", idx->files[idx->file_of[i]],
                              ckpt_catalog_file_path(c, t->file));
    }
    size_t count = ckpt_catalog_tensor_count(c);
    if (idx->count == count) return CKPT_OK;
    ckpt__name_table listed = {0};
    if (!ckpt__name_table_init(&listed, idx->count)) return ckpt__oom(err, index_path, NULL);
    for (size_t i = 0; i < idx->count; i++) ckpt__name_table_insert(&listed, idx->names, sizeof(char *), (uint32_t)i, NULL);
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; st == CKPT_OK && i < count; i++) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(c, i);
        if (ckpt__name_table_find(&listed, idx->names, sizeof(char *), t->name) < 0)
            st = ckpt__fail(err, CKPT__D(INDEX_MISMATCH), ckpt_catalog_file_path(c, t->file), t->name, (int64_t)t->offset,
                            "tensor is in this shard but not in the index %s", index_path);
    }
    ckpt__name_table_free(&listed);
    return st;
}

static ckpt_status index_open(ckpt_catalog *c, ckpt__source *src, ckpt_error *err) {
    char *text = NULL;
    ckpt_status st = ckpt__source_slurp(src, CKPT__INDEX_MAX_BYTES, CKPT__D(INDEX_INVALID), &text, err);
    uint64_t len = src->size;
    char *index_path = ckpt__strdup(src->name);
    ckpt__source_close(src);
    if (st == CKPT_OK && !index_path) st = ckpt__oom(err, NULL, NULL);
    if (st == CKPT_OK) st = ckpt__cat_set_index_path(c, index_path, err);
    ckpt__index idx;
    bool parsed = false;
    if (st == CKPT_OK) parsed = (st = ckpt__index_parse(text, (size_t)len, index_path, ckpt__cat_arena(c), &idx, err)) == CKPT_OK;
    /* The checkpoint's metadata (ckpt.save's structure, the hub's
     * removed → kept …) before any shard's. */
    for (size_t i = 0; st == CKPT_OK && i < idx.meta_count; i++)
        st = ckpt__cat_add_checkpoint_metadata(c, idx.meta_keys[i], idx.meta_values[i], err);
    if (st == CKPT_OK && idx.total_parameters) ckpt__cat_set_index_counts_parameters(c);
    char *dir = st == CKPT_OK ? ckpt__path_dirname(index_path) : NULL;
    if (st == CKPT_OK && !dir) st = ckpt__oom(err, index_path, NULL);
    for (size_t i = 0; st == CKPT_OK && i < idx.file_count; i++) {
        char *p = ckpt__path_join(dir, idx.files[i]);
        st = p ? ckpt__cat_open_path(c, p, err) : ckpt__oom(err, index_path, NULL);
        free(p);
    }
    free(dir);
    /* transformers names Flax shards' tensors by their path joined with
     * "/" (flax_shard_checkpoint); ckpt joins with ".". */
    bool flax = st == CKPT_OK && ckpt__cat_format(c) == CKPT_FORMAT_FLAX_MSGPACK;
    for (size_t i = 0; flax && st == CKPT_OK && i < idx.count; i++) {
        char *name = ckpt__arena_strndup(ckpt__cat_arena(c), idx.names[i], strlen(idx.names[i]));
        if (!name) st = ckpt__oom(err, index_path, NULL);
        for (char *q = name; q && *q; q++)
            if (*q == '/') *q = '.';
        idx.names[i] = name;
    }
    if (st == CKPT_OK) st = check_weight_map(c, &idx, index_path, err);
    if (st == CKPT_OK && !flax)
        ckpt__cat_set_format(c, ckpt__cat_format(c) == CKPT_FORMAT_TORCH ? CKPT_FORMAT_TORCH_SHARDED
                                                                         : CKPT_FORMAT_SAFETENSORS_SHARDED);
    if (parsed) ckpt__index_free(&idx);
    free(text); /* the index's strings live in it */
    free(index_path);
    return st;
}

const ckpt__format ckpt__format_index = {"index", 0, index_probe, index_open};
