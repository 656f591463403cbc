"""The GPU measurement (issue 31): tests/gpu/run.sh's benchmark, probe and
test outcomes as bench/results/gpu-<GPU>.json, with their provenance.

    make bench BENCH_ARGS=gpu          on a machine with a CUDA GPU: runs
                                       tests/gpu/run.sh (CKPT_GPU_PROBE=1)
    python3 bench/gpu_suite.py --from DIR [--probe-from DIR2]
                                       records a run made elsewhere (the
                                       $OUT folder run.sh wrote, brought back
                                       from a device machine); the tree here
                                       must be the one that ran there

The provenance's machine is the GPU machine's (run.sh's summary.json), not
the one that records the result."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import suites  # noqa: E402


def read_json(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def outcomes(path):
    try:
        return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return None


def record(run_dir, probe_dir=None, command=None):
    run_dir = Path(run_dir)
    summary = read_json(run_dir / "summary.json")
    bench = read_json(run_dir / "bench.json")
    if not summary or not bench or "runs" not in bench:
        raise SystemExit(f"{run_dir}: no summary.json or bench.json with runs (did the bench step run on a GPU?)")
    probe = read_json(Path(probe_dir or run_dir) / "probe.json")
    tests = {}  # the tests' outcomes of each run: "bench run", and "probe run" when another
    for label, d in (("bench run", run_dir), ("probe run", Path(probe_dir) if probe_dir else None)):
        got = outcomes(d / "tests.json") if d else None
        if got:
            tests[label] = [{k: e[k] for k in ("test", "outcome", "seconds") if k in e} | (
                {"detail": e["detail"][-300:]} if e["outcome"] != "passed" and "detail" in e else {}) for e in got]
    gpu = summary["machine"].get("gpu", "gpu")
    name = "gpu-" + re.sub(r"[^a-z0-9]+", "-", gpu.lower().replace("nvidia", "")).strip("-").split("-")[0]
    doc = {"gpu": gpu, "bench": bench, "probe": probe, "tests": tests, "steps": summary.get("steps")}
    prov = suites.provenance(name, command=command or f"tests/gpu/run.sh, recorded from {run_dir}")
    prov["machine"] = summary["machine"]
    out = ROOT / "bench" / "results" / f"{name}.json"
    out.write_text(json.dumps({"provenance": prov, **doc}, indent=2) + "\n")
    print(f"wrote {out}")
    return out


def run_here():
    """Runs tests/gpu/run.sh on this machine and records it."""
    out = tempfile.mkdtemp(prefix="ckpt-gpu-")
    env = dict(os.environ, OUT=out, CKPT_GPU_PROBE="1", PYTHON=os.environ.get("PYTHON", sys.executable))
    rc = subprocess.run([str(ROOT / "tests" / "gpu" / "run.sh")], env=env).returncode
    bench = read_json(Path(out) / "bench.json") or {}
    if "runs" not in bench:
        print(f"gpu: nothing to record ({bench.get('skipped') or f'run.sh exited {rc}'}; its files: {out})")
        return None
    return record(out, command="make bench BENCH_ARGS=gpu")


def run_gpu_suite(args):
    run_here()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="run_dir", help="a folder run.sh wrote ($OUT) to record")
    ap.add_argument("--probe-from", help="the folder of a run with CKPT_GPU_PROBE=1, when another")
    args = ap.parse_args()
    if args.run_dir:
        record(args.run_dir, args.probe_from)
    else:
        run_here()


if __name__ == "__main__":
    main()
