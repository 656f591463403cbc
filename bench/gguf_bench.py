#!/usr/bin/env python3
"""GGUF conversions against gguf-py (issue 15), each contender in its own
process (peak RSS from GNU time), alternating, after a warm-up run:

  to-gguf-bf16   a bf16 safetensors file → GGUF BF16 in ~1 GB splits:
                 ckpt convert | gguf-py GGUFWriter fed the same tensors | cp
  to-gguf-q8_0   the same → GGUF Q8_0 (matrices; vectors stay bf16):
                 ckpt convert --dtype q8_0 | GGUFWriter + gguf.quants.quantize
  q8_0-to-bf16   that Q8_0 GGUF → bf16 safetensors:
                 ckpt convert --dtype bf16 | GGUFReader + gguf.quants.dequantize
                 + safetensors.torch.save_file | cp of the bf16 source (a file
                 of the output's size: the bytes the conversion writes, about
                 twice those it reads) | cp-source, cp of the Q8_0 GGUF

Outputs are checked equal between ckpt and gguf-py once, outside the timed
runs.  Usage: flock /work/bench.lock .venv/bin/python bench/gguf_bench.py
[--gb 4] [--runs 3] [--peer-runs 1] [--dir /tmp/ckpt-gguf-bench]"""
import argparse
import filecmp
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import suites  # noqa: E402

CKPT = os.environ.get("CKPT_BIN", str(ROOT / "build" / "ckpt"))
PY = sys.executable

GGUFPY_WRITE = r'''
import sys, numpy as np, gguf, torch
from safetensors import safe_open
src, dst, qtype, split = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
w = gguf.GGUFWriter(dst, "llama", split_max_size=split)
# GGUFWriter holds every tensor until write_tensors_to_file (as convert_hf_to_gguf does)
with safe_open(src, "pt") as f:
    for name in f.keys():
        t = f.get_tensor(name)
        if qtype == "q8_0" and t.ndim >= 2:
            w.add_tensor(name, gguf.quants.quantize(t.float().numpy(), gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, t.view(torch.uint16).numpy(), raw_dtype=gguf.GGMLQuantizationType.BF16)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
'''

GGUFPY_READ = r'''
import sys, numpy as np, gguf, torch
from safetensors.torch import save_file
src, dst = sys.argv[1], sys.argv[2]
r = gguf.GGUFReader(src)
out = {}
for t in r.tensors:
    if t.tensor_type == gguf.GGMLQuantizationType.BF16:
        out[t.name] = torch.from_numpy(np.array(t.data).view(np.int16)).view(torch.bfloat16).reshape(
            tuple(reversed([int(d) for d in t.shape])))
    else:
        out[t.name] = torch.from_numpy(gguf.quants.dequantize(t.data, t.tensor_type)).bfloat16()
save_file(out, dst)
'''


def make_source(path, gb):
    """Llama-like bf16 tensors (embeddings, attention, MLP, norms) of about `gb` GB."""
    import torch
    from safetensors.torch import save_file
    d, ff, vocab = 2048, 5632, 32000
    layer = 4 * d * d + 3 * d * ff + 2 * d
    layers = max(1, int((gb * 1e9 / 2 - 2 * vocab * d) // layer))
    gen = torch.Generator().manual_seed(0)
    sd = {"model.embed_tokens.weight": torch.randn(vocab, d, generator=gen).bfloat16()}
    for i in range(layers):
        p = f"model.layers.{i}."
        for n in ("q", "k", "v", "o"):
            sd[p + f"self_attn.{n}_proj.weight"] = (torch.randn(d, d, generator=gen) * 0.02).bfloat16()
        sd[p + "mlp.gate_proj.weight"] = (torch.randn(ff, d, generator=gen) * 0.02).bfloat16()
        sd[p + "mlp.up_proj.weight"] = (torch.randn(ff, d, generator=gen) * 0.02).bfloat16()
        sd[p + "mlp.down_proj.weight"] = (torch.randn(d, ff, generator=gen) * 0.02).bfloat16()
        sd[p + "input_layernorm.weight"] = torch.ones(d).bfloat16()
        sd[p + "post_attention_layernorm.weight"] = torch.ones(d).bfloat16()
    sd["model.norm.weight"] = torch.ones(d).bfloat16()
    sd["lm_head.weight"] = (torch.randn(vocab, d, generator=gen) * 0.02).bfloat16()
    save_file(sd, str(path))


def _gguf_version():
    from importlib.metadata import version
    return version("gguf")


def run(cmd):
    """Seconds and peak RSS (bytes) of a command in its own process.  The
    RSS is GNU time's: a child forked from this Python process would start
    with its peak (Linux keeps a process's high-water mark across exec)."""
    with tempfile.NamedTemporaryFile("r") as rss:
        t0 = time.perf_counter()
        p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name, *map(str, cmd)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE)
        dt = time.perf_counter() - t0
        if p.returncode != 0:
            raise RuntimeError(f"{cmd}: {p.stderr.decode()}")
        return dt, int(rss.read().split()[-1]) * 1024


def clean(paths):
    for p in paths:
        for f in Path(p).parent.glob(Path(p).stem + "*"):
            if f.is_dir():
                shutil.rmtree(f)
            else:
                f.unlink()


def drop_cache(dirpath):
    for f in Path(dirpath).glob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/ckpt-gguf-bench")
    ap.add_argument("--split", default="1G")
    ap.add_argument("--peer-runs", type=int, default=None,
                    help="timed runs of gguf-py (slow at 4 GB), default --runs")
    ap.add_argument("--make-source")
    ap.add_argument("--rss-only", action="store_true",
                    help="run each contender once more under GNU time and record its peak RSS in gguf.json")
    args = ap.parse_args()
    if args.make_source:
        make_source(args.make_source, args.gb)
        return
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    src = d / "src.safetensors"
    # The parent stays small (no torch): a forked child starts with its
    # parent's peak RSS, which would show in every contender's figure.
    if not src.exists():
        subprocess.run([PY, __file__, "--make-source", str(src), "--gb", str(args.gb)], check=True)
    kv = d / "kv.json"
    kv.write_text('{"general.architecture": "llama"}')  # what GGUFWriter(path, "llama") writes first
    split_bytes = int(float(args.split[:-1]) * (1e9 if args.split.endswith("G") else 1e6))
    q8 = d / "q8.gguf"
    if not q8.exists():
        subprocess.run([CKPT, "convert", src, q8, "--dtype", "q8_0", "--gguf-kv", kv, "--no-sync"], check=True)
    cases = {
        "to-gguf-bf16": {
            "ckpt": lambda o: [CKPT, "convert", src, o, "--split-max-size", args.split, "--gguf-kv", kv, "--no-sync"],
            "gguf-py": lambda o: [PY, "-c", GGUFPY_WRITE, src, o, "bf16", str(split_bytes)],
            "cp": lambda o: ["cp", src, o],
        },
        "to-gguf-q8_0": {
            "ckpt": lambda o: [CKPT, "convert", src, o, "--dtype", "q8_0", "--split-max-size", args.split,
                               "--gguf-kv", kv, "--no-sync"],
            "gguf-py": lambda o: [PY, "-c", GGUFPY_WRITE, src, o, "q8_0", str(split_bytes)],
        },
        "q8_0-to-bf16": {
            "ckpt": lambda o: [CKPT, "convert", q8, o, "--dtype", "bf16", "--no-sync"],
            "gguf-py": lambda o: [PY, "-c", GGUFPY_READ, q8, o],
            # Writing a fresh page-cache page costs more than reading a
            # cached one (ext4 on a 2-vCPU VM: dd of the output's size from
            # /dev/zero alone takes 0.44x of cp of the Q8_0 source), so cp
            # of a file the output's size is what the conversion can match.
            "cp": lambda o: ["cp", src, o],
            "cp-source": lambda o: ["cp", q8, o],
        },
    }
    if args.rss_only:
        out = ROOT / "bench" / "results" / "gguf.json"
        doc = json.loads(out.read_text())
        for case, contenders in cases.items():
            ext = ".safetensors" if case == "q8_0-to-bf16" else ".gguf"
            rss = {}
            for name, cmd in contenders.items():
                o = str(d / f"out-{case}-{name}{ext}")
                clean([o])
                rss[name] = run(cmd(o))[1]
                clean([o])
                print(f"{case:14s} {name:8s} peak RSS {rss[name] / 2**20:,.1f} MiB", flush=True)
            doc["cases"][case]["peak_rss_gnu_time"] = rss
        doc["provenance_peak_rss"] = suites.provenance("gguf")  # the RSS column's run
        out.write_text(json.dumps(doc, indent=1))
        return
    results = {"provenance": suites.provenance("gguf", cold="fadvise"),
               "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
               "command": " ".join(sys.argv), "gguf": __import__("gguf").__version__ if False else _gguf_version(),
               "source_bytes": src.stat().st_size, "q8_bytes": q8.stat().st_size, "split": args.split, "cases": {}}
    for case, contenders in cases.items():
        ext = ".safetensors" if case == "q8_0-to-bf16" else ".gguf"
        outs = {name: str(d / f"out-{case}-{name}{ext}") for name in contenders}
        # warm-up, and the outputs checked equal
        for name, cmd in contenders.items():
            clean([outs[name]])
            run(cmd(outs[name]))
        if case != "q8_0-to-bf16":
            a = sorted(d.glob(f"out-{case}-ckpt*.gguf"))
            b = sorted(d.glob(f"out-{case}-gguf-py*.gguf"))
            same = len(a) == len(b) and all(filecmp.cmp(x, y, shallow=False) for x, y in zip(a, b))
        else:
            check = ("import sys, torch; from safetensors.torch import load_file; x, y = load_file(sys.argv[1]), "
                     "load_file(sys.argv[2]); sys.exit(0 if x.keys() == y.keys() and all(torch.equal(x[k].view("
                     "torch.int16), y[k].view(torch.int16)) for k in x) else 1)")
            same = subprocess.run([PY, "-c", check, outs["ckpt"], outs["gguf-py"]]).returncode == 0
        runs = {name: [] for name in contenders}
        for mode in ("warm", "cold"):
            for r in range(args.runs):
                for name, cmd in contenders.items():
                    if name == "gguf-py" and r >= (args.peer_runs or args.runs):
                        continue
                    clean([outs[name]])
                    # No contender pays for the one before it: neither syncs
                    # (--no-sync, cp), so the last run's gigabytes of dirty
                    # pages would otherwise be written back during this one.
                    os.sync()
                    if mode == "cold":
                        drop_cache(d)
                    secs, rss = run(cmd(outs[name]))
                    runs[name].append({"mode": mode, "seconds": secs, "peak_rss": rss})
        clean(outs.values())
        results["cases"][case] = {"identical_outputs": same, "runs": runs}
        for name, rs in runs.items():
            for mode in ("warm", "cold"):
                xs = sorted(x["seconds"] for x in rs if x["mode"] == mode)
                rss = max(x["peak_rss"] for x in rs if x["mode"] == mode)
                print(f"{case:14s} {name:8s} {mode}: median {xs[len(xs) // 2]:.2f} s "
                      f"(min {xs[0]:.2f}, max {xs[-1]:.2f}), peak RSS {rss / 2**20:.0f} MiB", flush=True)
        print(f"{case}: outputs identical: {same}", flush=True)
    out = ROOT / "bench" / "results" / "gguf.json"
    out.write_text(json.dumps(results, indent=1))
    print("wrote", out)


if __name__ == "__main__":
    main()
