"""A progress bar on a terminal (stderr), for convert and load."""
import sys
import time


class Bar:
    def __init__(self, label, stream=None):
        self.label = label
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.last = 0.0

    def __call__(self, done, total):
        now = time.monotonic()
        if done < total and now - self.last < 0.1:
            return False
        self.last = now
        frac = done / total if total else 1.0
        width = 30
        fill = int(frac * width)
        rate = done / max(now - self.start, 1e-9) / 1e9
        self.stream.write(f"\r{self.label} [{'#' * fill}{'.' * (width - fill)}] {frac * 100:5.1f}% "
                          f"{done / 1e9:.2f}/{total / 1e9:.2f} GB {rate:.2f} GB/s")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
        return False


def choose(progress, label):
    """progress=None: a bar when stderr is a terminal; True: always; False:
    never; a callable(done, total) is used as it is."""
    if progress is None:
        return Bar(label) if sys.stderr.isatty() else None
    if progress is True:
        return Bar(label)
    if progress is False:
        return None
    return progress
