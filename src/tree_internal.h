/* tree_internal.h — a torch file's object tree as a conversion records it
 * (tree.c). */
#ifndef CKPT_TREE_INTERNAL_H
#define CKPT_TREE_INTERNAL_H

#include "base/base.h"
#include "base/value.h"

/* The checkpoint-metadata key of a converted torch file's object tree (see
 * ckpt_catalog_tree_json). */
#define CKPT_TREE_METADATA_KEY "ckpt.torch_tree"
/* The checkpoint-metadata key of a nested structure, as the Python
 * package's ckpt.save writes it (python/ckpt/_tree.py, STRUCTURE_KEY). */
#define CKPT_STRUCTURE_METADATA_KEY "ckpt.tree"

/* Which trees a conversion leaves unrecorded. */
typedef enum ckpt__tree_rule {
    /* A torch source's: dicts of tensors under string keys, not all
     * digits, that are the tensors' names as the output has them (a state
     * dict, which the hub saves with nothing but {"format": "pt"}; its
     * module versions aside; also one a rename took out of the dict that
     * held it) — any other tree, {"model": state_dict} included, is
     * torch's structure that only the tree keeps. */
    CKPT__TREE_UNLESS_STATE_DICT,
    /* A Flax document's: dicts with string keys that are not all digits,
     * and tensors — what its names split at dots rebuild. */
    CKPT__TREE_UNLESS_SPLIT_NAMES,
    /* None: every tree is given (ckpt_plan_tree_json). */
    CKPT__TREE_ALWAYS,
} ckpt__tree_rule;

/*
 * The object tree `tree` (the catalog's, or one a converted file recorded)
 * as the plan's output has it: tensors the plan drops taken out (from
 * dicts; null in tuples and lists), the others under their new names.
 * *out is made in `arena` (sharing the values the plan does not change
 * with `tree`, which must outlive it), or NULL when what is left is a tree
 * `rule` leaves unrecorded.
 */
CKPT__HIDDEN ckpt_status ckpt__tree_for_plan(const ckpt_plan *plan, const ckpt__value *tree, ckpt__tree_rule rule,
                                             ckpt__arena *arena, ckpt__value **out, ckpt_error *err);

#endif
