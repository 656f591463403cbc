"""Nested containers ↔ flat names.

Names follow the torch reader's convention: dict keys and list/tuple
indexes joined by "." ("layers.0.attn.weight").  The structure — which
levels are tuples, lists or dicts, int or str keys, and non-tensor leaves —
is kept as JSON in the schema of ckpt_catalog_tree_json ({"__dict__":
[[key, value], …]}, {"__tuple__": […]}, lists as lists, each tensor as
{"__tensor__": name}), so torch files' object trees and saved structures
decode the same way."""
import json
import math
from collections import namedtuple

STRUCTURE_KEY = "ckpt.tree"

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

    def walk(x, prefix):
        if is_tensor(x):
            if prefix in flat:
                raise ValueError(f"two entries flatten to the name {prefix!r}")
            flat[prefix] = x
            return {"__tensor__": prefix}
        join = (lambda k: f"{prefix}{sep}{k}") if prefix else (lambda k: str(k))
        if isinstance(x, dict):
            items = []
            for k, v in x.items():
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise TypeError(f"dict key {k!r} at {prefix or '<root>'!r}: only str and int keys have names")
                items.append([k, walk(v, join(k))])
            return {"__dict__": items}
        if isinstance(x, tuple) and not hasattr(x, "_fields"):
            return {"__tuple__": [walk(v, join(i)) for i, v in enumerate(x)]}
        if isinstance(x, list):
            return [walk(v, join(i)) for i, v in enumerate(x)]
        if x is None or isinstance(x, (bool, int, str)):
            return x
        if isinstance(x, float):
            return x if math.isfinite(x) else {"__float__": "nan" if x != x else ("inf" if x > 0 else "-inf")}
        raise TypeError(f"{type(x).__name__} at {prefix or '<root>'!r} is neither a tensor nor a container")

    structure = walk(tree, "")
    if with_structure:
        return flat, json.dumps(structure, separators=(",", ":"))
    return flat


def decode(structure, leaf):
    """Rebuilds a tree from structure JSON (text or parsed), calling
    leaf(name) for each tensor."""
    if isinstance(structure, str):
        structure = json.loads(structure)

    def build(x):
        if isinstance(x, list):
            return [build(v) for v in x]
        if not isinstance(x, dict):
            return x
        if "__tensor__" in x:
            return leaf(x["__tensor__"])
        if "__dict__" in x:
            return {(tuple(k) if isinstance(k, list) else k): build(v) for k, v in x["__dict__"]}
        if "__tuple__" in x:
            return tuple(build(v) for v in x["__tuple__"])
        if "__set__" in x:
            return set(build(v) for v in x["__set__"])
        if "__bytes__" in x:
            return bytes.fromhex(x["__bytes__"])
        if "__float__" in x:
            return float(x["__float__"])
        if "__call__" in x:
            if x["__call__"] == "builtins.complex" and len(x.get("args", [])) == 2:
                return complex(*(build(v) for v in x["args"]))
            return Call(x["__call__"], [build(v) for v in x.get("args", [])], build(x["state"]) if "state" in x else None)
        if "__shards__" in x:
            shards = [build(v) for v in x["__shards__"]]
            if shards and all(isinstance(v, dict) for v in shards):
                return _merge(shards)  # one nested dict split across files (transformers' Flax shards)
            return shards
        return {k: build(v) for k, v in x.items()}

    return build(structure)


def _merge(dicts):
    """Nested dicts split across shards, merged into one."""
    out = {}
    for d in dicts:
        for k, v in d.items():
            if isinstance(v, dict) and isinstance(out.get(k), dict):
                out[k] = _merge([out[k], v])
            else:
                out.setdefault(k, v)
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

    def lists(node):
        if not isinstance(node, dict):
            return node
        node = {k: lists(v) for k, v in node.items()}
        if node and all(k.isdigit() and k == str(int(k)) for k in node) and sorted(int(k) for k in node) == list(range(len(node))):
            return [node[str(i)] for i in range(len(node))]
        return node

    return lists(root)
