"""transformers' from_pretrained against ckpt.transformers.from_pretrained
for a Hub repo id, over the loopback Hub of the tests (tests/sources/hub.py,
HF_ENDPOINT): wall time and peak RSS of each load, in a fresh process with
an empty Hub cache each run, runs alternating.  Prints one line per run and
the medians; writes nothing under bench/results.

    .venv/bin/python bench/hub_from_pretrained.py [--layers 8] [--runs 3]

The model: a llama of hidden size 1024, intermediate 2816, vocab 32000,
bfloat16, `--layers` layers (8: about 270 MB), in one safetensors file or
shards (--shard 100MB)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
who, repo, cache = sys.argv[1:4]
import torch
if who == "ckpt":
    import ckpt.transformers as lib
else:
    import transformers as lib
t = time.perf_counter()
model = lib.AutoModelForCausalLM.from_pretrained(repo, cache_dir=cache)
wall = time.perf_counter() - t
# VmHWM: this process's own peak (ru_maxrss keeps the parent's across exec)
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"wall_s": wall, "peak_rss_mb": hwm / 1024,
                  "params": sum(p.numel() for p in model.parameters())}))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--shard", default=None, help="max_shard_size, e.g. 100MB (default: one file)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "sources"))
    sys.path.insert(0, str(ROOT / "tests"))
    from hub import HubServer
    import torch
    import transformers
    work = Path(tempfile.mkdtemp(prefix="hub-bench-"))
    config = transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                                      num_hidden_layers=args.layers, num_attention_heads=16, num_key_value_heads=8,
                                      tie_word_embeddings=False, dtype="bfloat16")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(work / "model", **({"max_shard_size": args.shard} if args.shard else {}))
    del model
    files = {p.name: p.read_bytes() for p in (work / "model").iterdir()}
    size = sum(len(b) for n, b in files.items() if n.endswith(".safetensors"))
    print(f"model: {size / 1e6:.0f} MB of safetensors in {sum(n.endswith('.safetensors') for n in files)} file(s); "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    results = {"transformers": [], "ckpt": []}
    with HubServer() as hub:
        hub.add("org/bench", files)
        env = dict(os.environ, HF_ENDPOINT=hub.endpoint, HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1",
                   HF_HOME=str(work / "home"), HF_HUB_DISABLE_PROGRESS_BARS="1")
        for k in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE"):
            env.pop(k, None)
        for run in range(args.runs):
            for who in ("transformers", "ckpt"):
                cache = work / f"cache-{who}-{run}"  # empty each run
                r = subprocess.run([sys.executable, "-c", CHILD, who, "org/bench", str(cache)], env=env,
                                   capture_output=True, text=True)
                if r.returncode:
                    sys.exit(r.stderr[-3000:])
                got = json.loads(r.stdout.strip().splitlines()[-1])
                results[who].append(got)
                print(f"run {run} {who:12s} wall {got['wall_s']:6.2f} s  peak RSS {got['peak_rss_mb']:7.0f} MB  "
                      f"(load average {os.getloadavg()[0]:.2f})", flush=True)
                subprocess.run(["rm", "-rf", str(cache)])
    for who, rs in results.items():
        print(f"median {who:12s} wall {statistics.median(r['wall_s'] for r in rs):6.2f} s  "
              f"peak RSS {statistics.median(r['peak_rss_mb'] for r in rs):7.0f} MB")


if __name__ == "__main__":
    main()
