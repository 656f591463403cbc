"""Checkpoints straight onto JAX devices.

    import ckpt.jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("x", "y"))
    params = ckpt.jax.load("flax_model.msgpack",
                           lambda name, shape: NamedSharding(mesh, P("x", None) if len(shape) == 2 else P()))
    params = ckpt.jax.load("flax_model.msgpack", {"body": NamedSharding(mesh, P("x"))})  # a prefix tree
    report = ckpt.jax.match("flax_model.msgpack", jax.eval_shape(model.init, rng, x)["params"])
    variables, report = ckpt.jax.init_missing(model.init, {"params": params}, rng, x, shardings=...)

`load` reads, for every array, only the blocks this process's devices
hold: each block is a slice of the tensor over all its sharded axes at once
(a 2-D PartitionSpec reads a rectangle), read by ckpt's engine straight
into a 64-byte aligned host buffer and handed to its device; a block that
several devices hold (replication) is read once.  On CPU devices jax
adopts the buffer without a copy, so peak memory is the arrays themselves
plus the engine's ring; on accelerators host memory holds at most one
batch of blocks (the largest block, or 64 MiB of small ones).  No
whole-array copy is made unless the sharding asks for whole arrays.

`init_missing` jits a Flax init function with only the leaves the
checkpoint lacks as outputs, so XLA drops the rest, and gives them their
shardings at birth: the model is never initialised twice, nor whole on one
device.

Reads every format ckpt reads: safetensors (single or sharded), torch.save
files, Flax msgpack (flax_model.msgpack, chunked arrays included), NumPy
.npy and .npz."""
import math
import os
import re

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding, SingleDeviceSharding

from . import _api, _ckpt, _dtypes, _progress, _sources, _tree

__all__ = ["load", "match", "init_missing", "shapes", "tree_names", "program_stats"]

_ALIGN = 64           # jax adopts CPU buffers aligned to 64 bytes without copying them
_BATCH = 64 << 20     # blocks read by one engine run (at least the largest block)


# ---------------------------------------------------------------------------
# Names of pytree leaves: keys joined by ".", as ckpt names tensors

def _key_str(k):
    tu = jax.tree_util
    if isinstance(k, tu.DictKey):
        return str(k.key)
    if isinstance(k, tu.SequenceKey):
        return str(k.idx)
    if isinstance(k, tu.GetAttrKey):
        return k.name
    if isinstance(k, tu.FlattenedIndexKey):
        return str(k.key)
    return str(k)


def tree_names(tree, is_leaf=None):
    """{name: leaf} of a pytree, names being the keys on the path joined by
    "." (ckpt's tensor names; what transformers' flatten_dict(sep=".")
    gives for Flax params)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)
    out = {}
    for path, leaf in leaves:
        name = ".".join(_key_str(k) for k in path)
        if name in out:
            raise ValueError(f"two leaves of the tree are both named {name!r}")
        out[name] = leaf
    return out


def _is_spec_leaf(x):
    return x is None or isinstance(x, (Sharding, PartitionSpec))


def _resolver(shardings, mesh):
    """name, shape → Sharding (or None: the default device), fitted to the
    array's rank (_fit).  A pytree of shardings is a prefix of the
    checkpoint's tree, as JAX takes it: a leaf applies to its whole subtree
    (the resolver's `entries` then name the leaves, for _check_prefix)."""
    def wrap(s, name, shape):
        if isinstance(s, PartitionSpec):
            if mesh is None:
                raise ValueError(f"a PartitionSpec for {name!r} needs mesh=")
            s = NamedSharding(mesh, s)
        if s is not None and not isinstance(s, Sharding):
            raise TypeError(f"the sharding for {name!r} is a {type(s).__name__}, not a jax.sharding.Sharding")
        return _fit(s, len(shape))

    if shardings is None or isinstance(shardings, (Sharding, PartitionSpec)):
        return lambda name, shape: wrap(shardings, name, shape)
    if callable(shardings) and not isinstance(shardings, dict):
        return lambda name, shape: wrap(shardings(name, tuple(shape)), name, shape)
    table = tree_names(shardings, is_leaf=_is_spec_leaf)
    for key in table:
        above = _covering(table, key, below=True)
        if above is not None:
            raise ValueError(f"the shardings tree is not a prefix tree: {above!r} is a leaf (it applies to its whole "
                             f"subtree) and {key!r} lies below it")

    def look(name, shape):
        key = _covering(table, name)
        if key is None:
            raise KeyError(f"the shardings tree has no entry for tensor {name!r}, nor for a subtree holding it")
        return wrap(table[key], name, shape)
    look.entries = table
    return look


def _covering(table, name, below=False):
    """The entry of `table` that is `name` or the nearest path above it
    (with below=True, only a path strictly above it), or None."""
    key = name
    if below:
        key = key.rpartition(".")[0] if "." in key else None
    while key is not None:
        if key in table:
            return key
        key = key.rpartition(".")[0] if "." in key else None
    return None


def _check_prefix(resolve, names):
    """Every leaf of a shardings tree names a tensor or a subtree of them
    (`names`: the checkpoint's, after renames, before any selection): a
    tree that is not a prefix of the checkpoint's is an error, as in JAX."""
    entries = getattr(resolve, "entries", None)
    if not entries:
        return
    used = {_covering(entries, n) for n in names}
    stray = [k for k in entries if k not in used]
    if stray:
        shown = ", ".join(repr(k) for k in stray[:5]) + (f" and {len(stray) - 5} more" if len(stray) > 5 else "")
        raise ValueError(f"the shardings tree is not a prefix of the checkpoint's tree: {shown} name no tensor "
                         f"and no subtree of tensors (the checkpoint's {len(names)} names: {names[:3]}…)")


def _names(catalog, rows, rules):
    """The checkpoint's tensor names after `rules` (renames …)."""
    return [it[0] for it in _api._build_plan(catalog, rows, **rules).items()]


def _fit(sharding, ndim):
    """The sharding fitted to an array of `ndim` axes: a PartitionSpec with
    entries for axes the array lacks (one P("x", None) for every tensor,
    vectors and scalars included) loses them — the array is replicated over
    those mesh axes, as ckpt.distributed makes a Shard of an axis a tensor
    lacks a Replicate — so that jax.device_put takes the same sharding."""
    if isinstance(sharding, NamedSharding) and len(sharding.spec) > ndim:
        spec = sharding.spec
        return sharding.update(spec=spec.update(partitions=tuple(spec)[:ndim]))
    return sharding


def _default_sharding():
    return SingleDeviceSharding(jax.local_devices()[0])


def _aligned_empty(shape, dtype):
    """An uninitialised array whose data is 64-byte aligned."""
    dtype = np.dtype(dtype)
    n = math.prod(shape) * dtype.itemsize
    raw = np.empty(n + _ALIGN, np.uint8)
    off = (-raw.ctypes.data) % _ALIGN
    return raw[off:off + n].view(dtype).reshape(shape)


_GLOB = re.compile(r"([*?\[\\])")


def _escape(name):
    """A plan pattern matching exactly `name` (its glob characters escaped;
    a name without any is looked up directly)."""
    return _GLOB.sub(r"\\\1", name) if _GLOB.search(name) else name


def _key(index, shape):
    """A device's index (a tuple of slices) as ((start, stop) per axis)."""
    if index is None:
        index = ()
    key = []
    for axis, n in enumerate(shape):
        sl = index[axis] if axis < len(index) else slice(None)
        start, stop, step = sl.indices(n)
        if step != 1:
            raise ValueError(f"a strided device index {sl}")
        key.append((start, stop))
    return tuple(key)


def _blocks(sharding, shape):
    """{(start, stop) per axis: [devices]} of this process's devices."""
    blocks = {}
    for dev, index in sharding.addressable_devices_indices_map(tuple(shape)).items():
        blocks.setdefault(_key(index, shape), []).append(dev)
    return blocks


# ---------------------------------------------------------------------------
# load

def load(path, shardings=None, *, mesh=None, dtype=None, select=None, exclude=None, rename=None, transpose=None,
         layout=None, nested=True, threads=0, io="auto", progress=None, stats=None):
    """Loads a checkpoint as jax.Arrays laid out by `shardings`.

    shardings: one jax.sharding.Sharding for every array; a function
    (name, shape) → Sharding; or a pytree (nested dicts as ckpt.shapes
    gives, or a flat {name: ...}) of Shardings — or of PartitionSpecs with
    mesh= — over the checkpoint's names after renames.  As in JAX, the
    pytree may be a prefix of the checkpoint's tree: a leaf ({"body":
    {"dense1": sharding}}) applies to every array of its subtree
    ("body.dense1.kernel", "body.dense1.bias"); a leaf naming no tensor and
    no subtree is an error.  None (or a None entry): the first local device.
    Each array's sharding is fitted to its rank: a PartitionSpec's entries
    for axes the array lacks are dropped (one P("x", None) for every array
    gives vectors P("x") and scalars P()), as ckpt.distributed makes a Shard
    of an axis a tensor lacks a Replicate — so jax.device_put takes the
    sharding each array comes with.

    dtype: one dtype for every float tensor or {glob: dtype}, cast by the
    engine; select / exclude / rename / transpose / layout: as ckpt.load.
    nested=True returns the checkpoint's tree (ckpt.shapes' structure);
    False a flat {name: Array}.  stats, a dict, receives what was read
    (bytes_needed, bytes_read, blocks, device_puts, host_bytes).

    Each process reads only the blocks of its addressable devices, each
    block once however many devices hold it."""
    _api.flags("ckpt.jax.load", nested=nested)
    resolve = _resolver(shardings, mesh)
    catalog = _sources.catalog(path, _api._io(io))  # local paths and URLs alike
    rows = catalog.tensors()
    rules = dict(rename=rename, dtype=dtype, transpose=transpose, layout=layout)
    base = _api._build_plan(catalog, rows, select=select, exclude=exclude, **rules)
    items = base.items()
    _check_prefix(resolve, _names(catalog, rows, rules) if select or exclude else [it[0] for it in items])
    perms = [base.perm(i) for i in range(len(items))]
    structure = _tree.of_plan(catalog, base, renames=rename) if nested else None
    del base

    entries = []  # per tensor: name, source name, dtype, shape, perm, sharding, blocks
    for i, (name, src, dt, shape, nbytes, transform) in enumerate(items):
        sharding = resolve(name, shape) or _default_sharding()
        try:
            blocks = _blocks(sharding, shape)
        except Exception as e:
            if hasattr(e, "add_note"):
                e.add_note(f"(ckpt.jax.load: tensor {name!r} of shape {tuple(shape)})")
            raise
        entries.append((name, rows[src][0], dt, tuple(shape), perms[i], sharding, blocks))

    # Block r of every tensor that has one is read through plan r, which
    # holds every such tensor with its slices (rules by name cost O(1));
    # its tensors are loaded in batches of at most max(_BATCH, the largest
    # block) bytes, selected in turn.
    per_rank = []
    for k, (name, src_name, dt, shape, perm, sharding, blocks) in enumerate(entries):
        item = np.dtype(_dtypes.numpy_dtype(dt, name)).itemsize
        for r, (key, devices) in enumerate(blocks.items()):
            if r == len(per_rank):
                per_rank.append([])
            per_rank[r].append((k, key, devices, math.prod(b - a for a, b in key) * item))
    sizes = [t[3] for tasks in per_rank for t in tasks]
    budget = max([_BATCH] + sizes)
    total = sum(sizes)
    bar = _progress.choose(progress, "load")
    # CPU devices adopt the aligned host buffers: each array is made from
    # its blocks at the end, in one call (make_array_from_callback).  Other
    # devices get each block as soon as it is read, so that host memory
    # holds one batch at most.
    on_cpu = [all(d.platform == "cpu" for d in e[5].device_set) for e in entries]
    host = [{} for _ in entries]
    shards = [[] for _ in entries]
    st = {"bytes_needed": 0, "bytes_read": 0, "blocks": len(sizes), "device_puts": 0, "host_bytes": total,
          "batches": 0}
    done = 0
    for tasks in per_rank:
        plan = _api._build_plan(catalog, rows, select=[_escape(entries[k][1]) for k, *_ in tasks], **rules)
        for k, key, devices, nbytes in tasks:
            name, src_name, dt, shape, perm, sharding, blocks = entries[k]
            for axis, (a, b) in enumerate(key):
                if (a, b) != (0, shape[axis]):
                    plan.slice(_escape(src_name), perm[axis], a, b)
        batches, current, used = [], [], 0
        for t in tasks:
            if current and used + t[3] > budget:
                batches.append(current)
                current, used = [], 0
            current.append(t)
            used += t[3]
        if current:
            batches.append(current)
        plan.exclude("*")
        for batch in batches:
            by_name = {}
            for k, key, devices, nbytes in batch:
                plan.select(_escape(entries[k][1]))
                by_name[entries[k][0]] = (k, key, devices)
            buffers = []
            for i, (name, src, dt, shape, nbytes, transform) in enumerate(plan.items()):
                k, key, devices = by_name[name]
                buf = _aligned_empty(shape, _dtypes.numpy_dtype(dt, name))
                if buf.nbytes:
                    plan.set_buffer(i, buf.reshape(-1).view(np.uint8))
                buffers.append((k, key, devices, buf))
            cb = (lambda d, t, _o=done: bar(_o + d, total)) if bar else None
            plan.load(threads=threads, progress=cb)
            plan.release_buffers()
            s = plan.stats()
            st["bytes_needed"] += s["bytes_needed"]
            st["bytes_read"] += s["bytes_read"]
            st["batches"] += 1
            for k, key, devices, buf in buffers:
                if on_cpu[k]:
                    host[k][key] = buf
                else:
                    for dev in devices:
                        shards[k].append(jax.device_put(buf, dev))
                st["device_puts"] += len(devices)
                done += buf.nbytes
            del buffers
            for k, *_ in batch:
                plan.exclude(_escape(entries[k][1]))  # by name: O(1) each
        del plan
    if bar:
        bar(total, total)

    flat = {}
    for k, (name, src_name, dt, shape, perm, sharding, blocks) in enumerate(entries):
        if on_cpu[k]:
            flat[name] = jax.make_array_from_callback(shape, sharding,
                                                      lambda index, h=host[k], s=shape: h[_key(index, s)])
        else:
            flat[name] = jax.make_array_from_single_device_arrays(shape, sharding, shards[k])
        host[k] = shards[k] = None
    if stats is not None:
        stats.update(st)
    if not nested:
        return flat
    return _tree.unflatten(flat, structure)


# ---------------------------------------------------------------------------
# Shapes and the match report

def shapes(path, shardings=None, *, mesh=None, nested=True, **rules):
    """The checkpoint's tree of jax.ShapeDtypeStruct, reading no data; with
    `shardings` (as for load) each carries its sharding — what
    jax.jit(...).lower and Orbax restores take."""
    _api.flags("ckpt.jax.shapes", nested=nested)
    resolve = _resolver(shardings, mesh) if shardings is not None else None
    catalog = _sources.catalog(path)  # local paths and URLs alike
    rows = catalog.tensors()
    plan = _api._build_plan(catalog, rows, **rules, where="ckpt.jax.shapes")
    if resolve:
        unselected = {k: v for k, v in rules.items() if k not in ("select", "exclude")}
        _check_prefix(resolve, _names(catalog, rows, unselected))
    flat = {}
    for name, src, dt, shape, nbytes, transform in plan.items():
        sharding = resolve(name, shape) if resolve else None
        flat[name] = jax.ShapeDtypeStruct(tuple(shape), _dtypes.numpy_dtype(dt, name), sharding=sharding)
    if not nested:
        return flat
    return _tree.unflatten(flat, _tree.of_plan(catalog, plan, renames=rules.get("rename")))


def _expected_leaves(expected):
    """{name: (shape, dtype)} of a pytree of arrays or ShapeDtypeStructs."""
    out = {}
    for name, leaf in tree_names(expected).items():
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            out[name] = (tuple(leaf.shape), leaf.dtype)
    return out


def _spec(shape, dtype):
    try:
        return _api.TensorSpec(tuple(shape), _api.dtype_name(dtype))
    except (TypeError, ValueError):
        return _api.TensorSpec(tuple(shape), str(dtype))


def match(path, expected, *, select=None, exclude=None, rename=None, dtype=None, transpose=None, layout=None):
    """Compares a checkpoint with what a model expects, reading no data.

    expected: a pytree of jax.ShapeDtypeStruct or arrays, e.g.
    jax.eval_shape(model.init, rng, x)["params"]; leaves are named by their
    path joined with ".".  The checkpoint's names, shapes and dtypes are
    taken after the renames, transposes and layouts given.  Returns
    LoadResult(missing_keys, unexpected_keys, mismatched_keys) as
    ckpt.load_into does: names the model has and the checkpoint lacks, names
    the checkpoint has and the model lacks, and Mismatch entries (shapes
    differ)."""
    leaves = _expected_leaves(expected)
    catalog = _sources.catalog(path)  # local paths and URLs alike
    rows = catalog.tensors()
    plan = _api._build_plan(catalog, rows, select=select, exclude=exclude, rename=rename, dtype=dtype,
                            transpose=transpose, layout=layout)
    items = plan.items()
    wanted = [(name, None, shape) for name, (shape, _) in leaves.items()]
    missing, unexpected, mismatched = [], [], []
    for kind, name, e, item in plan.match(wanted, 0):
        if kind == _api._MISSING:
            missing.append(name)
        elif kind == _api._UNEXPECTED:
            unexpected.append(name)
        elif kind == _api._SHAPE:
            shape, dt = leaves[name]
            found = items[item]
            mismatched.append(_api.Mismatch(name, _spec(shape, dt), _api.TensorSpec(tuple(found[3]), found[2])))
    return _api.LoadResult(missing, unexpected, mismatched)


# ---------------------------------------------------------------------------
# Initialising only what the checkpoint lacks

def program_stats(compiled):
    """{"hlo_instructions", "output_bytes", "temp_bytes"} of a compiled jax
    program: what XLA kept of it."""
    text = compiled.as_text() or ""
    count = sum(1 for line in text.splitlines() if re.match(r"\s*(ROOT\s+)?%?[\w.\-]+\s*=", line))
    mem = compiled.memory_analysis()
    return {"hlo_instructions": count, "output_bytes": getattr(mem, "output_size_in_bytes", None),
            "temp_bytes": getattr(mem, "temp_size_in_bytes", None)}


def init_missing(init_fn, loaded, *args, shardings=None, mesh=None, reinit_mismatched=False, stats=None, **kwargs):
    """Completes `loaded` (a pytree of arrays, e.g. {"params": ckpt.jax.load(...)})
    into the full tree `init_fn(*args, **kwargs)` returns (a Flax
    `model.init`), computing only the leaves `loaded` lacks.

    The init is jitted with only those leaves as outputs, so XLA drops the
    computation of every other parameter, and with out_shardings from
    `shardings` (as for load: one Sharding, a function (name, shape), or a
    pytree over the full tree's names; None: jit's default), so the new
    leaves are born sharded.  Loaded leaves are kept as they are (their
    dtype and sharding included).

    Returns (tree, LoadResult(missing_keys, unexpected_keys,
    mismatched_keys)): missing are the leaves initialised, unexpected the
    loaded leaves the model does not have (left out of the tree),
    mismatched the loaded leaves whose shape differs — an error unless
    reinit_mismatched=True, which initialises them too.  stats, a dict,
    receives the names initialised and what XLA kept of the program
    (hlo_instructions, output_bytes, temp_bytes).

    Non-array arguments (train=False, shapes) are closed over, so the
    program is traced once with them as constants."""
    _api.flags("ckpt.jax.init_missing", reinit_mismatched=reinit_mismatched)
    expected = jax.eval_shape(lambda: init_fn(*args, **kwargs))
    want = tree_names(expected)
    have = tree_names(loaded)
    missing = [n for n in want if n not in have]
    unexpected = [n for n in have if n not in want]
    mismatched = []
    for n, leaf in want.items():
        got = have.get(n)
        if got is not None and tuple(np.shape(got)) != tuple(leaf.shape):
            mismatched.append(_api.Mismatch(n, _spec(leaf.shape, leaf.dtype),
                                            _spec(np.shape(got), getattr(got, "dtype", np.asarray(got).dtype))))
    if mismatched and not reinit_mismatched:
        lines = "".join(f"\n\t{m.name}: checkpoint {m.found.shape}, model {m.expected.shape}" for m in mismatched)
        raise ValueError(f"{len(mismatched)} loaded leaves have shapes the model does not expect "
                         f"(reinit_mismatched=True initialises them):{lines}")
    fresh_names = missing + [m.name for m in mismatched]
    fresh = {}
    if fresh_names:
        resolve = _resolver(shardings, mesh)
        outs = [resolve(n, want[n].shape) for n in fresh_names]

        def only_missing():
            full = tree_names(init_fn(*args, **kwargs))
            return [full[n] for n in fresh_names]

        out_shardings = outs if all(s is not None for s in outs) else None
        if out_shardings is None and any(s is not None for s in outs):
            default = _default_sharding()
            out_shardings = [s or default for s in outs]
        compiled = jax.jit(only_missing, out_shardings=out_shardings).lower().compile()
        values = compiled()
        fresh = dict(zip(fresh_names, values))
        if stats is not None:
            stats.update(program_stats(compiled))
    if stats is not None:
        stats["initialised"] = list(fresh_names)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(expected)
    out = []
    for path, _ in leaves:
        n = ".".join(_key_str(k) for k in path)
        out.append(fresh[n] if n in fresh else have[n])
    tree = jax.tree_util.tree_unflatten(treedef, out)
    return tree, _api.LoadResult(missing, unexpected, mismatched)
