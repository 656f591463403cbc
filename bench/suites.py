"""What each benchmark measures, and whether its latest result still
describes the code (bench/run.py stamps results; bench/report.py renders
them; tests/python/test_readme_figures.py checks them).

A **measurement** (an entry of MEASUREMENTS) is one suite, or one group of a
suite's results: the result files it writes, the paths of the code its
figures describe, and the `make bench` arguments that rerun it.

**The code a result describes** is the content of those paths — the
library files its contenders run through, the front end they call (CLI,
Python package, binding) and the measuring program that runs inside the
timed process (bench/load_bench.c, bench/peers.py, ...) — but not the
orchestration (bench/run.py, bench/*_suite.py: rounds and order) nor files
it never runs (another format's reader, the remote sources of a local
load, tests, docs).  bench/run.py records a digest of the git blob ids of
those files, as they were in the working tree when the suite ran, in the
result's `provenance` with the commit, the files that differed from it,
the date, the machine and the command.  A result is **fresh** while the
digest of the same paths now is the same; any change to them, committed or
not, makes it **stale**, and a revert makes it fresh again.  The digest
needs no history: a shallow clone (CI at depth 1) checks it as a full one
does.  History, where present, only names the commits since the result.

A stale result must be rerun, or listed in PENDING_RERUN with the reason it
was not: its tables and figures then say so where they stand.  A result
that records no digest (written before results recorded their code) is
stale.
"""
import datetime
import fnmatch
import hashlib
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# ----------------------------------------------------------- code paths
# Each constant is a list of groups of git pathspecs; a group's
# ":(exclude)..." leaves out, from that group only, what its files' suites
# never run.  A measurement's code is the union of its groups' files.

BUILD = [["CMakeLists.txt", "include/"]]
# src/io/ but the remote sources (REMOTE) and what only writes run (WRITE).
CORE = [["src/base/", "src/io/", ":(exclude)src/io/http*", ":(exclude)src/io/s3_source.c",
         ":(exclude)src/io/gcs*", ":(exclude)src/io/azure_source.c", ":(exclude)src/io/objstore.*",
         ":(exclude)src/io/hf*",
         ":(exclude)src/io/commit.*", ":(exclude)src/io/journal.*", ":(exclude)src/io/lock.*",
         "src/catalog.c", "src/catalog_internal.h", "src/tree.c", "src/tree_internal.h", "src/plan.c",
         "src/plan_internal.h", "src/engine.c", "src/engine.h", "src/formats/registry.c", "src/formats/format.h",
         "src/transform/cast.c", "src/transform/cast_x86.c", "src/transform/cast.h", "src/transform/layout.c",
         "src/transform/layout.h", "src/transform/swap.h"]]
# The remote sources: HTTP(S), S3, GCS, Azure, and the Hub's (its source, cache and the download's stream),
# which no local file's read runs.
REMOTE = [["src/io/http*", "src/io/s3_source.c", "src/io/gcs*", "src/io/azure_source.c", "src/io/objstore.*",
           "src/io/hf*"]]
SAFETENSORS = [["src/formats/safetensors.c", "src/formats/safetensors.h", "src/formats/shards.c",
                "src/formats/shards.h", "src/formats/json.c", "src/formats/json.h"]]
TORCH = [["src/formats/torch.c", "src/formats/torch.h", "src/formats/torch_allowed.h", "src/formats/zip.c",
          "src/formats/zip.h", "src/formats/pickle.c", "src/formats/pickle.h", "src/transform/crc32.c",
          "src/transform/crc32.h", "src/transform/inflate.c", "src/transform/inflate.h"]]
GGUF = [["src/formats/gguf.c", "src/formats/gguf.h", "src/formats/gguf_write.c", "src/transform/quant.c",
         "src/transform/quant_x86.c"]]
DCP = [["src/formats/dcp.c", "src/formats/dcp.h", "src/formats/dcp_hf.c", "src/formats/dcp_output.c",
        "src/formats/dcp_tiling.c", "src/formats/dcp_write.c"]]
FLAX = [["src/formats/msgpack.c"]]
LOAD = [["src/load.c"]]
# HF → llama.cpp GGUF: the architectures' mappings, config.json, tokenizers.
LLAMACPP = [["src/formats/llamacpp.c", "src/formats/llamacpp/", "src/formats/hf_config.c", "src/formats/hf_config.h"]]
WRITE = [["src/convert.c", "src/writer.c", "src/writer_internal.h", "src/formats/output.h", "src/io/commit.*",
          "src/io/journal.*", "src/io/lock.*"]]
COLLECTIVE = [["src/comm.c", "src/wire.c", "src/collective_load.c", "src/collective_write.c",
               "src/collective_internal.h", "mpi/", "python/ckpt/distributed.py"]]
CLI = [["cli/", ":(exclude)cli/diff.c", ":(exclude)cli/inspect.c", ":(exclude)cli/verify.c", ":(exclude)cli/mpi.c"]]
# The device destination (the ring, cuFile) and the GPU run's measuring programs.
DEVICE = [["src/device/", "tests/gpu/bench.py", "tests/gpu/gpudata.py", "tests/gpu/probe.py"]]
PYTHON = [["pyproject.toml", "python/src/", "python/ckpt/", ":(exclude)python/ckpt/jax.py",
           ":(exclude)python/ckpt/distributed.py", ":(exclude)python/ckpt/transformers.py"]]
# The readers of the amplifying inputs (tests/hostile/amplify.py) and `ckpt inspect` (its outline of the tree).
AMPLIFYING = [["src/formats/msgpack.c", "src/formats/gguf.c", "src/formats/gguf.h", "tests/hostile/amplify.py",
               "cli/inspect.c"]]
# The journal's parser and what it asks (the stage's name, the output formats' rule on names), the fuzz
# target, its seeds and dictionary.
JOURNAL_FUZZ = [["src/io/journal.c", "src/io/journal.h", "src/io/file.c", "src/io/file.h", "src/formats/registry.c",
                 "src/formats/output.h", "src/formats/safetensors.c", "src/formats/gguf_write.c",
                 "src/formats/torch_write.c", "src/formats/dcp_output.c", "src/formats/npy.c", "src/formats/npz.c",
                 "src/formats/msgpack.c", "tests/fuzz/fuzz_journal.c", "tests/fuzz/fuzz_common.h",
                 "tests/fuzz/journal.dict", "tests/fuzz/corpus/journal.tar.gz", "tests/fuzz/corpus.sh", "CMakeLists.txt",
                 "tests/fuzz/CMakeLists.txt"]]


class Measurement:
    def __init__(self, results, code, rerun):
        self.results = results  # names under bench/results/ (without .json); fnmatch patterns
        self.code = code        # groups of git pathspecs: the code its figures describe
        self.rerun = rerun      # BENCH_ARGS of `make bench` that rerun it

    def writes(self, result):
        return any(fnmatch.fnmatchcase(result, p) for p in self.results)


MEASUREMENTS = {
    "open": Measurement(["open"], BUILD + CORE + SAFETENSORS + [["tests/ckptlib.py"]], "open"),
    "convert": Measurement(["convert"], BUILD + CORE + SAFETENSORS + WRITE + CLI, "convert"),
    "torch_read": Measurement(["torch_read"], BUILD + CORE + TORCH + LOAD + [["bench/read_all.c"]], "torch_read"),
    "torch_convert": Measurement(["torch_convert"], BUILD + CORE + TORCH + SAFETENSORS + WRITE + CLI,
                                 "torch_convert"),
    "crc": Measurement(["crc"], BUILD + CORE + TORCH + SAFETENSORS + LOAD + WRITE + CLI + [["bench/load_bench.c"]],
                       "crc --runs 5"),
    "transformers": Measurement(["transformers"], BUILD + CORE + SAFETENSORS + LOAD + PYTHON +
                                [["python/ckpt/transformers.py"]], "transformers --runs 3"),
    # From the loopback Hub of the tests (tests/sources/hub.py, which serves it: part of what is timed): ckpt's
    # hf:// source and its HTTP client download, transformers' through huggingface_hub.
    "transformers hub": Measurement(["transformers-hub-*GB"], BUILD + CORE + REMOTE + SAFETENSORS + LOAD + PYTHON +
                                    [["python/ckpt/transformers.py", "tests/sources/hub.py"]],
                                    "transformers_hub --runs 3 --cold fadvise"),
    "load 2 GB": Measurement(["load-2GB"], BUILD + CORE + SAFETENSORS + TORCH + LOAD +
                             [["bench/load_bench.c", "bench/peers.py"]], "load --load-gb 2"),
    "load 8 GB": Measurement(["load-8GB", "load-8GB-*"], BUILD + CORE + SAFETENSORS + LOAD +
                             [["bench/load_bench.c", "bench/peers.py"]],
                             "load --load-gb 8 --load-variants bf16,sharded,f32"),
    "python": Measurement(["python-*GB"], BUILD + CORE + SAFETENSORS + LOAD + PYTHON + [["bench/peers.py"]],
                          "python"),
    "perf": Measurement(["perf"], BUILD + CORE + SAFETENSORS + LOAD + PYTHON +
                        [["bench/perf_peers.py", "bench/peers.py", "bench/load_bench.c"]], "perf --runs 5"),
    "gpu": Measurement(["gpu-*"], BUILD + CORE + SAFETENSORS + LOAD + PYTHON + DEVICE, "gpu"),
    "jax": Measurement(["jax-*GB"], BUILD + CORE + SAFETENSORS + FLAX + LOAD + PYTHON +
                       [["python/ckpt/jax.py", "bench/jax_peers.py"]], "jax"),
    "gguf": Measurement(["gguf"], BUILD + CORE + SAFETENSORS + GGUF + WRITE + CLI, "gguf"),
    "dcp": Measurement(["dcp"], BUILD + CORE + DCP + TORCH + SAFETENSORS + WRITE + CLI, "dcp"),
    "http": Measurement(["sources-http-*GB"], BUILD + CORE + REMOTE + SAFETENSORS + LOAD + PYTHON +
                        [["bench/load_bench.c", "bench/peers.py"]], "http"),
    "memlimit": Measurement(["sources-memlimit-*GB"], BUILD + CORE + SAFETENSORS + LOAD + WRITE + CLI + PYTHON,
                            "memlimit --memlimit-gb 4 --memlimit-limit-gb 5"),
    "bindings": Measurement(["bindings"], BUILD + CORE + SAFETENSORS + TORCH + LOAD + WRITE +
                            [["bindings/rust/", ":(exclude)bindings/rust/tests/", "bindings/elixir/lib/",
                              "bindings/elixir/c_src/", "bindings/elixir/mix.exs", "bench/bindings_elixir.exs"]],
                            "bindings"),
    "distributed": Measurement(["distributed"], BUILD + CORE + SAFETENSORS + LOAD + WRITE + COLLECTIVE + PYTHON +
                               [["bench/dist_worker.py", "bench/mpi_sim.c"]],
                               "distributed --dist-gb 4 --save-gb 4 --runs 2"),
    "amplification": Measurement(["amplification"], BUILD + CORE + SAFETENSORS + TORCH + AMPLIFYING + CLI + PYTHON,
                                 "hardened --baseline 45ea70f"),
    "journal fuzz": Measurement(["fuzz-journal"], JOURNAL_FUZZ, "hardened --fuzz-seconds 600 --skip-amplification"),
    "save incremental": Measurement(["save-incremental"], BUILD + CORE + SAFETENSORS + WRITE + PYTHON +
                                    [["src/copy_tensor.c", "src/verify.c", "bench/save_worker.py"]],
                                    "save --save-model-gb 4 --bg-gb 2 --runs 3"),
    "save background": Measurement(["save-background"], BUILD + CORE + SAFETENSORS + WRITE + PYTHON + COLLECTIVE +
                                   [["bench/save_worker.py"]], "save --save-model-gb 4 --bg-gb 2 --runs 3"),
    "llamacpp check": Measurement(["llamacpp-check"], BUILD + CORE + SAFETENSORS + GGUF + LLAMACPP + WRITE + CLI +
                                  [["bench/llama_run.c"]], "llamacpp --llamacpp-parts check"),
    "llamacpp quantize check": Measurement(["llamacpp-quantize-check"], BUILD + CORE + SAFETENSORS + GGUF + LLAMACPP +
                                           WRITE + CLI, "llamacpp --llamacpp-parts quantize-check"),
    "llamacpp 4 GB": Measurement(["llamacpp-4GB"], BUILD + CORE + SAFETENSORS + GGUF + LLAMACPP + WRITE + CLI,
                                 "llamacpp --llamacpp-parts measure --runs 3 --peer-runs 1"),
    "llamacpp 1 GB": Measurement(["llamacpp-1GB"], BUILD + CORE + SAFETENSORS + GGUF + LLAMACPP + WRITE + CLI,
                                 "llamacpp --llamacpp-parts measure --llamacpp-gb 1 --llamacpp-modes warm "
                                 "--llamacpp-cases bf16,Q4_K_M --runs 2 --peer-runs 1"),
    "baseline": Measurement(["baseline"], BUILD + CORE + SAFETENSORS + LOAD + WRITE + CLI + PYTHON,
                            "baseline --baseline REV"),
}

# Measurements whose latest result is stale and was knowingly not rerun:
# {name: why}.  Their tables and figures carry a notice; the figure test
# fails for a stale result missing here, and for an entry here whose result
# is fresh again (rerun: remove it).
# Stop 44's merges change every suite's code: the writer's write_back (drop-behind for every save, small ranges
# joined) and ckpt_writer_shares_blocks (src/writer.c, src/copy_tensor.c, src/io/file.c, include/ckpt.h), the
# safetensors header's dtype cache and sort (src/formats/safetensors.c), the plan's asked dtypes and
# ckpt_plan_dequantize_for (src/plan.c, src/convert.c, src/collective_write.c, cli/), and lines44's simplifications
# across src/ (http, caches, casts, llamacpp, torch and DCP writers).
_ROUND44 = ("this round's merges change the code of every suite (the writer's write_back and shares_blocks, the "
            "safetensors header's parse, the plan's asked dtypes, and simplifications across src/); the suites the open "
            "issues rest on were rerun on the round's final code, and this one is rerun when a round's time allows")
PENDING_RERUN = {
    "gpu": ("needs a CUDA GPU (tests/gpu/run.sh; the device tool lends one to some sessions, 15 minutes each): "
            "measured this round, then its benchmark changed (warm runs before cold, so that no cold run pays the "
            "device's opening; fastsafetensors and Run:ai's streamer carried as wheels) after the round's device "
            "time was spent"),
    "load 8 GB": "needs an 8 GB file set and about 10 GB of memory beside it",
    "perf": "takes about 20 minutes, and needs an 8 GB file",
    "jax": "takes about 15 minutes (Orbax, Flax, 8 devices)",
    "http": "needs nginx, moto and a 4 GB file served over loopback",
    "memlimit": "needs a memory cgroup and a 4 GB file set",
    "bindings": "needs the Rust and Elixir toolchains and release builds",
    "amplification": "the hardened suite builds the baseline commit 45ea70f beside this one; the quick suites were rerun on 7efb718, this one was not before the round ended",
    "journal fuzz": "a 10-minute fuzz campaign on a quiet machine; the quick suites were rerun on 7efb718, this one was not before the round ended",
    "load 2 GB": _ROUND44,
    "python": _ROUND44,
    "convert": _ROUND44,
    "crc": _ROUND44,
    "dcp": _ROUND44,
    "llamacpp 1 GB": _ROUND44,
    "llamacpp 4 GB": _ROUND44,
    "llamacpp check": _ROUND44,
    "llamacpp quantize check": _ROUND44,
    "open": _ROUND44,
    "torch_convert": _ROUND44,
    "torch_read": _ROUND44,
}


# Measurements that have no result yet: {name: why, and what to run}.  The
# figure of each says so where it stands (bench/report.py not_measured_yet)
# instead of requiring its result; the figure test fails for an entry here
# whose result exists (measured: remove it) or that names no measurement.
PENDING_FIRST_RUN = {
}

def measurement_of(result):
    """The name of the measurement that writes bench/results/<result>.json."""
    for name, m in MEASUREMENTS.items():
        if m.writes(result):
            return name
    raise KeyError(f"bench/results/{result}.json: no measurement in bench/suites.py writes it")


# ------------------------------------------------------------ provenance

def _git(*args, root=ROOT, input=None):
    """git's output, or None outside a checkout (or without git)."""
    try:
        r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, input=input)
    except OSError:
        return None
    return r.stdout if r.returncode == 0 else None


def files(groups, root=ROOT):
    """The files the groups of pathspecs name in the working tree (tracked,
    and untracked but not ignored); None outside a git checkout."""
    out = set()
    for group in groups:
        listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *group, root=root)
        if listed is None:
            return None
        out.update(f for f in listed.split("\0") if f and (Path(root) / f).is_file())
    return sorted(out)


def code_digest(groups, root=ROOT):
    """sha256 over the git blob ids of those files as they are in the working
    tree; None outside a git checkout."""
    names = files(groups, root)
    if names is None:
        return None
    blobs = _git("hash-object", "--stdin-paths", root=root, input="\n".join(names) + "\n") if names else ""
    if blobs is None:
        return None
    lines = [f"{f} {b}" for f, b in zip(names, blobs.split())]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _each(groups, *args, root=ROOT):
    """The lines of `git *args -- group` over every group, without repeats."""
    out = []
    for group in groups:
        for line in (_git(*args, "--", *group, root=root) or "").splitlines():
            if line not in out:
                out.append(line)
    return out


def machine():
    facts = {"host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count()}
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                facts["cpu"] = line.split(":", 1)[1].strip()
                break
        facts["mem_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (OSError, ValueError):
        pass
    return facts


def provenance(result, **extra):
    """What a result measured: recorded by bench/run.py's save()."""
    name = measurement_of(result)
    m = MEASUREMENTS[name]
    head = (_git("rev-parse", "HEAD") or "").strip() or None
    dirty = _each(m.code, "status", "--porcelain", "--untracked-files=all")
    return {"measurement": name, "result": result, "commit": head, "dirty": sorted(line[3:] for line in dirty),
            "code": code_digest(m.code), "code_paths": m.code,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": machine(), "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), **extra}


def freshness(doc, root=ROOT):
    """("fresh" | "stale" | "unknown", why) for a result's doc: unknown
    where the code's digest cannot be computed (no git checkout)."""
    prov = doc.get("provenance") or {}
    name = prov.get("measurement")
    if not prov.get("code") or name not in MEASUREMENTS:
        when = f" (recorded in {prov['recorded_in'][:10]}, {prov['date'][:10]})" if prov.get("recorded_in") else ""
        return "stale", f"it records no digest of the code it measured{when}"
    now = code_digest(MEASUREMENTS[name].code, root)
    if now is None:
        return "unknown", "not a git checkout: the code's digest cannot be computed"
    if now == prov["code"]:
        return "fresh", ""
    return "stale", changes_since(prov, root)


def changes_since(prov, root=ROOT):
    """Which of the measured files changed since the result, and in which
    commits where history allows."""
    groups = MEASUREMENTS[prov["measurement"]].code
    commit = prov.get("commit")
    if commit and _git("cat-file", "-e", f"{commit}^{{commit}}", root=root) is not None:
        changed = sorted(_each(groups, "diff", "--name-only", commit, root=root))
        log = _each(groups, "log", "--format=%h %s", f"{commit}..HEAD", root=root)
        commits = "; ".join(line[:90] for line in log[:5]) + (f"; and {len(log) - 5} more" if len(log) > 5 else "")
        dirty = f" (measured with uncommitted changes to {', '.join(prov['dirty'])})" if prov.get("dirty") else ""
        changed += _each(groups, "ls-files", "--others", "--exclude-standard", root=root)  # new, uncommitted
        return (f"measured at {commit[:10]}{dirty}; changed since: {', '.join(changed[:8]) or 'its files'}"
                + (f" ({len(changed) - 8} more)" if len(changed) > 8 else "") + (f"; commits: {commits}" if log else ""))
    return (f"measured at {(commit or '?')[:10]}, which this clone's history does not hold (shallow?): "
            f"the code it measured differs from this tree's")
