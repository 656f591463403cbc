"""The transformers suite of `make bench` (issue 30, item 4):
ckpt.transformers.AutoModelForCausalLM.from_pretrained against
transformers' own, on a random ~2 GB bf16 Llama saved locally
(model.safetensors + config.json).

Each load runs in its own process (imports first, then the timed call,
then one byte of every page of every weight read, as a first forward pass
would): the time from the call to a model whose weights are all in
memory, the call alone, and the peak RSS until then above the process's
RSS after its imports (VmHWM: getrusage's ru_maxrss would
keep the parent's peak across fork and exec); then an untimed forward
pass of 2 tokens checks that the model runs.  Figures are
warm (the file in the page cache) and cold (its pages dropped before each
run: bench/run.py's drop_caches, or fadvise DONTNEED per file with
--cold fadvise), the two loaders alternating in each round.  Target: peak
RSS <= model + 64 MiB, and >= 1.5x faster cold.

    make bench BENCH_ARGS="transformers --runs 3"

Writes bench/results/transformers.json."""
import json
import os
import statistics
import subprocess
import sys

from run import DATA, drop_caches, machine_facts, measure, save

LOADERS = {
    "transformers": "transformers.AutoModelForCausalLM",
    "ckpt": "ckpt.transformers.AutoModelForCausalLM",
}

CHILD = r"""
import json, resource, sys, time
import torch, transformers, ckpt.transformers
loader = eval(sys.argv[2])
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()
base = rss()
t0 = time.perf_counter()
model = loader.from_pretrained(sys.argv[1], dtype="auto")
t1 = time.perf_counter()
with torch.no_grad():  # every page of every weight in memory: what a first forward pass needs
    for t in model.state_dict().values():
        t.detach().reshape(-1).view(torch.uint8)[::4096].sum()
t2 = time.perf_counter()
def hwm():  # this process's own peak: ru_maxrss keeps the parent's across fork and exec
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
peak = hwm()
with torch.no_grad():
    model(torch.arange(2).unsqueeze(0))  # it runs (untimed: the same compute for both)
print(json.dumps({"call_s": t1 - t0, "usable_s": t2 - t0, "rss_after_imports": base, "peak_rss": peak,
                  "peak_above_imports": peak - base}))
"""


def summarize(runs, size, cache, extra):
    """A cache state's runs ({loader: [run]}) summed up as both suites record
    them, each loader's entry completed by extra(loader, runs); printed."""
    summary = {}
    for name, rs in runs.items():
        summary[name] = {
            "median_usable_s": statistics.median(x["usable_s"] for x in rs),
            "min_usable_s": min(x["usable_s"] for x in rs), "max_usable_s": max(x["usable_s"] for x in rs),
            "median_call_s": statistics.median(x["call_s"] for x in rs),
            "max_peak_above_imports_mib": max(x["peak_above_imports"] for x in rs) / 2**20,
            "runs": rs, **extra(name, rs)}
    summary["speedup"] = summary["transformers"]["median_usable_s"] / summary["ckpt"]["median_usable_s"]
    summary["ckpt_peak_over_model_mib"] = summary["ckpt"]["max_peak_above_imports_mib"] - size / 2**20
    print(f"  {cache}: ckpt {summary['ckpt']['median_usable_s']:.2f} s, transformers "
          f"{summary['transformers']['median_usable_s']:.2f} s ({summary['speedup']:.2f}x); ckpt's peak "
          f"{summary['ckpt_peak_over_model_mib']:+.0f} MiB over the model's {size / 2**20:.0f} MiB", flush=True)
    return summary


def make_model(folder, layers=18, hidden=2048, intermediate=5632):
    """A Llama of about 2 GB in bf16 (hidden 2048, 18 layers, untied head),
    random weights, saved as transformers saves it; other shapes for the
    Hub suite's other sizes (bench/transformers_hub_suite.py)."""
    import torch
    import transformers
    config = transformers.LlamaConfig(vocab_size=32000, hidden_size=hidden, intermediate_size=intermediate,
                                      num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=16,
                                      tie_word_embeddings=False, dtype="bfloat16")
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    g = torch.Generator().manual_seed(0)
    state = {n: (torch.randn(t.shape, generator=g) * 0.02).to(torch.bfloat16) for n, t in model.state_dict().items()}
    from safetensors.torch import save_file
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(folder)


def load_once(folder, loader):
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), LOADERS[loader]], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{loader}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_transformers_suite(args):
    folder = DATA / "transformers-llama-bf16-2GB"
    weights = folder / "model.safetensors"
    if not weights.exists():
        make_model(folder)
    size = weights.stat().st_size
    print(f"{weights}: {size / 1e9:.2f} GB, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}",
          flush=True)
    load_average = [os.getloadavg()[0]]
    results = {}
    for cache in ("warm", "cold"):
        runs = {name: [] for name in LOADERS}
        if cache == "warm":
            for name in LOADERS:
                load_once(folder, name)  # the file in the page cache, the imports' files too
        for r in range(args.runs):
            for name in (list(LOADERS) if r % 2 == 0 else list(reversed(LOADERS))):
                if cache == "cold":
                    drop_caches([weights])
                res = load_once(folder, name)
                runs[name].append(res)
                print(f"  {cache} round {r} {name}: usable {res['usable_s']:.2f} s (call {res['call_s']:.2f} s), "
                      f"peak RSS {res['peak_above_imports'] / 2**20:.0f} MiB above imports", flush=True)
        results[cache] = summarize(runs, size, cache, lambda name, rs: {
            "measure": measure(f"{LOADERS[name]}.from_pretrained", weights, cache)})
        load_average.append(os.getloadavg()[0])
    save("transformers", {"suite": "transformers", "bytes": size, "file": weights.name, "runs": args.runs,
                          "machine": machine_facts(), "load_average": {"min": min(load_average),
                                                                       "max": max(load_average)},
                          "results": results})


if __name__ == "__main__":
    sys.exit("run it as `make bench BENCH_ARGS=\"transformers --runs 3\"`")
