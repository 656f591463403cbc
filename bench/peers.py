"""The Python contenders of `make bench`'s load suite, one per process:
each loads a whole checkpoint to CPU memory and checksums every byte (the
same wrapping sum of 64-bit words as bench/load_bench.c), timed inside the
process.  Prints one JSON object.

    python bench/peers.py MODE PATH
MODE: st_load_file | st_get_tensor | torch_load | torch_load_mmap | runai | fastsafetensors | tensorizer
"""
import json
import os
import sys
import time

import numpy as np
import torch


def checksum(t):
    b = t.contiguous().view(-1).view(torch.uint8).numpy()
    n = len(b) // 8 * 8
    s = int(np.add.reduce(b[:n].view(np.uint64), dtype=np.uint64)) if n else 0
    return (s + int(b[n:].sum())) % (1 << 64), len(b)


def files_of(path):
    if os.path.isdir(path):
        return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    return [path]


def run(mode, path):
    total, nbytes = 0, 0

    def add(t):
        nonlocal total, nbytes
        s, n = checksum(t)
        total, nbytes = (total + s) % (1 << 64), nbytes + n

    t0 = time.perf_counter()
    if mode == "st_load_file":
        from safetensors.torch import load_file
        for f in files_of(path):
            for t in load_file(f).values():
                add(t)
    elif mode == "st_get_tensor":
        from safetensors import safe_open
        for f in files_of(path):
            with safe_open(f, framework="pt") as sf:
                for k in sf.keys():
                    add(sf.get_tensor(k))
    elif mode in ("torch_load", "torch_load_mmap"):
        sd = torch.load(path, weights_only=True, mmap=mode == "torch_load_mmap")
        for t in sd.values():
            add(t)
    elif mode == "runai":
        from runai_model_streamer import SafetensorsStreamer
        with SafetensorsStreamer() as streamer:
            streamer.stream_files(files_of(path))
            for _, t in streamer.get_tensors():
                add(t)
    elif mode == "fastsafetensors":
        from fastsafetensors import fastsafe_open
        with fastsafe_open(filenames=files_of(path), nogds=True, device="cpu", debug_log=False) as f:
            for k in f.keys():
                add(f.get_tensor(k))
    elif mode == "tensorizer":
        from tensorizer import TensorDeserializer
        with TensorDeserializer(path, device="cpu") as d:
            for t in d.values():
                add(t)
    else:
        raise SystemExit(f"unknown mode {mode}")
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "bytes": nbytes, "checksum": total}))


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])
