"""Nested containers ↔ flat names.

Names follow the torch reader's convention: dict keys and list/tuple
indexes joined by "." ("layers.0.attn.weight").  The structure — which
levels are tuples, lists or dicts, int or str keys, and non-tensor leaves —
is kept as JSON in the schema of ckpt_catalog_tree_json ({"__dict__":
[[key, value], …]}, {"__tuple__": […]}, lists as lists, each tensor as
{"__tensor__": name}), so torch files' object trees and saved structures
decode the same way.

Trees may nest as deep as the library allows (500 levels): every walk here
keeps its levels in a list rather than recursing, so neither Python's
recursion limit nor a thread's small C stack (threading.stack_size(64 KiB))
stops it; the library's JSON is read by _ckpt.json_loads, which does not
recurse on the C stack as the json module does, and a catalog's own tree
comes from the library's values without JSON (Plan.tree)."""
import json
import math
from collections import namedtuple

from . import _ckpt

STRUCTURE_KEY = "ckpt.tree"
# A converted torch file's object tree (the library's CKPT_TREE_METADATA_KEY),
# in the same schema.
TORCH_TREE_KEY = "ckpt.torch_tree"

Call = namedtuple("Call", "name args state", defaults=(None,))
Call.__doc__ = ("An allowed object of a torch file that is neither a container nor a tensor (an OrderedDict "
                "subclass, or a global allowed with allowed_globals such as argparse.Namespace): the global's "
                "name, its arguments and the state it was rebuilt from (its attributes), never instantiated.")


def _default_is_tensor(x):
    mod = type(x).__module__
    return (mod.startswith("torch") and type(x).__name__ in ("Tensor", "Parameter")) or (
        mod.startswith("numpy") and type(x).__name__ == "ndarray") or mod.startswith(("jax", "jaxlib"))


def flatten(tree, *, sep=".", with_structure=False, is_tensor=None):
    """Flattens nested dicts, lists and tuples of tensors into {name: tensor}.

    With with_structure=True, returns (flat, structure): `structure` (a JSON
    string) lets unflatten restore tuples as tuples, int keys as ints and
    non-tensor leaves (numbers, strings, None)."""
    is_tensor = is_tensor or _default_is_tensor
    flat = {}
    # Containers are gone through depth first, the ones being gone through
    # on a list of frames: (items still to read as (value, name), where a
    # value's structure goes, how the values' structures make the
    # container's, the values' structures so far).
    result = []
    stack = [(iter(((tree, ""),)), result.append, None, None)]
    deepest = 1
    while True:
        items, put, finish, got = stack[-1]
        for x, prefix in items:
            if is_tensor(x):
                if prefix in flat:
                    raise ValueError(f"two entries flatten to the name {prefix!r}")
                flat[prefix] = x
                put({"__tensor__": prefix})
                continue
            head = prefix + sep if prefix else ""
            sub = []
            if isinstance(x, dict):
                keys = list(x)
                for k in keys:
                    if not isinstance(k, (str, int)) or isinstance(k, bool):
                        raise TypeError(f"dict key {k!r} at {prefix or '<root>'!r}: only str and int keys have names")
                stack.append((iter([(x[k], f"{head}{k}") for k in keys]), sub.append,
                              lambda values, keys=keys: {"__dict__": [[k, v] for k, v in zip(keys, values)]}, sub))
            elif isinstance(x, tuple) and not hasattr(x, "_fields"):
                stack.append((iter([(v, f"{head}{i}") for i, v in enumerate(x)]), sub.append,
                              lambda values: {"__tuple__": values}, sub))
            elif isinstance(x, list):
                stack.append((iter([(v, f"{head}{i}") for i, v in enumerate(x)]), sub.append, None, sub))
            elif x is None or isinstance(x, (bool, int, str)):
                put(x)
                continue
            elif isinstance(x, float):
                put(x if math.isfinite(x) else {"__float__": "nan" if x != x else ("inf" if x > 0 else "-inf")})
                continue
            else:
                raise TypeError(f"{type(x).__name__} at {prefix or '<root>'!r} is neither a tensor nor a container")
            deepest = max(deepest, len(stack))
            break
        else:  # the frame's items are done: its container goes to the frame below
            stack.pop()
            if not stack:
                break
            stack[-1][1](got if finish is None else finish(got))
    if with_structure:
        return flat, _dumps(result[0], deepest)
    return flat


def _dumps(structure, depth):
    """The structure as compact JSON.  json.dumps takes C stack for each
    level: a deep structure is written level by level instead."""
    if depth <= 20:
        return json.dumps(structure, separators=(",", ":"))
    result = []
    stack = [(iter((structure,)), result.append, None, None)]
    while True:
        items, put, finish, got = stack[-1]
        for x in items:
            sub = []
            if isinstance(x, list):
                stack.append((iter(x), sub.append, lambda parts: "[" + ",".join(parts) + "]", sub))
            elif isinstance(x, dict):
                keys = list(x)
                stack.append((iter([x[k] for k in keys]), sub.append,
                              lambda parts, keys=keys: "{" + ",".join(json.dumps(k) + ":" + p
                                                                     for k, p in zip(keys, parts)) + "}", sub))
            else:
                put(json.dumps(x))
                continue
            break
        else:
            stack.pop()
            if not stack:
                return result[0]
            stack[-1][1](finish(got))


def _decode(root, leaf):
    """The tree a structure (parsed JSON) describes, calling leaf(name) for
    each tensor: containers are built depth first, the ones being built on
    a list of frames (items still to read, where a value goes, how the
    values make the container), never by recursion."""
    result = []
    stack = [(iter((root,)), result.append, None, None)]
    while True:
        items, put, finish, got = stack[-1]
        for x in items:
            if type(x) is list:
                sub = []
                stack.append((iter(x), sub.append, None, sub))
                break
            if type(x) is not dict:
                put(x)
                continue
            if "__tensor__" in x:
                put(leaf(x["__tensor__"]))
                continue
            if "__bytes__" in x:
                put(bytes.fromhex(x["__bytes__"]))
                continue
            if "__float__" in x:
                put(float(x["__float__"]))
                continue
            sub = []
            if "__dict__" in x:
                keys = [tuple(k) if type(k) is list else k for k, _ in x["__dict__"]]
                stack.append((iter([v for _, v in x["__dict__"]]), sub.append,
                              lambda values, keys=keys: dict(zip(keys, values)), sub))
            elif "__tuple__" in x:
                stack.append((iter(x["__tuple__"]), sub.append, tuple, sub))
            elif "__set__" in x:
                stack.append((iter(x["__set__"]), sub.append, set, sub))
            elif "__call__" in x:
                name, args = x["__call__"], x.get("args", [])
                if name == "builtins.complex" and len(args) == 2:
                    finish = lambda values: complex(*values)  # noqa: E731
                elif "state" not in x:
                    finish = lambda values, name=name: Call(name, values, None)  # noqa: E731
                else:
                    args = args + [x["state"]]
                    finish = lambda values, name=name: Call(name, values[:-1], values[-1])  # noqa: E731
                stack.append((iter(args), sub.append, finish, sub))
            elif "__shards__" in x:
                # one nested dict split across files (transformers' Flax shards)
                stack.append((iter(x["__shards__"]), sub.append,
                              lambda values: _merge(values) if values and all(type(v) is dict for v in values)
                              else values, sub))
            else:
                keys = list(x)
                stack.append((iter(list(x.values())), sub.append,
                              lambda values, keys=keys: dict(zip(keys, values)), sub))
            break
        else:  # the frame's items are done: its container goes to the frame below
            stack.pop()
            if not stack:
                return result[0]
            stack[-1][1](got if finish is None else finish(got))


def of_catalog(catalog):
    """The structure a catalog's tensors nest in (JSON text), or None when
    nothing records one (then names split at dots): its own object tree (a
    torch file's and a DCP checkpoint's, exactly what torch.load and
    dcp_to_torch_save give; a Flax document's), else the one an output's
    metadata records — a converted torch file's object tree, or the
    structure ckpt.save (or a Flax conversion) kept."""
    tree = catalog.info()["tree_json"]
    if tree:
        return tree
    meta = catalog.metadata()
    return meta.get(TORCH_TREE_KEY) or meta.get(STRUCTURE_KEY)


def of_plan(catalog, plan=None, *, renames=False):
    """The structure a plan's output (by default, the whole catalog's)
    nests in, or None (see of_catalog) — the catalog's own tree as the
    Python objects its JSON reads as, made from the library's values
    (Plan.tree, no JSON), else a recorded one as JSON text: each tensor under its name in the
    output — one written once for several (tied weights, which the hub
    records as `removed → kept`) under the kept one's —, what the plan
    drops taken out, as a conversion records it.  Renames change names,
    which are not the tree's keys (a state dict's key "conv1.weight" is no
    path of keys): under them, None (the new names split at dots)."""
    if renames:
        return None
    plan = plan or _ckpt.Plan(catalog)
    own = plan.tree()  # the catalog's own tree, as Python objects (no JSON)
    if own is not None:
        return own
    meta = catalog.metadata()
    structure = meta.get(TORCH_TREE_KEY) or meta.get(STRUCTURE_KEY)
    return plan.tree_json(structure) if structure else None


def loads(text):
    """The library's JSON (an object tree, a typed key-value) as Python
    objects, however deep."""
    return _ckpt.json_loads(text)[0]


# Levels built by recursion, which is quicker, before frames take over: a
# Python call takes C stack (before Python 3.11, or through a C function),
# of which a thread may have 64 KiB.  Trees of state dicts and optimizer
# states nest a handful of levels.
RECURSION = 8


def _build(x, leaf, depth):
    """_decode, by recursion for the first RECURSION levels."""
    if type(x) is list:
        return [_build(v, leaf, depth + 1) for v in x] if depth < RECURSION else _decode(x, leaf)
    if type(x) is not dict:
        return x
    if "__tensor__" in x:
        return leaf(x["__tensor__"])
    if depth >= RECURSION:
        return _decode(x, leaf)
    depth += 1
    if "__dict__" in x:
        return {(tuple(k) if type(k) is list else k): _build(v, leaf, depth) for k, v in x["__dict__"]}
    if "__tuple__" in x:
        return tuple([_build(v, leaf, depth) for v in x["__tuple__"]])
    if "__set__" in x:
        return set([_build(v, leaf, depth) for v in x["__set__"]])
    if "__bytes__" in x:
        return bytes.fromhex(x["__bytes__"])
    if "__float__" in x:
        return float(x["__float__"])
    if "__call__" in x:
        args = [_build(v, leaf, depth) for v in x.get("args", [])]
        if x["__call__"] == "builtins.complex" and len(args) == 2:
            return complex(*args)
        return Call(x["__call__"], args, _build(x["state"], leaf, depth) if "state" in x else None)
    if "__shards__" in x:
        shards = [_build(v, leaf, depth) for v in x["__shards__"]]
        if shards and all(type(v) is dict for v in shards):
            return _merge(shards)  # one nested dict split across files (transformers' Flax shards)
        return shards
    return {k: _build(v, leaf, depth) for k, v in x.items()}


def decode(structure, leaf):
    """Rebuilds a tree from structure JSON (text or parsed), calling
    leaf(name) for each tensor."""
    if isinstance(structure, str):
        structure = loads(structure)
    return _build(structure, leaf, 0)


def _merge(dicts):
    """Nested dicts split across shards, merged into one: a key's first
    value wins, and dicts under one key merge (level by level, without
    recursion)."""
    out = {}
    stack = [(out, dicts)]
    while stack:
        target, sources = stack.pop()
        groups = {}  # key -> the dicts under it, when its first value is one
        for d in sources:
            for k, v in d.items():
                if k not in target:
                    target[k] = v
                    if isinstance(v, dict):
                        groups[k] = [v]
                elif k in groups and isinstance(v, dict):
                    groups[k].append(v)
        for k, group in groups.items():
            if len(group) > 1:
                target[k] = {}
                stack.append((target[k], group))
    return out


def unflatten(flat, structure=None, *, sep="."):
    """Inverse of flatten.  With the structure from flatten(...,
    with_structure=True) (or a checkpoint's), the exact containers come
    back; without it, names are split at `sep` into dicts, and levels whose
    keys are exactly 0…n-1 become lists."""
    if structure is not None:
        return decode(structure, lambda name: flat[name])
    root = {}
    for name, value in flat.items():
        parts = name.split(sep)
        node = root
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise ValueError(f"{name!r} nests under the tensor {p!r}")
            node = nxt
        if parts[-1] in node:
            raise ValueError(f"{name!r} is both a tensor and a container")
        node[parts[-1]] = value

    def as_list(node):
        if node and all(k.isdigit() and k == str(int(k)) for k in node) and sorted(int(k) for k in node) == list(range(len(node))):
            return [node[str(i)] for i in range(len(node))]
        return node

    # Levels whose keys are 0…n-1 become lists, deepest first; the dicts
    # being gone through are on a list of frames (items still to read, the
    # new dict, its key in the one below).
    stack = [(iter(root.items()), {}, None)]
    while True:
        items, new, key = stack[-1]
        for k, v in items:
            if type(v) is dict:
                stack.append((iter(v.items()), {}, k))
                break
            new[k] = v
        else:
            stack.pop()
            if not stack:
                return as_list(new)
            stack[-1][1][key] = as_list(new)
