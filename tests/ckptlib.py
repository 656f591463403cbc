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
          "I64", "U64"]


class Error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("sys_errno", ctypes.c_int), ("offset", ctypes.c_int64),
                ("path", ctypes.c_char * 1024), ("tensor", ctypes.c_char * 512),
                ("message", ctypes.c_char * 2048)]


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_uint32),
                ("shape", ctypes.POINTER(ctypes.c_uint64)), ("numel", ctypes.c_uint64),
                ("nbytes", ctypes.c_uint64), ("file", ctypes.c_uint32), ("offset", ctypes.c_uint64),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("storage", ctypes.c_uint32),
                ("big_endian", ctypes.c_uint8), ("compressed", ctypes.c_uint8)]


class WriterOptions(ctypes.Structure):
    _fields_ = [("max_shard_size", ctypes.c_uint64), ("prefix", ctypes.c_char_p),
                ("overwrite", ctypes.c_int), ("no_sync", ctypes.c_int)]


_lib = ctypes.CDLL(LIB_PATH)
_P = ctypes.c_void_p
_lib.ckpt_status_name.restype = ctypes.c_char_p
_lib.ckpt_catalog_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(_P), ctypes.POINTER(Error)]
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
_lib.ckpt_writer_options_init.argtypes = [ctypes.POINTER(WriterOptions)]
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


class CkptError(Exception):
    def __init__(self, err):
        self.status = _lib.ckpt_status_name(err.status).decode()
        self.message = err.message.decode(errors="replace")
        self.path = err.path.decode(errors="replace")
        self.tensor = err.tensor.decode(errors="replace")
        self.offset = err.offset
        super().__init__(f"{self.status}: {self.message}")


def _check(status, err):
    if status != 0:
        raise CkptError(err)


def parse_size(text):
    err, out = Error(), ctypes.c_uint64()
    _check(_lib.ckpt_parse_size(text.encode(), ctypes.byref(out), ctypes.byref(err)), err)
    return out.value


class Catalog:
    def __init__(self, path):
        self._h, err = _P(), Error()
        _check(_lib.ckpt_catalog_open(str(path).encode(), ctypes.byref(self._h), ctypes.byref(err)), err)

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
    _lib.ckpt_writer_options_init(ctypes.byref(opts))
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
