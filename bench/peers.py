"""The Python contenders of `make bench`'s load suite, one per process:
each loads a whole checkpoint to CPU memory and checksums every byte (the
same wrapping sum of 64-bit words as bench/load_bench.c), timed inside the
process.  Prints one JSON object.

    python bench/peers.py MODE PATH
MODE: st_load_file | st_get_tensor | torch_load | torch_load_mmap | runai | fastsafetensors | tensorizer
      | ckpt_load_file | ckpt_load | ckpt_load_mmap         (the ckpt Python package)
      | into_ckpt | into_st_load_state_dict                  (load into a module)

The "into" modes build a module whose parameters have the checkpoint's
shapes and dtypes (memory touched), then load into it; they report the
module's own RSS and the peak RSS during the load.
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

    if mode.startswith("into_"):
        return run_into(mode, path)
    t0 = time.perf_counter()
    loaded_at = None
    if mode == "ckpt_load_file":
        import ckpt.torch
        sd = ckpt.torch.load_file(path)
        loaded_at = time.perf_counter()
        for t in sd.values():
            add(t)
    elif mode in ("ckpt_load", "ckpt_load_mmap"):
        import ckpt
        sd = ckpt.load(path, mmap=mode == "ckpt_load_mmap", progress=False)
        loaded_at = time.perf_counter()
        for t in sd.values():
            add(t)
    elif mode == "st_load_file":
        from safetensors.torch import load_file
        for f in files_of(path):
            sd = load_file(f)
            loaded_at = time.perf_counter()
            for t in sd.values():
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
    doc = {"seconds": seconds, "bytes": nbytes, "checksum": total}
    if loaded_at is not None:
        doc["load_seconds"] = loaded_at - t0  # until the dict is returned, before the checksum touches it
    print(json.dumps(doc))


def skeleton(path):
    """A module with the checkpoint's parameter names, shapes and dtypes,
    its memory touched (as a freshly initialised model's is)."""
    import ckpt
    root = torch.nn.Module()
    with ckpt.open(path) as c:
        specs = {name: c.spec(name) for name in c.keys()}
    for name, spec in specs.items():
        *mods, leaf = name.split(".")
        m = root
        for part in mods:
            if not hasattr(m, part):
                m.add_module(part, torch.nn.Module())
            m = getattr(m, part)
        p = torch.empty(spec.shape, dtype=ckpt._dtypes.torch_dtype(spec.dtype))
        p.zero_()
        m.register_parameter(leaf, torch.nn.Parameter(p, requires_grad=False))
    return root


def run_into(mode, path):
    import resource
    module = skeleton(path)
    module_bytes = sum(p.numel() * p.element_size() for p in module.parameters())
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    if mode == "into_ckpt":
        import ckpt
        ckpt.load_into(module, path, progress=False)
    elif mode == "into_st_load_state_dict":
        from safetensors.torch import load_file
        module.load_state_dict(load_file(path))
    else:
        raise SystemExit(f"unknown mode {mode}")
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    total = 0
    for p in module.parameters():
        total = (total + checksum(p.data)[0]) % (1 << 64)
    print(json.dumps({"seconds": seconds, "bytes": module_bytes, "checksum": total, "rss_module": rss_before,
                      "rss_peak": peak}))


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])
