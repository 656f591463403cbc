"""A quick Q8_0 GGUF → bf16 safetensors conversion (warm) against cp of the
same file, interleaved runs, medians; the new build at its SIMD level and
capped to scalar, and optionally another build (the one before):

    .venv/bin/python bench/gguf_bench.py --make-source /tmp/q8b/src.safetensors --gb 2
    echo '{"general.architecture": "llama"}' > /tmp/q8b/kv.json
    build/ckpt convert /tmp/q8b/src.safetensors /tmp/q8b/q8.gguf --dtype q8_0 --gguf-kv /tmp/q8b/kv.json
    .venv/bin/python bench/q8_to_bf16_quick.py /tmp/q8b/q8.gguf /tmp/q8b 5 build/ckpt [OTHER/ckpt]

(OUTDIR on tmpfs, e.g. /dev/shm with the GGUF copied there, leaves the
disk's write-back out.)  "dd, output's size" writes as many bytes as the
bf16 output from /dev/zero (no read, no compute; in 32 KiB writes, as
ckpt's, src/io/file.c WRITE_PIECE): the cost of the output's
fresh pages alone, which bounds what any converter can reach against cp
(this VM reports freed memory to its host, so a fresh page costs a host
fault).  bench/gguf_bench.py's q8_0-to-bf16 case is the
suite's measurement; this one is for a quick before/after."""
import os, resource, statistics, subprocess, sys, time
q8, out, runs, new = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
main = sys.argv[5] if len(sys.argv) > 5 else None
cases = {"cp": (["cp", q8, f"{out}/cp.gguf"], {}),
         "ckpt new (auto SIMD)": ([new, "convert", q8, f"{out}/new.safetensors", "--dtype", "bf16", "--no-sync", "-q"], {}),
         "ckpt new CKPT_SIMD=scalar": ([new, "convert", q8, f"{out}/scalar.safetensors", "--dtype", "bf16", "--no-sync", "-q"], {"CKPT_SIMD": "scalar"})}
if main:
    cases["ckpt main (before)"] = ([main, "convert", q8, f"{out}/main.safetensors", "--dtype", "bf16", "--no-sync", "-q"], {})
subprocess.run(["cat", q8], stdout=subprocess.DEVNULL, check=True)  # warm
subprocess.run(cases["ckpt new (auto SIMD)"][0], check=True)
out_bytes = os.path.getsize(f"{out}/new.safetensors")
os.unlink(f"{out}/new.safetensors")
cases["dd, output's size"] = (["dd", "if=/dev/zero", "bs=32K", f"of={out}/dd.bin", f"count={out_bytes >> 15}",
                               "status=none"], {})
times = {k: [] for k in cases}
cpus = {k: [] for k in cases}  # user + system seconds: less bent than wall time by a busy machine
def children_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime
for r in range(runs + 1):
    for name, (cmd, env) in cases.items():
        t0, c0 = time.perf_counter(), children_cpu()
        subprocess.run(cmd, env=dict(os.environ, **env), check=True)
        dt, cpu = time.perf_counter() - t0, children_cpu() - c0
        os.unlink(cmd[3] if name.startswith("ckpt") else cmd[2] if name == "cp" else cmd[3][3:])
        if r:  # the first round warms up
            times[name].append(dt)
            cpus[name].append(cpu)
cp, cp_cpu = statistics.median(times["cp"]), statistics.median(cpus["cp"])
print(f"file {os.path.getsize(q8)/1e9:.2f} GB Q8_0 -> {out_bytes/1e9:.2f} GB bf16, {runs} runs each, interleaved, medians; load {os.getloadavg()}")
for name, ts in times.items():
    m, c = statistics.median(ts), statistics.median(cpus[name])
    print(f"{name:28s} median {m:6.2f} s  ({', '.join(f'{t:.2f}' for t in ts)})  cp/this = {cp/m:.2f}x;"
          f"  cpu {c:.2f} s, cp/this {cp_cpu/c:.2f}x")
