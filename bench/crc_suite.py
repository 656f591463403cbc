"""The crc suite of `make bench` (issue 26, section 3): what checking ZIP
CRC-32s costs a load.

A ~2 GB Llama-style torch .bin (bf16, torch.save), warm in the page cache,
loaded whole by ckpt_load_bench with the CRC-32 check on and off in
alternating rounds (each in its own process, each ending with a checksum
over every loaded byte): into pre-touched caller buffers (the I/O path) and
into fresh library buffers (what a plain load does); and `ckpt convert` of
the same file to safetensors (--no-sync, the output removed after each
round), which copies with copy_file_range when it does not check and reads
the bytes through memory when it does.  In the same run, the speed of
zlib's crc32 (what ckpt folds with PCLMULQDQ instead) against memcpy.

    make bench BENCH_ARGS="crc --runs 5"

Writes bench/results/crc.json."""
import json
import os
import statistics
import subprocess
import sys
import time
import zlib

from run import BIN_PATH, DATA, ROOT, machine_facts, measure, save

LOAD_BENCH = str(ROOT / "build" / "ckpt_load_bench")
CASES = (("pre-touched caller buffers", 1), ("fresh library buffers", 0), ("ckpt convert", None))


def make_checkpoint(path):
    import torch
    g = torch.Generator().manual_seed(0)
    hidden, inter, layers, vocab = 2048, 5632, 18, 32000
    sd = {"model.embed_tokens.weight": torch.randn(vocab, hidden, generator=g).to(torch.bfloat16)}
    for i in range(layers):
        p = f"model.layers.{i}."
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[p + f"self_attn.{name}.weight"] = torch.randn(hidden, hidden, generator=g).to(torch.bfloat16)
        sd[p + "mlp.gate_proj.weight"] = torch.randn(inter, hidden, generator=g).to(torch.bfloat16)
        sd[p + "mlp.up_proj.weight"] = torch.randn(inter, hidden, generator=g).to(torch.bfloat16)
        sd[p + "mlp.down_proj.weight"] = torch.randn(hidden, inter, generator=g).to(torch.bfloat16)
        sd[p + "input_layernorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
        sd[p + "post_attention_layernorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    sd["model.norm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
    torch.save(sd, path)


def warm(path):
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def convert(path, out, crc):
    args = [BIN_PATH, "convert", str(path), str(out), "--no-sync", "-q", "--force"]
    t0 = time.perf_counter()
    subprocess.run(args + ([] if crc == "crc" else ["--no-check-crc"]), check=True)
    seconds = time.perf_counter() - t0
    os.unlink(out)
    return seconds


def load(path, pretouch, crc):
    out = subprocess.run([LOAD_BENCH, "load", str(path), "0", str(pretouch), "buffered", "none", crc],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def rates(nbytes=256 << 20):
    """zlib's crc32 (this process's zlib) and memcpy (ckpt_load_bench), GB/s, best of 3."""
    data = os.urandom(nbytes)
    best = min(_timed(lambda: zlib.crc32(data)) for _ in range(3))
    docs = [json.loads(subprocess.run([LOAD_BENCH, "memcpy", str(nbytes)], capture_output=True, text=True,
                                      check=True).stdout) for _ in range(3)]
    return {"zlib_crc32_gb_per_s": nbytes / best / 1e9, "zlib": zlib.ZLIB_RUNTIME_VERSION,
            "memcpy_gb_per_s": max(d["bytes"] / d["seconds"] for d in docs) / 1e9}


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_crc_suite(args):
    path = DATA / "crc-llama-bf16-2GB.bin"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        make_checkpoint(path)
    warm(path)
    print(f"{path}: {path.stat().st_size / 1e9:.2f} GB, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    results, load_average = {}, [os.getloadavg()[0]]
    out = DATA / "crc-converted.safetensors"
    for what, pretouch in CASES:
        if pretouch is None:
            convert(path, out, "crc")  # warm-up
        else:
            load(path, pretouch, "crc")
        times = {"crc": [], "nocrc": []}
        for r in range(args.runs):
            for crc in (("nocrc", "crc") if r % 2 else ("crc", "nocrc")):
                if pretouch is None:
                    times[crc].append(convert(path, out, crc))
                    print(f"  {what} round {r} {crc}: {times[crc][-1]:.3f} s", flush=True)
                    continue
                res = load(path, pretouch, crc)
                times[crc].append(res["load_seconds"])
                print(f"  {what} round {r} {crc}: load {res['load_seconds']:.3f} s (+ checksum "
                      f"{res['seconds'] - res['load_seconds']:.3f} s), {res['threads']} threads", flush=True)
        summary = {}
        for crc, t in times.items():
            call = (f"ckpt convert --no-sync{'' if crc == 'crc' else ' --no-check-crc'}" if pretouch is None else
                    f"ckpt_load_bench load 0 {pretouch} buffered none {crc}")
            summary[crc] = {"median_s": statistics.median(t), "min_s": min(t), "max_s": max(t), "runs": t,
                            "median_gbps": path.stat().st_size / statistics.median(t) / 1e9,
                            "measure": measure(call, path, "warm")}
        summary["cost"] = summary["crc"]["median_s"] / summary["nocrc"]["median_s"] - 1
        results[what] = summary
        load_average.append(os.getloadavg()[0])
        print(f"  {what}: check on {summary['crc']['median_s']:.3f} s, off {summary['nocrc']['median_s']:.3f} s: "
              f"{100 * summary['cost']:+.0f}% (median)", flush=True)
    speeds = rates()
    print(f"  zlib {speeds['zlib']} crc32 {speeds['zlib_crc32_gb_per_s']:.2f} GB/s, memcpy "
          f"{speeds['memcpy_gb_per_s']:.2f} GB/s", flush=True)
    save("crc", {"suite": "crc", "bytes": path.stat().st_size, "file": path.name, "runs": args.runs,
                 "machine": machine_facts(), "load_average": {"min": min(load_average), "max": max(load_average)},
                 "machine_speeds": speeds, "results": results})


if __name__ == "__main__":
    sys.exit("run it as `make bench BENCH_ARGS=\"crc --runs 5\"`")
