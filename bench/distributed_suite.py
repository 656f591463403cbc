"""The distributed suite of `make bench` (BENCH_ARGS=distributed): many
processes loading and saving one checkpoint, on this machine.

  tp_load   an 8 GB Llama-shaped bf16 checkpoint, tensor-parallel rank r of
            4 on dim 0 (every 2-D tensor's rows; 1-D tensors whole):
            ckpt.distributed.load on 4 ranks (bytes read against bytes
            needed, per rank), against one process reading everything
            (ckpt.load), and against Run:ai's distributed streamer on the
            same 4 gloo ranks (it reads disjoint parts and broadcasts every
            tensor to every rank; each rank keeps its slices); warm and cold
  save      a 4 GB state dict held as tensor-parallel shards by 4 ranks,
            saved with ckpt.distributed.save (1 GB shards), against one
            process writing the same bytes (ckpt.save); peak RSS per rank
            above its own tensors
  mpi_sim   mpirun --oversubscribe -np N (1 … 32) on small files: headers
            parsed by every rank vs once and broadcast, the commit's vote,
            a shard-writer save and the files each rank opens

Every contender runs in its own processes (bench/dist_worker.py), rounds
alternate, the first round is a warm-up.  Writes
bench/results/distributed.json (bench/report.py draws its chart)."""
import json
import os
import shutil
import socket
import subprocess
import sys
import time

from run import DATA, RESULTS, ROOT, drop_caches, machine_facts, make_big_file, make_many_tensors, save, summary

WORKER = [sys.executable, str(ROOT / "bench" / "dist_worker.py")]
MPI_SIM = ROOT / "build" / "ckpt_mpi_sim"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(argvs, timeout=3600):
    """Starts every argv at once (one process per rank); returns their JSON."""
    procs = [subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in argvs]
    out = []
    for p, a in zip(procs, argvs):
        so, se = p.communicate(timeout=timeout)
        if p.returncode != 0:
            for q in procs:
                q.kill()
            raise RuntimeError(f"{' '.join(a)} failed ({p.returncode}): {se[-3000:]}")
        out.append(json.loads(so.strip().splitlines()[-1]))
    return out


def ranks(mode, path, world, *extra):
    port = free_port()
    return [WORKER + [mode, str(path), str(r), str(world), str(port), *map(str, extra)] for r in range(world)]


def wall(results):
    return max(r["t1"] for r in results) - min(r["t0"] for r in results)


# ------------------------------------------------------------------ loads

def suite_tp_load(args, world=4):
    gb = args.dist_gb
    path = make_big_file(int(gb) if gb == int(gb) else gb)  # llama-bf16-4GB, not -4.0GB
    size = path.stat().st_size
    contenders = {
        f"ckpt.distributed.load, {world} ranks": lambda: ranks("tp_ckpt", path, world, "broadcast"),
        f"Run:ai distributed streamer, {world} ranks (gloo, CPU)": lambda: ranks("tp_runai", path, world),
        "ckpt.load, 1 process reading everything": lambda: [WORKER + ["all_ckpt", str(path)]],
    }
    doc = {"bytes": size, "source": path.name, "world": world, "results": {}}
    for cache in ("warm", "cold"):
        res = {k: [] for k in contenders}
        for rnd in range(args.runs + 1):
            for label, argv in contenders.items():
                if cache == "cold":
                    drop_caches([path])
                else:
                    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL)
                out = launch(argv())
                w = wall(out)
                print(f"  {cache} round {rnd} {label:55s} {w:7.2f} s", flush=True)
                if rnd:
                    res[label].append({"seconds": w, "ranks": out})
        doc["results"][cache] = {}
        for label, runs in res.items():
            secs = [r["seconds"] for r in runs]
            per_rank = runs[-1]["ranks"]
            entry = summary(secs)
            entry["per_rank"] = [{k: r.get(k) for k in ("bytes_read", "bytes_needed", "bytes_kept", "bytes_received",
                                                          "io_read_bytes", "rss_peak", "rss_base")} for r in per_rank]
            entry["checksums"] = [r["checksum"] for r in per_rank]
            if all(r.get("bytes_read") is not None and r.get("bytes_needed") for r in per_rank):
                entry["read_over_needed"] = [r["bytes_read"] / r["bytes_needed"] for r in per_rank]
            if cache == "cold" and all(r.get("io_read_bytes") for r in per_rank) and per_rank[0].get("bytes_needed"):
                entry["disk_read_over_needed"] = [r["io_read_bytes"] / r["bytes_needed"] for r in per_rank]
            doc["results"][cache][label] = entry
    # Same bytes kept by both 4-rank contenders, rank by rank.
    warm = doc["results"]["warm"]
    a, b = (warm[k]["checksums"] for k in list(contenders)[:2])
    doc["checksums_agree"] = a == b
    return doc


# ------------------------------------------------------------------ saves

def suite_save(args, world=4):
    gb = args.save_gb
    out = DATA / "dist-save-out"
    contenders = {
        f"ckpt.distributed.save, {world} ranks": lambda: ranks("save_ckpt", out, world, gb),
        "ckpt.save, 1 process (the same bytes)": lambda: [WORKER + ["save_one", str(out), str(gb)]],
    }
    doc = {"gb": gb, "world": world, "results": {}}
    res = {k: [] for k in contenders}
    reference = None
    # At least 5 rounds: with 3, one round of another process's disk writes
    # (or write-back of the previous round's files) moved the median by a
    # second either way (3.6-4.9 s for 4 ranks, 3.4-4.4 s for one process).
    runs = max(args.runs, 5)
    for rnd in range(runs + 1):
        for label, argv in contenders.items():
            shutil.rmtree(out, ignore_errors=True)
            subprocess.run(["sync"])
            results = launch(argv())
            w = wall(results)
            # Both write the very same files.
            digest = subprocess.run(f"cd {out} && sha256sum * | sha256sum", shell=True, capture_output=True,
                                    text=True).stdout.split()[0]
            reference = reference or digest
            if digest != reference:
                raise RuntimeError(f"{label} wrote other bytes than the first contender")
            print(f"  round {rnd} {label:45s} {w:7.2f} s", flush=True)
            if rnd:
                res[label].append({"seconds": w, "ranks": results})
    shutil.rmtree(out, ignore_errors=True)
    for label, runs in res.items():
        entry = summary([r["seconds"] for r in runs])
        per = runs[-1]["ranks"]
        entry["per_rank"] = [{"bytes_own": r["bytes_own"], "bytes_written": r["bytes_written"],
                              "rss_peak": r["rss_peak"], "rss_before": r["rss_before"],
                              "rss_above_own_mib": (max(rr["ranks"][i]["rss_peak"] for rr in runs)
                                                    - r["rss_before"]) / 2**20}
                             for i, r in enumerate(per)]
        entry["gb_per_s"] = per[0]["bytes_own"] * len(per) / 1e9 / entry["median"] if len(per) > 1 else \
            per[0]["bytes_own"] / 1e9 / entry["median"]
        doc["results"][label] = entry
    doc["same_bytes"] = True
    return doc


# ---------------------------------------------------------------- mpi_sim

def suite_mpi_sim(args):
    if not shutil.which("mpirun") or not MPI_SIM.exists():
        return {"skipped": "mpirun or build/ckpt_mpi_sim missing (Open MPI not installed)"}
    many = make_many_tensors(args.tensors, 8)
    out = DATA / "mpi-sim-out"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    rows = []
    for n in (1, 2, 4, 8, 16, 32):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        t0 = time.perf_counter()
        r = subprocess.run(["mpirun", "--oversubscribe", "-np", str(n), str(MPI_SIM), str(many), str(out)], env=env,
                           capture_output=True, text=True, timeout=3600)
        if r.returncode != 0:
            raise RuntimeError(f"mpi_sim -np {n}: {r.stderr[-3000:]}")
        row = json.loads(r.stdout.strip().splitlines()[-1])
        row["mpirun_s"] = time.perf_counter() - t0
        rows.append(row)
        print(f"  {n:2d} ranks: open each {row['open_each_s'] * 1e3:8.1f} ms, open+bcast "
              f"{row['open_bcast_s'] * 1e3:8.1f} ms, vote {row['vote_s'] * 1e3:6.2f} ms, "
              f"save {row['save_s'] * 1e3:7.1f} ms, files open/rank {row['files_open_per_rank']}", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    return {"tensors": args.tensors, "rows": rows}


def run_distributed_suite(args):
    parts = [p for p in args.dist_parts.split(",") if p]
    path = RESULTS / "distributed.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.update({"suite": "distributed", "machine": machine_facts()})
    for part in parts:
        print(f"-- {part}")
        doc[part] = {"tp_load": suite_tp_load, "save": suite_save, "mpi_sim": suite_mpi_sim}[part](args)
        save("distributed", doc)
    return doc
