"""How tensors of each framework are made from bytes, and how their bytes
are reached: the only place that knows torch and numpy.  Neither is
imported until a function needs it."""
import ctypes
import math
import warnings

from . import _dtypes


def _numel(shape):
    return math.prod(shape)


class Torch:
    name = "pt"

    @staticmethod
    def is_tensor(x):
        import torch
        return isinstance(x, torch.Tensor)

    @staticmethod
    def from_buffer(buf, dtype, shape, offset=0, tensor=None):
        """A tensor sharing the memory of `buf` (kept alive by the tensor)."""
        import torch
        dt = _dtypes.torch_dtype(dtype, tensor)
        shape = Torch.storage_shape(dtype, shape)
        count = _numel(shape)
        if count == 0:
            return torch.empty(shape, dtype=dt)
        with warnings.catch_warnings():
            # Read-only buffers make torch warn: callers only pass read-only
            # ones for tensors they document as read-only.
            warnings.simplefilter("ignore")
            return torch.frombuffer(buf, dtype=dt, count=count, offset=offset).view(shape)

    @staticmethod
    def storage_shape(dtype, shape):
        if dtype in _dtypes.BLOCKS:
            return _dtypes.block_storage_shape(dtype, shape)
        per = _dtypes.PACKED.get(dtype)
        shape = tuple(shape)
        if per and shape:
            shape = shape[:-1] + (shape[-1] // per,)
        return shape

    @staticmethod
    def empty(dtype, shape, tensor=None):
        import torch
        return torch.empty(Torch.storage_shape(dtype, shape), dtype=_dtypes.torch_dtype(dtype, tensor))

    @staticmethod
    def describe(t):
        """(dtype name, logical shape, nbytes) of a tensor."""
        name = _dtypes.torch_name(t.dtype)
        shape = tuple(t.shape)
        per = _dtypes.PACKED.get(name)
        if per and shape:
            shape = shape[:-1] + (shape[-1] * per,)
        return name, shape, t.numel() * t.element_size()

    @staticmethod
    def is_contiguous(t):
        return t.is_contiguous()

    @staticmethod
    def on_cpu(t):
        return t.device.type == "cpu"

    @staticmethod
    def raw(t, writable=False):
        """The bytes of a contiguous CPU tensor, without a copy, as a buffer
        object; the caller keeps `t` alive while using it."""
        n = t.numel() * t.element_size()
        if n == 0:
            return bytearray(0)
        return (ctypes.c_char * n).from_address(t.data_ptr())

    @staticmethod
    def rows(t):
        return t.shape[0] if t.dim() else 1

    @staticmethod
    def contiguous(t):
        return t.contiguous()

    @staticmethod
    def check_device(device):
        pass  # torch takes any device it knows, and says so when it does not

    @staticmethod
    def to_device(t, device):
        if device is None or device == "cpu" or str(device) == "cpu":
            return t
        return t.to(device)

    @staticmethod
    def clone(t):
        return t.clone()

    @staticmethod
    def copy_into(dst, src):
        import torch
        with torch.no_grad():
            dst.copy_(src)


class Numpy:
    name = "np"

    @staticmethod
    def is_tensor(x):
        import numpy as np
        return isinstance(x, np.ndarray)

    @staticmethod
    def from_buffer(buf, dtype, shape, offset=0, tensor=None):
        import numpy as np
        dt = _dtypes.numpy_dtype(dtype, tensor)
        shape = Numpy.storage_shape(dtype, shape)
        count = _numel(shape)
        if count == 0:
            return np.empty(shape, dtype=dt)
        return np.frombuffer(buf, dtype=dt, count=count, offset=offset).reshape(shape)

    @staticmethod
    def storage_shape(dtype, shape):
        if dtype in _dtypes.BLOCKS:
            return _dtypes.block_storage_shape(dtype, shape)
        return tuple(shape)

    @staticmethod
    def empty(dtype, shape, tensor=None):
        import numpy as np
        return np.empty(Numpy.storage_shape(dtype, shape), dtype=_dtypes.numpy_dtype(dtype, tensor))

    @staticmethod
    def describe(a):
        return _dtypes.numpy_name(a.dtype), tuple(a.shape), a.nbytes

    @staticmethod
    def is_contiguous(a):
        return a.flags.c_contiguous and a.dtype.byteorder != ">"

    @staticmethod
    def on_cpu(a):
        return True

    @staticmethod
    def raw(a, writable=False):
        if a.size == 0:
            return bytearray(0)
        flat = a.reshape(-1).view("u1")
        if writable and not flat.flags.writeable:
            raise ValueError("the target array is read-only")
        return flat

    @staticmethod
    def rows(a):
        return a.shape[0] if a.ndim else 1

    @staticmethod
    def contiguous(a):
        import numpy as np
        a = np.ascontiguousarray(a)
        if a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        return a

    @staticmethod
    def check_device(device):
        if device is not None and str(device) != "cpu":
            raise ValueError(f"numpy arrays live on the host: device={device!r} is not honoured (use framework=\"pt\" "
                             "for torch devices, or ckpt.jax for JAX devices and shardings)")

    @staticmethod
    def to_device(a, device):
        Numpy.check_device(device)
        return a

    @staticmethod
    def clone(a):
        return a.copy()

    @staticmethod
    def copy_into(dst, src):
        import numpy as np
        np.copyto(dst, src, casting="unsafe")


class Jax(Numpy):
    """Flax/JAX: numpy arrays turned into jax arrays at the end."""
    name = "flax"

    @staticmethod
    def check_device(device):
        import jax
        if device is not None and str(device) != "cpu" and not isinstance(device, jax.Device):
            raise ValueError(f"device={device!r} is not honoured by framework=\"flax\": give a jax.Device, or load "
                             "with ckpt.jax, whose shardings place each device's block")

    @staticmethod
    def to_device(a, device):
        import jax
        Jax.check_device(device)
        if isinstance(device, jax.Device):
            return jax.device_put(a, device)
        return jax.numpy.asarray(a)


def jax_placement(device):
    """A jax.sharding.Sharding for `device` when it is a jax Sharding or
    Device (ckpt.load routes those to ckpt.jax.load), else None."""
    mod = type(device).__module__
    if device is None or not (mod.startswith("jax") or mod.startswith("jaxlib")):
        return None
    import jax
    if isinstance(device, jax.sharding.Sharding):
        return device
    if isinstance(device, jax.Device):
        return jax.sharding.SingleDeviceSharding(device)
    return None


FRAMEWORKS = {"pt": Torch, "torch": Torch, "np": Numpy, "numpy": Numpy, "flax": Jax, "jax": Jax}


def get(framework):
    fw = FRAMEWORKS.get(str(framework).lower())
    if fw is None:
        raise ValueError(f"framework {framework!r} is not supported by ckpt: use \"pt\", \"numpy\" or \"flax\"")
    return fw


def of(tensor):
    """The framework of a tensor (torch or numpy), else None."""
    mod = type(tensor).__module__
    if mod.startswith("torch"):
        return Torch
    if mod.startswith("numpy"):
        return Numpy
    return None
