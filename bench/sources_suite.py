"""The sources suites of `make bench` (issue: load straight from HTTP and S3,
and local loads that never double memory).

  http      a 4 GB Llama-shaped safetensors file over loopback: ckpt reading
            it from nginx (http://) and from moto's S3 server (s3://, SigV4),
            against Run:ai's streamer reading the same object from the same
            moto server, with `curl` of the whole file into /dev/null from
            each server as the ceilings.  Warm (the servers' files in the
            page cache) and cold (caches dropped before each run).
  memlimit  an 8 GB checkpoint loaded and converted inside a memory cgroup
            limited to 9 GB (v2 memory.max, else v1 memory.limit_in_bytes;
            made with mkdir under /sys/fs/cgroup, as root): ckpt.load_into
            with direct=True and `ckpt convert --direct`, against
            safetensors.torch.load_file + load_state_dict, plain ckpt, and
            the disk's O_DIRECT ceiling — time, the cgroup's peak, OOM kills.

Every contender runs in its own process, alternating, and checksums every
byte it loads (curl, the ceiling, only counts them).  Results:
bench/results/sources-http-<GB>GB.json and sources-memlimit-<GB>GB.json.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run import BIN_PATH, DATA, RESULTS, ROOT, drop_caches, machine_facts, make_big_file, save, summary

sys.path.insert(0, str(ROOT / "tests" / "sources"))
from cgroup import MemoryCgroup  # noqa: E402
from servers import Moto, Nginx  # noqa: E402

LOAD_BENCH = str(ROOT / "build" / "ckpt_load_bench")
PEERS = [sys.executable, str(ROOT / "bench" / "peers.py")]


def run_json(cmd, env=None):
    """A contender that prints one JSON line; adds its peak RSS (GNU time)."""
    rss_file = Path(tempfile.mktemp(prefix="ckpt-rss-"))
    full = dict(os.environ, **(env or {}))
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", str(rss_file), *cmd], capture_output=True, text=True,
                       env=full)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed: {r.stderr[-1500:]}")
    rss = int(rss_file.read_text().split()[-1]) * 1024
    rss_file.unlink()
    lines = [ln for ln in r.stdout.strip().splitlines() if ln.startswith("{")]
    doc = json.loads(lines[-1]) if lines else {}
    doc.setdefault("seconds", wall)
    return doc, rss


def curl_ceiling(url, extra=()):
    """curl of the whole file into /dev/null: (seconds, bytes) by curl's own clock."""
    r = subprocess.run(["curl", "-sS", "--fail", "-o", "/dev/null", "-w", "%{time_total} %{size_download}", *extra,
                        url], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"curl {url} failed: {r.stderr}")
    secs, size = r.stdout.split()
    return {"seconds": float(secs), "bytes": int(float(size)), "checksum": None}, 0


# ---------------------------------------------------------------- http

def run_contenders(contenders, nbytes, runs, src, cold=True):
    """Alternating rounds (a warm-up, then `runs`), warm then cold; every
    contender's checksum must agree.  Returns {mode: {label: summary}}."""
    results = {}
    for mode in ("warm", "cold") if cold else ("warm",):
        res = {k: {"seconds": [], "rss": [], "checksum": None} for k in contenders}
        for rnd in range(runs + (1 if mode == "warm" else 0)):
            for label, fn in contenders.items():
                if mode == "cold":
                    drop_caches([src])
                try:
                    doc, rss = fn()
                except RuntimeError as e:
                    res[label]["error"] = str(e)[-500:]
                    print(f"  {mode} {label}: FAILED {str(e)[-300:]}", flush=True)
                    continue
                # The file's bytes (curl), or its tensors' (the loaders).
                header = 8 + int.from_bytes(open(src, "rb").read(8), "little")
                if doc.get("bytes") not in (None, nbytes, nbytes - header):
                    raise RuntimeError(f"{label} moved {doc.get('bytes')} bytes, not {nbytes}")
                if doc.get("checksum") is not None:
                    if res[label]["checksum"] not in (None, doc["checksum"]):
                        raise RuntimeError(f"{label}: checksum changed between runs")
                    res[label]["checksum"] = doc["checksum"]
                if mode == "warm" and rnd == 0:
                    continue  # the warm-up
                res[label]["seconds"].append(doc["seconds"])
                res[label]["rss"].append(rss)
                print(f"  {mode} {label:52s} {doc['seconds']:7.2f} s  {nbytes / doc['seconds'] / 1e9:5.2f} GB/s"
                      f"  RSS {rss / 2**20:8.1f} MiB", flush=True)
        out = {}
        for label, r in res.items():
            if not r["seconds"]:
                out[label] = {"error": r.get("error", "no run")}
                continue
            s = summary(r["seconds"])
            s["gb_per_s"] = nbytes / s["median"] / 1e9
            s["peak_rss_bytes"] = max(r["rss"])
            s["checksum"] = r["checksum"]
            out[label] = s
        sums = {v["checksum"] for v in out.values() if v.get("checksum") is not None}
        if len(sums) > 1:
            raise RuntimeError(f"contenders disagree about the bytes: {sums}")
        results[mode] = out
    return results


def ratio(r, a, b):
    """How many times faster `a` is than `b` (their median seconds)."""
    if "median" in r.get(a, {}) and "median" in r.get(b, {}):
        return r[b]["median"] / r[a]["median"]
    return None


def http_ratios(r):
    curl = "ceiling: curl → /dev/null (http://, nginx)"
    return {
        "ckpt_http_pretouched_of_curl": ratio(r, "ckpt → pre-touched buffers (http://, nginx)", curl),
        "ckpt_http_of_curl": ratio(r, "ckpt (http://, nginx)", curl),
        "ckpt_s3_of_curl": ratio(r, "ckpt (s3://, nginx as the endpoint)", curl),
        "ckpt_s3_over_runai": ratio(r, "ckpt (s3://, nginx as the endpoint)",
                                    "runai-model-streamer (s3://, nginx as the endpoint)"),
    }


def make_small_file(gb):
    """A small safetensors file (make_big_file's layers are 0.5 GB at least):
    a few bf16 matrices of random bits."""
    path = DATA / f"small-bf16-{gb}GB.safetensors"
    if path.exists():
        return path
    import numpy as np
    import safetensors.numpy
    rng = np.random.default_rng(1)
    per = int(gb * 1e9) // 8 // 2
    rows = max(1, per // 4096)
    arrays = {f"layers.{i}.weight": rng.integers(0, 2**16, (rows, 4096), dtype=np.uint16) for i in range(8)}
    DATA.mkdir(parents=True, exist_ok=True)
    safetensors.numpy.save_file(arrays, str(path))  # stored as U16: the same bytes as bf16
    return path


S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
          "AWS_EC2_METADATA_DISABLED": "true", "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0"}


def suite_http(args):
    """The 4 GB file from nginx: ckpt over http://; ckpt and Run:ai's
    streamer over s3:// with nginx as the S3-compatible endpoint
    (path-style GETs, signed, not checked); curl as the ceiling.  Then the
    same s3:// contenders against moto's real S3 API, on a file moto can
    serve: moto reads and copies the whole object for every request, range
    or not (moto/s3/responses.py, _handle_range_header over key.value),
    which makes a 4 GB object cost 8 GB of copying per request."""
    gb = args.http_gb
    gb = int(gb) if gb == int(gb) else gb
    src = make_big_file(gb)
    nbytes = src.stat().st_size
    work = Path(tempfile.mkdtemp(prefix="ckpt-bench-sources-", dir=DATA))
    served = work / "www"
    (served / "bench").mkdir(parents=True)
    for name in ("model.safetensors", "bench/model.safetensors"):
        os.link(src, served / name)
    doc = {"suite": "sources-http", "bytes": nbytes, "source": src.name, "machine": machine_facts(), "results": {}}
    try:
        with Nginx(served, work / "nginx") as nginx:
            http_url = nginx.url("model.safetensors")
            env = dict(S3_ENV, AWS_ENDPOINT_URL=nginx.base)
            contenders = {
                "ckpt (http://, nginx)": lambda: run_json([LOAD_BENCH, "load", http_url, "0", "0", "auto", "none"]),
                "ckpt → pre-touched buffers (http://, nginx)":
                    lambda: run_json([LOAD_BENCH, "load", http_url, "0", "1", "auto", "none"]),
                "ckpt (s3://, nginx as the endpoint)":
                    lambda: run_json([LOAD_BENCH, "load", "s3://bench/model.safetensors", "0", "0", "auto", "none"], env),
                "runai-model-streamer (s3://, nginx as the endpoint)":
                    lambda: run_json(PEERS + ["runai", "s3://bench/model.safetensors"], env),
                "ceiling: curl → /dev/null (http://, nginx)": lambda: curl_ceiling(http_url),
            }
            doc["results"] = run_contenders(contenders, nbytes, args.runs, src)
        for mode, r in doc["results"].items():
            r["ratios"] = http_ratios(r)
        # moto's S3 API, on a file small enough for it.
        small = make_small_file(args.moto_gb)
        small_bytes = small.stat().st_size
        with Moto(work) as moto:
            client = moto.client()
            client.create_bucket(Bucket="bench")
            client.upload_file(str(small), "bench", "model.safetensors")
            env = dict(S3_ENV, AWS_ENDPOINT_URL=moto.endpoint)
            s3_url = "s3://bench/model.safetensors"
            contenders = {
                "ckpt (s3://, moto)": lambda: run_json([LOAD_BENCH, "load", s3_url, "0", "0", "auto", "none"], env),
                "runai-model-streamer (s3://, moto)": lambda: run_json(PEERS + ["runai", s3_url], env),
                "ceiling: curl --aws-sigv4 → /dev/null (moto)":
                    lambda: curl_ceiling(f"{moto.endpoint}/bench/model.safetensors",
                                         ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "testing:testing"]),
            }
            moto_results = run_contenders(contenders, small_bytes, args.runs, small, cold=False)
        moto_results["warm"]["ratios"] = {
            "ckpt_s3_over_runai": ratio(moto_results["warm"], "ckpt (s3://, moto)", "runai-model-streamer (s3://, moto)"),
            "ckpt_s3_of_curl": ratio(moto_results["warm"], "ckpt (s3://, moto)",
                                     "ceiling: curl --aws-sigv4 → /dev/null (moto)")}
        doc["moto"] = {"bytes": small_bytes, "source": small.name, "results": moto_results}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc["servers"] = {"http": "nginx-light (Debian) on 127.0.0.1, sendfile, 2 workers",
                      "s3": "the same nginx as a path-style S3 endpoint (signatures not checked); and "
                            "moto_server (moto[server]) for the S3 API itself"}
    save(f"sources-http-{gb}GB", doc)
    return doc


# ---------------------------------------------------------------- memlimit

INTO = r"""
import json, sys, time, resource
sys.path.insert(0, sys.argv[3])
import torch
from peers import skeleton, checksum
mode, path = sys.argv[1], sys.argv[2]
module = skeleton(path)
print("ready", flush=True)
sys.stdin.readline()
t0 = time.perf_counter()
if mode == "ckpt_direct":
    import ckpt
    ckpt.load_into(module, path, direct=True, progress=False)
elif mode == "ckpt":
    import ckpt
    ckpt.load_into(module, path, progress=False)
elif mode == "st":
    from safetensors.torch import load_file
    module.load_state_dict(load_file(path))
else:
    raise SystemExit(mode)
seconds = time.perf_counter() - t0
total = 0
for p in module.parameters():
    total = (total + checksum(p.data)[0]) % (1 << 64)
print(json.dumps({"seconds": seconds, "checksum": total}), flush=True)
"""


def in_cgroup(limit, cmd, into=False):
    """Runs cmd in a fresh memory cgroup of `limit` bytes: (doc, stats,
    status).  With into=True the child builds its model first and the
    limit is set once it is ready (its own memory counts)."""
    cg = MemoryCgroup.create("ckpt-bench")
    if cg is None:
        raise RuntimeError(f"no memory cgroup: {MemoryCgroup.why}")
    try:
        if not into:
            cg.set_limit(limit)
        t0 = time.perf_counter()
        proc = cg.popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if into:
            line = proc.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"child did not start: {proc.stderr.read()[-1000:]}")
            cg.set_limit(limit)
            cg.reset_peak()
            t0 = time.perf_counter()
        out, err = proc.communicate("go\n" if into else None, timeout=3600)
        wall = time.perf_counter() - t0
        stats = cg.stats()
    finally:
        cg.remove()
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    doc = json.loads(lines[-1]) if lines and proc.returncode == 0 else {}
    doc.setdefault("seconds", wall)
    status = "ok" if proc.returncode == 0 else ("OOM-killed" if stats["oom_kills"] else f"exit {proc.returncode}")
    if proc.returncode != 0:
        doc["stderr"] = err[-800:]
    return doc, stats, status, cg.describe()


def suite_memlimit(args):
    gb = args.memlimit_gb
    gb = int(gb) if gb == int(gb) else gb
    src = make_big_file(gb)
    nbytes = src.stat().st_size
    limit = int(args.memlimit_limit_gb * 1e9)
    out_dir = DATA / "memlimit-out"
    tests = str(ROOT / "bench")
    contenders = {
        "ckpt.load_into(direct=True)": ([sys.executable, "-c", INTO, "ckpt_direct", str(src), tests], True),
        "ckpt.load_into (default io)": ([sys.executable, "-c", INTO, "ckpt", str(src), tests], True),
        "safetensors load_file + load_state_dict": ([sys.executable, "-c", INTO, "st", str(src), tests], True),
        "ckpt convert --direct (1 GB shards)": ([BIN_PATH, "convert", "--direct", str(src), str(out_dir),
                                                "--max-shard-size", "1GB", "--force", "--no-progress"], False),
        "ckpt convert (1 GB shards)": ([BIN_PATH, "convert", str(src), str(out_dir), "--max-shard-size", "1GB",
                                       "--force", "--no-progress"], False),
        "ceiling: O_DIRECT pread, 2 threads": ([LOAD_BENCH, "pread", str(src), "2", "1"], False),
        # A convert reads 8 GB and writes 8 GB on the same disk: its ceiling is a copy.
        "ceiling: dd copy, O_DIRECT both ways (8 MiB blocks)":
            (["dd", f"if={src}", f"of={out_dir}.dd", "bs=8M", "iflag=direct", "oflag=direct", "status=none"], False),
    }
    res = {k: {"seconds": [], "peak": [], "status": [], "file_after": [], "checksum": None} for k in contenders}
    described = None
    for rnd in range(args.runs):
        for label, (cmd, into) in contenders.items():
            drop_caches([src])
            shutil.rmtree(out_dir, ignore_errors=True)
            doc, stats, status, described = in_cgroup(limit, cmd, into)
            shutil.rmtree(out_dir, ignore_errors=True)
            Path(f"{out_dir}.dd").unlink(missing_ok=True)
            r = res[label]
            r["seconds"].append(doc["seconds"])
            r["peak"].append(stats["peak"])
            r["status"].append(status)
            r["file_after"].append(stats["file"])
            if doc.get("checksum") is not None:
                if r["checksum"] not in (None, doc["checksum"]):
                    raise RuntimeError(f"{label}: checksum changed between runs")
                r["checksum"] = doc["checksum"]
            if "stderr" in doc:
                r["stderr"] = doc["stderr"]
            print(f"  {label:42s} {status:10s} {doc['seconds']:7.2f} s  {nbytes / doc['seconds'] / 1e9:5.2f} GB/s  "
                  f"cgroup peak {stats['peak'] / 2**30:5.2f} GiB", flush=True)
    results = {}
    for label, r in res.items():
        s = summary(r["seconds"])
        s.update(gb_per_s=nbytes / s["median"] / 1e9, peak_bytes=max(r["peak"]), status=r["status"],
                 checksum=r["checksum"], page_cache_after=max(r["file_after"]))
        if "stderr" in r:
            s["stderr"] = r["stderr"]
        results[label] = s
    # The loads' checksums (of the module's parameters) must agree; the
    # ceiling sums the file itself.
    ok_sums = {v["checksum"] for k, v in results.items() if v["checksum"] is not None and "load" in k}
    if len(ok_sums) > 1:
        raise RuntimeError(f"loads disagree about the bytes: {ok_sums}")
    doc = {"suite": "sources-memlimit", "bytes": nbytes, "source": src.name, "limit_bytes": limit,
           "cgroup": described, "machine": machine_facts(), "results": results}
    # Loads against the read ceiling, converts against the copy ceiling.
    read_ceiling = results["ceiling: O_DIRECT pread, 2 threads"]["median"]
    copy_ceiling = results["ceiling: dd copy, O_DIRECT both ways (8 MiB blocks)"]["median"]
    doc["ratios"] = {k: (copy_ceiling if "convert" in k or "dd" in k else read_ceiling) / v["median"]
                     for k, v in results.items() if all(s == "ok" for s in v["status"])}
    save(f"sources-memlimit-{gb}GB", doc)
    return doc
