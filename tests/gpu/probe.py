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
  cufile             NVIDIA's libcufile driven directly: the driver opened,
                     an O_DIRECT file registered and read, with and without
                     its compatibility mode asked for (each in a process
                     of its own, since the setting applies at the driver's
                     opening)
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpudata  # noqa: E402

CHUNK = 8 << 20


def warm(files):
    for path in files:
        with open(path, "rb") as f:
            while f.read(64 << 20):
                pass


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


CUFILE_CHILD = r"""
import ctypes, json, os, sys, time
import torch
lib_path, path, compat = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
torch.cuda.init(); torch.empty(1, device="cuda")
class Err(ctypes.Structure):
    _fields_ = [("err", ctypes.c_int), ("cu_err", ctypes.c_int)]
class Descr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("handle", ctypes.c_int64), ("fs_ops", ctypes.c_void_p)]
lib = ctypes.CDLL(lib_path)
out = {"compat_asked": compat, "etc_cufile_json": os.path.exists("/etc/cufile.json"),
       "nvidia_fs": os.path.exists("/proc/driver/nvidia-fs")}
v = ctypes.c_int()
if hasattr(lib, "cuFileGetVersion"):
    lib.cuFileGetVersion.restype = Err
    lib.cuFileGetVersion(ctypes.byref(v)); out["version"] = v.value
if compat:
    lib.cuFileSetParameterBool.restype = Err
    lib.cuFileSetParameterBool.argtypes = [ctypes.c_int, ctypes.c_bool]
    out["set_compat"] = lib.cuFileSetParameterBool(1, True).err
lib.cuFileDriverOpen.restype = Err
e = lib.cuFileDriverOpen(); out["driver_open"] = [e.err, e.cu_err]
if hasattr(lib, "cuFileGetParameterBool"):
    lib.cuFileGetParameterBool.restype = Err
    b = ctypes.c_bool()
    lib.cuFileGetParameterBool(1, ctypes.byref(b)); out["allow_compat_mode"] = b.value
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
fh = ctypes.c_void_p()
d = Descr(1, fd, None)
lib.cuFileHandleRegister.restype = Err
e = lib.cuFileHandleRegister(ctypes.byref(fh), ctypes.byref(d)); out["register"] = [e.err, e.cu_err]
if e.err == 0:
    n = 256 << 20
    buf = torch.empty(n, dtype=torch.uint8, device="cuda")
    lib.cuFileRead.restype = ctypes.c_ssize_t
    lib.cuFileRead.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64, ctypes.c_int64]
    start = time.perf_counter()
    got = lib.cuFileRead(fh, ctypes.c_void_p(buf.data_ptr()), n, 0, 0)
    torch.cuda.synchronize()
    out["read"] = got
    out["read_GBps"] = round(max(got, 0) / (time.perf_counter() - start) / 1e9, 3)
print(json.dumps(out))
"""


def cufile(path):
    lib = gpudata.cufile_library()
    if not lib:
        return {"skipped": "no libcufile"}
    out = {"lib": lib}
    for compat in ("0", "1"):
        r = subprocess.run([sys.executable, "-c", CUFILE_CHILD, lib, path, compat], capture_output=True, text=True,
                           timeout=120, cwd="/tmp")
        try:
            out["compat" if compat == "1" else "default"] = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out["compat" if compat == "1" else "default"] = {"rc": r.returncode, "stderr": r.stderr[-1500:]}
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
    warm(files)
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
