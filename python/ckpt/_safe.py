"""safe_open and the load/save functions shared by ckpt.torch and
ckpt.numpy: safetensors' API over ckpt's catalog, for every format ckpt
reads (safetensors, sharded directories, torch files)."""
import os
import tempfile

from . import _ckpt, _frameworks, _sources
from ._errors import SafetensorError


class _Info:
    __slots__ = ("index", "name", "dtype", "shape", "nbytes", "file", "offset", "storage", "direct")

    def __init__(self, index, row):
        self.index = index
        (self.name, self.dtype, self.shape, self.nbytes, self.file, self.offset, self.storage, self.direct) = row


class safe_open:
    """Opens a checkpoint lazily and returns tensors as asked, as
    safetensors.safe_open does.  `framework` is "pt", "numpy" (or "np") or
    "flax"; tensors read as they are stored are zero-copy, copy-on-write
    views of the file (writes never reach it).  `filename` may be an
    http://, https://, s3://, gs:// or az:// URL (read with range requests, never
    mapped); direct=True reads local files around the page cache (no
    mapping either); the other source options are those of ckpt.open."""

    def __init__(self, filename, framework, device="cpu", *, backend="mmap", direct=False, _data=None, **source):
        _ckpt.flag(direct, "safe_open: direct")  # the library's rule of a boolean option (_api.flags)
        self._fw = _frameworks.get(framework)
        if backend not in ("mmap", "pread"):
            raise ValueError(f"backend must be \"mmap\" or \"pread\", not {backend!r}")
        self._backend = backend
        self._device = device
        if _data is not None:  # bytes in memory, read by the library's memory source
            self._catalog = _ckpt.Catalog(filename, data=_data)
        else:
            self._catalog = _sources.catalog(filename, 2 if direct else 0, None, type(self).__init__, **source)
        self._infos = {}  # built as tensors are asked for
        self._maps = {}
        self._paths = [p for p, _ in self._catalog.files()]
        # Remote files (and their cached copies, named by URL), bytes in
        # memory and direct mode are never mapped.
        self._mappable = [_data is None and not direct and not _sources.is_remote(p) for p in self._paths]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._maps = {}
        self._catalog.close()

    def keys(self):
        return sorted(self._catalog.names())

    def offset_keys(self):
        return self._catalog.names()

    def metadata(self):
        m = self._catalog.metadata()
        return m or None

    def _info(self, name):
        info = self._infos.get(name)
        if info is None:
            i = self._catalog.find(name) if isinstance(name, str) else None
            if i is None:
                raise SafetensorError(f"File does not contain tensor {name}")
            info = self._infos[name] = _Info(i, self._catalog.row(i))
        return info

    def _all_infos(self):
        rows = self._catalog.tensors()
        return [self._info_at(i, rows) for i in range(len(rows))]

    def _info_at(self, i, rows):
        row = rows[i]
        info = self._infos.get(row.name)
        if info is None:
            info = self._infos[row.name] = _Info(i, row)
        return info

    def _map(self, file, prefetch=False):
        m = self._maps.get(file)
        if m is None:
            m = self._maps[file] = _ckpt.Map(self._catalog, file, prefetch=prefetch)
        return m

    def _zero_copy(self, info):
        if not info.direct or self._backend != "mmap" or not self._mappable[info.file]:
            return False
        bits = _ckpt.dtype_bits(info.dtype)
        return bits < 8 or info.offset % (bits // 8) == 0

    def _full(self, info):
        """The whole tensor on the CPU: a view of the file when possible."""
        fw = self._fw
        if self._zero_copy(info):
            return fw.from_buffer(self._map(info.file), info.dtype, info.shape, info.offset, info.name)
        out = fw.empty(info.dtype, info.shape, info.name)
        if info.nbytes:
            self._catalog.read(info.index, fw.raw(out, writable=True))
        return out

    def get_tensor(self, name):
        t = self._full(self._info(name))
        return self._fw.to_device(t, self._device)

    def get_slice(self, name):
        return _Slice(self, self._info(name))

    def get_tensors(self):
        if not all(self._mappable):
            return self._load_all()
        return {info.name: self._fw.to_device(self._full(info), self._device) for info in self._all_infos()}

    def _load_all(self):
        """Every tensor through the engine: parallel range requests for a
        remote file, O_DIRECT in direct mode — not one read per tensor."""
        plan = _ckpt.Plan(self._catalog)
        items = plan.items()
        plan.load()
        fw = self._fw
        out = {item.name: fw.from_buffer(plan.data(i), item.dtype, item.shape, 0, item.name)
               for i, item in enumerate(items)}
        return {name: fw.to_device(out[name], self._device) for name in self._catalog.names()}

    def _prefetch(self):
        """Starts reading every file the loop will touch (load_file reads
        all): the library's mapping prefetches what fits in half of the
        available memory and is not cached yet."""
        if self._backend != "mmap":
            return
        for file in sorted({info.file for info in self._all_infos() if self._zero_copy(info)}):
            if not self._mappable[file]:
                continue
            self._map(file, prefetch=True)


class _Slice:
    """get_slice(name): shape and dtype without reading, and [...] reading
    only the rows it needs."""

    def __init__(self, owner, info):
        self._owner = owner
        self._info = info

    def get_shape(self):
        return list(self._info.shape)

    def get_dtype(self):
        return self._info.dtype

    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        ndim = len(self._info.shape)
        used = sum(1 for k in key if k is not None and k is not Ellipsis)
        if used > ndim:
            raise IndexError(f"too many indices for tensor of dimension {ndim}")
        for k in key:
            if isinstance(k, slice) and k.step is not None and k.step <= 0:
                raise ValueError("slice step cannot be zero" if k.step == 0 else "step must be greater than zero")
        rows = None if self._owner._zero_copy(self._info) else self._leading_rows(key)
        if rows is not None:  # read only the rows the key takes (a remote file, direct mode)
            return self._owner._fw.to_device(self._read_rows(*rows), self._owner._device)
        full = self._owner._full(self._info)
        part, fw = full[key], self._owner._fw
        if self._owner._zero_copy(self._info):
            # A contiguous part (rows, or rows of whole inner axes) is a view
            # of the file's copy-on-write mapping, which reads only its
            # pages; another part is copied into a contiguous tensor, as
            # safetensors gives.
            if not fw.is_contiguous(part):
                part = fw.contiguous(part)
        else:
            part = fw.clone(part)  # keep only the part, not the whole tensor read for it
        return self._owner._fw.to_device(part, self._owner._device)


    def _leading_rows(self, key):
        """(first row, row count, the key over those rows) when `key` takes
        a range of the leading axis of a plainly stored tensor of whole-byte
        elements (an int or a slice of step > 0 first), else None: the
        whole tensor is read."""
        info = self._info
        if not info.direct or not info.shape or not key or _ckpt.dtype_bits(info.dtype) % 8:
            return None
        first, n = key[0], info.shape[0]
        if isinstance(first, bool) or first is None or first is Ellipsis:
            return None
        if isinstance(first, int):
            i = first + n if first < 0 else first
            if not 0 <= i < n:
                return None  # the whole tensor's indexing raises the error safetensors raises
            return i, 1, (0,) + tuple(key[1:])
        if not isinstance(first, slice):
            return None
        start, stop, step = first.indices(n)
        if stop <= start:
            return None
        count = (stop - start + step - 1) // step
        last = start + (count - 1) * step
        return start, last - start + 1, (slice(0, last - start + 1, step),) + tuple(key[1:])

    def _read_rows(self, start, count, key):
        info, fw = self._info, self._owner._fw
        row_bytes = info.nbytes // info.shape[0]
        rows = fw.empty(info.dtype, (count,) + tuple(info.shape[1:]), info.name)
        if count * row_bytes:
            self._owner._catalog.read(info.index, fw.raw(rows, writable=True), byte_offset=start * row_bytes)
        part = rows[key]
        return part if fw.is_contiguous(part) else fw.clone(part)


def _check_metadata(metadata):
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise TypeError(f"argument 'metadata': '{type(metadata).__name__}' object cannot be converted to 'PyDict'")
    for k, v in metadata.items():
        if not isinstance(k, str):
            raise TypeError(f"argument 'metadata': '{type(k).__name__}' object is not an instance of 'str'")
        if not isinstance(v, str):
            raise TypeError(f"argument 'metadata': '{type(v).__name__}' object is not an instance of 'str'")
    return metadata


def write_file(fw, tensors, filename, metadata, *, overwrite=True, no_sync=False):
    """Writes a dict of contiguous tensors as one safetensors file, streamed
    from the tensors' own memory and renamed into place when complete —
    at exactly `filename`, whatever its name, as safetensors' save_file."""
    metadata = _check_metadata(metadata)
    w = _ckpt.Writer(os.fspath(filename), overwrite=overwrite, no_sync=no_sync, exact_file=True)
    try:
        for k, v in metadata.items():
            w.set_metadata(k, v)
        keep = []
        for name, t in tensors.items():
            if not fw.on_cpu(t):
                t = t.to("cpu")
            if not fw.is_contiguous(t):
                t = fw.contiguous(t)
            dtype, shape, _ = fw.describe(t)
            keep.append((w.add(name, dtype, shape), t))
        w.begin()
        for index, t in keep:
            w.write(index, fw.raw(t))
        w.commit()
    finally:
        w.abort()


def save_bytes(fw, tensors, metadata):
    with tempfile.TemporaryDirectory(prefix="ckpt-save-", dir=_scratch_dir()) as d:
        path = os.path.join(d, "data.safetensors")
        write_file(fw, tensors, path, metadata, no_sync=True)
        with open(path, "rb") as f:
            return f.read()


def load_bytes(framework, data):
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"argument 'data': '{type(data).__name__}' object cannot be converted to 'PyBytes'")
    # Read where they are (the library's memory source): tensors are copies,
    # as safetensors' load gives.
    with safe_open("data.safetensors", framework, backend="pread", _data=data) as f:
        return f.get_tensors()


def _scratch_dir():
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def load_file(framework, filename, device="cpu", backend="mmap", **source):
    if _frameworks.get(framework) is _frameworks.Torch and device not in (None, "cpu"):
        from . import _api, _device
        if _device.torch_cuda_device(device) is not None:  # straight onto the GPU, through the ring
            return _api.load(filename, "pt", device=device, **source)
    with safe_open(filename, framework, device=device, backend=backend, **source) as f:
        f._prefetch()
        return f.get_tensors()
