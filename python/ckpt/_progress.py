"""A progress bar on a terminal (stderr), for convert and load: the line
the command-line tool draws (the library's ckpt_progress_line: binary
units, rate, ETA, a fixed layout), so that the two cannot differ."""
import os
import sys
import time

from . import _ckpt


def _columns(stream):
    """The terminal's width: the stream's own, else $COLUMNS, else 80."""
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, OSError, ValueError):
        pass
    try:
        cols = int(os.environ.get("COLUMNS", ""))
        return cols if 0 < cols < 10000 else 80
    except ValueError:
        return 80


class Bar:
    def __init__(self, label, stream=None):
        self.label = label
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.last = -1.0
        try:
            self.tty = self.stream.isatty()
        except (AttributeError, ValueError):
            self.tty = False

    def __call__(self, done, total):
        now = time.monotonic()
        # The first call, the end, and otherwise at most every 100 ms.
        if self.last >= 0 and done < total and now - self.last < 0.1:
            return False
        self.last = now
        line = _ckpt.progress_line(_columns(self.stream), self.label, done, total, now - self.start)
        self.stream.write("\r" + line + ("\x1b[K" if self.tty else ""))
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
        return False


def choose(progress, label):
    """progress=None: a bar when stderr is a terminal; True: always; False:
    never; a callable(done, total) is used as it is.  Anything else is
    refused: progress="no" was a callable to the library, called mid-write."""
    if progress is None:
        return Bar(label) if sys.stderr.isatty() else None
    if callable(progress):
        return progress
    option = "download_progress" if label == "download" else "progress"
    try:
        on = _ckpt.flag(progress, f"{label}: {option}")
    except TypeError:
        raise TypeError(f"{label}: {option} must be None, a bool or a callable(done, total), not "
                        f"{type(progress).__name__} {progress!r}") from None
    return Bar(label) if on else None
