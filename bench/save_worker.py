"""One process of the save suite (bench/save_suite.py); prints one JSON line.

  save_worker.py incremental DIR GB CHANGED RUNS
      A GB-sized bf16 state dict in memory, saved once with digests as the
      base, then CHANGED (a fraction) of its tensors modified; each round
      times, in alternating order, ckpt's incremental save (base=), ckpt's
      full save (checksums=True), torch.save, huggingface_hub's
      save_torch_state_dict, and torch.distributed.checkpoint's save and
      async_save (a 1-rank gloo group) into DIR.  Each call is followed by
      os.sync() inside the timed region (ckpt fsyncs its files itself; the
      others do not), and each output is measured (bytes, blocks the file
      system gained: statvfs) and removed.

  save_worker.py background DIR GB SAVES RANK WORLD PORT
      A "training loop": every step multiplies every parameter in place;
      every few steps a save of the whole state starts — ckpt background
      copy, ckpt background fork, DCP async_save — and the loop goes on.
      Records each save's stall of the loop (the call's time), its total
      time to the commit, and the extra memory it cost: the proportional set
      size of this process and its children above what it was before the
      save (copy-on-write pages counted once), sampled every 10 ms.  With
      WORLD > 1, the rank holds row block RANK of every tensor as a DTensor
      (Shard(0)) on a 1-D CPU mesh, saved by ckpt.distributed.save and by
      DCP."""
import datetime
import json
import os
import shutil
import sys
import threading
import time

import torch


def used(path):
    s = os.statvfs(path)
    return (s.f_blocks - s.f_bfree) * s.f_frsize


def tree_bytes(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def remove(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)


def model(gb, rows=4096, cols=2048):
    """bf16 tensors of 16 MiB (rows × cols), filled without a slow RNG."""
    n = max(1, int(gb * 1e9) // (rows * cols * 2))
    base = torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols)
    return {f"model.layers.{i}.weight": (base * (1 + i / n)).to(torch.bfloat16) for i in range(n)}


def init_group(rank=0, world=1, port=29555):
    import torch.distributed as dist
    if not dist.is_initialized():
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=1800))


# ------------------------------------------------------------ incremental

def incremental(out_dir, gb, changed, runs):
    import ckpt
    import torch.distributed.checkpoint as dcp
    from huggingface_hub import save_torch_state_dict
    init_group()
    sd = model(gb)
    names = sorted(sd)
    base = os.path.join(out_dir, "base.safetensors")
    remove(base)
    ckpt.save(sd, base, checksums=True)
    step = max(1, round(1 / changed))
    touched = names[::step]
    with torch.no_grad():
        for n in touched:
            sd[n].mul_(1.5)

    def ckpt_incremental(out):
        _, stats = ckpt.save(sd, out, base=base, return_stats=True)
        return stats

    def dcp_async(out):
        dcp.async_save(sd, checkpoint_id=out).result()

    contenders = {
        "ckpt.save(base=) incremental": (ckpt_incremental, "inc.safetensors"),
        "ckpt.save full (checksums=True)": (lambda out: ckpt.save(sd, out, checksums=True), "full.safetensors"),
        "torch.save": (lambda out: torch.save(sd, out), "model.pt"),
        "save_torch_state_dict": (lambda out: (os.makedirs(out), save_torch_state_dict(sd, out)), "hub"),
        "dcp.save": (lambda out: dcp.save(sd, checkpoint_id=out), "dcp"),
        "dcp.async_save": (dcp_async, "dcp-async"),
    }
    results = {k: {"seconds": [], "bytes": [], "blocks_gained": []} for k in contenders}
    order = list(contenders)
    for r in range(runs):
        for name in (order if r % 2 == 0 else order[::-1]):
            fn, leaf = contenders[name]
            out = os.path.join(out_dir, leaf)
            remove(out)
            os.sync()
            before = used(out_dir)
            t0 = time.perf_counter()
            got = fn(out)
            os.sync()
            seconds = time.perf_counter() - t0
            results[name]["seconds"].append(seconds)
            results[name]["bytes"].append(tree_bytes(out))
            results[name]["blocks_gained"].append(used(out_dir) - before)
            if isinstance(got, dict):
                results[name]["stats"] = got
            remove(out)
            print(f"  {name}: {seconds:.2f} s, fs +{results[name]['blocks_gained'][-1] / 1e6:.0f} MB",
                  file=sys.stderr, flush=True)
    remove(base)
    total = sum(t.numel() * t.element_size() for t in sd.values())
    return {"bytes": total, "tensors": len(sd), "changed_tensors": len(touched),
            "changed_bytes": sum(sd[n].numel() * 2 for n in touched), "results": results}


# ------------------------------------------------------------- background

def pss_tree(pid):
    """Proportional set size of `pid` and its descendants, in bytes."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return total


class Sampler:
    """Peak PSS of this process tree while running, every 10 ms."""

    def __init__(self):
        self.peak, self._stop = 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, pss_tree(os.getpid()))
            time.sleep(0.01)

    def stop(self):
        self._stop.set()
        self._t.join()
        return max(self.peak, pss_tree(os.getpid()))


def background(out_dir, gb, saves, rank, world, port):
    import ckpt
    import ckpt.distributed as cd
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    init_group(rank, world, port)
    full = model(gb)
    if world > 1:
        from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh
        mesh = init_device_mesh("cpu", (world,))
        sd = {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in full.items()}
        params = [v.to_local() for v in sd.values()]
    else:
        sd = full
        params = list(sd.values())
    del full

    def train_step():
        with torch.no_grad():
            for p in params:
                p.mul_(1.0001)

    starts = []  # ckpt's handles: their stats

    def start(kind, out):
        if kind == "dcp.async_save":
            fut = dcp.async_save(sd, checkpoint_id=out)
            return lambda: fut.done(), lambda: fut.result()
        if world > 1:
            h = cd.save(sd, out, background=True, max_shard_size="5GB", timeout=1800)
        else:
            h = ckpt.save(sd, out, background=True, staging="fork" if "fork" in kind else "copy")
        starts.append(h)
        return h.done, h.wait

    kinds = ["ckpt background (staging='copy')", "dcp.async_save"]
    if world == 1:
        kinds.insert(1, "ckpt background (staging='fork')")
    results = {}
    step_seconds = []
    for _ in range(3):  # the loop's own pace, no save running
        t0 = time.perf_counter()
        train_step()
        step_seconds.append(time.perf_counter() - t0)
    for kind in kinds:
        rows = []
        for s in range(saves):
            out = os.path.join(out_dir, f"bg-{rank if world == 1 else 'all'}-{s}")
            if rank == 0:
                remove(out)
            if world > 1:
                dist.barrier()
            os.sync()
            base_pss = pss_tree(os.getpid())
            sampler = Sampler()
            t0 = time.perf_counter()
            done, wait = start(kind, out)
            stall = time.perf_counter() - t0
            steps = 0
            while not done():
                train_step()
                steps += 1
            wait()
            total = time.perf_counter() - t0
            peak = sampler.stop()
            row = {"stall_s": stall, "total_s": total, "steps_during": steps,
                   "extra_pss_bytes": max(0, peak - base_pss)}
            if starts and "ckpt" in kind:  # staging buffers kept from the last save count in base_pss: say so
                row["staged_bytes"] = starts[-1].stats.get("staged_bytes", 0)
            rows.append(row)
            print(f"  rank {rank} {kind} save {s}: stall {stall:.3f} s, total {total:.2f} s, "
                  f"+{(peak - base_pss) / 1e9:.2f} GB, {steps} steps meanwhile", file=sys.stderr, flush=True)
            if world > 1:
                dist.barrier()
            if rank == 0:
                remove(out)
        results[kind] = rows
    local = sum(p.numel() * p.element_size() for p in params)
    return {"rank": rank, "world": world, "bytes_per_rank": local, "step_s": min(step_seconds), "results": results}


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "incremental":
        doc = incremental(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
    else:
        doc = background(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]),
                         int(sys.argv[7]))
    print(json.dumps(doc), flush=True)
    os._exit(0)
