"""What each rank runs in test_distributed.py (a module of its own so that
spawned processes can import it).  A rank writes its findings to
<tmp>/result-<rank>.json; the test reads them."""
import datetime
import json
import os
import signal
import sys
import time
import traceback

import torch
import torch.distributed as dist


def status_of(e):
    """"CKPT_E_PEER/CKPT_D_PEER_FAILED": the status and its detail (tests/statuses.py)."""
    return f"{e.status}/{e.detail}" if e.detail else e.status


SPECS = [  # name, shape, dtype, how the tests cut it
    ("model.embed_tokens.weight", (30, 16), torch.bfloat16),
    ("model.layers.0.self_attn.q_proj.weight", (18, 16), torch.bfloat16),
    ("model.layers.0.self_attn.o_proj.weight", (16, 18), torch.bfloat16),
    ("model.rotary.table", (1030, 1100), torch.float32),  # 4.5 MB, whole on every rank in TP loads: read in row ranges
    ("model.layers.0.input_layernorm.weight", (16,), torch.float32),
    ("model.layers.0.cube", (5, 6, 7), torch.float16),
    ("model.norm.weight", (16,), torch.float32),
    ("model.empty", (0, 4), torch.float32),
    ("lm_head.weight", (30, 16), torch.bfloat16),
    ("step", (), torch.int64),
]


def full_state_dict():
    g = torch.Generator().manual_seed(1234)
    sd = {}
    for name, shape, dtype in SPECS:
        if dtype == torch.int64:
            sd[name] = torch.tensor(1234567, dtype=dtype)
        else:
            sd[name] = torch.randn(shape, generator=g).to(dtype)
    return sd


def _init(rank, world, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))


def _finish(tmp, rank, result):
    with open(os.path.join(tmp, f"result-{rank}.json"), "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    os._exit(0)  # no teardown: a peer may be gone


def _check(result, cond, what):
    if not cond:
        result["failures"].append(what)


def _cut(t, dim, rank, size):
    return torch.tensor_split(t, size, dim=dim)[rank] if t.dim() > dim else t


def run(rank, world, port, tmp, scenario):
    result = {"failures": [], "notes": []}
    try:
        _init(rank, world, port)
        if scenario == "main":
            main(rank, world, tmp, result)
        elif scenario == "kill":
            kill(rank, world, tmp, result)
        elif scenario == "background":
            background(rank, world, tmp, result)
        elif scenario == "fds":
            fds(rank, world, tmp, result)
        elif scenario == "many_shards":
            many_shards(rank, world, tmp, result)
        elif scenario == "fork":
            fork(rank, world, tmp, result)
        elif scenario == "write_order":
            write_order(rank, world, tmp, result)
        elif scenario == "sync":
            sync(rank, world, tmp, result)
        elif scenario == "write_back":
            write_back(rank, world, tmp, result)
        elif scenario == "write_back_no_sync":
            write_back(rank, world, tmp, result, no_sync=True)
        elif scenario == "gguf_blocks":
            gguf_blocks(rank, world, tmp, result)
    except Exception:  # noqa: BLE001 - reported to the test
        result["failures"].append(traceback.format_exc())
    _finish(tmp, rank, result)


# ---------------------------------------------------------------------------


def main(rank, world, tmp, result):
    import ckpt
    import ckpt.distributed as cd
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh

    full = full_state_dict()
    src = os.path.join(tmp, "model")  # written by the test, sharded
    groups = {n: dist.new_group(list(range(n))) for n in (1, 2, 4)}  # every rank takes part in new_group

    # -- loads: tensor-parallel rules, each group size ---------------------
    for n, g in groups.items():
        if rank >= n:
            continue
        for mode in ("broadcast", "read"):
            sd, stats = cd.load(src, {"tp_select": ["*proj.weight", "*embed_tokens*"], "tp_dim": 0}, group=g,
                                replicated=mode, timeout=60, return_stats=True)
            solo = ckpt.load(src, tp_rank=rank, tp_size=n, tp_select=["*proj.weight", "*embed_tokens*"])
            _check(result, sorted(sd) == sorted(full), f"n={n}: names {sorted(sd)}")
            for name, t in sd.items():
                want = _cut(full[name], 0, rank, n) if "proj" in name or "embed" in name else full[name]
                _check(result, torch.equal(t, want) and torch.equal(t, solo[name]), f"n={n} {mode}: {name} differs")
            result["notes"].append({"load": n, "mode": mode, "stats": stats})
            if mode == "read" or n == 1:
                _check(result, stats["bytes_received"] == 0, f"n={n} {mode}: received {stats['bytes_received']}")
            else:
                _check(result, stats["bytes_received"] > 0, f"n={n} broadcast: nothing received")

    # -- a slice function: each rank its columns of 2-D tensors -------------
    def columns(name, shape, r, size):
        if len(shape) != 2:
            return None
        return {1: _bounds(shape[1], r, size)}

    sd = cd.load(src, columns, timeout=60)
    for name, t in sd.items():
        want = _cut(full[name], 1, rank, world) if full[name].dim() == 2 else full[name]
        _check(result, torch.equal(t, want), f"slice function: {name} differs")
    sd = cd.load(src, lambda name, shape, r, size: False if name == "step" else None, timeout=60)
    _check(result, "step" not in sd and len(sd) == len(full) - 1, "a function's False did not skip the tensor")

    # -- DTensors: a 1-D mesh and a 2-D mesh --------------------------------
    mesh = init_device_mesh("cpu", (world,))
    for placements in ([Shard(0)], [Shard(1)], [Replicate()]):
        sd = cd.load(src, mesh=mesh, placements=placements, timeout=60)
        for name, t in sd.items():
            pl = [p if not isinstance(p, Shard) or p.dim < full[name].dim() else Replicate() for p in placements]
            want = distribute_tensor(full[name], mesh, pl)
            _check(result, tuple(t.shape) == tuple(full[name].shape), f"DTensor {name} global shape {tuple(t.shape)}")
            _check(result, t.placements == want.placements, f"DTensor {name} placements")
            _check(result, torch.equal(t.to_local(), want.to_local()), f"DTensor {placements} {name} differs")
    mesh2 = init_device_mesh("cpu", (2, 2))
    sd = cd.load(src, mesh=mesh2, placements=[Shard(0), Shard(1)], timeout=60)
    for name, t in sd.items():
        pl = [p if p.dim < full[name].dim() else Replicate() for p in (Shard(0), Shard(1))]
        want = distribute_tensor(full[name], mesh2, pl)
        _check(result, torch.equal(t.to_local(), want.to_local()), f"2-D mesh {name} differs")
        if name == "model.layers.0.self_attn.q_proj.weight":
            _check(result, torch.equal(t.full_tensor(), full[name]), "full_tensor() differs")

    # -- saves: N ranks of parts, then every M loads them --------------------
    for n, g in groups.items():
        if rank < n:
            parts, shards = {}, {}
            for name, t in full.items():
                if t.dim() == 2 and "norm" not in name:
                    dim = 1 if "o_proj" in name else 0
                    parts[name] = _cut(t, dim, rank, n).clone()
                    offset = [0, 0]
                    offset[dim] = _bounds(t.shape[dim], rank, n)[0]
                    shards[name] = (tuple(t.shape), offset)
                else:
                    parts[name] = t.clone()  # replicated: every rank holds it whole
            stats = cd.save(parts, os.path.join(tmp, f"saved-{n}"), group=g, shards=shards, max_shard_size="2MB",
                            timeout=60, return_stats=True)
            result["notes"].append({"save": n, "stats": stats})
        dist.barrier()
    # DTensors of the whole mesh, tied weights included.
    dsd = {}
    for name, t in full.items():
        pl = [Shard(1)] if "o_proj" in name else [Shard(0)] if t.dim() >= 1 and "norm" not in name else [Replicate()]
        dsd[name] = distribute_tensor(t, mesh, pl)
    dsd["lm_head.weight"] = dsd["model.embed_tokens.weight"]  # tied
    cd.save(dsd, os.path.join(tmp, "saved-dtensor"), max_shard_size="2MB", timeout=60)
    dist.barrier()
    # As every other save, it replaces an existing checkpoint only when told.
    try:
        cd.save({name: t.clone() for name, t in full.items()}, os.path.join(tmp, "saved-1"), max_shard_size="2MB",
                timeout=60)
        _check(result, False, "a save replaced an existing checkpoint without overwrite=True")
    except ckpt.Error as e:
        result["exists"] = [type(e).__name__, isinstance(e, FileExistsError), status_of(e), str(e)]
    dist.barrier()
    for n in (1, 2, 4):
        for m, g in groups.items():
            if rank >= m:
                continue
            sd = cd.load(os.path.join(tmp, f"saved-{n}"), {"tp_select": "*proj.weight", "tp_dim": 1}, group=g,
                         timeout=60)
            for name, t in sd.items():
                want = _cut(full[name], 1, rank, m) if "proj" in name else full[name]
                _check(result, torch.equal(t, want), f"saved by {n}, loaded by {m}: {name} differs")

    # -- a rank that fails: the others fail naming it, nothing published ----
    out = os.path.join(tmp, "failed")
    parts = {name: t.clone() for name, t in full.items()}
    if rank == 1:
        parts["model.norm.weight"] = object()  # not a tensor: rank 1 raises before begin
    try:
        cd.save(parts, out, timeout=30)
        _check(result, False, "a save with a failing rank succeeded")
    except TypeError as e:
        _check(result, rank == 1, f"rank {rank} raised TypeError: {e}")
    except ckpt.Error as e:
        _check(result, rank != 1 and status_of(e) == "CKPT_E_PEER/CKPT_D_PEER_FAILED" and "rank 1 failed" in str(e),
               f"rank {rank}: {e.status}: {e}")
    _check(result, not os.path.exists(out), "a failed save was published")
    dist.barrier()
    # The same through a convert of the whole checkpoint by all ranks.
    cd.convert(src, os.path.join(tmp, "converted"), max_shard_size="1MB", dtype="float16", timeout=60)


def _bounds(size, rank, n):
    q, rem = divmod(size, n)
    start = rank * q + min(rank, rem)
    return start, start + q + (1 if rank < rem else 0)


# ---------------------------------------------------------------------------


def kill(rank, world, tmp, result):
    """Rank 2 dies (SIGKILL) halfway through its writes; the others must fail
    within the timeout naming it, and nothing is published."""
    import ckpt
    import ckpt.distributed as cd
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    full = full_state_dict()
    mesh = init_device_mesh("cpu", (world,))
    dsd = {name: distribute_tensor(t, mesh, [Shard(0)] if t.dim() else []) if t.dim() else t
           for name, t in full.items()}
    out = os.path.join(tmp, "killed")
    if rank == 2:  # the real writer, until the third write kills the process
        _dying_writer(3, lambda: os.kill(os.getpid(), signal.SIGKILL))
    t0 = time.monotonic()
    try:
        cd.save(dsd, out, max_shard_size="2MB", timeout=8)
        _check(result, False, "the save succeeded without rank 2")
    except ckpt.Error as e:
        result["error"] = {"status": status_of(e), "message": str(e), "seconds": time.monotonic() - t0}
    _check(result, not os.path.exists(out), "published although rank 2 died")


def background(rank, world, tmp, result):
    """ckpt.distributed.save(background=True): each rank's rows of the 2-D
    tensors (the others whole), mutated as soon as the call returns while
    the "training" runs all_reduces on the same group; the output must be
    the state at the call."""
    import ckpt  # noqa: F401
    import ckpt.distributed as cd

    for staging_bytes, out in ((None, "bg-all"), ("64KB", "bg-budget")):
        parts, shards = _rows(rank, world)
        h = cd.save(parts, os.path.join(tmp, out), shards=shards, max_shard_size="2MB", timeout=60,
                    background=True, staging_bytes=staging_bytes, return_stats=True)
        _train_while_saving(h, parts, world, result)
        result["notes"].append({"save": out, "handle": {k: v for k, v in h.stats.items() if k != "pid"}})
    dist.barrier()


def _rows(rank, world):
    """Each rank's rows of the 2-D tensors (the others whole), and their shards."""
    parts, shards = {}, {}
    for name, t in full_state_dict().items():
        if t.dim() == 2:
            parts[name] = _cut(t, 0, rank, world).clone()
            shards[name] = (tuple(t.shape), [_bounds(t.shape[0], rank, world)[0], 0])
        else:
            parts[name] = t.clone()
    return parts, shards


def _train_while_saving(h, parts, world, result):
    """The parts mutated as soon as the save call returned, and the
    training's collectives on the default group while the save runs; then
    the save's statistics checked."""
    with torch.no_grad():
        for t in parts.values():
            t.add_(1)
    x = torch.ones(1000)
    for _ in range(20):
        dist.all_reduce(x)
    stats = h.wait()
    _check(result, x[0].item() == world ** 20, "the training's all_reduce went wrong during the save")
    _check(result, isinstance(stats, dict) and stats["bytes_written"] > 0, f"stats {stats!r}")


def _dying_writer(after, then):
    """ckpt's ShardWriter, which calls then() at its `after`-th write."""
    import ckpt._ckpt as core
    real = core.ShardWriter
    calls = {"n": 0}

    class Dying:
        def __init__(self, *args, **kw):
            self._w = real(*args, **kw)

        def __getattr__(self, name):
            return getattr(self._w, name)

        def write(self, index, at, data):
            calls["n"] += 1
            if calls["n"] == after:
                then()
            return self._w.write(index, at, data)

    core.ShardWriter = Dying  # ckpt.distributed looks the class up at call time
    return real


def fork(rank, world, tmp, result):
    """ckpt.distributed.save(background=True, staging="fork"): each rank's
    child writes the state at the call while the parent mutates its parts
    and all_reduces on the default group; one commit.  Then rank 1's child
    is killed mid-save, then rank 1 itself: the others fail naming rank 1,
    and the first checkpoint stays as it was."""
    import ckpt
    import ckpt._ckpt as core
    import ckpt.distributed as cd
    out = os.path.join(tmp, "fork-out")
    parts, shards = _rows(rank, world)
    start = time.monotonic()
    phases = result.setdefault("phases", [])  # how far this rank got, and when: a failure's message shows them

    def phase(name):
        phases.append([name, round(time.monotonic() - start, 2)])

    h = cd.save(parts, out, shards=shards, max_shard_size="2MB", timeout=30, background=True, staging="fork",
                return_stats=True)
    phase("first save forked")
    _train_while_saving(h, parts, world, result)
    phase("first save waited")
    result["notes"].append({"save": "fork", "stall": h.stats["stall_seconds"]})
    dist.barrier()
    phase("barrier")

    # A child killed at its second write (SIGKILL): nothing is committed.
    real = core.ShardWriter
    if rank == 1:
        _dying_writer(2, lambda: os.kill(os.getpid(), signal.SIGKILL))
    t0 = time.monotonic()
    h = cd.save(parts, out, shards=shards, max_shard_size="2MB", timeout=8, overwrite=True, background=True,
                staging="fork")
    core.ShardWriter = real
    phase("second save forked")
    try:
        h.wait(timeout=60)
        _check(result, False, "the save succeeded without rank 1's child")
    except ckpt.Error as e:
        result["child_killed"] = {"message": str(e), "seconds": time.monotonic() - t0}
    phase("second save waited")
    dist.barrier()
    phase("barrier")

    # Rank 1 killed mid-save: its child dies with it (it sleeps in its first write meanwhile).
    if rank == 1:
        _dying_writer(1, lambda: time.sleep(30))
    t0 = time.monotonic()
    h = cd.save(parts, out, shards=shards, max_shard_size="2MB", timeout=8, overwrite=True, background=True,
                staging="fork")
    if rank == 1:
        time.sleep(1)
        os.kill(os.getpid(), signal.SIGKILL)
    phase("third save forked")
    try:
        h.wait(timeout=60)
        _check(result, False, "the save succeeded without rank 1")
    except ckpt.Error as e:
        result["rank_killed"] = {"message": str(e), "seconds": time.monotonic() - t0}
    phase("third save waited")
    # Rank 0's process hosts the store the children talk over: it leaves
    # only once every living rank's save has ended.  Leaving at once, it took
    # the store from a child still waiting on it (one that entered the
    # allgather or the vote later, under load), which then blamed rank 0.
    store = dist.distributed_c10d._get_default_store()
    store.set(f"fork-test/ended/{rank}", b"1")
    if rank == 0:
        store.wait([f"fork-test/ended/{r}" for r in range(world) if r != 1], datetime.timedelta(seconds=120))
    phase("every living rank's save ended")


def fds(rank, world, tmp, result):
    """A collective save of 8 tensors, each held whole by one rank and
    written to a shard of its own: a rank opens only the files it writes
    (the most it held open at once is recorded after every write)."""
    import ckpt.distributed as cd
    out = os.path.join(tmp, "fds-out")
    sd, shards = {}, {}
    for i in range(2 * world):
        if i // 2 == rank:
            sd[f"t{i}"] = torch.full((256, 256), float(i))
            shards[f"t{i}"] = ((256, 256), [0, 0])
    most = [0]
    write_part = cd._write_part

    def counting(w, index, fw, t):
        write_part(w, index, fw, t)
        names = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                 if os.path.exists(f"/proc/self/fd/{fd}")]
        most[0] = max(most[0], sum(1 for n in names if "fds-out" in n and n.endswith(".safetensors")))

    cd._write_part = counting
    try:
        cd.save(sd, out, shards=shards, max_shard_size="300KB", timeout=60)
    finally:
        cd._write_part = write_part
    result["most_open"] = most[0]
    dist.barrier()


def sync(rank, world, tmp, result):
    """A collective save of 2 tensors per rank, each held whole by its rank
    in a shard of its own: records this rank's statistics and tensors."""
    import ckpt.distributed as cd
    sd, shards = {}, {}
    for i in range(2 * rank, 2 * rank + 2):
        sd[f"t{i}"] = torch.full((256, 256), float(i))
        shards[f"t{i}"] = ((256, 256), [0, 0])
    result["stats"] = cd.save(sd, os.path.join(tmp, "sync-out"), shards=shards, max_shard_size="300KB", timeout=60,
                              return_stats=True)
    result["tensors"] = sorted(sd)
    dist.barrier()


WRITE_BACK_SHAPE = (6144, 4096)  # float32: 96 MiB, 48 MiB a rank of 2, more than the writer's 32 MiB drop window


def write_back_tensor():
    return torch.arange(WRITE_BACK_SHAPE[0] * WRITE_BACK_SHAPE[1], dtype=torch.float32).reshape(WRITE_BACK_SHAPE)


def write_back(rank, world, tmp, result, no_sync=False):
    """A collective save of one 96 MiB tensor split by rows among the ranks
    (one shard): what the test then finds in the page cache."""
    import ckpt.distributed as cd
    t = write_back_tensor()
    rows = t.shape[0] // world
    sd = {"w": t[rank * rows:(rank + 1) * rows].clone()}
    del t
    result["stats"] = cd.save(sd, os.path.join(tmp, "wb-out"), shards={"w": (WRITE_BACK_SHAPE, [rank * rows, 0])},
                              timeout=60, return_stats=True, no_sync=no_sync)
    dist.barrier()


def gguf_blocks(rank, world, tmp, result):
    """A collective convert of a Q8_0 GGUF (the test's q.gguf) into
    safetensors, which cannot hold Q8_0 blocks."""
    import ckpt.distributed as cd
    cd.convert(os.path.join(tmp, "q.gguf"), os.path.join(tmp, "collective.safetensors"), timeout=60)
    dist.barrier()


def order_state_dict():
    """8 tensors of 16 KiB: with max_shard_size="40KB", two a shard."""
    return {f"layers.{i}.weight": torch.full((64, 64), float(i)) for i in range(8)}


def write_order(rank, world, tmp, result):
    """A collective save of 8 tensors, each split by rows among the ranks
    (tensor parallel), into 4 shards, then again in the background
    (staging="copy"): records the tensors of this rank's parts in the order
    it wrote them, each time."""
    import ckpt.distributed as cd
    sd, shards = {}, {}
    for name, t in order_state_dict().items():
        rows = t.shape[0] // world
        sd[name] = t[rank * rows:(rank + 1) * rows].clone()
        shards[name] = (tuple(t.shape), [rank * rows, 0])
    names = list(sd)
    order = []
    write_part = cd._write_part

    def recording(w, index, fw, t):
        order.append(names[index])
        write_part(w, index, fw, t)

    cd._write_part = recording
    try:
        cd.save(sd, os.path.join(tmp, "order-out"), shards=shards, max_shard_size="40KB", timeout=60)
        result["order"] = list(order)
        order.clear()
        cd.save(sd, os.path.join(tmp, "order-bg"), shards=shards, max_shard_size="40KB", timeout=60,
                background=True, staging="copy").wait()
        result["background_order"] = list(order)
    finally:
        cd._write_part = write_part
    dist.barrier()


MANY_SHARDS = 64


def many_shards_state_dict():
    """64 tensors of 16 KiB: with max_shard_size="20KB", one shard each."""
    return {f"layers.{i:02d}.weight": torch.full((64, 64), float(i)) for i in range(MANY_SHARDS)}


def _open_output_files(out):
    """The output's .safetensors files this process holds open now (staged
    beside `out` until the commit: a path that names `out`'s basename)."""
    names = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if os.path.basename(out) in target and target.endswith(".safetensors"):
            names.add(os.path.basename(target))
    return names


def many_shards(rank, world, tmp, result):
    """A collective save into 64 shards, each rank holding a block of 64 /
    world tensors; ranks 1.. run under an RLIMIT_NOFILE that leaves room for
    their own shards but not for all 64 (rank 0 creates every file and
    holds them to the commit).  Records every output file a rank held open
    after each of its writes."""
    import resource

    import ckpt.distributed as cd
    out = os.path.join(tmp, "many-out")
    per = MANY_SHARDS // world
    sd = {n: t for i, (n, t) in enumerate(many_shards_state_dict().items()) if i // per == rank}
    dist.barrier()
    if rank > 0:
        now = len(os.listdir("/proc/self/fd"))
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        limit = now + per + 16
        _check(result, limit < now + MANY_SHARDS, f"a limit of {limit} would allow every shard")
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        result["nofile"] = limit
    opened = set()
    write_part = cd._write_part

    def counting(w, index, fw, t):
        write_part(w, index, fw, t)
        opened.update(_open_output_files(out))

    cd._write_part = counting
    try:
        cd.save(sd, out, max_shard_size="20KB", timeout=60)
    finally:
        cd._write_part = write_part
    result["opened"] = sorted(opened)
    result["tensors"] = sorted(sd)
    dist.barrier()
