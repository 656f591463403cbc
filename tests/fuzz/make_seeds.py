#!/usr/bin/env python3
"""Adds seeds to the corpora of the fuzz targets (tests/fuzz/corpus/<target>.tar.gz)
from files made by the reference tools: safetensors, torch.save (zip,
legacy, protocol 4, views, re-zipped), indexes, pickles.  Run with the
project's venv: .venv/bin/python tests/fuzz/make_seeds.py"""
import collections
import io
import json
import pickle
import struct
import sys
import zipfile
from pathlib import Path

import numpy as np
import safetensors.numpy
import safetensors.torch
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "interop"))
sys.path.insert(0, str(HERE.parent))
from seeds import commit, put  # noqa: E402
from test_malformed import CASES  # noqa: E402  (one malformed file per validation rule)


def torch_bytes(obj, **kw):
    buf = io.BytesIO()
    torch.save(obj, buf, **kw)
    return buf.getvalue()


w = torch.arange(12, dtype=torch.float32).reshape(3, 4)
objects = [
    {"w": w, "b": torch.ones(2, dtype=torch.bfloat16)},
    {"w": w, "t": w.t(), "row": w[1], "f8": torch.zeros(3, dtype=torch.float8_e4m3fn), "u16": torch.zeros(2, dtype=torch.uint16)},
    {"model": collections.OrderedDict(a=torch.tensor(1.5)), "epoch": 3, "lst": [1, (2, "x")], "raw": b"\x00\x01"},
    {"p": torch.nn.Parameter(torch.ones(2)), "e": torch.zeros(0, 3), "big": 2**70},
]
for obj in objects:
    for kw in ({}, {"pickle_protocol": 4}, {"_use_new_zipfile_serialization": False}):
        data = torch_bytes(obj, **kw)
        put("torch", data)
        if data[:2] == b"PK":
            put("zip", data)
            z = zipfile.ZipFile(io.BytesIO(data))
            put("pickle", z.read([n for n in z.namelist() if n.endswith("data.pkl")][0]))
            rezipped = io.BytesIO()
            with zipfile.ZipFile(rezipped, "w", zipfile.ZIP_DEFLATED) as out:
                for info in z.infolist():
                    out.writestr(info.filename, z.read(info))
            put("torch", rezipped.getvalue())
            put("zip", rezipped.getvalue())
for proto in (2, 3, 4, 5):
    put("pickle", pickle.dumps({"a": [1, 2.5, None, True], "b": ("x", b"y"), "c": {3}, "d": 2**80}, protocol=proto))
put("pickle", b"cos\nsystem\n(S'true'\ntR.")

arrays = {"f32": np.arange(6, dtype=np.float32).reshape(2, 3), "i8": np.array([1, -2], dtype=np.int8),
          "scalar": np.array(2.0), "empty": np.zeros((0, 2), dtype=np.float16)}
put("safetensors", safetensors.numpy.save(arrays, metadata={"format": "np"}))
put("safetensors", safetensors.torch.save({"bf": torch.ones(3, dtype=torch.bfloat16),
                                           "f8": torch.zeros(2, dtype=torch.float8_e5m2)}))
for _label, data, *_ in CASES:
    put("safetensors", data)

index = {"metadata": {"total_size": 12}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                        "b": "model-00002-of-00002.safetensors"}}
put("index", json.dumps(index, indent=2).encode())
put("index", b'{"weight_map": {"a": "../x"}}')
put("index", b'{"weight_map": {"a": "s", "a": "s"}, "metadata": null}')

for seed in (b"\x00\x00", b"\x01\x07" + bytes(range(40)), b"\x00\x10" + bytes(range(255, 0, -3)), b"\x01\x00" * 30):
    put("roundtrip", seed)
commit()
