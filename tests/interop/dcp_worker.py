"""Real torch.distributed.checkpoint checkpoints for test_dcp.py, made once
per test session by 4 gloo ranks on 127.0.0.1 (torch.multiprocessing
spawn), and torch's verdict on the checkpoints ckpt writes.

    python dcp_worker.py OUT PORT CKPT_BIN

Phase 1 — dcp.save, with the 1-, 2- and 4-rank groups:
  OUT/r1    one rank: plain tensors (f32, bf16, f16, i64, bool, 0-d, empty),
            tied weights, nested dicts, step/lr/name/milestones/betas,
            the RNG state
  OUT/r2    two ranks: DTensors Shard(0) (uneven rows), Shard(1), Replicate
  OUT/r4    four ranks: DTensors Shard(0)/Shard(1)/Replicate, a 2x2 mesh
            [Shard(0), Shard(1)], an FSDP2 (fully_shard) model with its AdamW
            state (get_state_dict), a step counter
  OUT/hf4   four ranks, HuggingFaceStorageWriter(save_distributed=True)
  OUT/expected_<name>.pt   the same state dicts, gathered whole
Phase 2 — rank 0 runs `ckpt convert SRC OUT/to<N>-<src> --to dcp
  --dcp-ranks N` for N = 1, 2, 4 on OUT/src.safetensors and OUT/src.pt.
Phase 3 — for every written checkpoint and every group size M = 1, 2, 4,
  torch.distributed.checkpoint.load into plain tensors and into DTensors
  with Shard(0) on M ranks, compared with the source; OUT/results.json.
"""
import json
import os
import subprocess
import sys
import traceback

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint import HuggingFaceStorageWriter
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor


def full(sd):
    """The state dict with every DTensor gathered (a collective)."""
    if isinstance(sd, dict):
        return {k: full(v) for k, v in sd.items()}
    if isinstance(sd, list):
        return [full(v) for v in sd]
    if isinstance(sd, DTensor):
        return sd.full_tensor()
    return sd


def save(rank, group, members, name, out, sd, **kw):
    """dcp.save by the group's members; the gathered copy by rank 0."""
    if rank in members:
        dcp.save(sd, checkpoint_id=os.path.join(out, name), process_group=group, **kw)
        whole = full(sd)
        if rank == members[0]:
            torch.save(whole, os.path.join(out, f"expected_{name}.pt"))


def sources(out):
    g = torch.Generator().manual_seed(3)
    plain = {
        "emb": torch.randn(9, 4, generator=g),                       # 9 rows: uneven on 2 and 4 ranks
        "proj": torch.randn(8, 6, generator=g).to(torch.bfloat16),
        "norm": torch.randn(3, generator=g),                         # fewer rows than 4 ranks: written once
        "ids": torch.arange(20, dtype=torch.int64).reshape(5, 4),
        "scale": torch.tensor(0.5),
        "half": torch.randn(4, 2, generator=g).half(),
    }
    import safetensors.torch
    safetensors.torch.save_file(plain, os.path.join(out, "src.safetensors"))
    nested = {"model": {"w": torch.randn(6, 3, generator=g), "b": torch.randn(4, generator=g)},
              "epoch": 5, "note": "ckpt", "lrs": [0.1, 0.01], "betas": (0.9, 0.95), "flags": {"ema": True}}
    torch.save(nested, os.path.join(out, "src.pt"))
    return plain, nested


def compare(got, want, path=""):
    """Differences between two state dicts, as strings."""
    bad = []
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return [f"{path}: keys {sorted(got) if isinstance(got, dict) else type(got)} != {sorted(want)}"]
        for k in want:
            bad += compare(got[k], want[k], f"{path}.{k}")
        return bad
    if isinstance(want, torch.Tensor):
        if isinstance(got, DTensor):
            got = got.full_tensor()
        if not isinstance(got, torch.Tensor) or got.dtype != want.dtype or got.shape != want.shape:
            return [f"{path}: {getattr(got, 'dtype', type(got))} {getattr(got, 'shape', '')} != {want.dtype} {want.shape}"]
        if not torch.equal(got.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8)):
            return [f"{path}: values differ"]
        return []
    return [] if got == want else [f"{path}: {got!r} != {want!r}"]


def zeros_like(sd, mesh=None):
    """Load targets: zeros of the same shapes (DTensors with Shard(0) on
    `mesh` for tensors of at least one axis); non-tensors as neutral values."""
    if isinstance(sd, dict):
        return {k: zeros_like(v, mesh) for k, v in sd.items()}
    if isinstance(sd, torch.Tensor):
        z = torch.zeros_like(sd)
        return distribute_tensor(z, mesh, [Shard(0)]) if mesh is not None and sd.dim() else z
    return {int: 0, float: 0.0, str: "", bool: False}.get(type(sd), None) if not isinstance(sd, (list, tuple)) else type(sd)()


def run(rank, world, out, ckpt_bin):
    # A file store, not a TCP port: a port picked free can be taken by another
    # process before gloo binds it (seen as SIGABRT under a loaded machine).
    dist.init_process_group("gloo", init_method="file://" + out.rstrip("/") + ".gloo-store", rank=rank, world_size=world)
    groups = {1: dist.new_group([0]), 2: dist.new_group([0, 1]), 4: dist.group.WORLD}
    meshes = {n: DeviceMesh.from_group(groups[n], "cpu") if rank < n else None for n in (1, 2)}
    meshes[4] = init_device_mesh("cpu", (4,))
    mesh2d = init_device_mesh("cpu", (2, 2))
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    w = torch.randn(5, 3, generator=g)

    # r1: plain state dict on one rank
    r1 = {"model": {"emb.weight": w, "head.weight": w, "norm": torch.randn(3, generator=g).bfloat16(),
                    "f16": torch.randn(2, 2, generator=g).half(), "ids": torch.arange(6, dtype=torch.int64),
                    "mask": torch.tensor([True, False, True]), "scale": torch.tensor(2.0),
                    "empty": torch.zeros(0, 4)},
          "step": 11, "lr": 0.5, "name": "run-7", "milestones": [10, 20], "betas": (0.9, 0.95),
          "rng": torch.get_rng_state()}
    save(rank, groups[1], [0], "r1", out, r1)

    # r2: DTensors on two ranks
    if rank < 2:
        m = meshes[2]
        r2 = {"rows": distribute_tensor(torch.randn(7, 3, generator=g), m, [Shard(0)]),
              "cols": distribute_tensor(torch.randn(4, 6, generator=g).bfloat16(), m, [Shard(1)]),
              "rep": distribute_tensor(torch.randn(5, generator=g), m, [Replicate()]), "step": 2}
    else:
        torch.randn(7, 3, generator=g), torch.randn(4, 6, generator=g), torch.randn(5, generator=g)
        r2 = None
    save(rank, groups[2], [0, 1], "r2", out, r2)

    # r4: DTensors, a 2-D mesh, FSDP2 with AdamW
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    fully_shard(model, mesh=meshes[4])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 8, generator=g)).sum().backward()
    opt.step()
    msd, osd = get_state_dict(model, opt)
    r4 = {"model": msd, "optim": osd, "step": 3,
          "extra": {"rows": distribute_tensor(torch.randn(9, 4, generator=g), meshes[4], [Shard(0)]),
                    "cols": distribute_tensor(torch.randn(3, 8, generator=g).bfloat16(), meshes[4], [Shard(1)]),
                    "rep": distribute_tensor(torch.randn(6, generator=g), meshes[4], [Replicate()]),
                    "grid": distribute_tensor(torch.randn(4, 6, generator=g), mesh2d, [Shard(0), Shard(1)])}}
    save(rank, groups[4], [0, 1, 2, 3], "r4", out, r4)

    # hf4: the Hugging Face storage layer, one safetensors file per rank
    hf = {"a": distribute_tensor(torch.randn(8, 6, generator=g), meshes[4], [Shard(0)]),
          "b": distribute_tensor(torch.randn(6, 8, generator=g).bfloat16(), meshes[4], [Shard(1)]),
          "c": distribute_tensor(torch.randn(10, generator=g), meshes[4], [Replicate()]),
          "d": distribute_tensor(torch.randn(7, 2, generator=g), meshes[4], [Shard(0)])}
    dcp.save(hf, storage_writer=HuggingFaceStorageWriter(os.path.join(out, "hf4"), save_distributed=True))
    whole = full(hf)
    if rank == 0:
        torch.save(whole, os.path.join(out, "expected_hf4.pt"))

    # Phase 2: ckpt writes DCP
    results = {}
    if rank == 0:
        plain, nested = sources(out)
        for n in (1, 2, 4):
            for src in ("src.safetensors", "src.pt"):
                dst = os.path.join(out, f"to{n}-{src.split('.')[1]}")
                r = subprocess.run([ckpt_bin, "convert", os.path.join(out, src), dst, "--to", "dcp",
                                    "--dcp-ranks", str(n), "--no-sync"], capture_output=True, text=True)
                results[f"convert {n} {src}"] = r.stderr if r.returncode else "ok"
    dist.barrier()
    import safetensors.torch
    plain = safetensors.torch.load_file(os.path.join(out, "src.safetensors"))
    nested = torch.load(os.path.join(out, "src.pt"))

    # Phase 3: torch loads what ckpt wrote, on 1, 2 and 4 ranks
    for n in (1, 2, 4):
        for kind, want in (("safetensors", plain), ("pt", nested)):
            for m in (1, 2, 4):
                for sharded in (False, True):
                    if rank >= m:
                        continue
                    target = zeros_like(want, meshes[m] if sharded else None)
                    key = f"load to{n}-{kind} on {m} ranks{' as Shard(0) DTensors' if sharded else ''}"
                    try:
                        dcp.load(target, checkpoint_id=os.path.join(out, f"to{n}-{kind}"), process_group=groups[m])
                        bad = compare(target, want)
                        results[key] = "ok" if not bad else "; ".join(bad[:5])
                    except Exception:
                        results[key] = traceback.format_exc(limit=3)
    every = [None] * world
    dist.all_gather_object(every, results)
    if rank == 0:
        merged = {}
        for r, res in enumerate(every):
            for k, v in res.items():
                merged[f"{k} [rank {r}]"] = v
        with open(os.path.join(out, "results.json"), "w") as f:
            json.dump(merged, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    out, ckpt_bin = sys.argv[1], sys.argv[2]
    mp.spawn(run, args=(4, out, ckpt_bin), nprocs=4)
