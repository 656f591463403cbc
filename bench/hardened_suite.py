"""The hardened suite of `make bench` (issue 26): what hostile input costs.

amplification: the peak RSS (GNU time) and the outcome of `ckpt inspect`,
and of a Python process calling `ckpt.open`, on the inputs of
tests/hostile/amplify.py, small files built to amplify metadata (4 MB of
msgpack nils, a 12 MB GGUF of a million empty arrays, a pickle of 4 M
Nones, a 16 MB safetensors header of zeros), each against the bound
`8 × input + 64 MiB` above what the same process takes for a tiny file.
With --baseline REV, the same processes of REV's build (built once by
bench/baseline_suite.py; 45ea70f is main before the bound), alternating
with this tree's.

fuzz (with --fuzz-seconds N): the commit journal's libFuzzer target
(tests/fuzz/fuzz_journal.c, built with clang into build-fuzz/ as `make
fuzz` builds it) for N seconds in one process, from the committed corpus
with the journal dictionary, into a fresh working corpus: executions,
coverage, new units, peak RSS, and every crash, leak, timeout or OOM it
saved.

    make bench BENCH_ARGS="hardened --baseline 45ea70f"
    make bench BENCH_ARGS="hardened --fuzz-seconds 600 --skip-amplification"

Writes bench/results/amplification.json and fuzz-journal.json."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from run import BIN_PATH, DATA, ROOT, machine_facts, measure, run_timed, save

sys.path.insert(0, str(ROOT / "tests" / "hostile"))
from amplify import INPUTS, bound, tiny_safetensors  # noqa: E402

OPEN = r"""
import sys, ckpt
try:
    with ckpt.open(sys.argv[1]) as c:
        list(c.keys())
except ckpt.Error as e:
    print(f"[{e.status}] {e}", file=sys.stderr)
    sys.exit(1)
"""
STATUS = re.compile(r"\[(CKPT_E_[A-Z_]+)\]")


def outcome(r):
    """"read", or the status it was refused with (else its exit status)."""
    if r.returncode == 0:
        return "read"
    m = STATUS.search(r.stderr)
    return m.group(1) if m else f"exit {r.returncode}"


def contenders(build_bin, env):
    return {"ckpt inspect": lambda p: ([str(build_bin), "inspect", str(p)], env),
            "ckpt.open (Python)": lambda p: ([sys.executable, "-c", OPEN, str(p)], env)}


def trees(args):
    """{label: (ckpt binary, environment)}: this tree's, and the baseline's."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the venv's ckpt: this tree's (make bench installs it)
    out = {"this tree": (BIN_PATH, env)}
    if args.baseline:
        from baseline_suite import build_tree, env_for
        b = build_tree(args.baseline)
        out[b["name"]] = (b["bin"], env_for(b))
    return out


def run_amplification(args):
    DATA.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="amplify-", dir=DATA))
    try:
        tiny = tiny_safetensors(work)
        inputs = {name: make(work) for name, make in INPUTS.items()}
        builds = trees(args)
        runs = {}
        for rnd in range(args.amp_runs):
            for tree, (binary, env) in builds.items():
                for call, cmd in contenders(binary, env).items():
                    for name, path in {"tiny": tiny, **inputs}.items():
                        argv, e = cmd(path)
                        _, rss, r = run_timed(argv, env=e)
                        runs.setdefault(tree, {}).setdefault(call, {}).setdefault(name, []).append((rss, outcome(r)))
                        print(f"  round {rnd} {tree:28s} {call:20s} {name:18s} RSS {rss / 2**20:7.1f} MiB  "
                              f"{outcome(r)}", flush=True)
        results = {}
        for tree, calls in runs.items():
            for call, by_input in calls.items():
                tiny_rss = max(rss for rss, _ in by_input["tiny"])
                res = {"tiny": {"peak_rss_bytes": tiny_rss}}
                for name, path in inputs.items():
                    size = path.stat().st_size
                    peak = max(rss for rss, _ in by_input[name])
                    outcomes = sorted({o for _, o in by_input[name]})
                    res[name] = {"bytes": size, "peak_rss_bytes": peak, "above_tiny_bytes": peak - tiny_rss,
                                 "bound_bytes": bound(size), "within_bound": peak - tiny_rss <= bound(size),
                                 "outcome": outcomes[0] if len(outcomes) == 1 else " / ".join(outcomes),
                                 "runs": [rss for rss, _ in by_input[name]]}
                    if tree == "this tree":
                        res[name]["measure"] = measure(f"{call} (peak RSS)", path, "warm")
                results.setdefault(tree, {})[call] = res
        save("amplification", {"suite": "hardened", "runs": args.amp_runs, "baseline": args.baseline,
                               "machine": machine_facts(), "results": results})
    finally:
        shutil.rmtree(work, ignore_errors=True)


FUZZ_BUILD = ROOT / "build-fuzz"


def build_fuzz_journal():
    """build-fuzz/tests/fuzz/fuzz_journal, configured as `make fuzz` does; the clang that built it."""
    env = dict(os.environ, CC="clang")
    subprocess.run(["cmake", "-S", str(ROOT), "-B", str(FUZZ_BUILD), "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                    "-DCKPT_FUZZ=ON", "-DCKPT_BUILD_TESTS=OFF"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(FUZZ_BUILD), "-j", str(os.cpu_count() or 2), "--target", "fuzz_journal"],
                   check=True, stdout=subprocess.DEVNULL)
    version = subprocess.run(["clang", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return FUZZ_BUILD / "tests" / "fuzz" / "fuzz_journal", version


def _last(pattern, text, cast=int):
    found = re.findall(pattern, text)
    return cast(found[-1]) if found else None


def run_fuzz(args):
    target, clang = build_fuzz_journal()
    work = DATA / "fuzz-journal"
    shutil.rmtree(work, ignore_errors=True)
    corpus, artifacts, seeds = work / "corpus", work / "artifacts", work / "seeds"
    corpus.mkdir(parents=True)
    artifacts.mkdir()
    # The committed corpus is one archive per target (tests/fuzz/corpus.sh).
    subprocess.run(["sh", str(ROOT / "tests" / "fuzz" / "corpus.sh"), "unpack",
                    str(ROOT / "tests" / "fuzz" / "corpus" / "journal.tar.gz"), str(seeds)], check=True)
    cmd = [str(target), f"-max_total_time={args.fuzz_seconds}", "-rss_limit_mb=2048", "-timeout=10",
           f"-dict={ROOT / 'tests' / 'fuzz' / 'journal.dict'}", f"-artifact_prefix={artifacts}/",
           "-print_final_stats=1", str(corpus), str(seeds)]
    print(f"  {' '.join(cmd)}", flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    log = r.stderr
    (work / "fuzz.log").write_text(log)
    found = sorted(p.name for p in artifacts.iterdir())
    kinds = {k: sum(n.startswith(k + "-") for n in found) for k in ("crash", "leak", "timeout", "oom", "slow-unit")}
    doc = {"suite": "hardened", "target": "fuzz_journal", "clang": clang, "seconds_asked": args.fuzz_seconds,
           "command": " ".join(cmd).replace(f"{ROOT}/", ""),
           "exit_status": r.returncode, "seeds": len(list(seeds.iterdir())),
           "executions": _last(r"stat::number_of_executed_units:\s*(\d+)", log),
           "seconds": _last(r"Done \d+ runs in (\d+) second", log),
           "peak_rss_mb": _last(r"stat::peak_rss_mb:\s*(\d+)", log),
           "new_units": _last(r"stat::new_units_added:\s*(\d+)", log),
           "coverage_start": {"cov": _last(r"INITED cov: (\d+)", log), "ft": _last(r"INITED cov: \d+ ft: (\d+)", log)},
           "coverage_end": {"cov": _last(r"#\d+\s+\w+\s+cov: (\d+)", log), "ft": _last(r"#\d+\s+\w+\s+cov: \d+ ft: (\d+)", log)},
           "corpus_end": len(list(corpus.iterdir())), "artifacts": found, "artifacts_by_kind": kinds,
           "machine": machine_facts(), "load_average": os.getloadavg()[0]}
    print(f"  {doc['executions']} executions in {doc['seconds']} s, cov {doc['coverage_end']}, "
          f"{len(found)} artifacts ({kinds}), exit {r.returncode}", flush=True)
    save("fuzz-journal", doc)


def run_hardened_suite(args):
    if not args.skip_amplification:
        run_amplification(args)
    if args.fuzz_seconds:
        run_fuzz(args)


if __name__ == "__main__":
    sys.exit("run it as `make bench BENCH_ARGS=\"hardened ...\"`")
