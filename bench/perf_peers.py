"""The contenders of `make bench`'s perf suite (bench/perf_suite.py), one per
process: each loads what a user asks for to CPU memory and checksums every
byte it got (bench/peers.py's checksum), timed inside the process after the
imports.  Prints one JSON object.

    python bench/perf_peers.py MODE PATH
MODE: ckpt_load | ckpt_load_copy | st_load_file            whole file
      | ckpt_f32 | st_f32                                   bf16 file as float32
      | ckpt_tp0 | st_tp0                                   rank 0 of 4 along dim 0
      | ckpt_tp1 | st_tp1                                   rank 0 of 4 along dim 1
      | ckpt_into_touched                                   ckpt.load_into tensors allocated and
                                                            touched before the clock starts
      | ckpt_into_touched_overlap                           the same, each tensor checksummed by
                                                            on_loaded as soon as it is in place
      | runai                                               Run:ai's SafetensorsStreamer, each
                                                            tensor checksummed as it streams in
The ckpt modes run whichever ckpt package is first on sys.path (this tree's,
or an earlier build's through PYTHONPATH)."""
import json
import sys
import time

import torch

from peers import checksum

RANK, SIZE = 0, 4


def part(shape, dim):
    """The rank's [start, stop) along dim (torch.tensor_split's split)."""
    n = shape[dim]
    q, r = divmod(n, SIZE)
    start = RANK * q + min(RANK, r)
    return start, start + q + (1 if RANK < r else 0)


def touched_tensors(path):
    import ckpt
    from ckpt._dtypes import torch_dtype
    with ckpt.open(path) as c:
        return {k: torch.empty(i.shape, dtype=torch_dtype(i.dtype)).zero_() for k, i in c.tensors.items()}


def run(mode, path):
    import ckpt
    if mode == "runai":
        return run_runai(path)
    if mode in ("ckpt_into_touched", "ckpt_into_touched_overlap"):
        sd = touched_tensors(path)
    if mode == "ckpt_into_touched_overlap":
        return run_overlap(sd, path)
    t0 = time.perf_counter()
    if mode == "ckpt_into_touched":
        ckpt.load_into(sd, path, progress=False)
    elif mode == "ckpt_load":
        sd = ckpt.load(path, progress=False)
    elif mode == "ckpt_load_copy":
        sd = ckpt.load(path, copy=True, progress=False)
    elif mode == "st_load_file":
        from safetensors.torch import load_file
        sd = load_file(path)
    elif mode == "ckpt_f32":
        sd = ckpt.load(path, dtype="float32", progress=False)
    elif mode == "st_f32":
        from safetensors.torch import load_file
        sd = {k: v.to(torch.float32) for k, v in load_file(path).items()}
    elif mode in ("ckpt_tp0", "ckpt_tp1"):
        sd = ckpt.load(path, tp_rank=RANK, tp_size=SIZE, tp_dim=int(mode[-1]), progress=False)
    elif mode in ("st_tp0", "st_tp1"):
        from safetensors import safe_open
        dim = int(mode[-1])
        sd = {}
        with safe_open(path, framework="pt") as f:
            for k in f.keys():
                sl = f.get_slice(k)
                shape = sl.get_shape()
                if len(shape) <= dim:
                    sd[k] = sl[:]
                    continue
                a, b = part(shape, dim)
                sd[k] = sl[a:b] if dim == 0 else sl[:, a:b]
    else:
        raise SystemExit(f"unknown mode {mode}")
    loaded = time.perf_counter()
    total, nbytes = 0, 0
    for k in sorted(sd):
        s, n = checksum(sd[k])
        total, nbytes = (total + s) % (1 << 64), nbytes + n
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "load_seconds": loaded - t0, "bytes": nbytes, "checksum": total,
                      "ckpt": getattr(ckpt, "__file__", "")}))


def run_overlap(sd, path):
    """ckpt.load_into with each tensor checksummed as soon as it is in place
    (on_loaded), overlapping the use with the reads as Run:ai's does."""
    import ckpt
    acc = [0, 0]

    def on_loaded(name, t):
        s, n = checksum(t)
        acc[0], acc[1] = (acc[0] + s) % (1 << 64), acc[1] + n

    t0 = time.perf_counter()
    ckpt.load_into(sd, path, progress=False, on_loaded=on_loaded)
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "load_seconds": seconds, "bytes": acc[1], "checksum": acc[0],
                      "ckpt": getattr(ckpt, "__file__", "")}))


def run_runai(path):
    """Run:ai streams tensors into its own reused buffer: each is
    checksummed as it arrives (overlapping the checksum with the reads,
    which the other modes cannot do)."""
    from runai_model_streamer import SafetensorsStreamer
    t0 = time.perf_counter()
    total, nbytes = 0, 0
    with SafetensorsStreamer() as streamer:
        streamer.stream_files([path])
        for _, t in streamer.get_tensors():
            s, n = checksum(t)
            total, nbytes = (total + s) % (1 << 64), nbytes + n
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "load_seconds": seconds, "bytes": nbytes, "checksum": total, "ckpt": ""}))


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2])
