"""A quick from_pretrained(dir, gguf_file=...) of a llama.cpp GGUF: transformers'
own loader (its numpy dequantization) against ckpt.transformers (the library's
GGUF → Hugging Face mapping, read by the engine into the model built on meta).
Each load runs in a fresh process (warm page cache: one untimed run first);
the figures are the load's wall time and the process's peak RSS above what it
held after its imports (ru_maxrss), medians of the runs, loaders interleaved:

    .venv/bin/python bench/transformers_gguf_quick.py /tmp/gguf-bench 3 [f16:auto,q8_0:auto]

makes (once) a random Qwen3 of 8 layers, hidden size 1024, its vocabulary
Qwen2's 151936 (about 0.25 G parameters, tied embeddings), with Qwen2's
tokenizer (tests/interop/test_llamacpp.py's), converts it with build/ckpt to
F16, BF16 and Q8_0 GGUFs in DIR, and loads each with dtype="auto" (float32,
transformers' rule for a GGUF) and the first also with dtype=bfloat16."""
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=8, num_attention_heads=8,
             num_key_value_heads=4, head_dim=128)
WORKER = r"""
import json, resource, sys, time, torch, transformers, ckpt.transformers
path, which, dtype = sys.argv[1], sys.argv[2], sys.argv[3]
kw = {"head_dim": 128} | ({} if dtype == "auto" else {"dtype": getattr(torch, dtype)})
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cls = transformers.AutoModelForCausalLM if which == "transformers" else ckpt.transformers.AutoModelForCausalLM
t = time.perf_counter()
model = cls.from_pretrained(str(__import__("pathlib").Path(path).parent), gguf_file=path.rsplit("/", 1)[1], **kw)
wall = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
params = sum(p.numel() * p.element_size() for p in model.parameters())
print(json.dumps({"wall": wall, "peak_mib": (peak - base) / 1024, "params_mib": params / 2**20}))
"""


def make(out):
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT / "tests" / "interop"))
    from test_llamacpp import tiny_qwen3, tokenizer
    model = out / "qwen3"
    if not model.is_dir():
        tiny_qwen3(model, **SIZES)
        tokenizer("qwen2", model)
    for t in ("f16", "bf16", "q8_0"):
        gguf = out / f"qwen3-{t}.gguf"
        if not gguf.is_file():
            subprocess.run([ROOT / "build" / "ckpt", "convert", model, gguf, "--dtype", t, "-q"], check=True)


def run(path, which, dtype):
    env = dict(os.environ, TQDM_DISABLE="1", TRANSFORMERS_VERBOSITY="error")
    r = subprocess.run([sys.executable, "-c", WORKER, str(path), which, dtype], capture_output=True, text=True, env=env)
    if r.returncode:
        raise SystemExit(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    out, runs = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 3
    out.mkdir(parents=True, exist_ok=True)
    make(out)
    cases = [("f16", "auto"), ("f16", "bfloat16"), ("bf16", "auto"), ("q8_0", "auto")]
    if len(sys.argv) > 3:  # TYPE:DTYPE,…
        cases = [tuple(c.split(":")) for c in sys.argv[3].split(",")]
    for t, dtype in cases:
        path = out / f"qwen3-{t}.gguf"
        size = path.stat().st_size / 2**20
        res = {}
        for which in ("transformers", "ckpt"):
            run(path, which, dtype)  # warm the page cache
        for _ in range(runs):
            for which in ("transformers", "ckpt"):
                res.setdefault(which, []).append(run(path, which, dtype))
        for which, rs in res.items():
            print(f"{t:5s} ({size:6.0f} MiB) dtype={dtype:8s} {which:12s} wall {statistics.median(r['wall'] for r in rs):6.2f} s"
                  f"  peak RSS above imports {statistics.median(r['peak_mib'] for r in rs):7.0f} MiB"
                  f"  (model {rs[0]['params_mib']:.0f} MiB)", flush=True)


if __name__ == "__main__":
    main()
