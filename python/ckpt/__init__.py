"""ckpt: checkpoints of very large models.

    import ckpt
    ckpt.shapes("model/")                       # nested shapes, no data read
    sd = ckpt.load("model/", tp_rank=0, tp_size=8, dtype="bfloat16")
    ckpt.load_into(model, "model/")             # in place, no second copy
    ckpt.save(model.state_dict(), "out/", max_shard_size="5GB")  # or "x.safetensors", "x.pt", …
    ckpt.convert("pytorch_model.bin", "model.safetensors")
    ckpt.recover("out/")                        # finish a commit a crash cut short

Drop-ins for safetensors: ckpt.torch and ckpt.numpy; checkpoints straight
onto JAX devices with shardings: ckpt.jax.  Everything reads .safetensors
files, sharded Hugging Face directories, torch.save files (parsed without
running any pickle code), GGUF, NumPy .npy/.npz and Flax msgpack files —
local paths, or http://, https://, s3://, gs:// and az:// URLs read with parallel range
requests; direct=True reads local files around the page cache."""
from . import _ckpt
from ._errors import (AccessError, CancelledError, DCPError, Error, ExistsError, FormatError, GGUFError, IOFailure,
                      MsgpackError, NoMatchError, NotFoundError, NumpyError, RemoteError, SafetensorError, TorchError)
from ._api import (Checkpoint, Destination, LoadResult, Mismatch, TensorInfo, TensorSpec, cast, convert, destination,
                   dtype_name, load, load_into, open, recover, save, shapes)
from ._background import SaveHandle
from ._tree import Call, flatten, unflatten

__version__ = _ckpt.version
parse_size = _ckpt.parse_size

__all__ = ["open", "shapes", "load", "load_into", "save", "convert", "recover", "destination", "cast", "flatten",
           "unflatten", "parse_size", "dtype_name", "Checkpoint", "Destination", "TensorSpec", "TensorInfo", "LoadResult",
           "Mismatch", "Call", "Error", "FormatError", "SafetensorError", "TorchError", "GGUFError", "NumpyError",
           "DCPError", "MsgpackError", "NotFoundError", "ExistsError", "IOFailure", "AccessError", "CancelledError",
           "NoMatchError", "RemoteError", "SaveHandle"]
