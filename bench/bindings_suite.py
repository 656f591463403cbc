"""The bindings suite (`make bench BENCH_ARGS="bindings"`), after
../shared/BENCHMARKING.md: contenders in their own processes, alternating,
a warm-up then --runs measured rounds, peak RSS from GNU time, every byte
checksummed, warm and cold cache.

- Rust: bindings/rust/examples/import_resnet.rs (release build) reads a
  torchvision-shaped ResNet-152 state dict (60.2M f32 parameters, written by
  torch.save) into typed Vecs — with the engine (Plan::load_vecs) and one
  tensor at a time (Tensor::to_vec) — against torch.load; each checksums
  every byte (the example also reports its checksum's cost alone).
  Target: peak RSS ≤ file size + 64 MiB.
- Elixir: bench/bindings_elixir.exs saves a ~1 GB nested parameter tree
  (maps, lists, tuples of f32 tensors) as 200 MB shards with Ckpt.save, and
  loads it back with Ckpt.load_tree (zero-copy, and copying), each phase in
  its own BEAM; time, the BEAM's peak :erlang.memory and its peak RSS,
  against the data's size, with `cp -r` + `sync` of the same shards as the
  write ceiling.

Results: bench/results/bindings.json; bench/report.py renders the table.
"""
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import run as harness  # noqa: E402

RUST = ROOT / "bindings" / "rust"
ELIXIR = ROOT / "bindings" / "elixir"

TORCH_LOAD = r"""
import sys, time, zlib, torch
t0 = time.perf_counter()
sd = torch.load(sys.argv[1], weights_only=True)
n = sum(t.numel() * t.element_size() for t in sd.values())
c = 0
for t in sd.values():
    c = zlib.crc32(t.contiguous().reshape(-1).view(torch.uint8).numpy(), c)  # touch every byte
print("tensors", len(sd)); print("bytes", n); print("seconds", time.perf_counter() - t0)
"""


def env():
    e = dict(os.environ)
    e["CKPT_LIB_DIR"] = str(ROOT / "build")
    return e


def measured(cmd, cwd=None):
    """(wall seconds, peak RSS bytes, {key: value} printed by the command)."""
    rss_file = harness.RESULTS / ".rss.tmp"
    harness.RESULTS.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(rss_file), *cmd], capture_output=True, text=True,
                       cwd=cwd, env=env())
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{r.stdout}\n{r.stderr}")
    rss = int(rss_file.read_text().split()[-1]) * 1024
    rss_file.unlink()
    out = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = float(parts[1]) if "." in parts[1] else int(parts[1])
            except ValueError:
                out[parts[0]] = parts[1]
    return wall, rss, out


def warm(paths):
    for p in paths:
        for f in ([p] if p.is_file() else sorted(p.rglob("*"))):
            if f.is_file():
                subprocess.run(["cat", str(f)], stdout=subprocess.DEVNULL)


def stats(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def rust_suite(args):
    src = harness.DATA / "resnet152.pt"
    if not src.exists():
        harness.DATA.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(ROOT / "bindings" / "tests" / "fixtures.py"), "resnet152", str(src)],
                       check=True)
    subprocess.run(["cargo", "build", "--release", "--offline", "--example", "import_resnet",
                    "--manifest-path", str(RUST / "Cargo.toml")], check=True, env=env())
    example = str(RUST / "target" / "release" / "examples" / "import_resnet")
    size = src.stat().st_size
    contenders = {
        "Rust ckpt: Plan::load_vecs into typed Vecs": [example, str(src)],
        "Rust ckpt: Tensor::to_vec, one tensor at a time": [example, str(src), "--per-tensor"],
        "torch.load(weights_only=True)": [sys.executable, "-c", TORCH_LOAD, str(src)],
    }
    results = {mode: {k: {"seconds": [], "rss": [], "inner": []} for k in contenders} for mode in ("warm", "cold")}
    for mode in ("warm", "cold"):
        for rnd in range(args.runs + 1):
            for label, cmd in contenders.items():
                if mode == "warm":
                    warm([src])
                else:
                    harness.drop_caches([src])
                wall, rss, out = measured(cmd)
                if rnd:
                    r = results[mode][label]
                    r["seconds"].append(wall)
                    r["rss"].append(rss)
                    r["inner"].append({k: out.get(k) for k in ("seconds", "load_seconds", "checksum_seconds")})
                print(f"  {mode} round {rnd} {label:52s} {wall:6.2f} s  RSS {rss / 2**20:8.1f} MiB", flush=True)
    doc = {"file": src.name, "file_bytes": size, "parameters": None, "runs": args.runs, "results": {}}
    _, _, out = measured(contenders["Rust ckpt: Plan::load_vecs into typed Vecs"])
    doc["tensors"], doc["data_bytes"] = out["tensors"], out["bytes"]
    doc["parameters"] = out["elements"]
    for mode, res in results.items():
        doc["results"][mode] = {}
        for label, r in res.items():
            s = stats(r["seconds"])
            s["peak_rss_bytes"] = max(r["rss"])
            s["rss_over_file_mib"] = (max(r["rss"]) - size) / 2**20
            s["within_target"] = max(r["rss"]) <= size + (64 << 20)
            if r["inner"][0].get("checksum_seconds") is not None:
                s["checksum_seconds"] = statistics.median(i["checksum_seconds"] for i in r["inner"])
                s["load_seconds"] = statistics.median(i["load_seconds"] for i in r["inner"])
            doc["results"][mode][label] = s
    return doc


def elixir_suite(args):
    data = harness.DATA / "elixir-tree"
    script = str(ROOT / "bench" / "bindings_elixir.exs")
    subprocess.run(["mix", "compile"], cwd=ELIXIR, check=True, env=env())
    mix = ["mix", "run", "--no-compile", script]
    results = {k: {"seconds": [], "rss": [], "out": []} for k in
               ("save (sharded, fsync)", "cp -r + sync of the shards", "load_tree, zero-copy",
                "load_tree, copy: true", "load_tree, zero-copy, cold cache")}
    for rnd in range(args.runs + 1):
        shutil.rmtree(data, ignore_errors=True)
        for f in (data.with_suffix(".crc"),):
            f.unlink(missing_ok=True)
        runs = [
            ("save (sharded, fsync)", mix + ["save", str(data), str(args.elixir_gb), "200MB"], None),
            ("cp -r + sync of the shards", ["sh", "-c", f"rm -rf '{data}.cp' && cp -r '{data}' '{data}.cp' && sync"],
             None),
            ("load_tree, zero-copy", mix + ["load", str(data), "zero_copy"], "warm"),
            ("load_tree, copy: true", mix + ["load", str(data), "copy"], "warm"),
            ("load_tree, zero-copy, cold cache", mix + ["load", str(data), "zero_copy"], "cold"),
        ]
        for label, cmd, cache in runs:
            if cache == "warm":
                warm([data])
            elif cache == "cold":
                harness.drop_caches([data])
            else:
                subprocess.run(["sync"])
            wall, rss, out = measured(cmd, cwd=ELIXIR)
            if rnd:
                results[label]["seconds"].append(out.get("seconds", wall))
                results[label]["rss"].append(rss)
                results[label]["out"].append(out)
            print(f"  round {rnd} {label:36s} {out.get('seconds', wall):6.2f} s  RSS {rss / 2**20:8.1f} MiB "
                  f"BEAM peak {out.get('beam_total_peak', 0) / 2**20:8.1f} MiB", flush=True)
        shutil.rmtree(str(data) + ".cp", ignore_errors=True)
    out0 = results["save (sharded, fsync)"]["out"][0]
    doc = {"data_bytes": out0["data_bytes"], "tensors": out0["tensors"], "files": out0["files"],
           "max_shard_size": "200MB", "runs": args.runs, "results": {}}
    for label, r in results.items():
        s = stats(r["seconds"])
        s["peak_rss_bytes"] = max(r["rss"])
        if r["out"][0].get("beam_total_peak"):
            s["beam_total_peak_bytes"] = max(o["beam_total_peak"] for o in r["out"])
            s["beam_binary_peak_bytes"] = max(o["beam_binary_peak"] for o in r["out"])
            s["beam_total_before_bytes"] = max(o["beam_total_before"] for o in r["out"])
        for key in ("checksum_seconds", "vmrss_before", "rss_anon", "rss_file"):
            if key in r["out"][0]:
                s[key] = statistics.median(o[key] for o in r["out"])
        doc["results"][label] = s
    shutil.rmtree(data, ignore_errors=True)
    data.with_suffix(".crc").unlink(missing_ok=True)
    return doc


def run_bindings_suite(args):
    doc = {"suite": "bindings", "machine": harness.machine_facts()}
    for tool, name in (("cargo", "rust"), ("mix", "elixir")):
        if not shutil.which(tool):
            print(f"SKIP bindings/{name}: no {tool} on PATH (make test-bindings installs it)")
            continue
        probe = ["rustc", "--version"] if tool == "cargo" else ["elixir", "--version"]
        versions = subprocess.run(probe, capture_output=True, text=True).stdout.strip().splitlines()
        doc[name] = (rust_suite if name == "rust" else elixir_suite)(args)
        doc[name]["toolchain"] = versions[-1] if versions else tool
    harness.save("bindings", doc)
    return doc
