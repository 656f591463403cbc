#!/usr/bin/env python3
"""Adds seeds to the corpora of the npy, npz and msgpack fuzz targets
(tests/fuzz/corpus/<target>.tar.gz) from files numpy and flax write themselves.
Run with the project's venv: .venv/bin/python tests/fuzz/make_seeds_numpy.py"""
import io

import ml_dtypes
import numpy as np
from flax import serialization

from seeds import commit, put


def npy(a, **kw):
    b = io.BytesIO()
    np.save(b, a, **kw)
    return b.getvalue()


arrays = {
    "f32": np.arange(12, dtype=np.float32).reshape(3, 4),
    "fortran": np.asfortranarray(np.arange(24, dtype=np.int16).reshape(2, 3, 4)),
    "big": np.arange(6, dtype=">f8").reshape(2, 3),
    "bf16": np.arange(5).astype(ml_dtypes.bfloat16),
    "f8": np.zeros(3, dtype=ml_dtypes.float8_e5m2),
    "scalar": np.array(1.5),
    "empty": np.zeros((0, 3), dtype=np.uint8),
    "bool": np.array([True, False]),
    "c64": np.array([1 + 2j], dtype=np.complex64),
}
for a in arrays.values():
    put("npy", npy(a))
# Versions 2.0 and 3.0 of the header, as numpy writes them for long headers.
from numpy.lib import format as npformat  # noqa: E402

for version in ((2, 0), (3, 0)):
    b = io.BytesIO()
    npformat.write_array(b, arrays["f32"], version=version)
    put("npy", b.getvalue())
# A header spelling the dtype by its ml_dtypes name, as np.load accepts.
h = b"{'descr': 'float8_e4m3fn', 'fortran_order': False, 'shape': (2,), }"
h += b" " * (64 - 10 - len(h) - 1) + b"\n"
put("npy", b"\x93NUMPY\x01\x00" + bytes([len(h), 0]) + h + b"\x00\x01")

for save in (np.savez, np.savez_compressed):
    b = io.BytesIO()
    save(b, **{k: v for k, v in arrays.items() if k in ("f32", "fortran", "big", "scalar", "empty")})
    put("npz", b.getvalue())
    b = io.BytesIO()
    save(b)
    put("npz", b.getvalue())

tree = {"params": {"Dense_0": {"kernel": np.ones((3, 4), np.float32), "bias": np.zeros(4, ml_dtypes.bfloat16)},
                   "h": {"0": {"w": np.arange(3)}}},
        "step": 3, "lr": 0.1, "name": "x", "c": 1 + 2j, "s": np.float32(2.5), "none": None, "flag": True}
put("msgpack", serialization.msgpack_serialize(tree))
put("msgpack", serialization.to_bytes({"a": [np.ones(2, np.float16), (np.zeros(1, np.int8),)]}))
saved = serialization.MAX_CHUNK_SIZE
serialization.MAX_CHUNK_SIZE = 40  # small arrays in chunks, as Flax cuts arrays over 1 GiB
put("msgpack", serialization.msgpack_serialize({"emb": np.arange(60, dtype=np.float32).reshape(3, 4, 5),
                                                "v": np.arange(17, dtype=np.int16)}))
serialization.MAX_CHUNK_SIZE = saved
commit()
