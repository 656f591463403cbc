"""A quick Q8_0 GGUF → bf16 safetensors conversion (warm) against cp of the
same file, interleaved runs, medians; the new build at its SIMD level and
capped to scalar, and optionally another build (the one before):

    .venv/bin/python bench/gguf_bench.py --make-source /tmp/q8b/src.safetensors --gb 2
    echo '{"general.architecture": "llama"}' > /tmp/q8b/kv.json
    build/ckpt convert /tmp/q8b/src.safetensors /tmp/q8b/q8.gguf --dtype q8_0 --gguf-kv /tmp/q8b/kv.json
    .venv/bin/python bench/q8_to_bf16_quick.py /tmp/q8b/q8.gguf /tmp/q8b 5 build/ckpt [OTHER/ckpt]

(OUTDIR on tmpfs, e.g. /dev/shm with the GGUF copied there, leaves the
disk's write-back out.)  bench/gguf_bench.py's q8_0-to-bf16 case is the
suite's measurement; this one is for a quick before/after."""
import os, statistics, subprocess, sys, time
q8, out, runs, new = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
main = sys.argv[5] if len(sys.argv) > 5 else None
cases = {"cp": (["cp", q8, f"{out}/cp.gguf"], {}),
         "ckpt new (auto SIMD)": ([new, "convert", q8, f"{out}/new.safetensors", "--dtype", "bf16", "--no-sync", "-q"], {}),
         "ckpt new CKPT_SIMD=scalar": ([new, "convert", q8, f"{out}/scalar.safetensors", "--dtype", "bf16", "--no-sync", "-q"], {"CKPT_SIMD": "scalar"})}
if main:
    cases["ckpt main (before)"] = ([main, "convert", q8, f"{out}/main.safetensors", "--dtype", "bf16", "--no-sync", "-q"], {})
times = {k: [] for k in cases}
subprocess.run(["cat", q8], stdout=subprocess.DEVNULL, check=True)  # warm
for r in range(runs + 1):
    for name, (cmd, env) in cases.items():
        t0 = time.perf_counter()
        subprocess.run(cmd, env=dict(os.environ, **env), check=True)
        dt = time.perf_counter() - t0
        os.unlink(cmd[3] if name != "cp" else cmd[2])
        if r:  # the first round warms up
            times[name].append(dt)
cp = statistics.median(times["cp"])
print(f"file {os.path.getsize(q8)/1e9:.2f} GB Q8_0, {runs} runs each, interleaved, medians; load {os.getloadavg()}")
for name, ts in times.items():
    m = statistics.median(ts)
    print(f"{name:28s} median {m:6.2f} s  ({', '.join(f'{t:.2f}' for t in ts)})  cp/this = {cp/m:.2f}x")
