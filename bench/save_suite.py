"""The save suite of `make bench` (issue 32): saving while training.

- **Incremental** (bench/save_worker.py incremental): a bf16 state dict of
  --save-model-gb in memory, 5% of its tensors changed since the base; ckpt's
  incremental save against its full save and against torch.save,
  save_torch_state_dict and DCP's save and async_save, on this machine's disk
  and on an XFS image with reflink=1 mounted on a loop device (as root):
  time (with os.sync() in the timed region), bytes of the output, and the
  blocks the file system gained (statvfs).
- **Background** (bench/save_worker.py background): a CPU training loop that
  modifies every parameter each step, saving --bg-gb every few steps with
  ckpt's background saves (staging "copy" and "fork") and DCP's async_save,
  on 1 and 4 gloo ranks: the loop's stall per save, the time to the commit,
  the extra memory (PSS of the process tree above its level before the save).

    make bench BENCH_ARGS="save --save-model-gb 4 --bg-gb 2 --runs 3"

Writes bench/results/save-incremental.json and bench/results/save-background.json."""
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from run import DATA, ROOT, machine_facts, save

WORKER = str(ROOT / "bench" / "save_worker.py")


def _worker(*args, env=None):
    r = subprocess.run([sys.executable, WORKER, *map(str, args)], capture_output=True, text=True, env=env)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        raise RuntimeError(f"save_worker.py {' '.join(map(str, args))} failed ({r.returncode})")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _xfs(size_gb):
    """An XFS file system with reflink=1 on a loop device; (mount point, image) or None."""
    image = DATA / "save-xfs.img"
    mnt = Path(tempfile.mkdtemp(prefix="ckpt-xfs-"))
    with open(image, "wb") as f:
        f.truncate(int(size_gb * 1e9))
    for cmd in (["mkfs.xfs", "-q", "-f", "-m", "reflink=1", str(image)], ["mount", "-o", "loop", str(image), str(mnt)]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"  no XFS: {' '.join(cmd)}: {r.stderr.strip()}", flush=True)
            image.unlink()
            return None, None
    return mnt, image


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_save_suite(args):
    DATA.mkdir(parents=True, exist_ok=True)
    changed = 0.05
    incremental = {}
    disk = DATA / "save-incremental"
    disk.mkdir(exist_ok=True)
    print(f"== incremental: {args.save_model_gb} GB, {changed:.0%} of the tensors changed, {args.runs} rounds",
          flush=True)
    incremental["this machine's disk"] = _worker("incremental", disk, args.save_model_gb, changed, args.runs)
    mnt, image = _xfs(2.5 * args.save_model_gb + 1)
    if mnt:
        try:
            incremental["XFS, reflink=1 (loop device)"] = _worker("incremental", mnt, args.save_model_gb, changed,
                                                                  args.runs)
        finally:
            subprocess.run(["umount", str(mnt)], check=False)
            image.unlink()
    save("save-incremental", {"suite": "save", "part": "incremental", "gb": args.save_model_gb, "changed": changed,
                              "runs": args.runs, "machine": machine_facts(), "file_systems": incremental})

    background = {}
    out = DATA / "save-background"
    out.mkdir(exist_ok=True)
    for world in (1, 4):
        print(f"== background: {args.bg_gb} GB on {world} rank(s), {args.runs} saves each", flush=True)
        port = _free_port()
        procs = [subprocess.Popen([sys.executable, WORKER, "background", str(out), str(args.bg_gb), str(args.runs),
                                   str(r), str(world), str(port)], stdout=subprocess.PIPE, text=True)
                 for r in range(world)]
        docs = []
        for p in procs:
            stdout, _ = p.communicate()
            if p.returncode != 0:
                raise RuntimeError(f"a background rank failed ({p.returncode})")
            docs.append(json.loads(stdout.strip().splitlines()[-1]))
        background[f"{world} rank{'s' if world > 1 else ''}"] = docs
    save("save-background", {"suite": "save", "part": "background", "gb": args.bg_gb, "saves": args.runs,
                             "machine": machine_facts(), "worlds": background})


if __name__ == "__main__":
    sys.exit("run it as `make bench BENCH_ARGS=\"save\"`")
