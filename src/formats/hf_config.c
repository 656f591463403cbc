/* hf_config.c — config.json's dtype, changed in place (hf_config.h). */
#include "hf_config.h"

#include <stdlib.h>
#include <string.h>

#include "../base/json.h"

/* transformers writes the dtype as torch names it: "float32", "bfloat16",
 * "float8_e4m3fn"…; other values ("auto", a quantization's) are left. */
static bool float_dtype_name(const char *name) { return !strncmp(name, "float", 5) || !strcmp(name, "bfloat16"); }

static bool dtype_key(const ckpt__json_node *key) {
    return key->kind == CKPT__JSON_STRING && (!strcmp(key->str, "dtype") || !strcmp(key->str, "torch_dtype"));
}

bool ckpt__hf_config_set_dtype(const char *text, size_t len, const char *dtype, ckpt__buf *out) {
    char *copy = ckpt__malloc(len + 1); /* parsed in place */
    if (!copy) return false;
    memcpy(copy, text, len);
    copy[len] = '\0';
    ckpt__json_doc doc = {0};
    size_t at;
    const char *why;
    bool *is_key = NULL, changed = false;
    if (ckpt__json_parse(copy, len, &doc, &at, &why) != CKPT_OK || !(is_key = ckpt__calloc(doc.count + 1, 1))) {
        ckpt__json_free(&doc);
        free(copy);
        return false;
    }
    /* Marks every object's keys; then walks the nodes in document order
     * (byte order), so the text is copied once around the values. */
    for (size_t i = 0; i < doc.count; i++) {
        if (doc.nodes[i].kind != CKPT__JSON_OBJECT) continue;
        size_t k = i + 1;
        for (uint32_t m = 0; m < doc.nodes[i].count; m++, k = doc.nodes[k + 1].end) is_key[k] = true;
    }
    size_t done = 0; /* bytes of `text` already appended */
    for (size_t k = 0; k + 1 < doc.count; k++) {
        const ckpt__json_node *v = &doc.nodes[k + 1];
        if (!is_key[k] || !dtype_key(&doc.nodes[k]) || v->kind != CKPT__JSON_STRING || !float_dtype_name(v->str))
            continue;
        /* A name written plainly ("bfloat16", no escapes) is replaced. */
        if (v->offset + v->len + 2 > len || text[v->offset] != '"' || memcmp(text + v->offset + 1, v->str, v->len) ||
            text[v->offset + 1 + v->len] != '"')
            continue;
        ckpt__buf_append(out, text + done, v->offset - done);
        ckpt__buf_puts(out, "\"");
        ckpt__buf_puts(out, dtype);
        ckpt__buf_puts(out, "\"");
        done = v->offset + v->len + 2;
        changed = true;
    }
    if (changed) ckpt__buf_append(out, text + done, len - done);
    free(is_key);
    ckpt__json_free(&doc);
    free(copy);
    return changed;
}
