"""The perf suite of `make bench` (issue 13): the Python calls users make,
this tree against an earlier build (`--baseline REV`, default main) and
against safetensors, on the same Llama-shaped bf16 file, in one run.

    make bench BENCH_ARGS="perf [--perf-gb 2] [--baseline main] [--runs 5]"

Groups (contenders alternate within each round, each in its own process,
warm rounds after a warm-up, cold rounds after dropping the page cache;
every byte each contender returns is checksummed and the checksums of a
group must agree):

  load   ckpt.load(path) against safetensors.torch.load_file
  f32    ckpt.load(path, dtype="float32") against load_file + .to(float32)
  tp0    rank 0 of 4 along dim 0: ckpt.load(tp_*) against get_slice; cold
         runs also record the bytes of the file in the page cache after the
         run (all read by it: the cache was empty), against the bytes needed
  tp1    the same along dim 1
  into   ckpt.load_into(module) against module.load_state_dict(load_file):
         time and peak RSS above the module's own
  big    cold only, a single file of --perf-big-gb GB (default 8):
         ckpt.load_into tensors allocated and touched beforehand — with
         each tensor checksummed by on_loaded as it lands, and after the
         whole load — against Run:ai's SafetensorsStreamer (which checksums
         each tensor as it streams in)
  open   ckpt.open of 30,000 tensors in 8 shards: a whole Python process
         (open + keys) against index + safe_open + keys(), and in process
         with every shape and dtype

The machine's memcpy and first-touch speeds (plain and 2 MiB-aligned with
MADV_HUGEPAGE) are measured in the same run.  Writes
bench/results/perf.json and perf.png."""
import json
import os
import shutil
import subprocess
import sys
import time

from run import (DATA, RESULTS, ROOT, drop_caches, machine_facts, make_big_file, make_many_tensors, measure,
                 run_measured, save)
from load_suite import LOAD_BENCH, run_json

PEERS = [sys.executable, str(ROOT / "bench" / "perf_peers.py")]
INTO_PEERS = [sys.executable, str(ROOT / "bench" / "peers.py")]  # the into_* modes


def git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def build_baseline(rev):
    """An earlier commit's Python package, built from `git archive` (no
    worktree): bench/data/before-<sha>/pylib."""
    sha = git("rev-parse", "--short=10", rev)
    tree = DATA / f"before-{sha}"
    if not (tree / ".built").exists():
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        subprocess.run(f"git archive {sha} | tar -x -C '{tree}'", shell=True, cwd=ROOT, check=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(tree / "pylib"), str(tree)], check=True)
        (tree / ".built").write_text(sha + "\n")
    return sha, tree / "pylib"


def env_with(pylib):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pylib:
        env["PYTHONPATH"] = str(pylib)  # ahead of the venv's own ckpt
    return env


def resident_bytes(path):
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)], capture_output=True,
                         text=True)
    return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout.split() else None


def block_stat_path(path):
    """/sys/class/block/<dev>/stat of the device holding path, or None."""
    out = subprocess.run(["df", "--output=source", str(path)], capture_output=True, text=True).stdout.split()
    dev = os.path.basename(out[-1]) if out else ""
    p = f"/sys/class/block/{dev}/stat"
    return p if dev and os.path.exists(p) else None


def sectors_read(stat_path):
    """Bytes read from the device so far (field 3: 512-byte sectors)."""
    if not stat_path:
        return None
    with open(stat_path) as f:
        return int(f.read().split()[2]) * 512


def run_peer(cmd, env):
    rss_file = RESULTS / ".rss.tmp"
    RESULTS.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", str(rss_file), *cmd], capture_output=True, text=True,
                       env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr[-2000:]}")
    wall, rss = rss_file.read_text().split()[-2:]
    rss_file.unlink()
    return json.loads(r.stdout.strip().splitlines()[-1]), int(rss) * 1024


def group(name, contenders, path, runs, modes, needed=None):
    """contenders: {label: (mode, env)}; returns {mode: {label: stats}}."""
    out = {}
    stat_path = block_stat_path(path)
    for temp in modes:
        res = {label: {"seconds": [], "load_seconds": [], "rss": [], "read": []} for label in contenders}
        for rnd in range(runs + (1 if temp == "warm" else 0)):
            for label, (mode, env) in contenders.items():
                if temp == "cold":
                    drop_caches([path])
                else:
                    subprocess.run(["sync"])
                script = INTO_PEERS if mode.startswith("into_") else PEERS
                dev0 = sectors_read(stat_path)
                doc, rss = run_peer(script + [mode, str(path)], env)
                # Bytes read: the file's pages in the page cache after a cold
                # run (reads through the cache and mappings); O_DIRECT reads
                # bypass it, so the device's bytes read during the run are kept
                # too (they include the Python modules the process loads).
                dev = sectors_read(stat_path) - dev0 if dev0 is not None else None
                read = resident_bytes(path) if temp == "cold" else None
                if temp == "warm" and rnd == 0:
                    continue  # the warm-up round fills the page cache
                r = res[label]
                r["seconds"].append(doc["seconds"])
                r["load_seconds"].append(doc.get("load_seconds", doc["seconds"]))
                if "rss_peak" in doc:
                    r.setdefault("rss_over_module", []).append(doc["rss_peak"] - doc["rss_module"])
                r["rss"].append(rss)
                r["bytes"], r["checksum"] = doc["bytes"], doc["checksum"]
                if read is not None:
                    r["read"].append(read)
                    if dev is not None:
                        r.setdefault("device_read", []).append(dev)
                extra = f", read {read / 2**20:,.0f} MiB" if read is not None else ""
                if read is not None and dev is not None:
                    extra += f" (device: {dev / 2**20:,.0f} MiB)"
                if "rss_peak" in doc:
                    extra += f", {(doc['rss_peak'] - doc['rss_module']) / 2**20:,.1f} MiB over the module"
                print(f"  {name} {temp} {label}: {doc['seconds']:.3f} s (dict in {doc.get('load_seconds', 0):.3f} s)"
                      f"{extra}, peak {rss / 2**20:,.0f} MiB", flush=True)
        for label, r in res.items():
            s = sorted(r["seconds"])
            r.update(median=s[len(s) // 2], min=s[0], max=s[-1], peak_rss_bytes=max(r["rss"]),
                     load_median=sorted(r["load_seconds"])[len(s) // 2])
            if r.get("rss_over_module"):
                r["rss_over_module_max_bytes"] = max(r["rss_over_module"])
            if r.get("device_read"):
                r["device_read_median_bytes"] = sorted(r["device_read"])[len(r["device_read"]) // 2]
            if r["read"]:
                r["read_max_bytes"] = max(r["read"])
                if needed:
                    r["read_over_needed"] = max(r["read"]) / needed
            if label.endswith("(this tree)"):
                r["measure"] = measure(f"{'peers' if contenders[label][0].startswith('into_') else 'perf_peers'}.py "
                                       f"{contenders[label][0]}", path, temp)
        sums = {r["checksum"] for r in res.values()}
        if len(sums) != 1:
            raise RuntimeError(f"{name} {temp}: contenders disagree on the data: {sums}")
        out[temp] = res
    return out


OPEN_PROCESS_CKPT = "import sys, ckpt\nc = ckpt.open(sys.argv[1])\nassert len(c.keys()) == int(sys.argv[2])\n"
OPEN_PROCESS_ST = r"""
import json, os, sys
from safetensors import safe_open
d = sys.argv[1]
index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
n = 0
for shard in sorted(set(index["weight_map"].values())):
    with safe_open(os.path.join(d, shard), framework="np") as f:
        n += len(f.keys())
assert n == int(sys.argv[2])
"""
OPEN_INPROCESS = r"""
import json, os, sys, time
d, runs, who = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if who == "ckpt":
    import ckpt
else:
    from safetensors import safe_open
out = []
for _ in range(runs):
    t0 = time.perf_counter()
    if who == "ckpt":
        with ckpt.open(d) as c:
            specs = {k: (i.shape, i.dtype) for k, i in c.tensors.items()}
    else:
        index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
        specs = {}
        for shard in sorted(set(index["weight_map"].values())):
            with safe_open(os.path.join(d, shard), framework="np") as f:
                for k in f.keys():
                    s = f.get_slice(k)
                    specs[k] = (tuple(s.get_shape()), s.get_dtype())
    out.append(time.perf_counter() - t0)
print(json.dumps({"seconds": out, "tensors": len(specs),
                  "sample": [list(specs.items())[0][0], list(list(specs.items())[0][1][0])]}))
"""


def open_group(n, runs, envs):
    d = make_many_tensors(n, 8)
    res = {"process": {}, "in_process": {}}
    procs = {f"ckpt.open + keys() ({who})": ([sys.executable, "-c", OPEN_PROCESS_CKPT, str(d), str(n)], env)
             for who, env in envs.items()}
    procs["index + safe_open + keys()"] = ([sys.executable, "-c", OPEN_PROCESS_ST, str(d), str(n)], envs["this tree"])
    times = {k: [] for k in procs}
    for rnd in range(runs * 2 + 1):
        for label, (cmd, env) in procs.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, env=env)
            if rnd:
                times[label].append(time.perf_counter() - t0)
    for label, t in times.items():
        s = sorted(t)
        res["process"][label] = {"median": s[len(s) // 2], "min": s[0], "max": s[-1], "runs": t}
        if label.endswith("(this tree)"):
            res["process"][label]["measure"] = measure("python: import ckpt, ckpt.open + keys()", d, "warm")
        print(f"  open process {label}: {s[len(s) // 2] * 1e3:.1f} ms")
    inproc = {f"ckpt.open + tensors ({who})": ("ckpt", env) for who, env in envs.items()}
    inproc["index + safe_open + get_slice shape/dtype"] = ("st", envs["this tree"])
    for label, (who, env) in inproc.items():
        doc = json.loads(subprocess.run([sys.executable, "-c", OPEN_INPROCESS, str(d), str(runs * 2 + 2), who],
                                        check=True, capture_output=True, text=True, env=env).stdout)
        assert doc["tensors"] == n, doc
        t = sorted(doc["seconds"][2:])
        res["in_process"][label] = {"median": t[len(t) // 2], "min": t[0], "max": t[-1], "runs": doc["seconds"][2:]}
        if label.endswith("(this tree)"):
            res["in_process"][label]["measure"] = measure("ckpt.open + shapes and dtypes, in process", d, "warm")
        print(f"  open in process {label}: {t[len(t) // 2] * 1e3:.1f} ms")
    return res


def machine_speeds(nbytes):
    m = min(nbytes, 2 << 30)
    speeds = {}
    for what in ("memcpy", "firsttouch", "firsttouch_huge"):
        doc, _ = run_json([LOAD_BENCH, what, str(m)])
        speeds[what] = {"seconds": doc["seconds"], "gb_per_s": doc["bytes"] / doc["seconds"] / 1e9}
        print(f"  {what}: {speeds[what]['gb_per_s']:.2f} GB/s")
    return speeds


def run_perf_suite(args):
    gb = args.perf_gb
    gb = int(gb) if gb == int(gb) else gb
    path = make_big_file(gb)
    nbytes = path.stat().st_size
    rev = args.baseline or "main"
    sha, pylib = build_baseline(rev)
    # This tree's package too, installed apart (a `make test` reinstalling
    # the venv's during the run cannot disturb it).
    here = DATA / "perf-this"
    shutil.rmtree(here, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(here), str(ROOT)], check=True)
    this, before = env_with(here), env_with(pylib)
    head = git("rev-parse", "--short=10", "HEAD") + (" + changes" if git("status", "--porcelain",
                                                                       "--untracked-files=no") else "")
    main = f"{rev} {sha}"
    speeds_before = machine_speeds(nbytes)
    results, ratios, big_file = {}, {}, {}
    groups = args.perf_groups.split(",")

    def checkpoint():
        save("perf", {"suite": "perf", "bytes": nbytes, "file": path.name, "runs": args.runs, "baseline": main,
                      "this_tree": head, "machine": machine_facts(),
                      "machine_speeds": {"before": speeds_before, "after": speeds_after}, "results": results,
                      "ratios": ratios, **big_file})

    speeds_after = None

    def ratio(key, num, den):
        ratios[key] = num / den
        print(f"  {key}: {ratios[key]:.2f}")

    if "load" in groups:
        g = results["load"] = group("load", {
            "ckpt.load (this tree)": ("ckpt_load", this),
            "ckpt.load(copy=True) (this tree)": ("ckpt_load_copy", this),
            f"ckpt.load ({main})": ("ckpt_load", before),
            "safetensors load_file": ("st_load_file", this)}, path, args.runs, ("warm", "cold"))
        for t in ("warm", "cold"):
            for who in ("this tree", main):
                ratio(f"load {t}: ckpt.load ({who}) vs load_file", g[t]["safetensors load_file"]["median"],
                      g[t][f"ckpt.load ({who})"]["median"])
    checkpoint()
    if "f32" in groups:
        g = results["f32"] = group("f32", {
            "ckpt.load(dtype=float32) (this tree)": ("ckpt_f32", this),
            f"ckpt.load(dtype=float32) ({main})": ("ckpt_f32", before),
            "load_file + .to(float32)": ("st_f32", this)}, path, args.runs, ("warm", "cold"))
        for t in ("warm", "cold"):
            for who in ("this tree", main):
                ratio(f"f32 {t}: ckpt.load(dtype=float32) ({who}) vs load_file + .to(float32)",
                      g[t]["load_file + .to(float32)"]["median"], g[t][f"ckpt.load(dtype=float32) ({who})"]["median"])
    checkpoint()
    for dim in (0, 1):
        key = f"tp{dim}"
        if key not in groups:
            continue
        needed = None
        g = results[key] = group(key, {
            f"ckpt.load tp 0/4 dim {dim} (this tree)": (f"ckpt_tp{dim}", this),
            f"ckpt.load tp 0/4 dim {dim} ({main})": (f"ckpt_tp{dim}", before),
            f"safe_open get_slice dim {dim}": (f"st_tp{dim}", this)}, path, args.runs, ("warm", "cold"))
        needed = g["warm"][f"safe_open get_slice dim {dim}"]["bytes"]
        for t in ("warm", "cold"):
            for r in g[t].values():
                if r.get("read_max_bytes"):
                    r["read_over_needed"] = r["read_max_bytes"] / needed
            for who in ("this tree", main):
                ratio(f"tp dim {dim} {t}: ckpt.load ({who}) vs get_slice", g[t][f"safe_open get_slice dim {dim}"]["median"],
                      g[t][f"ckpt.load tp 0/4 dim {dim} ({who})"]["median"])
        for who in ("this tree", main):
            ratios[f"tp dim {dim} cold: bytes read / needed, ckpt ({who})"] = \
                g["cold"][f"ckpt.load tp 0/4 dim {dim} ({who})"]["read_over_needed"]
        ratios[f"tp dim {dim} cold: bytes read / needed, get_slice"] = \
            g["cold"][f"safe_open get_slice dim {dim}"]["read_over_needed"]
    checkpoint()
    if "into" in groups:
        g = results["into"] = group("into", {
            "ckpt.load_into(module) (this tree)": ("into_ckpt", this),
            f"ckpt.load_into(module) ({main})": ("into_ckpt", before),
            "module.load_state_dict(load_file)": ("into_st_load_state_dict", this)}, path, args.runs,
            ("warm", "cold"))
        for t in ("warm", "cold"):
            ratios[f"into {t}: ckpt.load_into (this tree) MiB over the module"] = \
                g[t]["ckpt.load_into(module) (this tree)"]["rss_over_module_max_bytes"] / 2**20
    checkpoint()
    if "big" in groups:
        big = make_big_file(args.perf_big_gb)
        g = results["big"] = group("big", {
            "ckpt.load_into(touched tensors, on_loaded checksums) (this tree)": ("ckpt_into_touched_overlap", this),
            "ckpt.load_into(touched tensors) (this tree)": ("ckpt_into_touched", this),
            f"ckpt.load_into(touched tensors) ({main})": ("ckpt_into_touched", before),
            "Run:ai SafetensorsStreamer": ("runai", this)}, big, args.runs, ("cold",))
        big_file.update(big_file=big.name, big_bytes=big.stat().st_size)
        ratio("big cold: ckpt.load_into(on_loaded) (this tree) vs Run:ai",
              g["cold"]["Run:ai SafetensorsStreamer"]["median"],
              g["cold"]["ckpt.load_into(touched tensors, on_loaded checksums) (this tree)"]["median"])
        for who in ("this tree", main):
            ratio(f"big cold: ckpt.load_into ({who}) vs Run:ai", g["cold"]["Run:ai SafetensorsStreamer"]["median"],
                  g["cold"][f"ckpt.load_into(touched tensors) ({who})"]["median"])
    checkpoint()
    if "open" in groups:
        g = results["open"] = open_group(args.tensors, args.runs, {"this tree": this, main: before})
        for who in ("this tree", main):
            ratio(f"open whole process: ckpt ({who}) vs index + safe_open + keys()",
                  g["process"]["index + safe_open + keys()"]["median"],
                  g["process"][f"ckpt.open + keys() ({who})"]["median"])
            ratio(f"open in process with shapes and dtypes: ckpt ({who}) vs safe_open",
                  g["in_process"]["index + safe_open + get_slice shape/dtype"]["median"],
                  g["in_process"][f"ckpt.open + tensors ({who})"]["median"])
    speeds_after = machine_speeds(nbytes)
    checkpoint()
