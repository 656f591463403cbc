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
recurse on the C stack as the json module does."""
import json
import math
from collections import namedtuple

from . import _ckpt

STRUCTURE_KEY = "ckpt.tree"

Call = namedtuple("Call", "name args state", defaults=(None,))
Call.__doc__ = ("An allowed object of a torch file that is neither a container nor a tensor (an OrderedDict "
                "subclass, or a global allowed with allowed_globals such as argparse.Namespace): the global's "
                "name, its arguments and the state it was rebuilt from (its attributes), never instantiated.")


def _default_is_tensor(x):
    mod = type(x).__module__
    return (mod.startswith("torch") and type(x).__name__ in ("Tensor", "Parameter")) or (
        mod.startswith("numpy") and type(x).__name__ == "ndarray") or mod.startswith(("jax", "jaxlib"))


def _fold(root, plan):
    """Builds a value bottom-up from `root` without recursion: plan(x) gives
    (value, None) for a leaf, or (None, (children, assemble)) for a node
    whose children are planned in turn (depth first, in order) and whose
    value is assemble([their values])."""
    value, node = plan(root)
    if node is None:
        return value
    stack = [(node[0], node[1], [])]
    while True:
        children, assemble, done = stack[-1]
        if len(done) < len(children):
            value, node = plan(children[len(done)])
            if node is None:
                done.append(value)
            else:
                stack.append((node[0], node[1], []))
            continue
        value = assemble(done)
        stack.pop()
        if not stack:
            return value
        stack[-1][2].append(value)


def flatten(tree, *, sep=".", with_structure=False, is_tensor=None):
    """Flattens nested dicts, lists and tuples of tensors into {name: tensor}.

    With with_structure=True, returns (flat, structure): `structure` (a JSON
    string) lets unflatten restore tuples as tuples, int keys as ints and
    non-tensor leaves (numbers, strings, None)."""
    is_tensor = is_tensor or _default_is_tensor
    flat = {}

    def plan(item):
        x, prefix = item
        if is_tensor(x):
            if prefix in flat:
                raise ValueError(f"two entries flatten to the name {prefix!r}")
            flat[prefix] = x
            return {"__tensor__": prefix}, None
        join = (lambda k: f"{prefix}{sep}{k}") if prefix else (lambda k: str(k))
        if isinstance(x, dict):
            keys = list(x)
            for k in keys:
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise TypeError(f"dict key {k!r} at {prefix or '<root>'!r}: only str and int keys have names")
            return None, ([(x[k], join(k)) for k in keys],
                          lambda values: {"__dict__": [[k, v] for k, v in zip(keys, values)]})
        if isinstance(x, tuple) and not hasattr(x, "_fields"):
            return None, ([(v, join(i)) for i, v in enumerate(x)], lambda values: {"__tuple__": values})
        if isinstance(x, list):
            return None, ([(v, join(i)) for i, v in enumerate(x)], list)
        if x is None or isinstance(x, (bool, int, str)):
            return x, None
        if isinstance(x, float):
            return (x if math.isfinite(x) else {"__float__": "nan" if x != x else ("inf" if x > 0 else "-inf")}), None
        raise TypeError(f"{type(x).__name__} at {prefix or '<root>'!r} is neither a tensor nor a container")

    structure = _fold((tree, ""), plan)
    if with_structure:
        return flat, _dumps(structure)
    return flat


def _dumps(structure):
    """The structure as compact JSON; json.dumps recurses on the C stack,
    so a deep structure is written level by level instead."""
    try:
        if _depth(structure) < 64:
            return json.dumps(structure, separators=(",", ":"))
    except TypeError:
        pass
    out = []

    def plan(x):
        if isinstance(x, list):
            return None, (x, lambda parts: "[" + ",".join(parts) + "]")
        if isinstance(x, dict):
            keys = list(x)
            return None, ([x[k] for k in keys],
                          lambda parts: "{" + ",".join(json.dumps(k) + ":" + p for k, p in zip(keys, parts)) + "}")
        return json.dumps(x), None

    out.append(_fold(structure, plan))
    return out[0]


def _depth(x):
    """The nesting depth of lists and dicts in x, without recursion."""
    deepest, stack = 0, [(x, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, (list, dict)):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in (x if isinstance(x, list) else x.values()))
    return deepest


def _decoding(leaf):
    """The plan (see _fold) that rebuilds a tree from its structure JSON."""

    def plan(x):
        if isinstance(x, list):
            return None, (x, list)
        if not isinstance(x, dict):
            return x, None
        if "__tensor__" in x:
            return leaf(x["__tensor__"]), None
        if "__dict__" in x:
            keys = [tuple(k) if isinstance(k, list) else k for k, _ in x["__dict__"]]
            return None, ([v for _, v in x["__dict__"]], lambda values: dict(zip(keys, values)))
        if "__tuple__" in x:
            return None, (x["__tuple__"], tuple)
        if "__set__" in x:
            return None, (x["__set__"], set)
        if "__bytes__" in x:
            return bytes.fromhex(x["__bytes__"]), None
        if "__float__" in x:
            return float(x["__float__"]), None
        if "__call__" in x:
            name, args = x["__call__"], x.get("args", [])
            if name == "builtins.complex" and len(args) == 2:
                return None, (args, lambda values: complex(*values))
            if "state" not in x:
                return None, (args, lambda values: Call(name, values, None))
            return None, (args + [x["state"]], lambda values: Call(name, values[:-1], values[-1]))
        if "__shards__" in x:
            def shards(values):
                if values and all(isinstance(v, dict) for v in values):
                    return _merge(values)  # one nested dict split across files (transformers' Flax shards)
                return values
            return None, (x["__shards__"], shards)
        keys = list(x)
        return None, ([x[k] for k in keys], lambda values: dict(zip(keys, values)))

    return plan


def loads(text):
    """The library's JSON (an object tree, a typed key-value) as Python
    objects, however deep."""
    return _ckpt.json_loads(text)


def decode(structure, leaf):
    """Rebuilds a tree from structure JSON (text or parsed), calling
    leaf(name) for each tensor."""
    if isinstance(structure, str):
        structure = loads(structure)
    return _fold(structure, _decoding(leaf))


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

    def plan(node):
        if not isinstance(node, dict):
            return node, None
        keys = list(node)
        return None, ([node[k] for k in keys], lambda values: as_list(dict(zip(keys, values))))

    return _fold(root, plan)
