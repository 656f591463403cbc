"""A memory cgroup for one child process, made with mkdir under
/sys/fs/cgroup: cgroup v2 (memory.max) where the memory controller is
there, else cgroup v1 (memory.limit_in_bytes) — many container hosts
still mount the memory controller as v1.  Used by the tests (small files)
and by bench/sources_bench.py (the 8 GB run).

    cg = MemoryCgroup.create("ckpt-test")   # None, with .why, if impossible
    proc = cg.popen([...])                   # the child starts inside
    cg.set_limit(bytes)
    cg.stats()  -> {"current", "peak", "file", "anon", "oom_kills"}
    cg.remove()
"""
import os
import subprocess
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _own_path(controller):
    """This process's cgroup path in the v2 hierarchy (controller None)
    or in the v1 hierarchy of `controller`."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        num, ctrls, path = line.split(":", 2)
        if controller is None and num == "0":
            return path
        if controller is not None and controller in ctrls.split(","):
            return path
    return None


class MemoryCgroup:
    why = ""

    def __init__(self, path, version):
        self.path = Path(path)
        self.version = version

    @classmethod
    def create(cls, name):
        """A new memory cgroup, or None (cls.why says why not)."""
        name = f"{name}-{os.getpid()}-{time.monotonic_ns()}"
        reasons = []
        # cgroup v2: a child of the root, whose subtree has the memory controller.
        controllers = ROOT / "cgroup.controllers"
        if controllers.exists():
            if "memory" not in controllers.read_text().split():
                reasons.append("cgroup v2 has no memory controller")
            else:
                try:
                    sub = ROOT / "cgroup.subtree_control"
                    if "memory" not in sub.read_text().split():
                        sub.write_text("+memory")
                    d = ROOT / name
                    d.mkdir()
                    if not (d / "memory.max").exists():
                        d.rmdir()
                        raise OSError("memory.max missing")
                    return cls(d, 2)
                except OSError as e:
                    reasons.append(f"cannot make a cgroup v2 under {ROOT}: {e}")
        # cgroup v1: beside the v2 tree, a memory hierarchy of its own; the
        # new group goes under this process's own (its charges stay there).
        v1 = ROOT / "memory"
        if (v1 / "memory.limit_in_bytes").exists():
            own = _own_path("memory") or "/"
            try:
                d = v1 / own.lstrip("/") / name
                d.mkdir()
                return cls(d, 1)
            except OSError as e:
                reasons.append(f"cannot make a cgroup v1 under {v1 / own.lstrip('/')}: {e}")
        elif not controllers.exists():
            reasons.append(f"no cgroup file system at {ROOT}")
        cls.why = "; ".join(reasons) or "no memory cgroup available"
        return None

    def _file(self, v2, v1):
        return self.path / (v2 if self.version == 2 else v1)

    def set_limit(self, limit):
        self._file("memory.max", "memory.limit_in_bytes").write_text(str(int(limit)))
        if self.version == 1:
            # No swap either (memsw may be absent: then there is none).
            sw = self.path / "memory.memsw.limit_in_bytes"
            if sw.exists():
                try:
                    sw.write_text(str(int(limit)))
                except OSError:
                    pass
        else:
            sw = self.path / "memory.swap.max"
            if sw.exists():
                sw.write_text("0")

    def reset_peak(self):
        """Starts the peak afresh where the kernel allows it."""
        try:
            self._file("memory.peak", "memory.max_usage_in_bytes").write_text("0")
        except OSError:
            pass

    def popen(self, args, **kw):
        procs = self._file("cgroup.procs", "cgroup.procs")

        def enter():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        return subprocess.Popen(args, preexec_fn=enter, **kw)

    def stats(self):
        stat = {}
        for line in self._file("memory.stat", "memory.stat").read_text().splitlines():
            k, v = line.split()
            stat[k] = int(v)
        current = int(self._file("memory.current", "memory.usage_in_bytes").read_text())
        peak_file = self._file("memory.peak", "memory.max_usage_in_bytes")
        peak = int(peak_file.read_text()) if peak_file.exists() else current
        if self.version == 2:
            events = dict(line.split() for line in (self.path / "memory.events").read_text().splitlines())
            kills = int(events.get("oom_kill", 0))
            file_bytes, anon = stat.get("file", 0), stat.get("anon", 0)
        else:
            control = dict(line.split() for line in (self.path / "memory.oom_control").read_text().splitlines())
            kills = int(control.get("oom_kill", 0))
            file_bytes, anon = stat.get("cache", 0), stat.get("rss", 0)
        return {"current": current, "peak": peak, "file": file_bytes, "anon": anon, "oom_kills": kills}

    def remove(self):
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)

    def describe(self):
        return f"cgroup v{self.version} {self.path}"


def evict(path):
    """Drops a file's pages from the page cache (after writing them out)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_fraction(path):
    """Fraction of a file's pages in the page cache (mincore)."""
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    size = os.path.getsize(path)
    if size == 0:
        return 0.0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap failed")
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = ctypes.create_string_buffer(pages)
        if libc.mincore(addr, size, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        libc.munmap(addr, size)
        return sum(b & 1 for b in vec.raw) / pages
    finally:
        os.close(fd)


def supports_direct(directory):
    """Whether files in `directory` can be opened with O_DIRECT (not tmpfs)."""
    probe = Path(directory) / ".odirect-probe"
    probe.write_bytes(b"\0" * 4096)
    try:
        fd = os.open(probe, os.O_RDONLY | os.O_DIRECT)
        os.close(fd)
        return True
    except OSError:
        return False
    finally:
        probe.unlink()
