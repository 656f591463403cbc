"""ckpt's own Python API: catalogs, shape trees, the load engine (slices,
casts, renames, in-place loading) and streaming sharded saves."""
import math
import os
import re
from collections import namedtuple

from . import _ckpt, _device, _dtypes, _errors, _frameworks, _progress, _sources, _tree

_IO = {"auto": 0, "buffered": 1, "direct": 2}
_VIEWS_PRIVATE = 2
_MISSING, _UNEXPECTED, _SHAPE, _DTYPE = 1, 2, 3, 4
_MATCH_CAST = 1

Destination = namedtuple("Destination", "format directory")
Destination.__doc__ = ("What ckpt writes at a path: the format's name ('safetensors', 'torch', …) and whether it is "
                       "a directory (else a file, or its split parts beside it).")
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


def flags(where, **given):
    """Refuses a boolean option that is not a bool (numpy's bool_, 0 and 1
    pass): overwrite="no" or check_crc="false" is true to `if`, and did what
    the caller meant to stop.  TypeError naming `where` and the option:
    "ckpt.save: overwrite must be a bool, not str 'no'" — the library's one
    rule (_ckpt.flag), which the extension's own calls apply too.  None
    passes for the options whose default it is (mmap)."""
    for name, value in given.items():
        if value is not None or name not in _NONE_FLAGS:
            _ckpt.flag(value, f"{where}: {name}")


_NONE_FLAGS = {"mmap"}


def _listify(x):
    if x is None:
        return []
    return [x] if isinstance(x, str) else list(x)


# ---------------------------------------------------------------------------
# Catalogs

class Checkpoint:
    """A checkpoint's catalog: names, shapes, dtypes, metadata and (torch
    files) the object tree, read without the data.  Use as a context manager
    or call close().  `path` may be an http://, https://, s3://, gs:// or az:// URL; see
    the source options of ckpt.open.  The `path` attribute (and repr, and
    errors) show a URL without its credentials (ckpt_redact_name)."""

    def __init__(self, path, allowed_globals=None, *, framework="numpy", direct=False, **source):
        flags("ckpt.open", direct=direct)
        self.framework = _frameworks.get(framework).name  # refused here, not at the first read
        name = _sources.name(path)
        # What is shown of the name: a URL's credentials stay in the catalog.
        self.path = _sources.shown(name) if _sources.is_remote(name) else name
        self._catalog = _sources.catalog(name, _io("auto", direct), allowed_globals, open, **source)
        info = self._catalog.info()
        self.format = _ckpt.format_name(info["format"]) or str(info["format"])
        self.index_path = info["index_path"]
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
        TensorSpec) for each tensor: for a torch file (or a DCP checkpoint),
        exactly what torch.load (dcp_to_torch_save) gives — a state dict
        stays one dict keyed "conv1.weight", a training checkpoint keeps its
        optimizer state, epochs, … —, also once converted (the tree a
        conversion records); a structure saved by ckpt.save; a Flax
        document's; or else (safetensors and others recording none, such as
        a state dict saved by the hub) the names split at dots."""
        leaf = leaf or self.spec
        structure = _tree.of_plan(self._catalog)
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
        tensors stored as loaded: dense, little-endian, uncompressed).  If
        the file is truncated while the array lives, touching its vanished
        pages kills the process with SIGBUS; get() (or ckpt.load(copy=True))
        gives memory of its own, out of reach of the file."""
        i = self._row(name)
        r = self._rows[i]
        return _frameworks.Numpy.from_buffer(self._catalog.view(i), r[1], r[2], 0, name)

    def __getitem__(self, name):
        """c[name]: one tensor, as get(name) gives it; KeyError when absent."""
        return self._read(self._row(name), self.framework)

    def get(self, name, default=None, *, framework=None):
        """One tensor, copied into new memory (any stored layout), as a
        tensor of `framework` (default: the one given to ckpt.open, numpy
        unless told); `default` when the checkpoint has no such tensor, as
        dict.get.  A framework's name as the second argument ("pt") is the
        older form of framework=, and keeps its meaning (KeyError when
        absent).  The CRC-32 of the ZIP member the tensor fills (a torch
        storage of its own, an .npz array) is checked, as ckpt.load checks
        it."""
        if framework is None and isinstance(default, str) and default.lower() in _frameworks.FRAMEWORKS:
            return self._read(self._row(name), default)
        i = self._catalog.find(name) if isinstance(name, str) else None
        if i is None:
            return default
        return self._read(i, framework or self.framework)

    def _read(self, i, framework):
        fw = _frameworks.get(framework)
        r = self._rows[i]
        name = r[0]
        out = fw.empty(r[1], r[2], name)
        if r[3]:
            self._catalog.read(i, fw.raw(out, writable=True))
        return fw.to_device(out, None)

    def verify(self, progress=None, report=False):
        """Checks every checksum the files record, reading every byte one
        covers: ckpt's XXH3-64 digests (convert(checksums=True)) and the
        CRC-32 of every ZIP member (torch.save files, .npz archives).  Raises
        ckpt.Error (CKPT_E_CHECKSUM) on a mismatch.  Returns how many
        tensors' XXH3-64 matched; with report=True, a dict of what was
        checked: {"tensor_digests", "chunk_digests", "header_digests",
        "zip_crc32", "file_sha256", "bytes", "tensors"} (all 0 when the
        files record no checksum, as GGUF and plain safetensors files do;
        chunk_digests: the per-chunk XXH3-64s of tensors of at least 4 MiB,
        their empty last chunks included; file_sha256: the files of an
        hf:// repo checked against the Hub's SHA-256):
        ckpt_verify's report, the "checksums" of `ckpt verify --json`."""
        flags("Checkpoint.verify", report=report)
        return self._catalog.verify(progress=_progress.choose(progress, "verify"), report=report)

    def __repr__(self):
        return (f"<ckpt.Checkpoint {self.path!r} {self.format}, {len(self)} tensors, "
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


def open(path, *, framework="numpy", allowed_globals=None, direct=False, **source):  # noqa: A001 - as safe_open
    """Opens a checkpoint's catalog (.safetensors, sharded directory or
    index, torch.save file — or their http://, https://, s3://, gs:// or az:// URLs)
    without reading tensor data.  c[name] and c.get(name) read one tensor
    as a tensor of `framework` ("numpy", "pt" or "flax"), as safetensors'
    safe_open(path, framework).get_tensor(name) does.
    allowed_globals: pickle globals ("module.Name") to allow beside torch's
    weights-only allowlist, as torch.serialization.add_safe_globals does —
    plain-data reconstructors only (numpy scalars and dtypes,
    argparse.Namespace, dataclasses); nothing is ever executed.

    Source options (every function that opens a checkpoint takes them):
    direct=True reads local files with O_DIRECT, around the page cache (no
    mappings; converts also drop what they write); for remote files,
    cache_dir (verified local copies), bearer_token, timeout and
    connect_timeout (seconds), retries and max_connections."""
    return Checkpoint(path, allowed_globals, framework=framework, direct=direct, **source)


def shapes(path, *, nested=True, **source):
    """The tree of shapes and dtypes of a checkpoint, reading no data — to
    build a model skeleton (as with Flax's eval_shape).  Leaves are
    jax.ShapeDtypeStruct when jax is installed (and knows the dtype), else
    TensorSpec(shape, dtype).  nested=False gives {name: leaf}."""
    flags("ckpt.shapes", nested=nested, **{k: source[k] for k in ("direct",) if k in source})
    with Checkpoint(path, **source) as c:
        leaf = _jax_leaf(c) or c.spec
        if nested:
            return c.tree(leaf)
        return {name: leaf(name) for name in c.keys()}


def recover(dir, *, check=False):  # noqa: A002 - the C API's name
    """Finishes a commit into directory `dir` that a crash cut short (a
    writer killed after deciding it, leaving dir/.ckpt-commit.json), as
    `ckpt recover DIR` does; returns True when there was one, False when
    there was nothing to finish.  Opening the checkpoint never does it
    (reads never change a directory): ckpt.open and ckpt.load raise
    ckpt.Error (status CKPT_E_INCOMPLETE) until this, or the next write into
    the directory, finishes it.

    The journal is executed only when it is provably one ckpt wrote: its
    stage is a real directory inside `dir` named as ckpt names stages, and
    it removes or publishes only checkpoint files (names an output format
    owns), never through a symlink.  Anything else raises ckpt.Error
    (CKPT_E_INCOMPLETE, naming the journal, the rule and the byte offset)
    and is left alone; a directory a live writer holds raises CKPT_E_LOCKED
    naming its pid.  check=True only checks: nothing changes."""
    flags("ckpt.recover", check=check)
    return _ckpt.commit_recover(os.fspath(dir), check=check)


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
                tp_dim=0, tp_select=None, slices=None, transpose=None, layout=None, ignore_unmatched=False,
                as_hf=False, where="ckpt"):
    flags(where, ignore_unmatched=ignore_unmatched)  # rules may come as **rules (ckpt.jax.shapes, ckpt.distributed)
    if as_hf not in (False, True, "joined"):  # a typo must not quietly mean True (experts left unjoined)
        raise ValueError(f"as_hf={as_hf!r}: expected False, True or \"joined\"")
    plan = _ckpt.Plan(catalog)
    if as_hf:  # the library's GGUF → Hugging Face mapping first: it takes every tensor, before any rule
        one = dtype is not None and not isinstance(dtype, dict)
        # a load: no config.json, no tokenizer files; "joined": experts as transformers' models hold them
        plan.gguf_hf(dtype_name(dtype) if one else None, False, as_hf == "joined")
        dtype = None if one else dtype
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
        patterns = _listify(tp_select)
        wanted = [_glob_re(p) for p in patterns] or None
        matched, candidates, split = set(), 0, 0
        for _, src, _, _, _, _ in plan.items():
            name, ndim = rows[src][0], len(rows[src][2])
            if wanted is not None:
                hits = {i for i, w in enumerate(wanted) if w.fullmatch(name)}
                matched |= hits
                if not hits:
                    continue
            candidates += 1
            axis = tp_dim if tp_dim >= 0 else ndim + tp_dim
            if not 0 <= axis < ndim:
                continue
            plan.split(_literal(name), tp_dim, tp_rank, tp_size)
            split += 1
        # A mistyped tp_select or tp_dim must not quietly give every rank
        # whole tensors: a pattern that matches nothing is the library's
        # NoMatchError, as every rule's (the split of it raises it, naming
        # the file and the pattern; ignore_unmatched allows it), and so is
        # an axis that none of the tensors has.
        for i, p in enumerate(patterns):
            if i not in matched:
                plan.split(p, tp_dim, tp_rank, tp_size)
        if candidates and not split and not ignore_unmatched:
            raise ValueError(f"tp_dim={tp_dim}: none of the {candidates} tensors"
                             f"{' matching tp_select' if wanted else ''} has that axis, so none would be split "
                             "(ignore_unmatched=True allows it)")
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
    """The catalog's ckpt_io_mode for `io` ("auto", "buffered", "direct")
    and direct=True: how every read of the checkpoint goes (the one knob,
    ckpt_catalog_options.io)."""
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
         check_crc=True, as_hf=False, **source):
    """Loads a checkpoint (or the part of it a device needs) into a dict of
    tensors, with the parallel engine: memory beyond the tensors is a small
    bounce ring, whatever the checkpoint's size.

    select / exclude: globs of names to keep or drop; rename: {from: to}
    (prefixes or `*` patterns); dtype: one dtype for every float tensor, or
    {glob: dtype}; tp_rank / tp_size: keep part tp_rank of tp_size along
    tp_dim of each tensor that has that axis (of those matching tp_select;
    a tp_select pattern that matches no tensor, or a tp_dim that none of
    them has, raises unless ignore_unmatched=True, as any rule that
    matches nothing does); slices: {glob: (dim, start, stop)} keeps a range of one axis;
    transpose: globs of 2-D tensors to transpose; layout: "OIHW:HWIO" or
    {glob: "OIHW:HWIO"}.  nested=True returns the checkpoint's structure,
    as Checkpoint.tree gives it (a torch file's: exactly torch.load's),
    with what select and exclude keep; under rename, the new names split
    at dots.  `path` may be a URL; direct=True and the other source
    options are those of ckpt.open.

    Tensors whose bytes need no conversion (whole tensors, and slices that
    are one contiguous range of rows) come back, as from safetensors'
    load_file, as writable copy-on-write views of the file (writes never
    reach it) on local file systems, prefetched in the background (only
    the bytes shown); copy=True gives every tensor memory of its own
    instead, as do URLs and direct=True.  The others (casts, layouts,
    slices of inner axes) are read by the engine into new memory.
    mmap=True asks for the views explicitly; mmap=False is copy=True.

    A view is the file itself: if the file is truncated while the view is
    alive (another process rewriting it in place, a download replaced by a
    shorter one), touching its vanished pages kills this process with
    SIGBUS — as with safetensors' load_file and numpy's and torch's mmap.
    copy=True reads every tensor into memory of its own, which no later
    change of the file can reach.  (A file replaced by rename, as ckpt's
    writers replace files, leaves the views on the old one, intact.)

    check_crc (default True): the CRC-32 of every ZIP member (torch.save
    .bin/.pt files, .npz archives) whose bytes the engine reads whole is
    checked as they stream — a mismatch raises ckpt.Error
    (CKPT_E_CHECKSUM) naming the file, the member and the tensor.  Views
    cannot be checked (no byte is read): to check a torch file's tensors
    that would come as views, pass copy=True, or use
    ckpt.open(path).verify().  Slices, and storages with bytes no tensor
    shows, go unchecked; check_crc=False checks nothing.

    as_hf=True reads a llama.cpp GGUF (llama, qwen2, qwen3, phi3, gemma2,
    gemma3) as the Hugging Face model it was converted from — the tensors
    of the directory ckpt.convert(path, dir) writes, without writing it:
    Hugging Face's names, llama's Q/K rows put back, Gemma's norms less the
    1 the script added, every tensor of `dtype` (one dtype;
    default: the GGUF's float type, else bf16), dequantized by the engine.
    The other rules then apply to those names; a GGUF the library does not
    map raises ckpt.Error naming the file and the key.  as_hf="joined"
    reads a mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE) as
    transformers' models hold it (ckpt_gguf_hf_plan_joined): each layer's
    mlp.experts.gate_up_proj and down_proj, stacked over the experts, each
    expert's rows read into place; as_hf=True refuses its stacked experts.

    A CUDA device (device="cuda:0", with torch's CUDA available) gets the
    tensors straight into device memory: each is allocated there with
    torch.empty and filled through a ring of pinned host slots (the
    library's device destination, ckpt_device.h) — no host copy of the
    model, and host memory is the ring whatever the model's size.  Without
    torch's CUDA, tensors load on the host and .to(device) says what torch
    says."""
    flags("ckpt.load", nested=nested, copy=copy, mmap=mmap, ignore_unmatched=ignore_unmatched, direct=direct,
          check_crc=check_crc)
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
    catalog = _sources.catalog(path, _io(io, direct), allowed_globals, load, **_sources.follow_progress(progress, source))
    rows = catalog.tensors()
    plan = _build_plan(catalog, rows, select=select, exclude=exclude, rename=rename, dtype=dtype, tp_rank=tp_rank,
                       tp_size=tp_size, tp_dim=tp_dim, tp_select=tp_select, slices=slices, transpose=transpose,
                       layout=layout, ignore_unmatched=ignore_unmatched, as_hf=as_hf)
    items = plan.items()
    order = [item.name for item in items]
    cuda = _device.torch_cuda_device(device) if fw is _frameworks.Torch and str(device) != "cpu" else None
    if cuda is not None:
        tensors = _device.load_torch(plan, items, cuda, threads=threads,
                                     progress=_progress.choose(progress, "load"), check_crc=check_crc)
        out = dict(zip(order, tensors))
        if nested:
            return _tree.unflatten(out, _tree.of_plan(catalog, plan, renames=rename))
        return out
    # What needs no conversion comes as copy-on-write views of the
    # library's private, prefetched mappings (whole tensors and contiguous
    # row ranges); the rest, or everything with copy=True or direct=True,
    # through the engine (remote sources are never mapped).
    plan.load(threads=threads, views=0 if copy or direct else _VIEWS_PRIVATE,
              progress=_progress.choose(progress, "load"), check_crc=check_crc)
    out = {}
    for i, item in enumerate(items):
        out[item.name] = fw.from_buffer(plan.data(i), item.dtype, item.shape, 0, item.name)
    out = {k: fw.to_device(out[k], device) for k in order}
    if nested:
        return _tree.unflatten(out, _tree.of_plan(catalog, plan, renames=rename))
    return out


def _target_tensors(target, keep_vars=False):
    """(framework, {name: tensor}) of a module, a state dict or a nested
    dict of arrays; keep_vars=True gives a module's own Parameters and
    buffers (tied names share one object), as state_dict(keep_vars=True)."""
    mod = type(target).__module__
    if hasattr(target, "state_dict") and mod.startswith("torch") or _is_module(target):
        return _frameworks.Torch, target.state_dict(keep_vars=keep_vars)
    flat = _tree.flatten(target)
    fws = {_frameworks.of(t) for t in flat.values()}
    if len(fws) != 1 or None in fws:
        raise TypeError("load_into needs a torch.nn.Module, or a dict (possibly nested) of only torch tensors "
                        "or only numpy arrays")
    return fws.pop(), flat


def _address(fw, t):
    """(data address, nbytes) of a tensor, or None for an empty one or one
    without memory (meta)."""
    _, _, nbytes = fw.describe(t)
    if not nbytes:
        return None
    ptr = t.data_ptr() if fw is _frameworks.Torch else t.__array_interface__["data"][0]
    return (ptr, nbytes) if ptr else None


def _is_module(x):
    try:
        import torch
    except ImportError:
        return False
    return isinstance(x, torch.nn.Module)


def _on_meta(fw, t):
    return fw is _frameworks.Torch and t.device.type == "meta"


def _names_shown(names, limit=8):
    shown = ", ".join(f'"{n}"' for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _meta_non_persistent(module):
    """[(name, owner module, attribute)] of the non-persistent buffers on
    the meta device (rotary inv_freq, position_ids, …): no checkpoint holds
    them, since state_dict() leaves them out."""
    out = []
    for prefix, mod in module.named_modules():
        for attr in sorted(mod._non_persistent_buffers_set):
            buf = mod._buffers.get(attr)
            if buf is not None and buf.device.type == "meta":
                out.append((f"{prefix}.{attr}" if prefix else attr, mod, attr))
    return out


def _initializer(module, name):
    """The `_init_weights` of the module nearest above `name` that has one
    (a transformers PreTrainedModel: it computes a submodule's tensors from
    the model's config), or None."""
    parts = name.split(".")[:-1]
    for depth in range(len(parts), -1, -1):
        owner = module.get_submodule(".".join(parts[:depth]))
        init = getattr(owner, "_init_weights", None)
        if callable(init):
            return init
    return None


def _compute_non_persistent(module, buffers, device):
    """Materialises the meta non-persistent buffers on `device` and has the
    model compute them, as transformers' from_pretrained does: its
    `_init_weights(owner)` for each module owning some (the owner's other
    tensors, which the checkpoint gave, are hidden behind meta stand-ins
    meanwhile, so that nothing loaded is re-initialised).  A buffer the
    initializer did not write goes back to meta; returns their names."""
    import torch
    left = []
    owners = {}
    for name, owner, attr in buffers:
        owners.setdefault(id(owner), (owner, name, []))[2].append((name, attr))
    for owner, first, attrs in owners.values():
        init = _initializer(module, first)
        if init is None:
            left += [n for n, _ in attrs]
            continue
        meta = {a: owner._buffers[a] for _, a in attrs}
        fresh = {a: _device.empty_like(meta[a], device) for a in meta}
        versions = {a: t._version for a, t in fresh.items()}
        hidden = {}
        for table in (owner._parameters, owner._buffers):
            for a, t in table.items():
                if t is not None and a not in meta:
                    hidden[(id(table), a)] = (table, t)
                    stand_in = torch.empty_like(t, device="meta")
                    table[a] = torch.nn.Parameter(stand_in, t.requires_grad) if isinstance(t, torch.nn.Parameter) \
                        else stand_in
        owner._buffers.update(fresh)
        try:
            with torch.no_grad():
                init(owner)
        finally:
            for (_, a), (table, t) in hidden.items():
                table[a] = t
        for name, a in attrs:
            now = owner._buffers.get(a)
            if now is fresh[a] and now._version == versions[a]:  # neither written nor replaced
                owner._buffers[a] = meta[a]
                left.append(name)
    return left


def _strict_error(target, missing, unexpected, mismatched, meta_left=(), loaded=False, hint=""):
    error = f"Error(s) in loading state_dict for {type(target).__name__}:"
    if missing:
        error += "\n\tMissing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + "."
    if unexpected:
        error += "\n\tUnexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + "."
    for m in mismatched:
        error += (f"\n\tsize mismatch for {m.name}: copying a param with shape {tuple(m.found.shape)} from "
                  f"checkpoint, the shape in current model is {tuple(m.expected.shape)}.")
    if meta_left:
        error += ("\n\tNon-persistent buffer(s) on the meta device, which no checkpoint holds and the model does "
                  "not compute (no _init_weights writes them): " + _names_shown(list(meta_left)) +
                  ". Create them outside torch.device('meta'), or pass strict=False to leave them there" +
                  (" (the checkpoint's tensors are loaded)." if loaded else "."))
    return RuntimeError(error + hint)


def _gguf_names_hint(catalog, path, present, as_hf):
    """Where nothing matched and the source is a llama.cpp GGUF read under
    its own names (blk.0.attn_q.weight …): the keyword that reads it under
    Hugging Face's, which a list of every name missing does not suggest."""
    if as_hf or present or _ckpt.format_name(catalog.info()["format"]) != "gguf":
        return ""
    arch = catalog.metadata().get("general.architecture")
    if not arch:
        return ""
    return (f"\n\t{os.fspath(path)} is a llama.cpp GGUF (general.architecture {arch!r}): its tensors have llama.cpp's "
            f"names; as_hf=True reads them under Hugging Face's")


def load_into(target, path, strict=True, *, assign=False, device=None, dtype=None, copy=False, select=None,
              exclude=None, rename=None, tp_rank=None, tp_size=None, tp_dim=0, tp_select=None, slices=None,
              transpose=None, layout=None, threads=0, io="auto", progress=None, allowed_globals=None,
              ignore_unmatched=False, direct=False, on_loaded=None, check_crc=True, as_hf=False, **source):
    """Loads a checkpoint into the existing tensors of `target` — a
    torch.nn.Module, a state dict, or a (nested) dict of numpy arrays — in
    place: bytes go straight from the file into each tensor's memory, so no
    second copy of the model is ever held.  Float tensors are cast to the
    target's dtype on the way.  A target tensor on the meta device has no
    memory to load into: it is an error, naming it, unless assign=True.

    assign=True (a module only), as load_state_dict(assign=True): the
    module's parameters and buffers are replaced by the checkpoint's
    tensors — for a model built on the meta device (`with
    torch.device("meta"): model = Model(config)`), which then takes no
    memory but the checkpoint's.  The new tensors are views of the file
    where the bytes allow (as ckpt.load gives them; copy=True, direct=True
    and URLs give memory of their own), on `device` (default "cpu"), of the
    checkpoint's dtype or `dtype` (one dtype for every float tensor, or
    {glob: dtype}, cast by the engine).  Each parameter stays a Parameter of
    its class with its requires_grad; tied parameters stay one Parameter
    (a tied name the checkpoint lacks is not missing, one it repeats is not
    read twice).  Non-persistent buffers (rotary inv_freq, position_ids)
    are in no checkpoint: those left on meta are computed by the model when
    it knows how — a transformers model's _init_weights, as from_pretrained
    does — else they make strict=True fail (with strict=False they stay
    on meta and are named in missing_keys).

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
    load and is raised here.  With assign=True it is called once the load
    is done, with each new tensor as the module now holds it.

    check_crc (default True) checks the CRC-32 of every ZIP member (torch
    .bin/.pt, .npz) read whole, as ckpt.load does: a mismatch raises
    ckpt.Error (CKPT_E_CHECKSUM), the target then holding partial data.  A
    torch storage shared by several tensors is checked once the last of
    them is in place, before its on_loaded call (the others' came
    already).

    as_hf=True reads a llama.cpp GGUF as the Hugging Face model it was
    converted from, as ckpt.load(as_hf=True) does: a transformers model
    (built on meta, with assign=True) takes a GGUF's weights with no
    Hugging Face directory written (ckpt.transformers' gguf_file=)."""
    flags("ckpt.load_into", strict=strict, assign=assign, copy=copy, ignore_unmatched=ignore_unmatched, direct=direct,
          check_crc=check_crc)
    if on_loaded is not None and not callable(on_loaded):
        raise TypeError(f"on_loaded must be a function of (name, tensor), not {type(on_loaded).__name__}")
    if assign and not _is_module(target):
        raise TypeError(f"assign=True replaces the parameters and buffers of a torch.nn.Module, not of a "
                        f"{type(target).__name__} (ckpt.load returns new tensors)")
    if not assign and (device is not None or dtype is not None or copy):
        raise ValueError("device=, dtype= and copy= go with assign=True: loaded in place, each tensor keeps its "
                         "own device, dtype and memory")
    fw, flat = _target_tensors(target, keep_vars=assign)
    catalog = _sources.catalog(path, _io(io, direct), allowed_globals, load_into,
                               **_sources.follow_progress(progress, source))
    rows = catalog.tensors()
    plan = _build_plan(catalog, rows, select=select, exclude=exclude, rename=rename, dtype=dtype if assign else None,
                       tp_rank=tp_rank, tp_size=tp_size, tp_dim=tp_dim, tp_select=tp_select, slices=slices,
                       transpose=transpose, layout=layout, ignore_unmatched=ignore_unmatched, as_hf=as_hf)
    expected = []
    for name, t in flat.items():
        dt, shape, _ = fw.describe(t)
        expected.append((name, None if assign else dt, shape))  # assigned tensors keep the checkpoint's dtype
    before = plan.items()
    report = plan.match(expected, 0 if assign else _MATCH_CAST)
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
    # Tied weights (an output head sharing the embedding's memory) are saved
    # once: a name that aliases a loaded tensor is not missing.  Assigned,
    # one of them is read and the module's one Parameter replaced.
    alias = (lambda t: id(t)) if assign else (lambda t: _address(fw, t))
    mismatched_names = {m.name for m in mismatched}
    present = [it[0] for it in before if it[0] in flat and it[0] not in mismatched_names]
    on_meta = [] if assign else [n for n in present if _on_meta(fw, flat[n])]
    if on_meta:
        raise ValueError(f"{len(on_meta)} target tensors are on the meta device, with no memory to load into: "
                         f"{_names_shown(on_meta)}; pass assign=True to replace them with the checkpoint's")
    if missing:
        loaded = {alias(flat[n]) for n in present}
        loaded.discard(None)
        missing = [n for n in missing if alias(flat[n]) not in loaded]
    if assign:
        first = {}
        for it in before:
            if it[0] in present and first.setdefault(alias(flat[it[0]]), it[0]) != it[0]:
                drop.append(rows[it[1]][0])  # a tied name the checkpoint repeats: read once
    meta_buffers = _meta_non_persistent(target) if assign else []
    uncomputed = [n for n, owner, _ in meta_buffers if _initializer(target, n) is None]
    if strict and (missing or unexpected or mismatched or uncomputed):
        raise _strict_error(target, missing, unexpected, mismatched, uncomputed,
                            hint=_gguf_names_hint(catalog, path, present, as_hf))
    for source_name in drop:
        plan.exclude(_literal(source_name))
    items = plan.items()  # none left: strict=False's report says why
    if items and not assign:
        _load_in_place(fw, flat, plan, items, recast, threads, progress, on_loaded, check_crc)
    elif items:
        _load_assigned(target, flat, plan, items, device, copy or direct, threads, progress, on_loaded, check_crc)
    if assign:
        left = _compute_non_persistent(target, meta_buffers, device or "cpu")
        if strict and left:
            raise _strict_error(target, [], [], [], left, loaded=True)
        missing += left
    return LoadResult(missing, unexpected, mismatched)


def _load_in_place(fw, flat, plan, items, recast, threads, progress, on_loaded, check_crc):
    """The engine writes straight into each target tensor's memory (those
    contiguous, of a dtype it casts to): on the host, or on a CUDA device
    through the device's ring of pinned slots (their device addresses are
    the plan's destinations: no host copy of them is made); the others are
    loaded into new memory and copied in by the framework."""
    direct, devices = [], set()
    for i, (name, src, dt, shape, nbytes, transform) in enumerate(items):
        t = flat[name]
        cuda = _device.tensor_cuda_device(t) if fw is _frameworks.Torch else None
        if name in recast or not fw.is_contiguous(t) or (cuda is None and not fw.on_cpu(t)):
            direct.append(False)
        elif cuda is not None:
            plan.set_device_buffer(i, _device.open_device(_device.device_name(cuda)), t.data_ptr(), nbytes)
            devices.add(cuda)
            direct.append(True)
        else:
            plan.set_buffer(i, fw.raw(t, writable=True))
            direct.append(True)
    for cuda in devices:  # work torch queued on the targets ends before the ring's stream writes them
        _device.torch_cuda.synchronize(cuda)
    done = None
    if on_loaded is not None:
        def done(i):  # items read in place are the caller's tensors already; the others come after the copy
            if direct[i]:
                on_loaded(items[i][0], flat[items[i][0]])
    plan.load(threads=threads, progress=_progress.choose(progress, "load"), item_done=done,
              check_crc=check_crc)
    for i, (name, src, dt, shape, nbytes, transform) in enumerate(items):
        if not direct[i]:
            tmp = fw.from_buffer(plan.data(i), dt, shape, 0, name)
            fw.copy_into(flat[name], tmp)
            del tmp
            if on_loaded is not None:
                on_loaded(name, flat[name])


def _load_assigned(module, flat, plan, items, device, copy, threads, progress, on_loaded, check_crc):
    """Loads the plan's tensors as ckpt.load does (views where the bytes
    allow) and puts each in the module in place of the tensor it names —
    and of every name tied to it."""
    import torch
    names_of = {}
    for name, t in flat.items():
        names_of.setdefault(id(t), []).append(name)
    fw = _frameworks.Torch
    cuda = _device.torch_cuda_device(device)
    if cuda is not None:  # each tensor allocated on the device and filled through its ring: no host copy
        loaded = _device.load_torch(plan, items, cuda, threads=threads, progress=_progress.choose(progress, "load"),
                                    check_crc=check_crc)
    else:
        plan.load(threads=threads, views=0 if copy else _VIEWS_PRIVATE,
                  progress=_progress.choose(progress, "load"), check_crc=check_crc)
    for i, (name, src, dt, shape, nbytes, transform) in enumerate(items):
        old = flat[name]
        if cuda is not None:
            new = loaded[i]
        else:
            new = fw.to_device(fw.from_buffer(plan.data(i), dt, shape, 0, name), device)
        if isinstance(old, torch.nn.Parameter):
            try:
                new = type(old)(new, requires_grad=old.requires_grad)
            except Exception as e:
                if hasattr(e, "add_note"):
                    e.add_note(f"(ckpt.load_into(assign=True): making {name!r} a {type(old).__name__})")
                raise
            new.__dict__.update(old.__dict__)  # attributes set on the parameter (sharding flags, …)
        for alias in names_of[id(old)]:
            prefix, _, attr = alias.rpartition(".")
            setattr(module.get_submodule(prefix), attr, new)
        if on_loaded is not None:
            on_loaded(name, new)


# ---------------------------------------------------------------------------
# Saving and converting

_CHUNK = 64 << 20


def _parse_size(size):
    if size is None:
        return 0
    if isinstance(size, int):
        return size
    return _ckpt.parse_size(str(size))


def _shard_size(size):
    """max_shard_size in bytes (0: the writer's default).  A number goes
    through the library's parser as its text would: 0 and -1 raised as
    "0" and "-1" do, where they used to mean the default or no limit,
    silently (and True one byte)."""
    return 0 if size is None else _ckpt.parse_size(str(size))


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


def _format_id(format, also=()):  # noqa: A002
    """A format's id from its name ('safetensors', 'torch', 'flax-msgpack', …); 0 for None.  `also`: the
    caller's own names besides the formats (convert's "hf"), which the refusal of a mistyped one lists too."""
    if format is None:
        return 0
    number = _ckpt.format_from_name(str(format))
    if not number:
        names = ["safetensors", "gguf", "torch", "npy", "npz", "flax-msgpack", "dcp", *also]
        raise ValueError(f"format must be {', '.join(names[:-1])} or {names[-1]}, not {format!r}")
    return number


def destination(path, format=None):  # noqa: A002
    """What ckpt writes at `path` — the one destination rule of the library,
    which save, convert, the CLI and the Rust and Elixir bindings follow:
    a path ending in "/" or naming an existing directory is a directory
    (safetensors shards, or DCP's files); a name ending in .safetensors,
    .gguf, .pt/.pth/.bin (torch.save), .npy, .npz or .msgpack is that file
    (or, with max_shard_size, its split parts beside it); another
    checkpoint suffix (.ckpt, .h5, .onnx, an index, …) is refused
    (ckpt.Error, CKPT_E_INVALID_ARGUMENT); any other name is a directory.
    `format` (a name) asks for a format; it must agree with the suffix.
    Returns Destination(format, directory)."""
    number, directory = _ckpt.destination(os.fspath(path), format=_format_id(format))
    return Destination(_ckpt.format_name(number), directory)


def save(tensors, path, max_shard_size=None, metadata=None, *, prefix=None, overwrite=False,
         checksums=False, progress=None, no_sync=False, background=False, staging="copy", staging_bytes=None,
         base=None, return_stats=False):
    """Saves tensors at `path`, where ckpt.destination says:
      - a directory ("out/", an existing directory, or a name without a
        checkpoint suffix): a Hugging Face checkpoint — shards of at most
        max_shard_size bytes (default "5GB", the hub's) plus
        <prefix>.safetensors.index.json, or <prefix>.safetensors (prefix
        "model") when everything fits;
      - "x.safetensors": that one file, or with max_shard_size its parts
        x-00001-of-0000N.safetensors and x.safetensors.index.json beside it,
        as save_torch_state_dict(filename_pattern="x{suffix}.safetensors");
      - "x.pt", "x.pth", "pytorch_model.bin": a torch.save file that
        torch.load(weights_only=True) reads (byte for byte torch.save's);
        "x.npy" (one tensor), "x.npz", "x.msgpack", "x.gguf": those formats.
    Tensors are streamed from their own memory — nothing is concatenated, a
    non-contiguous or GPU tensor is copied a few rows at a time.  The
    safetensors files, the index and the metadata are what huggingface_hub's
    save_torch_state_dict writes, byte for byte: tensors that share memory
    (tied weights) are written once and recorded as `removed → kept`, and
    views that no tensor covers are refused as the hub refuses them (a
    torch.save file keeps them on one storage).  Atomic: an existing
    checkpoint is replaced only with overwrite=True, and only once every new
    file is complete.  The destination is locked while it is written: a
    second writer of it, in any process, raises ckpt.Error (CKPT_E_LOCKED)
    naming the first one's pid.  `tensors` may be a module, a state dict or
    a nested tree (its structure is recorded and restored by
    load(..., nested=True)).  Returns the paths written: the data files,
    then the index.

    background=True returns at once with a ckpt.SaveHandle (wait(), done(),
    cancel(), error) while the bytes are written behind the caller, who is
    blocked only while the snapshot is taken:
      - staging="copy": tensors are copied into host memory, at most
        staging_bytes of them (default: no limit); the ones that do not fit
        are written before the call returns, and the handle's stats report
        that stall;
      - staging="fork" (CPU tensors, Linux): a forked child writes from its
        copy-on-write view of the process, as Redis's BGSAVE does; memory
        grows only by the pages the caller modifies meanwhile.
    The commit is atomic as above and happens once every byte is on disk; a
    save waits for the previous background save, and raises its error if
    nobody has seen it yet.

    base=previous_checkpoint makes an incremental save: every tensor's
    XXH3-64 is recorded (checksums=True), and a tensor whose digest, dtype
    and size equal what the base records is not written from memory but
    copied from the base's file by the kernel (copy_file_range: a reflink on
    XFS, btrfs and bcachefs, which shares the blocks); where the output's
    file system cannot share the base's blocks (ext4, another file system),
    everything is written from memory, faster than a copy in the kernel,
    and the stats' full_write says so.  The output is a plain
    checkpoint any reader loads, byte for byte what a save without base
    writes, and `ckpt verify` checks it.  A base ckpt cannot read, or that
    records no digests, gets a full write.  A large tensor of which only
    some 1 MiB chunks changed, and a tensor whose shape changed (rows
    appended: its leading bytes compared with the base's at the base's chunk
    edges), clone their unchanged bytes and write the rest (docs/PYTHON.md
    says when such bytes share the base's blocks).  return_stats=True
    returns (paths, stats): cloned_tensors, cloned_bytes, written_tensors,
    written_bytes, partial_tensors, grown_tensors, tensors (per tensor:
    cloned_bytes, written_bytes), and full_write (why nothing was cloned,
    or None)."""
    flags("ckpt.save", overwrite=overwrite, checksums=checksums, no_sync=no_sync, background=background,
          return_stats=return_stats)
    from . import _background
    _background.settle_previous()
    if base is not None:
        checksums = True  # the next save builds on this one's digests
    if background:  # the handle's stats hold what return_stats would return
        return _background.start(tensors, path, staging=staging, staging_bytes=staging_bytes, base=base,
                                 max_shard_size=max_shard_size, metadata=metadata, prefix=prefix,
                                 overwrite=overwrite, checksums=checksums, progress=progress, no_sync=no_sync)
    # An incremental save writes little, and its time goes to hashing:
    # drop-behind's waits for the changed tensors' write-back then only held
    # up the clones (0.42 s against 0.40 s, medians of 6 alternating runs,
    # 4 GB with 5% changed on XFS), so it writes back at the commit.
    w, entries, bar = _save_open(tensors, path, max_shard_size, metadata, prefix=prefix, overwrite=overwrite,
                                 checksums=checksums, progress=progress, no_sync=no_sync, write_back=base is None)
    try:
        stats = None
        if base is not None:
            entries, stats = _clone_unchanged(w, entries, base, path)
        _save_write(w, entries, bar)
        paths = w.commit()
        if stats is not None:
            _written_stats(stats, entries)
        return (paths, stats) if return_stats else paths
    finally:
        w.abort()


def _digest(fw, t, chunks=None):
    """The XXH3-64 of a tensor's bytes in row order (what a writer with
    checksums records), read from its memory; with chunks (a writer's
    tensor_chunks: chunk_bytes, phase, count), (digest, [each chunk's])."""
    extra = (fw.describe(t)[2], *chunks) if chunks and chunks[2] else ()
    if fw.on_cpu(t) and fw.is_contiguous(t):
        return _ckpt.xxh3_64(fw.raw(t), *extra)
    return _ckpt.xxh3_64((fw.raw(p) for p in _pieces(fw, t)), *extra)


def _chunk_runs(same, nbytes, chunk_bytes, phase):
    """Chunks' equal-or-not flags as runs of bytes: [(same, begin, end)], each
    run the longest stretch of chunks alike (chunk edges: CKPT_CHUNK_METADATA_KEY)."""
    runs = []
    for k, s in enumerate(same):
        begin, end = max(0, k * chunk_bytes - phase), min(nbytes, (k + 1) * chunk_bytes - phase)
        if begin >= end:
            continue
        if runs and runs[-1][0] == s:
            runs[-1][2] = end
        else:
            runs.append([s, begin, end])
    return runs


def _write_partly_cloned(w, index, fw, t, catalog, src, runs):
    """A tensor's bytes in order: the runs of unchanged chunks copied from
    the base by the kernel, the others written from memory."""
    pos, run = 0, 0
    for piece in _pieces(fw, t):
        data = memoryview(fw.raw(piece)).cast("B")
        at = 0
        while at < len(data):
            same, begin, end = runs[run]
            take = min(len(data) - at, end - pos)
            if not same:
                w.write(index, data[at:at + take])
            at += take
            pos += take
            if pos == end:
                if same:
                    w.copy_range(index, catalog, src, end - begin)
                run += 1


def _leading_bytes(fw, t, n):
    """The tensor's first n bytes in row order, as contiguous pieces."""
    left = n
    for piece in _pieces(fw, t):
        if left <= 0:
            return
        data = memoryview(fw.raw(piece)).cast("B")
        yield data[:left]
        left -= len(data)


def _base_runs(fw, t, nbytes, base_nbytes, base_digest, base_chunks):
    """Which bytes of a tensor equal its base's, when they cannot be found
    by comparing its own chunk digests with the base's: its shape changed
    (rows appended to an embedding, a grown vocabulary), or its chunks lie
    elsewhere in the file than the base's (another phase: a tensor before
    it in the file grew, or the header's length changed).  The memory's
    leading bytes are hashed at the base's chunk edges and compared with
    the digests the base records: chunk k of the base is unchanged when the
    memory's bytes over the same range hash alike (ranges past the shorter
    of the two tensors are never compared); a base without chunk digests
    compares its whole digest with the memory's first base_nbytes bytes.
    Returns [(same, begin, end)] runs tiling [0, nbytes)."""
    common = min(nbytes, base_nbytes)
    ranges = []
    if base_chunks:
        size, phase, theirs = base_chunks
        count = -(-common // size) + 1
        _, mine = _ckpt.xxh3_64(_leading_bytes(fw, t, common), common, size, phase, count)
        for k in range(min(count, len(theirs))):
            begin, end = max(0, k * size - phase), min(common, (k + 1) * size - phase)
            full = min(base_nbytes, (k + 1) * size - phase)  # the base's chunk k ends there
            if begin < end == full and mine[k] == theirs[k]:
                ranges.append((begin, end))
    elif base_nbytes <= nbytes and base_nbytes and _ckpt.xxh3_64(_leading_bytes(fw, t, base_nbytes)) == base_digest:
        ranges.append((0, base_nbytes))
    runs, at = [], 0
    for begin, end in ranges:  # in order, never overlapping
        if begin > at:
            runs.append([False, at, begin])
        if runs and runs[-1][0] and runs[-1][2] == begin:
            runs[-1][2] = end
        else:
            runs.append([True, begin, end])
        at = end
    if at < nbytes:
        runs.append([False, at, nbytes])
    return runs


def _shares_blocks(w, catalog, file):
    """Whether the output's file system can share the blocks of the base's
    file (ckpt_writer_shares_blocks): where it cannot, a copy in the kernel
    reads every base byte from the disk and writes it again, slower than
    writing the same bytes from memory.  (The tests of what is cloned run
    on ext4 and let it say yes.)"""
    return w.shares_blocks(catalog, file)


def _hash_threads():
    """How many threads hash an incremental save's tensors: XXH3 runs at
    about 11 GiB/s on one core, so hashing is most of an incremental save's
    time unless several cores share it (xxh3_64 releases the GIL); past a
    few of them memory bandwidth, not the cores, is the limit."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


def _hash_against(fw, t, nbytes, layout, base_digest, base_nbytes, theirs):
    """In a hashing thread: (digest, chunk digests) of a tensor's memory,
    for comparison with the base's.  The whole digest first, alone: when it
    equals the base's, the bytes are the base's, and so are the chunk
    digests wherever the chunks lie as the base's (same size, phase and
    count: what ckpt_writer_copy_tensor records too), so each unchanged byte
    is read once; only a tensor that changed, or whose chunks moved, is read
    a second time for its own chunk digests."""
    d = _digest(fw, t)
    if not layout[2]:
        return d, []
    if d == base_digest and base_nbytes == nbytes and theirs and tuple(theirs[:2]) == tuple(layout[:2]) \
            and len(theirs[2]) == layout[2]:
        return d, list(theirs[2])
    return _digest(fw, t, layout)


def _clone_unchanged(w, entries, base, out, write_changed=True):
    """An incremental save's first step: the entries whose bytes equal the
    base's (its recorded digest and dtype; the shape may differ) copied
    from it by the kernel, and the tensors of which only some bytes changed
    — a large tensor's chunks, or the leading bytes of one that grew —
    written now, their unchanged bytes copied; returns the entries still to
    write, and the stats.  The tensors are hashed on a few threads ahead of
    this one, which gives the writer each tensor's digests and bytes in
    order (hashing, not copying, is what an incremental save spends its
    time on).  With write_changed, a changed tensor is written as soon as
    its digests say so, while the threads hash on; else it is among the
    entries returned (a background save stages them).  Only from a base
    file whose blocks the output's file system shares (_shares_blocks):
    the others' tensors
    are written from memory, and when no base file shares, stats'
    full_write says why."""
    stats = {"base": os.fspath(base), "cloned_tensors": 0, "cloned_bytes": 0, "partial_tensors": 0,
             "grown_tensors": 0, "partial_written_bytes": 0, "full_write": None, "tensors": {}}
    try:
        catalog = _sources.catalog(_sources.name(base), False, None, open)
        digests = catalog.recorded_digests()
        chunks = catalog.recorded_chunks()
    except _errors.Error as e:
        stats["full_write"] = f"the base cannot be used: {e}"
        return entries, stats
    if not any(d is not None for d in digests):
        stats["full_write"] = "the base records no digests (saved without checksums)"
        catalog.close()
        return entries, stats
    shares = [_shares_blocks(w, catalog, f) for f in range(len(catalog.files()))]
    if not any(shares):
        stats["full_write"] = ("the output's file system cannot share the base's blocks (no reflink: ext4, tmpfs, "
                               "another file system, a remote base), and a copy in the kernel is slower than "
                               "writing from memory")
        catalog.close()
        return entries, stats
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(_hash_threads(), thread_name_prefix="ckpt-hash")
    try:
        left, pending, written = [], [], []

        def write_or_leave(entry):  # a tensor written from memory whole
            if write_changed:
                _save_write(w, [entry], None)
                written.append(entry)
            else:
                left.append(entry)

        for entry in entries:
            index, fw, t, nbytes, name = entry
            i = catalog.find(name)
            row = catalog.row(i) if i is not None else None
            dt, shape, _ = fw.describe(t)
            if row is None or digests[i] is None or row.dtype != dt or not nbytes or not shares[row.file]:
                pending.append((entry, None))
                continue
            layout = w.tensor_chunks(index)
            job = pool.submit(_hash_against, fw, t, nbytes, layout, digests[i], row.nbytes, chunks[i])
            pending.append((entry, (i, row, shape, layout, job)))
        for entry, known in pending:  # in the entries' order, each tensor's hashes as they come
            if known is None:
                left.append(entry)
                continue
            index, fw, t, nbytes, name = entry
            i, row, shape, layout, job = known
            d, mine = job.result()
            w.give_digests(index, d, mine)  # the writer then hashes nothing again
            theirs = chunks[i]
            if d == digests[i] and row.nbytes == nbytes:  # the same bytes, whatever the shape
                w.copy_range(index, catalog, i, nbytes)
                stats["cloned_tensors"] += 1
                stats["cloned_bytes"] += nbytes
                stats["tensors"][name] = {"cloned_bytes": nbytes, "written_bytes": 0}
                continue
            grown = list(row.shape) != list(shape) or row.nbytes != nbytes
            if not grown and not theirs:  # a changed tensor without chunks: written whole, now
                write_or_leave(entry)
                continue
            if not grown and layout[2] and theirs[0] == layout[0] and theirs[1] == layout[1]:
                runs = _chunk_runs([a == b for a, b in zip(mine, theirs[2])], nbytes, layout[0], layout[1])
            else:
                runs = _base_runs(fw, t, nbytes, row.nbytes, digests[i], theirs)
            cloned = sum(e - b for s, b, e in runs if s)
            if not cloned:
                write_or_leave(entry)
                continue
            _write_partly_cloned(w, index, fw, t, catalog, i, runs)
            stats["partial_tensors"] += 1
            stats["grown_tensors"] += grown
            stats["cloned_bytes"] += cloned
            stats["partial_written_bytes"] += nbytes - cloned
            stats["tensors"][name] = {"cloned_bytes": cloned, "written_bytes": nbytes - cloned}
        for e in written:
            stats["tensors"][e[4]] = {"cloned_bytes": 0, "written_bytes": e[3]}
        stats["partial_written_bytes"] += sum(e[3] for e in written)  # counted with the others in _written_stats
        stats["written_now"] = len(written)
        return left, stats
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # no thread reads a tensor once the save is over
        catalog.close()


def _written_stats(stats, entries):
    """An incremental save's stats, with what was written from memory: the
    entries left whole and the partly cloned tensors' changed chunks."""
    for e in entries:
        stats["tensors"][e[4]] = {"cloned_bytes": 0, "written_bytes": e[3]}
    stats["written_tensors"] = len(entries) + stats.pop("written_now", 0)
    stats["written_bytes"] = sum(e[3] for e in entries) + stats.pop("partial_written_bytes")
    return stats


def _save_open(tensors, path, max_shard_size=None, metadata=None, *, prefix=None, overwrite=False,
               checksums=False, progress=None, no_sync=False, write_back=True):
    """save's first half: the writer, begun (files created, the destination
    locked), and the entries (index, framework, tensor, nbytes) it still
    needs the bytes of, and the progress bar.  The caller commits or aborts.
    write_back (the writer's): the disk writes while the save goes on, not
    all at the commit's fsync, and the saved bytes leave the page cache (a
    full save of 4 GB took 4.6 s instead of 7.1 s on a busy 2-core
    machine, and about the same, 3.1 s, on a quiet one)."""
    if _is_module(tensors):
        tensors = tensors.state_dict()
    flat, structure = _tree.flatten(tensors, with_structure=True)
    plain = isinstance(tensors, dict) and all(_frameworks.of(v) is not None for v in tensors.values()) and \
        all(isinstance(k, str) for k in tensors)
    kw = {"prefix": prefix} if prefix is not None else {}
    w = _ckpt.Writer(os.fspath(path), max_shard_size=_shard_size(max_shard_size), overwrite=overwrite,
                     no_sync=no_sync, checksums=checksums, write_back=write_back, **kw)
    try:
        fws = set()
        entries, ids = [], {}
        for name, t in flat.items():
            fw = _frameworks.of(t)
            if fw is None:
                raise TypeError(f"{name!r} is a {type(t).__name__}: ckpt.save takes torch tensors and numpy arrays")
            fws.add(fw)
            dt, shape, nbytes = fw.describe(t)
            entries.append((w.add(name, dt, shape, _storage(fw, t, ids)), fw, t, nbytes, name))
        if _frameworks.Torch in fws:
            w.set_metadata("format", "pt")
        for k, v in (metadata or {}).items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("metadata must map str to str")
            w.set_metadata(k, v, True)
        if not plain:
            w.set_metadata(_tree.STRUCTURE_KEY, structure, True)
        w.begin()
        entries = [e for e in entries if w.kept(e[0]) is None]  # tensors written in another's place are not sent
        return w, entries, _progress.choose(progress, "save")
    except BaseException:
        w.abort()
        raise


def _save_write(w, entries, bar, cancelled=None, done=0, total=None):
    """Writes the entries' bytes; `cancelled()` true stops between pieces
    (KeyboardInterrupt, as a progress callback's stop)."""
    total = sum(e[3] for e in entries) if total is None else total
    for index, fw, t, nbytes, *_ in entries:
        for part in _pieces(fw, t):
            if cancelled is not None and cancelled():
                raise KeyboardInterrupt("save cancelled")
            w.write(index, fw.raw(part))
        done += nbytes
        if bar and bar(done, total):
            raise KeyboardInterrupt("save cancelled by the progress callback")
    return done


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
            ignore_unmatched=False, format=None, dcp_ranks=1, direct=False, dry_run=False, check_crc=True,
            source_metadata=False, raw=False,
            **source):  # noqa: A002
    """Converts a checkpoint (any format ckpt reads) to `dst`, where
    ckpt.destination says: a file of the format its suffix names
    (.safetensors; .gguf, as GGUFWriter writes it; .pt/.pth/.bin, as
    torch.save writes it; .npy, one array; .npz, a NumPy archive np.load
    reads; .msgpack, a Flax msgpack file, names split at dots into nested
    maps) — or, with max_shard_size, its split parts beside it — else a
    directory of safetensors shards ("out/", an existing directory, a name
    without a checkpoint suffix: 5GB shards unless max_shard_size says),
    applying the same selections, renames, slices, casts and layouts as
    `ckpt convert`, streamed with bounded memory and renamed into place when
    complete.  A GGUF's quantized tensors (Q8_0, Q4_K, …) that no dtype
    rule names become f32 in a format without block types (all but GGUF),
    as `ckpt convert` writes them; a block type asked of one is refused
    (ckpt.Error naming the tensor), nothing written.

    `format` asks for a format by name and must agree with `dst`'s suffix:
    "dcp" writes a torch.distributed.checkpoint directory, as if saved by
    `dcp_ranks` ranks (tensors cut along their first axis, as Shard(0) cuts
    them); "gguf", "torch", … a file of that format at a name without a
    suffix.  A GGUF
    gets a GGUF source's key-values; the metadata of other sources (a
    safetensors `__metadata__`, a torch file's {"format": "pt"}) only with
    source_metadata=True, as string key-values.

    Shows a progress bar on a terminal (progress=False hides it; a
    callable(done, total) receives the progress).  A model directory's other
    files (config.json, tokenizer files, …) are copied into a sharded `dst`
    along with the weights unless extra_files=False; config.json's dtype
    becomes the one `dtype` gave every float tensor (left as it is when
    float tensors of several dtypes remain).  `src` may be a URL;
    direct=True reads it with O_DIRECT and drops the output from the page
    cache as it reaches the disk.

    Returns the paths written (as save does): the output files, then the
    side files (an index, DCP's .metadata) and the copied files.

    llama.cpp's conversions, as `ckpt convert` makes them: a Hugging Face
    model directory (config.json beside the weights) into a .gguf is the
    file convert_hf_to_gguf.py writes — `dtype` its --outtype ("f32",
    "f16", "bf16", "q8_0"; None: its auto) or llama-quantize's mix
    ("q4_k_m", "q5_k_m", "q4_k_s", "q5_k_s", "q6_k") — and a llama.cpp
    GGUF into a directory (or format="hf") is a Hugging Face model
    directory (config.json from the key-values, tensors dequantized to
    `dtype`: f32, f16 or bf16; None: the GGUF's float type, else bf16).
    Either takes `dtype` alone (other rules raise ValueError); raw=True
    writes the tensors as they are instead, names and all, with the rules.

    check_crc (default True): the CRC-32 of every ZIP member of the source
    (torch .bin/.pt, .npz) read whole is checked as it streams; a mismatch
    raises ckpt.Error (CKPT_E_CHECKSUM) and nothing is written.

    dry_run=True writes nothing and returns what the conversion would
    write, after every rule and with the same checks, as a dict:
    {"path", "format", "directory", "open", "files": [{"name", "path", "size",
    "tensors"}], "side_files", "copied_files", "replaces", "tensors":
    [{"name", "source", "dtype", "shape", "nbytes", "file", ("same_as")}],
    "totals": {"tensors", "written", "parameters", "bytes"}}."""
    flags("ckpt.convert", overwrite=overwrite, checksums=checksums, no_sync=no_sync, extra_files=extra_files,
          ignore_unmatched=ignore_unmatched, direct=direct, dry_run=dry_run, check_crc=check_crc,
          source_metadata=source_metadata, raw=raw)
    to_hf = format == "hf"  # a Hugging Face model directory: safetensors and config.json
    if to_hf:
        named = _ckpt.format_for_path(os.fspath(dst))
        if named and not os.path.isdir(dst):  # as format="dcp" refuses x.safetensors (it made "x.safetensors/")
            raise ValueError(f"format='hf' writes a Hugging Face model directory, and {os.fspath(dst)!r} names a "
                             f"{_ckpt.format_name(named)} file: give a directory (a name ending in '/')")
        dst = os.path.join(os.fspath(dst), "")  # a directory, as the destination rule reads "DST/"
    number = _format_id("safetensors" if to_hf else format, also=("hf",))
    out = destination(dst, "safetensors" if to_hf else format)  # the library's rule: refused before the source opens
    llama = _llamacpp_conversion(src, out, to_hf, raw, source_metadata, dtype,
                                 dict(select=select, exclude=exclude, rename=rename, tp_rank=tp_rank, tp_size=tp_size,
                                      tp_select=tp_select, slices=slices, transpose=transpose, layout=layout))
    if out.format == "dcp" and (max_shard_size is not None or prefix is not None or checksums or int(dcp_ranks) < 1):
        raise ValueError("format='dcp' writes one file per rank (dcp_ranks >= 1): no max_shard_size, prefix or checksums")
    if source_metadata and out.format != "gguf":
        raise ValueError("source_metadata is for GGUF output: other formats always carry the source's metadata")
    catalog = _sources.catalog(src, _io("auto", direct), allowed_globals, convert,
                               **_sources.follow_progress(progress, source))
    bar = _progress.choose(progress, "convert")
    kw = dict(max_shard_size=_shard_size(max_shard_size), overwrite=overwrite, no_sync=no_sync,
              checksums=checksums, progress=bar, format=number,
              dcp_ranks=int(dcp_ranks) if out.format == "dcp" else 0, check_crc=check_crc,
              source_metadata=bool(source_metadata))
    if prefix is not None:
        kw["prefix"] = prefix
    # A model directory's other files go along into a directory of shards.
    if extra_files and out.directory and out.format != "dcp" and not _sources.is_remote(src) and os.path.isdir(src):
        kw["copy_files_from"] = os.fspath(src)
    rules = dict(select=select, exclude=exclude, rename=rename, dtype=dtype, tp_rank=tp_rank, tp_size=tp_size,
                 tp_select=tp_select, slices=slices, transpose=transpose, layout=layout)
    if llama == "gguf":  # llama.cpp's conversion: the library's plan, which carries its key-values
        plan = _ckpt.Plan(catalog)
        plan.gguf_llamacpp(os.fspath(src), *_dtype_and_text(dtype))
    elif llama == "hf" and (to_hf or "general.architecture" in catalog.metadata()):
        plan = _ckpt.Plan(catalog)  # a GGUF of no llama.cpp model (no general.architecture) is written as it is
        plan.gguf_hf(None if dtype is None else dtype_name(dtype))
    else:
        plan = _build_plan(catalog, catalog.tensors(), tp_dim=tp_dim, ignore_unmatched=ignore_unmatched, **rules)
    # The library's own preview names what the conversion writes (its
    # destination rules, shards, side files), with the same checks.
    preview = plan.convert(os.fspath(dst), dry_run=True, **{**kw, "progress": None})
    if dry_run:
        return preview
    plan.convert(os.fspath(dst), **kw)
    return _written(preview)


def _llamacpp_conversion(src, out, to_hf, raw, source_metadata, dtype, rules):
    """Which of llama.cpp's conversions `ckpt convert` makes of src into
    `out` (ckpt.destination's): "gguf" — a Hugging Face model directory
    (config.json beside the weights) into a GGUF file, as
    convert_hf_to_gguf.py writes it; "hf" — a GGUF file into a directory,
    a Hugging Face model directory; None — neither (or raw=True: the
    tensors as they are).  The one option of either is the dtype: other
    rules are refused, as the CLI refuses them (cli/convert.c)."""
    src_path = None if _sources.is_remote(src) else os.fspath(src)
    gguf_src = (src_path is not None and _ckpt.format_name(_ckpt.format_for_path(src_path)) == "gguf"
                and os.path.isfile(src_path))
    if to_hf and not gguf_src:
        raise ValueError("format='hf' converts a llama.cpp GGUF file (src *.gguf)")
    hf_dir = (to_hf or (out.directory and out.format != "dcp")) and out.format != "gguf" and gguf_src
    if raw and out.format != "gguf" and not hf_dir:
        raise ValueError("raw=True is for GGUF output (dst *.gguf) or a GGUF into a directory")
    model_dir = src_path is not None and os.path.isdir(src_path) and os.path.isfile(os.path.join(src_path,
                                                                                                 "config.json"))
    kind = "gguf" if out.format == "gguf" and not raw and model_dir else "hf" if hf_dir and not raw else None
    given = sorted(k for k, v in rules.items() if v is not None and v is not False)
    if kind and isinstance(dtype, dict):
        given.append("dtype by pattern")
    if kind == "gguf" and given:
        raise ValueError(f"llama.cpp's conversion of a model directory takes dtype alone (not {', '.join(given)}); "
                         f"pass raw=True to select, rename or cast tensors of your own")
    if kind == "gguf" and source_metadata:
        raise ValueError("source_metadata goes with raw=True: llama.cpp's conversion writes the key-values "
                         "convert_hf_to_gguf.py writes")
    if kind == "hf" and given:
        raise ValueError(f"a GGUF's conversion to a Hugging Face directory takes dtype alone (not "
                         f"{', '.join(given)}); pass raw=True to select, rename or cast tensors of your own")
    return kind


def _dtype_and_text(dtype):
    """llama.cpp's conversion's dtype: (ckpt's name of it, or None), and the
    text given when it names no dtype (a llama-quantize mix: "q4_k_m")."""
    if dtype is None:
        return None, None
    try:
        return dtype_name(dtype), dtype if isinstance(dtype, str) else None
    except ValueError:
        if not isinstance(dtype, str):
            raise
        return None, dtype


def _written(preview):
    """The paths a conversion wrote, from its preview: the output files,
    then its side files (an index, DCP's .metadata) and the files copied
    beside them."""
    files = [os.path.normpath(f["path"]) for f in preview["files"]]
    where = preview["path"] if preview["directory"] else os.path.dirname(preview["path"])
    return files + [os.path.join(where, n) for n in preview["side_files"] + preview["copied_files"]]


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


