"""ckpt.distributed: many processes loading or saving one checkpoint, each
with only its part, coordinated through torch.distributed.

    import ckpt.distributed as cd
    # tensor-parallel: rank r of the group keeps part r of every *proj.weight
    sd = cd.load("model/", {"tp_select": "*proj.weight", "dtype": "bfloat16"}, group=tp_group)
    # DTensors for a DeviceMesh
    sd = cd.load("model/", mesh=mesh, placements=[Shard(0)])
    # each rank saves its shards; one Hugging Face checkpoint, committed once
    cd.save(model.state_dict(), "out/", group=None, max_shard_size="5GB")

Headers are parsed once: rank 0 opens the checkpoint and broadcasts its
catalog; the others build theirs from it.  Each rank reads only its slices;
tensors every rank loads whole are read once — a disjoint share by each
rank — and broadcast (replicated="read" makes every rank read them).
Saves write every rank's bytes straight into the files rank 0 laid out,
and rank 0 commits after one agreed status.  Every collective step waits at
most `timeout` seconds: a rank that dies or hangs makes the others raise
ckpt.Error naming it (status CKPT_E_TIMEOUT, detail CKPT_D_PEER_TIMEOUT; or CKPT_E_PEER,
CKPT_D_PEER_FAILED), and
nothing is published.

The engine is libckpt's (ckpt_load_collective, the shard writer); this
module only adapts torch.distributed to its communicator interface
(broadcast, allgather, barrier, agree) and tensors to bytes.  Works with
any backend that takes CPU tensors (gloo); with NCCL the bytes are staged
through the current CUDA device.
"""
import datetime
import json
import math
import os
import sys
import time

from . import _api, _ckpt, _dtypes, _frameworks, _progress

__all__ = ["load", "save", "convert", "TorchComm", "NoneComm"]

# Status codes (include/ckpt.h).
_TIMEOUT, _COMM, _CANCELLED = (_ckpt.status_names()[n] for n in ("CKPT_E_TIMEOUT", "CKPT_E_PEER", "CKPT_E_CANCELLED"))
_DEFAULT_TIMEOUT = 1800.0
_CHUNK = 64 << 20


class CommError(RuntimeError):
    """A communicator operation failed: `ckpt_status` is the status the
    library reports, `rank` the rank blamed (-1: unknown)."""

    def __init__(self, message, status=_COMM, rank=-1):
        super().__init__(message)
        self.ckpt_status = status
        self.rank = rank


def _status_of(exc):
    text = str(exc).lower()
    return _TIMEOUT if "timed out" in text or "timeout" in text else _COMM


class _StoreVotes:
    """Votes through a torch.distributed store (self.store, self.prefix,
    self.rank, self.size, self._votes), so that the rank that did not vote
    is known by name."""

    def agree(self, status, rank, message, timeout):
        """Votes through the store: every rank sets its vote, rank 0 waits for
        them (naming the first missing one at the deadline) and sets the
        decision, which every rank waits for."""
        base = f"{self.prefix}/vote{self._votes}"
        self._votes += 1
        store = self.store
        deadline = time.monotonic() + timeout

        def left(extra=0.0):
            return datetime.timedelta(seconds=max(deadline + extra - time.monotonic(), 0.001))

        try:
            store.set(f"{base}/{self.rank}", json.dumps([status, rank, message]))
        except Exception as e:  # noqa: BLE001
            raise CommError(f"the torch.distributed store is unreachable (rank 0 died?): {e}", _TIMEOUT, 0) from None
        if self.rank == 0:
            decision = [0, -1, ""]
            seen = []
            for r in range(self.size):
                key = f"{base}/{r}"
                try:
                    store.wait([key], left())
                except Exception:  # noqa: BLE001 - the deadline passed
                    decision = [_TIMEOUT, r, f"rank {r} did not vote within {timeout:g} s"]
                    break
                seen.append(key)
                vote = json.loads(store.get(key))
                if vote[0] != 0 and decision[0] == 0:
                    decision = [vote[0], r, vote[2]]
            store.set(f"{base}/decision", json.dumps(decision))
            for key in seen:
                try:
                    store.delete_key(key)
                except Exception:  # noqa: BLE001 - housekeeping only
                    pass
        try:
            # Rank 0 may enter the vote up to one timeout after this rank,
            # then wait one timeout for a missing voter before it decides:
            # waiting twice the timeout lets its decision, naming the rank
            # that did not vote, arrive (as mpi/ckpt_mpi.c does).
            store.wait([f"{base}/decision"], left(timeout))
            decision = json.loads(store.get(f"{base}/decision"))
        except Exception as e:  # noqa: BLE001
            raise CommError(f"rank 0 did not decide the vote within {2 * timeout:g} s "
                            f"(it died or hangs, or its store is gone): {e}", _TIMEOUT, 0) from None
        if decision[0] == _TIMEOUT and decision[1] >= 0:
            raise CommError(decision[2], _TIMEOUT, decision[1])
        return tuple(decision)



class TorchComm(_StoreVotes):
    """libckpt's communicator over a torch.distributed process group:
    broadcast and allgather as the group's collectives (async, waited with
    the step's timeout), and votes through the group's store, so that the
    rank that did not vote is known by name."""

    def __init__(self, group=None):
        import torch
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("ckpt.distributed needs torch.distributed initialised (init_process_group) or "
                               "a group")
        self.torch, self.dist, self.group = torch, dist, group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        if self.rank < 0:
            raise ValueError("this process is not a member of the group")
        backend = str(dist.get_backend(group)).lower()
        cpu = any(b in backend for b in ("gloo", "mpi", "cpu:"))
        self.device = torch.device("cpu") if cpu else torch.device("cuda", torch.cuda.current_device())
        self._global = [dist.get_global_rank(group, r) if group is not None else r for r in range(self.size)]
        self.store = dist.distributed_c10d._get_default_store()
        name = "world" if group is None else getattr(group, "group_name", None) or "-".join(map(str, self._global))
        # Each collective ckpt call makes one TorchComm on every rank, in the
        # same order: a per-rank counter in the store names its keys alike.
        n = self.store.add(f"ckpt/{name}/instances/{self.rank}", 1)
        self.prefix = f"ckpt/{name}/{n}"
        self._votes = 0
        self.comm = _ckpt.Comm(self, self.rank, self.size)

    # -- collectives -------------------------------------------------------

    def _wait(self, work, timeout, what):
        try:
            work.wait(timeout=datetime.timedelta(seconds=max(timeout, 0.001)))
        except Exception as e:  # noqa: BLE001 - every failure becomes the step's
            raise CommError(f"torch.distributed {what} failed on rank {self.rank}: {e}", _status_of(e)) from None

    def _on_device(self, t):
        return t if self.device.type == "cpu" else t.to(self.device)

    def broadcast(self, buf, root, timeout):
        if not len(buf):
            return
        torch = self.torch
        t = torch.frombuffer(buf, dtype=torch.uint8)
        d = self._on_device(t)
        work = self.dist.broadcast(d, src=self._global[root], group=self.group, async_op=True)
        self._wait(work, timeout, "broadcast")
        if d is not t:
            t.copy_(d.cpu())

    def allgather(self, buf, block, timeout):
        torch = self.torch
        out = torch.frombuffer(buf, dtype=torch.uint8) if len(buf) else torch.empty(0, dtype=torch.uint8)
        inp = out[self.rank * block:(self.rank + 1) * block].clone()
        d_out, d_in = self._on_device(out), self._on_device(inp)
        gather = getattr(self.dist, "all_gather_single", None) or self.dist.all_gather_into_tensor
        work = gather(d_out, d_in, group=self.group, async_op=True)
        self._wait(work, timeout, "allgather")
        if d_out is not out:
            out.copy_(d_out.cpu())

    def barrier(self, timeout):
        self._wait(self.dist.barrier(group=self.group, async_op=True), timeout, "barrier")

class StoreComm(_StoreVotes):
    """libckpt's communicator over a torch.distributed store alone: every
    collective is keys of the store (broadcast: the root's bytes; allgather:
    each rank's block; barrier: a counter), named by a prefix all ranks
    share and the call's number.  What a forked child of a rank talks on:
    it cannot use the parent's process group (its gloo threads and sockets
    belong to the parent), so it talks over a connection of its own to the
    same store (Store.clone).  A collective save moves only declarations,
    the layout and votes between ranks, which a store carries."""

    def __init__(self, store, rank, size, prefix):
        self.store, self.rank, self.size, self.prefix = store, rank, size, prefix
        self._votes = 0
        self._calls = 0
        self._keys = []
        self.comm = _ckpt.Comm(self, rank, size)

    def _key(self):
        self._calls += 1
        return f"{self.prefix}/c{self._calls}"

    def _wait_keys(self, keys, timeout, what, ranks):
        try:
            self.store.wait(keys, datetime.timedelta(seconds=max(timeout, 0.001)))
        except Exception as e:  # noqa: BLE001 - the deadline passed, or the store is gone
            try:
                missing = [r for k, r in zip(keys, ranks) if not self.store.check([k])]
            except Exception as gone:  # noqa: BLE001 - who was missing is unknown: no rank is named as late
                raise CommError(f"the store {what} on rank {self.rank} failed: the torch.distributed store is "
                                f"unreachable (rank 0, its host, died or left?): {gone}", _TIMEOUT, 0) from None
            who = missing[0] if missing else -1
            raise CommError(f"the store {what} on rank {self.rank} failed" +
                            (f": rank {who} did not take part within {timeout:g} s" if who >= 0 else f": {e}"),
                            _status_of(e) if who < 0 else _TIMEOUT, who) from None

    def broadcast(self, buf, root, timeout):
        key = self._key()
        if not len(buf):
            return
        if self.rank == root:
            self.store.set(key, bytes(buf))
            self._keys.append(key)
            return
        self._wait_keys([key], timeout, "broadcast", [root])
        memoryview(buf).cast("B")[:] = self.store.get(key)

    def allgather(self, buf, block, timeout):
        key = self._key()
        view = memoryview(buf).cast("B")
        mine = f"{key}/{self.rank}"
        self.store.set(mine, bytes(view[self.rank * block:(self.rank + 1) * block]))
        self._keys.append(mine)
        keys = [f"{key}/{r}" for r in range(self.size)]
        self._wait_keys(keys, timeout, "allgather", list(range(self.size)))
        for r, k in enumerate(keys):
            if r != self.rank:
                view[r * block:(r + 1) * block] = self.store.get(k)

    def barrier(self, timeout):
        key = self._key()
        if self.store.add(key, 1) == self.size:
            self.store.set(f"{key}/all", b"1")
            self._keys += [key, f"{key}/all"]
        self._wait_keys([f"{key}/all"], timeout, "barrier", [-1])

    def close(self):
        """Once every rank is done: the keys this one set, removed by the
        last rank to finish (a rank that died leaves them)."""
        done = f"{self.prefix}/done"
        try:
            self.store.set(f"{self.prefix}/keys/{self.rank}", json.dumps(self._keys))
            if self.store.add(done, 1) != self.size:
                return
            for r in range(self.size):
                for k in json.loads(self.store.get(f"{self.prefix}/keys/{r}")) + [f"{self.prefix}/keys/{r}"]:
                    self.store.delete_key(k)
            self.store.delete_key(done)
        except Exception:  # noqa: BLE001 - housekeeping only
            pass


class NoneComm:
    """The "none" communicator: ranks exchange nothing; each plans from the
    headers and its rank alone (given, or from RANK/WORLD_SIZE,
    OMPI_COMM_WORLD_*, PMI_*, SLURM_*).  Loads only: every rank parses the
    headers and reads its slices and its replicated tensors itself."""

    def __init__(self, rank=None, size=None):
        if (rank is None) != (size is None):
            raise ValueError("rank and size go together")
        self.comm = _ckpt.Comm(None, -1, 0) if rank is None else _ckpt.Comm(None, int(rank), int(size))
        self.rank, self.size = self.comm.rank, self.comm.nranks


def _torch_initialized():
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and dist.is_initialized()


def _comm(group, mesh, rank=None, size=None):
    if rank is not None or size is not None:
        if group is not None or mesh is not None:
            raise ValueError("rank and size are for loads without torch.distributed: not with a group or mesh")
        return NoneComm(rank, size)
    if group is None and mesh is None and not _torch_initialized():
        return NoneComm()
    if mesh is not None and group is None:
        group = mesh.get_group() if mesh.ndim == 1 else None
    return TorchComm(group)


# ---------------------------------------------------------------------------
# Loading


def _exact(name):
    """A plan pattern matching exactly `name` (glob characters escaped)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in name)


def _slices_from(spec, shape, name):
    """[(dim, start, stop)] from a slice function's answer: a tuple of
    slice objects / (start, stop) pairs / None per axis, or {dim: (start,
    stop)}."""
    out = []
    items = spec.items() if isinstance(spec, dict) else enumerate(spec)
    for d, s in items:
        if s is None:
            continue
        if isinstance(s, slice):
            start, stop, step = s.indices(shape[d])
            if step != 1:
                raise ValueError(f"{name}: a rank's part is one range per axis, and a slice with step {step} is not a "
                                 "range: give the range, then index the loaded tensor")
        else:
            start, stop = s
        if (start, stop) != (0, shape[d]):
            out.append((d, int(start), int(stop)))
    return out


def _local_box(shape, mesh, placements, name):
    """(start, count) of this rank's block of a tensor placed on a mesh, as
    DTensor computes it."""
    from torch.distributed.tensor import Partial
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    if any(isinstance(p, Partial) for p in placements):
        raise ValueError(f"{name}: Partial placements need a reduction, not a load")
    local, offset = compute_local_shape_and_global_offset(tuple(shape), mesh, placements)
    return list(offset), list(local)


def _fit_placements(placements, ndim):
    """Placements for a tensor of `ndim` axes: a Shard of an axis it lacks
    becomes Replicate."""
    from torch.distributed.tensor import Replicate, Shard
    return [Replicate() if isinstance(p, Shard) and not -ndim <= p.dim < ndim else p for p in placements]


def load(path, plan=None, *, group=None, mesh=None, placements=None, replicated="broadcast", framework="pt",
         device="cpu", timeout=_DEFAULT_TIMEOUT, threads=0, io="auto", progress=False, return_stats=False,
         rank=None, size=None, **rules):
    """Loads this rank's part of a checkpoint; every rank of `group` (or of
    `mesh`) calls it with the same arguments.

    `plan` (or keyword rules) says what each rank needs:
      - rules as ckpt.load takes them (select, exclude, rename, dtype,
        slices, tp_select, tp_dim, ...): with tp_select or tp_dim (or
        tp=True), rank r of the group keeps part r of group-size parts of
        each matching tensor, cut as torch.tensor_split;
      - a function fn(name, shape, rank, size) giving each tensor's slice
        for a rank (names and shapes as in the checkpoint): None for the
        whole tensor, False to skip it, or per axis a slice / (start,
        stop) / None, as a tuple or a {dim: ...} dict;
      - mesh and placements (a list of Placements, or a function of (name,
        shape) giving one): each tensor becomes a DTensor of that mesh whose
        local block this rank read (a Shard of an axis a tensor lacks
        becomes Replicate).
    Tensors every rank loads whole are read once and broadcast
    (replicated="read": every rank reads them).  Returns {name: tensor} —
    and this rank's statistics (bytes read, needed, received, ...) with
    return_stats=True.

    Without torch.distributed (not initialised, no group or mesh) the ranks
    exchange nothing: `rank` and `size`, or RANK/WORLD_SIZE,
    OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE or SLURM_PROCID/NTASKS, say
    which part this process loads; each parses the headers and reads its
    slices and the replicated tensors itself."""
    _api.flags("ckpt.distributed.load", return_stats=return_stats, **{k: rules[k] for k in ("tp",) if k in rules})
    fw = _frameworks.get(framework)
    comm = _comm(group, mesh, rank, size)
    catalog = _ckpt.open_collective(os.fspath(path), comm.comm, timeout=timeout, io=_api._io(io))
    rows = catalog.tensors()
    fn = plan if callable(plan) else None
    if isinstance(plan, dict):
        rules = {**plan, **rules}
    elif plan is not None and not callable(plan):
        raise TypeError("plan must be a dict of rules, a function or None")
    if mesh is not None and (fn or any(k in rules for k in ("tp", "tp_select", "tp_dim", "transpose", "layout"))):
        raise ValueError("with a mesh, placements say how tensors are cut: no tp rules, slice functions, "
                         "transposes or layouts")
    tp = rules.pop("tp", False) or "tp_select" in rules or "tp_dim" in rules
    if "tp_rank" in rules or "tp_size" in rules:
        raise ValueError("tp_rank and tp_size come from the group")
    if tp:
        rules.update(tp_rank=comm.rank, tp_size=comm.size)
    rules.setdefault("tp_dim", 0)
    p = _api._build_plan(catalog, rows, **rules, where="ckpt.distributed.load")
    placed = {}
    if fn or mesh is not None:
        for name, src, dt, shape, nbytes, transform in p.items():
            r = rows[src]
            src_name, src_shape = r[0], tuple(r[2])
            if fn is not None:
                spec = fn(src_name, src_shape, comm.rank, comm.size)
                if spec is False:
                    p.exclude(_exact(src_name))
                    continue
                cuts = [] if spec is None else _slices_from(spec, src_shape, src_name)
            else:
                pl = placements(name, src_shape) if callable(placements) else placements
                pl = _fit_placements(pl if pl is not None else [], len(src_shape))
                start, count = _local_box(src_shape, mesh, pl, name)
                cuts = [(d, start[d], start[d] + count[d]) for d in range(len(src_shape))
                        if (start[d], count[d]) != (0, src_shape[d])]
                placed[name] = (pl, src_shape)
            for d, a, b in cuts:
                p.slice(_exact(src_name), d, a, b)
    bar = _progress.choose(progress, "load") if comm.rank == 0 else None
    stats = _ckpt.load_collective(p, comm.comm, threads=threads, replicated=replicated,
                                  timeout=timeout, progress=bar)
    out = {}
    for i, (name, src, dt, shape, nbytes, transform) in enumerate(p.items()):
        t = fw.from_buffer(p.data(i), dt, shape, 0, name)
        out[name] = fw.to_device(t, device)
    if mesh is not None:
        from torch.distributed.tensor import DTensor
        for name, (pl, gshape) in placed.items():
            stride = tuple(math.prod(gshape[d + 1:]) for d in range(len(gshape)))
            local = out[name]
            if local.device != mesh.device_type and mesh.device_type != "cpu":
                local = local.to(mesh.device_type)
            out[name] = DTensor.from_local(local, mesh, pl, run_check=False, shape=_torch_size(gshape),
                                           stride=stride)
    return (out, stats) if return_stats else out


def _torch_size(shape):
    import torch
    return torch.Size(shape)


# ---------------------------------------------------------------------------
# Saving


def _part(name, t, shards):
    """(local tensor, global shape, start, count) of one state-dict entry."""
    # A DTensor exists only once torch.distributed.tensor is imported: not
    # importing it for plain tensors saves each rank seconds (it pulls in
    # sympy; a profile of 4 ranks on 2 cores found it the largest cost of a
    # 0.5 GB save, above the writes).
    dtensors = sys.modules.get("torch.distributed.tensor")
    DTensor, Partial = (dtensors.DTensor, dtensors.Partial) if dtensors is not None else ((), ())
    if DTensor and isinstance(t, DTensor):
        if any(isinstance(p, Partial) for p in t.placements):
            raise ValueError(f"{name}: Partial placements must be reduced before saving")
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
        gshape = tuple(t.shape)
        local_shape, offset = compute_local_shape_and_global_offset(gshape, t.device_mesh, t.placements)
        local = t.to_local()
        if tuple(local.shape) != tuple(local_shape):
            raise ValueError(f"{name}: the local shard's shape {tuple(local.shape)} is not the placement's "
                             f"{tuple(local_shape)}")
        return local, gshape, list(offset), list(local_shape)
    if _frameworks.of(t) is None:
        raise TypeError(f"{name!r} is a {type(t).__name__}: ckpt.distributed.save takes torch tensors (plain or "
                        "DTensors) and numpy arrays")
    if shards and name in shards:
        gshape, offset = shards[name]
        return t, tuple(gshape), list(offset), list(t.shape)
    shape = tuple(t.shape)
    return t, shape, [0] * len(shape), list(shape)


def _ties(flat):
    """Names whose tensors are the very same (tied weights): {removed: kept},
    kept being the first of each group by name, as huggingface_hub keeps."""
    groups = {}
    for name, (local, gshape, start, count) in flat.items():
        if not _frameworks.Torch.is_tensor(local) or local.numel() == 0:
            continue
        key = (local.device.type, local.untyped_storage().data_ptr(), local.storage_offset(), tuple(local.shape),
               tuple(local.stride()), local.dtype, gshape, tuple(start))
        groups.setdefault(key, []).append(name)
    out = {}
    for names in groups.values():
        if len(names) > 1:
            kept = sorted(names)[0]
            out.update({n: kept for n in names if n != kept})
    return out


def _write_part(w, index, fw, t):
    """The part's bytes in row order: in place when it is a contiguous CPU
    tensor, else a few rows (about 64 MiB) at a time."""
    if fw.on_cpu(t) and fw.is_contiguous(t):
        w.write(index, 0, fw.raw(t))
        return
    _, shape, nbytes = fw.describe(t)
    rows = shape[0] if shape else 1
    if not shape or rows <= 1:
        part = fw.contiguous(t.to("cpu") if fw is _frameworks.Torch else t)
        w.write(index, 0, fw.raw(part))
        return
    row_bytes = nbytes // rows
    step = max(1, _CHUNK // max(1, row_bytes))
    for i in range(0, rows, step):
        part = t[i:i + step]
        part = fw.contiguous(part.to("cpu") if fw is _frameworks.Torch else part)
        w.write(index, i * row_bytes, fw.raw(part))


def save(state_dict, out_dir, group=None, *, shards=None, max_shard_size="5GB", metadata=None, prefix=None,
         overwrite=False, timeout=_DEFAULT_TIMEOUT, no_sync=False, return_stats=False, background=False,
         staging="copy", staging_bytes=None):
    """Saves a state dict that many ranks hold in parts as one Hugging Face
    checkpoint — the files, headers and index that huggingface_hub's
    save_torch_state_dict writes for the whole state dict — every rank
    writing its own bytes into place.  Every rank of `group` calls it.

    Entries are DTensors (each rank its local shard), tensors described in
    `shards` as {name: (global_shape, offsets)} (this rank's block starting
    at `offsets`), or plain tensors that a rank holds whole (replicated:
    their rows are shared among the ranks holding them).  Every tensor's
    blocks must tile it.  Tensors tied to each other are saved once, the
    others recorded in the metadata as huggingface_hub does.  Metadata is
    rank 0's.  Nothing appears under `out_dir` until every rank has written
    all its bytes; then rank 0 commits.  An existing checkpoint is replaced
    only with overwrite=True, as by every other save (else nothing is
    written: rank 0 raises ExistsError, the others an error naming it).  Returns the statistics of
    this rank with return_stats=True.

    background=True returns a ckpt.SaveHandle on every rank, as
    ckpt.save(background=True) does with staging="copy": the output is
    declared and created, and each rank's part copied into host memory (at
    most staging_bytes; the rest written before the call returns), while
    every rank calls; a thread per rank then writes the copies and votes,
    and rank 0 commits once every rank has written all its bytes.  The save
    talks over a gloo group of its own (made once per group, by every
    member, on the first background save), so the training's collectives on
    `group` cannot interleave with it.  wait() returns the statistics with
    return_stats=True.

    staging="fork" (CPU tensors, Linux): every rank forks a child that makes
    the whole save — declarations, its bytes, the vote, rank 0's commit —
    from its copy-on-write view, over a connection of its own to the group's
    store (a forked child cannot use its parent's process group); the call
    blocks only for the fork.  A child dies with its rank: a child or a rank
    killed mid-save makes the others' wait() fail naming it, and nothing is
    committed."""
    _api.flags("ckpt.distributed.save", overwrite=overwrite, no_sync=no_sync, return_stats=return_stats,
               background=background)
    from . import _background
    _background.settle_previous()
    args = (shards, max_shard_size, metadata, prefix, overwrite, timeout, no_sync)
    if not background:
        return _save_now(state_dict, out_dir, TorchComm(group), args, return_stats)
    if staging == "fork":
        return _save_forked(state_dict, out_dir, group, args, return_stats, staging_bytes)
    if staging != "copy":
        raise ValueError(f"staging must be 'copy' or 'fork', not {staging!r}")
    t0 = time.perf_counter()
    w, entries = _save_open(state_dict, out_dir, TorchComm(_save_group(group)), *args)

    def write(part, cancelled=None):
        for index, fw, t, _ in part:
            if cancelled is not None and cancelled():
                raise KeyboardInterrupt("save cancelled")
            _write_part(w, index, fw, t)

    def commit():
        w.commit()
        return w.stats() if return_stats else None

    def abort(why):
        if why:
            w.abort(why)
        w.close()

    return _background.started(
        _background.start_staged(out_dir, entries, staging_bytes, write, commit=commit, abort=abort), t0)


def _save_now(state_dict, out_dir, comm, args, return_stats):
    """The save, start to commit, over `comm`: this rank's statistics with
    return_stats."""
    w, entries = _save_open(state_dict, out_dir, comm, *args)
    try:
        try:
            for index, fw, t, _ in entries:
                _write_part(w, index, fw, t)
        except BaseException as e:
            w.abort(f"{type(e).__name__}: {e}")
            raise
        w.commit()
        return w.stats() if return_stats else None
    finally:
        w.close()


def _save_forked(state_dict, out_dir, group, args, return_stats, staging_bytes):
    """staging="fork": on every rank a forked child makes the whole save
    from its copy-on-write view — declarations, its bytes, the vote, rank
    0's commit — over a StoreComm of its own (a fresh connection to the
    group's store, keys under a prefix every rank takes from the same
    per-rank counter).  The parent's process group is never used by a child.
    A child dies with its rank (PR_SET_PDEATHSIG): a rank killed mid-save
    then misses the vote, and nothing is committed."""
    from . import _background
    if staging_bytes is not None:
        raise ValueError("staging_bytes is the budget of staging='copy'")
    sd = state_dict.state_dict() if _api._is_module(state_dict) else state_dict
    _background.check_forkable({n: t.to_local() if hasattr(t, "to_local") else t for n, t in sd.items()})
    t0 = time.perf_counter()
    parent = TorchComm(group)  # rank, size, the store, and a prefix the same on every rank
    store, rank, size, prefix = parent.store, parent.rank, parent.size, f"{parent.prefix}/fork"

    def child():
        comm = StoreComm(store.clone(), rank, size, prefix)
        try:
            return _save_now(sd, out_dir, comm, args, return_stats), None
        finally:
            comm.close()

    return _background.started(_background.fork_save(out_dir, child, die_with_parent=True), t0)


_SAVE_GROUPS = {}


def _save_group(group):
    """The gloo group background saves over `group` talk on: made once, by
    every member (local synchronization: non-members take no part)."""
    import torch.distributed as dist
    key = "world" if group is None else id(group)
    if key not in _SAVE_GROUPS:
        ranks = None if group is None else dist.get_process_group_ranks(group)
        _SAVE_GROUPS[key] = dist.new_group(ranks=ranks, backend="gloo", use_local_synchronization=True)
    return _SAVE_GROUPS[key]


def _save_open(state_dict, out_dir, comm, shards, max_shard_size, metadata, prefix, overwrite, timeout, no_sync):
    """save's first half, on every rank, over `comm` (a TorchComm or a
    StoreComm): the writer declared, begun and shared, and this rank's
    entries (index, framework, part, nbytes) in the order to write them."""
    if _api._is_module(state_dict):
        state_dict = state_dict.state_dict()
    if not isinstance(state_dict, dict) or not all(isinstance(k, str) for k in state_dict):
        raise TypeError("ckpt.distributed.save takes a flat dict of str to tensors (or a module)")
    limit = _api._parse_size(max_shard_size)
    # `out_dir` as ckpt.destination says: a directory ("model" shards), or
    # a "x.safetensors" file and its parts.
    w = _ckpt.ShardWriter(os.fspath(out_dir), comm.comm, max_shard_size=limit or (1 << 62), overwrite=overwrite,
                          no_sync=no_sync, timeout=timeout, **({"prefix": prefix} if prefix is not None else {}))
    try:
        try:
            flat = {name: _part(name, t, shards) for name, t in state_dict.items()}
            ties = _ties(flat)
            entries = []
            torch_seen = False
            for name, (local, gshape, start, count) in flat.items():
                if name in ties:
                    continue
                fw = _frameworks.of(local)
                if fw is None:
                    raise TypeError(f"{name!r} is a {type(local).__name__}: save takes torch tensors and numpy arrays")
                torch_seen |= fw is _frameworks.Torch
                dt, _, _ = fw.describe(local)
                per = _dtypes.PACKED.get(dt)
                if per and gshape:
                    gshape = gshape[:-1] + (gshape[-1] * per,)
                    count = count[:-1] + [count[-1] * per]
                entries.append((w.add(name, dt, list(gshape), start, count), fw, local, fw.describe(local)[2]))
            if torch_seen:
                w.set_metadata("format", "pt")
            for removed, kept in ties.items():
                w.set_metadata(removed, kept, True)
            for k, v in (metadata or {}).items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise TypeError("metadata must map str to str")
                w.set_metadata(k, v, True)
        except BaseException as e:
            w.abort(f"{type(e).__name__}: {e}")  # the others fail at begin, naming this rank
            raise
        w.begin()
        # In the order the writer gives this rank (ckpt_shard_writer_order:
        # the ranks of a tensor-parallel save begin in different files).
        at = {e[0]: e for e in entries}
        return w, [at[i] for i in w.order(len(entries))]
    except BaseException:
        w.close()
        raise


def convert(src, dst, plan=None, *, group=None, max_shard_size=None, prefix=None, overwrite=False,
            timeout=_DEFAULT_TIMEOUT, no_sync=False, return_stats=False, **rules):
    """ckpt.convert split across the ranks of `group`: every rank converts
    its range of the output's bytes, rank 0 commits.  The same rules as
    ckpt.convert (select, dtype, slices, rename, ...), the same on every
    rank; the output equals ckpt.convert's."""
    _api.flags("ckpt.distributed.convert", overwrite=overwrite, no_sync=no_sync, return_stats=return_stats)
    comm = TorchComm(group)
    catalog = _ckpt.open_collective(os.fspath(src), comm.comm, timeout=timeout)
    if isinstance(plan, dict):
        rules = {**plan, **rules}
    elif plan is not None:
        raise TypeError("plan must be a dict of rules or None")
    p = _api._build_plan(catalog, catalog.tensors(), **rules, where="ckpt.distributed.convert")
    kw = dict(max_shard_size=_api._parse_size(max_shard_size), overwrite=overwrite, no_sync=no_sync, timeout=timeout)
    if prefix is not None:
        kw["prefix"] = prefix
    stats = _ckpt.convert_collective(p, os.fspath(dst), comm.comm, **kw)
    return stats if return_stats else None

