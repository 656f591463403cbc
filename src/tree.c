/* tree.c — a torch file's object tree, as a conversion records it: only
 * when it says something that the tensors' names do not (values that are
 * not tensors, tuples, lists, sets, keys that are not strings), with the
 * tensors the plan dropped taken out and the ones it renamed renamed.
 * Under select and exclude rules, a dict entry whose tensors the plan all
 * dropped goes with them (an optimizer's hyper-parameters with its state),
 * and an entry that holds no tensor stays when the rules, applied to its
 * dotted name as to a tensor's, keep it: `--select 'model.*'` exports the
 * model (as the hub would save the model's state dict alone) and drops a
 * step counter beside it, `--exclude 'optim.*'` keeps that counter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog_internal.h"
#include "formats/json.h"
#include "plan_internal.h"
#include "tree_internal.h"

typedef struct emitter {
    const ckpt_plan *plan;
    const ckpt__json_doc *doc;
    ckpt__buf out;
    bool meaningful;
    int module_state; /* inside a state dict's _metadata (module versions) */
    ckpt__buf path;   /* the dotted name of the value being emitted (as the torch reader names tensors) */
} emitter;

/* Appends a name part to the path; returns the length to go back to. */
static size_t path_push(emitter *e, const char *part, size_t n) {
    size_t saved = e->path.len;
    if (saved) ckpt__buf_append(&e->path, ".", 1);
    ckpt__buf_append(&e->path, part, n);
    return saved;
}

static void path_pop(emitter *e, size_t saved) {
    e->path.len = saved;
    if (e->path.data) e->path.data[saved] = '\0';
}

/* The value of member `key` of object node i, or 0. */
static size_t member(const ckpt__json_doc *d, size_t i, const char *key) {
    size_t k = i + 1;
    for (uint32_t m = 0; m < d->nodes[i].count; m++) {
        const ckpt__json_node *name = &d->nodes[k];
        if (!strcmp(name->str, key)) return k + 1;
        k = d->nodes[name->end].end;
    }
    return 0;
}

/* The new name of a tensor the plan keeps, or NULL. */
static const char *kept_name(const ckpt_plan *p, const char *name) {
    const ckpt_tensor_info *t = ckpt_catalog_find(p->catalog, name);
    if (!t) return NULL;
    size_t i = ckpt__catalog_index_of(p->catalog, t);
    return p->entries[i].selected ? p->entries[i].pub.name : NULL;
}

static void emit(emitter *e, size_t i, int depth);

/* The raw text of node i (scalars), as it was in the document. */
static void emit_scalar(emitter *e, size_t i) {
    const ckpt__json_node *n = &e->doc->nodes[i];
    switch (n->kind) {
    case CKPT__JSON_NULL: ckpt__buf_puts(&e->out, "null"); break;
    case CKPT__JSON_TRUE: ckpt__buf_puts(&e->out, "true"); break;
    case CKPT__JSON_FALSE: ckpt__buf_puts(&e->out, "false"); break;
    case CKPT__JSON_NUMBER: ckpt__buf_append(&e->out, n->str, n->len); break;
    default: ckpt__buf_json_string(&e->out, n->str); break;
    }
}

/* Whether node i is a tensor the plan drops. */
static bool dropped(emitter *e, size_t i) {
    const ckpt__json_doc *d = e->doc;
    if (d->nodes[i].kind != CKPT__JSON_OBJECT || d->nodes[i].count != 1) return false;
    size_t v = member(d, i, "__tensor__");
    return v && d->nodes[v].kind == CKPT__JSON_STRING && !kept_name(e->plan, d->nodes[v].str);
}

/* A dict key like "0": a dict, where names split at dots would give a list. */
static bool all_digits(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

/* Counts the tensors under node i, and those of them the plan keeps. */
static void count_tensors(emitter *e, size_t i, int depth, size_t *all, size_t *kept) {
    const ckpt__json_doc *d = e->doc;
    const ckpt__json_node *n = &d->nodes[i];
    if (depth > 256) return;
    if (n->kind == CKPT__JSON_OBJECT) {
        size_t v = member(d, i, "__tensor__");
        if (v && d->nodes[v].kind == CKPT__JSON_STRING) {
            ++*all;
            *kept += kept_name(e->plan, d->nodes[v].str) != NULL;
            return;
        }
    }
    if (n->kind != CKPT__JSON_OBJECT && n->kind != CKPT__JSON_ARRAY) return;
    for (size_t k = i + 1; k < n->end; k = d->nodes[k].end) count_tensors(e, k, depth + 1, all, kept);
}

/* Whether the plan leaves out a dict entry's value as a whole (see the top):
 * tensors, all dropped; or no tensor, and a name the select and exclude
 * rules do not keep. */
static bool left_out(emitter *e, size_t value) {
    const ckpt_plan *p = e->plan;
    if (!p->rule_count) return false;
    size_t all = 0, kept = 0;
    count_tensors(e, value, 0, &all, &kept);
    return all ? kept == 0 : !ckpt__plan_selects_name(p, e->path.data ? e->path.data : "");
}

static void emit_array(emitter *e, size_t i, int depth, bool tensors_to_null) {
    const ckpt__json_doc *d = e->doc;
    ckpt__buf_puts(&e->out, "[");
    size_t k = i + 1;
    for (uint32_t m = 0; m < d->nodes[i].count; m++) {
        if (m) ckpt__buf_puts(&e->out, ", ");
        char index[24];
        size_t saved = path_push(e, index, (size_t)snprintf(index, sizeof index, "%u", m));
        if (tensors_to_null && dropped(e, k)) ckpt__buf_puts(&e->out, "null");
        else emit(e, k, depth + 1);
        path_pop(e, saved);
        k = d->nodes[k].end;
    }
    ckpt__buf_puts(&e->out, "]");
}

/* {"__dict__": [[key, value], …], "__state__": …} without dropped tensors. */
static void emit_dict(emitter *e, size_t i, int depth) {
    const ckpt__json_doc *d = e->doc;
    size_t items = member(d, i, "__dict__"), state = member(d, i, "__state__");
    ckpt__buf_puts(&e->out, "{\"__dict__\": [");
    bool first = true;
    size_t k = items + 1;
    for (uint32_t m = 0; d->nodes[items].kind == CKPT__JSON_ARRAY && m < d->nodes[items].count; m++) {
        size_t pair = k;
        k = d->nodes[k].end;
        if (d->nodes[pair].kind != CKPT__JSON_ARRAY || d->nodes[pair].count != 2) continue;
        size_t key = pair + 1, value = d->nodes[key].end;
        const ckpt__json_node *kn = &d->nodes[key];
        /* the key as the torch reader names it: a string, an int's digits, True/False */
        const char *part = kn->kind == CKPT__JSON_TRUE ? "True" : kn->kind == CKPT__JSON_FALSE ? "False" : kn->str;
        size_t saved = path_push(e, part ? part : "", part == kn->str ? kn->len : part ? strlen(part) : 0);
        bool skip = dropped(e, value) || (!e->module_state && left_out(e, value));
        if (!skip) {
            if ((kn->kind != CKPT__JSON_STRING || all_digits(kn->str)) && !e->module_state) e->meaningful = true;
            ckpt__buf_puts(&e->out, first ? "[" : ", [");
            first = false;
            emit_scalar(e, key);
            ckpt__buf_puts(&e->out, ", ");
            emit(e, value, depth + 1);
            ckpt__buf_puts(&e->out, "]");
        }
        path_pop(e, saved);
    }
    ckpt__buf_puts(&e->out, "]");
    if (state) {
        /* A state dict's OrderedDict carries _metadata (module versions),
         * which a flat dict of tensors drops: it alone says nothing. */
        size_t meta = d->nodes[state].kind == CKPT__JSON_OBJECT ? member(d, state, "__dict__") : 0;
        bool module = meta && d->nodes[meta].count == 1 && d->nodes[meta + 1].count == 2 &&
                      d->nodes[meta + 2].kind == CKPT__JSON_STRING && !strcmp(d->nodes[meta + 2].str, "_metadata");
        ckpt__buf_puts(&e->out, ", \"__state__\": ");
        e->module_state += module;
        size_t saved = path_push(e, "__state__", 9);
        emit(e, state, depth + 1);
        path_pop(e, saved);
        e->module_state -= module;
    }
    ckpt__buf_puts(&e->out, "}");
}

static void emit(emitter *e, size_t i, int depth) {
    const ckpt__json_doc *d = e->doc;
    const ckpt__json_node *n = &d->nodes[i];
    if (n->kind != CKPT__JSON_OBJECT) {
        if (!e->module_state) e->meaningful = true;
        if (n->kind == CKPT__JSON_ARRAY) emit_array(e, i, depth, true);
        else emit_scalar(e, i);
        return;
    }
    size_t v;
    if ((v = member(d, i, "__tensor__")) && d->nodes[v].kind == CKPT__JSON_STRING) {
        const char *name = kept_name(e->plan, d->nodes[v].str);
        ckpt__buf_puts(&e->out, "{\"__tensor__\": ");
        ckpt__buf_json_string(&e->out, name ? name : d->nodes[v].str);
        ckpt__buf_puts(&e->out, "}");
        return;
    }
    if (member(d, i, "__dict__")) {
        emit_dict(e, i, depth);
        return;
    }
    if (!e->module_state) e->meaningful = true;
    /* Tuples, sets, calls, shards, special scalars: members as they are,
     * their arrays filtered. */
    ckpt__buf_puts(&e->out, "{");
    size_t k = i + 1;
    for (uint32_t m = 0; m < n->count; m++) {
        size_t key = k, value = d->nodes[key].end;
        k = d->nodes[value].end;
        if (m) ckpt__buf_puts(&e->out, ", ");
        ckpt__buf_json_string(&e->out, d->nodes[key].str);
        ckpt__buf_puts(&e->out, ": ");
        if (d->nodes[value].kind == CKPT__JSON_ARRAY) emit_array(e, value, depth, true);
        else emit(e, value, depth + 1);
    }
    ckpt__buf_puts(&e->out, "}");
}

ckpt_status ckpt__tree_for_plan(const ckpt_plan *p, const char *tree_json, char **out, ckpt_error *err) {
    *out = NULL;
    if (!tree_json) return CKPT_OK;
    size_t len = strlen(tree_json), at;
    const char *why;
    char *text = ckpt__malloc(len + 1);
    if (!text) return ckpt__oom(err, NULL, "the object tree");
    memcpy(text, tree_json, len + 1);
    ckpt__json_doc doc;
    ckpt_status st = ckpt__json_parse(text, len, &doc, &at, &why);
    if (st == CKPT_E_NO_MEMORY) {
        free(text);
        return ckpt__oom(err, NULL, "the object tree");
    }
    if (st) { /* deeper than the JSON reader nests: kept as the catalog has it */
        free(text);
        *out = ckpt__strdup(tree_json);
        return *out ? CKPT_OK : ckpt__oom(err, NULL, "the object tree");
    }
    emitter e = {.plan = p, .doc = &doc};
    emit(&e, 0, 0);
    ckpt__json_free(&doc);
    free(e.path.data);
    free(text);
    if (e.out.failed) {
        free(e.out.data);
        return ckpt__oom(err, NULL, "the object tree");
    }
    if (e.meaningful) *out = e.out.data;
    else free(e.out.data);
    return CKPT_OK;
}
