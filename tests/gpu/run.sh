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
# plumbing, on a machine without a GPU the GPU tests skip themselves).
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
    export PATH=$prefix/usr/bin:$PATH
    export PKG_CONFIG_PATH=$prefix/usr/lib/$arch/pkgconfig:$prefix/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}
    export PKG_CONFIG_SYSROOT_DIR=$prefix
    export CMAKE_PREFIX_PATH=$prefix/usr:${CMAKE_PREFIX_PATH:-}
    export LD_LIBRARY_PATH=$prefix/usr/lib/$arch:$prefix/lib/$arch:${LD_LIBRARY_PATH:-}
    export LIBRARY_PATH=$prefix/usr/lib/$arch:$prefix/lib/$arch:${LIBRARY_PATH:-}
    export C_INCLUDE_PATH=$prefix/usr/include:${C_INCLUDE_PATH:-}
}

# The library, the CLI and the extension; the package assembled in
# build-gpu/python (the sources' .py files beside the built _ckpt).
build() {
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

export PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
log "data: $CKPT_GPU_DATA ($(df -hT "$CKPT_GPU_DATA" | tail -1))"
step deps deps
step build build
build_rc=$?
step machine machine
if [ "$build_rc" -eq 0 ]; then
    step tests "$PY" -m pytest -q -p no:cacheprovider --confcutdir="$ROOT/tests/gpu" "$ROOT/tests/gpu/test_gpu.py" \
        --junitxml="$OUT/tests.xml" -o junit_family=xunit2 --tests-json="$OUT/tests.json"
    step bench "$PY" "$ROOT/tests/gpu/bench.py" --out "$OUT/bench.json"
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
