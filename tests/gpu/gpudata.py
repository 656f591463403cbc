"""The GPU run's checkpoints, made on the machine's own disk (nothing
travels): sets of bf16 shards, each tensor's bytes drawn from a seeded
generator so that a test can draw them again and compare exactly.

    shards(root, name, count, shard_bytes) -> the directory (index + shards)

CKPT_GPU_SMALL=1 divides sizes by 100 (a dry run of the plumbing)."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sources"))
from cgroup import evict as evict_file  # noqa: E402 - one way to drop a file's pages

TENSORS_PER_SHARD = 4
COLS = 4096


def small():
    return os.environ.get("CKPT_GPU_SMALL") == "1"


def scale(nbytes):
    return max(nbytes // 100, TENSORS_PER_SHARD * COLS * 2) if small() else nbytes


def data_root():
    root = os.environ.get("CKPT_GPU_DATA") or os.path.join(os.path.dirname(__file__), "..", "..", ".gpu-data")
    os.makedirs(root, exist_ok=True)
    return root


def device():
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def tensor(seed, rows, cols=COLS, on=None):
    """Tensor `seed` of a set: bf16 bits from a seeded generator (any bit
    pattern but NaNs', which compare unequal), on `on` (default: the GPU)."""
    import torch
    on = on or device()
    g = torch.Generator(device=on)
    g.manual_seed(seed)
    bits = torch.randint(0, 1 << 16, (rows, cols), generator=g, device=on, dtype=torch.int32)
    bits = bits & 0xBFFF  # the exponent's top bit cleared: finite, never NaN or inf
    return bits.to(torch.int16).view(torch.bfloat16)


def layout(count, shard_bytes):
    """[(shard file, [(name, seed, rows)])] of a set."""
    rows = max(shard_bytes // (TENSORS_PER_SHARD * COLS * 2), 1)
    return [(f"model-{s + 1:05d}-of-{count:05d}.safetensors",
             [(f"layers.{s}.w{k}", s * TENSORS_PER_SHARD + k, rows) for k in range(TENSORS_PER_SHARD)])
            for s in range(count)]


def made(name, count, shard_bytes):
    """Whether shards(name, count, shard_bytes) was made already."""
    want = {"count": count, "shard_bytes": scale(shard_bytes), "cols": COLS}
    try:
        with open(os.path.join(data_root(), name, "stamp.json")) as f:
            return json.load(f) == want
    except (OSError, ValueError):
        return False


def shards(name, count, shard_bytes):
    """The set's directory, made once (a stamp records what it holds)."""
    from safetensors.torch import save_file
    root = os.path.join(data_root(), name)
    if made(name, count, shard_bytes):
        return root
    shard_bytes = scale(shard_bytes)
    stamp = os.path.join(root, "stamp.json")
    want = {"count": count, "shard_bytes": shard_bytes, "cols": COLS}
    os.makedirs(root, exist_ok=True)
    weight_map, total = {}, 0
    for file, tensors in layout(count, shard_bytes):
        out = {}
        for tname, seed, rows in tensors:
            out[tname] = tensor(seed, rows).cpu()
            weight_map[tname] = file
            total += out[tname].nbytes
        save_file(out, os.path.join(root, file))
        del out
    with open(os.path.join(root, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    with open(stamp, "w") as f:
        json.dump(want, f)
    return root


def subset(name, source, count):
    """A set of the first `count` shards of set `source` (a directory made
    by shards()), hard-linked: no bytes written twice."""
    root = os.path.join(data_root(), name)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(source, "model.safetensors.index.json")) as f:
        index = json.load(f)
    keep = sorted(set(index["weight_map"].values()))[:count]
    for file in keep:
        target = os.path.join(root, file)
        if not os.path.exists(target):
            os.link(os.path.join(source, file), target)
    weight_map = {k: v for k, v in index["weight_map"].items() if v in keep}
    with open(os.path.join(root, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return root


def files(root):
    with open(os.path.join(root, "model.safetensors.index.json")) as f:
        return sorted({os.path.join(root, v) for v in json.load(f)["weight_map"].values()})


def warm(paths):
    """Reads the files into the page cache (a warm read finds them there
    whatever the loader: ckpt's O_DIRECT for uncached files never fills it)."""
    for path in paths:
        with open(path, "rb") as f:
            while f.read(64 << 20):
                pass


def evict(root):
    """Drops the set's pages from the page cache (a cold read): every file
    written back, then POSIX_FADV_DONTNEED, which needs no privilege."""
    for path in files(root):
        evict_file(path)


def cufile_library():
    """The libcufile to drive: CKPT_GPU_CUFILE, else the one NVIDIA's wheels
    install beside torch's CUDA (nvidia-cufile-cu12: nvidia/cufile/lib;
    CUDA 13's nvidia-cufile: nvidia/cu13/lib), else the CUDA toolkit's,
    else None."""
    import glob
    if os.environ.get("CKPT_GPU_CUFILE"):
        return os.environ["CKPT_GPU_CUFILE"]
    roots = []
    try:
        import nvidia
        roots = list(getattr(nvidia, "__path__", []))
    except ImportError:
        pass
    for root in roots:
        for lib in sorted(glob.glob(os.path.join(root, "*", "lib", "libcufile.so.0"))):
            return lib
    for lib in ("/usr/local/cuda/lib64/libcufile.so.0", "/usr/local/cuda/targets/x86_64-linux/lib/libcufile.so.0"):
        if os.path.exists(lib):
            return lib
    return None


_CUFILE_CHILD = r"""
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


def cufile_by_hand(lib, path, compat=False):
    """NVIDIA's libcufile driven directly, in a process of its own (its
    settings apply when its driver opens): the driver opened (with its
    compatibility mode asked for, if compat), the file registered from an
    O_DIRECT descriptor and, if it was, 256 MiB read.  A dict of what each
    call returned (register: [CUfileOpError, CUresult])."""
    import subprocess
    r = subprocess.run([sys.executable, "-c", _CUFILE_CHILD, lib, path, "1" if compat else "0"], capture_output=True,
                       text=True, timeout=120, cwd="/tmp")
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"rc": r.returncode, "stderr": r.stderr[-1500:]}


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRss:
    """The most the process's resident memory grew while the block ran
    (sampled every 5 ms on a thread)."""

    def __enter__(self):
        import threading
        self.base = self.peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss_bytes())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())
        self.growth = self.peak - self.base
        return False
