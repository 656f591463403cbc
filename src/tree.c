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
#include "plan_internal.h"
#include "tree_internal.h"

typedef struct filter {
    const ckpt_plan *plan;
    ckpt__arena *arena; /* the values made */
    ckpt__tree_rule rule;
    bool meaningful;
    bool failed;      /* out of memory */
    int module_state; /* inside a state dict's _metadata (module versions) */
    ckpt__buf path;   /* the dotted name of the value being gone through (as the torch reader names tensors) */
    ckpt__stack scratch; /* count_tensors' walk */
} filter;

/* Appends a name part to the path; returns the length to go back to. */
static size_t path_push(filter *e, const char *part, size_t n) {
    size_t saved = e->path.len;
    if (saved) ckpt__buf_append(&e->path, ".", 1);
    ckpt__buf_append(&e->path, part, n);
    return saved;
}

static void path_pop(filter *e, size_t saved) {
    e->path.len = saved;
    if (e->path.data) e->path.data[saved] = '\0';
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

/* Whether v is a tensor the plan drops. */
static bool dropped(filter *e, const ckpt__value *v) {
    return v->kind == CKPT__V_TENSOR && !kept_name(e->plan, v->u.s.data);
}

/* A dict key like "0": a dict, where names split at dots would give a list. */
static bool all_digits(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

/* The items of a container that hold values: a dict's and an object's
 * values (not their keys), the others' items; and its state. */
static size_t value_count(const ckpt__value *v) { return v->count; }
static const ckpt__value *value_at(const ckpt__value *v, size_t i) {
    return v->kind == CKPT__V_DICT || v->kind == CKPT__V_OBJECT ? ckpt__value_at(v, i) : v->u.items[i];
}

/* Counts the tensors under v, and those of them the plan keeps. */
static void count_tensors(filter *e, const ckpt__value *v, size_t *all, size_t *kept) {
    ckpt__stack *pending = &e->scratch;
    pending->len = 0;
    const ckpt__value **top = ckpt__stack_push(pending);
    if (!top) {
        e->failed = true;
        return;
    }
    *top = v;
    while (pending->len) {
        const ckpt__value *x = *(const ckpt__value **)ckpt__stack_top(pending);
        ckpt__stack_pop(pending);
        if (x->kind == CKPT__V_TENSOR) {
            ++*all;
            *kept += kept_name(e->plan, x->u.s.data) != NULL;
        }
        if (!ckpt__value_is_container(x)) continue;
        for (size_t i = value_count(x) + (x->state != NULL); i-- > 0;) {
            const ckpt__value **slot = ckpt__stack_push(pending);
            if (!slot) {
                e->failed = true;
                return;
            }
            *slot = i < value_count(x) ? value_at(x, i) : x->state;
        }
    }
}

/* Whether the plan leaves out a dict entry's value as a whole (see the top):
 * tensors, all dropped; or no tensor, and a name the select and exclude
 * rules do not keep. */
static bool left_out(filter *e, const ckpt__value *value) {
    const ckpt_plan *p = e->plan;
    if (!p->rule_count) return false;
    size_t all = 0, kept = 0;
    count_tensors(e, value, &all, &kept);
    return all ? kept == 0 : !ckpt__plan_selects_name(p, e->path.data ? e->path.data : "");
}

/* The filter keeps the containers it is inside on a heap stack, never
 * recursing (threads may have 64 KiB stacks): one frame per open
 * container, saying which of its children is next. */
typedef struct fframe {
    const ckpt__value *in;
    ckpt__value *out; /* its copy, the items the plan keeps */
    uint32_t next;    /* the next child */
    size_t saved;     /* the path's length before the current child's part */
    bool in_child;    /* a child was entered: its end comes first */
    bool pathed;      /* ... with a path part of its own */
    bool in_state;    /* the child is the state */
    bool module;      /* ... which is a state dict's _metadata */
} fframe;

/* The value of v as the plan's output has it into *slot: a leaf whole,
 * a container with its frame pushed. */
static void open_value(filter *e, ckpt__stack *frames, const ckpt__value *v, ckpt__value **slot) {
    bool root = !frames->len;
    if (v->kind == CKPT__V_TENSOR) {
        const char *name = kept_name(e->plan, v->u.s.data);
        if (root) e->meaningful = true; /* torch.save of one tensor */
        *slot = (ckpt__value *)v;
        if (name && strcmp(name, v->u.s.data) && !(*slot = ckpt__value_text(e->arena, CKPT__V_TENSOR, name, strlen(name))))
            e->failed = true;
        return;
    }
    /* A dict answers by its entries (next_pair); the rest by being there. */
    if (v->kind != CKPT__V_DICT && !e->module_state) e->meaningful = true;
    if (!ckpt__value_is_container(v)) {
        *slot = (ckpt__value *)v; /* values are never changed: shared */
        return;
    }
    ckpt__value *out = ckpt__value_new(e->arena, (ckpt__value_kind)v->kind, v->count);
    fframe *f = out ? ckpt__stack_push(frames) : NULL;
    if (!f) {
        e->failed = true;
        return;
    }
    out->cls = v->cls;
    out->count = 0; /* counts what is kept */
    *slot = out;
    *f = (fframe){.in = v, .out = out};
}

/* Enters child `c` of frame f into *slot, under path part [part, part + n)
 * when `part` is not NULL. */
static void enter(filter *e, ckpt__stack *frames, fframe *f, const ckpt__value *c, ckpt__value **slot,
                  const char *part, size_t n) {
    f->in_child = true;
    f->pathed = part != NULL;
    if (part) f->saved = path_push(e, part, n);
    if (part && f->in->kind != CKPT__V_DICT && dropped(e, c)) {
        *slot = ckpt__value_new(e->arena, CKPT__V_NULL, 0); /* a list keeps its indices */
        if (!*slot) e->failed = true;
        return;
    }
    open_value(e, frames, c, slot);
}

/* A key's text as the torch reader names it: a string, an int's digits, True/False. */
static const char *key_part(const ckpt__value *k, char *buf, size_t cap, size_t *len) {
    const char *part = "";
    switch (k->kind) {
    case CKPT__V_STR:
    case CKPT__V_NUMBER: *len = k->u.s.len; return k->u.s.data;
    case CKPT__V_BOOL: part = k->u.b ? "True" : "False"; break;
    case CKPT__V_INT: snprintf(buf, cap, "%lld", (long long)k->u.i), part = buf; break;
    case CKPT__V_FLOAT: {
        ckpt__buf b = {0};
        ckpt__buf_json_float(&b, k->u.f);
        snprintf(buf, cap, "%s", b.data ? b.data : "");
        free(b.data);
        part = buf;
        break;
    }
    default: break;
    }
    *len = strlen(part);
    return part;
}

/* Whether a dict entry's key is its tensor's name as the plan's output
 * has it, as in a state dict (else the key says what no name does).  Other
 * values answer for themselves: a dict by its entries, the rest by being
 * there (open_value). */
static bool key_is_name(filter *e, const ckpt__value *key, const ckpt__value *value) {
    if (value->kind != CKPT__V_TENSOR) return true;
    const char *name = kept_name(e->plan, value->u.s.data);
    return name && key->kind == CKPT__V_STR && !strcmp(name, key->u.s.data);
}

/* Whether a dict's state is a state dict's _metadata (module versions),
 * which a flat dict of tensors drops: it alone says nothing. */
static bool module_versions(const ckpt__value *state) {
    return state->kind == CKPT__V_DICT && state->count == 1 && ckpt__value_key(state, 0)->kind == CKPT__V_STR &&
           !strcmp(ckpt__value_key(state, 0)->u.s.data, "_metadata");
}

/* The next dict entry the plan keeps; false at the end. */
static bool next_pair(filter *e, ckpt__stack *frames, fframe *f) {
    const ckpt__value *in = f->in;
    while (f->next < in->count) {
        const ckpt__value *key = ckpt__value_key(in, f->next), *value = ckpt__value_at(in, f->next);
        f->next++;
        char buf[64];
        size_t len;
        const char *part = key_part(key, buf, sizeof buf, &len);
        size_t saved = path_push(e, part, len);
        bool skip = dropped(e, value) || (!e->module_state && left_out(e, value));
        path_pop(e, saved);
        if (skip) continue;
        if ((key->kind != CKPT__V_STR || all_digits(key->u.s.data)) && !e->module_state) e->meaningful = true;
        if (e->rule == CKPT__TREE_UNLESS_STATE_DICT && !e->module_state && !e->meaningful)
            e->meaningful = !key_is_name(e, key, value);
        ckpt__value *out = f->out;
        uint32_t at = out->count++;
        out->u.items[2 * at] = (ckpt__value *)key;
        enter(e, frames, f, value, &out->u.items[2 * at + 1], part, len);
        return true;
    }
    return false;
}

/* One step of the top frame: the end of the child it entered, then its
 * next child, its state, or its end (the frame popped). */
static void step(filter *e, ckpt__stack *frames) {
    fframe *f = ckpt__stack_top(frames);
    if (f->in_child) {
        f->in_child = false;
        if (f->pathed) path_pop(e, f->saved);
        if (f->in_state) {
            e->module_state -= f->module;
            ckpt__stack_pop(frames);
            return;
        }
    }
    const ckpt__value *in = f->in;
    ckpt__value *out = f->out;
    if (in->kind == CKPT__V_DICT) {
        if (next_pair(e, frames, f)) return;
    } else if (f->next < in->count) {
        uint32_t i = f->next++;
        if (in->kind == CKPT__V_OBJECT) { /* members as they are, under no name of their own */
            out->u.items[2 * i] = ckpt__value_key(in, i);
            out->count++;
            enter(e, frames, f, ckpt__value_at(in, i), &out->u.items[2 * i + 1], NULL, 0);
        } else {
            char index[24];
            size_t len = (size_t)snprintf(index, sizeof index, "%u", i);
            out->count++;
            enter(e, frames, f, in->u.items[i], &out->u.items[i], index, len);
        }
        return;
    }
    if (in->state) { /* a dict's under "__state__"; a call's under no name of its own */
        bool dict = in->kind == CKPT__V_DICT;
        f->in_state = true;
        f->module = dict && module_versions(in->state);
        e->module_state += f->module;
        enter(e, frames, f, in->state, &out->state, dict ? "__state__" : NULL, dict ? 9 : 0);
        return;
    }
    ckpt__stack_pop(frames);
}

ckpt_status ckpt__tree_for_plan(const ckpt_plan *p, const ckpt__value *tree, ckpt__tree_rule rule, ckpt__arena *arena,
                                ckpt__value **out, ckpt_error *err) {
    *out = NULL;
    if (!tree) return CKPT_OK;
    filter e = {.plan = p, .arena = arena, .rule = rule, .scratch = CKPT__STACK(const ckpt__value *)};
    ckpt__stack frames = CKPT__STACK(fframe);
    ckpt__value *result = NULL;
    open_value(&e, &frames, tree, &result);
    while (frames.len && !e.failed) step(&e, &frames);
    ckpt__stack_free(&frames);
    ckpt__stack_free(&e.scratch);
    free(e.path.data);
    if (e.failed || e.path.failed) return ckpt__oom(err, NULL, "the object tree");
    if (e.meaningful || rule == CKPT__TREE_ALWAYS) *out = result;
    return CKPT_OK;
}

/* The catalog's own tree as the plan's output has it, or NULL. */
static ckpt_status plan_tree(const ckpt_plan *p, ckpt__arena *arena, ckpt__value **out, ckpt_error *err) {
    return ckpt__tree_for_plan(p, ckpt_catalog_tree(p->catalog), CKPT__TREE_ALWAYS, arena, out, err);
}

ckpt_status ckpt_plan_tree(ckpt_plan *p, const ckpt_value **tree, ckpt_error *err) {
    if (!p || !tree) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan and tree are required");
    ckpt__value *made = NULL;
    ckpt_status st = plan_tree(p, &p->arena, &made, err);
    *tree = made;
    return st;
}

ckpt_status ckpt_plan_tree_json(const ckpt_plan *p, const char *tree_json, char **json, ckpt_error *err) {
    if (!p || !json) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "plan and json are required");
    *json = NULL;
    ckpt__value *given = NULL, *filtered = NULL;
    ckpt__arena arena = {0};
    if (tree_json && ckpt__value_from_json(&arena, tree_json, &given, NULL, NULL) != CKPT_OK) {
        /* not JSON ckpt reads (deeper than its reader nests): kept as it is */
        ckpt__arena_free(&arena);
        *json = ckpt__strdup(tree_json);
        return *json ? CKPT_OK : ckpt__oom(err, NULL, "the object tree");
    }
    ckpt_status st = tree_json ? ckpt__tree_for_plan(p, given, CKPT__TREE_ALWAYS, &arena, &filtered, err)
                               : plan_tree(p, &arena, &filtered, err);
    if (st == CKPT_OK && filtered && !(*json = ckpt__value_json_text(filtered)))
        st = ckpt__oom(err, NULL, "the object tree");
    ckpt__arena_free(&arena);
    return st;
}
