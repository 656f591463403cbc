"""Where the device path's time goes (tests/gpu/run.sh runs it when
CKPT_GPU_PROBE=1; --out FILE): the figures that tell a slow ring's causes
apart, on a 4 GiB bf16 set in the page cache.

  pread_*_GBps       one thread reading 8 MiB at a time from the page cache
                     into pageable memory, into pinned memory, and into
                     pinned memory then copied to the GPU and waited for
                     (the ring's work with one slot, no overlap)
  event_wait_us      a 4 KiB copy, an event recorded behind it and waited
                     for: the latency each slot's reuse pays
  ring               ckpt's device loads, warm, for slots x slot bytes x
                     threads x chunk bytes: GB/s, copies, slot waits
  host_GBps          ckpt.load() into host memory, warm, for reference
  cufile             NVIDIA's libcufile driven directly (gpudata.cufile_by_hand):
                     the driver opened, an O_DIRECT file registered and read,
                     with and without its compatibility mode asked for (each
                     in a process of its own, since the setting applies at
                     the driver's opening), and the tail of its log
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpudata  # noqa: E402

CHUNK = 8 << 20


def pread_loop(path, view, then=None):
    fd = os.open(path, os.O_RDONLY)
    total, at = 0, 0
    start = time.perf_counter()
    try:
        while True:
            n = os.preadv(fd, [view], at)
            if n <= 0:
                break
            if then:
                then(n)
            total += n
            at += n
    finally:
        os.close(fd)
    return round(total / (time.perf_counter() - start) / 1e9, 3)


def event_wait_us(torch):
    src = torch.empty(4096, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(4096, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    event = torch.cuda.Event()
    times = []
    for _ in range(500):
        start = time.perf_counter()
        with torch.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)
            event.record(stream)
        event.synchronize()
        times.append(time.perf_counter() - start)
    times.sort()
    return {"median": round(times[len(times) // 2] * 1e6, 1), "p90": round(times[len(times) * 9 // 10] * 1e6, 1)}


def ring(torch, root, nbytes, slots, slot_bytes, threads, chunk):
    import ckpt
    from ckpt import _ckpt, _device
    _device._devices.clear()
    dev = _ckpt.Device("cuda:0", slots=slots, slot_bytes=slot_bytes, cufile=False)
    _device._devices["cuda:0"] = dev
    plan = _ckpt.Plan(_ckpt.Catalog(root))
    items = plan.items()
    opts = {"threads": threads}
    if chunk:
        opts["chunk_bytes"] = chunk
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = _device.load_torch(plan, items, torch.device("cuda", 0), **opts)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    stats = dev.stats()
    del out, plan
    torch.cuda.empty_cache()
    del ckpt
    return {"slots": slots, "slot_MiB": slot_bytes >> 20, "threads": threads, "chunk_MiB": (chunk or 0) / 2**20,
            "GBps": round(nbytes / seconds / 1e9, 3), "copies": stats["copies"], "slot_waits": stats["slot_waits"]}




def cufile(path):
    lib = gpudata.cufile_library()
    if not lib:
        return {"skipped": "no libcufile"}
    out = {"lib": lib}
    for compat in (False, True):
        out["compat" if compat else "default"] = gpudata.cufile_by_hand(lib, path, compat)
    try:
        with open("/tmp/cufile.log") as f:
            out["cufile_log"] = f.read()[-3000:]
    except OSError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    result = {}

    def save():
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps(result)[-2000:], flush=True)

    if not torch.cuda.is_available():
        result["skipped"] = "no CUDA GPU"
        save()
        return 0
    root = gpudata.shards("set4", 4, 1 << 30)
    files = gpudata.files(root)
    nbytes = sum(os.path.getsize(f) for f in files)
    try:
        result["cufile"] = cufile(files[0])
    except Exception as e:  # noqa: BLE001
        result["cufile"] = {"error": repr(e)[:300]}
    save()
    gpudata.warm(files)
    pageable = memoryview(bytearray(CHUNK))
    pinned_t = torch.empty(CHUNK, dtype=torch.uint8, pin_memory=True)
    pinned = memoryview(pinned_t.numpy())
    dst = torch.empty(CHUNK, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()

    def copy_and_wait(n):
        with torch.cuda.stream(stream):
            dst[:n].copy_(pinned_t[:n], non_blocking=True)
        stream.synchronize()
    def attempt(name, fn):
        try:
            result[name] = fn()
        except Exception as e:  # noqa: BLE001 - reported, the next figure still taken
            result[name] = {"error": repr(e)[:300]}
    attempt("pread_pageable_GBps", lambda: pread_loop(files[0], pageable))
    attempt("pread_pinned_GBps", lambda: pread_loop(files[0], pinned))
    attempt("pread_pinned_copy_GBps", lambda: pread_loop(files[0], pinned, copy_and_wait))
    attempt("event_wait_us", lambda: event_wait_us(torch))
    save()

    def host_load():
        import ckpt
        start = time.perf_counter()
        host = ckpt.load(root, copy=True)
        seconds = time.perf_counter() - start
        del host
        return round(nbytes / seconds / 1e9, 3)
    attempt("host_GBps", host_load)
    result["ring"] = []
    configs = [(8, 8 << 20, 0, 0), (8, 8 << 20, 1, 0), (8, 8 << 20, 4, 0), (8, 8 << 20, 16, 8 << 20),
               (32, 8 << 20, 0, 0), (32, 8 << 20, 16, 8 << 20), (16, 32 << 20, 8, 32 << 20), (8, 64 << 20, 4, 64 << 20),
               (64, 4 << 20, 16, 4 << 20), (4, 8 << 20, 2, 8 << 20)]
    for cfg in configs:
        try:
            result["ring"].append(ring(torch, root, nbytes, *cfg))
        except Exception as e:  # noqa: BLE001 - reported
            result["ring"].append({"config": cfg, "error": repr(e)[:300]})
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
