"""Loading straight into GPU memory (ckpt_device.h): torch tensors are
allocated on the CUDA device, and their addresses given to the plan as
destinations; the library reads each tensor's bytes into a ring of pinned
host slots and copies them to the device from there, with the GIL released.

Used only when torch's CUDA is available: without it, loads keep their
host path (and `.to(device)` says what torch says)."""
import os
import threading

from . import _ckpt, _dtypes

_devices = {}  # name -> _ckpt.Device: each device's ring is pinned once per process
_lock = threading.Lock()


class TorchCuda:
    """The few things the device path asks torch's CUDA: whether it is
    there, where a tensor's memory lies, an empty tensor on a device, and
    waiting for the work torch has queued.  One object, `torch_cuda`, so
    that the tests can answer for a torch without CUDA over the stand-in
    runtime, whose "device" memory is host memory (tests/python/test_device.py)."""

    @staticmethod
    def available():
        import torch
        return torch.cuda.is_available()

    @staticmethod
    def current():
        import torch
        return torch.cuda.current_device()

    @staticmethod
    def device_of(t):
        """The CUDA device whose memory holds tensor `t`, or None."""
        return t.device if t.device.type == "cuda" else None

    @staticmethod
    def empty(shape, dtype, device):
        import torch
        return torch.empty(shape, dtype=dtype, device=device)

    @staticmethod
    def synchronize(device):
        import torch
        torch.cuda.current_stream(device).synchronize()


torch_cuda = TorchCuda()


def torch_cuda_device(device):
    """The torch.device a load with `device` goes to through the ring, or
    None when it does not: not a CUDA device, or torch without CUDA."""
    if device is None:
        return None
    import torch
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        return None
    if d.type != "cuda" or not torch_cuda.available():
        return None
    return torch.device("cuda", torch_cuda.current() if d.index is None else d.index)


def tensor_cuda_device(t):
    """The torch.device (with its index) of the CUDA memory holding torch
    tensor `t`, or None when it is not on a CUDA device."""
    d = torch_cuda.device_of(t)
    return None if d is None else torch_cuda_device(d)


def empty_like(t, device):
    """An empty tensor of t's shape and dtype on `device` (a CUDA device
    through torch_cuda, any other as torch makes it)."""
    cuda = torch_cuda_device(device)
    if cuda is None:
        import torch
        return torch.empty_like(t, device=device)
    return torch_cuda.empty(t.shape, t.dtype, cuda)


def device_name(torch_device):
    return f"cuda:{torch_device.index}"


def _loaded_cudart():
    """The path of the libcudart this process has loaded already (torch's),
    so that the library uses the same runtime rather than another on the
    search path; None when none is mapped."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                if "/libcudart.so" in path and os.path.isfile(path):
                    return path
    except OSError:
        pass
    return None


def open_device(name):
    """The process's _ckpt.Device for `name` ("cuda:N"), opened once."""
    with _lock:
        dev = _devices.get(name)
        if dev is None:
            if not os.environ.get("CKPT_CUDART"):
                runtime = _loaded_cudart()
                if runtime:
                    os.environ["CKPT_CUDART"] = runtime
            dev = _devices[name] = _ckpt.Device(name)
        return dev


def load_through_ring(plan, items, device_name, allocate, **load_options):
    """Loads the plan's items into device memory: allocate(i, item) gives
    (object, address) — the object that owns the memory (a torch tensor)
    and its device address; returns the objects, in item order, once every
    copy has completed.  load_options go to Plan.load (views never apply)."""
    dev = open_device(device_name)
    out = []
    for i, item in enumerate(items):
        obj, address = allocate(i, item)
        plan.set_device_buffer(i, dev, address, item.nbytes)
        out.append(obj)
    plan.load(views=0, **load_options)
    return out


def torch_allocator(torch_device):
    """allocate() for load_through_ring: an empty torch tensor of the item's
    dtype and shape on `torch_device`."""
    from ._frameworks import Torch

    def allocate(i, item):
        t = torch_cuda.empty(Torch.storage_shape(item.dtype, item.shape), _dtypes.torch_dtype(item.dtype, item.name),
                             torch_device)
        return t, t.data_ptr()
    return allocate


def load_torch(plan, items, torch_device, **load_options):
    """The plan's items as torch tensors on `torch_device`, through the ring."""
    # The caching allocator may hand out memory that work queued on torch's
    # stream still uses; the ring copies on a stream of its own.
    torch_cuda.synchronize(torch_device)
    return load_through_ring(plan, items, device_name(torch_device), torch_allocator(torch_device), **load_options)
