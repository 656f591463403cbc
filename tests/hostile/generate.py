#!/usr/bin/env python3
"""Builds the hostile corpus: one file per validation rule and attack, each
with the status ckpt must refuse it with (manifest.json).  Run with the
project's venv: .venv/bin/python tests/hostile/generate.py
The marker path named by code-execution payloads is /tmp/ckpt-hostile-pwned."""
import io
import json
import pickle
import struct
import sys
import zipfile
from pathlib import Path

import numpy as np
import safetensors.numpy
import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "interop")]
from test_malformed import CASES as SAFETENSORS_RULES  # noqa: E402
from test_torch_hostile import attacks, fan_out, nested  # noqa: E402

MARKER = "/tmp/ckpt-hostile-pwned"
OUT = HERE / "corpus"
manifest = {}


def put(name, data, status):
    OUT.mkdir(exist_ok=True)
    (OUT / name).write_bytes(data)
    manifest[name] = status


def torch_zip(pickle_bytes, extra=None):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        z.writestr("archive/version", "3\n")
        for n, d in (extra or {}).items():
            z.writestr(n, d)
    return buf.getvalue()


# safetensors: every validation rule of the reference, plus duplicates
for label, data, status, _tensor, _ref in SAFETENSORS_RULES:
    put("st-" + label.replace(" ", "_") + ".safetensors", data, status)

# safetensors truncated at every structure boundary of a real file
good = safetensors.numpy.save({"a": np.arange(8, dtype=np.float32), "b": np.ones(3, dtype=np.int64)})
n = struct.unpack("<Q", good[:8])[0]
for cut, status in [(0, "CKPT_E_CORRUPT/CKPT_D_HEADER_TOO_SMALL"), (4, "CKPT_E_CORRUPT/CKPT_D_HEADER_TOO_SMALL"), (8, "CKPT_E_CORRUPT/CKPT_D_HEADER_PAST_END"),
                    (8 + n // 2, "CKPT_E_CORRUPT/CKPT_D_HEADER_PAST_END"), (8 + n, "CKPT_E_TRUNCATED"),
                    (8 + n + 24, "CKPT_E_TRUNCATED"), (len(good) - 1, "CKPT_E_TRUNCATED")]:
    put(f"st-cut-at-{cut}.safetensors", good[:cut], status)

# enormous declared sizes and integer overflows
def st(header, data=b""):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data

put("st-offsets-beyond-u64.safetensors",
    st({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 2**64]}}, b"\0"), "CKPT_E_CORRUPT/CKPT_D_HEADER_SCHEMA")
put("st-huge-tensor.safetensors",
    st({"a": {"dtype": "F64", "shape": [2**40, 2**20], "data_offsets": [0, 2**63]}}), "CKPT_E_CORRUPT/CKPT_D_SHAPE_OVERFLOW")
put("st-deep-json.safetensors", struct.pack("<Q", 4000) + b"[" * 2000 + b"]" * 2000, "CKPT_E_CORRUPT/CKPT_D_HEADER_NOT_JSON")

# torch: code execution through every opcode path
for label, payload in attacks(MARKER).items():
    put("pt-exec-" + label.replace(" ", "_").replace("+", "_").replace(".", "_") + ".pt", torch_zip(payload),
        "CKPT_E_FORBIDDEN/CKPT_D_PICKLE_FORBIDDEN")

# torch: resources
put("pt-deep-nesting.pt", torch_zip(nested(100_000)), "CKPT_E_LIMIT")
put("pt-fan-out.pt", torch_zip(fan_out(60)), "CKPT_E_LIMIT")
put("pt-self-reference.pt", torch_zip(b"\x80\x02]q\x00h\x00a."), "CKPT_E_LIMIT")
put("pt-memo-abuse.pt", torch_zip(b"\x80\x02Nr\xff\xff\xff\x7f."), "CKPT_E_LIMIT")
put("pt-huge-string.pt", torch_zip(b"\x80\x04\x8d" + (2**62).to_bytes(8, "little") + b"."), "CKPT_E_CORRUPT/CKPT_D_PICKLE_INVALID")
put("pt-two-million-marks.pt", torch_zip(b"\x80\x02" + b"(" * (2 << 20) + b"."), "CKPT_E_LIMIT")

# torch: zip lies and truncations at structure boundaries
buf = io.BytesIO()
torch.save({"w": torch.arange(16.).reshape(4, 4), "t": torch.arange(4.)}, buf)
real = buf.getvalue()
eocd = real.rfind(b"PK\x05\x06")
cd = real.find(b"PK\x01\x02")
for label, cut in [("in-first-local-header", 10), ("before-central-directory", cd), ("in-central-directory", cd + 30),
                   ("in-end-record", eocd + 10)]:
    put(f"pt-cut-{label}.pt", real[:cut], "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID")
bad = bytearray(real)
bad[cd + 42:cd + 46] = struct.pack("<I", len(real) + 100)
put("pt-local-offset-out-of-range.pt", bytes(bad), "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID")
bad = bytearray(real)
bad[cd + 20:cd + 28] = struct.pack("<II", 2**31, 2**31)
put("pt-lying-sizes.pt", bytes(bad), "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID")
z64 = real.rfind(b"PK\x06\x06")  # torch always writes ZIP64 end records: they are what counts
bad = bytearray(real)
bad[z64 + 48:z64 + 56] = struct.pack("<Q", 2**40)
put("pt-zip64-directory-offset-lie.pt", bytes(bad), "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID")
bad = bytearray(real)
bad[z64 + 24:z64 + 40] = struct.pack("<QQ", 2**50, 2**50)
put("pt-zip64-entry-count-lie.pt", bytes(bad), "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID")
z = zipfile.ZipFile(io.BytesIO(real))
entries = {i.filename: z.read(i) for i in z.infolist()}
folder = next(iter(entries)).split("/")[0]
put("pt-entry-outside-folder.pt", torch_zip(entries[f"{folder}/data.pkl"], {"elsewhere/x": b"1"}),
    "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID")
short = dict(entries)
short[f"{folder}/data/0"] = short[f"{folder}/data/0"][:8]
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as out:
    for k, v in short.items():
        out.writestr(k, v)
put("pt-storage-shorter-than-tensor.pt", buf.getvalue(), "CKPT_E_TRUNCATED")

# a compressed data.pkl declaring more than DEFLATE can expand to (a memory bomb by lie)
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zz:
    zz.writestr("archive/data.pkl", entries[f"{folder}/data.pkl"])
bomb = bytearray(buf.getvalue())
at = bomb.find(b"PK\x01\x02")
bomb[at + 24:at + 28] = struct.pack("<I", 500_000_000)
put("pt-deflate-size-lie.pt", bytes(bomb), "CKPT_E_CORRUPT/CKPT_D_ZIP_INVALID")

# sharded: an index escaping its directory
put("index-path-traversal.safetensors.index.json",
    json.dumps({"weight_map": {"a": "../../etc/passwd"}}).encode(), "CKPT_E_CORRUPT/CKPT_D_INDEX_INVALID")

(HERE / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
print(f"{len(manifest)} hostile files in {OUT}")
