"""Background saves: ckpt.save(..., background=True) returns a SaveHandle
at once and writes the checkpoint behind the caller.

The caller is blocked only while a snapshot of its tensors is taken, in one
of two ways:
  - "copy": the tensors are copied into host memory, at most staging_bytes
    of them; the ones that do not fit are written before the call returns
    (the handle's stats report that stall).  A thread writes the copies
    and commits.
  - "fork": a forked child writes from its copy-on-write view of the
    process (Redis's BGSAVE); the parent goes on at once, and memory grows
    only by the pages the parent modifies while the child writes.

Either way the writer is the synchronous one: the commit is atomic, happens
only once every byte is on disk, and a crash or a kill at any point leaves
the previous checkpoint as it was (the destination's journal and staging
directory are recovered by the next write).  One background save runs at a
time: the next save (background or not) waits for it, and raises its error
if nobody has seen it yet — a failed save is never silent."""
import atexit
import os
import pickle
import select
import signal
import sys
import threading
import time

from . import _errors, _frameworks

_STAGINGS = ("copy", "fork")

_lock = threading.Lock()
_previous = None  # the last background save's handle


class SaveHandle:
    """A background save.  wait() blocks until it ends and returns what
    ckpt.save returns (the paths written), or raises its error; done() says
    whether it has ended; cancel() stops it (nothing is committed, the
    previous checkpoint stays) and returns True if it stopped it before the
    commit; error is the exception it failed with, or None; stats is a dict:
      staging        "copy" or "fork"
      stall_seconds  how long the call that started it blocked the caller
      staged_bytes   bytes copied into host memory ("copy")
      written_before_return  bytes that did not fit staging_bytes and were
                     written before the call returned ("copy")
      seconds        from the call to the end of the commit (once done)
      pid            the child's process id ("fork")
      incremental    with base=: what ckpt.save(return_stats=True) returns
                     (for "fork", once done)"""

    def __init__(self, path, staging):
        self.path = os.fspath(path)
        self.stats = {"staging": staging, "stall_seconds": 0.0, "staged_bytes": 0, "written_before_return": 0}
        self._result = None
        self._error = None
        self._seen = False  # the error reached someone: wait(), .error, or the next save
        self._ended = threading.Event()
        self._cancel = threading.Event()
        self._started = time.perf_counter()
        self._pid = None
        self._thread = None
        self._report = []  # the forked child's report, as read so far
        self._reaping = threading.Lock()

    # -- the caller's side ------------------------------------------------

    def done(self):
        if self._pid is not None and not self._ended.is_set():
            self._reap(block=False)
        return self._ended.is_set()

    def wait(self, timeout=None):
        if self._pid is not None:
            self._reap(block=True, timeout=timeout)
        elif not self._ended.wait(timeout):
            raise TimeoutError(f"the background save of {self.path} is still running after {timeout} s")
        self._seen = True
        if self._error is not None:
            raise self._error
        return self._result

    @property
    def error(self):
        self.done()
        if self._ended.is_set():
            self._seen = True
        return self._error

    def cancel(self):
        if self.done():
            return False
        self._cancel.set()
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGTERM)  # the child aborts its writer and exits
            except ProcessLookupError:
                pass
            self._reap(block=True)
        else:
            self._ended.wait()
        return self._error is not None and isinstance(self._error, _errors.CancelledError)

    def __repr__(self):
        state = "running" if not self.done() else ("failed" if self._error is not None else "done")
        return f"<ckpt.SaveHandle {self.path!r} {self.stats['staging']} {state}>"

    # -- the end ----------------------------------------------------------

    def _finish(self, result=None, error=None):
        self._result, self._error = result, error
        self.stats["seconds"] = time.perf_counter() - self._started
        self._ended.set()

    def _reap(self, block, timeout=None):
        """The forked child's end: its report, then its exit status.  The
        report is read as it comes, before the exit is waited for: a report
        larger than the pipe's buffer (the paths of many shards, an
        incremental save's per-tensor stats) would otherwise leave the child
        blocked in its write and this process in waitpid, forever.  One
        caller at a time: a second one (done() from another thread) would
        find the child reaped already."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if block:
            got = self._reaping.acquire(timeout=-1 if timeout is None else timeout)
        else:
            got = self._reaping.acquire(blocking=False)
        if not got:
            if block:
                raise TimeoutError(f"the background save of {self.path} is still running after {timeout} s")
            return
        try:
            if not self._ended.is_set():
                self._reap_locked(block, timeout, deadline)  # the time spent on the lock counts
        finally:
            self._reaping.release()

    def _reap_locked(self, block, timeout, deadline):
        # poll, not select: select refuses descriptors numbered 1024 and up,
        # which a training process holding many files or sockets reaches
        waiter = select.poll()
        waiter.register(self._report_fd, select.POLLIN)
        while True:
            eof = self._drain_report()
            status = self._exit_status(wait=eof)  # after EOF the child is exiting: a blocking wait is short
            if status is not None:
                break
            if not block:
                return
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"the background save of {self.path} is still running after {timeout} s")
            # Woken by the report or its EOF; at most 0.1 s, for a child whose
            # pipe's write end a process forked meanwhile still holds.
            waiter.poll(100 if left is None else max(1, min(int(left * 1000), 100)))
        self._drain_report()  # what the child wrote before it exited, if its EOF was not seen yet
        os.close(self._report_fd)
        report = self._parse_report()
        if report is not None and report[0] == "ok":
            paths, incremental = report[1]
            if incremental is not None:
                self.stats["incremental"] = incremental
            self._finish(result=paths)
            return
        if report is not None and issubclass(report[1][0], KeyboardInterrupt):
            self._finish(error=_errors.CancelledError(f"the background save of {self.path} was cancelled "
                                                      f"({report[1][1][0] if report[1][1] else 'SIGTERM'}); "
                                                      f"nothing was committed"))
            return
        if report is not None:
            self._finish(error=_rebuild(report[1]))
            return
        how = ("left no exit status (SIGCHLD ignored, or reaped by another waitpid)" if status == -1
               else f"was killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exited with status {os.WEXITSTATUS(status)}")
        if self._cancel.is_set():
            self._finish(error=_errors.CancelledError(f"the background save of {self.path} was cancelled "
                                                      f"(process {self._pid} {how}); nothing was committed"))
            return
        self._finish(error=_errors.Error(f"the background save of {self.path} (process {self._pid}) {how} before "
                                         f"its commit; the previous checkpoint there is unchanged"))

    def _exit_status(self, wait):
        """The child's wait status once it has exited (blocking if `wait`),
        else None; -1 when it is gone without one (SIGCHLD set to SIG_IGN
        reaps children by itself)."""
        try:
            pid, status = os.waitpid(self._pid, 0 if wait else os.WNOHANG)
        except ChildProcessError:
            return -1
        return status if pid else None

    def _drain_report(self):
        """Reads what the child has written so far (the pipe does not
        block); True at EOF."""
        while True:
            try:
                b = os.read(self._report_fd, 1 << 16)
            except BlockingIOError:
                return False
            if not b:
                return True
            self._report.append(b)

    def _parse_report(self):
        try:
            return pickle.loads(b"".join(self._report)) if self._report else None
        except Exception:  # noqa: BLE001 - a child cut off mid-report: judged by its exit status
            return None


def _rebuild(e):
    """An exception from the child's report: its class and attributes."""
    cls, args, attrs = e
    try:
        err = cls.__new__(cls)
        err.args = args
        for k, v in attrs.items():
            setattr(err, k, v)
        return err
    except Exception:  # noqa: BLE001 - a class that cannot be rebuilt: its text is kept
        return _errors.Error(f"{cls.__name__}: {args[0] if args else ''}")


def _describe(e):
    attrs = {k: v for k, v in getattr(e, "__dict__", {}).items() if isinstance(v, (str, int, float, type(None)))}
    for k in ("status", "code", "path", "tensor", "offset", "errno", "strerror", "filename"):
        v = getattr(e, k, None)
        if isinstance(v, (str, int, float)):
            attrs[k] = v
    return (type(e), e.args, attrs)


# -- one at a time ----------------------------------------------------------

def settle_previous():
    """Waits for the previous background save; raises its error if nobody
    has seen it (wait(), .error) — the next save is where a full disk of the
    last one surfaces."""
    global _previous
    with _lock:
        h, _previous = _previous, None
    if h is None:
        return
    if h._pid is not None:
        h._reap(block=True)
    else:
        h._ended.wait()
    if h._error is not None and not h._seen and not h._cancel.is_set():
        h._seen = True
        raise h._error


def _wait_at_exit():
    h = _previous
    if h is not None and h._pid is not None:
        h._reap(block=True)


atexit.register(_wait_at_exit)


def start(tensors, path, *, staging, staging_bytes, base, **save_args):
    if staging not in _STAGINGS:
        raise ValueError(f"staging must be one of {', '.join(map(repr, _STAGINGS))}, not {staging!r}")
    if staging_bytes is not None and staging != "copy":
        raise ValueError("staging_bytes is the budget of staging='copy'")
    t0 = time.perf_counter()
    h = (_start_fork if staging == "fork" else _start_copy)(tensors, path, staging_bytes, base, save_args)
    return started(h, t0)


def started(h, t0):
    """Records `h` as the save the next one waits for; the caller was
    blocked since `t0`."""
    global _previous
    h.stats["stall_seconds"] = time.perf_counter() - t0
    with _lock:
        _previous = h
    return h


# -- staging="copy" ---------------------------------------------------------

class _Staging:
    """The host buffers of staging="copy", kept from one save to the next:
    a training loop saves the same tensors each time, and copying into
    memory already touched runs at memcpy's speed, where fresh memory costs
    a page fault per 4 KiB (the first touch).  A buffer is reused for a
    tensor of the same framework, dtype and shape; the ones the next save
    does not reuse are released then."""

    def __init__(self):
        self._free = {}  # key -> [buffer]
        self._lock = threading.Lock()

    @staticmethod
    def _key(fw, t):
        return (fw.name, str(t.dtype), tuple(t.shape))

    def take(self, fw, t):
        with self._lock:
            bufs = self._free.get(self._key(fw, t))
            return bufs.pop() if bufs else None

    def give_back(self, buffers):
        """`buffers`: (framework, buffer) of the save that just ended."""
        with self._lock:
            self._free = {}  # what the last save did not reuse goes
            for fw, b in buffers:
                self._free.setdefault(self._key(fw, b), []).append(b)


_staging = _Staging()


def _snapshot(fw, t):
    """A contiguous host copy of `t` that the caller's later writes to `t`
    cannot reach, in a buffer the last save used when one fits."""
    buf = _staging.take(fw, t)
    if fw is _frameworks.Torch:
        t = t.detach()
        if buf is not None:
            return buf.copy_(t)
        if t.device.type != "cpu":
            return t.to("cpu").contiguous()
        import torch
        return t.clone(memory_format=torch.contiguous_format)
    import numpy as np
    if buf is not None:
        np.copyto(buf, t)
        return buf
    return np.array(t, copy=True, order="C")


def _start_copy(tensors, path, staging_bytes, base, save_args):
    from . import _api
    w, entries, bar = _api._save_open(tensors, path, **save_args)
    if base is not None:  # unchanged tensors cloned from the base now: only the others are staged
        try:
            # the changed tensors are staged with the rest, not written on the caller's thread
            entries, incremental = _api._clone_unchanged(w, entries, base, path, write_changed=False)
        except BaseException:
            w.abort()
            raise
    total = sum(e[3] for e in entries)
    progress = {"done": 0}

    def write(part, cancelled=None):
        progress["done"] = _api._save_write(w, part, bar, cancelled=cancelled, done=progress["done"], total=total)

    h = start_staged(path, entries, staging_bytes, write, commit=w.commit, abort=lambda why: w.abort())
    if base is not None:
        h.stats["incremental"] = _api._written_stats(incremental, entries)
    return h


def start_staged(path, entries, staging_bytes, write, commit, abort):
    """staging="copy" over a begun writer: `entries` are (index, framework,
    tensor, nbytes); those that fit `staging_bytes` are copied and written
    by a thread, the others by write() before this returns.  commit()
    gives the result; abort(why) cleans up after a failure."""
    from . import _api
    budget = None if staging_bytes is None else _api._parse_size(staging_bytes)
    h = SaveHandle(path, "copy")
    try:
        staged, direct = [], []
        for index, fw, t, nbytes, *rest in entries:
            if budget is None or h.stats["staged_bytes"] + nbytes <= budget:
                staged.append((index, fw, _snapshot(fw, t), nbytes, *rest))
                h.stats["staged_bytes"] += nbytes
            else:
                direct.append((index, fw, t, nbytes, *rest))
        write(direct)  # what does not fit: written now, while the caller waits
        h.stats["written_before_return"] = sum(e[3] for e in direct)
    except BaseException as e:
        abort(f"{type(e).__name__}: {e}")
        raise

    def run():
        try:
            write(staged, cancelled=h._cancel.is_set)
            result = commit()
        except KeyboardInterrupt as e:
            abort(f"cancelled: {e}")
            h._finish(error=_errors.CancelledError(f"the background save of {h.path} was cancelled ({e}); "
                                                   f"nothing was committed"))
        except BaseException as e:  # noqa: BLE001 - handed to wait() / the next save
            abort(f"{type(e).__name__}: {e}")
            h._finish(error=e)
        else:
            abort("")  # after a commit: only releases the writer
            h._finish(result=result)
        finally:
            _staging.give_back([(e[1], e[2]) for e in staged])  # the next save copies into these
            staged.clear()

    # Not a daemon: an interpreter that exits waits for the save to commit.
    h._thread = threading.Thread(target=run, name=f"ckpt-save {h.path}")
    h._thread.start()
    return h


# -- staging="fork" ---------------------------------------------------------

def check_forkable(flat):
    """staging="fork" writes CPU memory on Linux: refuses anything else."""
    if not sys.platform.startswith("linux"):
        raise ValueError("staging='fork' needs Linux (fork with copy-on-write); use staging='copy'")
    for name, t in flat.items():
        fw = _frameworks.of(t)
        if fw is not None and not fw.on_cpu(t):
            raise ValueError(f"staging='fork' writes CPU memory, and {name!r} is not on the CPU: "
                             f"use staging='copy'")


def _start_fork(tensors, path, staging_bytes, base, save_args):
    from . import _api
    check_forkable(_api._tree.flatten(tensors.state_dict() if _api._is_module(tensors) else tensors))
    return fork_save(path, lambda: _api.save(tensors, path, base=base, return_stats=True, **save_args))


def fork_save(path, body, die_with_parent=False):
    """A handle on a forked child that runs body() — a save from its
    copy-on-write view — reports (result, incremental stats) or its
    exception through a pipe, and exits.  die_with_parent: the child is
    killed when this process dies (a collective save's rank: its peers
    then see it leave, and nothing is committed)."""
    h = SaveHandle(path, "fork")
    r, wfd = os.pipe()
    # SIGTERM (cancel) stays blocked in the child until its handler is set,
    # so a cancel right after the fork still aborts the writer cleanly.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: the save from the copy-on-write view, then _exit
        code = 1
        try:
            os.close(r)
            if die_with_parent:
                _die_with(parent)
            signal.signal(signal.SIGTERM, _cancel_in_child)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            try:
                report = ("ok", body())
                code = 0
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                report = ("error", _describe(e))
            try:
                data = pickle.dumps(report)
            except Exception:  # noqa: BLE001
                data = pickle.dumps(("error", (RuntimeError, (str(report[1]),), {})))
            view = memoryview(data)
            while view:
                view = view[os.write(wfd, view):]
        finally:
            os._exit(code)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    os.close(wfd)
    os.set_blocking(r, False)  # read as it comes: see SaveHandle._reap
    h._pid, h._report_fd = pid, r
    h.stats["pid"] = pid
    return h


def _die_with(parent):
    """SIGKILL when the parent dies (prctl PR_SET_PDEATHSIG); a parent gone
    already: exit now."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _cancel_in_child(signum, frame):
    raise KeyboardInterrupt("cancelled by SaveHandle.cancel()")
