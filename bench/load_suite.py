"""The load suite of `make bench`: ckpt's engine against the Python loaders
and the machine's ceilings, on the same Llama-shaped checkpoints, warm and
cold, in one run.  Every contender runs in its own process, loads the whole
checkpoint to CPU memory and checksums every byte (timed inside the process;
peak RSS from GNU time).  Writes bench/results/load-<GB>GB.json."""
import json
import os
import subprocess
import sys
import time

from run import (BIN_PATH, DATA, RESULTS, ROOT, drop_caches, machine_facts, make_big_file, make_torch_file, measure,
                 save)

LOAD_BENCH = str(ROOT / "build" / "ckpt_load_bench")
PEERS = [sys.executable, str(ROOT / "bench" / "peers.py")]


def run_json(cmd):
    rss_file = RESULTS / ".rss.tmp"
    RESULTS.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(rss_file), *cmd], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr[-2000:]}")
    rss = int(rss_file.read_text().split()[-1]) * 1024
    rss_file.unlink()
    return json.loads(r.stdout.strip().splitlines()[-1]), rss


def make_sharded(src):
    out = DATA / (src.stem + "-sharded")
    if not out.exists():
        subprocess.run([BIN_PATH, "convert", str(src), str(out), "--max-shard-size", "1GB", "--no-sync",
                        "--no-progress"], check=True)
    return out


MAKE_TENSORIZER = r"""
import sys
from safetensors.torch import load_file
from tensorizer import TensorSerializer
s = TensorSerializer(sys.argv[2])
s.write_state_dict(load_file(sys.argv[1]))
s.close()
"""


def make_tensorizer(src):
    out = DATA / (src.stem + ".tensors")
    if not out.exists():
        subprocess.run([sys.executable, "-c", MAKE_TENSORIZER, str(src), str(out)], check=True)
    return out


def variant_contenders(path):
    """The same file in another layout (1 GB shards, or f32): ckpt, the
    main peers and the ceilings on it."""
    return path, {
        "ckpt → own buffers": ([LOAD_BENCH, "load", str(path), "0", "0", "auto", "none"], [path]),
        "ckpt → pre-touched caller buffers": ([LOAD_BENCH, "load", str(path), "0", "1", "auto", "none"], [path]),
        "safetensors load_file": (PEERS + ["st_load_file", str(path)], [path]),
        "runai-model-streamer": (PEERS + ["runai", str(path)], [path]),
        "fastsafetensors (CPU, nogds)": (PEERS + ["fastsafetensors", str(path)], [path]),
        "ceiling: pread, 2 threads": ([LOAD_BENCH, "pread", str(path), "2", "0"], [path]),
        "ceiling: O_DIRECT pread, 2 threads": ([LOAD_BENCH, "pread", str(path), "2", "1"], [path]),
    }


def contenders_for(gb, full, variant="bf16"):
    if variant == "sharded":
        return variant_contenders(make_sharded(make_big_file(gb)))
    if variant == "f32":
        return variant_contenders(make_big_file(gb, "F32"))
    bf16 = make_big_file(gb)
    c = {
        "ckpt → own buffers": ([LOAD_BENCH, "load", str(bf16), "0", "0", "auto", "none"], [bf16]),
        "ckpt → pre-touched caller buffers": ([LOAD_BENCH, "load", str(bf16), "0", "1", "auto", "none"], [bf16]),
        "safetensors load_file": (PEERS + ["st_load_file", str(bf16)], [bf16]),
        "safetensors safe_open.get_tensor": (PEERS + ["st_get_tensor", str(bf16)], [bf16]),
        "runai-model-streamer": (PEERS + ["runai", str(bf16)], [bf16]),
        "fastsafetensors (CPU, nogds)": (PEERS + ["fastsafetensors", str(bf16)], [bf16]),
        "ceiling: pread, 1 thread": ([LOAD_BENCH, "pread", str(bf16), "1", "0"], [bf16]),
        "ceiling: pread, 2 threads": ([LOAD_BENCH, "pread", str(bf16), "2", "0"], [bf16]),
        "ceiling: O_DIRECT pread, 2 threads": ([LOAD_BENCH, "pread", str(bf16), "2", "1"], [bf16]),
    }
    if gb <= 4:  # f32 output is twice the file: beyond 4 GB it would not fit beside the cache here
        c["ckpt bf16→f32 cast fused → pre-touched"] = ([LOAD_BENCH, "load", str(bf16), "0", "1", "auto", "F32"], [bf16])
    if full:
        sharded = make_sharded(bf16)
        f32 = make_big_file(gb, "F32")
        torch_file = make_torch_file(gb)
        tz = make_tensorizer(bf16)
        c.update({
            "ckpt → own buffers (1 GB shards)": ([LOAD_BENCH, "load", str(sharded), "0", "0", "auto", "none"], [sharded]),
            "safetensors load_file (1 GB shards)": (PEERS + ["st_load_file", str(sharded)], [sharded]),
            "runai-model-streamer (1 GB shards)": (PEERS + ["runai", str(sharded)], [sharded]),
            "ckpt → own buffers (f32 file)": ([LOAD_BENCH, "load", str(f32), "0", "0", "auto", "none"], [f32]),
            "safetensors load_file (f32 file)": (PEERS + ["st_load_file", str(f32)], [f32]),
            "ckpt → own buffers (torch .bin)": ([LOAD_BENCH, "load", str(torch_file), "0", "0", "auto", "none"],
                                                [torch_file]),
            "torch.load (.bin)": (PEERS + ["torch_load", str(torch_file)], [torch_file]),
            "torch.load mmap=True (.bin)": (PEERS + ["torch_load_mmap", str(torch_file)], [torch_file]),
            "tensorizer (CPU)": (PEERS + ["tensorizer", str(tz)], [tz]),
        })
    return bf16, c


def run_load_suite(args):
    sizes = [float(x) for x in str(args.load_gb).split(",") if x]
    variants = [v for v in str(args.load_variants).split(",") if v]
    for size, variant in [(s, v) for s in sizes for v in variants]:
        gb = int(size) if size == int(size) else size
        full = size <= 2 and variant == "bf16"
        bf16, contenders = contenders_for(gb, full, variant)
        nbytes = sum(f.stat().st_size for f in ([bf16] if bf16.is_file() else bf16.iterdir()))
        machine = {}
        # Speeds of memory itself, on buffers of the checkpoint's size up to 2 GiB
        # (the rates do not grow with size; 8 GB copies would not fit beside the cache).
        m = min(nbytes, 2 << 30)
        for what, argv in (("memcpy", [LOAD_BENCH, "memcpy", str(m)]),
                           ("first_touch", [LOAD_BENCH, "firsttouch", str(m)]),
                           ("cast_bf16_to_f32", [LOAD_BENCH, "cast", "BF16", "F32", str(m // 4)]),
                           ("cast_f32_to_bf16", [LOAD_BENCH, "cast", "F32", "BF16", str(m // 4)]),
                           ("cast_f16_to_f32", [LOAD_BENCH, "cast", "F16", "F32", str(m // 4)]),
                           ("cast_f32_to_f16", [LOAD_BENCH, "cast", "F32", "F16", str(m // 4)])):
            doc, _ = run_json(argv)
            machine[what] = {"seconds": doc["seconds"], "gb_per_s": max(doc["bytes"], doc.get("out_bytes", 0)) / doc["seconds"] / 1e9}
            print(f"  {what}: {machine[what]['gb_per_s']:.2f} GB/s")
        results = {}
        for mode in ("warm", "cold"):
            res = {k: {"seconds": [], "rss": [], "bytes": None, "checksum": None} for k in contenders}
            for rnd in range(args.runs + (1 if mode == "warm" else 0)):
                for label, (cmd, paths) in contenders.items():
                    if mode == "cold":
                        drop_caches(paths)
                    else:
                        subprocess.run(["sync"])
                    try:
                        doc, rss = run_json(cmd)
                    except RuntimeError as e:
                        res[label]["error"] = str(e)[-500:]
                        print(f"  {mode} {label}: FAILED {str(e)[-200:]}")
                        continue
                    if mode == "warm" and rnd == 0:
                        continue  # warm-up round: fills the page cache
                    res[label]["seconds"].append(doc["seconds"])
                    res[label]["rss"].append(rss)
                    res[label]["bytes"] = doc["bytes"]
                    res[label]["checksum"] = doc.get("checksum")
                    print(f"  {mode} {label}: {doc['seconds']:.2f} s, {doc['bytes'] / doc['seconds'] / 1e9:.2f} GB/s, "
                          f"{rss / 2**20:,.0f} MiB")
            for label, r in res.items():
                if r["seconds"]:
                    med = sorted(r["seconds"])[len(r["seconds"]) // 2]
                    r.update(median=med, min=min(r["seconds"]), max=max(r["seconds"]),
                             gb_per_s=r["bytes"] / med / 1e9, peak_rss_bytes=max(r["rss"]))
                if label.startswith("ckpt"):
                    cmd, paths = contenders[label]
                    call = " ".join(["ckpt_load_bench", cmd[1], *cmd[3:]])  # the arguments but the file
                    r["measure"] = measure(call, paths[0], mode)
            results[mode] = res
        doc = {"bytes": nbytes, "file": bf16.name, "variant": variant, "runs": args.runs, "machine": machine_facts(),
               "machine_speeds": machine, "results": results, "ratios": ratios(results, machine, nbytes)}
        save(f"load-{gb}GB" + ("" if variant == "bf16" else f"-{variant}"), doc)


def ratios(results, machine, nbytes):
    out = {}
    for mode, res in results.items():
        g = {k: v.get("gb_per_s") for k, v in res.items() if v.get("gb_per_s")}
        r = {}
        for ours in ("ckpt → own buffers", "ckpt → pre-touched caller buffers"):
            if ours not in g:
                continue
            for peer in g:
                if peer != ours and not peer.startswith("ckpt"):
                    r[f"{ours} / {peer}"] = g[ours] / g[peer]
        cast = "ckpt bf16→f32 cast fused → pre-touched"
        if cast in g:
            # bytes counted are the output's (f32: twice the file's)
            r["cast fused load (output GB/s) / memcpy"] = g[cast] / machine["memcpy"]["gb_per_s"]
        out[mode] = r
    return out
