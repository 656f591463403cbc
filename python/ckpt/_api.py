"""ckpt's own Python API: catalogs, shape trees, the load engine (slices,
casts, renames, in-place loading) and streaming sharded saves."""
import math
import json
import os
import re
from collections import namedtuple

from . import _ckpt, _dtypes, _frameworks, _progress, _sources, _tree

FORMATS = {1: "safetensors", 2: "safetensors-sharded", 3: "torch", 4: "torch-sharded", 5: "gguf", 6: "dcp", 7: "npy",
           8: "npz", 9: "flax-msgpack"}
_IO = {"auto": 0, "buffered": 1, "direct": 2}
_VIEWS_PRIVATE = 2
_MISSING, _UNEXPECTED, _SHAPE, _DTYPE = 1, 2, 3, 4
_MATCH_CAST = 1

TensorSpec = namedtuple("TensorSpec", "shape dtype")
TensorSpec.__doc__ = "Shape and dtype (safetensors name, e.g. 'BF16') of a tensor, without its data."
TensorInfo = namedtuple("TensorInfo", "name dtype shape nbytes file offset")
Mismatch = namedtuple("Mismatch", "name expected found")
Mismatch.__doc__ = "A tensor whose shape (or dtype) differs: expected and found are TensorSpecs."


class LoadResult(namedtuple("LoadResult", "missing_keys unexpected_keys mismatched_keys")):
    """What load_into did not load: names the target has and the checkpoint
    lacks, names the checkpoint has and the target lacks, and Mismatch
    entries for tensors present in both with different shapes."""


def dtype_name(dtype):
    """The safetensors name of a dtype given as such a name ("BF16"), a
    torch or numpy dtype, or a dtype's name ("bfloat16", "float32")."""
    if isinstance(dtype, str):
        if _ckpt_known(dtype.upper()):  # "BF16", or the CLI's "bf16", "f8_e4m3"
            return dtype.upper()
        for table in (_dtypes.TORCH, _dtypes.ML_DTYPES, _dtypes.NUMPY):
            for k, v in table.items():
                if v == dtype:
                    return k
        raise ValueError(f"unknown dtype {dtype!r}")
    mod = type(dtype).__module__
    if mod.startswith("torch"):
        return _dtypes.torch_name(dtype)
    return _dtypes.numpy_name(dtype)


def _ckpt_known(name):
    try:
        _ckpt.dtype_bits(name)
        return True
    except ValueError:
        return False


def _literal(name):
    """A plan pattern that matches exactly `name` (the plan's globs take a
    backslash before `*`, `?`, `[` and `\\` as the character itself)."""
    return re.sub(r"([*?\[\\])", r"\\\1", name)


def _listify(x):
    if x is None:
        return []
    return [x] if isinstance(x, str) else list(x)


# ---------------------------------------------------------------------------
# Catalogs

class Checkpoint:
    """A checkpoint's catalog: names, shapes, dtypes, metadata and (torch
    files) the object tree, read without the data.  Use as a context manager
    or call close().  `path` may be an http://, https:// or s3:// URL; see
    the source options of ckpt.open."""

    def __init__(self, path, allowed_globals=None, *, direct=False, **source):
        self.path = _sources.name(path)
        self._catalog = _sources.catalog(self.path, direct, allowed_globals, open, **source)
        info = self._catalog.info()
        self.format = FORMATS.get(info["format"], str(info["format"]))
        self.index_path = info["index_path"]
        self._tree_json = info["tree_json"]
        # Rows are built when asked for: opening builds none, keys() only names.
        self._rows = self._catalog.tensors()
        self.files = [p for p, _ in self._catalog.files()]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._catalog.close()

    def __len__(self):
        return len(self._rows)

    def __iter__(self):
        return iter(self.keys())

    def __contains__(self, name):
        return isinstance(name, str) and self._catalog.find(name) is not None

    def keys(self):
        """Tensor names in file order."""
        return self._catalog.names()

    @property
    def tensors(self):
        """{name: TensorInfo(name, dtype, shape, nbytes, file, offset)}."""
        return self._catalog.infos(TensorInfo, self.files)

    @property
    def nbytes(self):
        return sum(r.nbytes for r in self._rows)

    @property
    def metadata(self):
        """The __metadata__ map (the union of the shards' maps)."""
        return self._catalog.metadata()

    @property
    def kv(self):
        """A GGUF file's key-values, {key: value} in file order (strings,
        numbers, bools, lists; nested lists for arrays of arrays); each
        value's GGUF type is in the metadata map's typed JSON
        ({"gguf_type": "u32", "value": 5}).  Empty for other formats."""
        if self.format != "gguf":
            return {}
        out = {}
        for k, v in self.metadata.items():
            if v.startswith("{") and '"gguf_type"' in v:
                try:
                    out[k] = _gguf_value(_tree.loads(v))
                    continue
                except ValueError:
                    pass
            out[k] = v
        return out

    def tree(self, leaf=None):
        """The checkpoint's nested structure with leaf(name) (default: a
        TensorSpec) for each tensor: a torch file's object tree (optimizer
        state, epochs, … included), a structure saved by ckpt.save, or the
        names split at dots."""
        leaf = leaf or self.spec
        structure = self._tree_json or self.metadata.get(_tree.STRUCTURE_KEY)
        if structure:
            return _tree.decode(structure, leaf)
        return _tree.unflatten({name: leaf(name) for name in self.keys()})

    def spec(self, name):
        r = self._rows[self._row(name)]
        return TensorSpec(r[2], r[1])

    def _row(self, name):
        i = self._catalog.find(name) if isinstance(name, str) else None
        if i is None:
            raise KeyError(f"{self.path} does not contain tensor {name!r}")
        return i

    def view(self, name):
        """A read-only, zero-copy numpy array on the file's mapping (only for
        tensors stored as loaded: dense, little-endian, uncompressed)."""
        i = self._row(name)
        r = self._rows[i]
        return _frameworks.Numpy.from_buffer(self._catalog.view(i), r[1], r[2], 0, name)

    def get(self, name, framework="numpy"):
        """One tensor, copied into new memory (any stored layout)."""
        fw = _frameworks.get(framework)
        i = self._row(name)
        r = self._rows[i]
        out = fw.empty(r[1], r[2], name)
        if r[3]:
            self._catalog.read(i, fw.raw(out, writable=True))
        return fw.to_device(out, None)

    def verify(self, progress=None):
        """Checks every recorded checksum; returns how many tensors matched."""
        return self._catalog.verify(progress=_progress.choose(progress, "verify"))

    def __repr__(self):
        return (f"<ckpt.Checkpoint {_sources.shown(self.path)!r} {self.format}, {len(self)} tensors, "
                f"{self.nbytes / 1e9:.2f} GB>")


def _gguf_value(typed):
    value = typed["value"]
    if typed.get("gguf_type") == "array" and typed.get("element") == "array":
        return [_gguf_value(v) for v in value]
    if typed.get("gguf_type") in ("f32", "f64") and isinstance(value, str):
        return float(value)
    if typed.get("element") in ("f32", "f64"):
        return [float(v) for v in value]
    return value


def open(path, *, allowed_globals=None, direct=False, **source):  # noqa: A001 - as safetensors' safe_open
    """Opens a checkpoint's catalog (.safetensors, sharded directory or
    index, torch.save file — or their http://, https:// or s3:// URLs)
    without reading tensor data.
    allowed_globals: pickle globals ("module.Name") to allow beside torch's
    weights-only allowlist, as torch.serialization.add_safe_globals does —
    plain-data reconstructors only (numpy scalars and dtypes,
    argparse.Namespace, dataclasses); nothing is ever executed.

    Source options (every function that opens a checkpoint takes them):
    direct=True reads local files with O_DIRECT, around the page cache (no
    mappings; converts also drop what they write); for remote files,
    cache_dir (verified local copies), bearer_token, timeout and
    connect_timeout (seconds), retries and max_connections."""
    return Checkpoint(path, allowed_globals, direct=direct, **source)


def shapes(path, *, nested=True, **source):
    """The tree of shapes and dtypes of a checkpoint, reading no data — to
    build a model skeleton (as with Flax's eval_shape).  Leaves are
    jax.ShapeDtypeStruct when jax is installed (and knows the dtype), else
    TensorSpec(shape, dtype).  nested=False gives {name: leaf}."""
    with Checkpoint(path, **source) as c:
        leaf = _jax_leaf(c) or c.spec
        if nested:
            return c.tree(leaf)
        return {name: leaf(name) for name in c.keys()}


def _jax_leaf(c):
    try:
        import jax
    except ImportError:
        return None

    def leaf(name):
        spec = c.spec(name)
        try:
            dt = _dtypes.numpy_dtype(spec.dtype, name)
        except TypeError:
            return spec
        return jax.ShapeDtypeStruct(spec.shape, dt)

    return leaf


# ---------------------------------------------------------------------------
# Plans

def _glob_re(pattern):
    """The plan's glob (`*` any run, dots included; `?` one character) as a regex."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.S)


def _build_plan(catalog, rows, *, select=None, exclude=None, rename=None, dtype=None, tp_rank=None, tp_size=None,
                tp_dim=0, tp_select=None, slices=None, transpose=None, layout=None, ignore_unmatched=False):
    plan = _ckpt.Plan(catalog)
    if ignore_unmatched:
        plan.set_flags(1)
    for p in _listify(select):
        plan.select(p)
    for p in _listify(exclude):
        plan.exclude(p)
    if rename:
        pairs = rename.items() if isinstance(rename, dict) else rename
        for a, b in pairs:
            plan.rename(a, b)
    for pattern, spec in (slices or {}).items():
        d, start, stop = spec
        plan.slice(pattern, d, start, stop)
    if tp_size is not None or tp_rank is not None:
        if tp_size is None or tp_rank is None:
            raise ValueError("tp_rank and tp_size go together")
        if not 0 <= tp_rank < tp_size:
            raise ValueError(f"tp_rank {tp_rank} is not in [0, {tp_size})")
        wanted = [_glob_re(p) for p in _listify(tp_select)] or None
        for _, src, _, _, _, _ in plan.items():
            name, ndim = rows[src][0], len(rows[src][2])
            axis = tp_dim if tp_dim >= 0 else ndim + tp_dim
            if not 0 <= axis < ndim:
                continue
            if wanted is not None and not any(w.fullmatch(name) for w in wanted):
                continue
            plan.split(_literal(name), tp_dim, tp_rank, tp_size)
    if dtype is not None:
        if isinstance(dtype, dict):
            for pattern, d in dtype.items():
                plan.cast(pattern, dtype_name(d))
        else:
            plan.cast(None, dtype_name(dtype))
    for p in _listify(transpose):
        plan.transpose(p)
    if layout:
        pairs = layout.items() if isinstance(layout, dict) else [(None, layout)]
        for pattern, spec in pairs:
            src, dst = spec.split(":") if isinstance(spec, str) else spec
            plan.layout(pattern, src, dst)
    return plan


def _io(io, direct=False):
    try:
        mode = _IO[io]
    except KeyError:
        raise ValueError(f"io must be one of {sorted(_IO)}, not {io!r}") from None
    if direct and io == "buffered":
        raise ValueError("direct=True reads around the page cache; io='buffered' reads through it")
    return _IO["direct"] if direct else mode


def load(path, framework="pt", *, select=None, exclude=None, rename=None, dtype=None, tp_rank=None, tp_size=None,
         tp_dim=0, tp_select=None, slices=None, transpose=None, layout=None, device="cpu", nested=False, copy=False,
         mmap=None, threads=0, io="auto", progress=None, allowed_globals=None, ignore_unmatched=False, direct=False,
         **source):
    """Loads a checkpoint (or the part of it a device needs) into a dict of
    tensors, with the parallel engine: memory beyond the tensors is a small
    bounce ring, whatever the checkpoint's size.

    select / exclude: globs of names to keep or drop; rename: {from: to}
    (prefixes or `*` patterns); dtype: one dtype for every float tensor, or
    {glob: dtype}; tp_rank / tp_size: keep part tp_rank of tp_size along
    tp_dim of each tensor that has that axis (of those matching tp_select);
    slices: {glob: (dim, start, stop)} keeps a range of one axis;
    transpose: globs of 2-D tensors to transpose; layout: "OIHW:HWIO" or
    {glob: "OIHW:HWIO"}.  nested=True returns the checkpoint's nested
    structure.  `path` may be a URL; direct=True and the other source
    options are those of ckpt.open.

    Tensors whose bytes need no conversion (whole tensors, and slices that
    are one contiguous range of rows) come back, as from safetensors'
    load_file, as writable copy-on-write views of the file (writes never
    reach it) on local file systems, prefetched in the background (only
    the bytes shown); copy=True gives every tensor memory of its own
    instead, as do URLs and direct=True.  The others (casts, layouts,
    slices of inner axes) are read by the engine into new memory.
    mmap=True asks for the views explicitly; mmap=False is copy=True."""
    if mmap is not None and not mmap:
        copy = True
    fw = _frameworks.get(framework)
    if fw is _frameworks.Jax and _frameworks.jax_placement(device) is not None:
        # A jax Sharding or Device: each device gets its block, read in place.
        if mmap or tp_rank is not None or tp_size is not None or slices:
            raise ValueError("with a jax sharding as device, the sharding slices the tensors: "
                             "tp_rank, tp_size, slices and mmap do not apply")
        from . import jax as ckpt_jax
        return ckpt_jax.load(path, _frameworks.jax_placement(device), select=select, exclude=exclude, rename=rename,
                             dtype=dtype, transpose=transpose, layout=layout, nested=nested, threads=threads, io=io,
                             progress=progress)
    fw.check_device(device)  # refuses, before any read, a device the framework does not honour
    if mmap and direct:
        raise ValueError("mmap=True maps the file into the page cache; direct=True never goes through it")
    io_mode = _io(io, direct)
    catalog = _sources.catalog(path, direct, allowed_globals, load, **source)
    rows = catalog.tensors()
    plan = _build_plan(catalog, rows, select=select, exclude=exclude, rename=rename, dtype=dtype, tp_rank=tp_rank,
                       tp_size=tp_size, tp_dim=tp_dim, tp_select=tp_select, slices=slices, transpose=transpose,
                       layout=layout, ignore_unmatched=ignore_unmatched)
    items = plan.items()
    order = [item.name for item in items]
    # What needs no conversion comes as copy-on-write views of the
    # library's private, prefetched mappings (whole tensors and contiguous
    # row ranges); the rest, or everything with copy=True or direct=True,
    # through the engine (remote sources are never mapped).
    plan.load(threads=threads, io=io_mode, views=0 if copy or direct else _VIEWS_PRIVATE,
              progress=_progress.choose(progress, "load"))
    out = {}
    for i, item in enumerate(items):
        out[item.name] = fw.from_buffer(plan.data(i), item.dtype, item.shape, 0, item.name)
    out = {k: fw.to_device(out[k], device) for k in order}
    if nested:
        info = catalog.info()
        structure = info["tree_json"] or catalog.metadata().get(_tree.STRUCTURE_KEY)
        return _tree.unflatten(out, structure) if structure and not (rename or select or exclude) else _tree.unflatten(out)
    return out


def _target_tensors(target):
    """(framework, {name: tensor}) of a module, a state dict or a nested
    dict of arrays."""
    mod = type(target).__module__
    if hasattr(target, "state_dict") and mod.startswith("torch") or _is_module(target):
        return _frameworks.Torch, target.state_dict()
    flat = _tree.flatten(target)
    fws = {_frameworks.of(t) for t in flat.values()}
    if len(fws) != 1 or None in fws:
        raise TypeError("load_into needs a torch.nn.Module, or a dict (possibly nested) of only torch tensors "
                        "or only numpy arrays")
    return fws.pop(), flat


def _address(fw, t):
    """(data address, nbytes) of a tensor, or None for an empty one."""
    _, _, nbytes = fw.describe(t)
    if not nbytes:
        return None
    ptr = t.data_ptr() if fw is _frameworks.Torch else t.__array_interface__["data"][0]
    return ptr, nbytes


def _is_module(x):
    try:
        import torch
    except ImportError:
        return False
    return isinstance(x, torch.nn.Module)


def load_into(target, path, strict=True, *, select=None, exclude=None, rename=None, tp_rank=None, tp_size=None,
              tp_dim=0, tp_select=None, slices=None, transpose=None, layout=None, threads=0, io="auto",
              progress=None, allowed_globals=None, ignore_unmatched=False, direct=False, on_loaded=None,
              **source):
    """Loads a checkpoint into the existing tensors of `target` — a
    torch.nn.Module, a state dict, or a (nested) dict of numpy arrays — in
    place: bytes go straight from the file into each tensor's memory, so no
    second copy of the model is ever held.  Float tensors are cast to the
    target's dtype on the way.

    Returns LoadResult(missing_keys, unexpected_keys, mismatched_keys), like
    load_state_dict; with strict=True any of them raises RuntimeError
    (nothing is written then).  `path` may be a URL; with direct=True the
    file is read around the page cache (O_DIRECT), so the model's memory
    is all the load adds — under a container's memory limit, or on a
    unified-memory machine, nothing is held twice.

    on_loaded(name, tensor), if given, is called for each tensor as soon as
    its bytes are in place, while the others are still being read — from
    the loading threads, one call at a time (it holds the GIL), in no
    particular order — to use each one (copy it to a device, hash it)
    without waiting for the whole load.  An exception it raises stops the
    load and is raised here."""
    if on_loaded is not None and not callable(on_loaded):
        raise TypeError(f"on_loaded must be a function of (name, tensor), not {type(on_loaded).__name__}")
    fw, flat = _target_tensors(target)
    io_mode = _io(io, direct)
    catalog = _sources.catalog(path, direct, allowed_globals, load_into, **source)
    rows = catalog.tensors()
    plan = _build_plan(catalog, rows, select=select, exclude=exclude, rename=rename, tp_rank=tp_rank,
                       tp_size=tp_size, tp_dim=tp_dim, tp_select=tp_select, slices=slices, transpose=transpose,
                       layout=layout, ignore_unmatched=ignore_unmatched)
    expected = []
    for name, t in flat.items():
        dt, shape, _ = fw.describe(t)
        expected.append((name, dt, shape))
    before = plan.items()
    report = plan.match(expected, _MATCH_CAST)
    missing, unexpected, mismatched, drop, recast = [], [], [], [], set()
    for kind, name, e, item in report:
        if kind == _MISSING:
            missing.append(name)
        elif kind == _UNEXPECTED:
            unexpected.append(name)
            drop.append(rows[before[item][1]][0])
        elif kind == _SHAPE:
            exp = expected[e]
            mismatched.append(Mismatch(name, TensorSpec(exp[2], exp[1]), TensorSpec(before[item][3], before[item][2])))
            drop.append(rows[before[item][1]][0])
        elif kind == _DTYPE:
            recast.add(name)  # not castable by ckpt (e.g. int32 → int64): the framework converts
    if missing:
        # Tied weights (an output head sharing the embedding's memory) are
        # saved once; the names that alias a loaded tensor are not missing.
        mismatched_names = {m.name for m in mismatched}
        loaded = {_address(fw, flat[it[0]]) for it in before if it[0] in flat and it[0] not in mismatched_names}
        loaded.discard(None)
        missing = [n for n in missing if _address(fw, flat[n]) not in loaded]
    if strict and (missing or unexpected or mismatched):
        kind = type(target).__name__
        error = f"Error(s) in loading state_dict for {kind}:"
        if missing:
            error += "\n\tMissing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + "."
        if unexpected:
            error += "\n\tUnexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + "."
        for m in mismatched:
            error += (f"\n\tsize mismatch for {m.name}: copying a param with shape {tuple(m.found.shape)} from "
                      f"checkpoint, the shape in current model is {tuple(m.expected.shape)}.")
        raise RuntimeError(error)
    for source in drop:
        plan.exclude(_literal(source))
    items = plan.items()
    direct = []
    for i, (name, src, dt, shape, nbytes, transform) in enumerate(items):
        t = flat[name]
        if name not in recast and fw.on_cpu(t) and fw.is_contiguous(t):
            plan.set_buffer(i, fw.raw(t, writable=True))
            direct.append(True)
        else:
            direct.append(False)
    done = None
    if on_loaded is not None:
        def done(i):  # items read in place are the caller's tensors already; the others come after the copy
            if direct[i]:
                on_loaded(items[i][0], flat[items[i][0]])
    plan.load(threads=threads, io=io_mode, progress=_progress.choose(progress, "load"), item_done=done)
    for i, (name, src, dt, shape, nbytes, transform) in enumerate(items):
        if not direct[i]:
            tmp = fw.from_buffer(plan.data(i), dt, shape, 0, name)
            fw.copy_into(flat[name], tmp)
            del tmp
            if on_loaded is not None:
                on_loaded(name, flat[name])
    return LoadResult(missing, unexpected, mismatched)


# ---------------------------------------------------------------------------
# Saving and converting

_CHUNK = 64 << 20


def _parse_size(size):
    if size is None:
        return 0
    if isinstance(size, int):
        return size
    return _ckpt.parse_size(str(size))


def _storage(fw, t, ids):
    """Where a torch tensor lies in its storage, as huggingface_hub's
    _find_shared_tensors sees it: (id, storage bytes, begin, end, contiguous),
    or None for tensors that share nothing (numpy arrays, meta tensors)."""
    if fw is not _frameworks.Torch or t.device.type == "meta":
        return None
    storage = t.untyped_storage()
    ptr, size = storage.data_ptr(), storage.nbytes()
    if not ptr or not size:
        return None
    begin = t.data_ptr() - ptr
    end = begin
    if t.nelement():  # one past the last element in row-major order (the hub's _end_ptr)
        end = t.view(-1)[-1].data_ptr() + t.element_size() - ptr if t.is_contiguous() else \
            begin + (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * t.element_size()
    key = ids.setdefault((str(t.device), ptr, size), len(ids) + 1)
    return (key, size, begin, end, t.is_contiguous())


def save(tensors, directory, max_shard_size="5GB", metadata=None, *, prefix="model", overwrite=False,
         checksums=False, progress=None, no_sync=False):
    """Saves tensors as a Hugging Face sharded checkpoint in `directory`
    (shards of at most max_shard_size bytes plus
    <prefix>.safetensors.index.json, or <prefix>.safetensors when everything
    fits), streaming each tensor from its own memory — nothing is
    concatenated, a non-contiguous or GPU tensor is copied a few rows at a
    time.  The files, the index and the metadata are what
    huggingface_hub's save_torch_state_dict writes, byte for byte: tensors
    that share memory (tied weights) are written once and recorded as
    `removed → kept`, and views that no tensor covers are refused as the hub
    refuses them.  Atomic: an existing checkpoint is replaced only with
    overwrite=True, and only once every new file is complete.  `tensors` may
    be a module, a state dict or a nested tree (its structure is recorded
    and restored by load(..., nested=True)).  Returns the paths written."""
    if _is_module(tensors):
        tensors = tensors.state_dict()
    flat, structure = _tree.flatten(tensors, with_structure=True)
    plain = isinstance(tensors, dict) and all(_frameworks.of(v) is not None for v in tensors.values()) and \
        all(isinstance(k, str) for k in tensors)
    limit = _parse_size(max_shard_size)
    w = _ckpt.Writer(os.fspath(directory), max_shard_size=limit or (1 << 62), prefix=prefix, overwrite=overwrite,
                     no_sync=no_sync, checksums=checksums)
    try:
        fws = set()
        entries, ids = [], {}
        for name, t in flat.items():
            fw = _frameworks.of(t)
            if fw is None:
                raise TypeError(f"{name!r} is a {type(t).__name__}: ckpt.save takes torch tensors and numpy arrays")
            fws.add(fw)
            dt, shape, nbytes = fw.describe(t)
            entries.append((w.add(name, dt, shape, _storage(fw, t, ids)), fw, t, nbytes))
        if _frameworks.Torch in fws:
            w.set_metadata("format", "pt")
        for k, v in (metadata or {}).items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("metadata must map str to str")
            w.set_metadata(k, v, True)
        if not plain:
            w.set_metadata(_tree.STRUCTURE_KEY, structure, True)
        files = w.begin()
        if len(files) > 1:
            files.append(os.path.join(os.path.normpath(os.fspath(directory)), f"{prefix}.safetensors.index.json"))
        entries = [e for e in entries if w.kept(e[0]) is None]  # tensors written in another's place are not sent
        total = sum(e[3] for e in entries)
        bar = _progress.choose(progress, "save")
        done = 0
        for index, fw, t, nbytes in entries:
            for part in _pieces(fw, t):
                w.write(index, fw.raw(part))
            done += nbytes
            if bar and bar(done, total):
                raise KeyboardInterrupt("save cancelled by the progress callback")
        w.commit()
        return files
    finally:
        w.abort()


def _pieces(fw, t):
    """The tensor's bytes in row order, as contiguous CPU pieces of at most
    about 64 MiB (the tensor itself when it already is one)."""
    if fw.on_cpu(t) and fw.is_contiguous(t):
        yield t
        return
    dt, shape, nbytes = fw.describe(t)
    rows = shape[0] if shape else 1
    if not shape or rows <= 1:
        yield fw.contiguous(fw.to_device(t, "cpu") if fw is _frameworks.Numpy else t.to("cpu"))
        return
    step = max(1, int(_CHUNK // max(1, nbytes // rows)))
    for i in range(0, rows, step):
        part = t[i:i + step]
        if fw is _frameworks.Torch:
            part = part.to("cpu")
        yield fw.contiguous(part)


def convert(src, dst, *, select=None, exclude=None, rename=None, dtype=None, tp_rank=None, tp_size=None, tp_dim=0,
            tp_select=None, slices=None, transpose=None, layout=None, max_shard_size=None, prefix=None,
            overwrite=False, checksums=False, no_sync=False, progress=None, extra_files=True, allowed_globals=None,
            ignore_unmatched=False, format=None, dcp_ranks=1, direct=False, dry_run=False,
            **source):  # noqa: A002
    """Converts a checkpoint (any format ckpt reads) to safetensors at `dst`
    — one file, or shards in a directory when max_shard_size is given or
    `dst` is a directory (ends with "/" or exists as one: 5GB shards) —
    applying the same selections, renames, slices, casts and layouts as
    `ckpt convert`, streamed with bounded memory and renamed into place when
    complete.

    `format` writes another format instead: "gguf" (as GGUFWriter writes
    it), "npz" (a NumPy archive np.load reads), "flax-msgpack" (a Flax
    msgpack file, names split at dots into nested maps), or "dcp" (a
    torch.distributed.checkpoint directory, as if saved by `dcp_ranks`
    ranks: tensors cut along their first axis, as Shard(0) cuts them); a
    `dst` ending in .gguf, .npz or .msgpack chooses the format too.

    Shows a progress bar on a terminal (progress=False hides it; a
    callable(done, total) receives the progress).  A model directory's other
    files (config.json, tokenizer files, …) are copied into a sharded `dst`
    along with the weights unless extra_files=False.  `src` may be a URL;
    direct=True reads it with O_DIRECT and drops the output from the page
    cache as it reaches the disk.

    dry_run=True writes nothing and returns what the conversion would
    write, after every rule and with the same checks, as a dict:
    {"path", "format", "directory", "files": [{"name", "path", "size",
    "tensors"}], "side_files", "copied_files", "replaces", "tensors":
    [{"name", "source", "dtype", "shape", "nbytes", "file", ("same_as")}],
    "totals": {"tensors", "written", "parameters", "bytes"}}."""
    if format == "dcp" and (max_shard_size is not None or prefix is not None or checksums or int(dcp_ranks) < 1):
        raise ValueError("format='dcp' writes one file per rank (dcp_ranks >= 1): no max_shard_size, prefix or checksums")
    catalog = _sources.catalog(src, direct, allowed_globals, convert, **source)
    bar = _progress.choose(progress, "convert")
    if format is None:
        name = os.fspath(dst)
        format = ("npz" if name.endswith(".npz") else "flax-msgpack" if name.endswith(".msgpack")
                  else "gguf" if name.endswith(".gguf") else "safetensors")
    numbers = {v: k for k, v in FORMATS.items() if k in (1, 5, 6, 8, 9)}
    if format not in numbers:
        raise ValueError(f"format must be one of {sorted(numbers)}, not {format!r}")
    name = os.fspath(dst)
    if max_shard_size is None and format == "safetensors" and (name.endswith("/") or os.path.isdir(name)):
        max_shard_size = "5GB"  # a directory gets shards, as `ckpt convert` gives it (the hub's default size)
    kw = dict(max_shard_size=_parse_size(max_shard_size), overwrite=overwrite, no_sync=no_sync,
              checksums=checksums, progress=bar, format=numbers[format],
              dcp_ranks=int(dcp_ranks) if format == "dcp" else 0)
    if prefix is not None:
        kw["prefix"] = prefix
    if extra_files and max_shard_size is not None and not _sources.is_remote(src) and os.path.isdir(src):
        kw["copy_files_from"] = os.fspath(src)
    rules = dict(select=select, exclude=exclude, rename=rename, dtype=dtype, tp_rank=tp_rank, tp_size=tp_size,
                 tp_select=tp_select, slices=slices, transpose=transpose, layout=layout)
    if dry_run:
        kw["progress"] = None
        plan = _build_plan(catalog, catalog.tensors(), tp_dim=tp_dim, ignore_unmatched=ignore_unmatched, **rules)
        return json.loads(plan.convert(os.fspath(dst), dry_run=True, **kw))
    if any(v is not None for v in rules.values()):
        plan = _build_plan(catalog, catalog.tensors(), tp_dim=tp_dim, ignore_unmatched=ignore_unmatched, **rules)
        plan.convert(os.fspath(dst), **kw)
    else:
        catalog.convert(os.fspath(dst), **kw)


def cast(array, dtype):
    """Casts a numpy array or torch tensor to another float dtype with
    ckpt's kernels (bit for bit as torch's .to()); returns a new one."""
    fw = _frameworks.of(array)
    if fw is None:
        raise TypeError("cast takes a numpy array or a torch tensor")
    src = fw.contiguous(array) if not fw.is_contiguous(array) else array
    d_from, shape, _ = fw.describe(src)
    d_to = dtype_name(dtype)
    if not _ckpt.can_cast(d_from, d_to):
        raise TypeError(f"ckpt cannot cast {d_from} to {d_to}")
    out = fw.empty(d_to, shape)
    _ckpt.cast(d_from, fw.raw(src), d_to, fw.raw(out, writable=True), math.prod(shape))
    return out


