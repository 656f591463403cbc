"""One rank of the distributed suite (bench/distributed_suite.py): started
N times by the suite, each a process of its own (its peak RSS its own),
joined by torch.distributed (gloo on 127.0.0.1).  Prints one JSON line.

  dist_worker.py tp_ckpt   PATH RANK WORLD PORT [broadcast|read]
  dist_worker.py tp_runai  PATH RANK WORLD PORT   Run:ai's distributed streamer (gloo, CPU), keeping the rank's slices
  dist_worker.py all_ckpt  PATH                   one process reading everything
  dist_worker.py save_ckpt OUT RANK WORLD PORT GB each rank its tensor-parallel shards of a GB-sized state dict
  dist_worker.py save_one  OUT GB                 one process writing the same bytes (ckpt.save)

Tensor-parallel rank r of N keeps part r of N of every 2-D tensor along
dim 0 (torch.tensor_split) and every 1-D tensor whole.  Every byte a rank
keeps is checksummed inside the timed region."""
import datetime
import json
import os
import resource
import sys
import time

import torch

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)


def rss_peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_now():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def io_read_bytes():
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def checksum(tensors):
    """The sum of every byte (numpy accumulates in chunks: no copy)."""
    s = 0
    for t in tensors:
        if t.numel():
            s += int(t.contiguous().view(torch.uint8).reshape(-1).numpy().sum(dtype="uint64"))
    return s


def init(rank, world, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=1800))
    dist.barrier()
    return dist


def tp_slice(t, rank, world):
    return torch.tensor_split(t, world, dim=0)[rank] if t.dim() == 2 else t


def needed_bytes(path, rank, world):
    """The source bytes rank r's slices hold (what it must read at least)."""
    import ckpt
    with ckpt.open(path) as c:
        total = 0
        for info in c.tensors.values():
            shape = info.shape
            if len(shape) == 2:
                rows = shape[0] // world + (1 if rank < shape[0] % world else 0)
                total += rows * (info.nbytes // max(shape[0], 1))
            else:
                total += info.nbytes
    return total


def tp_ckpt(path, rank, world, port, mode="broadcast"):
    import ckpt.distributed as cd
    dist = init(rank, world, port)
    base = rss_now()
    io0 = io_read_bytes()
    t0 = time.time()
    # Every 2-D weight cut on dim 0; the norms (1-D) whole on every rank:
    # replicated, read once and broadcast.
    rules = {"tp_select": ["*proj.weight", "*embed_tokens.weight", "lm_head.weight"], "tp_dim": 0}
    sd, stats = cd.load(path, rules, replicated=mode, return_stats=True)
    s = checksum(sd.values())
    t1 = time.time()
    io1 = io_read_bytes()
    kept = sum(t.numel() * t.element_size() for t in sd.values())
    dist.barrier()
    return {"t0": t0, "t1": t1, "checksum": s, "bytes_kept": kept, "bytes_read": stats["bytes_read"],
            "bytes_needed_stats": stats["bytes_needed"], "bytes_needed": needed_bytes(path, rank, world),
            "bytes_received": stats["bytes_received"], "io_read_bytes": None if io0 is None else io1 - io0,
            "rss_peak": rss_peak(), "rss_base": base}


def tp_runai(path, rank, world, port):
    os.environ["RUNAI_STREAMER_DIST"] = "1"  # the distributed streamer on a gloo (CPU) group
    # Its read ring is a node total shared by the ranks (default 40 GB): 2 GiB
    # keeps 4 ranks within this 24 GiB machine (it also holds two 1 GiB
    # broadcast buffers per rank).
    os.environ.setdefault("RUNAI_STREAMER_MEMORY_LIMIT", str(2 << 30))
    from runai_model_streamer import SafetensorsStreamer
    dist = init(rank, world, port)
    files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors")) \
        if os.path.isdir(path) else [path]
    base = rss_now()
    io0 = io_read_bytes()
    t0 = time.time()
    kept = {}
    with SafetensorsStreamer() as streamer:
        streamer.stream_files(files, device="cpu", is_distributed=True)
        for name, t in streamer.get_tensors():
            kept[name] = tp_slice(t, rank, world).clone()  # the streamer reuses its buffers
    s = checksum(kept.values())
    t1 = time.time()
    io1 = io_read_bytes()
    dist.barrier()
    return {"t0": t0, "t1": t1, "checksum": s, "bytes_kept": sum(t.numel() * t.element_size() for t in kept.values()),
            "bytes_needed": needed_bytes(path, rank, world), "io_read_bytes": None if io0 is None else io1 - io0,
            "rss_peak": rss_peak(), "rss_base": base}


def all_ckpt(path):
    import ckpt
    base = rss_now()
    io0 = io_read_bytes()
    t0 = time.time()
    sd = ckpt.load(path)
    s = checksum(sd.values())
    t1 = time.time()
    io1 = io_read_bytes()
    return {"t0": t0, "t1": t1, "checksum": s, "bytes_kept": sum(t.numel() * t.element_size() for t in sd.values()),
            "io_read_bytes": None if io0 is None else io1 - io0, "rss_peak": rss_peak(), "rss_base": base}


# ---------------------------------------------------------------------------
# saves


def shapes_for(gb):
    from run import llama_like_records
    return llama_like_records(int(gb * 1e9))


def fill(t, index, first_row):
    """Deterministic bytes: row r of tensor i holds byte (7 i + r) mod 256."""
    if not t.numel():
        return t
    b = t.view(torch.uint8)
    rows = b.shape[0] if b.dim() == 2 else 1
    pattern = (torch.arange(first_row, first_row + rows, dtype=torch.int64) + 7 * index) % 256
    if b.dim() == 2:
        b.copy_(pattern.to(torch.uint8)[:, None].expand_as(b))
    else:
        b.fill_(int(pattern[0]))
    return t


def tp_state_dict(gb, rank, world):
    """This rank's shards: part r of every 2-D tensor (dim 0), 1-D tensors whole."""
    sd, shards = {}, {}
    for i, (name, shape) in enumerate(shapes_for(gb)):
        if len(shape) == 2:
            q, rem = divmod(shape[0], world)
            start = rank * q + min(rank, rem)
            rows = q + (1 if rank < rem else 0)
            sd[name] = fill(torch.empty((rows, shape[1]), dtype=torch.bfloat16), i, start)
            shards[name] = (tuple(shape), [start, 0])
        else:
            sd[name] = fill(torch.empty(shape, dtype=torch.bfloat16), i, 0)
    return sd, shards


def save_ckpt(out, rank, world, port, gb):
    import ckpt.distributed as cd
    dist = init(rank, world, port)
    sd, shards = tp_state_dict(gb, rank, world)
    own = sum(t.numel() * t.element_size() for t in sd.values())
    dist.barrier()
    before = rss_now()
    peak_before = rss_peak()
    t0 = time.time()
    stats = cd.save(sd, out, shards=shards, max_shard_size="1GB", return_stats=True)
    t1 = time.time()
    dist.barrier()
    return {"t0": t0, "t1": t1, "bytes_own": own, "bytes_written": stats["bytes_written"], "rss_before": before,
            "rss_peak": rss_peak(), "rss_peak_before": peak_before}


def save_one(out, gb):
    import ckpt
    sd, _ = tp_state_dict(gb, 0, 1)
    own = sum(t.numel() * t.element_size() for t in sd.values())
    before = rss_now()
    t0 = time.time()
    ckpt.save(sd, out, max_shard_size="1GB", progress=False)
    t1 = time.time()
    return {"t0": t0, "t1": t1, "bytes_own": own, "bytes_written": own, "rss_before": before, "rss_peak": rss_peak()}


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "tp_ckpt":
        r = tp_ckpt(args[0], int(args[1]), int(args[2]), int(args[3]), *(args[4:5] or ["broadcast"]))
    elif mode == "tp_runai":
        r = tp_runai(args[0], int(args[1]), int(args[2]), int(args[3]))
    elif mode == "all_ckpt":
        r = all_ckpt(args[0])
    elif mode == "save_ckpt":
        r = save_ckpt(args[0], int(args[1]), int(args[2]), int(args[3]), float(args[4]))
    elif mode == "save_one":
        r = save_one(args[0], float(args[1]))
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(r), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
