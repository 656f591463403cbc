"""ckpt's exceptions.  Every failure of the C library becomes a subclass of
`ckpt.Error` carrying `status` (the category's name, e.g. "CKPT_E_CORRUPT"),
`code` (its number), `detail` (the rule that broke, e.g.
"CKPT_D_DATA_HOLE", or None), `detail_code`, `path`, `tensor` and
`offset`; those
that mean the same thing as a built-in error also derive from it
(FileNotFoundError, FileExistsError, PermissionError, OSError), so existing
handlers keep working."""
import errno

from . import _ckpt

Error = _ckpt.Error


def _error_str(self):
    """The library's whole sentence, with the status name and the detail's
    ("[CKPT_E_CORRUPT/CKPT_D_DATA_HOLE]"): also for the subclasses that
    derive from OSError, whose own str() would show "[Errno None] None"."""
    message = self.args[0] if self.args else ""
    status = getattr(self, "status", None)
    detail = getattr(self, "detail", None)
    hint = getattr(type(self), "_hint", "")
    if detail:
        status = f"{status}/{detail}"
    return f"{message}{hint} [{status}]" if status else f"{message}{hint}"


Error.__str__ = _error_str


class FormatError(Error):
    """A file that is not a valid checkpoint of its format — raised as the
    subclass of the format it was read as (SafetensorError, TorchError,
    GGUFError, NumpyError, DCPError, MsgpackError) — or, as FormatError
    itself, a file that is no checkpoint ckpt reads (the message says what
    it looks like: text, HTML, a ZIP archive that is not torch's, …)."""


class SafetensorError(FormatError):
    """A safetensors file (or an index of shards) that is not valid (the
    name safetensors uses)."""


class TorchError(FormatError):
    """A torch.save file (.bin, .pt, .pth) that is damaged: its ZIP
    structure, its pickle, or what the pickle describes."""


class GGUFError(FormatError):
    """A GGUF file (or gguf-split part) that is not valid."""


class NumpyError(FormatError):
    """A NumPy .npy file or .npz archive that is not valid, or holds what
    ckpt does not read (object arrays, structured dtypes)."""


class DCPError(FormatError):
    """A torch.distributed.checkpoint whose .metadata or .distcp files are
    not valid, or do not fit together."""


class MsgpackError(FormatError):
    """A Flax msgpack file that is not valid."""


class NotFoundError(Error, FileNotFoundError):
    """No such file, directory or tensor file."""


class ExistsError(Error, FileExistsError):
    """The destination exists and overwrite was not allowed."""
    _hint = "; pass overwrite=True to replace it"


class IOFailure(Error, OSError):
    """A system call failed, or the disk is full."""


class AccessError(IOFailure, PermissionError):
    """A file or directory the process may not read or write (EACCES,
    EPERM); `errno` says which."""


class CancelledError(Error):
    """A progress callback (or Ctrl-C) stopped the operation."""


class RemoteError(Error, OSError):
    """A remote file (http://, https://, s3://, gs://, az://) could not be read: an HTTP
    error status, refused credentials, a file changed while read, a server
    without byte ranges, a network failure or timeout after retries, or an
    answer that contradicts the request."""


class NoMatchError(Error, ValueError):
    """A pattern matched no tensor, or a plan selects none."""



# A format error is raised as the class of the format the file it names
# was read as (the C extension asks the library: "format:<name>"); where
# that file cannot be read again, as the class of its detail (the format
# the rule belongs to), else of its status.
_FORMAT_CLASSES = {
    "safetensors": SafetensorError, "safetensors-sharded": SafetensorError,
    "torch": TorchError, "torch-sharded": TorchError,
    "gguf": GGUFError, "npy": NumpyError, "npz": NumpyError,
    "flax-msgpack": MsgpackError, "dcp": DCPError, "none": FormatError,
}
# Details by the format whose rule they name: the prefix of their name, and
# safetensors' own (its header's rules and the index of shards) by default.
_DETAIL_PREFIXES = (("CKPT_D_ZIP_", TorchError), ("CKPT_D_PICKLE_", TorchError), ("CKPT_D_GGUF_", GGUFError),
                    ("CKPT_D_DCP_", DCPError), ("CKPT_D_NPY_", NumpyError), ("CKPT_D_MSGPACK_", MsgpackError))
_DETAILS_OF_NO_FORMAT = {"CKPT_D_UNSUPPORTED_DTYPE": FormatError, "CKPT_D_UNSUPPORTED_SOURCE": RemoteError}
_STATUS_CLASSES = {
    "CKPT_E_NOT_FOUND": NotFoundError,
    "CKPT_E_EXISTS": ExistsError,
    "CKPT_E_IO": IOFailure,
    "CKPT_E_NO_SPACE": IOFailure,
    "CKPT_E_CANCELLED": CancelledError,
    "CKPT_E_TRUNCATED": SafetensorError,
    "CKPT_E_UNKNOWN_FORMAT": FormatError,
    "CKPT_E_LIMIT": SafetensorError,
    "CKPT_E_NO_MATCH": NoMatchError,
    "CKPT_E_REMOTE": RemoteError,
    "CKPT_E_AUTH": RemoteError,
    "CKPT_E_NETWORK": RemoteError,
}


def _detail_class(name, status):
    """The class of a detail whose file cannot be read again."""
    if name in _DETAILS_OF_NO_FORMAT:
        return _DETAILS_OF_NO_FORMAT[name]
    for prefix, cls in _DETAIL_PREFIXES:
        if name.startswith(prefix):
            return cls
    if status in ("CKPT_E_CORRUPT", "CKPT_E_UNSUPPORTED"):
        return SafetensorError
    if name == "CKPT_D_TIMEOUT":  # a transfer's; a collective step's is a plain ckpt.Error
        return RemoteError
    return None


def _register():
    classes = {f"format:{name}": cls for name, cls in _FORMAT_CLASSES.items()}
    classes.update(_STATUS_CLASSES)
    for name, (_code, status) in _ckpt.detail_names().items():
        cls = _detail_class(name, status)
        if cls:
            classes[name] = cls
    for code in (errno.EACCES, errno.EPERM):  # a status with its errno: "CKPT_E_IO:13"
        classes[f"CKPT_E_IO:{code}"] = AccessError
    _ckpt._register_errors(classes)


_register()
