"""The jax suite of `make bench`: a 2 GB Llama-shaped bf16 checkpoint onto 8
CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=8), with the
2-D arrays sharded PartitionSpec('x', None) on an 8x1 mesh ("rows") or
PartitionSpec('x', 'y') on a 4x2 mesh ("rect"), 1-D arrays replicated.

Contenders, each in its own process, alternating, warm (a warm-up round,
then --runs rounds) and cold (drop_caches before each): ckpt.jax.load of the
safetensors file and of a Flax msgpack copy; the ways of the peers —
safetensors.numpy.load_file or safetensors.flax.load_file then
jax.device_put with the shardings, flax.serialization.msgpack_restore then
jax.device_put, and an Orbax checkpoint of the same arrays restored with the
shardings.  Every contender checksums every byte of every device's shard.
Peak RSS is measured inside the process above its RSS once jax has started
(VmHWM after clear_refs), and as the process's peak by GNU time.

Two JAX processes (jax.distributed on localhost, 4 CPU devices each) show
the bytes each process reads against those its devices need.

Writes bench/results/jax-<GB>GB.json (and .png)."""
import shutil
import socket
import subprocess
import sys

from load_suite import run_json
from run import DATA, ROOT, drop_caches, machine_facts, make_big_file, save

PEERS = [sys.executable, str(ROOT / "bench" / "jax_peers.py")]


def median(xs):
    return sorted(xs)[len(xs) // 2]


def make_copies(path):
    """A Flax msgpack copy and an Orbax checkpoint of the same arrays."""
    msgpack, orbax = path.with_suffix(".msgpack"), DATA / (path.stem + ".orbax")
    if not msgpack.exists() or not orbax.exists():
        code = f"""
import numpy as np, ckpt, os
from flax import serialization
tree = ckpt.load({str(path)!r}, "np")
if not os.path.exists({str(msgpack)!r}):
    with open({str(msgpack)!r} + ".tmp", "wb") as f:
        f.write(serialization.msgpack_serialize(tree))
    os.rename({str(msgpack)!r} + ".tmp", {str(msgpack)!r})
if not os.path.exists({str(orbax)!r}):
    import orbax.checkpoint as ocp
    c = ocp.StandardCheckpointer()
    c.save({str(orbax)!r} + ".tmp", tree)
    c.wait_until_finished()
    os.rename({str(orbax)!r} + ".tmp", {str(orbax)!r})
"""
        shutil.rmtree(str(orbax) + ".tmp", ignore_errors=True)
        subprocess.run([sys.executable, "-c", code], check=True)
    return msgpack, orbax


def two_processes(mesh, path):
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    rss_files = [ROOT / "bench" / "results" / f".rss{i}.tmp" for i in range(2)]
    procs = [subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", str(rss_files[i]), *PEERS, "ckpt", mesh, str(path),
                               str(i), str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    docs = []
    for p, rf in zip(procs, rss_files):
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"two-process ckpt {mesh} failed: {err[-2000:]}")
        import json
        doc = json.loads(out.strip().splitlines()[-1])
        doc["rss_process"] = int(rf.read_text().split()[-1]) * 1024
        rf.unlink()
        docs.append(doc)
    return docs


def run_jax_suite(args):
    gb = args.jax_gb
    gb = int(gb) if gb == int(gb) else gb
    path = make_big_file(gb)
    msgpack, orbax = make_copies(path)
    files = [path, msgpack, orbax]
    contenders = {
        "ckpt.jax.load (safetensors)": ("ckpt", path),
        "ckpt.jax.load (Flax msgpack)": ("ckpt", msgpack),
        "safetensors.numpy.load_file + jax.device_put": ("st_numpy", path),
        "safetensors.flax.load_file + jax.device_put": ("st_flax", path),
        "flax msgpack_restore + jax.device_put": ("msgpack", msgpack),
        "orbax restore with shardings": ("orbax", orbax),
    }
    results = {}
    for mesh in ("rows", "rect"):
        for cold in (False, True):
            group = f"{mesh}{'_cold' if cold else ''}"
            res = {label: {"seconds": [], "load_seconds": [], "rss_over_base": [], "rss_process": []}
                   for label in contenders}
            for rnd in range(args.runs + (0 if cold else 1)):
                for label, (mode, p) in contenders.items():
                    if cold:
                        drop_caches(files)
                    else:
                        subprocess.run(["sync"])
                    doc, rss = run_json(PEERS + [mode, mesh, str(p)])
                    if rnd == 0 and not cold:
                        continue
                    r = res[label]
                    r["seconds"].append(doc["seconds"])
                    r["load_seconds"].append(doc["load_seconds"])
                    r["rss_over_base"].append(doc["rss_peak"] - doc["rss_base"])
                    r["rss_process"].append(rss)
                    r["array_bytes"], r["checksum"] = doc["array_bytes"], doc["checksum"]
                    for k in ("bytes_read", "bytes_needed"):
                        if k in doc:
                            r[k] = doc[k]
                    print(f"  {group} {label}: load {doc['load_seconds']:.2f} s, +checksum {doc['seconds']:.2f} s, "
                          f"peak {(doc['rss_peak'] - doc['rss_base']) / 2**20:,.0f} MiB over the start "
                          f"(arrays {doc['array_bytes'] / 2**20:,.0f} MiB), process {rss / 2**20:,.0f} MiB")
            for label, r in res.items():
                r.update(median=median(r["seconds"]), load_median=median(r["load_seconds"]),
                         min=min(r["load_seconds"]), max=max(r["load_seconds"]),
                         rss_over_base_bytes=max(r["rss_over_base"]), peak_rss_bytes=max(r["rss_process"]))
            sums = {r["checksum"] for r in res.values()}
            if len(sums) != 1:
                raise RuntimeError(f"{group}: contenders disagree on the data: {sums}")
            results[group] = res
    # Two processes, 4 devices each: each reads its own blocks.
    multi = {}
    for mesh in ("rows", "rect"):
        runs = [two_processes(mesh, path) for _ in range(args.runs)]
        last = runs[-1]
        multi[mesh] = {"load_seconds": [max(d["load_seconds"] for d in r) for r in runs],
                       "per_process": [{k: d[k] for k in ("process", "bytes_read", "bytes_needed", "array_bytes",
                                                          "rss_base", "rss_peak", "rss_process")} for d in last]}
        for d in last:
            print(f"  two processes {mesh}: process {d['process']} read {d['bytes_read'] / 2**20:,.0f} MiB "
                  f"(needed {d['bytes_needed'] / 2**20:,.0f} MiB of the file's {path.stat().st_size / 2**20:,.0f})")
    arrays = results["rows"]["ckpt.jax.load (safetensors)"]["array_bytes"]
    target = 1.1 * arrays + (64 << 20)
    ratios = {}
    for mesh in ("rows", "rect"):
        ours = results[mesh]["ckpt.jax.load (safetensors)"]
        ratios[f"{mesh}: ckpt peak RSS over start / arrays"] = ours["rss_over_base_bytes"] / ours["array_bytes"]
        ratios[f"{mesh}: ckpt peak RSS within 1.1 x arrays + 64 MiB"] = ours["rss_over_base_bytes"] <= target
        for label in contenders:
            if not label.startswith("ckpt"):
                peer = results[mesh][label]
                ratios[f"{mesh}: {label} time / ckpt"] = peer["load_median"] / ours["load_median"]
                ratios[f"{mesh}: {label} peak RSS / ckpt"] = peer["rss_over_base_bytes"] / ours["rss_over_base_bytes"]
    for k, v in ratios.items():
        print(f"  {k}: {v:.2f}" if not isinstance(v, bool) else f"  {k}: {v}")
    facts = machine_facts()
    for mod in ("jax", "flax", "orbax.checkpoint"):
        facts[mod] = subprocess.run([sys.executable, "-c", f"import {mod} as m; print(m.__version__)"],
                                    capture_output=True, text=True).stdout.strip() or None
    save(f"jax-{gb}GB", {"suite": "jax", "bytes": path.stat().st_size, "file": path.name, "runs": args.runs,
                         "devices": 8, "machine": facts, "results": results, "two_processes": multi,
                         "ratios": ratios})
