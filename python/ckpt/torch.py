"""Drop-in for safetensors.torch: change the import, keep the code.

    from ckpt.torch import load_file, save_file, safe_open

Same signatures, results and errors as safetensors.torch, for every format
ckpt reads (a .safetensors file, a sharded directory or index, a torch.save
file).  Loaded tensors are zero-copy, copy-on-write views of the file."""
import os
from collections import defaultdict
from typing import Dict, List, Optional, Set, Union

import torch

from . import _safe
from ._api import flags as _flags
from ._errors import SafetensorError  # noqa: F401
from ._frameworks import Torch as _Torch

__all__ = ["safe_open", "load_file", "save_file", "load", "save", "save_model", "load_model", "SafetensorError"]


def safe_open(filename, framework="pt", device="cpu", *, backend="mmap", **source):
    return _safe.safe_open(filename, framework, device, backend=backend, **source)


def load_file(filename: Union[str, os.PathLike], device: Union[str, int] = "cpu", *,
              backend: str = "mmap", **source) -> Dict[str, torch.Tensor]:
    """Loads a checkpoint into a dict of tensors (safetensors.torch.load_file).
    `filename` may be an http://, https://, s3://, gs:// or az:// URL; direct=True and
    the other source options are those of ckpt.open.  With backend="mmap"
    (the default) tensors stored as loaded are copy-on-write views of the
    file: truncating the file while they live makes touching them raise
    SIGBUS, as with safetensors; backend="pread" copies every byte."""
    return _safe.load_file("pt", filename, device, backend, **source)


def load(data: bytes) -> Dict[str, torch.Tensor]:
    """Loads safetensors bytes into a dict of tensors."""
    return _safe.load_bytes("pt", data)


def save(tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None) -> bytes:
    """The safetensors bytes of a dict of tensors."""
    _evaluate_tensors_for_save(tensors)
    return _safe.save_bytes(_Torch, tensors, metadata)


def save_file(tensors: Dict[str, torch.Tensor], filename: Union[str, os.PathLike],
              metadata: Optional[Dict[str, str]] = None) -> None:
    """Saves a dict of tensors as one safetensors file, atomically (a
    complete file appears under `filename`, or nothing changes)."""
    _evaluate_tensors_for_save(tensors)
    _safe.write_file(_Torch, tensors, filename, metadata)


def save_model(model: torch.nn.Module, filename: Union[str, os.PathLike],
               metadata: Optional[Dict[str, str]] = None, force_contiguous: bool = True) -> None:
    """Saves a module, dropping the names of tensors that share memory (as
    safetensors.torch.save_model), keeping the one that covers the storage."""
    _flags("ckpt.torch.save_model", force_contiguous=force_contiguous)
    state_dict = model.state_dict()
    for kept, removed in _remove_duplicate_names(state_dict).items():
        for name in removed:
            metadata = {} if metadata is None else metadata
            metadata.setdefault(name, kept)
            del state_dict[name]
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    try:
        save_file(state_dict, filename, metadata=metadata)
    except ValueError as e:
        raise ValueError(str(e) + " Or use save_model(..., force_contiguous=True), read the docs for potential caveats.")


def load_model(model: torch.nn.Module, filename: Union[str, os.PathLike], strict: bool = True,
               device: Union[str, int] = "cpu", *, backend: str = "mmap", **source):
    """Loads into a module through load_state_dict, accounting for shared
    tensors as safetensors.torch.load_model does; returns (missing, unexpected)."""
    _flags("ckpt.torch.load_model", strict=strict)
    state_dict = load_file(filename, device=device, backend=backend, **source)
    to_removes = _remove_duplicate_names(model.state_dict(), preferred_names=state_dict.keys())
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = set(missing)
    for group in to_removes.values():
        for name in group:
            if name not in missing:
                unexpected.append(name)
            else:
                missing.remove(name)
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            error += "\n    Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(missing))
        if unexpected:
            error += "\n    Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(unexpected))
        raise RuntimeError(error)
    return missing, unexpected


# ---- the checks safetensors makes before saving, with its messages ----

def _storage_ptr(t):
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return 0


def _storage_size(t):
    try:
        return t.untyped_storage().nbytes()
    except Exception:
        return t.nelement() * t.element_size()


def _end_ptr(t):
    return t.view(-1)[-1].data_ptr() + t.element_size() if t.nelement() else t.data_ptr()


def _find_shared_tensors(state_dict) -> List[Set[str]]:
    groups = defaultdict(set)
    for k, v in state_dict.items():
        if v.device != torch.device("meta") and _storage_ptr(v) != 0 and _storage_size(v) != 0:
            groups[(v.device, _storage_ptr(v), _storage_size(v))].add(k)
    result = []
    for shared in sorted(groups.values()):
        if len(shared) < 2:
            result.append(shared)
            continue
        areas = sorted((state_dict[n].data_ptr(), _end_ptr(state_dict[n]), n) for n in shared)
        _, last_stop, last_name = areas[0]
        result.append({last_name})
        for start, stop, name in areas[1:]:
            if start >= last_stop:
                result.append({name})
            else:
                result[-1].add(name)
            last_stop = stop
    return result


def _is_complete(t):
    return t.data_ptr() == _storage_ptr(t) and t.nelement() * t.element_size() == _storage_size(t)


def _remove_duplicate_names(state_dict, *, preferred_names=None, discard_names=None):
    preferred_names = set(preferred_names or [])
    discard_names = set(discard_names or [])
    to_remove = defaultdict(list)
    for shared in _find_shared_tensors(state_dict):
        complete = {n for n in shared if _is_complete(state_dict[n])}
        if not complete:
            raise RuntimeError(
                "Error while trying to find names to remove to save state dict, but found no suitable name to keep"
                f" for saving amongst: {shared}. None is covering the entire storage.Refusing to save/load the model"
                " since you could be storing much more memory than needed. Please refer to"
                " https://huggingface.co/docs/safetensors/torch_shared_tensors for more information. Or open an"
                " issue.")
        keep = sorted(complete)[0]
        preferred = complete.difference(discard_names)
        if preferred:
            keep = sorted(preferred)[0]
        if preferred_names:
            preferred = preferred_names.intersection(complete)
            if preferred:
                keep = sorted(preferred)[0]
        for name in sorted(shared):
            if name != keep:
                to_remove[keep].append(name)
    return to_remove


def _evaluate_tensors_for_save(tensors):
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    sparse = []
    for k, v in tensors.items():
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"Key `{k}` is invalid, expected torch.Tensor but received {type(v)}")
        if v.layout != torch.strided:
            sparse.append(k)
    if sparse:
        raise ValueError(
            f"You are trying to save a sparse tensors: `{sparse}` which this library does not support."
            " You can make it a dense tensor before saving with `.to_dense()` but be aware this might"
            " make a much larger file than needed.")
    failing = [names for names in _find_shared_tensors(tensors) if len(names) > 1]
    if failing:
        raise RuntimeError(
            f"""
            Some tensors share memory, this will lead to duplicate memory on disk and potential differences when loading them again: {failing}.
            A potential way to correctly save your model is to use `save_model`.
            More information at https://huggingface.co/docs/safetensors/torch_shared_tensors
            """)
    for k, v in tensors.items():
        if not v.is_contiguous():
            raise ValueError(
                f"You are trying to save a non contiguous tensor: `{k}` which is not allowed. It either means you"
                " are trying to save tensors which are reference of each other in which case it's recommended to save"
                " only the full tensors, and reslice at load time, or simply call `.contiguous()` on your tensor to"
                " pack it before saving.")
