"""The transformers_hub suite of `make bench` (issue 30, from the Hub):
ckpt.transformers.AutoModelForCausalLM.from_pretrained("org/NAME") against
transformers' own, the repo served by the loopback Hub of the tests
(tests/sources/hub.py: the API, resolve/ and a CDN host, as huggingface_hub
speaks to them; HF_ENDPOINT, HF_HUB_DISABLE_XET=1).

The two paths compared: ckpt's one pass (src/io/hf_stream.c: the download
streams into the model's tensors while it is written into the Hub cache,
SHA-256 checked), and transformers' (huggingface_hub downloads each file
into the cache, then transformers loads it from there).

The model is the transformers suite's random bf16 Llama (--hub-gb 2: the
same ~2 GB model.safetensors + config.json, bench/transformers_suite.py),
served from disk (OnDisk: sendfile, never read into the server).  Each
load runs in a fresh process with an empty Hub cache (HF_HUB_CACHE, a new
folder each run, removed after it), and is timed and measured as the
transformers suite's are (its CHILD: the time from the call until one byte
of every page of every weight has been read, the call alone, the peak RSS
above the process's RSS after its imports), then hashes its state dict:
the two loaders' must be equal.  The server counts the body bytes it sent
for each load.  Warm: the served file in the page cache (a load of each
first); cold: its pages dropped before each load (bench/run.py's
drop_caches; `--cold fadvise` drops only the served file's pages).  The
loaders alternate in each round.  Target: peak RSS <= model + 64 MiB, and
>= 1.5x faster cold.

    make bench BENCH_ARGS="transformers_hub --runs 3 --cold fadvise"

Writes bench/results/transformers-hub-<--hub-gb>GB.json."""
import json
import os
import shutil
import statistics
import subprocess
import sys
from importlib.metadata import version

from run import DATA, ROOT, drop_caches, machine_facts, measure, save
from transformers_suite import CHILD, LOADERS, make_model, summarize

REPO = "org/llama"

# After the transformers suite's measuring program (unchanged: the same
# figures), a digest of the state dict, to check that both loaders built
# the same model.  Untimed, after the peak was read.
DIGEST = r"""
import hashlib
h = hashlib.sha256()
for name, t in sorted(model.state_dict().items()):
    h.update(f"{name} {t.dtype} {tuple(t.shape)}".encode())
    h.update(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy())
print(json.dumps({"state_digest": h.hexdigest()}))
"""


def shape(gb):
    """(layers, hidden, intermediate) of a Llama of about `gb` GiB in bf16:
    2 gives the transformers suite's model (18 layers of hidden 2048);
    under 1 GiB, hidden 1024, so that a small model still has layers."""
    hidden, intermediate = (2048, 5632) if gb >= 1 else (1024, 2816)
    embeddings = 2 * 32000 * hidden * 2  # embed_tokens and the untied lm_head
    layer = 2 * (4 * hidden * hidden + 3 * hidden * intermediate)
    return max(1, round((gb * 2**30 - embeddings) / layer)), hidden, intermediate


def model_folder(gb):
    layers, hidden, intermediate = shape(gb)
    if (layers, hidden, intermediate) == (18, 2048, 5632):
        folder = DATA / "transformers-llama-bf16-2GB"  # the transformers suite's, shared
    else:
        folder = DATA / f"transformers-llama-bf16-{layers}x{hidden}"
    if not (folder / "model.safetensors").exists() or not (folder / "config.json").exists():
        make_model(folder, layers, hidden, intermediate)
    return folder


def hub_env(hub, home):
    env = dict(os.environ, HF_ENDPOINT=hub.endpoint, HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HOME=str(home))
    for k in ("HF_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_ENABLE_HF_TRANSFER"):
        env.pop(k, None)
    return env


def load_once(hub, env, cache, loader):
    """One load from an empty Hub cache in a fresh process: the CHILD's
    figures, the state dict's digest and what the server sent for it."""
    shutil.rmtree(cache, ignore_errors=True)
    os.sync()  # the previous load's cache writes are not this one's
    with hub.lock:
        sent0, requests0 = hub.written, len(hub.requests)
    out = subprocess.run([sys.executable, "-c", CHILD + DIGEST, REPO, LOADERS[loader]], capture_output=True,
                         text=True, env={**env, "HF_HUB_CACHE": str(cache)})
    with hub.lock:
        sent, requests = hub.written - sent0, hub.requests[requests0:]
    shutil.rmtree(cache, ignore_errors=True)
    if out.returncode:
        raise RuntimeError(f"{loader}: {out.stderr[-3000:]}")
    lines = out.stdout.strip().splitlines()
    res = {**json.loads(lines[-2]), **json.loads(lines[-1])}
    res["server_sent_bytes"] = sent
    res["server_requests"] = len(requests)
    res["cdn_gets"] = sum(1 for r in requests if r[0] == "GET" and r[1].startswith("/cdn/"))
    return res


def run_transformers_hub_suite(args):
    sys.path.insert(0, str(ROOT / "tests" / "sources"))
    from hub import HubServer, OnDisk

    folder = model_folder(args.hub_gb)
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    work = DATA / "transformers-hub-run"  # the Hub caches and HF_HOME, on the data's file system
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    files = {"model.safetensors": OnDisk(weights), "config.json": (folder / "config.json").read_bytes()}
    print(f"{weights}: {size / 1e9:.2f} GB served as hf://{REPO}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    load_average = [os.getloadavg()[0]]
    results, digests = {}, set()
    with HubServer() as hub:
        hub.add(REPO, files)
        env = hub_env(hub, work / "home")
        cache = work / "hub-cache"
        for mode in ("warm", "cold"):
            runs = {name: [] for name in LOADERS}
            if mode == "warm":
                for name in LOADERS:
                    load_once(hub, env, cache, name)  # the served file in the page cache, the imports' files too
            for r in range(args.runs):
                for name in (list(LOADERS) if r % 2 == 0 else list(reversed(LOADERS))):
                    if mode == "cold":
                        drop_caches([weights])
                    res = load_once(hub, env, cache, name)
                    runs[name].append(res)
                    digests.add(res["state_digest"])
                    print(f"  {mode} round {r} {name}: usable {res['usable_s']:.2f} s (call {res['call_s']:.2f} s), "
                          f"peak RSS {res['peak_above_imports'] / 2**20:.0f} MiB above imports, server sent "
                          f"{res['server_sent_bytes'] / 1e6:.1f} MB in {res['server_requests']} requests",
                          flush=True)
            results[mode] = summarize(runs, size, mode, lambda name, rs: {
                "median_server_sent_bytes": statistics.median(x["server_sent_bytes"] for x in rs),
                "measure": measure(f"{LOADERS[name]}.from_pretrained(Hub repo id, empty cache)",
                                   f"hf://{REPO}/{weights.parent.name}/{weights.name}", mode)})
            load_average.append(os.getloadavg()[0])
    shutil.rmtree(work, ignore_errors=True)
    if len(digests) != 1:
        raise RuntimeError(f"the loaders' state dicts differ: {len(digests)} digests {sorted(digests)}")
    print(f"  state dicts equal (sha256 {next(iter(digests))[:16]}…) in every run of both loaders", flush=True)
    save(f"transformers-hub-{args.hub_gb:g}GB",
         {"suite": "transformers_hub", "bytes": size, "file": weights.name, "repo": REPO,
          "shape": dict(zip(("layers", "hidden", "intermediate"), shape(args.hub_gb))), "runs": args.runs,
          "state_dicts_equal": True, "state_digest": next(iter(digests)),
          "machine": {**machine_facts(), "transformers": version("transformers")},
          "load_average": {"min": min(load_average), "max": max(load_average)}, "results": results})


if __name__ == "__main__":
    sys.exit("run it as `make bench BENCH_ARGS=\"transformers_hub --runs 3 --cold fadvise\"`")
