"""The baseline suite of `make bench`: this tree's ckpt against an earlier
commit's, on the same files, alternating in one run — the check that a
refactor costs no speed and no memory.

    make bench BENCH_ARGS="baseline --baseline REV"

REV is built once into bench/data/baseline-<sha>/ (a detached git worktree:
its library, CLI, load bench and Python package).  Each round runs every
case with the baseline's build, then with this tree's, each in its own
process (peak RSS from GNU time):

  open     open a sharded checkpoint of 30,000 tensors (in-process times)
  load     load the 2 GB bf16 file into library buffers and into
           pre-touched caller buffers (C, bench/load_bench.c), warm and cold
  convert  the 4 GB bf16 file into 1 GB shards (ckpt convert, --no-sync and
           with its fsyncs), warm
  python   ckpt.torch.load_file, ckpt.load, ckpt.load(mmap=True) (each with
           a checksum of every byte) and ckpt.load_into's peak RSS, on the
           2 GB file

Writes bench/results/baseline.json and baseline.png."""
import json
import os
import shutil
import subprocess
import sys

from run import DATA, OPEN_CKPT, RESULTS, ROOT, drop_caches, machine_facts, make_big_file, make_many_tensors, run_measured, save
from load_suite import run_json

PEERS = ROOT / "bench" / "peers.py"


def git(*args, cwd=ROOT):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def build_tree(rev):
    """A build of `rev`: {'root', 'bin', 'lib', 'load_bench', 'pylib', 'tests'}."""
    sha = git("rev-parse", "--short=10", rev)
    tree = DATA / f"baseline-{sha}"
    pylib = tree / "pylib"
    stamp = tree / ".built"
    if not stamp.exists():
        shutil.rmtree(tree, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=True)
        DATA.mkdir(parents=True, exist_ok=True)
        git("worktree", "add", "--detach", "--force", str(tree), sha)
        subprocess.run(["cmake", "-S", str(tree), "-B", str(tree / "build"), "-DCMAKE_BUILD_TYPE=Release",
                        "-DCKPT_BUILD_TESTS=OFF"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", str(tree / "build"), "-j", str(os.cpu_count() or 2)], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(pylib), str(tree)], check=True)
        stamp.write_text(sha + "\n")
    return {"name": f"{sha} (baseline)", "root": tree, "bin": tree / "build" / "ckpt",
            "lib": tree / "build" / "libckpt.so", "load_bench": tree / "build" / "ckpt_load_bench",
            "pylib": pylib, "tests": tree / "tests"}


def this_tree():
    sha = git("rev-parse", "--short=10", "HEAD")
    dirty = " + changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    return {"name": f"{sha}{dirty} (this tree)", "root": ROOT, "bin": ROOT / "build" / "ckpt",
            "lib": ROOT / "build" / "libckpt.so", "load_bench": ROOT / "build" / "ckpt_load_bench",
            "pylib": None, "tests": ROOT / "tests"}


def env_for(build):
    env = dict(os.environ, CKPT_LIB=str(build["lib"]), CKPT_BIN=str(build["bin"]))
    env.pop("PYTHONPATH", None)
    if build["pylib"]:
        env["PYTHONPATH"] = str(build["pylib"])  # ahead of the venv's own ckpt
    return env




def cases(args):
    """name → (function(build) → (seconds, rss, extra), cache mode, bytes)."""
    many = make_many_tensors(args.tensors, 8)
    load_file = make_big_file(2)
    convert_src = make_big_file(args.gb)
    scratch = DATA / "out-baseline"

    def open_case(b):
        r = subprocess.run([sys.executable, "-c", OPEN_CKPT, str(many), "12", str(b["tests"])], env=env_for(b),
                           capture_output=True, text=True, check=True)
        times = json.loads(r.stdout)[2:]  # the first two opens warm the caches
        return sorted(times)[len(times) // 2], None

    def c_load(pretouch):
        def run(b):
            doc, rss = run_json([str(b["load_bench"]), "load", str(load_file), "0", pretouch, "auto", "none"])
            return doc["seconds"], rss
        return run

    def convert(sync):
        def run(b):
            shutil.rmtree(scratch, ignore_errors=True)
            subprocess.run(["sync"])
            cmd = [str(b["bin"]), "convert", str(convert_src), str(scratch), "--max-shard-size", "1GB", "--no-progress"]
            secs, rss = run_measured(cmd + ([] if sync else ["--no-sync"]))
            shutil.rmtree(scratch, ignore_errors=True)
            return secs, rss
        return run

    def python(mode):
        def run(b):
            r = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, str(PEERS), mode, str(load_file)],
                               env=env_for(b), capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(r.stderr[-2000:])
            doc = json.loads(r.stdout.strip().splitlines()[-1])
            rss = int(r.stderr.strip().splitlines()[-1]) * 1024
            if "rss_peak" in doc:
                rss = doc["rss_peak"] - doc["rss_module"]  # what loading costs above the module
            return doc["seconds"], rss
        return run

    gb2, gbc = load_file.stat().st_size, convert_src.stat().st_size
    return {
        f"open {args.tensors:,} tensors": (open_case, "warm", None),
        "load 2 GB → library buffers": (c_load("0"), "warm", gb2),
        "load 2 GB → pre-touched buffers": (c_load("1"), "warm", gb2),
        "load 2 GB → library buffers, cold": (c_load("0"), "cold", gb2),
        f"convert {gbc / 1e9:.1f} GB → 1 GB shards, --no-sync": (convert(False), "warm", gbc),
        f"convert {gbc / 1e9:.1f} GB → 1 GB shards, fsync": (convert(True), "warm", gbc),
        "python ckpt.torch.load_file + checksum": (python("ckpt_load_file"), "warm", gb2),
        "python ckpt.load + checksum": (python("ckpt_load"), "warm", gb2),
        "python ckpt.load(mmap=True) + checksum": (python("ckpt_load_mmap"), "warm", gb2),
        "python ckpt.load_into (RSS over the module)": (python("into_ckpt"), "warm", gb2),
    }, {"many": many, "load": load_file, "convert": convert_src}


def run_baseline_suite(args):
    builds = [build_tree(args.baseline), this_tree()]
    table, files = cases(args)
    results = {name: {b["name"]: {"seconds": [], "rss": []} for b in builds} for name in table}
    for rnd in range(args.runs + 1):  # round 0 warms the cache and the builds
        for name, (fn, mode, _) in table.items():
            for b in (builds if rnd % 2 else builds[::-1]):  # alternate who goes first
                paths = [files["load"]] if "load" in name or "python" in name else [files["convert"]]
                if mode == "cold":
                    drop_caches(paths)
                secs, rss = fn(b)
                if rnd == 0:
                    continue
                results[name][b["name"]]["seconds"].append(secs)
                results[name][b["name"]]["rss"].append(rss)
                print(f"  round {rnd} {name:48s} {b['name']:32s} {secs:8.3f} s"
                      + (f"  RSS {rss / 2**20:8.1f} MiB" if rss is not None else ""), flush=True)
    doc = {"suite": "baseline", "baseline": builds[0]["name"], "this": builds[1]["name"], "runs": args.runs,
           "machine": machine_facts(), "results": {}}
    for name, (_, mode, nbytes) in table.items():
        row = {}
        for b in builds:
            r = results[name][b["name"]]
            s = sorted(r["seconds"])
            row[b["name"]] = {"median": s[len(s) // 2], "min": s[0], "max": s[-1], "runs": r["seconds"],
                              "gb_per_s": nbytes / s[len(s) // 2] / 1e9 if nbytes else None,
                              "peak_rss_bytes": max(r["rss"]) if r["rss"][0] is not None else None}
        before, after = row[builds[0]["name"]], row[builds[1]["name"]]
        row["time_after_over_before"] = after["median"] / before["median"]
        if before["peak_rss_bytes"]:
            row["rss_after_over_before"] = after["peak_rss_bytes"] / before["peak_rss_bytes"]
        doc["results"][name] = row
        print(f"  {name:48s} after/before time {row['time_after_over_before']:.3f}"
              + (f", RSS {row['rss_after_over_before']:.3f}" if "rss_after_over_before" in row else ""))
    save("baseline", doc)
    return doc
