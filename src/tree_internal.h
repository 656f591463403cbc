/* tree_internal.h — a torch file's object tree as a conversion records it
 * (tree.c). */
#ifndef CKPT_TREE_INTERNAL_H
#define CKPT_TREE_INTERNAL_H

#include "base/base.h"

/* The checkpoint-metadata key of a converted torch file's object tree (see
 * ckpt_catalog_tree_json). */
#define CKPT_TREE_METADATA_KEY "ckpt.torch_tree"
/* The checkpoint-metadata key of a nested structure, as the Python
 * package's ckpt.save writes it (python/ckpt/_tree.py, STRUCTURE_KEY). */
#define CKPT_STRUCTURE_METADATA_KEY "ckpt.tree"

/*
 * The object tree `tree_json` (the catalog's) as the plan's output has it:
 * tensors the plan drops taken out (from dicts; null in tuples and lists),
 * the others under their new names.  *out is malloc'ed, or NULL when what
 * is left says nothing beyond the tensors' names (only dicts with string
 * keys that are not all digits — names split at dots would make those
 * lists —, and tensors).
 */
CKPT__HIDDEN ckpt_status ckpt__tree_for_plan(const ckpt_plan *plan, const char *tree_json, char **out, ckpt_error *err);

#endif
