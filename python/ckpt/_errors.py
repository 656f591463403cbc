"""ckpt's exceptions.  Every failure of the C library becomes a subclass of
`ckpt.Error` carrying `status`, `code`, `path`, `tensor` and `offset`; those
that mean the same thing as a built-in error also derive from it
(FileNotFoundError, FileExistsError, OSError), so existing handlers keep
working."""
from . import _ckpt

Error = _ckpt.Error


class SafetensorError(Error):
    """A file that is not a valid checkpoint (the name safetensors uses)."""


class NotFoundError(Error, FileNotFoundError):
    """No such file, directory or tensor file."""


class ExistsError(Error, FileExistsError):
    """The destination exists and overwrite was not allowed."""


class IOFailure(Error, OSError):
    """A system call failed, or the disk is full."""


class CancelledError(Error):
    """A progress callback (or Ctrl-C) stopped the operation."""



def _register():
    classes = {}
    for name, code in _ckpt.status_names().items():
        if (20 <= code < 70 or 80 <= code < 90) and name != "CKPT_E_CHECKSUM":
            classes[name] = SafetensorError
    classes.update({
        "CKPT_E_NOT_FOUND": NotFoundError,
        "CKPT_E_EXISTS": ExistsError,
        "CKPT_E_IO": IOFailure,
        "CKPT_E_NO_SPACE": IOFailure,
        "CKPT_E_CANCELLED": CancelledError,
        "CKPT_E_TRUNCATED": SafetensorError,
        "CKPT_E_UNKNOWN_FORMAT": SafetensorError,
        "CKPT_E_LIMIT": SafetensorError,
    })
    _ckpt._register_errors(classes)


_register()
