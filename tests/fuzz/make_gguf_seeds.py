#!/usr/bin/env python3
"""Adds seeds to the corpus of the gguf fuzz target (tests/fuzz/corpus/gguf.tar.gz):
files written by gguf-py (every key-value type, nested arrays, every tensor
type it makes, a custom alignment, big-endian, a split part) and hostile
variants, one per validation rule (truncations, a bad version, counts and
lengths past the end, unknown types, bad alignment, overlapping or
unaligned offsets, arrays nested too deep).  Run with the project's venv:
.venv/bin/python tests/fuzz/make_gguf_seeds.py"""
import struct
import tempfile
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

import seeds



def put(data):
    seeds.put("gguf", data)


def written(kvs=(), tensors=(), **kw):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.gguf"
        alignment = kw.pop("alignment", None)
        w = gguf.GGUFWriter(str(p), "llama", **kw)
        if alignment:
            w.add_custom_alignment(alignment)
        for k, v, t in kvs:
            w.add_key_value(k, v, t)
        for name, data, raw in tensors:
            w.add_tensor(name, data, raw_dtype=raw) if raw is not None else w.add_tensor(name, data)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        files = sorted(Path(d).glob("*.gguf"))
        return [f.read_bytes() for f in files]


rng = np.random.default_rng(0)
x = rng.standard_normal((2, 64)).astype(np.float32)
kvs = [("a.u8", 1, V.UINT8), ("a.i8", -1, V.INT8), ("a.u16", 2, V.UINT16), ("a.i16", -2, V.INT16),
       ("a.u32", 3, V.UINT32), ("a.i32", -3, V.INT32), ("a.f32", 0.5, V.FLOAT32), ("a.bool", True, V.BOOL),
       ("a.str", "s", V.STRING), ("a.u64", 4, V.UINT64), ("a.i64", -4, V.INT64), ("a.f64", 0.25, V.FLOAT64),
       ("a.arr", ["x", "y"], V.ARRAY), ("a.nested", [[1], [2, 3]], V.ARRAY)]
tensors = [("f32", x, None), ("f16", x.astype(np.float16), None), ("i8", np.arange(4, dtype=np.int8), None),
           ("bf16", gguf.quants.quantize(x, Q.BF16), Q.BF16)]
for q in (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.MXFP4):
    tensors.append((q.name, gguf.quants.quantize(x, q), q))
kt = np.random.default_rng(1)
for q in (Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.TQ1_0, Q.TQ2_0, Q.IQ4_NL):
    b, s = gguf.GGML_QUANT_SIZES[q]
    tensors.append((q.name, kt.integers(0, 256, (1, 256 // b * s), dtype=np.uint8), q))

base = written(kvs, tensors)[0]
put(base)
put(written(kvs[:3], tensors[:2], alignment=64)[0])
put(written(kvs[:3], tensors[:3], endianess=gguf.GGUFEndian.BIG)[0])
for part in written(kvs[:2], tensors[:3], split_max_tensors=2):
    put(part)
put(written()[0])

# hostile variants of a small file
small = written([("k", 7, V.UINT32), ("s", "abc", V.STRING)], [("t", x, None)])[0]
for cut in (3, 7, 15, 23, 30, 40, 60, 90, len(small) - 1):
    put(small[:cut])
put(small[:4] + struct.pack("<I", 1) + small[8:])                       # version 1
put(small[:4] + struct.pack("<I", 9) + small[8:])                       # version 9
put(small[:8] + struct.pack("<Q", 1 << 60) + small[16:])                # tensor count
put(small[:16] + struct.pack("<Q", 1 << 60) + small[24:])               # kv count
put(small[:24] + struct.pack("<Q", 1 << 62) + small[32:])               # key length
i = small.index(b"k") + 1
put(small[:i] + struct.pack("<I", 13) + small[i + 4:])                  # value type
j = small.index(b"s", i) + 1
put(small[:j + 4] + struct.pack("<Q", 1 << 40) + small[j + 12:])        # string length
t = small.index(b"t", j + 12) + 1
put(small[:t] + struct.pack("<I", 9) + small[t + 4:])                   # n_dims
put(small[:t + 4 + 16] + struct.pack("<I", 4) + small[t + 24:])        # ggml type 4 (removed)
put(small[:t + 24] + struct.pack("<Q", 3) + small[t + 32:])            # unaligned offset
put(small[:t + 24] + struct.pack("<Q", 1 << 40) + small[t + 32:])      # offset past the end
put(small[:t + 4] + struct.pack("<Q", 33) + small[t + 12:])            # shape larger than the data
q = written([], [("q", gguf.quants.quantize(x, Q.Q8_0), Q.Q8_0)])[0]
k = q.index(b"q", 24) + 1
put(q[:k + 4] + struct.pack("<Q", 48) + q[k + 12:])                    # rows not whole blocks
two = written([], [("a", x, None), ("b", x, None)])[0]
k = two.index(b"b", 24) + 1
put(two[:k + 4 + 16 + 4] + struct.pack("<Q", 0) + two[k + 4 + 16 + 4 + 8:])  # overlapping
al = written([("general.alignment", 3, V.UINT32)])[0]
put(al)                                                                  # alignment not a power of two
deep = bytearray(small[:24])
deep[16:24] = struct.pack("<Q", 1)
deep += struct.pack("<Q", 1) + b"d" + struct.pack("<I", 9)
for _ in range(40):
    deep += struct.pack("<IQ", 9, 1)
put(bytes(deep))                                                          # arrays nested 40 deep
dup = small[:16] + struct.pack("<Q", 2) + small[24:]
put(dup)                                                                  # the KV count lies
seeds.commit()
