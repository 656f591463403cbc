/* tree.c — a torch file's (or a Flax document's) object tree, as a
 * conversion records it, with the tensors the plan dropped taken out and
 * the ones it renamed renamed: a torch file's whenever it is more than a
 * state dict (tensors under string keys that are their names, which the
 * hub saves with nothing beside {"format": "pt"}) — so a dict inside
 * another is recorded: in a training checkpoint's {"model": state_dict, …}
 * the tensor "model.conv1.weight" is the key "conv1.weight" of "model",
 * which no name says (`--select 'model.*' --rename model.=` leaves the
 * state dict alone, its names its keys: nothing recorded); a Flax
 * document's when its names split at dots would not rebuild it.  Either
 * is recorded for values that are not tensors, tuples, lists, sets, and
 * keys that are not strings or are all digits.
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
#include "base/json.h"
#include "plan_internal.h"
#include "tree_internal.h"

typedef struct emitter {
    const ckpt_plan *plan;
    const ckpt__json_doc *doc;
    ckpt__tree_rule rule;
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

/* The new name of a tensor the plan keeps, or NULL.  A name the catalog
 * lacks may be that of a tensor written once for several (tied weights),
 * which a converted torch file's tree still names: the hub's
 * `removed → kept` metadata says which tensor holds its bytes. */
static const char *kept_name(const ckpt_plan *p, const char *name) {
    const ckpt_tensor_info *t = ckpt_catalog_find(p->catalog, name);
    const char *kept = t ? NULL : ckpt_catalog_metadata_get(p->catalog, name);
    if (kept) t = ckpt_catalog_find(p->catalog, kept);
    if (!t) return NULL;
    size_t i = ckpt__catalog_index_of(p->catalog, t);
    return p->entries[i].selected ? p->entries[i].pub.name : NULL;
}

/* The emitter keeps the containers it is inside on a heap stack, never
 * recursing (threads may have 64 KiB stacks): one frame per open array,
 * dict or other object, saying which children are being written. */
typedef enum epart { E_ELEMENTS, E_MEMBERS, E_PAIRS, E_STATE } epart;

typedef struct eframe {
    size_t node;     /* the array, the object, or a dict's "__dict__" array */
    size_t dict;     /* E_PAIRS, E_STATE: the dict's object */
    size_t next;     /* the node of the next child */
    uint32_t done;   /* children gone through */
    size_t saved;    /* the path's length before the current child's part */
    uint8_t part;
    bool in_child;   /* a child was entered: its end comes first */
    bool pathed;     /* ... with a path part of its own */
    bool written;    /* E_PAIRS: an entry was written */
    bool module;     /* E_STATE: this state is a state dict's _metadata */
} eframe;

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

/* The name of tensor node i, or NULL when it is no tensor. */
static const char *tensor_name(const ckpt__json_doc *d, size_t i) {
    size_t v = d->nodes[i].kind == CKPT__JSON_OBJECT && d->nodes[i].count == 1 ? member(d, i, "__tensor__") : 0;
    return v && d->nodes[v].kind == CKPT__JSON_STRING ? d->nodes[v].str : NULL;
}

/* Whether node i is a tensor the plan drops. */
static bool dropped(emitter *e, size_t i) {
    const char *name = tensor_name(e->doc, i);
    return name && !kept_name(e->plan, name);
}

/* A dict key like "0": a dict, where names split at dots would give a list. */
static bool all_digits(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

/* Counts the tensors under node i, and those of them the plan keeps: the
 * nodes of its subtree in document order, a tensor's own skipped. */
static void count_tensors(emitter *e, size_t i, size_t *all, size_t *kept) {
    const ckpt__json_doc *d = e->doc;
    for (size_t k = i; k < d->nodes[i].end;) {
        size_t v = d->nodes[k].kind == CKPT__JSON_OBJECT ? member(d, k, "__tensor__") : 0;
        if (!v || d->nodes[v].kind != CKPT__JSON_STRING) {
            k++;
            continue;
        }
        ++*all;
        *kept += kept_name(e->plan, d->nodes[v].str) != NULL;
        k = d->nodes[k].end;
    }
}

/* Whether the plan leaves out a dict entry's value as a whole (see the top):
 * tensors, all dropped; or no tensor, and a name the select and exclude
 * rules do not keep. */
static bool left_out(emitter *e, size_t value) {
    const ckpt_plan *p = e->plan;
    if (!p->rule_count) return false;
    size_t all = 0, kept = 0;
    count_tensors(e, value, &all, &kept);
    return all ? kept == 0 : !ckpt__plan_selects_name(p, e->path.data ? e->path.data : "");
}

static bool push_frame(emitter *e, ckpt__stack *frames, epart part, size_t node, size_t dict) {
    eframe *f = ckpt__stack_push(frames);
    if (!f) return e->out.failed = true, false;
    *f = (eframe){.node = node, .dict = dict, .next = node + 1, .part = (uint8_t)part};
    return true;
}

/* Writes node i: a leaf whole, a container's opening (its frame pushed). */
static void open_node(emitter *e, ckpt__stack *frames, size_t i) {
    const ckpt__json_doc *d = e->doc;
    const ckpt__json_node *n = &d->nodes[i];
    size_t v;
    bool root = !frames->len;
    if (n->kind == CKPT__JSON_OBJECT && (v = member(d, i, "__tensor__")) && d->nodes[v].kind == CKPT__JSON_STRING) {
        const char *name = kept_name(e->plan, d->nodes[v].str);
        if (root) e->meaningful = true; /* torch.save of one tensor */
        ckpt__buf_puts(&e->out, "{\"__tensor__\": ");
        ckpt__buf_json_string(&e->out, name ? name : d->nodes[v].str);
        ckpt__buf_puts(&e->out, "}");
        return;
    }
    if (n->kind == CKPT__JSON_OBJECT && (v = member(d, i, "__dict__"))) {
        /* {["__class__": …, ]"__dict__": [[key, value], …], "__state__": …}
         * without dropped tensors. */
        size_t cls = member(d, i, "__class__");
        ckpt__buf_puts(&e->out, "{");
        if (cls) {
            ckpt__buf_puts(&e->out, "\"__class__\": ");
            emit_scalar(e, cls);
            ckpt__buf_puts(&e->out, ", ");
        }
        ckpt__buf_puts(&e->out, "\"__dict__\": [");
        push_frame(e, frames, E_PAIRS, v, i);
        return;
    }
    if (!e->module_state) e->meaningful = true;
    if (n->kind == CKPT__JSON_ARRAY) {
        ckpt__buf_puts(&e->out, "[");
        push_frame(e, frames, E_ELEMENTS, i, 0);
    } else if (n->kind == CKPT__JSON_OBJECT) {
        /* Tuples, sets, calls, shards, special scalars: members as they
         * are, their arrays filtered. */
        ckpt__buf_puts(&e->out, "{");
        push_frame(e, frames, E_MEMBERS, i, 0);
    } else {
        emit_scalar(e, i);
    }
}

/* Enters child `i` of frame f, under path part [part, part + n) when
 * `part` is not NULL. */
static void enter(emitter *e, ckpt__stack *frames, eframe *f, size_t i, const char *part, size_t n) {
    f->in_child = true;
    f->pathed = part != NULL;
    if (part) f->saved = path_push(e, part, n);
    if (part && f->part == E_ELEMENTS && dropped(e, i)) ckpt__buf_puts(&e->out, "null");
    else open_node(e, frames, i);
}

/* After a child: its path part goes, a dict entry closes. */
static void leave(emitter *e, eframe *f) {
    f->in_child = false;
    if (f->pathed) path_pop(e, f->saved);
    if (f->part == E_PAIRS) ckpt__buf_puts(&e->out, "]");
    if (f->part == E_STATE) e->module_state -= f->module;
}

/* Whether a dict entry's key is its tensor's name as the plan's output
 * has it, as in a state dict (else the key says what no name does).  Other
 * values answer for themselves: a dict by its entries, the rest by being
 * there (open_node). */
static bool key_is_name(emitter *e, const ckpt__json_node *key, size_t value) {
    const char *name = tensor_name(e->doc, value);
    if (!name) return true;
    name = kept_name(e->plan, name);
    return name && key->kind == CKPT__JSON_STRING && !strcmp(name, key->str);
}

/* The next dict entry the plan keeps, or the dict's state, or its end. */
static void next_pair(emitter *e, ckpt__stack *frames, eframe *f) {
    const ckpt__json_doc *d = e->doc;
    uint32_t count = d->nodes[f->node].kind == CKPT__JSON_ARRAY ? d->nodes[f->node].count : 0;
    while (f->done < count) {
        size_t pair = f->next;
        f->next = d->nodes[pair].end;
        f->done++;
        if (d->nodes[pair].kind != CKPT__JSON_ARRAY || d->nodes[pair].count != 2) continue;
        size_t key = pair + 1, value = d->nodes[key].end;
        const ckpt__json_node *kn = &d->nodes[key];
        /* the key as the torch reader names it: a string, an int's digits, True/False */
        const char *part = kn->kind == CKPT__JSON_TRUE ? "True" : kn->kind == CKPT__JSON_FALSE ? "False" : kn->str;
        size_t saved = path_push(e, part ? part : "", part == kn->str ? kn->len : part ? strlen(part) : 0);
        bool skip = dropped(e, value) || (!e->module_state && left_out(e, value));
        path_pop(e, saved);
        if (skip) continue;
        if ((kn->kind != CKPT__JSON_STRING || all_digits(kn->str)) && !e->module_state) e->meaningful = true;
        if (e->rule == CKPT__TREE_UNLESS_STATE_DICT && !e->module_state && !e->meaningful)
            e->meaningful = !key_is_name(e, kn, value);
        ckpt__buf_puts(&e->out, f->written ? ", [" : "[");
        f->written = true;
        emit_scalar(e, key);
        ckpt__buf_puts(&e->out, ", ");
        enter(e, frames, f, value, part ? part : "", part == kn->str ? kn->len : part ? strlen(part) : 0);
        return;
    }
    ckpt__buf_puts(&e->out, "]");
    size_t state = member(d, f->dict, "__state__");
    if (!state) {
        ckpt__buf_puts(&e->out, "}");
        ckpt__stack_pop(frames);
        return;
    }
    /* A state dict's OrderedDict carries _metadata (module versions),
     * which a flat dict of tensors drops: it alone says nothing. */
    size_t meta = d->nodes[state].kind == CKPT__JSON_OBJECT ? member(d, state, "__dict__") : 0;
    f->module = meta && d->nodes[meta].count == 1 && d->nodes[meta + 1].count == 2 &&
                d->nodes[meta + 2].kind == CKPT__JSON_STRING && !strcmp(d->nodes[meta + 2].str, "_metadata");
    ckpt__buf_puts(&e->out, ", \"__state__\": ");
    e->module_state += f->module;
    f->part = E_STATE;
    enter(e, frames, f, state, "__state__", 9);
}

/* One step of the top frame: the end of the child it entered, then its
 * next child, or its closing (the frame popped). */
static void step(emitter *e, ckpt__stack *frames) {
    const ckpt__json_doc *d = e->doc;
    eframe *f = ckpt__stack_top(frames);
    if (f->in_child) leave(e, f);
    const ckpt__json_node *n = &d->nodes[f->node];
    if (f->part == E_PAIRS) {
        next_pair(e, frames, f);
    } else if (f->part == E_STATE) {
        ckpt__buf_puts(&e->out, "}");
        ckpt__stack_pop(frames);
    } else if (f->done == n->count) {
        ckpt__buf_puts(&e->out, f->part == E_ELEMENTS ? "]" : "}");
        ckpt__stack_pop(frames);
    } else if (f->part == E_ELEMENTS) {
        char index[24];
        size_t i = f->next, len = (size_t)snprintf(index, sizeof index, "%u", f->done);
        if (f->done++) ckpt__buf_puts(&e->out, ", ");
        f->next = d->nodes[i].end;
        enter(e, frames, f, i, index, len);
    } else { /* E_MEMBERS: "key": value, an array's tensors filtered */
        size_t key = f->next, value = d->nodes[key].end;
        f->next = d->nodes[value].end;
        if (f->done++) ckpt__buf_puts(&e->out, ", ");
        ckpt__buf_json_string(&e->out, d->nodes[key].str);
        ckpt__buf_puts(&e->out, ": ");
        enter(e, frames, f, value, NULL, 0);
    }
}

/* Writes the tree from node 0. */
static void emit(emitter *e) {
    ckpt__stack frames = CKPT__STACK(eframe);
    open_node(e, &frames, 0);
    while (frames.len && !e->out.failed) step(e, &frames);
    ckpt__stack_free(&frames);
}

ckpt_status ckpt__tree_for_plan(const ckpt_plan *p, const char *tree_json, ckpt__tree_rule rule, char **out,
                                ckpt_error *err) {
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
    emitter e = {.plan = p, .doc = &doc, .rule = rule};
    emit(&e);
    ckpt__json_free(&doc);
    free(e.path.data);
    free(text);
    if (e.out.failed) {
        free(e.out.data);
        return ckpt__oom(err, NULL, "the object tree");
    }
    if (e.meaningful || rule == CKPT__TREE_ALWAYS) *out = e.out.data;
    else free(e.out.data);
    return CKPT_OK;
}

ckpt_status ckpt_plan_tree_json(const ckpt_plan *p, const char *tree_json, char **json, ckpt_error *err) {
    if (!p || !json) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan and json are required");
    return ckpt__tree_for_plan(p, tree_json ? tree_json : ckpt_catalog_tree_json(p->catalog), CKPT__TREE_ALWAYS, json,
                               err);
}
