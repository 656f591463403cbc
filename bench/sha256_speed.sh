#!/bin/sh
# SHA-256 throughput, SHA-NI (where /proc/cpuinfo has sha_ni) against the
# portable code: bench/sha256_speed.sh [MiB]
set -e
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/sha256_speed.c src/base/sha256.c -o "$out"
grep -q sha_ni /proc/cpuinfo && echo "this CPU has SHA-NI" || echo "this CPU has no SHA-NI: both lines run the portable code"
"$out" "${1:-512}"
CKPT_SHA256=portable "$out" "${1:-512}"
