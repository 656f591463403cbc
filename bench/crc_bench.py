"""What checking ZIP CRC-32s costs a load (issue 26, section 3).

A ~2 GB Llama-style torch .bin (bf16, torch.save), warm in the page cache,
loaded whole by ckpt_load_bench with the CRC-32 check on and off in
alternating rounds (each in its own process, each ending with a checksum
over every loaded byte): into pre-touched caller buffers (the I/O path) and
into fresh library buffers (what a plain load does); and `ckpt convert` of
the same file to safetensors (--no-sync, the output removed after each
round), which copies with copy_file_range when it does not check and reads
the bytes through memory when it does.  Prints every round, then the
median and the min-max spread of each.

    python bench/crc_bench.py [--rounds 5] [--dir /tmp/ckpt-crc-bench] [--build build]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


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


def convert(ckpt_bin, path, out, crc):
    args = [ckpt_bin, "convert", path, out, "--no-sync", "-q", "--force"] + ([] if crc == "crc" else ["--no-check-crc"])
    t0 = time.perf_counter()
    subprocess.run(args, check=True)
    seconds = time.perf_counter() - t0
    os.unlink(out)
    return seconds


def run(bench, path, pretouch, crc):
    out = subprocess.run([bench, "load", path, "0", str(pretouch), "buffered", "none", crc],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/ckpt-crc-bench")
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    a = ap.parse_args()
    a.bench = os.path.join(a.build, "ckpt_load_bench")
    os.makedirs(a.dir, exist_ok=True)
    path = os.path.join(a.dir, "pytorch_model.bin")
    if not os.path.exists(path):
        make_checkpoint(path)
    warm(path)
    print(f"{path}: {os.path.getsize(path) / 1e9:.2f} GB, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}", file=sys.stderr)
    results = {}
    out = os.path.join(a.dir, "converted.safetensors")
    gb = os.path.getsize(path) / 1e9
    for pretouch, what in ((1, "pre-touched caller buffers"), (0, "fresh library buffers"), (None, "ckpt convert")):
        if pretouch is None:
            convert(os.path.join(a.build, "ckpt"), path, out, "crc")  # warm-up
        else:
            run(a.bench, path, pretouch, "crc")
        times = {"crc": [], "nocrc": []}
        for r in range(a.rounds):
            order = ("nocrc", "crc") if r % 2 else ("crc", "nocrc")
            for crc in order:
                if pretouch is None:
                    times[crc].append(convert(os.path.join(a.build, "ckpt"), path, out, crc))
                    print(f"{what} round {r} {crc}: {times[crc][-1]:.3f} s", file=sys.stderr)
                    continue
                res = run(a.bench, path, pretouch, crc)
                times[crc].append(res["load_seconds"])
                gb = res["bytes"] / 1e9
                print(f"{what} round {r} {crc}: load {res['load_seconds']:.3f} s "
                      f"(+ checksum {res['seconds'] - res['load_seconds']:.3f} s), {res['threads']} threads",
                      file=sys.stderr)
        summary = {}
        for crc, t in times.items():
            summary[crc] = {"median_s": statistics.median(t), "min_s": min(t), "max_s": max(t),
                            "median_gbps": gb / statistics.median(t)}
        summary["cost"] = summary["crc"]["median_s"] / summary["nocrc"]["median_s"] - 1
        results[what] = summary
        print(f"{what}: check on {summary['crc']['median_s']:.3f} s [{summary['crc']['min_s']:.3f}-"
              f"{summary['crc']['max_s']:.3f}], off {summary['nocrc']['median_s']:.3f} s "
              f"[{summary['nocrc']['min_s']:.3f}-{summary['nocrc']['max_s']:.3f}]: "
              f"{100 * summary['cost']:+.0f}% (median)", file=sys.stderr)
    print(json.dumps({"gb": gb, "load_average": os.getloadavg()[0], "results": results}, indent=1))


if __name__ == "__main__":
    main()
