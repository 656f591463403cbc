"""ckpt's exceptions.  Every failure of the C library becomes a subclass of
`ckpt.Error` carrying `status`, `code`, `path`, `tensor` and `offset`; those
that mean the same thing as a built-in error also derive from it
(FileNotFoundError, FileExistsError, PermissionError, OSError), so existing
handlers keep working."""
import errno

from . import _ckpt

Error = _ckpt.Error


def _error_str(self):
    """The library's whole sentence, with the status name: also for the
    subclasses that derive from OSError, whose own str() would show
    "[Errno None] None"."""
    message = self.args[0] if self.args else ""
    status = getattr(self, "status", None)
    hint = getattr(type(self), "_hint", "")
    return f"{message}{hint} [{status}]" if status else f"{message}{hint}"


Error.__str__ = _error_str


class SafetensorError(Error):
    """A file that is not a valid checkpoint (the name safetensors uses)."""


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
    """A remote file (http://, https://, s3://) could not be read: an HTTP
    error status, refused credentials, a file changed while read, a server
    without byte ranges, a network failure or timeout after retries, or an
    answer that contradicts the request."""


class NoMatchError(Error, ValueError):
    """A pattern matched no tensor, or a plan selects none."""



def _register():
    classes = {}
    for name, code in _ckpt.status_names().items():
        # File format errors: the safetensors range, and the ranges of the
        # other formats (GGUF, DCP, NumPy and msgpack).
        if 20 <= code < 100 and name != "CKPT_E_CHECKSUM":
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
        "CKPT_E_NO_MATCH": NoMatchError,
    })
    for name, code in _ckpt.status_names().items():
        if 100 <= code < 110:
            classes[name] = RemoteError
    for code in (errno.EACCES, errno.EPERM):  # a status with its errno: "CKPT_E_IO:13"
        classes[f"CKPT_E_IO:{code}"] = AccessError
    _ckpt._register_errors(classes)


_register()
