"""Drop-in for safetensors.numpy: change the import, keep the code.

    from ckpt.numpy import load_file, save_file

bfloat16 and float8 tensors come out as ml_dtypes arrays when ml_dtypes is
installed (safetensors.numpy refuses them); otherwise the error says to use
framework="pt"."""
import os
from typing import Dict, Optional, Union

import numpy as np

from . import _safe
from ._errors import SafetensorError  # noqa: F401
from ._frameworks import Numpy as _Numpy

__all__ = ["safe_open", "load_file", "save_file", "load", "save", "SafetensorError"]


def safe_open(filename, framework="numpy", device="cpu", *, backend="mmap", **source):
    return _safe.safe_open(filename, framework, device, backend=backend, **source)


def load_file(filename: Union[str, os.PathLike], *, backend: str = "mmap", **source) -> Dict[str, np.ndarray]:
    """Loads a checkpoint into a dict of arrays (safetensors.numpy.load_file).
    `filename` may be a URL; direct=True and the other source options are
    those of ckpt.open.  With backend="mmap" (the default) arrays stored as
    loaded are copy-on-write views of the file: truncating the file while
    they live makes touching them raise SIGBUS, as with safetensors;
    backend="pread" copies every byte."""
    return _safe.load_file("numpy", filename, "cpu", backend, **source)


def load(data: bytes) -> Dict[str, np.ndarray]:
    return _safe.load_bytes("numpy", data)


def save(tensor_dict: Dict[str, np.ndarray], metadata: Optional[Dict[str, str]] = None) -> bytes:
    return _safe.save_bytes(_Numpy, _check(tensor_dict), metadata)


def save_file(tensor_dict: Dict[str, np.ndarray], filename: Union[str, os.PathLike],
              metadata: Optional[Dict[str, str]] = None) -> None:
    """Saves a dict of arrays as one safetensors file, atomically; big-endian
    and non-contiguous arrays are written as little-endian row-major data."""
    _safe.write_file(_Numpy, _check(tensor_dict), filename, metadata)


def _check(tensor_dict):
    if not isinstance(tensor_dict, dict):
        raise ValueError(f"Expected a dict of [str, np.ndarray] but received {type(tensor_dict)}")
    for k, v in tensor_dict.items():
        if not isinstance(v, np.ndarray):
            raise ValueError(f"Key `{k}` is invalid, expected np.ndarray but received {type(v)}")
    return tensor_dict
