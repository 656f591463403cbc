"""The python suite of `make bench`: the ckpt Python package against
safetensors on the same 2 GB Llama-shaped bf16 file, in one run.

  load_file  ckpt.torch.load_file vs safetensors.torch.load_file, warm and
             cold, each followed by a checksum of every byte (so a lazy
             mapping cannot win by not reading).  The time until the dict is
             returned is reported apart.

ckpt.load (views, copies, casts, slices) and ckpt.load_into are the perf
suite's (bench/perf_suite.py): one suite per measure, so that two runs
never give the README two figures for one call.

Writes bench/results/python-<GB>GB.json (and .png)."""
import subprocess
import sys

from run import ROOT, drop_caches, machine_facts, make_big_file, measure, save
from load_suite import run_json

PEERS = [sys.executable, str(ROOT / "bench" / "peers.py")]

LOAD_FILE = {
    "ckpt.torch.load_file": "ckpt_load_file",
    "safetensors.torch.load_file": "st_load_file",
}


def median(xs):
    return sorted(xs)[len(xs) // 2]


def run_python_suite(args):
    gb = args.python_gb
    gb = int(gb) if gb == int(gb) else gb
    path = make_big_file(gb)
    nbytes = path.stat().st_size
    results = {}
    for group, table, cold in (("load_file", LOAD_FILE, False), ("load_file_cold", LOAD_FILE, True)):
        res = {label: {"seconds": [], "load_seconds": [], "rss": [], "rss_module": [], "rss_peak": []} for label in table}
        for rnd in range(args.runs + (0 if cold else 1)):  # warm: round 0 fills the page cache
            for label, mode in table.items():
                if cold:
                    drop_caches([path])
                else:
                    subprocess.run(["sync"])
                doc, rss = run_json(PEERS + [mode, str(path)])
                if rnd == 0 and not cold:
                    continue
                r = res[label]
                r["seconds"].append(doc["seconds"])
                r["rss"].append(rss)
                r["bytes"] = doc["bytes"]
                r["checksum"] = doc["checksum"]
                if "load_seconds" in doc:
                    r["load_seconds"].append(doc["load_seconds"])
                if "rss_peak" in doc:
                    r["rss_module"].append(doc["rss_module"])
                    r["rss_peak"].append(doc["rss_peak"])
                extra = f", dict in {doc['load_seconds']:.3f} s" if "load_seconds" in doc else ""
                if "rss_peak" in doc:
                    extra += f", peak RSS {(doc['rss_peak'] - doc['rss_module']) / 2**20:,.0f} MiB over the module"
                print(f"  {group} {label}: {doc['seconds']:.2f} s ({doc['bytes'] / doc['seconds'] / 1e9:.2f} GB/s)"
                      f"{extra}, process peak {rss / 2**20:,.0f} MiB")
        for label, r in res.items():
            med = median(r["seconds"])
            r.update(median=med, min=min(r["seconds"]), max=max(r["seconds"]), gb_per_s=r["bytes"] / med / 1e9,
                     peak_rss_bytes=max(r["rss"]))
            if r["load_seconds"]:
                r["load_median"] = median(r["load_seconds"])
            if r["rss_peak"]:
                r["rss_over_module_bytes"] = max(p - m for p, m in zip(r["rss_peak"], r["rss_module"]))
            if label.startswith("ckpt"):
                r["measure"] = measure(f"{label}(path) + checksum", path, "cold" if cold else "warm")
        sums = {r["checksum"] for r in res.values()}
        if len(sums) != 1:
            raise RuntimeError(f"{group}: contenders disagree on the data: {sums}")
        results[group] = res
    lf, lc = results["load_file"], results["load_file_cold"]
    ratios = {
        "cold: ckpt.torch.load_file / safetensors.torch.load_file (load + checksum)":
            lc["safetensors.torch.load_file"]["median"] / lc["ckpt.torch.load_file"]["median"],
        "ckpt.torch.load_file / safetensors.torch.load_file (load + checksum)":
            lf["safetensors.torch.load_file"]["median"] / lf["ckpt.torch.load_file"]["median"],
        "ckpt.torch.load_file / safetensors.torch.load_file (until the dict is returned)":
            lf["safetensors.torch.load_file"]["load_median"] / lf["ckpt.torch.load_file"]["load_median"],
    }
    for k, v in ratios.items():
        print(f"  {k}: {v:.2f}")
    save(f"python-{gb}GB", {"suite": "python", "bytes": nbytes, "file": path.name, "runs": args.runs,
                            "machine": machine_facts(), "results": results, "ratios": ratios})
