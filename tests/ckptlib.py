"""A minimal ctypes binding of libckpt's public API, for the tests and the
benchmark (the real Python package is a C extension; see the issues)."""
import ctypes
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIB_PATH = os.environ.get("CKPT_LIB", str(ROOT / "build" / "libckpt.so"))
BIN_PATH = os.environ.get("CKPT_BIN", str(ROOT / "build" / "ckpt"))

DTYPES = ["INVALID", "BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0",
          "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64",
          "I64", "U64",
          # ggml's block types (GGUF)
          "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
          "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "IQ1_M", "TQ1_0", "TQ2_0",
          "MXFP4", "NVFP4", "Q1_0"]


class Error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("detail", ctypes.c_int), ("sys_errno", ctypes.c_int), ("offset", ctypes.c_int64),
                ("path", ctypes.c_char * 1024), ("tensor", ctypes.c_char * 512),
                ("message", ctypes.c_char * 2048)]


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_uint32),
                ("shape", ctypes.POINTER(ctypes.c_uint64)), ("numel", ctypes.c_uint64),
                ("nbytes", ctypes.c_uint64), ("file", ctypes.c_uint32), ("offset", ctypes.c_uint64),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("storage", ctypes.c_uint32),
                ("big_endian", ctypes.c_uint8), ("compressed", ctypes.c_uint8)]


class WriterOptions(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("max_shard_size", ctypes.c_uint64), ("prefix", ctypes.c_char_p),
                ("overwrite", ctypes.c_int), ("no_sync", ctypes.c_int), ("checksums", ctypes.c_int),
                ("copy_partial_views", ctypes.c_int), ("format", ctypes.c_int), ("copy_files_from", ctypes.c_char_p),
                ("gguf", ctypes.c_void_p), ("metadata_json", ctypes.c_char_p),
                ("dcp", ctypes.c_void_p)]


class PlanItem(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("source", ctypes.POINTER(TensorInfo)), ("dtype", ctypes.c_int),
                ("ndim", ctypes.c_uint32), ("shape", ctypes.POINTER(ctypes.c_uint64)), ("numel", ctypes.c_uint64),
                ("nbytes", ctypes.c_uint64), ("slice_start", ctypes.POINTER(ctypes.c_uint64)),
                ("slice_count", ctypes.POINTER(ctypes.c_uint64)), ("perm", ctypes.POINTER(ctypes.c_uint32)),
                ("data", ctypes.c_void_p), ("is_view", ctypes.c_uint8), ("transform", ctypes.c_uint8)]


PROGRESS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p)


class CatalogOptions(ctypes.Structure):  # the fields up to `io` (the library defaults the rest)
    _fields_ = [("size", ctypes.c_size_t), ("allowed_globals", ctypes.c_void_p), ("allowed_global_count", ctypes.c_size_t),
                ("connect_timeout_ms", ctypes.c_uint32), ("read_timeout_ms", ctypes.c_uint32),
                ("retries", ctypes.c_uint32), ("max_connections", ctypes.c_uint32), ("bearer_token", ctypes.c_char_p),
                ("cache_dir", ctypes.c_char_p), ("io", ctypes.c_int)]


class LoadOptions(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("threads", ctypes.c_uint), ("chunk_bytes", ctypes.c_uint64),
                ("io_uring", ctypes.c_int), ("views", ctypes.c_int), ("progress", PROGRESS_FN),
                ("user", ctypes.c_void_p)]


class LoadStats(ctypes.Structure):
    _fields_ = [("bytes_needed", ctypes.c_uint64), ("bytes_read", ctypes.c_uint64), ("reads", ctypes.c_uint64),
                ("tasks", ctypes.c_uint64), ("threads", ctypes.c_uint), ("ring_bytes", ctypes.c_uint64),
                ("direct", ctypes.c_int), ("io_uring", ctypes.c_int), ("views", ctypes.c_uint64)]


class Expected(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_uint32),
                ("shape", ctypes.POINTER(ctypes.c_uint64))]


class MatchEntry(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("name", ctypes.c_char_p), ("expected", ctypes.c_size_t),
                ("item", ctypes.c_size_t)]


_lib = ctypes.CDLL(LIB_PATH)
_lib.ckpt_dtype_block_elems.restype = ctypes.c_uint32
_lib.ckpt_dtype_block_bytes.restype = ctypes.c_uint32
_P = ctypes.c_void_p
_lib.ckpt_status_name.restype = ctypes.c_char_p
_lib.ckpt_detail_name.restype = ctypes.c_char_p
_lib.ckpt_catalog_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(_P), ctypes.POINTER(Error)]
_lib.ckpt_catalog_options_init_sized.argtypes = [ctypes.POINTER(CatalogOptions), ctypes.c_size_t]
_lib.ckpt_catalog_open_ex.argtypes = [ctypes.c_char_p, ctypes.POINTER(CatalogOptions), ctypes.POINTER(_P),
                                      ctypes.POINTER(Error)]
_lib.ckpt_catalog_close.argtypes = [_P]
_lib.ckpt_catalog_tensor_count.argtypes = [_P]
_lib.ckpt_catalog_tensor_count.restype = ctypes.c_size_t
_lib.ckpt_catalog_tensor.argtypes = [_P, ctypes.c_size_t]
_lib.ckpt_catalog_tensor.restype = ctypes.POINTER(TensorInfo)
_lib.ckpt_catalog_find.argtypes = [_P, ctypes.c_char_p]
_lib.ckpt_catalog_find.restype = ctypes.POINTER(TensorInfo)
_lib.ckpt_catalog_file_count.argtypes = [_P]
_lib.ckpt_catalog_file_count.restype = ctypes.c_size_t
_lib.ckpt_catalog_file_path.argtypes = [_P, ctypes.c_size_t]
_lib.ckpt_catalog_file_path.restype = ctypes.c_char_p
_lib.ckpt_catalog_metadata_count.argtypes = [_P]
_lib.ckpt_catalog_metadata_count.restype = ctypes.c_size_t
_lib.ckpt_catalog_metadata_entry.argtypes = [_P, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                                             ctypes.POINTER(ctypes.c_char_p)]
_lib.ckpt_catalog_read.argtypes = [_P, ctypes.POINTER(TensorInfo), ctypes.c_uint64, _P, ctypes.c_uint64,
                                   ctypes.POINTER(Error)]
_lib.ckpt_catalog_tree_json.argtypes = [_P]
_lib.ckpt_catalog_tree_json.restype = ctypes.c_char_p
_lib.ckpt_catalog_view.argtypes = [_P, ctypes.POINTER(TensorInfo), ctypes.POINTER(_P), ctypes.POINTER(Error)]
_lib.ckpt_parse_size.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(Error)]
_lib.ckpt_writer_options_init_sized.argtypes = [ctypes.POINTER(WriterOptions), ctypes.c_size_t]
_lib.ckpt_writer_create.argtypes = [ctypes.c_char_p, ctypes.POINTER(WriterOptions), ctypes.POINTER(_P),
                                    ctypes.POINTER(Error)]
_lib.ckpt_writer_set_metadata.argtypes = [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(Error)]
_lib.ckpt_writer_add_tensor.argtypes = [_P, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32,
                                        ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                                        ctypes.POINTER(Error)]
_lib.ckpt_writer_begin.argtypes = [_P, ctypes.POINTER(Error)]
_lib.ckpt_writer_write.argtypes = [_P, ctypes.c_size_t, _P, ctypes.c_size_t, ctypes.POINTER(Error)]
_lib.ckpt_writer_commit.argtypes = [_P, ctypes.POINTER(Error)]
_lib.ckpt_writer_free.argtypes = [_P]
_lib.ckpt_writer_file_count.argtypes = [_P]
_lib.ckpt_writer_file_count.restype = ctypes.c_size_t
_lib.ckpt_writer_file_path.argtypes = [_P, ctypes.c_size_t]
_lib.ckpt_writer_file_path.restype = ctypes.c_char_p
_lib.ckpt_writer_tensor_file.argtypes = [_P, ctypes.c_size_t]
_lib.ckpt_writer_tensor_file.restype = ctypes.c_size_t


_E = ctypes.POINTER(Error)
_lib.ckpt_can_cast.argtypes = [ctypes.c_int, ctypes.c_int]
_lib.ckpt_cast.argtypes = [ctypes.c_int, _P, ctypes.c_int, _P, ctypes.c_uint64, _E]
_lib.ckpt_plan_create.argtypes = [_P, ctypes.POINTER(_P), _E]
_lib.ckpt_plan_free.argtypes = [_P]
for _name in ("select", "exclude"):
    getattr(_lib, "ckpt_plan_" + _name).argtypes = [_P, ctypes.c_char_p, _E]
_lib.ckpt_plan_rename.argtypes = [_P, ctypes.c_char_p, ctypes.c_char_p, _E]
_lib.ckpt_plan_cast.argtypes = [_P, ctypes.c_char_p, ctypes.c_int, _E]
_lib.ckpt_plan_slice.argtypes = [_P, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, _E]
_lib.ckpt_plan_split.argtypes = [_P, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, _E]
_lib.ckpt_plan_permute.argtypes = [_P, ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32), _E]
_lib.ckpt_plan_transpose.argtypes = [_P, ctypes.c_char_p, _E]
_lib.ckpt_plan_layout.argtypes = [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, _E]
_lib.ckpt_plan_count.argtypes = [_P]
_lib.ckpt_plan_count.restype = ctypes.c_size_t
_lib.ckpt_plan_item_at.argtypes = [_P, ctypes.c_size_t]
_lib.ckpt_plan_item_at.restype = ctypes.POINTER(PlanItem)
_lib.ckpt_plan_find.argtypes = [_P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)]
_lib.ckpt_plan_find.restype = ctypes.POINTER(PlanItem)
_lib.ckpt_plan_set_buffer.argtypes = [_P, ctypes.c_size_t, _P, ctypes.c_uint64, _E]
_lib.ckpt_plan_take.argtypes = [_P, ctypes.c_size_t]
_lib.ckpt_plan_take.restype = _P
_lib.ckpt_free.argtypes = [_P]
_lib.ckpt_plan_match.argtypes = [_P, ctypes.POINTER(Expected), ctypes.c_size_t, ctypes.c_uint,
                                 ctypes.POINTER(ctypes.POINTER(MatchEntry)), ctypes.POINTER(ctypes.c_size_t), _E]
_lib.ckpt_load_options_init_sized.argtypes = [ctypes.POINTER(LoadOptions), ctypes.c_size_t]
_lib.ckpt_load.argtypes = [_P, ctypes.POINTER(LoadOptions), _E]
_lib.ckpt_plan_stats.argtypes = [_P, ctypes.POINTER(LoadStats)]
_lib.ckpt_convert_plan.argtypes = [_P, ctypes.c_char_p, ctypes.POINTER(WriterOptions), _E]

MATCH_KINDS = {1: "missing", 2: "unexpected", 3: "shape", 4: "dtype"}
IO_MODES = {"auto": 0, "buffered": 1, "direct": 2}


class CkptError(Exception):
    def __init__(self, err):
        self.status = _lib.ckpt_status_name(err.status).decode()
        self.detail = _lib.ckpt_detail_name(err.detail).decode() if err.detail else None
        self.message = err.message.decode(errors="replace")
        self.path = err.path.decode(errors="replace")
        self.tensor = err.tensor.decode(errors="replace")
        self.offset = err.offset
        super().__init__(f"{self.status}{'/' + self.detail if self.detail else ''}: {self.message}")


def _check(status, err):
    if status != 0:
        raise CkptError(err)


def parse_size(text):
    err, out = Error(), ctypes.c_uint64()
    _check(_lib.ckpt_parse_size(text.encode(), ctypes.byref(out), ctypes.byref(err)), err)
    return out.value


class Catalog:
    def __init__(self, path, io="auto"):
        """io: how the catalog reads its local files (ckpt_catalog_options.io)."""
        self._h, err = _P(), Error()
        opts = CatalogOptions()
        _lib.ckpt_catalog_options_init_sized(ctypes.byref(opts), ctypes.sizeof(opts))
        opts.io = IO_MODES[io]
        _check(_lib.ckpt_catalog_open_ex(str(path).encode(), ctypes.byref(opts), ctypes.byref(self._h),
                                         ctypes.byref(err)), err)

    def close(self):
        if self._h:
            _lib.ckpt_catalog_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _info(self, i):
        return _lib.ckpt_catalog_tensor(self._h, i)

    def names(self):
        return [self._info(i).contents.name.decode() for i in range(_lib.ckpt_catalog_tensor_count(self._h))]

    def files(self):
        return [_lib.ckpt_catalog_file_path(self._h, i).decode() for i in range(_lib.ckpt_catalog_file_count(self._h))]

    def info(self, name):
        p = _lib.ckpt_catalog_find(self._h, name.encode())
        if not p:
            raise KeyError(name)
        t = p.contents
        return {"name": name, "dtype": DTYPES[t.dtype], "shape": [t.shape[d] for d in range(t.ndim)],
                "nbytes": t.nbytes, "file": t.file, "offset": t.offset, "numel": t.numel,
                "strides": [t.strides[d] for d in range(t.ndim)] if t.strides else None,
                "storage": t.storage, "big_endian": bool(t.big_endian), "compressed": bool(t.compressed)}

    def tree(self):
        p = _lib.ckpt_catalog_tree_json(self._h)
        return json.loads(p.decode()) if p else None

    def metadata(self):
        out = {}
        for i in range(_lib.ckpt_catalog_metadata_count(self._h)):
            k, v = ctypes.c_char_p(), ctypes.c_char_p()
            _lib.ckpt_catalog_metadata_entry(self._h, i, ctypes.byref(k), ctypes.byref(v))
            out[k.value.decode()] = v.value.decode()
        return out

    def read(self, name, offset=0, nbytes=None):
        p = _lib.ckpt_catalog_find(self._h, name.encode())
        if not p:
            raise KeyError(name)
        n = p.contents.nbytes - offset if nbytes is None else nbytes
        buf = ctypes.create_string_buffer(max(n, 1))
        err = Error()
        _check(_lib.ckpt_catalog_read(self._h, p, offset, buf, n, ctypes.byref(err)), err)
        return buf.raw[:n]

    def view(self, name):
        p = _lib.ckpt_catalog_find(self._h, name.encode())
        ptr, err = _P(), Error()
        _check(_lib.ckpt_catalog_view(self._h, p, ctypes.byref(ptr), ctypes.byref(err)), err)
        return ctypes.string_at(ptr.value, p.contents.nbytes) if p.contents.nbytes else b""


def write(path, tensors, metadata=None, max_shard_size=0, overwrite=False, prefix=None, chunk=None):
    """Writes [(name, dtype_name, shape, bytes)] in the given (declaration)
    order; returns {tensor: file name}."""
    opts = WriterOptions()
    _lib.ckpt_writer_options_init_sized(ctypes.byref(opts), ctypes.sizeof(opts))
    opts.max_shard_size = max_shard_size
    opts.overwrite = int(overwrite)
    opts.no_sync = 1
    if prefix:
        opts.prefix = prefix.encode()
    w, err = _P(), Error()
    _check(_lib.ckpt_writer_create(str(path).encode(), ctypes.byref(opts), ctypes.byref(w), ctypes.byref(err)), err)
    try:
        for k, v in (metadata or {}).items():
            _check(_lib.ckpt_writer_set_metadata(w, k.encode(), v.encode(), ctypes.byref(err)), err)
        for name, dtype, shape, _ in tensors:
            arr = (ctypes.c_uint64 * max(len(shape), 1))(*shape)
            _check(_lib.ckpt_writer_add_tensor(w, name.encode(), DTYPES.index(dtype), len(shape), arr, None,
                                               ctypes.byref(err)), err)
        _check(_lib.ckpt_writer_begin(w, ctypes.byref(err)), err)
        for i, (_, _, _, data) in enumerate(tensors):
            step = chunk or max(len(data), 1)
            for start in range(0, len(data), step):
                piece = data[start:start + step]
                _check(_lib.ckpt_writer_write(w, i, piece, len(piece), ctypes.byref(err)), err)
        placement = {t[0]: os.path.basename(_lib.ckpt_writer_file_path(w, _lib.ckpt_writer_tensor_file(w, i)).decode())
                     for i, t in enumerate(tensors)}
        _check(_lib.ckpt_writer_commit(w, ctypes.byref(err)), err)
        return placement
    finally:
        _lib.ckpt_writer_free(w)


def can_cast(src, dst):
    return bool(_lib.ckpt_can_cast(DTYPES.index(src), DTYPES.index(dst)))


def cast(src, data, dst, count):
    """Converts `count` elements of dtype `src` held in `data` (bytes) to `dst`
    (block types: a whole number of blocks)."""
    d = DTYPES.index(dst)
    out_len = count // _lib.ckpt_dtype_block_elems(d) * _lib.ckpt_dtype_block_bytes(d)
    out = ctypes.create_string_buffer(max(out_len, 1))
    src_buf = ctypes.create_string_buffer(bytes(data), max(len(data), 1))
    err = Error()
    _check(_lib.ckpt_cast(DTYPES.index(src), src_buf, d, out, count, ctypes.byref(err)), err)
    return out.raw[:out_len]


class Plan:
    """A plan over an open Catalog (kept alive by the plan)."""

    def __init__(self, catalog):
        self.catalog = catalog
        self._h, err = _P(), Error()
        _check(_lib.ckpt_plan_create(catalog._h, ctypes.byref(self._h), ctypes.byref(err)), err)
        self._buffers = {}

    def close(self):
        if self._h:
            _lib.ckpt_plan_free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, fn, *args):
        err = Error()
        _check(fn(self._h, *args, ctypes.byref(err)), err)
        return self

    def select(self, pattern):
        return self._call(_lib.ckpt_plan_select, pattern.encode())

    def exclude(self, pattern):
        return self._call(_lib.ckpt_plan_exclude, pattern.encode())

    def rename(self, old, new):
        return self._call(_lib.ckpt_plan_rename, old.encode(), new.encode())

    def cast(self, dtype, pattern=None):
        return self._call(_lib.ckpt_plan_cast, pattern.encode() if pattern else None, DTYPES.index(dtype))

    def slice(self, dim, start, stop, pattern=None):
        return self._call(_lib.ckpt_plan_slice, pattern.encode() if pattern else None, dim, start, stop)

    def split(self, dim, rank, parts, pattern=None):
        return self._call(_lib.ckpt_plan_split, pattern.encode() if pattern else None, dim, rank, parts)

    def permute(self, perm, pattern=None):
        arr = (ctypes.c_uint32 * max(len(perm), 1))(*perm)
        return self._call(_lib.ckpt_plan_permute, pattern.encode() if pattern else None, len(perm), arr)

    def transpose(self, pattern=None):
        return self._call(_lib.ckpt_plan_transpose, pattern.encode() if pattern else None)

    def layout(self, src, dst, pattern=None):
        return self._call(_lib.ckpt_plan_layout, pattern.encode() if pattern else None, src.encode(), dst.encode())

    def _item(self, i):
        return _lib.ckpt_plan_item_at(self._h, i).contents

    def items(self):
        out = []
        for i in range(_lib.ckpt_plan_count(self._h)):
            it = self._item(i)
            out.append({"name": it.name.decode(), "source": it.source.contents.name.decode(),
                        "dtype": DTYPES[it.dtype], "shape": [it.shape[d] for d in range(it.ndim)],
                        "nbytes": it.nbytes, "transform": bool(it.transform), "is_view": bool(it.is_view)})
        return out

    def set_buffer(self, i, buf):
        """buf: a writable ctypes buffer or a numpy array (kept alive here)."""
        if hasattr(buf, "ctypes"):
            ptr, size = buf.ctypes.data, buf.nbytes
        else:
            ptr, size = ctypes.addressof(buf), ctypes.sizeof(buf)
        self._buffers[i] = buf
        return self._call(_lib.ckpt_plan_set_buffer, i, ptr, size)

    def load(self, threads=0, chunk_bytes=0, io_uring=True, views=False, progress=None):
        opts = LoadOptions()
        _lib.ckpt_load_options_init_sized(ctypes.byref(opts), ctypes.sizeof(opts))
        opts.threads, opts.chunk_bytes = threads, chunk_bytes
        opts.io_uring = 0 if io_uring else -1
        opts.views = int(views)
        if progress:
            self._progress = PROGRESS_FN(lambda done, total, user: int(bool(progress(done, total))))
            opts.progress = self._progress
        err = Error()
        _check(_lib.ckpt_load(self._h, ctypes.byref(opts), ctypes.byref(err)), err)
        return self

    def data(self):
        """{name: bytes} of the loaded items."""
        out = {}
        for i in range(_lib.ckpt_plan_count(self._h)):
            it = self._item(i)
            out[it.name.decode()] = ctypes.string_at(it.data, it.nbytes) if it.nbytes else b""
        return out

    def stats(self):
        s = LoadStats()
        _lib.ckpt_plan_stats(self._h, ctypes.byref(s))
        return {name: getattr(s, name) for name, _ in LoadStats._fields_}

    def match(self, expected, cast=False, prune=False):
        """expected: [(name, dtype or None, shape)] → [(kind, name)]."""
        arr = (Expected * max(len(expected), 1))()
        keep = []
        for k, (name, dtype, shape) in enumerate(expected):
            dims = (ctypes.c_uint64 * max(len(shape), 1))(*shape)
            keep.append(dims)
            arr[k] = Expected(name.encode(), DTYPES.index(dtype) if dtype else 0, len(shape), dims)
        entries, count, err = ctypes.POINTER(MatchEntry)(), ctypes.c_size_t(), Error()
        flags = (1 if cast else 0) | (2 if prune else 0)
        _check(_lib.ckpt_plan_match(self._h, arr, len(expected), flags, ctypes.byref(entries), ctypes.byref(count),
                                    ctypes.byref(err)), err)
        return [(MATCH_KINDS[entries[i].kind], entries[i].name.decode()) for i in range(count.value)]

    def convert(self, dst, max_shard_size=0, overwrite=False):
        opts = WriterOptions()
        _lib.ckpt_writer_options_init_sized(ctypes.byref(opts), ctypes.sizeof(opts))
        opts.max_shard_size, opts.overwrite, opts.no_sync = max_shard_size, int(overwrite), 1
        err = Error()
        _check(_lib.ckpt_convert_plan(self._h, str(dst).encode(), ctypes.byref(opts), ctypes.byref(err)),
               err)
