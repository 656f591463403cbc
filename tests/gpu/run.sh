#!/usr/bin/env bash
# tests/gpu/run.sh — the device run of issue 31, in one command: builds
# ckpt (the library and the Python extension, in build-gpu/), runs the GPU
# tests (tests/gpu/test_gpu.py) and the benchmark (tests/gpu/bench.py), and
# writes JSON to $OUT (default ./gpu-out):
#   summary.json  what ran, the machine, each step's status and seconds
#   tests.xml     pytest's JUnit report of the GPU tests
#   tests.json    their outcomes, one line per test
#   bench.json    the figures (bench.py's docstring says what each is)
#   log.txt       everything the steps printed
# Needs: python3 with torch (CUDA) and pytest, cmake, a C compiler,
# pkg-config, zlib's and xxhash's headers.  What the image lacks can travel
# as .deb files in .gpu-deps/ (tests/gpu/README.md): they are unpacked
# under /tmp/ckpt-deps, never into /.  No network is used.
# Knobs: CKPT_GPU_CUFILE (the libcufile the GPUDirect Storage test and
# bench drive; default: the nvidia-cufile wheel's, if installed), CKPT_GPU_DATA (where the test and benchmark files go, 21 GiB, on
# a disk — not a tmpfs, whose pages cannot be dropped for cold reads;
# default .gpu-data/ in the working tree), CKPT_GPU_SMALL=1 (sizes ÷ 100: a dry run of the
# plumbing, on a machine without a GPU the GPU tests skip themselves),
# CKPT_GPU_TESTS_LIMIT and CKPT_GPU_BENCH_LIMIT (seconds each step may run,
# default 330 and 190: interrupted, it still writes what it has, so that
# one device call of 10 minutes always brings results back),
# CKPT_GPU_PROBE=1 (first, tests/gpu/probe.py: where the ring's time goes,
# to probe.json), CKPT_GPU_TESTS_K (only the tests pytest's -k EXPR selects),
# CKPT_GPU_BENCH=0 (no benchmark).
# shellcheck disable=SC2329  # deps, build and machine run through step()
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
LOG=$OUT/log.txt
: >"$LOG"
PY=${PYTHON:-python3}
BUILD=$ROOT/build-gpu
export CKPT_GPU_DATA=${CKPT_GPU_DATA:-$ROOT/.gpu-data}
mkdir -p "$CKPT_GPU_DATA"
STEPS=()

log() { printf '%s\n' "$*" | tee -a "$LOG"; }

# step NAME COMMAND...: runs it, logs its output, records status and time.
step() {
    local name=$1 start end rc
    shift
    log "== $name: $*"
    start=$(date +%s%N)
    "$@" >>"$LOG" 2>&1
    rc=$?
    end=$(date +%s%N)
    STEPS+=("$(printf '{"step": "%s", "rc": %d, "ms": %d}' "$name" "$rc" "$(((end - start) / 1000000))")")
    log "== $name: rc=$rc"
    return "$rc"
}

# The .deb files in .gpu-deps/, unpacked under /tmp/ckpt-deps, for what
# the image lacks (pkg-config, zlib's or xxhash's development files).
deps() {
    if command -v pkg-config >/dev/null && pkg-config --exists libxxhash zlib 2>/dev/null; then
        return 0
    fi
    if ! ls "$ROOT"/.gpu-deps/*.deb >/dev/null 2>&1; then
        echo "pkg-config, libxxhash or zlib is missing and no .gpu-deps/*.deb were carried (tests/gpu/README.md)"
        return 1
    fi
    local prefix=/tmp/ckpt-deps arch
    for f in "$ROOT"/.gpu-deps/*.deb; do dpkg -x "$f" "$prefix" || return 1; done
    arch=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
    # A -dev package's libNAME.so points at a runtime that Debian installs
    # under /lib (zlib1g's /lib/<arch>/libz.so.1.2.13): a dangling link is
    # repointed to the system's own runtime of that name (libz.so.1, the
    # one every process there loads), else to the unpacked copy; left
    # dangling, the linker takes the static libz.a, which no .so can hold.
    local link target cand
    for link in "$prefix"/usr/lib/"$arch"/*.so; do
        [ -L "$link" ] && [ ! -e "$link" ] || continue
        target=$(readlink "$link")
        for cand in /lib/"$arch"/"${link##*/}".[0-9] /usr/lib/"$arch"/"${link##*/}".[0-9] \
            "$prefix/lib/$arch/${target##*/}"; do
            if [ -e "$cand" ]; then ln -sf "$cand" "$link"; break; fi
        done
    done
    export PATH=$prefix/usr/bin:$PATH
    export PKG_CONFIG_PATH=$prefix/usr/lib/$arch/pkgconfig:$prefix/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}
    export PKG_CONFIG_SYSROOT_DIR=$prefix
    export CMAKE_PREFIX_PATH=$prefix/usr:${CMAKE_PREFIX_PATH:-}
    export LD_LIBRARY_PATH=$prefix/usr/lib/$arch:${LD_LIBRARY_PATH:-}  # not its /lib: the system's libz stays
    export LIBRARY_PATH=$prefix/usr/lib/$arch:$prefix/lib/$arch:${LIBRARY_PATH:-}
    export C_INCLUDE_PATH=$prefix/usr/include:${C_INCLUDE_PATH:-}
}

# The library, the CLI and the extension; the package assembled in
# build-gpu/python (the sources' .py files beside the built _ckpt).
build() {
    rm -f "$BUILD/CMakeCache.txt"  # configured afresh: a kept cache can hold a library found before deps ran
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCKPT_PYTHON=ON -DCKPT_BUILD_TESTS=OFF \
        -DCKPT_WITH_CURL=OFF -DPython_EXECUTABLE="$(command -v "$PY")" || return 1
    cmake --build "$BUILD" -j "$(nproc)" --target ckpt_shared _ckpt ckpt || return 1
    mkdir -p "$BUILD/python/ckpt" && cp "$ROOT"/python/ckpt/*.py "$BUILD/python/ckpt/" || return 1
    PYTHONPATH=$BUILD/python "$PY" -c 'import ckpt, ckpt._ckpt; print("ckpt", ckpt._ckpt.version)'
}

machine() {
    "$PY" - <<'PY' >"$OUT/machine.json"
import json, os, platform, subprocess
info = {"host": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count()}
try:
    import torch
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
except Exception as e:  # noqa: BLE001 - reported, not raised
    info["torch_error"] = repr(e)
try:
    info["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                         "--format=csv,noheader"], capture_output=True, text=True,
                                        timeout=30).stdout.strip()
except (OSError, subprocess.SubprocessError):
    pass
print(json.dumps(info))
PY
}

# The peers the benchmark measures when their packages import
# (fastsafetensors, Run:ai's streamer): wheels carried in .gpu-wheels/
# (tests/gpu/README.md), installed under /tmp/ckpt-site, never into the
# image's environment.
wheels() {
    ls "$ROOT"/.gpu-wheels/*.whl >/dev/null 2>&1 || { echo "no .gpu-wheels/*.whl: the peers are left out"; return 0; }
    # a wheel for another Python (a dry run here) leaves the peers out, as bench.json then says
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ckpt-site \
        "$ROOT"/.gpu-wheels/*.whl || echo "the wheels do not install for $("$PY" -V): the peers are left out"
}

export PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
# JAX takes 75% of the GPU's memory at its first use unless told not to,
# and torch shares the device in the same process.
export XLA_PYTHON_CLIENT_PREALLOCATE=false
# SIGINT first: pytest and bench.py write their reports when interrupted.
limited() { local s=$1; shift; timeout --signal=INT --kill-after=20 "$s" "$@"; }
log "data: $CKPT_GPU_DATA ($(df -hT "$CKPT_GPU_DATA" | tail -1))"
step deps deps
step wheels wheels && [ -d /tmp/ckpt-site ] && export PYTHONPATH=$PYTHONPATH:/tmp/ckpt-site
step build build
build_rc=$?
step machine machine
if [ "$build_rc" -eq 0 ]; then
    if [ "${CKPT_GPU_PROBE:-0}" = 1 ]; then
        step probe limited "${CKPT_GPU_PROBE_LIMIT:-150}" "$PY" "$ROOT/tests/gpu/probe.py" --out "$OUT/probe.json"
    fi
    step tests limited "${CKPT_GPU_TESTS_LIMIT:-330}" "$PY" -m pytest -q -p no:cacheprovider --confcutdir="$ROOT/tests/gpu" "$ROOT/tests/gpu/test_gpu.py" \
        --junitxml="$OUT/tests.xml" -o junit_family=xunit2 --tests-json="$OUT/tests.json" ${CKPT_GPU_TESTS_K:+-k "$CKPT_GPU_TESTS_K"}
    if [ "${CKPT_GPU_BENCH:-1}" = 1 ]; then
        step bench limited "${CKPT_GPU_BENCH_LIMIT:-190}" "$PY" "$ROOT/tests/gpu/bench.py" --out "$OUT/bench.json"
    fi
fi
{
    printf '{"script": "tests/gpu/run.sh", "machine": %s, "steps": [' "$(cat "$OUT/machine.json" 2>/dev/null || echo null)"
    (IFS=,; printf '%s' "${STEPS[*]}")
    printf ']}\n'
} >"$OUT/summary.json"
rm -f "$OUT/machine.json"
cat "$OUT/summary.json"
grep -q '"rc": [1-9]' "$OUT/summary.json" && exit 1
exit 0
